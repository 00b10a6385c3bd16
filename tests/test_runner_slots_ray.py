"""The ``trinity-runner-slots`` lever (:mod:`mathagent.runner_slots`) in Trinity-RFT 0.6.0's own
scheduler on a real Ray head: K tasks at once on each workflow runner, every id back in the
idle set when its task is done, and one restart for all of a runner's ids.

What is real: Trinity's ``Scheduler`` and ``RunnerWrapper`` (scheduling, results, restarts),
its ``Config`` and ``Task``, Ray's actors. Trinity's ``WorkflowRunner`` needs a vLLM engine,
which cannot run here, so the scheduler is given a fake runner actor class (``FakeRunner``,
defined in the checking interpreter, which Ray pickles by value): its ``run_task`` waits at a
gate the check opens and counts how many of its calls are in flight at once. ``fresh_python.py``
holds the interpreters and the ``vllm`` stand-in (in the runner's worker too: the result's
``Status`` class lives in a module that imports vLLM). ``test_runner_slots.py`` checks the
lever's gating without Ray.
"""

from __future__ import annotations

import pytest
from bounds import hang_bound
from fresh_python import VLLM_STAND_IN, run_python, small_ray_head, wrong_versions

WRONG_VERSIONS = wrong_versions()
pytestmark = [pytest.mark.slow,  # every test starts a Ray head and a Python on it
              pytest.mark.skipif(WRONG_VERSIONS is not None, reason=str(WRONG_VERSIONS))]


@pytest.fixture(scope="module")
def ray_head():
    """1 CPU and no GPU; the runner actors ask for no CPU, as Trinity's do."""
    with small_ray_head() as head:
        yield head


#: The checking interpreter: Trinity's real Scheduler over FakeRunner actors. Before it come
#: ``SLOTS`` (None: the variable unset), ``ADDRESS``, ``CREATED`` (a folder where each runner
#: actor leaves a file when it is made), ``BOUND`` and ``VLLM_STAND_IN`` (:func:`_run`), and
#: ``async def check(scheduler, out)``, which puts what it finds in ``out``.
SCHEDULER = """
    import asyncio, os, time
    from pathlib import Path
    import ray
    from trinity.common.config import Config
    from trinity.common.workflows import Task
    from trinity.explorer import scheduler as scheduler_module
    from mathagent import compat

    class FakeRunner:
        \"\"\"Stands for Trinity's WorkflowRunner actor, whose constructor and run_task need a
        vLLM engine: the same constructor arguments and methods (``__ray_ready__`` is Ray's
        own). ``run_task`` waits until the gate is open and records how many of its calls
        were in flight at once.\"\"\"

        def __init__(self, config, rollout_model_id, auxiliary_model_ids=None, runner_id=None):
            exec(VLLM_STAND_IN, {})  # run_task returns Trinity's Status, whose module imports vllm
            self.runner_id = runner_id
            self.actor_id = ray.get_runtime_context().get_actor_id()
            self.gate = asyncio.Event()
            self.in_flight = self.peak = self.done = 0
            (CREATED / self.actor_id).write_text(str(runner_id))

        async def prepare(self):
            return None

        async def get_runner_state(self):
            return {"runner_id": self.runner_id, "begin_time": 0}

        async def run_task(self, task, batch_id, repeat_times=1, run_id_base=0,
                           collect_partial_runs=True):
            from trinity.explorer.workflow_runner import Status

            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            try:
                await self.gate.wait()
            finally:
                self.in_flight -= 1
            self.done += 1
            return Status(completed_runs=repeat_times, total_runs=repeat_times,
                          metrics=[{"score": float(task.raw_task["n"])}]), b""

        def set_gate(self, is_open):
            if is_open:
                self.gate.set()
            else:
                self.gate.clear()
            self.peak = self.in_flight

        def report(self):
            return {"actor": self.actor_id, "runner_id": self.runner_id,
                    "in_flight": self.in_flight, "peak": self.peak, "done": self.done}

    scheduler_module.WorkflowRunner = FakeRunner

    def config(namespace):
        cfg = Config()
        cfg.ray_namespace = namespace
        cfg.buffer.batch_size = 2
        cfg.explorer.rollout_model.engine_num = 1
        cfg.explorer.runner_per_model = 2
        cfg.explorer.concurrent_mode = "asynchronous"
        return cfg

    def actors(scheduler):
        \"\"\"Each runner actor's handle and the ids the scheduler lists it under.\"\"\"
        found = {}
        for runner_id, wrapper in sorted(scheduler.runners.items()):
            handle = wrapper.runner
            found.setdefault(handle._actor_id.hex(), (handle, []))[1].append(runner_id)
        return found

    async def reports(scheduler):
        return [await handle.report.remote() for handle, _ in actors(scheduler).values()]

    async def set_gates(scheduler, is_open):
        await asyncio.gather(*(handle.set_gate.remote(is_open)
                               for handle, _ in actors(scheduler).values()))

    async def run_batch(scheduler, batch_id, n):
        \"\"\"Schedule n evaluation tasks with the gates shut; once the scheduler has handed
        out all it can and each of those tasks is in its runner, note how many each runner
        holds; then open the gates and collect the results.\"\"\"
        await set_gates(scheduler, False)
        tasks = [Task(workflow=None, repeat_times=2, is_eval=True, raw_task={"n": i})
                 for i in range(n)]
        scheduler.schedule(tasks, batch_id=batch_id)
        deadline = time.monotonic() + BOUND  # a bound on a hang, never a result
        while True:
            handed_out = len(scheduler.running_tasks.get(batch_id, ()))
            saturated = not scheduler.idle_runners or batch_id not in scheduler.pending_tasks
            holding = sum(r["in_flight"] for r in await reports(scheduler))
            if saturated and handed_out and holding == handed_out:
                break
            assert time.monotonic() < deadline, (handed_out, holding, scheduler.idle_runners)
            await asyncio.sleep(0.05)
        held = sorted(r["in_flight"] for r in await reports(scheduler))
        await set_gates(scheduler, True)
        statuses = await scheduler.get_statuses(batch_id, timeout=BOUND)
        return {"held": held, "peak": sorted(r["peak"] for r in await reports(scheduler)),
                "results": sorted((s.completed_runs, s.total_runs, s.ok) for s in statuses),
                "scores": sorted(v for s in statuses for k, v in s.metrics[0].items()
                                 if k.startswith("score/mean@")),
                "idle": sorted(scheduler.idle_runners), "busy": sorted(scheduler.busy_runners)}

    def created():
        return sorted(p.read_text() for p in CREATED.iterdir())

    async def main():
        if SLOTS is not None:
            os.environ["MATHAGENT_RUNNER_SLOTS"] = SLOTS
        out = {"status": {r.name: r.status for r in compat.apply_all()}}
        scheduler = scheduler_module.Scheduler(config(NS))
        await asyncio.wait_for(scheduler.start(), BOUND)
        try:
            out["ids"] = sorted(scheduler.runners)
            out["idle_at_start"] = sorted(scheduler.idle_runners)
            out["actors"] = sorted(ids for _, ids in actors(scheduler).values())
            out["created_at_start"] = created()
            await check(scheduler, out)
        finally:
            await set_gates(scheduler, True)
            await scheduler.stop()
        return out

    NS = "mathagent-runner-slots"
    ray.init(address=ADDRESS, namespace=NS, logging_level="ERROR")
    try:
        emit(asyncio.run(main()))
    finally:
        ray.shutdown()
"""

BATCHES = """
    async def check(scheduler, out):
        out["first"] = await run_batch(scheduler, "0/eval", 6)
        out["second"] = await run_batch(scheduler, "1/eval", 6)
"""


def _run(ray_head, tmp_path, slots, check):
    created = tmp_path / "created"
    created.mkdir()
    head = (f"SLOTS = {slots!r}\nADDRESS = {ray_head.address!r}\n"
            f"CREATED = __import__('pathlib').Path({str(created)!r})\n"
            f"BOUND = {hang_bound(120)}\nVLLM_STAND_IN = {VLLM_STAND_IN!r}\n")
    out, _ = run_python(VLLM_STAND_IN, head, check, SCHEDULER, timeout=600)
    return out


def test_three_slots_run_three_tasks_at_once_on_each_runner(ray_head, tmp_path):
    """MATHAGENT_RUNNER_SLOTS=3 and 2 runners: the scheduler lists 6 ids over the 2 actors,
    all 6 tasks of a batch are in the runners at once (3 each), all 6 results come back, and
    every id is idle again, so the next batch runs 6 at once too."""
    out = _run(ray_head, tmp_path, "3", BATCHES)
    assert out["status"]["trinity-runner-slots"] == "applied"
    assert out["ids"] == out["idle_at_start"] == [0, 1, 2, 3, 4, 5]
    assert out["actors"] == [[0, 2, 4], [1, 3, 5]]  # each runner under its id + k * 2
    assert out["created_at_start"] == ["0", "1"]  # two actors made, no more
    for batch in ("first", "second"):
        result = out[batch]
        assert result["held"] == [3, 3], batch
        assert result["peak"] == [3, 3], batch
        assert result["results"] == [[2, 2, True]] * 6, batch
        assert result["scores"] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0], batch  # each task once
        assert result["idle"] == [0, 1, 2, 3, 4, 5] and result["busy"] == [], batch


def test_without_the_lever_each_runner_takes_one_task_at_a_time(ray_head, tmp_path):
    """Trinity's own behaviour (the variable unset): 2 ids, one task in each runner at a time,
    the other 4 wait and run after; all 6 results still come back."""
    out = _run(ray_head, tmp_path, None, BATCHES)
    assert out["status"]["trinity-runner-slots"] == "skipped"
    assert out["ids"] == out["idle_at_start"] == [0, 1]
    assert out["actors"] == [[0], [1]]
    for batch in ("first", "second"):
        result = out[batch]
        assert result["held"] == [1, 1], batch
        assert result["peak"] == [1, 1], batch
        assert result["results"] == [[2, 2, True]] * 6, batch
        assert result["scores"] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0], batch
        assert result["idle"] == [0, 1] and result["busy"] == [], batch


RESTARTS = """
    async def restart_all(scheduler, ids):
        \"\"\"Restart a runner through each of ``ids`` at once, as the scheduler does for
        each of its failed tasks; the actors made by it and what the ids hold after.\"\"\"
        before = created()
        await asyncio.wait_for(
            asyncio.gather(*(scheduler._restart_runner(i) for i in ids)), BOUND)
        made = len(created()) - len(before)
        after = {h._actor_id.hex(): sorted(i) for h, i in actors(scheduler).values()}
        return {"made": made, "ids_by_actor": sorted(after.values()),
                "idle": sorted(scheduler.idle_runners), "busy": sorted(scheduler.busy_runners)}

    async def check(scheduler, out):
        ids = actors(scheduler)
        old = next(handle for handle, i in ids.values() if 0 in i)
        first = sorted(next(i for _, i in ids.values() if 0 in i))
        out["restart"] = await restart_all(scheduler, first)
        new = scheduler.runners[0].runner
        out["new_actor"] = new._actor_id != old._actor_id
        out["same_new_actor"] = all(scheduler.runners[i].runner._actor_id == new._actor_id
                                    for i in first)
        out["restart_again"] = await restart_all(scheduler, first)
        out["after"] = await run_batch(scheduler, "0/eval", 6)
"""


def test_restarting_every_id_of_a_runner_at_once_makes_one_actor(ray_head, tmp_path):
    """With 3 slots, restarting runner 0 through its 3 ids at once (as 3 of its tasks failing
    together would) makes one new actor behind all 3 ids and leaves them idle; a later restart
    makes one more (the shared restart is over), and a batch then runs 3 at once again."""
    out = _run(ray_head, tmp_path, "3", RESTARTS)
    assert out["restart"] == {"made": 1, "ids_by_actor": [[0, 2, 4], [1, 3, 5]],
                              "idle": [0, 1, 2, 3, 4, 5], "busy": []}
    assert out["new_actor"] and out["same_new_actor"]
    assert out["restart_again"]["made"] == 1
    assert out["after"]["held"] == [3, 3]
    assert out["after"]["results"] == [[2, 2, True]] * 6


def test_without_the_lever_each_restart_of_a_runner_makes_an_actor(ray_head, tmp_path):
    """The contrast: Trinity's own restart_runner, asked 3 times at once for one runner,
    asks Ray for 3 actors (one per call). Each call kills the actor it found, which may be one
    another call has just asked for (so that call's prepare can fail and a constructor may never
    run): the actors asked for are counted, not those that started."""
    out = _run(ray_head, tmp_path, None, """
        async def check(scheduler, out):
            wrapper = scheduler.runners[0]
            asked = []
            make = wrapper._create_runner
            wrapper._create_runner = lambda: asked.append(1) or make()
            await asyncio.wait_for(asyncio.gather(
                *(wrapper.restart_runner() for _ in range(3)), return_exceptions=True), BOUND)
            out["made"] = len(asked)
    """)
    assert out["made"] == 3

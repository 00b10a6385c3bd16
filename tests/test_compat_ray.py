"""mathagent.compat's fixes on a real Ray head (1 CPU, no GPU, also on a GPU machine): the
#602 colocate deadlock without the fix and the start with it, the early-explorer lever in
Trinity-RFT 0.6.0's own launcher, and the worker hook that applies the fixes in Ray's worker
processes.

vLLM and verl's FSDP workers cannot run here: the checks replace the vLLM engine actor and
Trinity's explorer and trainer with small fakes defined in the checking interpreter, which Ray
pickles by value for its workers. ``fresh_python.py`` holds the interpreters and the stand-ins;
``test_compat.py`` checks each fix without Ray.

Ray head: one, module-scoped, started by the first test that needs it and stopped (every
process of it) after the last.
"""

from __future__ import annotations

import importlib.util

import pytest
from bounds import hang_bound
from fresh_python import (
    EXPLORER_CONFIG,
    VLLM_STAND_IN,
    result_of,
    run_python,
    small_ray_head,
    start_python,
    wrong_versions,
)

from mathagent import compat

WRONG_VERSIONS = wrong_versions()
pytestmark = [pytest.mark.slow,  # every test starts a Ray head and a Python on it
              pytest.mark.skipif(WRONG_VERSIONS is not None, reason=str(WRONG_VERSIONS))]


@pytest.fixture(scope="module")
def ray_head():
    """1 CPU and no GPU, whatever the machine has (the #602 deadlock needs a head without one)."""
    with small_ray_head() as head:
        yield head


# --------------------------------------------------------------------------------------
# trinity-colocate (agentscope-ai/Trinity-RFT#602)
# --------------------------------------------------------------------------------------


def test_colocate_deadlocks_without_fix_and_starts_without_gpu_with_it(ray_head):
    """The #602 deadlock on a real Ray head with 1 CPU and no GPU. vLLM cannot run without a
    GPU: the stand-in ``vllm`` plus a fake engine actor in place of ``vLLMRolloutModel``
    (defined in ``__main__``, so Ray pickles it by value for its worker)."""
    out, _ = run_python(VLLM_STAND_IN, EXPLORER_CONFIG, f"""
        import asyncio, os, time
        import ray
        from ray.util.placement_group import placement_group_table, remove_placement_group
        import trinity.common.models.vllm_model as vllm_model
        from trinity.common.models.allocator import Allocator
        from trinity.common.models.model import ModelWrapper
        from mathagent.compat import apply_all

        class FakeEngine:
            def __init__(self, config):
                self.config = config
                self.prepared = False

            async def prepare(self):
                self.prepared = True

            async def get_api_server_url(self):
                return None

            def report(self):
                ctx = ray.get_runtime_context()
                return {{"pid": os.getpid(), "prepared": self.prepared,
                         "name": self.config.ray_actor_name,
                         "resources": ctx.get_assigned_resources(),
                         "placement_group": ctx.get_placement_group_id(),
                         "gpu_ids": ray.get_gpu_ids()}}

        vllm_model.vLLMRolloutModel = FakeEngine
        NS = "mathagent-compat-test"
        ray.init(address={ray_head.address!r}, namespace=NS, logging_level="ERROR")
        try:
            out = {{"cluster": ray.cluster_resources()}}
            allocator = Allocator(explorer_config(NS))

            # start the models; stop waiting once Ray has found their placement group
            # infeasible (it is never ready then), or when they returned
            async def unfixed():
                task = asyncio.ensure_future(allocator.create_all_models())
                deadline = time.monotonic() + {hang_bound(120)}  # a bound: Ray's scheduling
                table = None
                while not task.done() and time.monotonic() < deadline:
                    pg = getattr(allocator, "pg", None)
                    table = placement_group_table(pg) if pg is not None else None
                    if table and table["stats"]["scheduling_state"] == "INFEASIBLE":
                        break
                    await asyncio.sleep(0.1)
                returned = task.done()
                task.cancel()
                return returned, table

            returned, table = asyncio.run(unfixed())
            out["unfixed"] = "returned" if returned else "waiting"
            if table:
                out["bundles"] = allocator.bundle_result.bundles
                out["pg_state"] = table["state"]
                out["pg_scheduling"] = table["stats"]["scheduling_state"]
                remove_placement_group(allocator.pg)
            out["status"] = {{r.name: r.status for r in apply_all()}}["trinity-colocate"]
            allocator = Allocator(explorer_config(NS))
            start = time.monotonic()
            rollout, auxiliary = asyncio.run(  # a bound, not a measurement: actor start-up
                asyncio.wait_for(allocator.create_all_models(), {hang_bound(120)}))
            out["fixed_s"] = time.monotonic() - start
            out["auxiliary"] = auxiliary
            out["wrappers"] = [type(w) is ModelWrapper for w in rollout]
            name = allocator.get_actor_name("rollout", 0, 0)
            out["name"] = name
            by_name = ray.get(ray.get_actor(name, namespace=NS).report.remote())
            via_wrapper = ray.get(rollout[0].model.report.remote())
            out["by_name"], out["via_wrapper"] = by_name, via_wrapper
            out["available_gpu"] = ray.available_resources().get("GPU", 0)
            emit(out)
        finally:
            ray.shutdown()
    """, timeout=600)
    assert out["cluster"].get("GPU", 0) == 0 and out["cluster"]["CPU"] == 1
    # without the fix: the models wait for a placement group that needs a GPU, which Ray
    # found infeasible on this head (no GPU): it stays pending, they never start
    assert out["unfixed"] == "waiting"
    assert out["bundles"] == [{"GPU": 1.0, "CPU": 1}]
    assert out["pg_state"] == "PENDING" and out["pg_scheduling"] == "INFEASIBLE"
    # with it: one rollout wrapper, no auxiliary models (it returned: no deadlock)
    assert out["status"] == "applied"
    assert out["wrappers"] == [True] and out["auxiliary"] == []
    assert out["fixed_s"] < hang_bound(120)
    engine = out["by_name"]
    assert out["via_wrapper"]["pid"] == engine["pid"]  # the wrapper holds the named actor
    assert engine["name"] == out["name"] == "explorer_rollout_model_0_0"
    assert engine["prepared"]
    assert engine["placement_group"] is None
    assert "GPU" not in engine["resources"] and engine["gpu_ids"] == []


# --------------------------------------------------------------------------------------
# trinity-early-explorer (a start-up lever) in Trinity's launcher
# --------------------------------------------------------------------------------------


def test_early_explorer_prepares_while_the_trainer_is_still_being_made(ray_head, tmp_path):
    """Trinity's own launcher (``both``, which ``colocate`` runs) on a real Ray head, with
    stand-ins for its explorer and trainer (vLLM and verl's FSDP workers cannot run here),
    defined in ``__main__`` so that Ray pickles them by value. The trainer's constructor waits
    for the explorer's ``prepare()`` to leave a mark: without the lever it gives up after 3 s
    (the launcher asks for ``prepare()`` only once both actors are made), with it the mark
    comes while the constructor waits. Either way ``prepare()`` runs once and the run ends."""
    out, _ = run_python(VLLM_STAND_IN, f"""
        import os, time, types
        from pathlib import Path
        import ray
        import trinity.explorer.explorer as explorer_module
        import trinity.trainer.trainer as trainer_module
        from trinity.cli import launcher
        from mathagent import compat

        MARKS = Path({str(tmp_path)!r})

        class ExplorerActor:
            def __init__(self, config):
                self.mark = MARKS / config.explorer.name
                self.prepared = 0

            async def prepare(self):
                self.prepared += 1
                self.mark.write_text("prepared")

            async def sync_weight(self):
                return None

            async def explore(self):
                return "explorer"

            async def shutdown(self):
                return None

            def report(self):
                return self.prepared

        class TrainerActor:
            def __init__(self, config, wait_s):
                mark = MARKS / config.explorer.name
                deadline = time.monotonic() + wait_s
                while not mark.exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
                self.saw_prepare = mark.exists()

            def prepare(self):
                return None

            def sync_weight(self):
                return None

            def train(self):
                return "trainer"

            def shutdown(self):
                return None

            def report(self):
                return self.saw_prepare

        made = {{}}

        class Explorer:
            @classmethod
            def get_actor(cls, config):
                made["explorer"] = ray.remote(ExplorerActor).options(
                    name=config.explorer.name, num_cpus=0).remote(config)
                return made["explorer"]

        class Trainer:
            wait_s = 3.0

            @classmethod
            def get_actor(cls, config):
                made["trainer"] = ray.remote(TrainerActor).options(num_cpus=0).remote(
                    config, cls.wait_s)
                return made["trainer"]

        explorer_module.Explorer = Explorer
        trainer_module.Trainer = Trainer
        own_get_actor = Explorer.__dict__["get_actor"]

        def config(name):
            return types.SimpleNamespace(
                explorer=types.SimpleNamespace(name=name),
                trainer=types.SimpleNamespace(name="trainer"),
                synchronizer=types.SimpleNamespace(sync_method="memory", sync_timeout=5),
                ray_namespace="mathagent-early-explorer")

        def run(name):
            status = launcher.MODE_MAP["colocate"](config(name))
            return {{"success": status.success,
                     "trainer_saw_prepare": ray.get(made["trainer"].report.remote()),
                     "prepare_calls": ray.get(made["explorer"].report.remote())}}

        ray.init(address={ray_head.address!r}, namespace="mathagent-early-explorer",
                 logging_level="ERROR")
        try:
            out = {{"without": run("explorer_without")}}
            os.environ[compat.EARLY_EXPLORER_ENV] = "1"
            out["status"] = {{r.name: r.status for r in compat.apply_all()}}
            Trainer.wait_s = {hang_bound(60)}   # a bound: it ends once the mark is there
            out["with"] = run("explorer_with")
            out["both_is_patched"] = launcher.MODE_MAP["both"] is launcher.both
            out["get_actor_restored"] = Explorer.__dict__["get_actor"] is own_get_actor
            emit(out)
        finally:
            ray.shutdown()
    """, timeout=600)
    assert out["without"] == {"success": True, "trainer_saw_prepare": False, "prepare_calls": 1}
    assert out["status"]["trinity-early-explorer"] == "applied"
    assert out["with"] == {"success": True, "trainer_saw_prepare": True, "prepare_calls": 1}
    assert out["both_is_patched"] and out["get_actor_restored"]


# --------------------------------------------------------------------------------------
# the Ray worker hook
# --------------------------------------------------------------------------------------

WORKER_PROBE = """
    import os
    import types
    import ray
    from mathagent import launch

    class RunConfig:
        \"\"\"Stand-in for Trinity's checked Config: get_envs() and the Ray address are read.\"\"\"
        cluster = types.SimpleNamespace(ray_address=ADDRESS)
        def get_envs(self):
            return {"MATHAGENT_TEST_JOB_VAR": "job"}

    def probe():
        from verl.utils import attention_utils
        return {"pid": os.getpid(),
                "fixed": getattr(attention_utils._get_attention_functions, "_mathagent_fix",
                                 False),
                "job_var": os.environ.get("MATHAGENT_TEST_JOB_VAR"),
                "own_var": os.environ.get("MATHAGENT_TEST_OWN_VAR")}

    class Probe:
        def probe(self):
            return probe()

    runtime_env = launch.worker_runtime_env(RunConfig()) if WITH_HOOK else None
    ray.init(address=ADDRESS, namespace="mathagent-compat-hook", runtime_env=runtime_env,
             logging_level="ERROR")
    try:
        task = ray.get(ray.remote(probe).remote())
        actor = ray.remote(Probe).options(
            num_cpus=0, runtime_env={"env_vars": {"MATHAGENT_TEST_OWN_VAR": "own"}}).remote()
        emit({"driver": os.getpid(), "runtime_env": runtime_env, "task": task,
              "actor": ray.get(actor.probe.remote())})
    finally:
        ray.shutdown()
"""


def test_worker_hook_applies_fixes_in_tasks_and_actors(ray_head):
    """worker_runtime_env() makes Ray run compat.worker_setup in each worker process: a task
    and an actor with its own runtime_env both see verl patched. The control driver, joined
    without that runtime_env, sees verl unpatched in its workers. Where flash-attn is
    installed the verl fix is not wanted, so no worker is patched (the workers run on this
    machine, with this environment)."""
    wanted = importlib.util.find_spec("flash_attn") is None
    # both drivers at once (two jobs of the head, each with its own workers)
    procs = {with_hook: start_python(f"WITH_HOOK = {with_hook}\nADDRESS = {ray_head.address!r}",
                                     WORKER_PROBE)
             for with_hook in (True, False)}
    try:
        outs = {with_hook: result_of(proc)[0] for with_hook, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    hooked = outs[True]
    assert hooked["runtime_env"]["worker_process_setup_hook"] == compat.WORKER_SETUP_HOOK
    for worker in ("task", "actor"):
        assert hooked[worker]["pid"] != hooked["driver"]
        assert hooked[worker]["fixed"] is wanted, worker
        assert hooked[worker]["job_var"] == "job"  # the job's env vars reached it too
    assert hooked["actor"]["own_var"] == "own"  # the actor's own runtime_env was used
    assert hooked["task"]["pid"] != hooked["actor"]["pid"]
    control = outs[False]
    assert control["task"]["fixed"] is False and control["actor"]["fixed"] is False

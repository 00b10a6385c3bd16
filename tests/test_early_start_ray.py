"""The ``trinity-early-runners`` start-up lever (:mod:`mathagent.early_start`) on a real Ray
head: Trinity-RFT 0.6.0's own ``Explorer.prepare`` asks its rollout coordinator to prepare
beside the models' start, once their actors have names, and not after; where the models fail,
the coordinator is stopped; a workflow runner's model wrapper (Trinity's ``ModelWrapper``)
waits for a model that is not ready yet, where without the lever it fails.

What is real: Trinity's ``Explorer.prepare`` and ``Explorer.shutdown`` (run on an explorer
object built without its constructor, which needs buffers, a monitor and a synchronizer), its
``ExplorerConfig`` and the allocator's actor names, its ``ModelWrapper``, Ray's actors and named
actors. vLLM cannot run here, so the models' allocator, the model actor and the coordinator are
stand-ins defined in the checking interpreter (Ray pickles them by value): the allocator names
a model actor, then stays "starting" (as vLLM's start would) until the coordinator's
``prepare()`` has begun or a bound has passed; the coordinator's ``prepare()`` leaves a mark
and looks the model actor up by name, as each of Trinity's workflow runners does in its
constructor. Without the lever the models wait out the bound; with it they need not.
``test_compat.py`` checks the lever's gating without Ray.
"""

from __future__ import annotations

import pytest
from bounds import hang_bound
from fresh_python import (
    EXPLORER_CONFIG,
    VLLM_STAND_IN,
    run_python,
    small_ray_head,
    wrong_versions,
)

WRONG_VERSIONS = wrong_versions()
pytestmark = [pytest.mark.slow,  # every test starts a Ray head and a Python on it
              pytest.mark.skipif(WRONG_VERSIONS is not None, reason=str(WRONG_VERSIONS))]

#: Seconds the stand-in models stay "starting" at most (without the lever, all of them).
MODELS_S = 5.0


@pytest.fixture(scope="module")
def ray_head():
    with small_ray_head() as head:
        yield head


#: Before it come ``ADDRESS``, ``MARKS`` (a folder), ``BOUND`` and ``EXPLORER_CONFIG``;
#: ``prepare(name, wait_s, fail)`` runs Trinity's ``Explorer.prepare`` on a fresh explorer
#: whose models start for at most ``wait_s`` seconds, and says what happened.
EXPLORER = """
    import asyncio, logging, time, types
    from pathlib import Path
    import ray
    import trinity.explorer.explorer as explorer_module
    from trinity.common.config import Config, InferenceModelConfig
    from trinity.common.constants import SyncStyle
    from mathagent import compat, early_start

    NAMESPACE = "mathagent-early-runners"

    class Coordinator:
        \"\"\"Stands for Trinity's RolloutCoordinator actor.\"\"\"

        made = {}

        def __init__(self, config, model_name):
            self.mark = Path(MARKS) / config.explorer.name
            self.model_name, self.began, self.calls = model_name, None, 0

        async def prepare(self):
            self.calls += 1
            self.began = time.time()
            ray.get_actor(self.model_name, namespace=NAMESPACE)  # as a runner's constructor
            self.mark.write_text("began")

        async def shutdown(self):
            return None

        def report(self):
            return {"began": self.began, "calls": self.calls}

        @classmethod
        def get_actor(cls, config):
            name = early_start.model_actor_names(config.explorer)[0][0]
            handle = ray.remote(Coordinator).options(num_cpus=0, namespace=NAMESPACE).remote(
                config, name)
            cls.made[config.explorer.name] = handle
            return handle

    class Model:
        \"\"\"Stands for the vLLM engine actor, which the allocator names at once.\"\"\"

        async def shutdown(self):
            return None

    class Allocator:
        \"\"\"Stands for Trinity's model allocator: names the model actor, then starts it
        (until the coordinator began to prepare, at most wait_s seconds), then hands it over
        or fails.\"\"\"

        def __init__(self, config, wait_s, fail):
            self.config, self.wait_s, self.fail, self.ready_at = config, wait_s, fail, None

        async def create_all_models(self):
            name = early_start.model_actor_names(self.config)[0][0]
            actor = ray.remote(Model).options(name=name, namespace=NAMESPACE,
                                              num_cpus=0).remote()
            mark, deadline = Path(MARKS) / self.config.name, time.monotonic() + self.wait_s
            while not mark.exists() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            self.ready_at = time.time()
            if self.fail:
                raise RuntimeError("the engine failed to start")
            wrapper = types.SimpleNamespace(shutdown=actor.shutdown.remote)
            return [wrapper], []

    class Synchronizer:
        def set_explorer_status(self, status):
            return None

    explorer_module.RolloutCoordinator = Coordinator
    own_get_actor = Coordinator.__dict__["get_actor"]
    synchronizer = ray.remote(Synchronizer).options(num_cpus=0).remote

    def explorer(name, wait_s, fail, auxiliary):
        config = Config()
        config.explorer = explorer_config(NAMESPACE)
        config.explorer.name = name
        config.explorer.eval_on_startup = False
        if auxiliary:  # a judge model beside the policy: the lever leaves Trinity's order
            config.explorer.auxiliary_models = [InferenceModelConfig(model_path="/judge")]
        self = object.__new__(explorer_module.Explorer)
        self.__dict__.update(
            config=config, logger=logging.getLogger(name), model_allocator=Allocator(
                config.explorer, wait_s, fail), use_nccl_sync=True, model_type="vllm",
            synchronizer=synchronizer(), sync_style=SyncStyle.FIXED, explore_step_num=0,
            rollout_coordinator=None, monitor=None, models=[], auxiliary_models=[],
            _async_watch_stopped=False, _async_watch_task=None)
        return self

    def prepare(name, wait_s, fail=False, auxiliary=False):
        self = explorer(name, wait_s, fail, auxiliary)
        try:
            asyncio.run(self.prepare())
            error = None
        except RuntimeError as exc:
            error = str(exc)
        handle = Coordinator.made[name]
        deadline = time.monotonic() + BOUND  # a kill reaches the actor through Ray's GCS
        while True:
            try:
                report = ray.get(handle.report.remote(), timeout=BOUND)
            except ray.exceptions.RayActorError:
                report = "stopped"
                break
            if not fail or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        return {"error": error, "coordinator": report,
                "ready_at": self.model_allocator.ready_at,
                "kept": type(self.rollout_coordinator).__name__,
                "get_actor_restored": Coordinator.__dict__["get_actor"] is own_get_actor}

    ray.init(address=ADDRESS, namespace=NAMESPACE, logging_level="ERROR")
"""


def _explorer(ray_head, tmp_path, body: str) -> dict:
    out, _ = run_python(VLLM_STAND_IN, EXPLORER_CONFIG,
                        f"ADDRESS = {ray_head.address!r}\nMARKS = {str(tmp_path)!r}\n"
                        f"BOUND = {hang_bound(30)}",
                        EXPLORER, body, timeout=300)
    return out


def test_the_coordinator_prepares_beside_the_models_with_the_lever_and_after_them_without(
        ray_head, tmp_path):
    out = _explorer(ray_head, tmp_path, f"""
        import os
        out = {{"without": prepare("explorer_without", {MODELS_S})}}
        os.environ[early_start.EARLY_RUNNERS_ENV] = "1"
        out["status"] = {{r.name: r.status for r in compat.apply_all()}}
        out["with"] = prepare("explorer_with", {hang_bound(60)})  # a bound: ends at the mark
        emit(out)
        ray.shutdown()
    """)
    assert out["status"]["trinity-early-runners"] == "applied"
    without, with_lever = out["without"], out["with"]
    for run in (without, with_lever):
        assert run["error"] is None and run["coordinator"]["calls"] == 1
        assert run["kept"] == "ActorHandle" and run["get_actor_restored"]
    # Trinity's order: the coordinator once the models are ready
    assert without["coordinator"]["began"] >= without["ready_at"]
    # the lever's: while they start, once named (its prepare() looked the model up by name)
    assert with_lever["coordinator"]["began"] < with_lever["ready_at"]


def test_the_early_coordinator_is_stopped_when_the_models_fail(ray_head, tmp_path):
    out = _explorer(ray_head, tmp_path, f"""
        import os
        os.environ[early_start.EARLY_RUNNERS_ENV] = "1"
        compat.apply_all()
        emit(prepare("explorer_failing", {hang_bound(60)}, fail=True))
        ray.shutdown()
    """)
    assert out["error"] == "the engine failed to start"
    assert out["coordinator"] == "stopped" and out["get_actor_restored"]


def test_with_auxiliary_models_the_lever_leaves_trinitys_order(ray_head, tmp_path):
    """The experience pipeline would ask an auxiliary model for its server before it is ready:
    with one in the config, the lever on makes the coordinator after the models, as Trinity
    does."""
    out = _explorer(ray_head, tmp_path, f"""
        import os
        os.environ[early_start.EARLY_RUNNERS_ENV] = "1"
        compat.apply_all()
        emit(prepare("explorer_auxiliary", {MODELS_S}, auxiliary=True))
        ray.shutdown()
    """)
    assert out["error"] is None and out["coordinator"]["calls"] == 1
    assert out["coordinator"]["began"] >= out["ready_at"]


#: A model actor that is ready ``after`` seconds after it was made; before that it refuses its
#: server's address with vLLM's actor's words; its server answers ``/health`` from the start.
SLOW_MODEL = """
    import asyncio, http.server, os, threading, time
    import ray
    from trinity.common.config import InferenceModelConfig
    from trinity.common.models.model import ModelWrapper
    from mathagent import compat, early_start

    class SlowModel:
        def __init__(self, after):
            self.ready_from = time.time() + after

            class Health(http.server.BaseHTTPRequestHandler):
                def do_GET(self):
                    self.send_response(200)
                    self.end_headers()

                def log_message(self, *args):
                    return None

            self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
            threading.Thread(target=self.server.serve_forever, daemon=True).start()

        async def ready(self):
            return time.time() >= self.ready_from

        def get_api_server_url(self):
            if time.time() < self.ready_from:
                raise RuntimeError("Model is not prepared. Please call `prepare()` first.")
            return f"http://127.0.0.1:{self.server.server_address[1]}"

    def runner_prepare(after):
        \"\"\"A workflow runner's preparation: Trinity's ModelWrapper of the model actor.\"\"\"
        config = InferenceModelConfig(model_path="/not/loaded", enable_openai_api=True)
        model = ray.remote(SlowModel).options(num_cpus=0).remote(after)
        began = time.time()
        try:
            asyncio.run(ModelWrapper(model=model, config=config).prepare())
            return {"error": None, "seconds": time.time() - began}
        except Exception as exc:
            return {"error": type(exc).__name__ + ": " + str(exc).splitlines()[-1],
                    "seconds": time.time() - began}

    ray.init(address=ADDRESS, logging_level="ERROR")
"""


def test_a_runner_made_early_waits_for_its_model_and_fails_without_the_lever(ray_head):
    out, _ = run_python(VLLM_STAND_IN, f"ADDRESS = {ray_head.address!r}", SLOW_MODEL, """
        out = {"without": runner_prepare(2.0)}
        os.environ[early_start.EARLY_RUNNERS_ENV] = "1"
        out["status"] = {r.name: r.status for r in compat.apply_all()}
        out["with"] = runner_prepare(2.0)
        model = ray.remote(SlowModel).options(num_cpus=0).remote(600.0)
        try:
            asyncio.run(early_start.wait_until_ready(model, timeout=1.0))
        except TimeoutError as exc:
            out["timeout"] = str(exc)
        emit(out)
        ray.shutdown()
    """, timeout=300)
    assert out["status"]["trinity-early-runners-wait"] == "applied"
    assert "Model is not prepared" in out["without"]["error"]
    assert out["with"]["error"] is None and out["with"]["seconds"] >= 2.0
    assert out["timeout"] == ("the rollout model was not ready after 1 s "
                              "(MATHAGENT_EARLY_RUNNERS=1 made its workflow runner early)")

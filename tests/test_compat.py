"""The version-gated upstream fixes of mathagent.compat and the Ray worker hook that applies them.

A fix replaces a function of an imported upstream module for the whole process, so every
check runs in a fresh ``python -c`` subprocess and test order does not matter. What is real:
verl 0.8.0's ``attention_utils`` and its pure-torch padding functions, Trinity-RFT 0.6.0's
``Allocator`` and config classes, and a local Ray head (1 CPU, no GPU, also on a GPU machine).
vLLM cannot run on a CPU machine (and is not installed there), so the Trinity tests put a
stand-in ``vllm`` package on ``sys.meta_path`` (:data:`VLLM_STAND_IN`, used on every machine)
and replace the vLLM engine actor with a small fake. The verl fix is for machines without
flash-attn; where flash-attn is installed, the checks of that case hide it from their
interpreter (:data:`HIDE_FLASH_ATTN`).

Ray head: one, module-scoped, started by the first test that needs it and stopped (every
process of it) after the last.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from bounds import hang_bound

from mathagent import compat, launch

pytestmark = pytest.mark.slow  # every test starts a Python that imports verl or Trinity

REPO = Path(__file__).resolve().parents[1]
RESULT = "RESULT:"

#: vLLM cannot run without a GPU: a stand-in that makes ``vllm`` and every ``vllm.*``
#: submodule importable, where any attribute is a dummy class (also subscriptable and usable
#: in ``X | Y``), which is all Trinity's module-level imports and annotations need.
VLLM_STAND_IN = textwrap.dedent("""
    import importlib.abc, importlib.machinery, sys, types

    class _AnyMeta(type):
        def __getattr__(cls, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return _dummy(name)
        def __getitem__(cls, item):
            return cls
        def __or__(cls, other):
            return cls
        __ror__ = __or__

    def _dummy(name):
        return _AnyMeta(name, (), {"__init__": lambda self, *a, **k: None})

    class _StandInModule(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            value = _dummy(name)
            setattr(self, name, value)
            return value

    class _VllmStandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, fullname, path=None, target=None):
            if fullname == "vllm" or fullname.startswith("vllm."):
                return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
            return None
        def create_module(self, spec):
            return _StandInModule(spec.name)
        def exec_module(self, module):
            module.__path__ = []

    sys.meta_path.insert(0, _VllmStandIn())
""")

#: A machine without flash-attn: where it is installed, ``import flash_attn`` raises
#: ModuleNotFoundError and ``importlib.util.find_spec("flash_attn")`` is None (as when it is not
#: installed); where it is not, nothing changes.
HIDE_FLASH_ATTN = textwrap.dedent("""
    import importlib.util as _util, sys as _sys
    if _util.find_spec("flash_attn") is not None:
        _sys.modules["flash_attn"] = None
""")

#: Prints ``RESULT:<json>``, the line :func:`run_python` returns.
EMIT = textwrap.dedent(f"""
    import json as _json
    def emit(value):
        print({RESULT!r} + _json.dumps(value, default=str), flush=True)
""")


def start_python(*parts: str) -> subprocess.Popen:
    """Start the code ``parts`` (each dedented) in a fresh interpreter in the repo root."""
    code = "\n".join(textwrap.dedent(part) for part in (EMIT, *parts))
    return subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=launch._ray_env())


def result_of(proc: subprocess.Popen,
              timeout: float = 300) -> tuple[dict, subprocess.CompletedProcess]:
    """Wait for a :func:`start_python` process; the value its code passed to ``emit()`` and
    the finished process."""
    try:
        stdout, stderr = proc.communicate(timeout=hang_bound(timeout))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    lines = [ln for ln in stdout.splitlines() if ln.startswith(RESULT)]
    assert done.returncode == 0 and lines, (
        f"exit {done.returncode}\nstdout:\n{stdout[-3000:]}\nstderr:\n{stderr[-5000:]}")
    return json.loads(lines[-1][len(RESULT):]), done


def run_python(*parts: str, timeout: float = 300) -> tuple[dict, subprocess.CompletedProcess]:
    """Run the code ``parts`` (each dedented) in a fresh interpreter in the repo root.

    Returns the value the code passed to ``emit()`` and the finished process.
    """
    return result_of(start_python(*parts), timeout)


def fix_named(name: str) -> compat.Fix:
    return next(f for f in compat.FIXES if f.name == name)


@pytest.fixture(scope="module", autouse=True)
def _versions_the_fixes_are_for():
    """The expectations below are for the released versions the fixes name."""
    for fix in compat.FIXES:
        have = compat.installed_version(fix.package)
        if have not in fix.versions:
            pytest.skip(f"{fix.package} {have} installed; {fix.name} is for {fix.versions}")


@pytest.fixture(scope="module")
def ray_head():
    """1 CPU and no GPU, whatever the machine has (the #602 deadlock needs a head without one)."""
    with launch.local_ray_head(num_cpus=1, num_gpus=0, object_store_memory=100 * 2**20) as head:
        yield head
    assert head.processes() == []


# --------------------------------------------------------------------------------------
# verl-bert-padding
# --------------------------------------------------------------------------------------


def test_verl_unpad_fails_without_flash_attn_and_round_trips_after_fix():
    """Real verl code: unpad_input needs flash_attn before the fix; after it, verl's
    pure-torch unpad_input / pad_input round-trip a padded batch."""
    out, _ = run_python(HIDE_FLASH_ATTN, """
        import torch
        from verl.utils import attention_utils
        from mathagent.compat import apply_all

        torch.manual_seed(0)
        hidden = torch.randn(2, 5, 3)
        mask = torch.tensor([[1, 1, 1, 0, 0], [1, 0, 1, 1, 1]])
        try:
            attention_utils.unpad_input(hidden, mask)
            before = None
        except ModuleNotFoundError as exc:
            before = {"name": exc.name, "message": str(exc)}
        status = {r.name: r.status for r in apply_all()}
        unpadded, indices, cu_seqlens, max_seqlen, used = attention_utils.unpad_input(hidden, mask)
        padded = attention_utils.pad_input(unpadded, indices, 2, 5)
        emit({"before": before, "status": status,
              "rows_equal": torch.equal(unpadded, hidden[mask.bool()]),
              "indices": indices.tolist(), "cu_seqlens": cu_seqlens.tolist(),
              "max_seqlen": int(max_seqlen), "used": used.tolist(),
              "padded_shape": list(padded.shape),
              "padded_equal": torch.equal(padded, hidden * mask.unsqueeze(-1)),
              "padding_zero": bool((padded[mask == 0] == 0).all()),
              "padding_was_nonzero": bool((hidden[mask == 0] != 0).any())})
    """)
    assert out["before"] is not None, "unpad_input worked before the fix"
    assert out["before"]["name"].startswith("flash_attn"), out["before"]
    assert "flash_attn" in out["before"]["message"]
    assert out["status"]["verl-bert-padding"] == "applied"
    assert out["rows_equal"]
    assert out["indices"] == [0, 1, 2, 5, 7, 8, 9]
    assert out["cu_seqlens"] == [0, 3, 7] and out["max_seqlen"] == 4 and out["used"] == [3, 4]
    assert out["padded_shape"] == [2, 5, 3]
    assert out["padding_was_nonzero"]  # so zeros in the result are pad_input's doing
    assert out["padded_equal"] and out["padding_zero"]


def test_apply_all_twice_is_already_applied():
    out, _ = run_python(HIDE_FLASH_ATTN, """
        from verl.utils import attention_utils
        from mathagent.compat import apply_all

        original = attention_utils._get_attention_functions
        first = {r.name: r.status for r in apply_all()}
        patched = attention_utils._get_attention_functions
        second = {r.name: r for r in apply_all()}
        now = attention_utils._get_attention_functions
        emit({"first": first["verl-bert-padding"],
              "second": second["verl-bert-padding"].status,
              "second_reason": second["verl-bert-padding"].reason,
              "replaced": patched is not original, "same": now is patched,
              "wraps_original": now.__wrapped__ is original})
    """)
    assert out["first"] == "applied"
    assert out["second"] == "already applied"
    assert "verl 0.8.0" in out["second_reason"]
    assert out["replaced"] and out["same"]
    assert out["wraps_original"]  # not wrapped twice


# --------------------------------------------------------------------------------------
# version gating and conditions
# --------------------------------------------------------------------------------------


def test_other_versions_and_missing_packages_are_skipped_untouched():
    """The vllm stand-in (vLLM cannot run on a CPU machine) lets Trinity's allocator import."""
    out, _ = run_python(VLLM_STAND_IN, """
        from trinity.common.models.allocator import Allocator
        from verl.utils import attention_utils
        from mathagent.compat import apply_all

        before = (Allocator.create_all_models, attention_utils._get_attention_functions)
        newer = {r.name: [r.status, r.reason]
                 for r in apply_all(versions={"trinity-rft": "0.6.1", "verl": "0.8.1"})}
        missing = {r.name: [r.status, r.reason]
                   for r in apply_all(versions={"verl": None, "trinity-rft": None})}
        absent = {r.name: [r.status, r.reason] for r in apply_all(versions={})}
        after = (Allocator.create_all_models, attention_utils._get_attention_functions)
        emit({"newer": newer, "missing": missing, "absent": absent,
              "untouched": [a is b for a, b in zip(before, after)],
              "marked": [hasattr(f, "_mathagent_fix") for f in after]})
    """)
    status, reason = out["newer"]["trinity-colocate"]
    assert status == "skipped"
    assert "trinity-rft 0.6.1" in reason and "0.6.0" in reason
    assert "agentscope-ai/Trinity-RFT#602" in reason
    status, reason = out["newer"]["verl-bert-padding"]
    assert status == "skipped"
    assert "verl 0.8.1" in reason and "0.8.0" in reason
    assert fix_named("verl-bert-padding").upstream in reason
    for case in ("missing", "absent"):
        assert out[case] == {"trinity-colocate": ["skipped", "trinity-rft is not installed"],
                             "verl-bert-padding": ["skipped", "verl is not installed"],
                             "trinity-early-explorer": ["skipped",
                                                        "trinity-rft is not installed"],
                             "trinity-ipc-sync": ["skipped", "trinity-rft is not installed"]}
    assert out["untouched"] == [True, True]
    assert out["marked"] == [False, False]


def test_verl_fix_skipped_when_flash_attn_importable(tmp_path):
    """flash-attn has no CPU wheel: an empty stand-in ``flash_attn`` package on sys.path."""
    (tmp_path / "flash_attn").mkdir()
    (tmp_path / "flash_attn" / "__init__.py").write_text('"""stand-in"""\n')
    out, _ = run_python(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        from verl.utils import attention_utils
        from mathagent.compat import apply_all

        original = attention_utils._get_attention_functions
        result = {{r.name: [r.status, r.reason] for r in apply_all()}}["verl-bert-padding"]
        now = attention_utils._get_attention_functions
        emit({{"result": result, "untouched": now is original}})
    """)
    status, reason = out["result"]
    assert status == "skipped"
    assert "flash-attn is importable" in reason
    assert out["untouched"]


# --------------------------------------------------------------------------------------
# trinity-colocate (agentscope-ai/Trinity-RFT#602)
# --------------------------------------------------------------------------------------

#: An ExplorerConfig as Trinity's check_and_update() leaves it in colocate mode: one engine on
#: one GPU (gpu_per_engine 1), ``cuda_visible_devices = "0"``; no OpenAI server.
EXPLORER_CONFIG = """
    from trinity.common.config import ExplorerConfig

    def explorer_config(namespace, cuda_visible_devices="0"):
        cfg = ExplorerConfig()
        model = cfg.rollout_model
        model.model_path = "/not/loaded/by/the/fake/engine"
        model.engine_num, model.gpu_per_engine, model.nnodes = 1, 1, 1
        model.cuda_visible_devices = cuda_visible_devices
        model.enable_openai_api = False
        model.ray_namespace = namespace
        return cfg
"""


def test_trinity_fix_applied_and_dispatches_on_colocate():
    """With the vllm stand-in (on every machine), apply_all() patches Allocator; the patched
    create_all_models takes the colocate path only when cuda_visible_devices is set, and the
    original path (its placement group, here a sentinel raising) otherwise."""
    out, _ = run_python(VLLM_STAND_IN, EXPLORER_CONFIG, """
        import asyncio
        import trinity.common.models.allocator as allocator_module
        from trinity.common.models.allocator import Allocator
        from mathagent import compat

        original = Allocator.create_all_models
        result = {r.name: [r.status, r.reason] for r in compat.apply_all()}["trinity-colocate"]
        patched = Allocator.create_all_models

        class Sentinel(Exception):
            pass

        def placement_group(*args, **kwargs):
            raise Sentinel(args[0])

        async def colocate(allocator):
            return "colocate path", allocator.config.rollout_model.cuda_visible_devices

        allocator_module.placement_group = placement_group
        compat._create_colocate_models = colocate
        try:
            asyncio.run(Allocator(explorer_config("ns", None)).create_all_models())
            other = None
        except Sentinel as exc:
            other = exc.args[0]
        chosen = asyncio.run(Allocator(explorer_config("ns", "0")).create_all_models())
        emit({"result": result, "marked": getattr(patched, "_mathagent_fix", False),
              "wraps_original": patched.__wrapped__ is original,
              "doc": patched.__doc__ == original.__doc__,
              "non_colocate_bundles": other, "colocate": chosen})
    """)
    status, reason = out["result"]
    assert status == "applied"
    assert "trinity-rft 0.6.0" in reason and "agentscope-ai/Trinity-RFT#602" in reason
    assert out["marked"] and out["wraps_original"] and out["doc"]
    # non-colocate: the original code asked for its placement group (one GPU bundle)
    assert out["non_colocate_bundles"] == [{"GPU": 1.0, "CPU": 1}]
    assert out["colocate"] == ["colocate path", "0"]


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
# trinity-early-explorer (a start-up lever)
# --------------------------------------------------------------------------------------


def test_early_explorer_is_off_unless_asked_for(monkeypatch):
    monkeypatch.delenv(compat.EARLY_EXPLORER_ENV, raising=False)
    lever = fix_named("trinity-early-explorer")
    result = compat._gate(lever, {"trinity-rft": "0.6.0"})
    assert result.status == "skipped"
    assert result.reason == "a start-up lever, applied only with MATHAGENT_EARLY_EXPLORER=1"
    monkeypatch.setenv(compat.EARLY_EXPLORER_ENV, "1")
    assert compat._gate(lever, {"trinity-rft": "0.6.0"}) is None
    assert compat._gate(lever, {"trinity-rft": "0.6.1"}).status == "skipped"


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


def test_worker_setup_applies_fixes_when_their_module_is_imported():
    """In a worker, a fix waits for its upstream module: worker_setup() imports neither verl's
    nor Trinity's code (most workers never need them); the first import applies the fix."""
    out, proc = run_python(HIDE_FLASH_ATTN, """
        import sys
        from mathagent import compat
        value = compat.worker_setup()
        before = [m for m in ("verl.utils.attention_utils", "trinity.common.models.allocator")
                  if m in sys.modules]
        from verl.utils import attention_utils
        emit({"value": value, "before": before,
              "verl_fixed": getattr(attention_utils._get_attention_functions,
                                    "_mathagent_fix", False),
              "loader": type(attention_utils.__loader__).__name__})
    """)
    assert out == {"value": None, "before": [], "verl_fixed": True,
                   "loader": "SourceFileLoader"}, proc.stderr
    assert "mathagent.compat:" not in proc.stderr


def test_fix_failing_on_import_is_reported_and_the_import_still_works():
    """A fix that raises when its module is imported prints one line and never breaks the
    import (a worker that imports the module for other reasons must keep running)."""
    out, proc = run_python("""
        import sys
        from mathagent import compat

        def broken():
            raise RuntimeError("layout changed")

        fix = compat.Fix(name="broken-fix", package="pytest",
                         versions=(compat.installed_version("pytest"),), upstream="test",
                         summary="test", module="xml.dom.minidom", apply=broken)
        assert "xml.dom.minidom" not in sys.modules
        waiting = compat.apply_on_import((fix,))
        import xml.dom.minidom
        root = xml.dom.minidom.parseString("<a/>").documentElement
        emit({"waiting": waiting, "parsed": root.tagName})
    """)
    assert out == {"waiting": ["broken-fix"], "parsed": "a"}
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("mathagent.compat:")]
    assert len(lines) == 1, proc.stderr
    assert "broken-fix: failed" in lines[0] and "layout changed" in lines[0]

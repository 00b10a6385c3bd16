"""Fresh interpreters for the checks of :mod:`mathagent.compat` (``test_compat.py`` and
``test_compat_ray.py``).

A fix replaces a function of an imported upstream module for the whole process, so every
check runs in a fresh ``python -c`` subprocess (:func:`run_python`, :func:`start_python`) and
test order does not matter. vLLM cannot run on a CPU machine (and is not installed there), so
the Trinity checks put a stand-in ``vllm`` package on ``sys.meta_path`` (:data:`VLLM_STAND_IN`,
used on every machine). The verl fix is for machines without flash-attn; where flash-attn is
installed, the checks of that case hide it from their interpreter (:data:`HIDE_FLASH_ATTN`).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

from bounds import hang_bound

from mathagent import compat, launch

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


@contextlib.contextmanager
def small_ray_head():
    """A Ray head of 1 CPU and no GPU, whatever the machine has, with a small object store;
    every process of it is gone once the block ends (the checks' module fixtures)."""
    with launch.local_ray_head(num_cpus=1, num_gpus=0, object_store_memory=100 * 2**20) as head:
        yield head
    assert head.processes() == []


def fix_named(name: str) -> compat.Fix:
    return next(f for f in compat.FIXES if f.name == name)


def wrong_versions() -> str | None:
    """Why the checks cannot run here, or None: their expectations are for the released
    versions the fixes name, and an installed version that no fix is for says so."""
    for fix in compat.FIXES:
        have = compat.installed_version(fix.package)
        if have not in fix.versions:
            return f"{fix.package} {have} installed; {fix.name} is for {fix.versions}"
    return None


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

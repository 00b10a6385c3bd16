"""Where one training step's time goes: torch.profiler over the trainer's update and log-prob pass.

A diagnostic, off by default. With ``MATHAGENT_PROFILE_STEP=N`` the trainer worker of a
Trinity-RFT run profiles the Nth call of each of verl 0.8.0's two training-step entry points
(``verl/workers/engine_workers.py``, class ``TrainingWorker``): ``train_mini_batch``, the
actor's update, and ``infer_batch``, a forward-only log-probability pass (the reference's; the
old policy's too where the config asks for it). Step 1 carries one-off costs (allocator growth,
kernel choice), so 2 or 3 reads a steady step. Each profiled call writes three files into
``$MATHAGENT_RUNS/profile/`` (the run's records folder; ``runs/profile/`` without it), named
``<entry point>_call<N>``:

* ``.json``: wall seconds, the seconds the GPU spent in kernels (summed over streams) and the
  kernel count, CPU seconds in operators, and the top operators and kernels. A step whose kernels fill a small share of its
  wall time is held up on the host (Python, launches, copies, synchronisation), not by the GPU;
* ``.txt``: torch.profiler's table of operators by their own GPU time (CPU time where no GPU);
* ``.trace.json.gz``: the Chrome trace, for https://ui.perfetto.dev.

Only :func:`install` touches verl; it is applied through :mod:`mathagent.compat`
(``verl-step-profile``) in the process that imports verl's engine workers.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from mathagent.settings import positive_int

#: The call (1 = the first) of each entry point to profile; unset: nothing is profiled.
PROFILE_ENV = "MATHAGENT_PROFILE_STEP"
#: verl's ``TrainingWorker`` methods that make up a training step's GPU work.
ENTRY_POINTS = ("train_mini_batch", "infer_batch")
TOP_OPERATORS = 15


def profile_problem(value: str | None) -> str | None:
    """Why ``value`` (the variable's text) is not a call number, or None."""
    if value is None or positive_int(value) is not None:
        return None
    return f"{PROFILE_ENV}={value!r} is not the number of a step to profile (1 or more)"


def profile_call() -> int | None:
    """The call :data:`PROFILE_ENV` asks to profile, or None (unset or not a number)."""
    value = os.environ.get(PROFILE_ENV)
    return positive_int(value) if value is not None else None


def unwanted() -> str | None:
    """Why the profile is not applied in this process, or None (the compat gate)."""
    if profile_call() is None:
        return f"a diagnostic, applied only with {PROFILE_ENV}=N (the step to profile)"
    return None


def profile_dir() -> Path:
    from mathagent import paths

    runs = os.environ.get("MATHAGENT_RUNS")
    return (Path(runs) if runs else paths.runs_dir()) / "profile"


def profiled(fn: Callable, label: str, out: Path):
    """Call ``fn()`` under torch.profiler; write ``out/label.{json,txt,trace.json.gz}``; return
    what ``fn`` returned. On CUDA the GPU is synchronised before and after, so the wall time is
    the call's."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    with profile(activities=activities) as prof:
        result = fn()
        if cuda:
            torch.cuda.synchronize()
    wall = time.perf_counter() - start
    out.mkdir(parents=True, exist_ok=True)
    write_profile(prof, label, out, wall, cuda)
    return result


def write_profile(prof, label: str, out: Path, wall: float, cuda: bool) -> dict:
    """The three files of one profiled call; returns the ``.json`` summary."""
    events = prof.key_averages()
    device = "self_device_time_total" if cuda else "self_cpu_time_total"
    top = sorted(events, key=lambda e: getattr(e, device), reverse=True)[:TOP_OPERATORS]
    kernels = [e for e in prof.events() if e.device_type.name == "CUDA"] if cuda else []
    summary = {
        "label": label, "wall_s": round(wall, 4), "cuda": cuda,
        "gpu_kernel_s": round(sum(e.time_range.elapsed_us() for e in kernels) / 1e6, 4),
        "gpu_kernels": len(kernels),
        "cpu_operator_s": round(sum(e.self_cpu_time_total for e in events) / 1e6, 4),
        "top_operators": [{"name": e.key, "calls": e.count,
                           "self_s": round(getattr(e, device) / 1e6, 4)} for e in top],
    }
    summary["gpu_busy_share"] = round(summary["gpu_kernel_s"] / wall, 3) if cuda and wall else None
    (out / f"{label}.json").write_text(json.dumps(summary, indent=1) + "\n")
    sort = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    (out / f"{label}.txt").write_text(
        f"{label}: {wall:.3f} s wall\n\n" + events.table(sort_by=sort, row_limit=40) + "\n")
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        with trace.open("rb") as src, gzip.open(out / f"{label}.trace.json.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
    return summary


def _counting(method: Callable, name: str) -> Callable:
    """``method`` with the call :func:`profile_call` names run under :func:`profiled`."""
    calls = {"n": 0}

    @functools.wraps(method)  # keeps verl's dispatch attributes (``@register``)
    def wrapper(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] != profile_call():
            return method(self, *args, **kwargs)
        return profiled(lambda: method(self, *args, **kwargs), f"{name}_call{calls['n']}",
                        profile_dir())

    return wrapper


def install(engine_workers_module) -> bool:
    """Wrap :data:`ENTRY_POINTS` of verl's ``TrainingWorker``; False when already wrapped."""
    from mathagent.compat import _replace

    worker = engine_workers_module.TrainingWorker
    done = [_replace(worker, name, _counting(getattr(worker, name), name))
            for name in ENTRY_POINTS]
    return any(done)

"""The preflight of a run: every check on a plan, then Trinity's ``check_and_update()``.

:func:`preflight` runs the checks of :mod:`~mathagent.launch.machine_checks`,
:mod:`~mathagent.launch.attention` and :mod:`~mathagent.launch.data_checks` and collects their
verdicts in a :class:`~mathagent.launch.preflight.Preflight`; only when they all pass does it
run Trinity's own ``Config.check_and_update()`` (:func:`check_and_update`, its log lines
collected by :func:`trinity_logs`) and hold the reservation against the Ray cluster.
``Preflight`` is importable from here too.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import shutil
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

from mathagent.launch.attention import check_attention
from mathagent.launch.data_checks import check_selector_and_operators, check_tasksets
from mathagent.launch.machine_checks import (
    check_colocate_switch,
    check_machine,
    check_model,
    check_ray_resources,
    check_versions,
    trinity_reservation,
)
from mathagent.launch.plan import LaunchPlan
from mathagent.launch.preflight import Preflight
from mathagent.launch.ray_head import find_ray, ray_for
from mathagent.launch.tuner import WORKFLOW


def _replace_prefix(obj: Any, old: str, new: str, _seen: set | None = None) -> Any:
    """Rewrite strings starting with ``old`` inside a tree of dataclasses, dicts and lists."""
    seen = _seen if _seen is not None else set()
    if isinstance(obj, str):
        return new + obj[len(old):] if obj.startswith(old) else obj
    if id(obj) in seen:
        return obj
    seen.add(id(obj))
    if hasattr(obj, "__dataclass_fields__"):
        for name in obj.__dataclass_fields__:
            value = getattr(obj, name, None)
            fixed = _replace_prefix(value, old, new, seen)
            if fixed is not value:
                setattr(obj, name, fixed)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            obj[k] = _replace_prefix(v, old, new, seen)
    elif isinstance(obj, list):
        obj[:] = [_replace_prefix(v, old, new, seen) for v in obj]
    return obj


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def trinity_logs() -> Iterator[list[str]]:
    """Collect what Trinity's loggers say inside the block instead of printing it.

    Yields a list that is filled, on exit, with one line per WARNING-or-worse record
    (``"WARNING: ..."``; boxed multi-line alerts reduced to their title).
    """
    import trinity.common.config_validator  # noqa: F401  (creates the validators' loggers)

    capture, saved, lines = _Capture(), {}, []
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if name.startswith("trinity") and isinstance(logger, logging.Logger):
            saved[name] = logger.handlers[:]
            logger.handlers[:] = [capture]
    try:
        yield lines
    finally:
        for name, handlers in saved.items():
            logging.getLogger(name).handlers[:] = handlers
        for rec in capture.records:
            if rec.levelno < logging.WARNING:
                continue
            text = [ln.strip(" |+-") for ln in rec.getMessage().splitlines()]
            first = next((t for t in text if t), "")
            line = f"{rec.levelname}: {first}"
            if line not in lines:
                lines.append(line)


def check_and_update(plan: LaunchPlan, ray_address: str, dry_run: bool,
                     log: list[str] | None = None) -> Any:
    """Trinity's own ``Config.check_and_update()`` on a copy of the plan's config.

    The check creates the run's job, monitor and buffer folders. In a dry run it works in
    a temporary checkpoint root, removed afterwards, and the returned config's paths are
    rewritten to where the real run would write, so nothing is left behind. Trinity's
    warnings are appended to ``log`` instead of being printed.
    """
    config = copy.deepcopy(plan.config)
    config.cluster.ray_address = ray_address
    real_root = config.checkpoint_root_dir
    scratch = tempfile.mkdtemp(prefix="mathagent-dryrun-") if dry_run else None
    if scratch:
        config.checkpoint_root_dir = scratch
    try:
        with trinity_logs() as lines:
            config = config.check_and_update()
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
        if log is not None:
            log.extend(ln.replace(scratch, real_root) if scratch else ln for ln in lines)
    return _replace_prefix(config, scratch, real_root) if scratch else config


def preflight(plan: LaunchPlan, dry_run: bool = False,
              ray_address: str | None = None) -> Preflight:
    """Run every check on ``plan``; problems are collected, not raised.

    Order: the machine (GPU, vllm), the model, the data, selector/operators/``m`` and,
    for a launch, whether Ray is reachable; only when all of those pass, Trinity's
    ``check_and_update()``. ``ray_address`` overrides ``cluster.ray_address``. In a dry run,
    GPU-side items become :attr:`Preflight.requirements` and ``check_and_update()`` runs
    with a temporary Ray head when none is reachable.
    """
    from tqdm.auto import tqdm

    result = Preflight(notes=list(plan.notes))
    config = plan.config
    result.passed.append(f"config loads with Trinity-RFT's load_config; tune()'s Python-side "
                         f"settings change {len(plan.overridden)} values")
    judge = f"{plan.judge_func.__module__}.{plan.judge_func.__name__}"
    result.passed.append(f"workflow {WORKFLOW} and judge {judge} pass agentscope's "
                         "signature checks")
    address = ray_address or config.cluster.ray_address
    found: list[str | None] = [None]

    def probe_ray() -> None:
        found[0] = find_ray(address)
        if found[0]:
            result.passed.append(f"Ray cluster reachable at {found[0]}")
        else:
            result.problems.append(
                f"cluster.ray_address: no Ray cluster reachable at {address!r}; start one with "
                "`python -m mathagent ray start` (or `ray start --head`) and pass "
                "cluster.ray_address=<host:port> (or --ray-address) if it is not found by 'auto'")

    steps = [("machine", lambda: check_machine(config, result, dry_run)),
             ("versions", lambda: check_versions(config, result)),
             ("attention", lambda: check_attention(config, result, dry_run)),
             ("model", lambda: check_model(config, result, dry_run)),
             ("tasksets", lambda: check_tasksets(config, result)),
             ("selector", lambda: check_selector_and_operators(config, result))]
    if not dry_run:
        steps.append(("ray", probe_ray))
    bar = tqdm(total=len(steps) + 1, desc="preflight", file=sys.stderr, leave=False)
    for name, step in steps:
        bar.set_postfix_str(name)
        step()
        bar.update()
    if result.problems:
        bar.close()
        return result
    bar.set_postfix_str("check_and_update")
    trinity_log: list[str] = []
    try:
        if dry_run:
            with ray_for(address) as (here, head):
                if head is None:
                    result.passed.append(f"Ray cluster reachable at {here}")
                else:
                    res = head.resources()
                    result.passed.append(
                        f"no Ray cluster at {address!r}: started a temporary head at {here} "
                        f"(session {head.temp_dir}; {res.get('CPU', 0):g} CPU, "
                        f"{res.get('GPU', 0):g} GPU), stopped after the check")
                result.checked_config = check_and_update(plan, here, True, trinity_log)
        else:
            result.checked_config = check_and_update(plan, found[0], False, trinity_log)
    except Exception as exc:  # Trinity's validators raise ValueError/AssertionError/...
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        result.problems.append(f"Trinity check_and_update(): {type(exc).__name__}: {first}")
    else:
        result.passed.append("Trinity's Config.check_and_update() passes")
        check_colocate_switch(result.checked_config, result)
        need_cpu, need_gpu, parts = trinity_reservation(result.checked_config)
        if dry_run:
            result.requirements.append(
                f"a Ray head offering at least {need_cpu:g} CPU and {need_gpu:g} GPU "
                f"({'; '.join(parts)}); `python -m mathagent ray start` offers all")
        else:
            bar.set_postfix_str("ray resources")
            check_ray_resources(result.checked_config, found[0], result)
    result.notes += [f"Trinity check_and_update() {ln}" for ln in trinity_log]
    if dry_run and any("NO GPU DETECTED" in ln for ln in trinity_log):
        result.notes.append("(the GPU memory estimate runs on the launch machine; no GPU here)")
    bar.update()
    bar.close()
    return result


def launch_blockers(plan: LaunchPlan) -> list[str]:
    """Why ``tune()`` cannot start on this machine (GPU count, vllm); empty when it can."""
    result = Preflight()
    check_machine(plan.config, result, dry_run=False)
    return result.problems

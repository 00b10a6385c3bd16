"""Preflight checks of the data: tasksets, their feature columns, selector and operators.

The train and eval tasksets must load with the documented schema (and the selector's feature
columns); selector and operator names must resolve, a feedback-driven selector needs an
operator computing pass rates, and its ``m`` must equal the rollouts per task.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from mathagent.launch.config import EVAL_KEY, TASKSET_KEY, _selector_config

if TYPE_CHECKING:
    from mathagent.launch.preflight import Preflight


#: Selectors whose choices depend on feedback and which therefore need a feedback operator.
#: Trinity's DifficultyBasedSelector falls back to this ``m`` when kwargs has none.
TRINITY_DEFAULT_M = 16


def _is_feedback_selector(name: str, cls: Any) -> bool:
    """Selectors whose choices depend on the pass rates fed back after each step."""
    from trinity.buffer.selector.selector import DifficultyBasedSelector

    from mathagent.selectors import BOTSSelector, uses_feedback

    if uses_feedback(name):
        return True

    return isinstance(cls, type) and issubclass(cls, DifficultyBasedSelector | BOTSSelector)


def _is_feedback_operator(name: str, cls: Any) -> bool:
    """Operators that hand per-task pass rates to the selector (``selector_metric``)."""
    from trinity.buffer.operators.mappers.pass_rate_calculator import PassRateCalculator

    from mathagent.selectors import OPERATOR_PATH, RolloutPassRateCalculator

    return name in ("pass_rate_calculator", OPERATOR_PATH) or (
        isinstance(cls, type) and issubclass(cls, PassRateCalculator | RolloutPassRateCalculator))


def _resolve(registry: Any, kind: str, name: str, key: str, result: Preflight,
             example: str = "") -> Any:
    """The class a Trinity registry (selectors, operators) gives for ``name``, or None.

    Either way the verdict goes to ``result``: what it resolves to, or why not, with the
    registry's names and, when given, an ``example`` dotted path.
    """
    try:
        cls = registry.get(name)
    except Exception as exc:
        such_as = f" such as {example}" if example else ""
        result.problems.append(
            f"{key}: {kind} {name!r} does not resolve ({type(exc).__name__}: {exc}); use one "
            f"of {', '.join(registry._default_mapping)} or an importable dotted path{such_as}")
        return None
    result.passed.append(f"{kind} {name!r} resolves to {cls.__module__}.{cls.__name__}")
    return cls


def check_selector_and_operators(config: Any, result: Preflight) -> None:
    """Selector and operator names resolve; feedback-driven selectors get feedback; ``m``.

    The selector's keyword arguments and feature-key count also go through
    :func:`mathagent.selectors.check_selector_settings` (Trinity silently ignores a
    misspelt kwarg such as ``lambda``).
    """
    from trinity.buffer.operators import EXPERIENCE_OPERATORS
    from trinity.buffer.selector import SELECTORS

    from mathagent.selectors import (
        BOTS_PATH,
        SELECTOR_KWARGS,
        SelectorConfigError,
        check_selector_settings,
    )

    taskset = config.buffer.explorer_input.taskset
    key = f"{TASKSET_KEY}.data_selector"
    if taskset.task_selector is not None:
        key = f"{TASKSET_KEY}.task_selector"
        result.notes.append(f"`{key}` is deprecated in Trinity-RFT 0.6.0; rename it "
                            "`data_selector` (check_and_update() copies it over)")
    selector = _selector_config(taskset)
    name = selector.selector_type
    cls = _resolve(SELECTORS, "selector", name, f"{key}.selector_type", result,
                   example=BOTS_PATH)
    if cls is not None:
        canonical = "bots" if name == BOTS_PATH else name
        if canonical in SELECTOR_KWARGS:
            try:
                check_selector_settings(name, None, list(selector.feature_keys), None,
                                        **dict(selector.kwargs))
            except SelectorConfigError as exc:
                result.problems.append(f"{key}: {exc}")

    feedback_ops = []
    for i, op in enumerate(config.data_processor.experience_pipeline.operators):
        op_key = f"data_processor.experience_pipeline.operators.{i}.name"
        op_cls = _resolve(EXPERIENCE_OPERATORS, "operator", op.name, op_key, result)
        if op_cls is not None and _is_feedback_operator(op.name, op_cls):
            feedback_ops.append(op.name)

    if cls is None or not _is_feedback_selector(name, cls):
        return
    if not feedback_ops:
        result.problems.append(
            f"data_processor.experience_pipeline.operators: selector {name!r} learns from "
            "per-task pass rates but no operator computes them; add `- name: pass_rate_calculator`")
    repeat = config.algorithm.repeat_times
    m = selector.kwargs.get("m")
    if m is None:
        result.problems.append(
            f"{key}.kwargs.m: not set, so the selector uses its default m={TRINITY_DEFAULT_M} "
            f"while every task is rolled out {repeat} times (algorithm.repeat_times / the "
            f"tuner's group_size); set m: {repeat}")
    elif m != repeat:
        result.problems.append(
            f"{key}.kwargs.m: m={m} but every task is rolled out {repeat} times "
            f"(algorithm.repeat_times, set from the tuner's group_size); BOTS counts each "
            f"feedback as m observations, so set m: {repeat}")
    else:
        result.passed.append(f"selector m={m} equals the rollouts per task (repeat_times)")


def check_tasksets(config: Any, result: Preflight) -> None:
    """Train and eval tasksets exist, pass the schema, carry the selector's feature columns."""
    import datasets

    quiet = datasets.utils.logging.is_progress_bar_enabled()
    if quiet:  # datasets' "Generating train split" bars would bury the report
        datasets.utils.logging.disable_progress_bar()
    try:
        _check_tasksets(config, result)
    finally:
        if quiet:
            datasets.utils.logging.enable_progress_bar()


def _check_tasksets(config: Any, result: Preflight) -> None:
    from mathagent.tasks import TasksetError, load_taskset

    explorer_input = config.buffer.explorer_input
    train = explorer_input.taskset
    selector = _selector_config(train)
    items = [(TASKSET_KEY, train, list(selector.feature_keys))]
    items += [(f"{EVAL_KEY}.{i}", t, []) for i, t in enumerate(explorer_input.eval_tasksets)]
    for key, taskset, features in items:
        label = f"{key} ({taskset.name or 'unnamed'})"
        if not taskset.path:
            result.problems.append(f"{key}.path: not set")
            continue
        if taskset.storage_type != "file":
            result.notes.append(f"{label}: storage {taskset.storage_type!r} is not checked here")
            continue
        try:
            ds = load_taskset(taskset.path, split=taskset.split, feature_keys=features)
        except TasksetError as exc:
            hint = ""
            if not Path(taskset.path).exists():
                hint = f" (or point `{key}.path=...` at it on the command line)"
            result.problems.append(f"{label}: {exc}{hint}")
            continue
        extra = f", feature columns {features} complete and in [0, 1]" if features else ""
        result.passed.append(f"{label}: {taskset.path} split {taskset.split!r}, "
                             f"{len(ds)} tasks{extra}")
    if not explorer_input.eval_tasksets:
        result.notes.append(f"{EVAL_KEY}: none configured, so no eval accuracy will be logged")

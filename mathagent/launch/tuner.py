"""The Python-side tuner settings: the reference's, a config's ``tuner`` block, the judge.

The reference launcher builds a ``TunerModelConfig`` and an ``AlgorithmConfig`` in Python and
``tune()`` writes them over the YAML; :func:`tuner_settings` starts from the reference's values,
applies the config's ``tuner:`` block, picks the run's judge and reads the agent's settings
(``tuner.agent``: the sandboxed Python tool, its timeout, the ReAct rounds; by default the
upstream agent), :func:`_tuner_objects` builds the two objects and :func:`workflow_for` the
workflow function. ``tune()`` also replaces the YAML's ``explorer.rollout_model`` by a
fresh one: :func:`lost_rollout_settings` finds what it drops and
:func:`carrying_rollout_settings` puts it back while ``tune()`` runs.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mathagent.launch.config import ABSENT, ConfigError
from mathagent.serving.connection import ENV_MODEL_FOLDER

#: ``TunerModelConfig`` of the reference ``main.py``. The model path follows
#: ``TRINITY_MODEL_PATH`` like the YAML does (the reference hard-codes Qwen/Qwen3-0.6B here,
#: which silently ignores the variable); read at call time, see :func:`reference_settings`.
REFERENCE_MODEL: dict[str, Any] = {
    "model_path": "Qwen/Qwen3-0.6B",
    "max_model_len": 24576,
    "max_tokens": 16384,
    "temperature": 1.0,
    "inference_engine_num": 4,
    "tensor_parallel_size": 1,
}
#: ``AlgorithmConfig`` of the reference ``main.py`` (save interval: the tuner's default, 100).
REFERENCE_ALGORITHM: dict[str, Any] = {
    "algorithm_type": "multi_step_grpo",
    "group_size": 8,
    "learning_rate": 1e-6,
    "eval_interval_steps": 20,
    "batch_size": 16,
}
MODEL_PATH_ENV = ENV_MODEL_FOLDER  # TRINITY_MODEL_PATH, also what a notebook's vLLM serves
TUNER_BLOCK = "tuner"

#: Where the workflow lives (imported when a plan is built). The judge is chosen per run
#: (``tuner.judge`` in the YAML or ``train --judge``) from :data:`mathagent.judge.JUDGES`.
WORKFLOW = "mathagent.agent.run_react_agent"
#: ``tuner.agent`` settings: fields of :class:`mathagent.agent.AgentOptions`, with the kind of
#: value each takes. Left out, a setting keeps the upstream agent's value (no tool).
AGENT_SETTINGS = {"python_tool": "true or false", "tool_timeout": "a number of seconds",
                  "max_iters": "a whole number", "text_tool_calls": "true or false",
                  "meta_tool": "true or false"}


def reference_settings() -> dict[str, dict[str, Any]]:
    """The reference launcher's model and algorithm settings (a fresh copy)."""
    model = dict(REFERENCE_MODEL)
    model["model_path"] = os.environ.get(MODEL_PATH_ENV, model["model_path"])
    return {"model": model, "algorithm": dict(REFERENCE_ALGORITHM)}


def tuner_settings(raw: dict, config_path: Path,
                   judge: str | None = None) -> tuple[dict[str, Any], str]:
    """The run's Python-side settings and the dotted path of its judge.

    The reference's settings (:func:`reference_settings`), updated by the config's ``tuner``
    block, which is removed from ``raw`` (Trinity does not know it). The judge is ``judge``
    (the command line's ``--judge``), else ``tuner.judge``, else
    :data:`mathagent.judge.DEFAULT_JUDGE`; its name is ``settings["judge"]``. The agent's
    settings (:func:`agent_settings`) are ``settings["agent"]``.
    """
    from mathagent.judge import DEFAULT_JUDGE, judge_path

    settings = reference_settings()
    block = raw.pop(TUNER_BLOCK, None) or {}
    if not isinstance(block, dict) or set(block) - {"model", "algorithm", "judge", "agent"}:
        raise ConfigError(f"{config_path}: invalid setting `{TUNER_BLOCK}`: expected only "
                          "`model`, `algorithm`, `judge` and `agent`")
    for part in ("model", "algorithm"):
        settings[part].update(block.get(part) or {})
    judge_name = str(judge or block.get("judge") or DEFAULT_JUDGE)
    try:
        judge_dotted = judge_path(judge_name)
    except ValueError as exc:
        where = "--judge" if judge else f"{config_path}: invalid setting `{TUNER_BLOCK}.judge`"
        raise ConfigError(f"{where}: {exc}") from None
    settings["judge"] = judge_name
    settings["agent"] = agent_settings(block.get("agent"), config_path)
    return settings, judge_dotted


def agent_settings(block: Any, config_path: Path) -> dict[str, Any]:
    """``tuner.agent`` checked and completed: every key of :data:`AGENT_SETTINGS`, the
    upstream agent's value where the block leaves one out. A wrong key or value raises
    :class:`ConfigError` naming the file and the key."""
    from mathagent.agent import AgentOptions

    where = f"{config_path}: invalid setting `{TUNER_BLOCK}.agent"
    block = {} if block is None else block
    if not isinstance(block, dict):
        raise ConfigError(f"{where}`: expected a mapping with {', '.join(AGENT_SETTINGS)}")
    for key, value in block.items():
        if key not in AGENT_SETTINGS:
            raise ConfigError(f"{where}.{key}`: not an agent setting (settings: "
                              f"{', '.join(AGENT_SETTINGS)})")
        kind = {"python_tool": bool, "tool_timeout": (int, float), "max_iters": int,
                "text_tool_calls": bool, "meta_tool": bool}[key]
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise ConfigError(f"{where}.{key}`: expected {AGENT_SETTINGS[key]}, got {value!r}")
    reference = AgentOptions()
    values = {key: block.get(key, getattr(reference, key)) for key in AGENT_SETTINGS}
    values["tool_timeout"] = float(values["tool_timeout"])
    try:
        AgentOptions(**values)
    except ValueError as exc:
        key = next((k for k in AGENT_SETTINGS if k in str(exc)), "")
        raise ConfigError(f"{where}.{key}`: {exc}") from None
    return values


def workflow_for(agent: dict[str, Any]) -> Any:
    """The workflow function ``tune()`` gets for the ``tuner.agent`` settings ``agent``.

    The upstream agent's settings give :data:`WORKFLOW` itself (imported by its name); others
    give ``make_workflow(AgentOptions(...))``, a closure holding the options, which Ray hands
    to Trinity-RFT's workers with cloudpickle, by value (its name finds another object).
    """
    from mathagent.agent import AgentOptions, make_workflow

    reference = AgentOptions()
    if all(value == getattr(reference, key) for key, value in agent.items()):
        return _import_object(WORKFLOW)
    return make_workflow(AgentOptions(**agent))


def _import_object(dotted: str) -> Any:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _tuner_objects(settings: dict[str, dict[str, Any]], where: Path):
    """Build ``TunerModelConfig`` / ``AlgorithmConfig``; unknown or mistyped fields name the key."""
    from agentscope.tuner import AlgorithmConfig, TunerModelConfig
    from pydantic import ValidationError

    built = []
    for part, cls in (("model", TunerModelConfig), ("algorithm", AlgorithmConfig)):
        values = settings[part]
        unknown = sorted(set(values) - set(cls.model_fields))
        if unknown:
            raise ConfigError(f"{where}: invalid setting `{TUNER_BLOCK}.{part}.{unknown[0]}`: "
                              f"not a field of {cls.__name__} "
                              f"(fields: {', '.join(cls.model_fields)})")
        try:
            built.append(cls(**values))
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(x) for x in err["loc"])
            raise ConfigError(f"{where}: invalid setting `{TUNER_BLOCK}.{part}.{loc}`: "
                              f"{err['msg']}") from None
    return built


#: ``explorer.rollout_model`` fields that ``tune()`` sets from ``TunerModelConfig`` itself
#: (agentscope 1.0.21 ``TunerModelConfig.get_config()`` plus ``enable_history``).
TUNER_ROLLOUT_FIELDS = ("model_path", "max_model_len", "tensor_parallel_size", "engine_num",
                        "tool_call_parser", "reasoning_parser", "enable_openai_api",
                        "enable_auto_tool_choice", "enable_history")


def lost_rollout_settings(yaml_config: Any, tuned_config: Any) -> dict[str, Any]:
    """``explorer.rollout_model`` settings of the YAML that ``tune()`` replaced by defaults.

    ``tune()`` builds a fresh ``InferenceModelConfig`` from ``TunerModelConfig``, so every
    other setting the YAML gave (``enforce_eager``, ``extra_engine_args``,
    ``gpu_memory_utilization``, ...) silently falls back to Trinity's default. Returns
    ``{field: YAML value}`` for each field that differs and that ``tune()`` does not own.
    """
    import dataclasses

    before, after = yaml_config.explorer.rollout_model, tuned_config.explorer.rollout_model
    lost = {}
    for f in dataclasses.fields(before):
        if f.name in TUNER_ROLLOUT_FIELDS:
            continue
        value = getattr(before, f.name)
        if value != getattr(after, f.name, ABSENT):
            lost[f.name] = copy.deepcopy(value)
    return lost


def restore_rollout_settings(config: Any, settings: dict[str, Any]) -> Any:
    """Put ``settings`` back into ``config.explorer.rollout_model``; return ``config``."""
    for name, value in settings.items():
        setattr(config.explorer.rollout_model, name, copy.deepcopy(value))
    return config


@contextlib.contextmanager
def carrying_rollout_settings(settings: dict[str, Any]) -> Iterator[None]:
    """Inside the block, ``tune()`` keeps the YAML's rollout settings it would drop.

    ``tune()`` looks up ``agentscope.tuner._tune._to_trinity_config`` when it is called; for
    the block that name points to a wrapper that restores ``settings`` on the config it
    returns. Nothing installed is edited and the original is back after the block.
    """
    import agentscope.tuner._tune as tune_module

    original = tune_module._to_trinity_config
    if not settings:
        yield
        return

    def to_trinity_config(**kwargs: Any) -> Any:
        return restore_rollout_settings(original(**kwargs), settings)

    tune_module._to_trinity_config = to_trinity_config
    try:
        yield
    finally:
        tune_module._to_trinity_config = original

"""The plan of one run: a config loaded, overridden and tuned the way ``tune()`` would.

:func:`load_plan` reads the YAML and its overrides, applies the Python-side tuner settings with
the function ``tune()`` uses, carries the rollout settings ``tune()`` would drop and returns a
:class:`LaunchPlan`: everything ``train`` knows about the run before it starts.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mathagent import paths
from mathagent.launch.attention import choose_attention
from mathagent.launch.config import (
    TASKSET_KEY,
    ConfigError,
    _differences,
    _flat,
    _omegaconf_error,
    load_trinity_config,
    parse_override,
    resolve_relative_paths,
)
from mathagent.launch.tuner import (
    WORKFLOW,
    _import_object,
    _tuner_objects,
    lost_rollout_settings,
    restore_rollout_settings,
    tuner_settings,
    workflow_for,
)


@dataclass
class LaunchPlan:
    """Everything ``train`` knows about one run before it starts.

    ``yaml_config`` is the Trinity config as the YAML (plus overrides) says;
    ``config`` is the same after ``tune()``'s Python-side overrides, before
    ``check_and_update()``; ``overridden`` lists ``(key, yaml value, value used)``.
    ``settings["agent"]`` holds the agent's settings (``tuner.agent``) that
    ``workflow_func`` was made for.
    """

    config_path: Path
    trinity_yaml: Path
    settings: dict[str, dict[str, Any]]
    model: Any  # agentscope.tuner.TunerModelConfig
    algorithm: Any  # agentscope.tuner.AlgorithmConfig
    yaml_config: Any
    config: Any
    workflow_func: Any
    judge_func: Any
    overridden: list[tuple[str, Any, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    judge: str = "gsm8k_judge"
    #: ``explorer.rollout_model`` settings of the YAML that ``tune()`` drops and the launch
    #: puts back (:func:`lost_rollout_settings`).
    carried: dict[str, Any] = field(default_factory=dict)


def load_plan(config_path: str | Path, overrides: Sequence[str] = (),
              work_dir: str | Path | None = None, judge: str | None = None) -> LaunchPlan:
    """Read a config, apply overrides and the Python-side settings the way ``tune()`` does.

    ``overrides`` are ``KEY=VALUE`` strings: Trinity keys (``buffer.batch_size=8``, list
    items by index: ``buffer.explorer_input.eval_tasksets.0.path=/data/aime``) or
    ``tuner.model.<field>`` / ``tuner.algorithm.<field>`` / ``tuner.judge`` /
    ``tuner.agent.<setting>`` (the workflow's agent: :func:`workflow_for`). ``judge``
    (the command line's ``--judge``) overrides ``tuner.judge``; both take a name of
    :data:`mathagent.judge.JUDGES` or a dotted path. verl's attention settings the YAML leaves
    unset are filled by :func:`choose_attention`. The YAML handed to Trinity (env variables
    resolved, paths absolute, ``tuner`` block removed) is written to ``work_dir`` (by default
    a temporary folder removed when the interpreter exits) as ``trinity_config.yaml``.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    config_path = Path(config_path)
    if not config_path.is_file():
        raise ConfigError(f"{config_path}: no such config file "
                          f"(configs here: {', '.join(p.name for p in sorted(paths.CONFIGS_DIR.glob('*.yaml')))})")
    try:
        cfg = OmegaConf.load(config_path)
    except Exception as exc:
        raise ConfigError(f"{config_path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    for text in overrides:
        key, value = parse_override(text)
        try:
            OmegaConf.update(cfg, key, value, merge=False, force_add=True)
        except OmegaConfBaseException as exc:
            raise ConfigError(f"override {text!r}: {str(exc).splitlines()[0]}") from None
    try:
        raw = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", "?")
        raise ConfigError(f"{config_path}: setting `{key}` cannot be resolved: "
                          f"{str(exc).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{config_path}: expected a mapping of settings at the top level")

    settings, judge_dotted = tuner_settings(raw, config_path, judge)
    judge_name = settings["judge"]
    resolve_relative_paths(raw)
    attention_notes = choose_attention(raw)

    if work_dir is None:
        work_dir = Path(tempfile.mkdtemp(prefix="mathagent-train-"))
        atexit.register(shutil.rmtree, work_dir, True)
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    trinity_yaml = work_dir / "trinity_config.yaml"
    import yaml

    trinity_yaml.write_text(yaml.safe_dump(raw, sort_keys=False))
    yaml_config = load_trinity_config(trinity_yaml, where=config_path)
    if yaml_config.buffer.explorer_input.taskset is None:
        raise ConfigError(f"{config_path}: invalid setting `{TASKSET_KEY}`: missing; the "
                          "tuner adds its workflow to the singular `taskset` (not `tasksets`)")

    model, algorithm = _tuner_objects(settings, config_path)
    try:
        workflow_func = workflow_for(settings["agent"])
        judge_func = _import_object(judge_dotted)
    except Exception as exc:
        raise ConfigError(f"cannot import the workflow {WORKFLOW} or judge {judge_dotted}: "
                          f"{type(exc).__name__}: {exc}") from None
    from agentscope.tuner import check_judge_function, check_workflow_function
    from agentscope.tuner._config import _to_trinity_config

    check_workflow_function(workflow_func)
    check_judge_function(judge_func)
    try:
        config = _to_trinity_config(config_path=str(trinity_yaml), workflow_func=workflow_func,
                                    judge_func=judge_func, model=model, algorithm=algorithm)
    except Exception as exc:
        raise _omegaconf_error(exc, config_path) from exc

    notes = list(attention_notes)
    carried = lost_rollout_settings(yaml_config, config)
    restore_rollout_settings(config, carried)
    # tune() copies only part of TunerModelConfig into Trinity's config (agentscope 1.0.21).
    for name, key in (("temperature", "temperature"), ("top_p", "top_p"),
                      ("enable_thinking", "enable_thinking")):
        value = getattr(model, name)
        if value is not None and value != getattr(config.model, key):
            notes.append(f"tune() does not forward TunerModelConfig.{name}={value!r}; "
                         f"Trinity uses model.{key}={getattr(config.model, key)!r} from the YAML")
    return LaunchPlan(config_path=config_path, trinity_yaml=trinity_yaml, settings=settings,
                      model=model, algorithm=algorithm, yaml_config=yaml_config, config=config,
                      workflow_func=workflow_func, judge_func=judge_func,
                      overridden=_differences(_flat(yaml_config), _flat(config)), notes=notes,
                      judge=judge_name, carried=carried)

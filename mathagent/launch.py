"""Trinity-RFT training: configs, preflight, a local Ray head and ``agentscope.tuner.tune()``.

``python -m mathagent train --config configs/config_difficulty.yaml`` does what the reference
launcher (``main.py`` of the AgentScope "data augment" example) does, with checks around it:

1. **Load** the YAML through Trinity-RFT's own loader (``trinity.common.config.load_config``,
   an OmegaConf structured merge), after applying ``KEY=VALUE`` overrides from the command
   line and resolving relative dataset paths against the repository root. An unknown key or
   a value of the wrong type fails here with one line naming the key.
2. **Python-side settings.** The reference builds a ``TunerModelConfig`` and an
   ``AlgorithmConfig`` in Python and ``tune()`` writes them over the YAML. Here they default
   to the reference's values (:data:`REFERENCE_MODEL`, :data:`REFERENCE_ALGORITHM`); a config
   may carry its own in a top-level ``tuner:`` block (removed before Trinity reads the file).
   They are applied with the very function ``tune()`` uses (agentscope 1.0.21:
   ``agentscope.tuner._config._to_trinity_config``), so the overridden values printed are
   exactly the ones training would see.
3. **Preflight**: every problem gets one message naming the setting at fault (GPU count,
   vllm, Ray, model path, tasksets and their feature columns, NaN features, the BOTS ``m``
   against the group size, selector and operator names), then Trinity's full
   ``Config.check_and_update()``.
4. **Launch**: print the resolved config and the difference from the sibling run (random
   vs difficulty-based), apply :mod:`mathagent.compat`'s fixes (here, and through Ray's
   worker setup hook in every worker), then call ``agentscope.tuner.tune()`` with
   :func:`mathagent.agent.run_react_agent` and the run's judge (``tuner.judge`` or
   ``--judge``; :func:`mathagent.judge.gsm8k_judge` by default), carrying the YAML's
   ``explorer.rollout_model`` settings that ``tune()`` would drop.

``--dry-run`` stops before step 4's ``tune()``. It checks everything that does not need the
launch machine's GPUs (``check_and_update()`` included, with a Ray head it starts and stops
itself when none is reachable) and lists what it could not check as requirements of the
launch machine. ``tune()`` itself imports vllm (through Trinity's explorer), which is why
real training cannot start on a CPU machine.

``python -m mathagent ray {start,stop,status}`` and :func:`local_ray_head` manage a local Ray
head. Processes are stopped only by the ids and start times recorded at start (and their
descendants), never by name or folder, so other Ray clusters on the same machine are left alone.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import copy
import importlib.util
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from mathagent import paths

# --------------------------------------------------------------------------------------
# The reference launcher's Python-side settings
# --------------------------------------------------------------------------------------

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
MODEL_PATH_ENV = "TRINITY_MODEL_PATH"
TUNER_BLOCK = "tuner"

#: Where the workflow lives (imported when a plan is built). The judge is chosen per run
#: (``tuner.judge`` in the YAML or ``train --judge``) from :data:`mathagent.judge.JUDGES`.
WORKFLOW = "mathagent.agent.run_react_agent"

#: verl's attention settings. verl 0.8.0 defaults to ``flash_attention_2`` and Trinity to
#: ``use_remove_padding: true``; both need the flash-attn package, which has no wheel.
ATTN_KEY = "trainer.trainer_config.model.override_config.attn_implementation"
REMOVE_PADDING_KEY = "trainer.use_remove_padding"

#: Selectors whose choices depend on feedback and which therefore need a feedback operator.
#: Trinity's DifficultyBasedSelector falls back to this ``m`` when kwargs has none.
TRINITY_DEFAULT_M = 16

TASKSET_KEY = "buffer.explorer_input.taskset"
EVAL_KEY = "buffer.explorer_input.eval_tasksets"


class ConfigError(ValueError):
    """A config that cannot be loaded; the message is one line naming the file and key."""


def reference_settings() -> dict[str, dict[str, Any]]:
    """The reference launcher's model and algorithm settings (a fresh copy)."""
    model = dict(REFERENCE_MODEL)
    model["model_path"] = os.environ.get(MODEL_PATH_ENV, model["model_path"])
    return {"model": model, "algorithm": dict(REFERENCE_ALGORITHM)}


# --------------------------------------------------------------------------------------
# Loading: overrides, paths, Trinity's loader, tune()'s overrides
# --------------------------------------------------------------------------------------


def parse_override(text: str) -> tuple[str, Any]:
    """``"a.b.0.c=value"`` -> ``("a.b.0.c", value)`` with the value read as YAML."""
    import yaml

    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"override {text!r}: expected KEY=VALUE, e.g. buffer.batch_size=8")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {text!r}: value is not valid YAML ({exc})") from None
    return key, value


def _resolve_path(value: Any) -> Any:
    if isinstance(value, str) and value and not os.path.isabs(value):
        return str((paths.REPO_ROOT / value).resolve())
    return value


def resolve_relative_paths(raw: dict) -> dict:
    """Resolve relative dataset paths and ``checkpoint_root_dir`` against the repo root.

    Trinity would resolve them against the working directory, which differs between a
    notebook (``notebooks/``), the tests and a shell; the configs say so in their comments.
    ``raw`` is the plain-dict YAML; it is changed in place and returned.
    """
    if "checkpoint_root_dir" in raw:
        raw["checkpoint_root_dir"] = _resolve_path(raw["checkpoint_root_dir"])
    explorer_input = (raw.get("buffer") or {}).get("explorer_input") or {}
    sets = [explorer_input.get("taskset")] + list(explorer_input.get("tasksets") or []) \
        + list(explorer_input.get("eval_tasksets") or [])
    for taskset in sets:
        if isinstance(taskset, dict) and "path" in taskset:
            taskset["path"] = _resolve_path(taskset["path"])
    return raw


def _omegaconf_error(exc: BaseException, where: Path) -> ConfigError:
    """Trinity's ``Invalid configuration`` error as one line that names the key."""
    cause = exc.__cause__ or exc
    key = getattr(cause, "full_key", None)
    msg = str(getattr(cause, "msg", None) or cause).strip().splitlines()[0]
    if key:
        return ConfigError(f"{where}: invalid setting `{key}`: {msg} (Trinity-RFT load_config)")
    return ConfigError(f"{where}: {msg} (Trinity-RFT load_config)")


def load_trinity_config(path: str | Path, where: str | Path | None = None):
    """``trinity.common.config.load_config`` with its errors turned into :class:`ConfigError`.

    ``where`` is the file named in the message (the user's config when ``path`` is the
    resolved copy handed to Trinity).
    """
    from trinity.common.config import load_config

    try:
        return load_config(str(path))
    except Exception as exc:  # Trinity wraps OmegaConf's errors in a ValueError
        raise _omegaconf_error(exc, Path(where or path)) from exc


@dataclass
class LaunchPlan:
    """Everything ``train`` knows about one run before it starts.

    ``yaml_config`` is the Trinity config as the YAML (plus overrides) says;
    ``config`` is the same after ``tune()``'s Python-side overrides, before
    ``check_and_update()``; ``overridden`` lists ``(key, yaml value, value used)``.
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


class _Absent:
    def __repr__(self) -> str:
        return "(absent)"


ABSENT = _Absent()


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted ``key -> value`` pairs of a config; lists of plain values stay whole."""
    if hasattr(obj, "__dataclass_fields__"):
        obj = vars(obj)
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(obj, (list, tuple)) and any(
            isinstance(v, (dict, list, tuple)) or hasattr(v, "__dataclass_fields__") for v in obj):
        out = {}
        for i, v in enumerate(obj):
            out.update(_flatten(v, f"{prefix}.{i}"))
        return out
    if isinstance(obj, (list, tuple)):
        return {prefix: list(obj)}
    return {prefix: obj.value if isinstance(obj, Enum) else obj}


def _flat(config: Any) -> dict[str, Any]:
    """Flattened config without the workflow arguments (they hold function objects)."""
    return {k: v for k, v in _flatten(config).items() if ".workflow_args." not in f".{k}."}


def _differences(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    rows = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key, ABSENT), b.get(key, ABSENT)
        if va != vb:
            rows.append((key, va, vb))
    return rows


def flash_attn_available() -> bool:
    """Whether the flash-attn package is importable here (it has no wheel on PyPI)."""
    return importlib.util.find_spec("flash_attn") is not None


def _get_dotted(raw: dict, key: str) -> Any:
    node: Any = raw
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return ABSENT
        node = node[part]
    return node


def _set_dotted(raw: dict, key: str, value: Any) -> None:
    *parents, last = key.split(".")
    node = raw
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[last] = value


def choose_attention(raw: dict, have_flash_attn: bool | None = None) -> list[str]:
    """Fill verl's attention settings the YAML leaves unset; return notes saying what was chosen.

    With flash-attn importable verl's defaults stay (``flash_attention_2``, remove padding);
    without it the run uses PyTorch's ``sdpa`` and keeps padding, which work on any GPU.
    Settings the YAML gives are never changed (the preflight reports a conflict instead).
    """
    have = flash_attn_available() if have_flash_attn is None else have_flash_attn
    if have:
        return []
    notes = []
    for key, value in ((ATTN_KEY, "sdpa"), (REMOVE_PADDING_KEY, False)):
        if _get_dotted(raw, key) is ABSENT:
            _set_dotted(raw, key, value)
            notes.append(f"`{key}` not set and flash-attn is not installed: using {value!r}")
    return notes


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


def load_plan(config_path: str | Path, overrides: Sequence[str] = (),
              work_dir: str | Path | None = None, judge: str | None = None) -> LaunchPlan:
    """Read a config, apply overrides and the Python-side settings the way ``tune()`` does.

    ``overrides`` are ``KEY=VALUE`` strings: Trinity keys (``buffer.batch_size=8``, list
    items by index: ``buffer.explorer_input.eval_tasksets.0.path=/data/aime``) or
    ``tuner.model.<field>`` / ``tuner.algorithm.<field>`` / ``tuner.judge``. ``judge``
    (the command line's ``--judge``) overrides ``tuner.judge``; both take a name of
    :data:`mathagent.judge.JUDGES` or a dotted path. verl's attention settings the YAML leaves
    unset are filled by :func:`choose_attention`. The YAML handed to Trinity (env variables
    resolved, paths absolute, ``tuner`` block removed) is written to ``work_dir`` (by default
    a temporary folder removed when the interpreter exits) as ``trinity_config.yaml``.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from mathagent.judge import DEFAULT_JUDGE, judge_path

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

    settings = reference_settings()
    block = raw.pop(TUNER_BLOCK, None) or {}
    if not isinstance(block, dict) or set(block) - {"model", "algorithm", "judge"}:
        raise ConfigError(f"{config_path}: invalid setting `{TUNER_BLOCK}`: expected only "
                          "`model`, `algorithm` and `judge`")
    for part in ("model", "algorithm"):
        settings[part].update(block.get(part) or {})
    judge_name = str(judge or block.get("judge") or DEFAULT_JUDGE)
    try:
        judge_dotted = judge_path(judge_name)
    except ValueError as exc:
        where = "--judge" if judge else f"{config_path}: invalid setting `{TUNER_BLOCK}.judge`"
        raise ConfigError(f"{where}: {exc}") from None
    settings["judge"] = judge_name
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
        workflow_func, judge_func = _import_object(WORKFLOW), _import_object(judge_dotted)
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


def counterpart_path(config_path: str | Path) -> Path | None:
    """The sibling config of the other arm of the comparison (random <-> difficulty; bots -> random)."""
    path = Path(config_path)
    name = path.name
    for a, b in (("random", "difficulty"), ("difficulty", "random"), ("bots", "random")):
        if a in name:
            other = path.with_name(name.replace(a, b, 1))
            if other.is_file():
                return other
    return None


def config_diff(plan_a: LaunchPlan, plan_b: LaunchPlan) -> list[tuple[str, Any, Any]]:
    """``(key, value in a, value in b)`` for every setting Trinity would receive differently."""
    return _differences(_flat(plan_a.config), _flat(plan_b.config))


# --------------------------------------------------------------------------------------
# Ray: a local head we start, inspect and stop ourselves
# --------------------------------------------------------------------------------------


def _ray_executable() -> str:
    local = Path(sys.executable).with_name("ray")
    found = str(local) if local.exists() else shutil.which("ray")
    if not found:
        raise RuntimeError("the `ray` command is not installed (pip install 'ray[default]')")
    return found


def _tcp_open(address: str, timeout: float = 2.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def find_ray(address: str | None = "auto") -> str | None:
    """The ``host:port`` of a reachable Ray cluster for ``address``, or None.

    ``auto`` (Trinity's default ``cluster.ray_address``) means what it means to
    ``ray.init``: ``RAY_ADDRESS``, else the cluster last started on this machine.
    """
    if address in (None, "", "auto"):
        try:
            from ray._private.services import get_ray_address_from_environment

            address = get_ray_address_from_environment("auto", None)
        except Exception:
            return None
        if not address or address == "auto":
            return None
    address = address.removeprefix("ray://")
    return address if _tcp_open(address) else None


@dataclass
class RayHead:
    """A Ray head started by :func:`start_ray_head`: its address and the processes to stop.

    ``started`` holds ``[pid, create_time]`` of every process of the head when ``ray start``
    returned (its process group and their descendants; ``create_time`` is psutil's start
    time of the process). A process counts as this head's only while that pid still has that
    start time, so a pid the kernel has given to another process since, a process that
    merely mentions the session folder, or one that joined the recorded process group is
    never signalled. Processes Ray starts later (workers, agents) are found as descendants
    of recorded processes that pass this check. ``pgid`` (the group of the ``ray start``
    call) is kept for reports only; ``temp_dir`` is the head's session root, removed on stop
    when ``owns_temp_dir`` (a private folder :func:`start_ray_head` made).
    """

    address: str
    pgid: int
    temp_dir: str
    owns_temp_dir: bool = False
    started: list[list[float]] = field(default_factory=list)

    #: Prefix of the private session folders :func:`start_ray_head` makes; only such a
    #: folder is ever removed (a record edited by hand cannot point the removal elsewhere).
    TEMP_PREFIX = "mathagent-ray-"  # not a field: no annotation

    @staticmethod
    def group_snapshot(pgid: int) -> list[list[float]]:
        """``[pid, create_time]`` of the live processes of group ``pgid`` and their descendants.

        Only meaningful while the caller knows the group is its own, e.g. while the group
        leader is its child and not yet reaped (then no other process can have that pid,
        and only processes of the leader's session, its descendants, can be in the group).
        """
        import psutil

        found: dict[int, Any] = {}
        for proc in psutil.process_iter():
            try:
                if proc.pid != os.getpid() and os.getpgid(proc.pid) == pgid:
                    found[proc.pid] = proc
            except (psutil.Error, OSError):
                continue
        for proc in list(found.values()):
            try:
                for child in proc.children(recursive=True):
                    found.setdefault(child.pid, child)
            except psutil.Error:
                continue
        rows = []
        for pid, proc in sorted(found.items()):
            try:
                if proc.status() != psutil.STATUS_ZOMBIE:
                    rows.append([pid, proc.create_time()])
            except psutil.Error:
                continue
        return rows

    def _verified(self) -> list[Any]:
        """The recorded processes that are still the same processes (pid and start time)."""
        from mathagent.reaper import same_process

        procs = []
        for entry in self.started:
            try:
                pid, create_time = int(entry[0]), float(entry[1])
            except (TypeError, ValueError, IndexError):
                continue
            proc = same_process(pid, create_time)
            if proc is not None and pid != os.getpid():
                procs.append(proc)
        return procs

    def _live(self) -> dict[int, Any]:
        """``pid -> psutil.Process`` of the verified processes and their live descendants."""
        import psutil

        found = {p.pid: p for p in self._verified()}
        for proc in list(found.values()):
            try:
                children = proc.children(recursive=True)
            except psutil.Error:
                continue
            for child in children:
                with contextlib.suppress(psutil.Error):
                    if child.pid != os.getpid() and child.status() != psutil.STATUS_ZOMBIE:
                        found.setdefault(child.pid, child)
        return found

    def processes(self) -> list[int]:
        """Ids of the live processes of this head: recorded ones (same start time) and
        their descendants."""
        return sorted(self._live())

    def alive(self) -> bool:
        return bool(self.processes())

    def resources(self, timeout: float = 120.0) -> dict[str, float]:
        """``ray.cluster_resources()`` of this head, asked from a short-lived driver process."""
        return cluster_resources(self.address, timeout)

    def stop(self, timeout: float = 10.0) -> list[int]:
        """Terminate this head's processes (SIGTERM, then SIGKILL); return the ids stopped.

        The whole tree is listed before the first signal (a worker whose raylet exits first
        is no longer its descendant); psutil checks each pid's start time again right
        before signalling it. Processes spawned during the shutdown are caught by a second
        round. Then the private session folder is removed (:meth:`remove_temp_dir`).
        """
        import psutil

        stopped: set[int] = set()
        for _ in range(3):
            procs = list(self._live().values())
            if not procs:
                break
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    proc.terminate()
            stopped.update(p.pid for p in procs)
            _, alive = psutil.wait_procs(procs, timeout=timeout)
            for proc in alive:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            psutil.wait_procs(alive, timeout=5)
        self.remove_temp_dir()
        return sorted(stopped)

    def remove_temp_dir(self) -> bool:
        """Remove the private session folder (only one :func:`start_ray_head` made)."""
        folder = Path(self.temp_dir) if self.temp_dir else None
        if not (self.owns_temp_dir and folder and folder.name.startswith(self.TEMP_PREFIX)
                and folder.is_dir()):
            return False
        shutil.rmtree(folder, ignore_errors=True)
        return True

    def to_json(self) -> dict[str, Any]:
        return {"address": self.address, "pgid": self.pgid, "temp_dir": self.temp_dir,
                "owns_temp_dir": self.owns_temp_dir, "started": self.started}



def cluster_resources(address: str, timeout: float = 120.0) -> dict[str, float]:
    """``ray.cluster_resources()`` of the cluster at ``address``, asked from a short-lived
    driver process (so this process does not stay connected to it)."""
    code = (f"import json, ray; ray.init(address={address!r}, logging_level='ERROR', "
            "log_to_driver=False); print(json.dumps(ray.cluster_resources())); "
            "ray.shutdown()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=timeout, env=_ray_env())
    if out.returncode != 0:
        raise RuntimeError(f"cannot reach the Ray cluster at {address}: "
                           f"{out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _ray_env() -> dict[str, str]:
    """Environment of the head and of drivers talking to it.

    Ray 2.60 switches a head to token authentication when ``~/.ray/auth_token`` exists,
    but a driver given an explicit address does not pick the token up and is refused. The
    heads started here are single-machine heads (tutorial, dry run, one-node launch), so
    their auth mode is pinned to ``disabled`` on both sides and the outcome does not depend
    on what else ran on the machine. Ray listens on all interfaces: on a shared network,
    start the head yourself with ``RAY_AUTH_MODE=token ray start --head``.
    """
    env = dict(os.environ)
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    env["RAY_AUTH_MODE"] = "disabled"
    env.pop("RAY_ADDRESS", None)
    return env


def start_ray_head(num_cpus: int | None = 1, port: int | None = None, temp_dir: str | None = None,
                   object_store_memory: int | None = None, timeout: float = 180.0,
                   attempts: int = 3, num_gpus: int | None = None) -> RayHead:
    """Start a local Ray head like ``ray start --head --num-cpus=1 --include-dashboard=false``.

    ``num_cpus`` / ``num_gpus`` None let Ray offer every CPU and GPU of the machine (what a
    training run needs); the tutorial's and the tests' heads pass 1 CPU and stay small.

    A single-machine head without token authentication (see :func:`_ray_env`); for a
    cluster of several machines use ``ray start`` itself. ``temp_dir=None`` makes a private
    session folder (removed on stop). The returned :class:`RayHead` records the ids and
    start times of the head's processes, the only processes its ``stop()`` signals. Ray
    gives its raylet 30 s to register; on a busy machine that can run out, so a failed
    start is cleaned up (the processes that ``ray start`` left are stopped) and retried up
    to ``attempts`` times. Returns once the head answers on its port.
    """
    errors = []
    for _ in range(max(1, attempts)):
        try:
            return _start_ray_head_once(num_cpus, port, temp_dir, object_store_memory, timeout,
                                        num_gpus)
        except RuntimeError as exc:
            errors.append(str(exc))
            if "timed out during startup" not in str(exc):
                break
    raise RuntimeError(errors[-1] + (f"\n(after {len(errors)} attempts)" if len(errors) > 1
                                     else ""))


def _start_ray_head_once(num_cpus: int | None, port: int | None, temp_dir: str | None,
                         object_store_memory: int | None, timeout: float,
                         num_gpus: int | None = None) -> RayHead:
    """One ``ray start --head`` in a new session; record its processes before reaping it.

    ``ray start`` runs in a session and process group of its own whose id is its pid, and
    Ray's daemons stay in that group. Until ``ray start`` is reaped its pid cannot be
    reused, so every process in that group is one it started: the group (and its
    descendants) is recorded then, with start times (:meth:`RayHead.group_snapshot`), and
    the group id is never used for signalling afterwards.
    """
    import threading

    from mathagent.serving import free_port

    port = port or free_port()
    owns = temp_dir is None
    temp_dir = temp_dir or tempfile.mkdtemp(prefix=RayHead.TEMP_PREFIX, dir="/tmp")
    cmd = [_ray_executable(), "start", "--head", "--include-dashboard=false", f"--port={port}",
           f"--temp-dir={temp_dir}", "--disable-usage-stats"]
    if num_cpus is not None:
        cmd.append(f"--num-cpus={num_cpus}")
    if num_gpus is not None:
        cmd.append(f"--num-gpus={num_gpus}")
    if object_store_memory:
        cmd.append(f"--object-store-memory={int(object_store_memory)}")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, env=_ray_env())
    head = RayHead(address="", pgid=proc.pid, temp_dir=temp_dir, owns_temp_dir=owns)
    chunks: list[bytes] = []

    def read_output() -> None:
        for chunk in iter(lambda: proc.stdout.read1(65536), b""):
            chunks.append(chunk)

    reader = threading.Thread(target=read_output, daemon=True)
    reader.start()
    code = None
    try:
        deadline = time.monotonic() + timeout
        while code is None and time.monotonic() < deadline:
            # WNOWAIT: learn the exit status but leave `ray start` unreaped (its pid held)
            info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            if info is None:
                time.sleep(0.1)
            else:
                code = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
        if code is None:
            proc.kill()  # our unreaped child: the pid is still ours
        head.started = RayHead.group_snapshot(proc.pid)
    except BaseException:  # Ctrl-C while starting: leave nothing behind
        proc.kill()
        head.started = RayHead.group_snapshot(proc.pid)
        proc.wait()
        head.stop()
        raise
    proc.wait()
    reader.join(timeout=5)
    output = b"".join(chunks).decode("utf-8", errors="replace")
    if code is None:
        head.stop()
        raise RuntimeError(f"`{' '.join(cmd)}` did not finish within {timeout:.0f} s")
    if code != 0:
        head.stop()
        tail = "\n".join(output.strip().splitlines()[-3:])
        raise RuntimeError(f"`{' '.join(cmd)}` failed (exit {code}): {tail}")
    address_file = Path(temp_dir) / "ray_current_cluster"
    head.address = (address_file.read_text().strip() if address_file.is_file()
                    else f"127.0.0.1:{port}")
    deadline = time.monotonic() + 30
    while not _tcp_open(head.address) and time.monotonic() < deadline:
        time.sleep(0.5)
    return head



def visible_gpus() -> int:
    """GPUs this process sees (``torch.cuda.device_count()``; 0 without torch)."""
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:
        return 0


def vllm_importable() -> bool:
    """Whether vllm can be imported here (found, not imported: importing it is slow)."""
    return importlib.util.find_spec("vllm") is not None


@contextlib.contextmanager
def local_ray_head(num_cpus: int = 1, **kwargs: Any) -> Iterator[RayHead]:
    """A Ray head for the duration of a ``with`` block; every process of it is stopped after."""
    head = start_ray_head(num_cpus=num_cpus, **kwargs)
    try:
        yield head
    finally:
        head.stop()


@contextlib.contextmanager
def ray_for(address: str | None) -> Iterator[tuple[str, RayHead | None]]:
    """The reachable cluster at ``address``, or a temporary local head when there is none.

    Yields ``(address, head)``; ``head`` is None when an existing cluster was used.
    """
    found = find_ray(address)
    if found:
        yield found, None
        return
    with local_ray_head(object_store_memory=100 * 1024**2) as head:
        yield head.address, head


def ray_state_file() -> Path:
    """Where ``ray start`` records the head it started, for ``ray stop`` / ``ray status``."""
    return paths.runs_dir() / "ray" / "head.json"


def ray_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["start", "stop", "status"],
                        help="start a local head, stop the head started here, or report it")
    parser.add_argument("--num-cpus", type=int, default=None,
                        help="CPUs the head offers to tasks (default: all of this machine's; "
                             "Trinity reserves 3 per trainer GPU and 1 per vLLM engine)")
    parser.add_argument("--num-gpus", type=int, default=None,
                        help="GPUs the head offers (default: all it detects)")
    parser.add_argument("--port", type=int, default=None, help="GCS port (default: a free port)")
    parser.add_argument("--temp-dir", default=None,
                        help="Ray session root, a folder for this head alone (default: a "
                             "private folder under /tmp, removed on stop); not /tmp/ray, "
                             "which every other Ray cluster on the machine uses. Pass "
                             "cluster.ray_address=<the printed address> to `train`")
    parser.add_argument("--object-store-memory", type=int, default=None,
                        help="object store size in bytes (default: Ray's choice)")
    parser.add_argument("--state-file", type=Path, default=None,
                        help="where the head's address and the ids and start times of its "
                             "processes are recorded; `stop` signals only those processes "
                             "and their descendants (default runs/ray/head.json)")


def ray_command(args: argparse.Namespace) -> int:
    """``ray start|stop|status`` for the head recorded in the state file.

    A record whose processes have all exited, or whose pids now belong to other processes
    (different start time), is stale: it is reported and removed and nothing is signalled.
    """
    state = args.state_file or ray_state_file()
    recorded = None
    if state.is_file():
        try:
            recorded = RayHead(**json.loads(state.read_text()))
        except (ValueError, TypeError) as exc:
            print(f"error: {state}: not a head record written by `python -m mathagent ray "
                  f"start` ({type(exc).__name__}: {exc}); remove the file if no head started "
                  "here is running", file=sys.stderr)
            return 2
        if not recorded.processes():
            recorded.remove_temp_dir()
            state.unlink(missing_ok=True)
            print(f"{state}: the head recorded there ({recorded.address or 'no address'}) is "
                  "not running (its processes have exited or their ids now belong to other "
                  "processes); removed the stale record, stopped nothing", file=sys.stderr)
            if args.action == "stop":
                return 0
            if args.action == "status":
                return 1
            recorded = None
    if args.action == "start":
        if recorded is not None:
            print(f"a head started here is already running at {recorded.address} "
                  f"(stop it with `python -m mathagent ray stop --state-file {state}`)",
                  file=sys.stderr)
            return 1
        from tqdm.auto import tqdm

        try:
            with tqdm(total=1, desc="starting Ray head", file=sys.stderr) as bar:
                head = start_ray_head(num_cpus=args.num_cpus, num_gpus=args.num_gpus,
                                      port=args.port, temp_dir=args.temp_dir,
                                      object_store_memory=args.object_store_memory)
                bar.update()
        except RuntimeError as exc:  # the processes of the failed start are stopped already
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            print("error: " + (lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"),
                  file=sys.stderr)
            return 1
        state.parent.mkdir(parents=True, exist_ok=True)
        state.write_text(json.dumps(head.to_json(), indent=2) + "\n")
        print(f"Ray head running at {head.address} ({len(head.started)} processes recorded "
              f"in {state}, session root {head.temp_dir})")
        print(f"use it with: python -m mathagent train --config ... "
              f"cluster.ray_address={head.address}")
        return 0
    if recorded is None:
        print(f"no head recorded in {state}: nothing started with `python -m mathagent ray "
              "start` is running", file=sys.stderr)
        return 1
    if args.action == "stop":
        stopped = recorded.stop()
        left = recorded.processes()
        print(f"stopped the Ray head at {recorded.address}: {len(stopped)} processes "
              f"({', '.join(map(str, stopped)) or 'none were running'})")
        if left:
            print(f"still running: {left} (the record {state} is kept; run `ray stop` again)",
                  file=sys.stderr)
            return 1
        state.unlink(missing_ok=True)
        return 0
    pids = recorded.processes()
    try:
        resources = recorded.resources()
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"error: the head recorded in {state} runs ({len(pids)} processes) but does "
              f"not answer: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    print(f"Ray head at {recorded.address}: {len(pids)} processes started by `ray start` "
          f"(session root {recorded.temp_dir})")
    for key in sorted(resources):
        if not key.startswith("node:"):
            print(f"  {key}: {resources[key]:g}")
    return 0



# --------------------------------------------------------------------------------------
# Preflight
# --------------------------------------------------------------------------------------


@dataclass
class Preflight:
    """Outcome of :func:`preflight`: what passed, what is wrong, what the launch machine needs."""

    passed: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    requirements: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    checked_config: Any = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def report(self) -> str:
        lines = [f"  ok    {m}" for m in self.passed]
        lines += [f"  FAIL  {m}" for m in self.problems]
        lines += [f"  note  {m}" for m in self.notes]
        if self.requirements:
            lines += ["", "Requirements of the launch machine (not checkable here):"]
            lines += [f"  - {m}" for m in self.requirements]
        return "\n".join(lines)


HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def hub_status(repo_id: str, timeout: float = 3.0) -> str:
    """``"cached"``, ``"available"``, ``"not-found"`` or ``"unreachable"`` for a hub model id."""
    try:
        from huggingface_hub import try_to_load_from_cache

        if isinstance(try_to_load_from_cache(repo_id, "config.json"), str):
            return "cached"
    except Exception:
        pass
    from mathagent.tasks import hub_offline, probe_hub

    if hub_offline():
        return "unreachable"
    code = probe_hub(f"models/{repo_id}", timeout)
    if code is None:
        return "unreachable"
    return "available" if code < 400 or code in (401, 403) else "not-found"


def _selector_config(taskset: Any) -> Any:
    return taskset.task_selector if taskset.task_selector is not None else taskset.data_selector


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
    cls = None
    try:
        cls = SELECTORS.get(name)
    except Exception as exc:
        result.problems.append(
            f"{key}.selector_type: selector {name!r} does not resolve ({type(exc).__name__}: "
            f"{exc}); use one of {', '.join(SELECTORS._default_mapping)} or an importable "
            f"dotted path such as {BOTS_PATH}")
    else:
        result.passed.append(f"selector {name!r} resolves to {cls.__module__}.{cls.__name__}")
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
        try:
            op_cls = EXPERIENCE_OPERATORS.get(op.name)
        except Exception as exc:
            result.problems.append(
                f"{op_key}: operator {op.name!r} does not resolve ({type(exc).__name__}: {exc}); "
                f"use one of {', '.join(EXPERIENCE_OPERATORS._default_mapping)} or an "
                "importable dotted path")
            continue
        result.passed.append(
            f"operator {op.name!r} resolves to {op_cls.__module__}.{op_cls.__name__}")
        if _is_feedback_operator(op.name, op_cls):
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


def check_model(config: Any, result: Preflight, dry_run: bool) -> None:
    """A local Hugging Face folder, a cached hub id, or a hub id the hub can serve."""
    path = config.model.model_path
    key = "model.model_path"
    if not path:
        result.problems.append(f"{key}: not set")
        return
    local = Path(path).expanduser()
    if local.exists():
        if local.is_dir() and (local / "config.json").is_file():
            result.passed.append(f"model {path}: local Hugging Face folder")
        else:
            result.problems.append(f"{key}: {path} exists but is not a Hugging Face model "
                                   "folder (no config.json); vLLM and the trainer need one")
        return
    if not HUB_ID.match(path):
        result.problems.append(f"{key}: {path} does not exist (and is not a hub id like "
                               "Qwen/Qwen3-0.6B); set TRINITY_MODEL_PATH or "
                               "tuner.model.model_path=...")
        return
    status = hub_status(path)
    if status in ("cached", "available"):
        result.passed.append(f"model {path}: {'in the local hub cache' if status == 'cached' else 'served by the Hugging Face hub'}")
    elif status == "not-found":
        result.problems.append(f"{key}: {path} is neither a local folder nor a model on the "
                               "Hugging Face hub")
    elif dry_run:
        result.requirements.append(f"model {path}: downloadable from the Hugging Face hub or "
                                   "cached (the hub is unreachable here)")
    else:
        result.problems.append(f"{key}: {path} is not a local folder and the Hugging Face hub "
                               "is unreachable; download it and set TRINITY_MODEL_PATH or "
                               "tuner.model.model_path to the folder")


def check_machine(config: Any, result: Preflight, dry_run: bool) -> None:
    """GPU count against the cluster size, and vllm."""
    cluster = config.cluster
    have = visible_gpus()
    need_node, nodes = cluster.gpu_per_node, cluster.node_num
    if not need_node or not nodes:
        if dry_run:
            result.problems.append(
                "cluster.node_num / cluster.gpu_per_node: set both explicitly; otherwise Trinity "
                "asks Ray and, on a machine without GPUs, fails with ZeroDivisionError")
        else:
            result.notes.append("cluster size is taken from Ray at launch")
    elif dry_run:
        result.requirements.append(
            f"{nodes * need_node} GPU(s): cluster.node_num={nodes} x cluster.gpu_per_node="
            f"{need_node} (this machine has {have})")
    elif have < need_node:
        result.problems.append(
            f"cluster.gpu_per_node: the config needs {need_node} GPU(s) per node "
            f"({nodes * need_node} in all) but this machine has {have} "
            "(torch.cuda.device_count())")
    else:
        result.passed.append(f"{have} GPU(s) visible, {need_node} needed per node")

    engine = config.explorer.rollout_model.engine_type
    if not engine.startswith("vllm"):
        return
    if vllm_importable():
        result.passed.append("vllm is importable")
    elif dry_run:
        result.requirements.append("vllm importable (pip install 'trinity-rft[vllm]'; CUDA only)"
                                   " - it is not installed here")
    else:
        result.problems.append("vllm is not importable: Trinity's explorer serves the rollout "
                               "model with it; pip install 'trinity-rft[vllm]' on a CUDA machine")


#: The upstream versions this package's launch path was run with (FACTS of the H200 runs).
TESTED_VERSIONS = {"trinity-rft": "0.6.0", "verl": "0.8.0", "agentscope": "1.0.21",
                   "vllm": "0.23.0"}


def check_versions(config: Any, result: Preflight) -> None:
    """Upstream versions against the tested ones; the colocate fix's version gate."""
    from mathagent.compat import installed_version

    found = {name: installed_version(name) for name in TESTED_VERSIONS}
    off = [f"{n} {v} (tested: {TESTED_VERSIONS[n]})" for n, v in found.items()
           if v is not None and v != TESTED_VERSIONS[n]]
    if off:
        result.notes.append("versions differ from the tested set: " + ", ".join(off))
    trinity = found["trinity-rft"]
    if config.mode == "colocate" and trinity not in (None, "0.6.0"):
        result.notes.append(
            f"mode colocate: the fix for Trinity-RFT#602 (one-GPU deadlock) is for 0.6.0 and is "
            f"skipped for trinity-rft {trinity}; if this version still reserves a GPU for the "
            "vLLM engine, the trainer will wait for a second GPU forever")


def check_colocate_switch(checked_config: Any, result: Preflight) -> None:
    """In colocate mode the Trinity-RFT#602 fix needs ``rollout_model.cuda_visible_devices``.

    Trinity 0.6.0 sets it (to ``"0"``) only while capping ``gpu_memory_utilization`` from above
    0.25; a config asking for 0.25 or less leaves it unset, the fix cannot tell that the engine
    shares the trainer's GPU, and the run waits for a second GPU forever.
    """
    from mathagent.compat import installed_version

    rollout = checked_config.explorer.rollout_model
    if (checked_config.mode != "colocate" or rollout.cuda_visible_devices is not None
            or installed_version("trinity-rft") != "0.6.0"):
        return
    result.problems.append(
        f"explorer.rollout_model.gpu_memory_utilization={rollout.gpu_memory_utilization}: in "
        "colocate mode Trinity-RFT 0.6.0 marks the engine as sharing the GPU only when this is "
        "above 0.25 (it then caps it at 0.25), and without that mark the one-GPU run deadlocks "
        "(Trinity-RFT#602); remove the setting, or set "
        "explorer.rollout_model.cuda_visible_devices=0")


def check_attention(config: Any, result: Preflight, dry_run: bool) -> None:
    """verl settings that need flash-attn, against whether flash-attn is importable."""
    verl_config = _flatten_plain(getattr(config.trainer, "trainer_config", None) or {})
    override = _get_dotted(verl_config, "model.override_config.attn_implementation")
    asks = []
    if override in (ABSENT, None, "flash_attention_2"):
        shown = "flash_attention_2 (verl's default)" if override in (ABSENT, None) else override
        asks.append(f"`{ATTN_KEY}` is {shown}")
    if config.trainer.use_remove_padding:
        asks.append(f"`{REMOVE_PADDING_KEY}` is true")
    if not asks:
        result.passed.append("attention: sdpa without padding removal (needs no flash-attn)")
        return
    need = "; ".join(asks)
    if flash_attn_available():
        result.passed.append(f"flash-attn importable ({need})")
    elif dry_run:
        result.requirements.append(f"flash-attn importable ({need}); or set "
                                   f"{ATTN_KEY}=sdpa {REMOVE_PADDING_KEY}=false")
    else:
        result.problems.append(f"{need}, which needs the flash-attn package, and it is not "
                               f"installed (it has no wheel); set {ATTN_KEY}=sdpa and "
                               f"{REMOVE_PADDING_KEY}=false")


def _flatten_plain(obj: Any) -> Any:
    """Dataclasses and OmegaConf nodes as plain dicts (for :func:`_get_dotted`)."""
    if hasattr(obj, "__dataclass_fields__"):
        return {k: _flatten_plain(getattr(obj, k)) for k in obj.__dataclass_fields__}
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(obj, DictConfig):
            return OmegaConf.to_container(obj, resolve=True)
    except ImportError:
        pass
    if isinstance(obj, dict):
        return {k: _flatten_plain(v) for k, v in obj.items()}
    return obj


#: CPUs verl's FSDP trainer pool reserves per trainer GPU (``ResourcePoolManager``'s
#: ``max_colocate_count``, verl 0.8.0), and each vLLM engine's placement-group bundle.
TRAINER_CPUS_PER_GPU = 3
ENGINE_CPUS = 1


def trinity_reservation(config: Any) -> tuple[float, float, list[str]]:
    """``(CPUs, GPUs, parts)`` that Trinity's actors reserve in Ray for a checked config.

    Ray places a placement group only when all its bundles fit, and Trinity waits for it
    without a timeout, so a head offering less makes a run hang instead of failing. In
    ``colocate`` mode the engine reserves nothing (with the Trinity-RFT#602 fix) and the
    trainer one GPU; in ``both`` mode each engine reserves a bundle of ``gpu_per_engine`` GPUs
    and 1 CPU, and the trainer pool 1 GPU and 3 CPUs per trainer GPU.
    """
    cluster, explorer = config.cluster, config.explorer
    cpus = gpus = 0.0
    parts = []
    if config.mode in ("both", "explore", "bench", "serve"):
        models = [explorer.rollout_model, *explorer.auxiliary_models]
        engines = sum(m.engine_num * m.nnodes for m in models if m.gpu_per_engine)
        engine_gpus = sum(m.engine_num * m.gpu_per_engine for m in models)
        cpus += engines * ENGINE_CPUS
        gpus += engine_gpus
        parts.append(f"{engines} vLLM engine(s): {engine_gpus:g} GPU, {engines * ENGINE_CPUS} CPU")
    if config.mode in ("both", "train", "colocate"):
        n = cluster.trainer_gpu_num or 0
        cpus += n * TRAINER_CPUS_PER_GPU
        gpus += n
        parts.append(f"trainer on {n} GPU(s): {n} GPU, {n * TRAINER_CPUS_PER_GPU} CPU")
    if config.mode == "colocate":
        parts.append("vLLM engine shares the trainer's GPU (no reservation)")
    return cpus, gpus, parts


def check_ray_resources(config: Any, address: str, result: Preflight,
                        resources: dict[str, float] | None = None) -> None:
    """The Ray cluster's CPUs and GPUs against :func:`trinity_reservation`."""
    need_cpu, need_gpu, parts = trinity_reservation(config)
    if resources is None:
        try:
            resources = cluster_resources(address)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            result.problems.append(f"cluster.ray_address: {exc}")
            return
    have_cpu, have_gpu = resources.get("CPU", 0.0), resources.get("GPU", 0.0)
    what = f"Trinity reserves {need_cpu:g} CPU and {need_gpu:g} GPU ({'; '.join(parts)})"
    if have_cpu < need_cpu or have_gpu < need_gpu:
        result.problems.append(
            f"Ray cluster at {address} offers {have_cpu:g} CPU and {have_gpu:g} GPU, but {what}; "
            "the run would wait forever. Restart the head with `python -m mathagent ray stop` "
            "and `python -m mathagent ray start` (all CPUs and GPUs by default)")
    else:
        result.passed.append(f"Ray cluster offers {have_cpu:g} CPU and {have_gpu:g} GPU; {what}")


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


# --------------------------------------------------------------------------------------
# Printing
# --------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if callable(value):
        return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', value)}"
    return value


def summarize_config(config: Any) -> dict[str, Any]:
    """The settings of a (checked) Trinity config that matter for this tutorial, as plain data."""
    bi = config.buffer.explorer_input
    tasksets = bi.tasksets or ([bi.taskset] if bi.taskset else [])
    rm = config.explorer.rollout_model

    def taskset(t: Any) -> dict[str, Any]:
        sel = _selector_config(t)
        out = {"name": t.name, "path": t.path, "split": t.split, "repeat_times": t.repeat_times,
               "workflow": t.default_workflow_type,
               "workflow_func": _plain(t.workflow_args.get("workflow_func")),
               "judge_func": _plain(t.workflow_args.get("judge_func"))}
        if not t.is_eval:
            out["data_selector"] = {"selector_type": sel.selector_type, "seed": sel.seed,
                                    "feature_keys": list(sel.feature_keys),
                                    "kwargs": dict(sel.kwargs)}
        return out

    return {
        "mode": config.mode, "project": config.project, "name": config.name,
        "checkpoint_job_dir": config.checkpoint_job_dir or config.get_checkpoint_job_dir(),
        "model": {k: getattr(config.model, k) for k in (
            "model_path", "max_model_len", "max_prompt_tokens", "max_response_tokens",
            "temperature")},
        "algorithm": {"algorithm_type": config.algorithm.algorithm_type,
                      "repeat_times": config.algorithm.repeat_times,
                      "lr": config.algorithm.optimizer.lr,
                      "advantage_fn": config.algorithm.advantage_fn,
                      "policy_loss_fn": config.algorithm.policy_loss_fn},
        "cluster": {k: getattr(config.cluster, k) for k in (
            "ray_address", "node_num", "gpu_per_node", "explorer_gpu_num", "trainer_gpu_num")},
        "buffer": {"batch_size": config.buffer.batch_size,
                   "train_batch_size": config.buffer.train_batch_size,
                   "total_epochs": config.buffer.total_epochs,
                   "tasksets": [taskset(t) for t in tasksets],
                   "eval_tasksets": [taskset(t) for t in bi.eval_tasksets]},
        "data_processor.experience_pipeline.operators": [
            op.name for op in config.data_processor.experience_pipeline.operators],
        "explorer": {"eval_interval": config.explorer.eval_interval,
                     "runner_per_model": config.explorer.runner_per_model,
                     "max_repeat_times_per_runner": config.explorer.max_repeat_times_per_runner,
                     "max_timeout": config.explorer.max_timeout,
                     "rollout_model": {k: getattr(rm, k) for k in (
                         "model_path", "engine_num", "tensor_parallel_size",
                         "gpu_memory_utilization", "enable_openai_api", "enable_history",
                         "enable_auto_tool_choice", "tool_call_parser", "reasoning_parser",
                         "max_model_len", "max_response_tokens", "enforce_eager",
                         "extra_engine_args")}},
        "synchronizer": {k: _plain(getattr(config.synchronizer, k)) for k in (
            "sync_style", "sync_method", "sync_interval", "sync_timeout")},
        "trainer": {k: getattr(config.trainer, k) for k in (
            "save_interval", "use_dynamic_bsz", "ulysses_sequence_parallel_size",
            "max_token_len_per_gpu")},
        "monitor": {"monitor_type": config.monitor.monitor_type,
                    "cache_dir": config.monitor.cache_dir},
    }


def format_yaml(data: Any) -> str:
    import yaml

    def clean(x: Any) -> Any:
        if isinstance(x, dict):
            return {str(k): clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        return _plain(x)

    return yaml.safe_dump(clean(data), sort_keys=False, width=100)


def format_changes(rows: list[tuple[str, Any, Any]], left: str, right: str) -> str:
    """Aligned ``key: left -> right`` lines."""
    if not rows:
        return "  (none)"
    width = max(len(k) for k, _, _ in rows)
    out = [f"  {'setting':<{width}}  {left} -> {right}"]
    out += [f"  {k:<{width}}  {_plain(a)!r} -> {_plain(b)!r}" for k, a, b in rows]
    return "\n".join(out)


#: What the settings of the two reference configs mean (``settings_table`` rows).
SETTING_NOTES: dict[str, str] = {
    "mode": "both: explorer and trainer on their own GPUs; colocate: one GPU, taking turns",
    "name": "run name; logs and checkpoints go to <checkpoint_root_dir>/<project>/<name>",
    "algorithm.algorithm_type": "multi_step_grpo: every model call of an agent run is one "
                                "experience carrying the run's reward",
    "algorithm.repeat_times": "GRPO group size n: rollouts per task per step",
    "algorithm.optimizer.lr": "learning rate of the policy",
    "model.model_path": "policy to fine-tune (local folder or hub id)",
    "model.max_model_len": "prompt + response tokens the engines accept",
    "model.max_response_tokens": "longest generation per model call",
    "model.temperature": "sampling temperature of rollouts",
    "cluster.node_num": "machines in the Ray cluster",
    "cluster.gpu_per_node": "GPUs per machine",
    "buffer.batch_size": "tasks per explore step (x repeat_times rollouts)",
    "buffer.total_epochs": "passes over the taskset",
    f"{TASKSET_KEY}.path": "training taskset folder (parquet per split)",
    f"{TASKSET_KEY}.data_selector.selector_type": "which tasks each step trains on",
    f"{TASKSET_KEY}.data_selector.feature_keys": "reference pass-rate columns (weak, strong)",
    f"{TASKSET_KEY}.data_selector.kwargs.m": "pseudo-count of one feedback value (= n)",
    f"{TASKSET_KEY}.data_selector.kwargs.lamb": "forgetting rate of the Beta posterior",
    f"{TASKSET_KEY}.data_selector.kwargs.rho": "weight of the reference-interpolated evidence",
    f"{TASKSET_KEY}.data_selector.kwargs.target_reward": "pass rate the selector aims for",
    f"{TASKSET_KEY}.data_selector.kwargs.tau": "0: top-B by score; > 0: softmax sampling",
    f"{TASKSET_KEY}.data_selector.kwargs.do_sample": "Thompson sampling from the posterior",
    f"{EVAL_KEY}.0.path": "held-out eval set (AIME-24 in the reference)",
    "data_processor.experience_pipeline.operators.0.name": "operator computing per-task pass "
                                                           "rates for the selector's feedback",
    "explorer.eval_interval": "evaluate every this many steps (and at step 0)",
    "explorer.runner_per_model": "agent runs in flight per inference engine",
    "explorer.max_timeout": "seconds an agent run may take",
    "explorer.rollout_model.engine_num": "vLLM engines serving rollouts",
    "explorer.rollout_model.tensor_parallel_size": "GPUs per engine",
    "explorer.rollout_model.enable_openai_api": "serve an OpenAI-compatible API (the agent "
                                                "calls the model through it)",
    "explorer.rollout_model.enable_history": "record every call so it becomes an experience",
    "explorer.rollout_model.tool_call_parser": "how vLLM parses tool calls (hermes for Qwen)",
    "explorer.rollout_model.reasoning_parser": "how vLLM splits <think> blocks off",
    "synchronizer.sync_style": "who decides when weights move from trainer to explorer",
    "synchronizer.sync_method": "nccl: GPU-to-GPU broadcast of the new weights",
    "synchronizer.sync_interval": "steps between weight syncs (explorer may run ahead)",
    "trainer.save_interval": "steps between checkpoints",
    "trainer.use_dynamic_bsz": "pack micro-batches by token count",
    "monitor.monitor_type": "where metrics go (TensorBoard event files)",
}


def settings_table(plans: dict[str, LaunchPlan], keys: Sequence[str] | None = None):
    """The plans' values side by side with what each setting means (a DataFrame).

    Columns: ``setting``, ``meaning``, then one per plan label. ``keys`` defaults to
    :data:`SETTING_NOTES`; values are the ones Trinity receives (after tune()'s settings).
    """
    import pandas as pd

    flats = {label: _flat(plan.config) for label, plan in plans.items()}
    rows = []
    for key in keys or SETTING_NOTES:
        values = {label: flat.get(key, ABSENT) for label, flat in flats.items()}
        cells = {label: "" if v is ABSENT else _plain(v) for label, v in values.items()}
        rows.append({"setting": key, "meaning": SETTING_NOTES.get(key, ""), **cells})
    return pd.DataFrame(rows)


def changes_table(rows: list[tuple[str, Any, Any]], left: str, right: str):
    """``(key, a, b)`` rows as a DataFrame with columns ``setting, <left>, <right>``."""
    import pandas as pd

    return pd.DataFrame([{"setting": k, left: "" if a is ABSENT else _plain(a),
                          right: "" if b is ABSENT else _plain(b)} for k, a, b in rows],
                        columns=["setting", left, right])


def launch_blockers(plan: LaunchPlan) -> list[str]:
    """Why ``tune()`` cannot start on this machine (GPU count, vllm); empty when it can."""
    result = Preflight()
    check_machine(plan.config, result, dry_run=False)
    return result.problems


def train_subprocess(config: str | Path, overrides: Sequence[str] = (),
                     log: str | Path | None = None, dry_run: bool = False) -> int:
    """Run ``python -m mathagent train`` in its own process (GPU training stays out of a
    notebook kernel); output goes to ``log`` (default: this process's stdout)."""
    cmd = [sys.executable, "-m", "mathagent", "train", "--config", str(config), *overrides]
    if dry_run:
        cmd.append("--dry-run")
    if log is None:
        return subprocess.run(cmd, cwd=paths.REPO_ROOT).returncode
    with open(log, "w") as fh:
        return subprocess.run(cmd, cwd=paths.REPO_ROOT, stdout=fh,
                              stderr=subprocess.STDOUT).returncode


# --------------------------------------------------------------------------------------
# The `train` command
# --------------------------------------------------------------------------------------


def train_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=paths.CONFIGS_DIR / "config_difficulty.yaml",
                        help="Trinity-RFT YAML (default configs/config_difficulty.yaml)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="override settings, e.g. buffer.batch_size=8, "
                             "buffer.explorer_input.eval_tasksets.0.path=/data/aime24, "
                             "tuner.model.model_path=/models/qwen3")
    parser.add_argument("--dry-run", action="store_true",
                        help="check config, data and Trinity's check_and_update() without GPUs; "
                             "list what the launch machine must provide; do not train")
    parser.add_argument("--ray-address", default=None,
                        help="Ray cluster to use (default: cluster.ray_address, else the head "
                             "recorded by `python -m mathagent ray start`)")
    parser.add_argument("--compare", default=None,
                        help="config to diff against (default: the sibling random/difficulty "
                             "config; 'none' to skip)")
    parser.add_argument("--full", action="store_true",
                        help="print every resolved setting instead of the summary")
    parser.add_argument("--judge", default=None,
                        help="training judge: gsm8k_judge (upstream, strict \\boxed{}), "
                             "lenient_judge (also the last number; gives the bundled 135M "
                             "model a signal) or a dotted path (default: the config's "
                             "tuner.judge, else gsm8k_judge)")


def _default_ray_address(args: argparse.Namespace) -> str | None:
    if args.ray_address:
        return args.ray_address
    state = ray_state_file()
    if state.is_file():
        with contextlib.suppress(Exception):
            return json.loads(state.read_text())["address"]
    return None


def train_command(args: argparse.Namespace) -> int:
    """Load, preflight and (without ``--dry-run``) launch one Trinity-RFT run.

    A ``train-local`` config (top-level ``taskset`` with ``rollout`` or ``selector`` and no
    Trinity-RFT key) is refused first with one line naming the right command: Trinity's
    loader would otherwise report its first unknown key, which does not say what is wrong.
    """
    import yaml

    trinity_keys = {"mode", "project", "group", "name", "checkpoint_root_dir",
                    "checkpoint_job_dir", "ray_namespace", "continue_from_checkpoint",
                    "ignore_validator_suggestions", "data_processor", "cluster", "buffer",
                    "explorer", "monitor", "synchronizer", "service", "log", "stages",
                    TUNER_BLOCK}
    top: Any = None
    with contextlib.suppress(OSError, yaml.YAMLError):  # load_plan reports those
        top = yaml.safe_load(Path(args.config).read_text())
    if isinstance(top, dict) and "taskset" in top and {"rollout", "selector"} & set(top) \
            and not trinity_keys & set(top):
        sections = ", ".join(f"`{k}`" for k in ("taskset", "rollout", "selector") if k in top)
        print(f"error: {args.config}: a `train-local` config (top-level {sections}), not a "
              f"Trinity-RFT one; run it with `python -m mathagent train-local --config "
              f"{args.config}`", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="mathagent-train-") as work:
        try:
            plan = load_plan(args.config, args.overrides, work_dir=Path(work) / "run",
                             judge=args.judge)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"Config {plan.config_path} (Trinity project {plan.config.project!r}, "
              f"run {plan.config.name!r})")
        print("\nPython-side settings (tune() writes them over the YAML):")
        print(format_yaml(plan.settings).rstrip())
        print("\nValues they change:")
        print(format_changes(plan.overridden, "YAML", "used"))
        print(f"\nJudge: {plan.judge} ({plan.judge_func.__module__}.{plan.judge_func.__name__})")
        if plan.carried:
            print("\nRollout settings of the YAML that tune() would drop, carried into the run:")
            for key, value in plan.carried.items():
                print(f"  explorer.rollout_model.{key}: {value!r}")

        print("\nPreflight" + (" (dry run)" if args.dry_run else "") + ":")
        result = preflight(plan, dry_run=args.dry_run,
                           ray_address=_default_ray_address(args))
        print(result.report())
        if not result.ok:
            print(f"\n{len(result.problems)} problem(s): fix them and run again.", file=sys.stderr)
            return 1

        print("\nResolved config (after Trinity's check_and_update()):")
        if args.full:
            for key, value in result.checked_config.flatten().items():
                print(f"  {key}: {_plain(value)!r}")
        else:
            print(format_yaml(summarize_config(result.checked_config)).rstrip())

        other = None if args.compare == "none" else (
            Path(args.compare) if args.compare else counterpart_path(plan.config_path))
        if other is not None:
            try:
                plan_b = load_plan(other, args.overrides, work_dir=Path(work) / "compare",
                                   judge=args.judge)
            except ConfigError as exc:
                print(f"\n(cannot compare with {other}: {exc})")
            else:
                print(f"\nDifference from {other.name}:")
                print(format_changes(config_diff(plan, plan_b), plan.config_path.name,
                                     other.name))

        if args.dry_run:
            print("\nDry run: config and data are sound; training not started.")
            return 0
        return launch(plan, result)


def worker_runtime_env(checked_config: Any) -> dict[str, Any]:
    """The Ray ``runtime_env`` of the run: Trinity's own env vars, this process's ``NCCL_*``,
    ``TORCH_SYMM_MEM_*`` and ``NVSHMEM_*`` variables (NVLink multicast settings reach every
    worker), this package importable in every worker, and :mod:`mathagent.compat`'s fixes
    applied in every worker process."""
    from mathagent.compat import WORKER_SETUP_HOOK

    env = dict(checked_config.get_envs())
    for name, value in os.environ.items():
        if name.startswith(("NCCL_", "TORCH_SYMM_MEM_", "NVSHMEM_")):
            env.setdefault(name, value)
    pythonpath = [str(paths.REPO_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(
        os.pathsep) if p and p != str(paths.REPO_ROOT)]
    env["PYTHONPATH"] = os.pathsep.join(pythonpath)
    # Processes that workers start themselves (vLLM's engine workers) join Ray through an
    # implicit ray.init(), which finds only RAY_ADDRESS or a head recorded in Ray's default
    # session folder, and the heads started here keep theirs elsewhere; else they start an
    # empty cluster of their own and Trinity's weight sync cannot find its synchronizer.
    env["RAY_ADDRESS"] = checked_config.cluster.ray_address
    return {"env_vars": env, "worker_process_setup_hook": WORKER_SETUP_HOOK}


def launch(plan: LaunchPlan, checked: Preflight) -> int:
    """Call ``agentscope.tuner.tune()`` (GPU machine); record the run for the results reader.

    Before ``tune()``: the compatibility fixes are applied here, and Ray is joined with a
    ``runtime_env`` that applies them in every worker (:func:`worker_runtime_env`); Trinity's
    own ``ray.init`` then finds Ray initialised and keeps it. During ``tune()`` the YAML's
    rollout settings that it would drop are carried (:func:`carrying_rollout_settings`).
    """
    import ray
    import yaml
    from agentscope.tuner import tune

    from mathagent.compat import apply_all

    fixes = apply_all()
    print("\nCompatibility fixes:")
    for fix in fixes:
        print(f"  {fix.line()}")
    failed = [f for f in fixes if f.status == "failed"]
    if failed:
        print(f"\n{len(failed)} compatibility fix(es) could not be applied; the run would stop "
              "or hang without them: " + "; ".join(f.line() for f in failed), file=sys.stderr)
        return 1
    run_dir = paths.new_run_dir("train")
    trinity_yaml = run_dir / "trinity_config.yaml"
    raw = yaml.safe_load(plan.trinity_yaml.read_text())
    # the cluster the preflight found (it may differ from the YAML's "auto")
    raw.setdefault("cluster", {})["ray_address"] = checked.checked_config.cluster.ray_address
    trinity_yaml.write_text(yaml.safe_dump(raw, sort_keys=False))
    job_dir = Path(checked.checked_config.checkpoint_job_dir)
    selector = _selector_config(plan.config.buffer.explorer_input.taskset)
    evals = plan.config.buffer.explorer_input.eval_tasksets
    params = {"kind": "train", "config": str(plan.config_path),
              "trinity_config": str(trinity_yaml),
              "selector": selector.selector_type, "seed": selector.seed,
              "judge": plan.judge,
              "eval_taskset": evals[0].name if evals else None,
              "checkpoint_job_dir": str(job_dir), "settings": plan.settings,
              "carried_rollout_settings": plan.carried,
              "compat_fixes": {f.name: f.status for f in fixes}}
    for folder in (run_dir, job_dir):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "params.json").write_text(json.dumps(params, indent=2, default=str) + "\n")
    print(f"\nLaunching: TensorBoard logs under {job_dir / 'monitor' / 'tensorboard'}; "
          f"read them with `python -m mathagent plot {job_dir}`")
    ray.init(address=checked.checked_config.cluster.ray_address,
             namespace=checked.checked_config.ray_namespace,
             runtime_env=worker_runtime_env(checked.checked_config), ignore_reinit_error=True)
    with carrying_rollout_settings(plan.carried):
        tune(workflow_func=plan.workflow_func, judge_func=plan.judge_func,
             config_path=str(trinity_yaml), model=plan.model, algorithm=plan.algorithm)
    return 0

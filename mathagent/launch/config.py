"""Trinity-RFT configs as data: loading, overrides, dotted keys, flattening and diffs.

A config is read by Trinity-RFT's own loader (:func:`load_trinity_config`); ``KEY=VALUE``
overrides are parsed here (:func:`parse_override`) and relative dataset paths resolved against
the repository root. Plain-dict YAML is read and written by dotted key (:func:`_get_dotted`,
:func:`_set_dotted`); a loaded config is flattened to dotted keys (:func:`_flat`) to compare two
runs (:func:`config_diff`, against the sibling config :func:`counterpart_path` names).
"""

from __future__ import annotations

import os
import re
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

from mathagent import paths

TASKSET_KEY = "buffer.explorer_input.taskset"
EVAL_KEY = "buffer.explorer_input.eval_tasksets"


class ConfigError(ValueError):
    """A config that cannot be loaded; the message is one line naming the file and key."""


#: A number in exponent notation (``1e-6``, ``1.5e-6``, ``.5e6``) that YAML 1.1 (PyYAML) reads
#: as a string, YAML 1.2 and Python as a number.
_EXPONENT_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)[eE][-+]?\d+")


def parse_override(text: str) -> tuple[str, Any]:
    """``"a.b.0.c=value"`` -> ``("a.b.0.c", value)`` with the value read as YAML
    (``1e-6`` as the number it is: PyYAML would keep it a string)."""
    import yaml

    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"override {text!r}: expected KEY=VALUE, e.g. buffer.batch_size=8")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {text!r}: value is not valid YAML ({exc})") from None
    if isinstance(value, str) and _EXPONENT_NUMBER.fullmatch(value.strip()):
        value = float(value)
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


def _selector_config(taskset: Any) -> Any:
    return taskset.task_selector if taskset.task_selector is not None else taskset.data_selector


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


class _Planned(Protocol):
    """What :func:`config_diff` reads of a :class:`~mathagent.launch.plan.LaunchPlan` (its
    loaded config); named structurally so that this module needs no import of ``plan``."""

    config: Any


def config_diff(plan_a: _Planned, plan_b: _Planned) -> list[tuple[str, Any, Any]]:
    """``(key, value in a, value in b)`` for every setting Trinity would receive differently
    between two :class:`~mathagent.launch.plan.LaunchPlan`."""
    return _differences(_flat(plan_a.config), _flat(plan_b.config))

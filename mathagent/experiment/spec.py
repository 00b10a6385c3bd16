"""An experiment spec: the arms (a Trinity config each), the seeds, shared overrides, the
model and the output folder, read from a small YAML file.

    # configs/experiment_qwen.yaml
    out: results/trinity_qwen
    model: qwen2.5-coder-0.5b
    arms:
      random: configs/config_random_qwen.yaml
      difficulty: configs/config_difficulty_qwen.yaml
      bots: configs/config_bots_qwen.yaml
    seeds: [0, 1, 2]
    overrides:                      # optional: dotted Trinity keys, shared by every run
      buffer.total_steps: 16

Relative paths (``out``, the arms' configs, a model file or folder) resolve against the
repository root, as the configs' own paths do. Every run is ``<arm>_seed<seed>``; its seed
goes to the selector's and vLLM's sampling (:data:`SEED_KEYS`). A spec that cannot be used
raises :class:`SpecError`, one line naming the file and the key at fault.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mathagent import paths

#: The keys a spec may hold; ``overrides`` and ``model`` are optional.
KEYS = ("out", "arms", "seeds", "overrides", "model")
#: Where a run's seed goes: the selector's draws and vLLM's sampling.
SEED_KEYS = ("buffer.explorer_input.taskset.data_selector.seed", "explorer.rollout_model.seed")
#: The policy trained when a spec names none (``python -m mathagent models`` lists it).
DEFAULT_MODEL = "qwen2.5-coder-0.5b"
_ARM = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_KEY = re.compile(r"^[A-Za-z_][\w]*(\.\w+)*$")


class SpecError(ValueError):
    """A spec that cannot be used; the message is one line naming the file and key."""


@dataclass(frozen=True)
class Run:
    """One (arm, seed) of an experiment: ``python -m mathagent train --config config`` with
    ``overrides`` (the spec's, then the seed's), laid out as ``out/<name>``."""

    arm: str
    seed: int
    config: Path
    overrides: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.arm}_seed{self.seed}"


@dataclass(frozen=True)
class Spec:
    """A loaded spec; :meth:`runs` lists its runs, arm by arm, seed by seed."""

    path: Path
    out: Path
    arms: dict[str, Path]
    seeds: tuple[int, ...]
    overrides: dict[str, Any]
    model: str

    def runs(self) -> list[Run]:
        shared = tuple(f"{k}={override_text(v)}" for k, v in self.overrides.items())
        return [Run(arm, seed, config,
                    shared + tuple(f"{key}={seed}" for key in SEED_KEYS))
                for arm, config in self.arms.items() for seed in self.seeds]


def override_text(value: Any) -> str:
    """A spec's override value as ``train`` reads it back (YAML): ``true``, ``null``, ``3``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _path(value: Any) -> Path:
    path = Path(str(value)).expanduser()
    return path if path.is_absolute() else paths.REPO_ROOT / path


def load_spec(path: str | Path) -> Spec:
    """Read and check the spec at ``path``; :class:`SpecError` names the key at fault."""
    import yaml

    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the spec ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        raise SpecError(f"{path}: not valid YAML{where}") from None

    def bad(key: str, problem: str) -> SpecError:
        return SpecError(f"{path}: {key}: {problem}")

    if not isinstance(raw, dict):
        raise SpecError(f"{path}: a spec is a mapping of {', '.join(KEYS)}")
    unknown = [k for k in raw if k not in KEYS]
    if unknown:
        raise bad(str(unknown[0]), f"unknown key (a spec holds {', '.join(KEYS)})")
    for key in ("out", "arms", "seeds"):
        if raw.get(key) in (None, "", [], {}):
            raise bad(key, "missing")
    if not isinstance(raw["out"], str):
        raise bad("out", "the output folder, a path")

    arms = raw["arms"]
    if not isinstance(arms, dict):
        raise bad("arms", "a mapping of arm name to its Trinity config, e.g. "
                          "random: configs/config_random_qwen.yaml")
    configs = {}
    for arm, config in arms.items():
        if not isinstance(arm, str) or not _ARM.match(arm):
            raise bad(f"arms.{arm}", "an arm's name is lower-case letters, digits, _ and -")
        if not isinstance(config, str) or not config:
            raise bad(f"arms.{arm}", "the path of a Trinity config")
        configs[arm] = _path(config)
        if not configs[arm].is_file():
            raise bad(f"arms.{arm}", f"{config}: no such file")

    seeds = raw["seeds"]
    seeds = [seeds] if isinstance(seeds, int) and not isinstance(seeds, bool) else seeds
    if not isinstance(seeds, list) or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise bad("seeds", "a list of whole numbers >= 0, e.g. [0, 1, 2]")
    if len(set(seeds)) < len(seeds):
        raise bad("seeds", f"a seed twice ({seeds})")

    overrides = raw.get("overrides") or {}
    if not isinstance(overrides, dict):
        raise bad("overrides", "a mapping of dotted Trinity keys to values, e.g. "
                               "buffer.total_steps: 3")
    for key, value in overrides.items():
        if not isinstance(key, str) or not _KEY.match(key):
            raise bad(f"overrides.{key}", "not a dotted key like buffer.total_steps")
        if key in SEED_KEYS:
            raise bad(f"overrides.{key}", "each run's seed is set from `seeds`")
        if isinstance(value, (dict, list)):
            raise bad(f"overrides.{key}", "one value (a number, string, true/false or null)")

    model = raw.get("model", DEFAULT_MODEL)
    if not isinstance(model, str) or not model:
        raise bad("model", "a model name (python -m mathagent models), a .gguf file or a "
                           "Hugging Face folder")
    return Spec(path=path, out=_path(raw["out"]), arms=configs, seeds=tuple(seeds),
                overrides=dict(overrides), model=model)


def _dotted(raw: Any, key: str) -> Any:
    for part in key.split("."):
        if isinstance(raw, list) and part.isdigit() and int(part) < len(raw):
            raw = raw[int(part)]
        elif isinstance(raw, dict) and part in raw:
            raw = raw[part]
        else:
            return None
    return raw


@dataclass(frozen=True)
class Schedule:
    """What a run's config and overrides say of its length: ``steps`` trained, held-out
    evaluations at ``eval_steps``."""

    steps: int
    eval_steps: tuple[int, ...]


def schedule(run: Run) -> Schedule:
    """The run's steps and evaluation steps, read from its YAML and overrides (no Trinity).

    ``tune()`` writes the ``tuner:`` block's ``algorithm.eval_interval_steps`` over
    ``explorer.eval_interval``; ``explorer.eval_on_startup`` (Trinity's default true) adds
    step 0. Raises :class:`SpecError` when they set no ``buffer.total_steps`` of 1 or more.
    """
    import yaml

    from mathagent.launch.config import ConfigError, parse_override

    try:
        raw = yaml.safe_load(run.config.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(f"{run.config}: not a readable YAML config "
                        f"({type(exc).__name__})") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{run.config}: not a mapping of Trinity keys")
    given = {}
    for text in run.overrides:
        try:
            key, value = parse_override(text)
        except ConfigError as exc:
            raise SpecError(str(exc)) from None
        given[key] = value

    def value(*keys: str) -> Any:
        """The first of ``keys`` set by an override or the YAML (an override first)."""
        for key in keys:
            if key in given:
                return given[key]
            found = _dotted(raw, key)
            if found is not None:
                return found
        return None

    steps = value("buffer.total_steps")
    if not isinstance(steps, int) or steps < 1:
        raise SpecError(f"buffer.total_steps is {steps!r} for {run.config.name} with the "
                        "overrides: a run needs a whole number of steps >= 1")
    interval = value("tuner.algorithm.eval_interval_steps", "explorer.eval_interval")
    on_startup = value("explorer.eval_on_startup")
    evals = [s for s in range(1, steps + 1) if isinstance(interval, int) and interval > 0
             and s % interval == 0]
    return Schedule(steps, tuple(([0] if on_startup is not False else []) + evals))


def schedules(spec: Spec) -> dict[str, Schedule]:
    """:func:`schedule` of every run of ``spec`` by name; :class:`SpecError` names the spec
    and the arm whose settings fail."""
    out = {}
    for run in spec.runs():
        try:
            out[run.name] = schedule(run)
        except SpecError as exc:
            raise SpecError(f"{spec.path}: arms.{run.arm}: {exc}") from None
    return out

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
    env:                            # optional: mathagent.compat's levers, for every run
      MATHAGENT_VARLEN_ATTN: 1

Relative paths (``out``, the arms' configs, a model file or folder) resolve against the
repository root, as the configs' own paths do. Every run is ``<arm>_seed<seed>``; its seed
goes to the selector's and vLLM's sampling (:data:`SEED_KEYS`). A spec that cannot be used
raises :class:`SpecError`, one line naming the file and the key at fault.

The spec is the one home of an experiment's arms and seeds: ``python -m mathagent
experiment`` runs it (:mod:`mathagent.experiment`), and the report of its output folder takes
the arms and seeds from it (``experiment:`` in the folder's ``experiment.yaml``,
:mod:`mathagent.report.spec`). An arm's runs report the selector its config names
(:meth:`Spec.selectors`): the report's name for the arm. The module sits here, below both
(the report may not import the experiment command), so that both read a spec the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mathagent import paths
from mathagent.results.runs import selector_label

#: The keys a spec may hold; ``overrides``, ``env`` and ``model`` are optional.
KEYS = ("out", "arms", "seeds", "overrides", "env", "model")
#: Where a run's seed goes: the selector's draws and vLLM's sampling.
SEED_KEYS = ("buffer.explorer_input.taskset.data_selector.seed", "explorer.rollout_model.seed")
#: Where a config names its selector (``selector_type``; Trinity's default is random).
SELECTOR_KEY = "buffer.explorer_input.taskset.data_selector.selector_type"
#: How a lever's variable begins; the experiment command checks the name against
#: :data:`mathagent.compat.LEVER_ENVS`.
LEVER_PREFIX = "MATHAGENT_"
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
    env: tuple[tuple[str, str], ...] = ()  # the spec's levers: (variable, value)

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
    env: dict[str, str] | None = None

    def runs(self) -> list[Run]:
        shared = tuple(f"{k}={override_text(v)}" for k, v in self.overrides.items())
        env = tuple(sorted((self.env or {}).items()))
        return [Run(arm, seed, config,
                    shared + tuple(f"{key}={seed}" for key in SEED_KEYS), env)
                for arm, config in self.arms.items() for seed in self.seeds]

    def setting(self, arm: str, key: str) -> Any:
        """Dotted ``key`` as the runs of ``arm`` get it: the spec's override, else the arm's
        config; None where neither sets it."""
        if key in self.overrides:
            return self.overrides[key]
        return dotted(read_config(self.arms[arm]), key)

    def selectors(self) -> dict[str, str]:
        """Arm -> the selector name its runs report (``bots`` for the BOTSSelector path)."""
        return {arm: selector_label(str(self.setting(arm, SELECTOR_KEY) or "random"))
                for arm in self.arms}


def override_text(value: Any) -> str:
    """A spec's override value as ``train`` reads it back (YAML): ``true``, ``null``, ``3``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def repo_path(value: Any) -> Path:
    """A path as a spec writes it: relative ones resolve against the repository root."""
    path = Path(str(value)).expanduser()
    return path if path.is_absolute() else paths.REPO_ROOT / path


def repo_relative(path: Path) -> str:
    """``path`` as a spec writes it: relative to the repository root where it is inside."""
    return (str(path.relative_to(paths.REPO_ROOT)) if path.is_relative_to(paths.REPO_ROOT)
            else str(path))


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
        configs[arm] = repo_path(config)
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

    env = {} if raw.get("env") is None else raw["env"]
    if not isinstance(env, dict):
        raise bad("env", "a mapping of lever variables to values, e.g. MATHAGENT_VARLEN_ATTN: 1")
    for key, value in env.items():
        if not isinstance(key, str) or not key.startswith(LEVER_PREFIX):
            raise bad(f"env.{key}", f"not a lever of mathagent.compat ({LEVER_PREFIX}...)")
        if isinstance(value, (dict, list)) or value is None:
            raise bad(f"env.{key}", "one value, e.g. 1")

    model = raw.get("model", DEFAULT_MODEL)
    if not isinstance(model, str) or not model:
        raise bad("model", "a model name (python -m mathagent models), a .gguf file or a "
                           "Hugging Face folder")
    return Spec(path=path, out=repo_path(raw["out"]), arms=configs, seeds=tuple(seeds),
                overrides=dict(overrides), model=model,
                env={k: override_text(v) for k, v in env.items()})


def read_config(config: Path) -> dict:
    """A Trinity config's YAML as a mapping; :class:`SpecError` names the file otherwise."""
    import yaml

    try:
        raw = yaml.safe_load(config.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(f"{config}: not a readable YAML config "
                        f"({type(exc).__name__})") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{config}: not a mapping of Trinity keys")
    return raw


def dotted(raw: Any, key: str) -> Any:
    """The value at dotted ``key`` of a loaded config (a list item by its index), None where
    there is none."""
    for part in key.split("."):
        if isinstance(raw, list) and part.isdigit() and int(part) < len(raw):
            raw = raw[int(part)]
        elif isinstance(raw, dict) and part in raw:
            raw = raw[part]
        else:
            return None
    return raw

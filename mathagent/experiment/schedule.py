"""Each run's length: the steps it trains and the steps it evaluates at, read from its
config and the spec's overrides (:mod:`mathagent.results.spec` reads the spec itself).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mathagent.results.spec import Run, Spec, SpecError, dotted, read_config


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
    from mathagent.launch.config import ConfigError, parse_override

    raw = read_config(run.config)
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
            found = dotted(raw, key)
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

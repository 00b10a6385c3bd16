"""The one table of selector capabilities: names, keyword arguments, features and feedback.

Every other part of :mod:`mathagent.selectors` (and the launcher's config checks, the
tutorial-scale trainer and the simulation) asks this table which selectors exist, which
keyword arguments each accepts, how many feature (pass-rate) columns each reads and which
choose by the pass rates fed back after each step.
"""

from __future__ import annotations

from typing import Any

TRINITY_SELECTORS = ("sequential", "shuffle", "random", "offline_easy2hard", "difficulty_based")
SELECTOR_NAMES = (*TRINITY_SELECTORS, "bots")
BOTS_PATH = "mathagent.selectors.BOTSSelector"
OPERATOR_PATH = "mathagent.selectors.RolloutPassRateCalculator"

# Keyword arguments each selector reads from ``DataSelectorConfig.kwargs`` (Trinity's
# defaults in the comments). Anything else is a typo that Trinity would silently ignore.
DIFFICULTY_KWARGS = {
    "m": 16,  # pseudo-count of one feedback value: the number of rollouts per task
    "lamb": 0.2,  # forgetting rate of the Beta posterior per update
    "rho": 0.2,  # weight of the implicit (reference-interpolated) evidence
    "target_reward": 1.0,  # pass rate the selector aims for
    "tau": 1.0,  # 0: top-B scores; > 0: softmax sampling temperature
    "do_sample": False,  # True: Thompson-sample p from the posterior; False: posterior mean
    "adaptive_rho": False,  # halve rho when the interpolation misses the batch by >= 0.25
}
BOTS_EXTRA_KWARGS = {
    "impute": None,  # None: NaN features are an error; "mean"/"median": fill per column
    "implicit_only": False,  # ablation: the posterior sees only the reference interpolation
    "cap_coef_update_discount": 0.9,  # smoothing of the capability coefficient
    # None: as Trinity. x > 0: skip the capability update when the batch's mean gap between
    # the strong and weak reference is below x (the estimate divides by that gap).
    "min_anchor_gap": None,
}
SELECTOR_KWARGS: dict[str, dict[str, Any]] = {
    "sequential": {},
    "shuffle": {},
    "random": {},
    "offline_easy2hard": {},
    "difficulty_based": DIFFICULTY_KWARGS,
    "bots": {**DIFFICULTY_KWARGS, **BOTS_EXTRA_KWARGS},
}
# How many feature columns each selector needs: (min, max); None: it reads none.
FEATURE_COUNT: dict[str, tuple[int, int] | None] = {
    "sequential": None,
    "shuffle": None,
    "random": None,
    "offline_easy2hard": (1, 64),
    "difficulty_based": (2, 2),
    "bots": (1, 2),
}
# Selectors whose choices depend on the pass rates fed back after each step.
FEEDBACK_SELECTORS = ("difficulty_based", "bots")


def canonical_name(name: str) -> str:
    """A selector's short name: ``bots`` for :class:`BOTSSelector`'s dotted path (or any path
    ending in ``BOTSSelector``), the name itself otherwise."""
    return "bots" if name == "bots" or name.rsplit(".", 1)[-1] == "BOTSSelector" else name


def reads_features(name: str) -> bool:
    """Whether the selector ``name`` reads feature (pass-rate) columns of the taskset."""
    return FEATURE_COUNT.get(canonical_name(name)) is not None


def uses_feedback(name: str) -> bool:
    """Whether the selector ``name`` chooses by the pass rates fed back after each step."""
    return canonical_name(name) in FEEDBACK_SELECTORS


class SelectorConfigError(ValueError):
    """A selector setting that cannot work: raised before anything is built or run."""

"""Selector settings checked before anything is built: name, feature keys, kwargs, ``m``.

Trinity silently ignores an unknown keyword argument (a misspelt ``lambda``, say); here it is
an error, as are out-of-range values, the wrong number of feature keys, feature columns that
are missing or malformed, and a pseudo-count ``m`` that differs from the rollouts per task.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import datasets
import numpy as np

from mathagent.selectors.capabilities import (
    FEATURE_COUNT,
    SELECTOR_KWARGS,
    SELECTOR_NAMES,
    SelectorConfigError,
    canonical_name,
)
from mathagent.selectors.features import read_features


def _check_kwargs(name: str, kwargs: Mapping[str, Any], repeat_times: int | None) -> None:
    known = SELECTOR_KWARGS[name]
    unknown = sorted(set(kwargs) - set(known))
    if unknown:
        allowed = sorted(known) or "none"
        raise SelectorConfigError(
            f"selector {name!r}: unknown keyword argument(s) {unknown}; it accepts {allowed}")

    def number(key, lo, hi, integer=False):
        if key not in kwargs:
            return
        v = kwargs[key]
        ok = (isinstance(v, numbers.Real) and not isinstance(v, bool | np.bool_)
              and math.isfinite(v))
        if integer:
            ok = ok and float(v).is_integer()
        if not ok or not lo <= v <= hi:
            kind = "an integer" if integer else "a number"
            raise SelectorConfigError(
                f"selector {name!r}: {key}={v!r} must be {kind} in [{lo}, {hi}]")

    number("m", 1, 1_000_000, integer=True)
    number("lamb", 0.0, 1.0)
    number("rho", 0.0, 1.0)
    number("target_reward", 0.0, 1.0)
    number("tau", 0.0, math.inf)
    number("cap_coef_update_discount", 0.0, 1.0)
    if kwargs.get("min_anchor_gap") is not None:
        number("min_anchor_gap", 0.0, 1.0)
    for key in ("do_sample", "adaptive_rho", "implicit_only"):
        if key in kwargs and not isinstance(kwargs[key], bool | np.bool_):
            raise SelectorConfigError(
                f"selector {name!r}: {key}={kwargs[key]!r} must be true or false")
    if "impute" in kwargs and kwargs["impute"] not in (None, "mean", "median"):
        raise SelectorConfigError(
            f"selector {name!r}: impute={kwargs['impute']!r} must be null, 'mean' or 'median'")
    if repeat_times is not None and "m" in known:
        m = kwargs.get("m", known["m"])
        if int(m) != int(repeat_times):
            raise SelectorConfigError(
                f"selector {name!r}: m={m} but every task is rolled out {repeat_times} times "
                f"(repeat_times); m is the pseudo-count of one feedback value and must equal "
                f"the number of rollouts per task")


def check_selector_settings(name: str, dataset: datasets.Dataset | None = None,
                            feature_keys: Sequence[str] | None = None,
                            repeat_times: int | None = None, **kwargs: Any) -> str:
    """Validate a selector name, its feature keys and kwargs before anything runs.

    Args:
        name: one of :data:`SELECTOR_NAMES` or the dotted path of :class:`BOTSSelector`.
        dataset: when given, feature columns are checked to exist, be numeric, lie in
            [0, 1] and hold no NaN (``bots`` may impute instead).
        feature_keys: the feature columns the selector will read.
        repeat_times: rollouts per task; when given, ``m`` must equal it.
        **kwargs: the selector's keyword arguments.

    Returns:
        The canonical short name (``"bots"`` for the dotted path).

    Raises:
        SelectorConfigError: with a message naming the setting at fault.
    """
    canonical = canonical_name(name)
    if canonical not in SELECTOR_KWARGS:
        raise SelectorConfigError(
            f"unknown selector {name!r}; choose one of {list(SELECTOR_NAMES)}")
    _check_kwargs(canonical, kwargs, repeat_times)
    keys = list(feature_keys or [])
    count = FEATURE_COUNT[canonical]
    if count is None and keys:
        raise SelectorConfigError(
            f"selector {canonical!r} reads no feature columns, but feature_keys={keys} "
            f"were given")
    if count is not None and not count[0] <= len(keys) <= count[1]:
        want = (f"exactly {count[0]}" if count[0] == count[1]
                else f"{count[0]} to {count[1]}")
        hint = (" (weak reference first, strong second)" if canonical != "offline_easy2hard"
                else "")
        raise SelectorConfigError(
            f"selector {canonical!r} needs {want} feature key(s){hint}, got {keys}")
    if len(set(keys)) != len(keys):
        raise SelectorConfigError(f"selector {canonical!r}: repeated feature key in {keys}")
    if dataset is not None:
        if len(dataset) == 0:
            raise SelectorConfigError(f"selector {canonical!r}: the dataset is empty")
        if keys:
            impute = kwargs.get("impute") if canonical == "bots" else None
            read_features(dataset, keys, impute=impute, source=f"selector {canonical!r}")
    return canonical

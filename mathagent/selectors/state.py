"""A selector's complete state: what Trinity's own ``state_dict`` leaves out, saved and restored."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from trinity.buffer.selector.selector import BaseSelector, DifficultyBasedSelector

# Key under which selector_state stores what Trinity's own state_dict leaves out.
FULL_STATE_KEY = "mathagent_full_state"
FULL_STATE_VERSION = 1


def _features_digest(features: np.ndarray) -> str:
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(features, dtype=np.float64).tobytes()).hexdigest()


def selector_state(selector: BaseSelector) -> dict:
    """Everything needed to continue ``selector`` exactly, as plain (JSON-safe) types.

    Trinity-RFT 0.6.0's ``DifficultyBasedSelector.state_dict()`` saves only
    ``current_index``; its posteriors live in ``diff_estimator`` (an
    ``InterpolationBetaPREstimator``) and would restart from the prior on resume. For that
    class (and its subclasses) the estimator's mutable state is added under
    :data:`FULL_STATE_KEY`: ``alphas``, ``betas``, the capability coefficient ``cap_coef``
    and ``rho`` (halved over time when ``adaptive_rho``), with the task count, feature keys
    and a digest of the feature matrix so a state cannot be loaded onto other tasks.
    Trinity's other selectors are fully described by ``current_index`` (their draws are
    seeded from ``seed + current_index``; ``shuffle`` rebuilds its order from it) and
    :class:`BOTSSelector` saves its complete state itself; their state passes through.
    The result stays a valid Trinity state (``current_index`` at the top level).
    """
    state = dict(selector.state_dict())
    if isinstance(selector, DifficultyBasedSelector):
        est = selector.diff_estimator
        c = getattr(est, "cap_coef", None)
        state[FULL_STATE_KEY] = {
            "version": FULL_STATE_VERSION,
            "class": type(selector).__name__,
            "n_tasks": int(est.n),
            "feature_keys": list(selector.config.feature_keys or []),
            "features_sha256": _features_digest(est.features),
            "alphas": np.asarray(est.alphas, dtype=np.float64).tolist(),
            "betas": np.asarray(est.betas, dtype=np.float64).tolist(),
            "cap_coef": None if c is None else float(c),
            "rho": float(est.rho),
        }
    return state


def load_selector_state(selector: BaseSelector, state: Mapping[str, Any]) -> bool:
    """Restore :func:`selector_state` output into ``selector``.

    Returns False when ``selector`` keeps posteriors but ``state`` holds only Trinity's
    position (``{"current_index": ...}``): the position is restored and the posteriors stay
    at the prior, as in Trinity. True otherwise.

    Raises:
        ValueError: the state was saved for another selector class, task count, feature
            keys or feature values.
    """
    state = dict(state)
    full = state.pop(FULL_STATE_KEY, None)
    if full is not None and not isinstance(selector, DifficultyBasedSelector):
        raise ValueError(f"selector state holds the posteriors of a {full.get('class')!r}, "
                         f"not of a {type(selector).__name__}")
    if not isinstance(selector, DifficultyBasedSelector):
        selector.load_state_dict(state)
        return True
    est = selector.diff_estimator
    if full is not None:  # check everything before changing anything
        keys = list(selector.config.feature_keys or [])
        if int(full.get("n_tasks", -1)) != int(est.n) or len(full["alphas"]) != est.n \
                or len(full["betas"]) != est.n:
            raise ValueError(f"selector state is for {full.get('n_tasks')} tasks, this "
                             f"dataset has {est.n}")
        if list(full.get("feature_keys", keys)) != keys:
            raise ValueError(f"selector state was saved with feature keys "
                             f"{full.get('feature_keys')}, this selector reads {keys}")
        if full.get("features_sha256", _features_digest(est.features)) != \
                _features_digest(est.features):
            raise ValueError("selector state was saved for other feature values (another "
                             "taskset with the same size?)")
    selector.load_state_dict(state)
    if full is None:
        return False
    est.alphas = np.array(full["alphas"], dtype=np.float64)
    est.betas = np.array(full["betas"], dtype=np.float64)
    c = full["cap_coef"]
    est.cap_coef = None if c is None else np.float64(c)
    est.rho = float(full["rho"])
    return True

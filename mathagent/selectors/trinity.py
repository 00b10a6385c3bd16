"""Trinity-RFT's own selectors driven outside Trinity: build, step, inspect, save, trace.

:func:`make_selector` builds any of Trinity-RFT's five selectors (``sequential``, ``shuffle``,
``random``, ``offline_easy2hard``, ``difficulty_based``) through Trinity's own ``SELECTORS``
registry and ``DataSelectorConfig``, over a plain ``datasets.Dataset``, and wraps it in a
:class:`SelectorDriver`: the same calls plus inspection (posteriors, scores, capability
coefficient). The selector inside is the real Trinity object, so a notebook, the bandit
simulation and the tutorial-scale trainer step exactly what a Trinity run steps. Trinity's
selectors read ``data_source.dataset[key]`` and ``data_source.dataset_size``;
:class:`DataSource` is that much and nothing more. Settings are checked before anything is
built: unknown names, missing or malformed feature columns and unknown or out-of-range keyword
arguments (Trinity itself ignores unknown kwargs) are errors. The driver's ``state_dict`` is
complete (:func:`selector_state`): for ``difficulty_based``, whose own ``state_dict`` keeps
only its position, it adds the estimator's posteriors, capability coefficient and ``rho``, so a
resumed run continues exactly.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import datasets
import numpy as np
import pandas as pd
from trinity.buffer.selector import SELECTORS
from trinity.buffer.selector.selector import BaseSelector
from trinity.common.config import DataSelectorConfig

from mathagent.selectors.bots import BOTSSelector
from mathagent.selectors.capabilities import BOTS_PATH, FEATURE_COUNT
from mathagent.selectors.checks import check_selector_settings
from mathagent.selectors.features import DataSource, _as_index_list, read_features
from mathagent.selectors.state import load_selector_state, selector_state

log = logging.getLogger(__name__)


class SelectorDriver:
    """Steps one selector outside Trinity: select, feed back, inspect, save, restore.

    The wrapped object (``.selector``) is the real Trinity selector (or a
    :class:`BOTSSelector`); the driver adds input checks and read-only views of its state.
    ``get_indices`` returns a ``list[int]`` whatever the selector returns (Trinity's return
    numpy arrays or torch tensors).
    """

    def __init__(self, name: str, selector: BaseSelector, dataset: datasets.Dataset,
                 feature_keys: Sequence[str] = (), repeat_times: int | None = None):
        self.name = name
        self.selector = selector
        self.dataset = dataset
        self.feature_keys = list(feature_keys)
        self.repeat_times = repeat_times
        self.n_tasks = len(dataset)

    def __repr__(self) -> str:
        return (f"SelectorDriver({self.name!r}, {type(self.selector).__name__}, "
                f"n_tasks={self.n_tasks})")

    # -- the selector interface ---------------------------------------------------------
    def get_indices(self, batch_size: int) -> list[int]:
        """The next batch: ``batch_size`` task indices (distinct within the batch)."""
        if not isinstance(batch_size, int | np.integer) or not 0 < batch_size <= self.n_tasks:
            raise ValueError(f"{self.name}: batch_size must be an integer in [1, "
                             f"{self.n_tasks}] (the number of tasks), got {batch_size!r}")
        return _as_index_list(self.selector.get_indices(int(batch_size)))

    def feedback(self, indices: Sequence[int], values: Sequence[float]) -> None:
        """Report the observed pass rate ``values[k]`` of task ``indices[k]``."""
        idx = _as_index_list(indices)
        vals = np.asarray(values, dtype=np.float64).reshape(-1)
        if len(idx) != len(vals):
            raise ValueError(f"{self.name}: feedback got {len(idx)} indices but "
                             f"{len(vals)} values")
        if not idx:
            return
        lo, hi = min(idx), max(idx)
        if lo < 0 or hi >= self.n_tasks:
            raise ValueError(f"{self.name}: feedback index {lo if lo < 0 else hi} is outside "
                             f"[0, {self.n_tasks})")
        bad = ~np.isfinite(vals) | (vals < 0) | (vals > 1)
        if bad.any():
            k = int(np.argmax(bad))
            raise ValueError(f"{self.name}: feedback value {vals[k]!r} for task {idx[k]} is "
                             f"not a pass rate in [0, 1]")
        self.selector.feedback(idx, vals.tolist())

    def state_dict(self) -> dict:
        """The selector's complete state (:func:`selector_state`), JSON-safe."""
        return selector_state(self.selector)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (:func:`load_selector_state`)."""
        if not load_selector_state(self.selector, state):
            log.warning("%s: the state holds the position only (saved by Trinity itself or "
                        "an older mathagent); the posteriors restart from the prior",
                        self.name)

    # -- inspection ------------------------------------------------------------------
    @property
    def adaptive(self) -> bool:
        """True for selectors that keep a Beta posterior per task."""
        return self.posterior() is not None

    def _estimator(self):
        sel = self.selector
        if isinstance(sel, BOTSSelector):
            return sel
        return getattr(sel, "diff_estimator", None)

    def posterior(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(alpha, beta)``, each shape ``(n_tasks,)``, or ``None`` for a static selector."""
        est = self._estimator()
        if est is None:
            return None
        return np.asarray(est.alphas), np.asarray(est.betas)

    def posterior_mean(self) -> np.ndarray | None:
        """Posterior mean pass rate per task, shape ``(n_tasks,)``."""
        post = self.posterior()
        return None if post is None else post[0] / (post[0] + post[1])

    def capability(self) -> float | None:
        """The capability coefficient ``c`` (``None`` before the first feedback)."""
        est = self._estimator()
        c = getattr(est, "cap_coef", None)
        return None if c is None else float(c)

    def implicit_pass_rates(self) -> np.ndarray | None:
        """Per task, the pass rate the references imply at the current capability
        (:meth:`BOTSSelector.implicit_pass_rates`); None for other selectors."""
        sel = self.selector
        return sel.implicit_pass_rates() if isinstance(sel, BOTSSelector) else None

    def pinned_references(self) -> np.ndarray | None:
        """Per task, whether its two reference pass rates agree on a rate strictly between 0
        and 1: the references then imply that rate at any capability, while a task whose
        references differ is implied nearer 0 or 1 the further the capability leaves [0, 1].
        None without two feature keys."""
        if len(self.feature_keys) != 2:
            return None
        weak, strong = (np.asarray(self.dataset[k], dtype=float) for k in self.feature_keys)
        return (weak == strong) & (weak > 0) & (weak < 1)

    def rho(self) -> float | None:
        est = self._estimator()
        return None if est is None else float(est.rho)

    def scores(self) -> np.ndarray | None:
        """The scores the next ``get_indices`` will rank, shape ``(n_tasks,)``.

        Difficulty-based selectors seed their draw from ``seed + current_index``, so this
        reproduces exactly the draw of the next call without advancing anything.
        """
        get_scores = getattr(self.selector, "get_scores", None)
        return None if get_scores is None else np.asarray(get_scores())

    def posterior_table(self, tasks: Sequence[int] | None = None) -> pd.DataFrame:
        """One row per task: ``task, alpha, beta, mean, sd`` and, when the selector reads
        features, the feature columns; ``score`` is the score the next ``get_indices`` will
        rank (difficulty-based selectors)."""
        post = self.posterior()
        if post is None:
            raise ValueError(f"{self.name}: a static selector has no posterior")
        idx = np.arange(self.n_tasks) if tasks is None else np.asarray(tasks, dtype=int)
        a, b = post[0][idx], post[1][idx]
        table = pd.DataFrame({"task": idx, "alpha": a, "beta": b, "mean": a / (a + b),
                              "sd": np.sqrt(a * b / ((a + b) ** 2 * (a + b + 1)))})
        feats = self.features()
        if feats is not None:
            for j, key in enumerate(self.feature_keys):
                table[key] = feats[idx, j]
        scores = self.scores()
        if scores is not None:
            table["score"] = scores[idx]
        return table

    def features(self) -> np.ndarray | None:
        """The feature matrix the selector reads, shape ``(n_tasks, len(feature_keys))``."""
        if not self.feature_keys:
            return None
        held = getattr(self._estimator(), "features", None)  # BOTS / difficulty_based
        if held is not None:
            return np.asarray(held, dtype=np.float64)
        return read_features(self.dataset, self.feature_keys)[0]


def make_selector(name: str, dataset: datasets.Dataset,
                  feature_keys: Sequence[str] | None = None, seed: int = 42, *,
                  repeat_times: int | None = None, fast_columns: bool = True,
                  **kwargs: Any) -> SelectorDriver:
    """Build a selector over ``dataset`` through Trinity's registry and config class.

    Args:
        name: ``sequential``, ``shuffle``, ``random``, ``offline_easy2hard``,
            ``difficulty_based`` (Trinity's own classes) or ``bots``
            (:class:`BOTSSelector`, also accepted as its dotted path).
        dataset: the taskset (rows are task indices).
        feature_keys: pass-rate columns; ``difficulty_based`` needs two (weak, strong),
            ``bots`` one or two, ``offline_easy2hard`` at least one.
        seed: the selector's seed (``DataSelectorConfig.seed``).
        repeat_times: rollouts per task, when known; ``m`` must then equal it.
        fast_columns: hand the selector a :class:`TaskColumns` view (numpy feature columns,
            the same values) instead of the dataset itself; see :class:`DataSource`.
        **kwargs: the selector's ``DataSelectorConfig.kwargs`` (see :data:`SELECTOR_KWARGS`).

    Returns:
        A :class:`SelectorDriver` around the real selector object.

    Raises:
        SelectorConfigError: before anything is built, for an unknown name, missing or
            malformed feature columns, or unknown or out-of-range kwargs.
    """
    canonical = check_selector_settings(name, dataset, feature_keys, repeat_times, **kwargs)
    keys = list(feature_keys or [])
    config = DataSelectorConfig(
        selector_type=BOTS_PATH if canonical == "bots" else canonical,
        seed=int(seed), feature_keys=keys, kwargs=dict(kwargs))
    cls = SELECTORS.get(config.selector_type)
    selector = cls(DataSource(dataset, fast_columns=fast_columns), config)
    return SelectorDriver(canonical, selector, dataset, keys, repeat_times)


def trace_selectors(dataset: datasets.Dataset, names: Sequence[str], steps: int = 3,
                    batch_size: int = 4, feature_keys: Sequence[str] | None = None,
                    observe: Any = None, seed: int = 0,
                    kwargs: Mapping[str, Mapping[str, Any]] | None = None) -> pd.DataFrame:
    """Step several selectors side by side on a small dataset and record their batches.

    Args:
        dataset: the taskset.
        names: selector names (see :func:`make_selector`).
        steps, batch_size: how many batches of what size.
        feature_keys: passed to the selectors that read features.
        observe: ``observe(indices, rng) -> pass rates`` played back as feedback after
            every batch (``None``: no feedback). Every selector gets a fresh
            ``numpy.random.default_rng(seed)``, so they all replay the same stream.
        seed: the selectors' seed and the feedback stream's.
        kwargs: per selector name, its keyword arguments.

    Returns:
        One row per (selector, step): ``selector, step, tasks`` (the batch) and
        ``pass_rates`` (the feedback, or ``None``).
    """
    rows = []
    for name in names:
        canonical = "bots" if name == BOTS_PATH else name
        keys = feature_keys if FEATURE_COUNT.get(canonical) else None
        driver = make_selector(name, dataset, keys, seed=seed, **dict((kwargs or {}).get(name,
                                                                                         {})))
        rng = np.random.default_rng(seed)
        for t in range(1, steps + 1):
            idx = driver.get_indices(batch_size)
            values = None
            if observe is not None:
                values = [float(v) for v in observe(idx, rng)]
                driver.feedback(idx, values)
            rows.append({"selector": name, "step": t, "tasks": idx, "pass_rates": values})
    return pd.DataFrame(rows)

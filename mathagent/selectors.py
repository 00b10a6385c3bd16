"""Task selectors: Trinity-RFT's own, a standalone driver for them, and BOTS with full state.

RL fine-tuning spends its compute on whatever tasks the *selector* hands the explorer. A
selector answers two calls per training step: ``get_indices(B)`` (which ``B`` tasks next) and
``feedback(indices, values)`` (the observed pass rate of each task's rollout group). This
module gives three things around that interface.

**A driver for Trinity's selectors.** :func:`make_selector` builds any of Trinity-RFT's five
selectors (``sequential``, ``shuffle``, ``random``, ``offline_easy2hard``,
``difficulty_based``) through Trinity's own ``SELECTORS`` registry and ``DataSelectorConfig``,
over a plain ``datasets.Dataset``, and wraps it in a :class:`SelectorDriver`: the same calls
plus inspection (posteriors, scores, capability coefficient). The selector inside is the real
Trinity object, so a notebook, the bandit simulation and the tutorial-scale trainer step
exactly what a Trinity run steps. Trinity's selectors read ``data_source.dataset[key]`` and
``data_source.dataset_size``; :class:`DataSource` is that much and nothing more. Settings are
checked before anything is built: unknown names, missing or malformed feature columns and
unknown or out-of-range keyword arguments (Trinity itself ignores unknown kwargs) are errors.
The driver's ``state_dict`` is complete (:func:`selector_state`): for ``difficulty_based``,
whose own ``state_dict`` keeps only its position, it adds the estimator's posteriors,
capability coefficient and ``rho``, so a resumed run continues exactly.

**BOTSSelector.** :class:`BOTSSelector` is a Trinity selector (a ``BaseSelector`` subclass,
usable in a config as ``selector_type: mathagent.selectors.BOTSSelector``) that makes the same
decisions as ``difficulty_based`` on the same inputs, bit for bit, and adds

* a complete ``state_dict`` (posteriors, capability coefficient, rho, step), JSON-safe, so a
  run resumed from a checkpoint continues exactly as an uninterrupted one; Trinity's own
  selector saves only its position and restarts its posteriors from the prior;
* feature validation with errors naming the column and row (NaN, outside [0, 1], wrong
  number of keys), or an explicit imputation (``impute="mean"`` / ``"median"``) that is
  counted and reported;
* a one-reference mode for datasets with a single pass-rate column;
* an ``implicit_only`` ablation (the posterior sees only the reference interpolation);
* an opt-in guard, ``min_anchor_gap``, for a failure of the capability estimate: it divides
  by the batch's mean gap between the two references, so a batch of tasks whose references
  agree (common with pass rates measured from 16 samples) sends ``c`` to +-1e5;
* construction that reads the feature columns through Arrow instead of Python lists.

The model (BOTS, arXiv 2510.26374). Every task ``i`` has a Beta(alpha_i, beta_i) belief about
the learner's pass rate ``p_i`` (prior Beta(1, 1)). After a step that rolled out tasks ``I``
``m`` times each with observed pass rates ``v_i``:

* *explicit evidence*: ``s_i = m v_i`` successes and ``f_i = m (1 - v_i)`` failures, on ``I``;
* *implicit evidence* for every task: the learner's capability ``c`` is located between a weak
  and a strong reference model, ``c_hat = (mean v - mean w_I) / (mean s_I - mean w_I)`` from
  the batch (``w``, ``s`` the reference pass-rate columns), smoothed ``c <- 0.9 c + 0.1 c_hat``,
  and ``p_tilde_i = clip(w_i + c (s_i - w_i), 0, 1)`` (``p_tilde_i = v_i`` on ``I``);
* update with forgetting ``lamb`` and implicit weight ``rho``::

      alpha <- (1 - lamb) alpha + lamb + (1 - rho) s + rho m p_tilde
      beta  <- (1 - lamb) beta  + lamb + (1 - rho) f + rho m (1 - p_tilde)

* selection: draw ``p_hat ~ Beta(alpha, beta)`` (Thompson sampling; the posterior mean when
  ``do_sample`` is false), score ``-|target_reward - p_hat|`` and take the top ``B``
  (``tau = 0``) or sample ``B`` without replacement from ``softmax(score / tau)``.

**RolloutPassRateCalculator.** The feedback operator Trinity's experience pipeline runs
(``data_processor.experience_pipeline.operators: [{name:
mathagent.selectors.RolloutPassRateCalculator}]``). Trinity's ``pass_rate_calculator``
averages ``exp.reward`` over every experience of a task; under ``multi_step_grpo`` each model
call of an agent run is its own experience carrying the run's reward, so a run that made five
calls counts five times. This operator first reduces each run (rollout) to one value, then
averages the runs.
"""

from __future__ import annotations

import logging
import math
import numbers
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import datasets
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import torch
from trinity.buffer.operators.experience_operator import ExperienceOperatorV1
from trinity.buffer.selector import SELECTORS
from trinity.buffer.selector.selector import BaseSelector, DifficultyBasedSelector
from trinity.common.config import DataSelectorConfig
from trinity.common.constants import SELECTOR_METRIC

from mathagent.tasks import TasksetError, fill_value, pass_rate_values

log = logging.getLogger(__name__)

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


# --------------------------------------------------------------------------------------
# Features
# --------------------------------------------------------------------------------------


def _arrow_column(dataset: datasets.Dataset, key: str) -> pa.ChunkedArray:
    """Column ``key`` of ``dataset`` as Arrow, honouring a ``select``/``shuffle`` mapping."""
    table = dataset.data.table if hasattr(dataset.data, "table") else dataset.data
    col = table.column(key)
    indices = getattr(dataset, "_indices", None)
    if indices is not None:
        col = col.take(indices.column(0))
    return col


def read_features(dataset: datasets.Dataset, keys: Sequence[str], *,
                  impute: str | None = None, source: str = "dataset",
                  ) -> tuple[np.ndarray, dict[str, int]]:
    """Read pass-rate columns into a float64 matrix, validated, without Python lists.

    Args:
        dataset: the taskset.
        keys: feature column names, weak reference first.
        impute: ``None`` (a NaN or missing value is an error), ``"mean"`` or ``"median"``
            (replaced by that column's statistic over its present values).
        source: how errors name the data (a path or a selector name).

    Returns:
        ``(features, imputed)``: ``features`` has shape ``(len(dataset), len(keys))``,
        C-contiguous float64 in [0, 1]; ``imputed`` maps each key to how many values were
        filled (all zero unless ``impute`` is set).

    Raises:
        SelectorConfigError: a key is missing, a column is not numeric, a value lies
            outside [0, 1], or a value is NaN/null and ``impute`` is ``None``. The message
            names the column, the first offending row (counted from 0) and the count.
    """
    if impute not in (None, "mean", "median"):
        raise SelectorConfigError(f"{source}: impute must be None, 'mean' or 'median', "
                                  f"not {impute!r}")
    missing = [k for k in keys if k not in dataset.column_names]
    if missing:
        raise SelectorConfigError(
            f"{source}: feature column(s) {missing} not found; the dataset has "
            f"{dataset.column_names}")
    n = len(dataset)
    features = np.empty((n, len(keys)), dtype=np.float64)
    imputed: dict[str, int] = {}
    for j, key in enumerate(keys):
        try:
            values = pass_rate_values(_arrow_column(dataset, key), key, source, booleans=True)
        except TasksetError as exc:
            raise SelectorConfigError(str(exc)) from None
        bad = np.isnan(values)  # nulls come through Arrow as NaN
        if bad.any() and impute is None:
            raise SelectorConfigError(
                f"{source}: feature column {key!r} has {int(bad.sum())} missing/NaN "
                f"value(s), first at row {int(np.argmax(bad))}; drop those rows or pass "
                f"impute='mean' or 'median'")
        present = values[~bad]
        if bad.any():
            if present.size == 0:
                raise SelectorConfigError(
                    f"{source}: feature column {key!r} has no values to impute from")
            fill = fill_value(present, impute)
            values = np.where(bad, fill, values)
            log.warning("%s: imputed %d NaN value(s) of %r with the column %s %.4f",
                        source, int(bad.sum()), key, impute, fill)
        imputed[key] = int(bad.sum())
        features[:, j] = values
    return features, imputed


# --------------------------------------------------------------------------------------
# Settings checks
# --------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------
# The data source and the driver
# --------------------------------------------------------------------------------------


class TaskColumns:
    """A ``datasets.Dataset`` seen the way Trinity's selectors read it, with fast columns.

    Trinity's selectors build their feature matrices with ``np.array(list(dataset[key]))``;
    on a ``datasets.Dataset`` that walks the column row by row through the formatter (seconds
    for 54k rows). Here ``columns[key]`` returns the column as a numpy array read once through
    Arrow (numbers as float64 or int64, exactly the values Python lists would carry), so the
    same code takes milliseconds. Rows (``columns[i]``), ``len`` and ``column_names`` pass
    through to the dataset, which stays available as ``.dataset``.
    """

    def __init__(self, dataset: datasets.Dataset):
        self.dataset = dataset
        self._cache: dict[str, Any] = {}

    def __len__(self) -> int:
        return len(self.dataset)

    @property
    def column_names(self) -> list[str]:
        return self.dataset.column_names

    def __getitem__(self, key):
        if not isinstance(key, str):
            return self.dataset[key]
        if key not in self._cache:
            if key not in self.dataset.column_names:
                raise KeyError(f"column {key!r} not in {self.dataset.column_names}")
            col = _arrow_column(self.dataset, key)
            if pa.types.is_floating(col.type):
                self._cache[key] = pc.cast(col, pa.float64()).to_numpy(zero_copy_only=False)
            elif pa.types.is_integer(col.type) and col.null_count == 0:
                self._cache[key] = pc.cast(col, pa.int64()).to_numpy(zero_copy_only=False)
            else:
                self._cache[key] = self.dataset[key]
        return self._cache[key]


def _hf_dataset(data: Any) -> datasets.Dataset:
    """The ``datasets.Dataset`` behind a data source's ``dataset`` attribute."""
    return data.dataset if isinstance(data, TaskColumns) else data


class DataSource:
    """What Trinity's selectors read from their data source, and nothing more.

    In a Trinity run the data source is the task file reader's batch reader; selectors touch
    only ``dataset`` (columns by name) and ``dataset_size``. With ``fast_columns`` (default)
    ``dataset`` is a :class:`TaskColumns` view, so Trinity's selectors read their feature
    columns as numpy arrays instead of walking the dataset row by row; their decisions are
    the same either way. ``fast_columns=False`` hands over the ``datasets.Dataset`` itself,
    exactly as Trinity's reader does.
    """

    def __init__(self, dataset: datasets.Dataset, name: str = "taskset",
                 fast_columns: bool = True):
        self.name = name
        self.dataset = TaskColumns(dataset) if fast_columns else dataset

    @property
    def dataset_size(self) -> int:
        return len(self.dataset)


def _as_index_list(indices: Any) -> list[int]:
    if isinstance(indices, torch.Tensor | np.ndarray):
        return [int(i) for i in indices.tolist()]
    return [int(i) for i in indices]


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


# --------------------------------------------------------------------------------------
# Complete selector state
# --------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------
# BOTS
# --------------------------------------------------------------------------------------


class BOTSSelector(BaseSelector):
    """BOTS task selection with a complete, resumable state (see the module docstring).

    With two feature keys and the same kwargs it makes exactly the decisions of Trinity's
    ``difficulty_based`` selector: every floating-point operation is done in the same order
    on the same values, the same seeded draws are taken, and ties are broken by the same
    torch calls. ``config.kwargs`` accepts :data:`DIFFICULTY_KWARGS` (Trinity's defaults) and
    :data:`BOTS_EXTRA_KWARGS`.

    Attributes:
        alphas, betas: Beta posterior parameters, shape ``(n,)``.
        features: reference pass rates, shape ``(n, k)`` with ``k`` 1 or 2.
        cap_coef: capability coefficient (``None`` before the first feedback, and always in
            the one-reference mode, which uses the single column as ``p_tilde`` directly).
        rho: implicit-evidence weight (halved over time when ``adaptive_rho``).
        current_index: tasks handed out so far (seeds the draws, as in Trinity).
        step: feedback calls so far.
        imputed: per feature key, how many values were imputed.
    """

    STATE_VERSION = 1

    def __init__(self, data_source, config: DataSelectorConfig):
        super().__init__(data_source, config)
        kwargs = dict(config.kwargs or {})
        check_selector_settings("bots", None, list(config.feature_keys or []), None, **kwargs)
        opts = {**DIFFICULTY_KWARGS, **BOTS_EXTRA_KWARGS, **kwargs}
        self.feature_keys = list(config.feature_keys)
        self.impute = opts["impute"]
        features, self.imputed = read_features(
            _hf_dataset(data_source.dataset), self.feature_keys, impute=self.impute, source="BOTSSelector")
        self.features = features
        self.n = len(features)
        self.seed = config.seed
        self.m = opts["m"]
        self.lamb = opts["lamb"]
        self.rho = opts["rho"]
        self.target_reward = opts["target_reward"]
        self.tau = opts["tau"]
        self.do_sample = bool(opts["do_sample"])
        self.adaptive_rho = bool(opts["adaptive_rho"])
        self.implicit_only = bool(opts["implicit_only"])
        self.cap_coef_update_discount = opts["cap_coef_update_discount"]
        self.min_anchor_gap = opts["min_anchor_gap"]
        self.skipped_cap_updates = 0
        # Columns used by every update, cut once: weak reference and (strong - weak).
        self._weak = np.ascontiguousarray(features[:, 0])
        self._gap = (np.ascontiguousarray(features[:, 1] - features[:, 0])
                     if features.shape[1] == 2 else None)
        self.alphas = np.ones(self.n, dtype=np.float64)
        self.betas = np.ones(self.n, dtype=np.float64)
        self.cap_coef: float | None = None
        self.current_index = 0
        self.step = 0

    # -- model -----------------------------------------------------------------------
    @property
    def one_reference(self) -> bool:
        return self._gap is None

    def implicit_pass_rates(self, cap_coef: float | None = None) -> np.ndarray:
        """``p_tilde`` for every task, shape ``(n,)``: the reference interpolation
        ``clip(w + c (s - w), 0, 1)`` at ``cap_coef`` (default: the current estimate ``c``).

        ``c = 0`` is the weak reference, ``c = 1`` the strong one; values outside [0, 1]
        extrapolate. Without an estimate (before the first feedback), and always in the
        one-reference mode, the first column is returned.
        """
        c = self.cap_coef if cap_coef is None else cap_coef
        if self._gap is None or c is None:
            return np.clip(self._weak, 0, 1)
        return np.clip(self._gap * c + self._weak, 0, 1)

    def predict_pass_rates(self, rng: np.random.Generator | None = None,
                           do_sample: bool | None = None) -> np.ndarray:
        """A Thompson draw from every task's posterior (or its mean), shape ``(n,)``."""
        sample = self.do_sample if do_sample is None else do_sample
        if sample:
            rng = rng if rng is not None else np.random.default_rng(
                self.seed + self.current_index)
            return rng.beta(self.alphas, self.betas)
        return self.alphas / (self.alphas + self.betas)

    def get_scores(self) -> np.ndarray:
        """Selection scores ``-|target_reward - p_hat|`` for the next call, shape ``(n,)``."""
        p = self.predict_pass_rates(np.random.default_rng(self.seed + self.current_index))
        return -np.abs(self.target_reward - p)

    def get_indices(self, batch_size: int, return_extra_info: bool = False):
        """Choose ``batch_size`` distinct tasks whose sampled pass rate is nearest the target."""
        if not 0 < batch_size <= self.n:
            raise ValueError(f"BOTSSelector: batch_size {batch_size} must lie in [1, {self.n}]")
        scores = torch.from_numpy(self.get_scores())
        if self.tau == 0:
            chosen = torch.topk(scores, batch_size).indices
        else:
            logits = scores / self.tau
            logits -= logits.max()
            probs = torch.softmax(logits, dim=0)
            gen = torch.Generator()
            gen.manual_seed(self.seed + self.current_index)
            chosen = torch.multinomial(probs, batch_size, replacement=False, generator=gen)
        self.current_index += batch_size
        indices = chosen.tolist()
        if not return_extra_info:
            return indices
        a, b = self.alphas[indices], self.betas[indices]
        return indices, {"indices": indices, "scores": scores[chosen].tolist(),
                         "alphas": a.tolist(), "betas": b.tolist(),
                         "point": (a / (a + b)).tolist()}

    def feedback(self, indices: Sequence[int], values: Sequence[float]) -> None:
        """Update every posterior from one step's observed pass rates (module docstring)."""
        idx = np.asarray(_as_index_list(indices), dtype=np.int64)
        v = np.asarray(values, dtype=np.float64).reshape(-1)
        if idx.size != v.size:
            raise ValueError(f"BOTSSelector.feedback: {idx.size} indices, {v.size} values")
        if idx.size == 0:
            return
        # Same operations, in the same order, as Trinity's InterpolationBetaPREstimator.
        r = np.mean(v)
        if self._gap is not None:
            anchors = np.mean(self.features[idx], axis=0)
            gap = anchors[1] - anchors[0]
            if self.min_anchor_gap is not None and gap < self.min_anchor_gap:
                # The batch cannot place the learner between the references: a tiny gap
                # turns noise in r into a huge c_hat. Keep the previous estimate.
                self.skipped_cap_updates += 1
            else:
                c_hat = (r - anchors[0]) / (gap + 1e-6)
                if self.cap_coef is None:
                    self.cap_coef = c_hat
                else:
                    d = self.cap_coef_update_discount
                    self.cap_coef = d * self.cap_coef + (1 - d) * c_hat
        need_implicit = self.rho != 0 or self.adaptive_rho or self.implicit_only
        if need_implicit and self._gap is not None and self.cap_coef is None:
            # No capability estimate yet (every batch so far skipped): no implicit evidence.
            need_implicit = self.implicit_only
        if need_implicit:
            if self._gap is not None and self.cap_coef is not None:
                p_tilde = self._gap * self.cap_coef
                p_tilde += self._weak
            else:
                p_tilde = self._weak.copy()
            np.maximum(p_tilde, 0, out=p_tilde)  # clip to [0, 1], cheaper than np.clip
            np.minimum(p_tilde, 1, out=p_tilde)
            if self.adaptive_rho and np.mean(np.abs(p_tilde[idx] - v)) >= 0.25:
                self.rho = self.rho * 0.5
        rho = 1.0 if self.implicit_only else self.rho
        a, b = self.alphas, self.betas
        a *= 1 - self.lamb
        a += self.lamb
        b *= 1 - self.lamb
        b += self.lamb
        if not self.implicit_only:
            # Explicit counts land only on the batch; with a repeated index the last value
            # wins, as with Trinity's dense assignment.
            last = _last_occurrence(idx)
            a[idx[last]] += (1 - rho) * (v[last] * self.m)
            b[idx[last]] += (1 - rho) * ((1 - v[last]) * self.m)
            if need_implicit:
                p_tilde[idx] = v
        if need_implicit and rho != 0:
            t = p_tilde * rho
            t *= self.m
            a += t
            np.subtract(1, p_tilde, out=t)
            t *= rho
            t *= self.m
            b += t
        self.step += 1

    # -- state -----------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything needed to continue exactly; plain Python types (JSON-safe)."""
        return {
            "version": self.STATE_VERSION,
            "current_index": int(self.current_index),
            "step": int(self.step),
            "n_tasks": int(self.n),
            "feature_keys": list(self.feature_keys),
            "alphas": self.alphas.tolist(),
            "betas": self.betas.tolist(),
            "cap_coef": None if self.cap_coef is None else float(self.cap_coef),
            "rho": float(self.rho),
            "skipped_cap_updates": int(self.skipped_cap_updates),
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output. A Trinity-style ``{"current_index"}`` state
        restores the position only (the posteriors restart from the prior, as in Trinity)."""
        state = dict(state_dict)
        self.current_index = int(state.get("current_index", 0))
        if "alphas" not in state:
            log.warning("BOTSSelector: state has no posteriors (a Trinity difficulty_based "
                        "state?); restoring the position only")
            return
        n = state.get("n_tasks", len(state["alphas"]))
        if n != self.n or len(state["alphas"]) != self.n or len(state["betas"]) != self.n:
            raise ValueError(f"BOTSSelector: state is for {n} tasks, this dataset has {self.n}")
        keys = state.get("feature_keys", self.feature_keys)
        if list(keys) != self.feature_keys:
            raise ValueError(f"BOTSSelector: state was saved with feature keys {keys}, "
                             f"this selector reads {self.feature_keys}")
        self.alphas = np.array(state["alphas"], dtype=np.float64)
        self.betas = np.array(state["betas"], dtype=np.float64)
        c = state.get("cap_coef")
        self.cap_coef = None if c is None else float(c)
        self.rho = float(state.get("rho", self.rho))
        self.step = int(state.get("step", 0))
        self.skipped_cap_updates = int(state.get("skipped_cap_updates", 0))


def _last_occurrence(idx: np.ndarray) -> np.ndarray:
    """Positions in ``idx`` of the last occurrence of each distinct value, shape ``(u,)``."""
    if idx.size < 2:
        return np.arange(idx.size)
    rev = idx[::-1]
    _, first_in_rev = np.unique(rev, return_index=True)
    return idx.size - 1 - first_in_rev


# --------------------------------------------------------------------------------------
# Feedback operator
# --------------------------------------------------------------------------------------


class RolloutPassRateCalculator(ExperienceOperatorV1):
    """Per-task pass rates with one value per rollout, for the selector's ``feedback``.

    Experiences are grouped by task (``exp.info["task_index"]``: ``taskset_id`` and
    ``index``, set by Trinity's workflow runner) and, within a task, by rollout: Trinity
    names a run by its experience id ``eid.rid`` = ``batch/task/run`` (``eid.run`` is the
    repeat number, offset by ``run_id_base`` when a task's repeats are split across
    runners). A run's value is the mean reward of its experiences (under ``multi_step_grpo``
    they all carry the run's reward), and a task's pass rate is the mean over its runs, so
    a run that made many model calls weighs no more than one that made a single call.

    Returns the metric dict Trinity's task scheduler reads (``selector_metric``) and the
    same ``selection/*`` ratios as Trinity's ``pass_rate_calculator``, plus
    ``selection/runs_per_task`` and ``selection/experiences_per_run``.
    """

    def __init__(self, **kwargs: Any):
        if kwargs:
            raise TypeError(f"RolloutPassRateCalculator takes no arguments, got {sorted(kwargs)}")

    async def process(self, exps: list) -> tuple[list, dict]:
        return exps, self.compute(exps)

    @staticmethod
    def run_rewards(exps: Iterable) -> dict[Any, dict[int, list[float]]]:
        """``{taskset_id: {task index: [one value per rollout]}}`` in first-seen order."""
        runs: dict[Any, dict[int, dict[str, list[float]]]] = defaultdict(
            lambda: defaultdict(lambda: defaultdict(list)))
        for k, exp in enumerate(exps):
            info = getattr(exp, "info", None) or {}
            task = info.get("task_index")
            if not isinstance(task, Mapping) or "taskset_id" not in task or "index" not in task:
                raise ValueError(
                    f"RolloutPassRateCalculator: experience {k} (eid {exp.eid}) has no "
                    f"info['task_index'] with 'taskset_id' and 'index'; got {task!r}")
            if exp.reward is None:
                raise ValueError(f"RolloutPassRateCalculator: experience {k} (eid {exp.eid}) "
                                 f"has no reward")
            runs[task["taskset_id"]][int(task["index"])][exp.eid.rid].append(float(exp.reward))
        return {ts: {i: [float(np.mean(r)) for r in per_run.values()]
                     for i, per_run in tasks.items()} for ts, tasks in runs.items()}

    def compute(self, exps: Sequence) -> dict:
        """The metric dict for one explore step's experiences."""
        per_task = self.run_rewards(exps)
        metric, rates, n_runs = {}, [], []
        for taskset_id, tasks in per_task.items():
            indices = list(tasks)
            values = [float(np.mean(v)) for v in tasks.values()]
            metric[taskset_id] = {"indices": indices, "values": values}
            rates += values
            n_runs += [len(v) for v in tasks.values()]
        out: dict[str, Any] = {SELECTOR_METRIC: metric}
        if not rates:
            return out
        pr = np.asarray(rates)
        lo, hi = 1 / 16 + 1e-3, 15 / 16 - 1e-3
        out.update({
            "selection/valid_ratio": float(np.mean((pr > 0) & (pr < 1))),
            "selection/strict_valid_ratio": float(np.mean((pr > lo) & (pr < hi))),
            "selection/<1_ratio": float(np.mean(pr < 1)),
            "selection/>0_ratio": float(np.mean(pr > 0)),
            "selection/<15_16_ratio": float(np.mean(pr < hi)),
            "selection/>1_16_ratio": float(np.mean(pr > lo)),
            "selection/runs_per_task": float(np.mean(n_runs)),
            "selection/experiences_per_run": len(exps) / float(np.sum(n_runs)),
        })
        return out

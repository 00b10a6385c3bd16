"""BOTSSelector: BOTS task selection as a Trinity selector, with a complete, resumable state.

:class:`BOTSSelector` is a Trinity selector (a ``BaseSelector`` subclass, usable in a config
as ``selector_type: mathagent.selectors.BOTSSelector``) that makes the same decisions as
``difficulty_based`` on the same inputs, bit for bit, and adds

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
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from trinity.buffer.selector.selector import BaseSelector
from trinity.common.config import DataSelectorConfig

from mathagent.selectors.capabilities import BOTS_EXTRA_KWARGS, DIFFICULTY_KWARGS
from mathagent.selectors.checks import check_selector_settings
from mathagent.selectors.features import _as_index_list, _hf_dataset, read_features

log = logging.getLogger(__name__)


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

    # Trinity loads the class by its public dotted path (BOTS_PATH) and reports it there.
    __module__ = "mathagent.selectors"

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
            p_tilde = self.implicit_pass_rates()
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

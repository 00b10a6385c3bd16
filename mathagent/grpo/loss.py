"""The learning signal of a GRPO step: judge rewards, group advantages, the clipped loss."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mathagent.judge import score


def score_completions(texts: Sequence[str], truths: Sequence[str],
                      lenient: bool = True) -> np.ndarray:
    """Accuracy reward (0/1) of each text against its truth, with the package's judge.

    Returns an array of shape ``(len(texts),)``.
    """
    return np.array([float(score(t, y, lenient=lenient)["accuracy"])
                     for t, y in zip(texts, truths, strict=True)], dtype=np.float64)


def group_advantages(rewards: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """GRPO advantages for rewards of shape ``(B, n)`` (B groups of n completions).

    Each reward is centred on its group mean and scaled by the group's standard
    deviation. When all ``n`` rewards of a group agree the numerator is exactly zero, so
    the group contributes no policy gradient: a task the model always or never solves
    teaches nothing, which is why the selector's choice of tasks matters.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    if rewards.ndim != 2:
        raise ValueError(f"rewards must have shape (B, n), got {rewards.shape}")
    mean = rewards.mean(axis=1, keepdims=True)
    std = rewards.std(axis=1, ddof=1, keepdims=True) if rewards.shape[1] > 1 else 0.0
    adv = (rewards - mean) / (std + eps)
    adv[np.isclose(rewards, mean).all(axis=1)] = 0.0
    return adv


def clipped_pg_loss(logp, old_logp, advantages, mask, clip_eps: float, denom: float,
                    ref_logp=None, kl_coef: float = 0.0):
    """PPO-style clipped policy-gradient loss, summed over tokens and divided by ``denom``.

    ``logp``, ``old_logp``, ``mask`` (and ``ref_logp``): ``(m, R)`` token tensors;
    ``advantages``: ``(m,)``, one per sequence, broadcast over its tokens. Dividing every
    micro-batch by the token count of the whole batch makes the summed micro-batch
    gradients equal the token-mean loss of the full batch (Trinity's ``token-mean``).
    The KL penalty is the k3 estimator ``exp(ref - logp) - (ref - logp) - 1``.
    Returns ``(loss, stats)`` with the clip fraction and mean KL over real tokens.
    """
    import torch

    ratio = torch.exp(logp - old_logp)
    adv = advantages[:, None]
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv
    per_token = -torch.minimum(unclipped, clipped)
    kl = None
    if ref_logp is not None and kl_coef > 0:
        delta = ref_logp - logp
        kl = torch.exp(delta) - delta - 1.0
        per_token = per_token + kl_coef * kl
    loss = (per_token * mask).sum() / denom
    with torch.no_grad():
        n_tok = mask.sum().clamp(min=1)
        stats = {
            "clipfrac": float(((unclipped != clipped).float() * mask).sum() / n_tok),
            "kl": float((kl * mask).sum() / n_tok) if kl is not None else 0.0,
            "tokens": float(mask.sum()),
        }
    return loss, stats

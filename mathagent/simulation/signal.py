"""The learning signal of a rollout group: what GRPO learns from a task rolled out ``n`` times."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from mathagent.tasks import informative_probability


def learning_signal(k: np.ndarray, n: int) -> np.ndarray:
    """Learning signal of groups with ``k`` successes out of ``n`` rollouts, shape of ``k``.

    The unbiased variance of the group's 0/1 rewards, ``k (n - k) / (n (n - 1))``: zero when
    all ``n`` rewards agree (GRPO's advantages are then all zero), largest at ``k = n / 2``.
    """
    k = np.asarray(k, dtype=np.float64)
    return k * (n - k) / (n * (n - 1))


def expected_signal(p: np.ndarray, n: int) -> np.ndarray:
    """Expected learning signal of a task with pass rate ``p`` rolled out ``n`` times.

    ``E[k (n - k) / (n (n - 1))] = p (1 - p)`` for ``k ~ Binomial(n, p)``: the quantity this
    simulation's learner gains per task. Shape of ``p``.
    """
    p = np.asarray(p, dtype=np.float64)
    return p * (1 - p)


def signal_curve(group_sizes: Iterable[int] = (4, 8, 16), points: int = 101) -> pd.DataFrame:
    """Tidy table ``p, n, signal, p_mixed`` for the signal-curve figure."""
    p = np.linspace(0, 1, points)
    return pd.concat([pd.DataFrame({"p": p, "n": n, "signal": expected_signal(p, n),
                                    "p_mixed": informative_probability(p, n)})
                      for n in group_sizes], ignore_index=True)

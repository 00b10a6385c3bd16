"""Pass-rate statistics: the fill value of an imputation and the difficulty landscape.

The data side of the landscape figures (they live in :mod:`mathagent.plots`): how much GRPO
signal a pass rate carries, per-column summaries and how well the generator's parameters
predict measured difficulty.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from mathagent.tasks.schema import pass_rate_columns


def fill_value(present: np.ndarray, rule: str) -> float:
    """The value that fills a column's missing pass rates: the ``mean`` or ``median`` of
    its ``present`` values."""
    if rule not in ("mean", "median"):
        raise ValueError(f"fill rule must be 'mean' or 'median', not {rule!r}")
    return float(np.mean(present) if rule == "mean" else np.median(present))


def informative_probability(p: np.ndarray | float, n: int) -> np.ndarray:
    """Chance that ``n`` rollouts of a task with pass rate ``p`` do not all agree.

    GRPO normalises rewards within a group of ``n`` rollouts; when all ``n`` are right
    (prob ``p**n``) or all wrong (``(1-p)**n``) every advantage is zero and the task
    teaches nothing. Shape follows ``p``.
    """
    p = np.asarray(p, dtype=float)
    return 1.0 - p**n - (1.0 - p) ** n


def pass_rate_summary(frame: pd.DataFrame, columns: Sequence[str] | None = None,
                      group_size: int = 8) -> pd.DataFrame:
    """One row per pass-rate column: mean, share at exactly 0 and 1, and GRPO signal.

    ``informative`` is the mean of :func:`informative_probability` over tasks: the
    expected share of groups of ``group_size`` rollouts with a non-zero advantage.
    """
    columns = list(columns) if columns is not None else pass_rate_columns(frame.columns)
    rows = []
    for name in columns:
        p = frame[name].to_numpy(dtype=float)
        rows.append({"column": name, "tasks": len(p), "mean": float(np.mean(p)),
                     "share_0": float(np.mean(p == 0.0)), "share_1": float(np.mean(p == 1.0)),
                     "share_between": float(np.mean((p > 0.0) & (p < 1.0))),
                     f"informative_n{group_size}": float(
                         np.mean(informative_probability(p, group_size)))})
    return pd.DataFrame(rows).set_index("column")


def difficulty_correlations(frame: pd.DataFrame, features: Sequence[str],
                            params: Sequence[str] = ("difficulty", "n_terms", "max_operand",
                                                     "word_problem")) -> pd.DataFrame:
    """Spearman correlation of each pass-rate column (columns) with each generator parameter
    (rows); how well the generator's knobs predict measured difficulty."""
    present = [p for p in params if p in frame.columns]
    data = frame[list(features) + present].astype(float)
    return data.corr(method="spearman").loc[present, list(features)]

"""Reference solutions to the exercises of notebook 02 (the agent and its judge).

Exercise 1 (predict the judge): for each reply of :data:`PREDICTIONS`, predict the reward of
the upstream judge (``gsm8k_judge``: the last ``\\boxed{}`` only), of the strict reading (a box
or a ``#### x`` line) and of the lenient one (``lenient_judge``, which the ``*_arithmetic``
configs train with: also the last number), then check with ``judge.upstream_reward`` and
``judge.score``.

Exercise 2 (from rollouts to pass rates): given a table of several rollouts per task, some
of them failed (an ``error`` text, or no reward), compute each task's pass rate the way
``measure-pass-rates`` does: a failed rollout is not a wrong answer, so a task with a failed
rollout has no pass rate yet.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: Exercise 1: (reply, truth, upstream reward, strict reward, lenient reward).
PREDICTIONS = (
    ("The answer is \\boxed{12}.", "12", 1, 1, 1),
    ("12 + 3 = 15, so the answer is 15.", "15", 0, 0, 1),
    ("#### 15", "15", 0, 1, 1),
    # a box is read before any bare number, also by the lenient reading
    ("I think \\boxed{7}. No wait, it is 8.", "8", 0, 0, 0),
    ("\\boxed{{7}}", "7", 1, 1, 1),  # the prompt's doubled braces, copied
    ("The total is 1,000.", "1000", 0, 0, 1),
)


def pass_rates(table: pd.DataFrame) -> pd.DataFrame:
    """Exercise 2: one row per task (``row``): ``rollouts``, ``failed`` and ``pass_rate``,
    the mean reward of its rollouts, or NaN while any of them failed."""
    from mathagent.rollouts import is_failed

    failed = np.array([is_failed(e, r) for e, r in zip(table["error"], table["reward"],
                                                       strict=True)], dtype=bool)
    rows = table.assign(failed=failed).groupby("row", sort=True)
    out = pd.DataFrame({"rollouts": rows.size(), "failed": rows["failed"].sum().astype(int),
                        "pass_rate": rows["reward"].mean()})
    out.loc[out["failed"] > 0, "pass_rate"] = np.nan
    return out

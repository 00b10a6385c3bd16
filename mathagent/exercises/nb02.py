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

Exercise 3 (a group's advantages): compute GRPO's advantage of each rollout of the group
:data:`GROUP` by hand.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mathagent.exercises import checking

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


#: Exercise 3: one group of eight rewards whose GRPO advantages the learner computes.
GROUP = (1, 0, 0, 1, 0, 0, 0, 0)


def group_advantages(rewards=GROUP) -> list[float]:
    """Exercise 3: each reward minus the group's mean, over the group's sample standard
    deviation (the package's trainer computes it in :func:`mathagent.grpo.loss.group_advantages`)."""
    r = np.asarray(rewards, dtype=float)
    return list((r - r.mean()) / r.std(ddof=1))


# -- self-checks (mathagent.exercises.checking) ------------------------------------------
def check_exercise1(predictions) -> bool:
    """Your rewards for the replies of :data:`PREDICTIONS`, in its order: a list of
    ``(upstream, strict, lenient)`` triples."""
    expected = [row[2:] for row in PREDICTIONS]
    try:
        got = [tuple(int(x) for x in triple) for triple in predictions]
    except (TypeError, ValueError):
        got = None
    wrong = [] if got is None else [i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b]
    right = got is not None and len(got) == len(expected) and not wrong
    where = f" Look again at reply {wrong[0] + 1}." if wrong else ""
    return checking.verdict(right, "Give one (upstream, strict, lenient) triple of 0/1 per "
                            f"reply, in order.{where} Only the last box counts upstream.")


def check_exercise2(table: pd.DataFrame, answer: pd.DataFrame) -> bool:
    """Your per-task table for the rollouts ``table``: indexed by ``row``, with a
    ``pass_rate`` column."""
    expected = pass_rates(table)["pass_rate"]
    try:
        got = answer["pass_rate"].reindex(expected.index)
        right = bool(np.allclose(got.to_numpy(float), expected.to_numpy(float), equal_nan=True))
    except (KeyError, TypeError, ValueError, AttributeError):
        right = False
    return checking.verdict(right, "One row per task (index `row`), a `pass_rate` column; a "
                            "task with a failed rollout has no pass rate yet (NaN), not a lower one.")


def check_exercise3(advantages) -> bool:
    """Your eight advantages for the rewards :data:`GROUP`, in order."""
    try:
        got = np.asarray(advantages, dtype=float)
        right = got.shape == (len(GROUP),) and np.allclose(got, group_advantages(), atol=0.01)
    except (TypeError, ValueError):
        right = False
    return checking.verdict(right, "Subtract the group's mean reward, then divide by its "
                            "sample standard deviation (ddof=1); a right rollout gets a "
                            "positive advantage, a wrong one a negative.")

"""Reference solutions to the exercises of notebook 05 (results).

Exercise 1 (a standard error by hand): from ``metrics.per_seed`` of one source, compute
``difficulty_based``'s margin over ``random`` in held-out accuracy at the last common
evaluation, and its standard error from the spread over seeds (the two selectors' sample
variances, each over its number of seeds, added, then the square root). Compare with the
verdict's ``z``. How many seeds would the Trinity-RFT runs need for a margin of that size to
reach two standard errors, if the spread stayed as it is?

Exercise 2 (spot the shortcut in the numbers, then in the replies): list the runs whose mean
reply length over their last ten steps is below a quarter of that over their first ten; then
read those runs' saved replies of the last steps.
"""

from __future__ import annotations

import math

import pandas as pd

from mathagent import metrics


def margin_by_hand(table: pd.DataFrame, selector: str = "difficulty_based",
                   baseline: str = "random") -> dict[str, float]:
    """Exercise 1: ``diff``, ``se`` and ``z`` of ``selector`` against ``baseline`` in final
    held-out accuracy, and ``seeds_for_2se``: the seeds per selector at which the same margin
    and spread would give two standard errors."""
    ps = metrics.per_seed(table, baseline=baseline)
    a = list(ps.loc[ps["selector"] == selector, "eval_final"])
    b = list(ps.loc[ps["selector"] == baseline, "eval_final"])

    def var(xs):
        m = sum(xs) / len(xs)
        return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)

    diff = sum(a) / len(a) - sum(b) / len(b)
    se = math.sqrt(var(a) / len(a) + var(b) / len(b))
    # se scales as 1/sqrt(n) with n seeds on each side: z(n) = diff / sqrt((va + vb) / n)
    seeds = math.ceil(4 * (var(a) + var(b)) / diff ** 2) if diff else math.inf
    return {"diff": diff, "se": se, "z": diff / se, "seeds_for_2se": seeds}


def shortcut_runs(table: pd.DataFrame, window: int = 10, shrink: float = 0.25
                  ) -> list[tuple[str, int]]:
    """Exercise 2: ``(selector, seed)`` of the runs whose mean reply length over the last
    ``window`` training steps is below ``shrink`` times that over the first ``window``."""
    out = []
    for (sel, seed), run in table[table["step"] > 0].groupby(["selector", "seed"]):
        last = run["step"].max()
        first = run.loc[run["step"] <= window, "response_length"].mean()
        final = run.loc[run["step"] > last - window, "response_length"].mean()
        if final < shrink * first:
            out.append((str(sel), int(seed)))
    return out

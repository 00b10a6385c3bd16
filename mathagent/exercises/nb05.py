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

Exercise 3 (seeds for the headline): in the headline experiment (``results/trinity_qwen``), how
many seeds per arm would show ``bots``'s observed lead over ``random`` at two standard errors,
if the spread over seeds stayed as it is?
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from mathagent import metrics, paths, results
from mathagent.exercises import checking


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


#: Exercise 3: the headline experiment and the two arms compared.
HEADLINE = paths.RESULTS_DIR / "trinity_qwen"
HEADLINE_ARMS = ("bots", "random")


def headline_seeds(folder: str | Path = HEADLINE, arms: tuple[str, str] = HEADLINE_ARMS) -> int:
    """Exercise 3: the seeds per arm at which the observed difference of ``arms`` in final
    held-out accuracy would reach two standard errors, if the spread over seeds stayed as it
    is: the smallest ``n`` with ``diff / sqrt((var_a + var_b) / n) >= 2``."""
    runs = results.load_runs([folder], progress=False)
    last = runs.dropna(subset=["eval_accuracy"]).groupby(["selector", "seed"])["step"].max()
    step = int(last.min())
    finals = runs[(runs["step"] == step)].dropna(subset=["eval_accuracy"])
    a, b = (finals.loc[finals["selector"] == arm, "eval_accuracy"] for arm in arms)
    diff = a.mean() - b.mean()
    return math.ceil((2 / diff) ** 2 * (a.var(ddof=1) + b.var(ddof=1)))


# -- self-checks (mathagent.exercises.checking) ------------------------------------------
def check_exercise1(table: pd.DataFrame, z: float, seeds: int) -> bool:
    """Your ``z`` of ``difficulty_based`` over ``random`` for the runs of ``table`` and the
    seeds per selector the same margin would need for two standard errors."""
    expected = margin_by_hand(table)
    right = checking.close(z, expected["z"], 0.05) and seeds == expected["seeds_for_2se"]
    return checking.verdict(right, "Welch's standard error: sqrt(var_a / n_a + var_b / n_b) "
                            "with sample variances (ddof=1); it shrinks as 1/sqrt(n).")


def check_exercise2(table: pd.DataFrame, runs) -> bool:
    """Your ``(selector, seed)`` pairs of ``table`` whose replies shrank below a quarter."""
    return checking.verdict(checking.same_items(runs, shortcut_runs(table)),
                            "Per run, the mean response_length over the last ten training "
                            "steps against the first ten (step 0 is no training step).")


def check_exercise3(seeds: int) -> bool:
    """Your seeds per arm for :data:`HEADLINE_ARMS` of the headline experiment."""
    return checking.verdict(seeds == headline_seeds(),
                            "Take each arm's held-out accuracy at the last evaluation every "
                            "run reached; solve diff / sqrt((var_a + var_b) / n) >= 2 for the "
                            "smallest whole n.")

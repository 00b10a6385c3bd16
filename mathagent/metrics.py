"""Selector metrics from tidy per-step tables: ETR, rollout and eval accuracy, TTB, BSF.

Every run of this package, simulated, tutorial-scale or Trinity, ends as a tidy table with
one row per ``(selector, seed, step)`` and the columns

* ``rollout_accuracy``: mean reward of the step's rollouts;
* ``eval_accuracy``: accuracy on the held-out eval set (NaN on steps without an eval);
* ``effective_task_ratio``: share of the step's tasks whose observed pass rate lies strictly
  between 0 and 1 (the tasks GRPO can learn from; all-right and all-wrong groups have zero
  advantage).

From such a table this module computes, per selector and seed, and then as mean and spread
(std, min, max) over seeds:

* ``etr``, ``rollout_accuracy``: means over training steps;
* ``eval_final``, ``eval_best``: last and best eval accuracy within the budget;
* **TTB** (time to baseline): steps a selector needs to first reach ``target`` x the
  baseline's (random's) best eval accuracy, divided by the steps the baseline needed to first
  reach it. Below 1 is faster. Seeds are paired (selector seed ``s`` against baseline seed
  ``s``, which in the simulation share all random streams). A selector that never gets there
  within the budget has NaN for that seed and counts as not reached (``ttb_reached`` is the
  share of seeds that did); ``ttb_*`` statistics are over the seeds that reached it.
* **BSF** (best so far): best eval accuracy within the budget divided by the baseline's.

TTB and BSF need the baseline's run of the same seed: :func:`time_to_baseline` and
:func:`best_so_far_ratio` refuse a seed the baseline lacks. :func:`per_seed` and
:func:`summarize` take such seeds (a selector with a seed more than the baseline, while an
experiment is under way): their other metrics count, their TTB and BSF are NaN and
``ttb_reached`` is over the paired seeds.

The BOTS paper reports TTB(100%) and BSF against random in the same way.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

#: A difference of at least this many standard errors over seeds is one the seeds can show
#: (the verdict calls it clear; the reports' power is this many standard errors).
SHOWN_SE = 2.0

KEYS = ("selector", "seed", "step")
METRICS = ("rollout_accuracy", "eval_accuracy", "effective_task_ratio")


class TableError(ValueError):
    """A results table that does not have the tidy shape."""


def validate_table(table: pd.DataFrame, metrics: Sequence[str] = METRICS,
                   source: str = "table") -> None:
    """Check the tidy shape: key columns, numeric metric columns, unique keys.

    Raises:
        TableError: naming the missing column, the non-numeric column or a repeated key.
    """
    missing = [c for c in (*KEYS, *metrics) if c not in table.columns]
    if missing:
        raise TableError(f"{source}: missing column(s) {missing}; it has {list(table.columns)}")
    for c in metrics:
        if not pd.api.types.is_numeric_dtype(table[c]):
            raise TableError(f"{source}: column {c!r} is not numeric ({table[c].dtype})")
    dup = table.duplicated(list(KEYS))
    if dup.any():
        row = table[dup].iloc[0]
        raise TableError(f"{source}: {int(dup.sum())} repeated (selector, seed, step) key(s), "
                         f"first {tuple(row[list(KEYS)])} at row {int(np.argmax(dup.values))}")


def effective_task_ratio(pass_rates: Any) -> np.ndarray | float:
    """Share of tasks with ``0 < p < 1`` along the last axis.

    Args:
        pass_rates: observed pass rates, shape ``(..., tasks)``.

    Returns:
        Shape ``(...)`` (a float for a 1-D input).
    """
    p = np.asarray(pass_rates, dtype=np.float64)
    out = ((p > 0) & (p < 1)).mean(axis=-1)
    return float(out) if out.ndim == 0 else out


def _eval_rows(table: pd.DataFrame, budget: int | None) -> pd.DataFrame:
    ev = table.dropna(subset=["eval_accuracy"])
    if budget is not None:
        ev = ev[ev["step"] <= budget]
    return ev.sort_values(["selector", "seed", "step"], kind="stable")


def default_budget(table: pd.DataFrame, baseline: str) -> int:
    """The last step every selector and seed reached (a fair common budget)."""
    last = table.groupby(["selector", "seed"])["step"].max()
    return int(last.min())


def _baseline_best(table: pd.DataFrame, baseline: str, budget: int, target: float
                   ) -> pd.DataFrame:
    """Per seed: the baseline's best eval accuracy and the first step reaching target x it."""
    if baseline not in set(table["selector"]):
        raise TableError(f"baseline selector {baseline!r} is not in the table; it has "
                         f"{sorted(set(table['selector']))}")
    ev = _eval_rows(table[table["selector"] == baseline], budget)
    if ev.empty:
        raise TableError(f"baseline {baseline!r} has no eval accuracy within {budget} steps")
    rows = []
    for seed, g in ev.groupby("seed"):
        best = float(g["eval_accuracy"].max())
        goal = target * best
        step = int(g.loc[g["eval_accuracy"] >= goal - 1e-12, "step"].iloc[0])
        rows.append({"seed": seed, "baseline_best": best, "goal": goal, "baseline_steps": step})
    return pd.DataFrame(rows)


def time_to_baseline(table: pd.DataFrame, baseline: str = "random", target: float = 1.0,
                     budget: int | None = None) -> pd.DataFrame:
    """TTB per (selector, seed): ``steps to reach target x baseline's best`` / baseline's.

    Args:
        table: tidy per-step table (see the module docstring).
        baseline: the reference selector (random in the BOTS paper).
        target: fraction of the baseline's best eval accuracy to reach (1.0: TTB(100%)).
        budget: last step considered (default: the common last step, :func:`default_budget`).

    Returns:
        Columns ``selector, seed, ttb, steps, baseline_steps, baseline_best, goal, reached``.
        ``ttb`` is NaN when the selector never reaches the goal within the budget, or when
        the baseline was already at its best at step 0 (``baseline_steps == 0``).
    """
    validate_table(table, ("eval_accuracy",))
    if not 0 < target <= 1.5:
        raise ValueError(f"target={target} must be a fraction of the baseline's best in (0, 1.5]")
    budget = default_budget(table, baseline) if budget is None else budget
    base = _baseline_best(table, baseline, budget, target).set_index("seed")
    ev = _eval_rows(table, budget)
    rows = []
    for (sel, seed), g in ev.groupby(["selector", "seed"], sort=False):
        if seed not in base.index:
            raise TableError(f"selector {sel!r} has seed {seed!r}, which the baseline "
                             f"{baseline!r} lacks; seeds must be paired")
        b = base.loc[seed]
        hit = g.loc[g["eval_accuracy"] >= b["goal"] - 1e-12, "step"]
        steps = float(hit.iloc[0]) if len(hit) else np.nan
        bsteps = float(b["baseline_steps"])
        ttb = steps / bsteps if bsteps > 0 and not np.isnan(steps) else np.nan
        rows.append({"selector": sel, "seed": seed, "ttb": ttb, "steps": steps,
                     "baseline_steps": bsteps, "baseline_best": b["baseline_best"],
                     "goal": b["goal"], "reached": bool(len(hit))})
    return pd.DataFrame(rows)


def best_so_far_ratio(table: pd.DataFrame, baseline: str = "random",
                      budget: int | None = None) -> pd.DataFrame:
    """BSF per (selector, seed): best eval accuracy within ``budget`` / the baseline's.

    Returns:
        Columns ``selector, seed, bsf, best, baseline_best``.
    """
    validate_table(table, ("eval_accuracy",))
    budget = default_budget(table, baseline) if budget is None else budget
    base = _baseline_best(table, baseline, budget, 1.0).set_index("seed")["baseline_best"]
    best = _eval_rows(table, budget).groupby(["selector", "seed"], sort=False)[
        "eval_accuracy"].max().rename("best").reset_index()
    best["baseline_best"] = best["seed"].map(base)
    if best["baseline_best"].isna().any():
        seed = best.loc[best["baseline_best"].isna(), "seed"].iloc[0]
        raise TableError(f"seed {seed!r} has no baseline {baseline!r} run; seeds must be paired")
    with np.errstate(divide="ignore", invalid="ignore"):
        best["bsf"] = best["best"] / best["baseline_best"]
    return best[["selector", "seed", "bsf", "best", "baseline_best"]]


def per_seed(table: pd.DataFrame, baseline: str = "random", target: float = 1.0,
             budget: int | None = None) -> pd.DataFrame:
    """One row per (selector, seed): ``etr, rollout_accuracy, eval_final, eval_best, ttb,
    ttb_reached, bsf``, all within the budget. A seed the baseline has no run of has NaN for
    ``ttb``, ``ttb_reached`` and ``bsf`` (they compare with the same seed's baseline run)."""
    validate_table(table)
    budget = default_budget(table, baseline) if budget is None else budget
    t = table[table["step"] <= budget]
    paired = t[t["seed"].isin(set(t.loc[t["selector"] == baseline, "seed"]))]
    train = t[t["step"] > 0]
    out = train.groupby(["selector", "seed"], sort=False).agg(
        etr=("effective_task_ratio", "mean"),
        rollout_accuracy=("rollout_accuracy", "mean")).reset_index()
    ev = _eval_rows(t, budget).groupby(["selector", "seed"], sort=False)["eval_accuracy"]
    out = out.merge(ev.last().rename("eval_final").reset_index(), how="left",
                    on=["selector", "seed"])
    out = out.merge(ev.max().rename("eval_best").reset_index(), how="left",
                    on=["selector", "seed"])
    ttb = time_to_baseline(paired, baseline, target, budget)[
        ["selector", "seed", "ttb", "reached"]]
    out = out.merge(ttb.rename(columns={"reached": "ttb_reached"}), how="left",
                    on=["selector", "seed"])
    # a paired seed without an evaluation in the budget did not reach the baseline's best
    in_pair = out["seed"].isin(set(paired["seed"]))
    if not in_pair.all():   # True/False where paired, NaN where not
        out["ttb_reached"] = out["ttb_reached"].astype(object)
    out.loc[in_pair & out["ttb_reached"].isna(), "ttb_reached"] = False
    bsf = best_so_far_ratio(paired, baseline, budget)[["selector", "seed", "bsf"]]
    return out.merge(bsf, how="left", on=["selector", "seed"])


def summarize(table: pd.DataFrame, baseline: str = "random", target: float = 1.0,
              budget: int | None = None) -> pd.DataFrame:
    """Mean and spread over seeds, one row per selector (first-seen order).

    Columns: ``selector, n_seeds`` and for each of ``etr, rollout_accuracy, eval_final,
    eval_best, ttb, bsf`` the ``_mean, _std, _min, _max``; ``ttb_reached`` is the share of
    seeds that reached the baseline's best (``ttb_*`` are over those seeds), of the seeds the
    baseline has a run of.
    """
    ps = per_seed(table, baseline, target, budget)
    order = list(dict.fromkeys(table["selector"]))
    rows = []
    for sel in order:
        g = ps[ps["selector"] == sel]
        row: dict[str, Any] = {"selector": sel, "n_seeds": int(g["seed"].nunique())}
        for m in ("etr", "rollout_accuracy", "eval_final", "eval_best", "ttb", "bsf"):
            v = g[m].dropna().to_numpy(dtype=float)
            row[f"{m}_mean"] = float(v.mean()) if v.size else np.nan
            row[f"{m}_std"] = float(v.std(ddof=1)) if v.size > 1 else (0.0 if v.size else np.nan)
            row[f"{m}_min"] = float(v.min()) if v.size else np.nan
            row[f"{m}_max"] = float(v.max()) if v.size else np.nan
        reached = g["ttb_reached"].dropna()
        row["ttb_reached"] = float(reached.astype(bool).mean()) if len(reached) else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def write_metrics(table: pd.DataFrame, out_dir: str | Path, params: Mapping[str, Any] | None = None,
                  baseline: str = "random", target: float = 1.0,
                  budget: int | None = None) -> dict[str, Path]:
    """Write ``per_seed.csv``, ``summary.csv`` and ``metrics_params.json`` to ``out_dir``.

    ``metrics_params.json`` records how the metrics were computed (baseline, target, budget)
    and, under ``"run"``, the run's own ``params`` when given.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    budget = default_budget(table, baseline) if budget is None else budget
    ps = per_seed(table, baseline, target, budget)
    summary = summarize(table, baseline, target, budget)
    files = {"per_seed": out / "per_seed.csv", "summary": out / "summary.csv",
             "metrics_params": out / "metrics_params.json"}
    ps.to_csv(files["per_seed"], index=False)
    summary.to_csv(files["summary"], index=False)
    meta = {"baseline": baseline, "target": target, "budget": budget,
            "selectors": list(dict.fromkeys(table["selector"])),
            "seeds": sorted(int(s) if isinstance(s, np.integer | int) else s
                            for s in set(table["seed"])),
            "definitions": {
                "etr": "mean over training steps of the share of tasks with 0 < pass rate < 1",
                "ttb": "steps to first reach target x baseline's best eval accuracy / "
                       "baseline's steps to reach it (paired by seed)",
                "bsf": "best eval accuracy within budget / baseline's",
            }}
    if params is not None:
        meta["run"] = dict(params)
    with open(files["metrics_params"], "w") as f:
        json.dump(meta, f, indent=2, default=str)
    return files


def difference(per_seed_table: pd.DataFrame, selector: str, other: str,
               column: str = "eval_final") -> dict[str, float]:
    """``selector``'s mean of ``column`` over seeds minus ``other``'s, with the standard error
    of that difference from the spread over seeds (Welch: ``sqrt(s1^2/n1 + s2^2/n2)``, sample
    standard deviations) and ``z``, the difference in standard errors.

    ``se`` and ``z`` are NaN when either side has fewer than two seeds; ``z`` is infinite when
    the seeds agree exactly on both sides and the means differ.
    """
    for name in (selector, other):
        if name not in set(per_seed_table["selector"]):
            raise TableError(f"selector {name!r} is not in the per-seed table; it has "
                             f"{sorted(set(per_seed_table['selector']))}")
    a = per_seed_table.loc[per_seed_table["selector"] == selector, column].dropna()
    b = per_seed_table.loc[per_seed_table["selector"] == other, column].dropna()
    diff = float(a.mean() - b.mean())
    if len(a) < 2 or len(b) < 2:
        return {"diff": diff, "se": np.nan, "z": np.nan, "df": np.nan, "p": np.nan}
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = float(np.sqrt(va + vb))
    z = diff / se if se > 0 else (np.inf * np.sign(diff) if diff else 0.0)
    # Welch-Satterthwaite degrees of freedom: with 2-3 seeds an arm they are few, and the
    # t distribution's tails are far heavier than the normal's
    df = float((va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))) \
        if se > 0 else np.nan
    return {"diff": diff, "se": se, "z": float(z), "df": df,
            "p": two_sided_t(float(z), df) if np.isfinite(df) else np.nan}


def two_sided_t(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom (real ``df`` > 0):
    ``I_x(df/2, 1/2)`` at ``x = df / (df + t^2)``, the regularised incomplete beta function."""
    if not np.isfinite(t):
        return 0.0
    return _incomplete_beta(df / 2, 0.5, df / (df + t * t))


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b), by its continued fraction
    (Lentz's method, the symmetry I_x(a, b) = 1 - I_{1-x}(b, a) where it converges faster)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _incomplete_beta(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x)) / a
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    out = d
    for m in range(1, 300):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            out *= c * d
        if abs(c * d - 1.0) < 1e-12:
            break
    return front * out


def eval_se(accuracy: Any, tasks: Any) -> np.ndarray | float:
    """The standard error of a held-out accuracy over ``tasks`` tasks, at most: the accuracy
    is the mean over the tasks of each task's accuracy (the mean over its runs), which lies in
    [0, 1], so that drawn from tasks of mean accuracy ``accuracy`` its variance is at most
    ``accuracy * (1 - accuracy)`` (the task-level bound, ``0.5 / sqrt(tasks)`` at worst).

    It bounds how far the number could move were the held-out tasks drawn anew, with their
    runs, for one set of weights; the runs' noise alone, the tasks kept, is smaller (at most
    the same over the runs per task). It leaves out how much the weights depend on the run's
    seed (:func:`difference` measures that, from several seeds). Computed at the measured
    accuracy: 0 for an accuracy of 0 or 1.
    """
    p, n = np.asarray(accuracy, dtype=float), np.asarray(tasks, dtype=float)
    if np.any(n <= 0):
        raise ValueError(f"eval_se: tasks must be positive, got {tasks!r}")
    out = np.sqrt(np.clip(p * (1 - p), 0, None) / n)
    return float(out) if out.ndim == 0 else out

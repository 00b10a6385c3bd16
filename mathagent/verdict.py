"""The verdict: every source of evidence in one table, the same metrics, who won where.

The package has three kinds of evidence on ``difficulty_based`` (BOTS) against ``random``:
the simulation (:mod:`mathagent.simulation`, a bandit model driving the real selectors), the
package's own GRPO trainer (``train-local``) and Trinity-RFT itself. They differ in scale
(tasks x replies per step, steps, seeds), so each is read into the same metrics of
:mod:`mathagent.metrics` within its own common budget:

* ``rollout_accuracy``, ``etr``: means over the training steps and seeds;
* ``eval_final``: held-out accuracy at each seed's last evaluation within the budget, mean over
  seeds; ``eval_step`` is the earliest of those last evaluations, the step every seed reached; ``vs_random``: its difference from the baseline's, ``se`` the standard error
  of that difference from the spread over seeds (:func:`mathagent.metrics.difference`), ``z``
  the difference in standard errors;
* ``ttb``, ``ttb_reached``, ``bsf``: time to the baseline's best and best-so-far ratio.

:func:`who_won` reads that table per source: the selector with the best ``eval_final``, how
many seeds it stands on, its margin over the runner-up and ``difficulty_based``'s over
``random``, each in standard errors, and whether a margin is clear (at least :data:`CLEAR`
standard errors) or not.
:func:`gather` collects the sources, :func:`report` prints both tables.

Every standard error here is the seeds' (the spread of a selector's final held-out accuracy
over its seeds), not the evaluation's sampling noise (a binomial over the eval set's tasks):
with few seeds the two differ, and only the former includes how much a run depends on its seed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from mathagent import metrics
from mathagent.results import RunError, has_runs, load_runs

#: A margin of at least this many standard errors counts as clear.
CLEAR = metrics.SHOWN_SE
#: The selector under study and the baseline it is measured against.
STUDIED, BASELINE = "difficulty_based", "random"
#: The columns of :func:`evidence_table`, in order.
COLUMNS = ("source", "selector", "seeds", "batch", "steps", "eval_step", "rollout_accuracy",
           "etr", "eval_final", "vs_random", "se", "z", "ttb", "ttb_reached", "bsf")


@dataclass(frozen=True)
class Evidence:
    """One source: its name, its tidy per-step table and its batch shape per step."""

    source: str
    table: pd.DataFrame
    tasks: int
    replies: int


def _at(params: object, *keys: str) -> dict:
    for key in keys:
        params = params.get(key) if isinstance(params, dict) else None
    return params if isinstance(params, dict) else {}


def shape_of(folder: str | Path) -> tuple[int, int]:
    """``(tasks per step, replies per task)`` of a results folder, from its ``params.json``
    or the first run folder's: ``config.rollout`` (``train-local``) or
    ``settings.algorithm`` (``python -m mathagent train``)."""
    folder = Path(folder)
    candidates = [folder / "params.json", *sorted(folder.glob("*/params.json"))]
    file = next((f for f in candidates if f.is_file()), None)
    if file is None:
        raise RunError(f"{folder}: no params.json in it or in its run folders")
    try:
        params = json.loads(file.read_text())
    except json.JSONDecodeError as exc:
        raise RunError(f"{file}: not JSON ({exc})") from None
    rollout = _at(params, "config", "rollout")
    if {"batch_size", "repeat_times"} <= set(rollout):
        return int(rollout["batch_size"]), int(rollout["repeat_times"])
    algorithm = _at(params, "settings", "algorithm")
    if {"batch_size", "group_size"} <= set(algorithm):
        return int(algorithm["batch_size"]), int(algorithm["group_size"])
    raise RunError(f"{file}: neither config.rollout.batch_size/repeat_times nor "
                   "settings.algorithm.batch_size/group_size")


def from_runs(source: str, folder: str | Path) -> Evidence:
    """The runs under ``folder`` as one source of evidence."""
    tasks, replies = shape_of(folder)
    return Evidence(source, load_runs([folder], progress=False), tasks, replies)


def gather(runs: Mapping[str, str | Path], *first: Evidence) -> list[Evidence]:
    """``first`` (a simulated sweep, say), then each results folder of ``runs`` (source name
    to folder) that holds runs, read by :func:`from_runs`; folders without runs are left out."""
    return [*first, *(from_runs(name, folder) for name, folder in runs.items()
                      if has_runs(folder))]


def evidence_table(evidence: Sequence[Evidence], baseline: str = BASELINE) -> pd.DataFrame:
    """One row per source and selector with :data:`COLUMNS` (see the module docstring)."""
    if not evidence:
        raise ValueError("evidence_table: no sources given")
    rows = []
    for ev in evidence:
        try:
            budget = metrics.default_budget(ev.table, baseline)
            ps = metrics.per_seed(ev.table, baseline=baseline, budget=budget)
            summary = metrics.summarize(ev.table, baseline=baseline, budget=budget)
        except (metrics.TableError, ValueError) as exc:
            raise RunError(f"source {ev.source!r}: {exc}") from None
        evals = ev.table.dropna(subset=["eval_accuracy"])
        evals = evals[evals["step"] <= budget]
        eval_step = int(evals.groupby(["selector", "seed"])["step"].max().min())
        for _, s in summary.iterrows():
            d = (metrics.difference(ps, s["selector"], baseline) if s["selector"] != baseline
                 else {"diff": np.nan, "se": np.nan, "z": np.nan})
            rows.append({
                "source": ev.source, "selector": s["selector"], "seeds": int(s["n_seeds"]),
                "batch": f"{ev.tasks} x {ev.replies}", "steps": budget, "eval_step": eval_step,
                "rollout_accuracy": s["rollout_accuracy_mean"], "etr": s["etr_mean"],
                "eval_final": s["eval_final_mean"], "vs_random": d["diff"], "se": d["se"],
                "z": d["z"], "ttb": s["ttb_mean"], "ttb_reached": s["ttb_reached"],
                "bsf": s["bsf_mean"]})
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    rank = table["selector"].map(lambda s: (s != baseline, not s.startswith(STUDIED), s))
    order = sorted(range(len(table)), key=lambda i: (_source_rank(evidence, table.at[i, "source"]),
                                                     rank[i]))
    return table.loc[order].reset_index(drop=True)


def _source_rank(evidence: Sequence[Evidence], source: str) -> int:
    return [ev.source for ev in evidence].index(source)


def _reading(name: str, other: str, z: float) -> str:
    if np.isnan(z):
        return f"{name} vs {other}: too few seeds for a standard error"
    if abs(z) >= CLEAR:
        ahead, behind = (name, other) if z > 0 else (other, name)
        return f"{ahead} ahead of {behind} by {abs(z):.1f} SE: clear"
    return f"{name} vs {other}: {z:+.1f} SE, not clear"


def who_won(evidence: Sequence[Evidence], baseline: str = BASELINE,
            studied: str = STUDIED) -> pd.DataFrame:
    """Per source: scale, the best selector by final held-out accuracy, how many seeds it
    stands on (``best_seeds``) and its margin over the runner-up, and ``studied``'s margin over
    ``baseline``, each in standard errors over seeds, with a reading (clear at :data:`CLEAR`
    standard errors or more; the two selectors' numbers of seeds where they differ).
    ``seeds``: the distinct seeds of all selectors. A margin is NaN where either side has one
    seed (no spread, so no standard error); ``best_seeds`` shows it for the best selector."""
    rows = []
    for ev in evidence:
        try:
            budget = metrics.default_budget(ev.table, baseline)
            ps = metrics.per_seed(ev.table, baseline=baseline, budget=budget)
        except (metrics.TableError, ValueError) as exc:
            raise RunError(f"source {ev.source!r}: {exc}") from None
        means = ps.groupby("selector", sort=False)["eval_final"].mean().sort_values(
            ascending=False, kind="stable")
        best, runner_up = means.index[0], means.index[1] if len(means) > 1 else None
        counts = ps.groupby("selector")["seed"].nunique()
        row = {"source": ev.source, "batch": f"{ev.tasks} x {ev.replies}", "steps": budget,
               "seeds": int(ps["seed"].nunique()), "best": best,
               "best_seeds": int(counts[best]), "best_eval_final": float(means.iloc[0]),
               "runner_up": runner_up}
        if runner_up is not None:
            row["best_vs_runner_up_z"] = metrics.difference(ps, best, runner_up)["z"]
        if {studied, baseline} <= set(means.index):
            z = metrics.difference(ps, studied, baseline)["z"]
            row[f"{studied}_vs_{baseline}_z"] = z
            row["reading"] = _reading(studied, baseline, z)
            if counts[studied] != counts[baseline]:   # an experiment under way
                row["reading"] += f" ({counts[studied]} seeds against {counts[baseline]})"
        else:   # the baseline is there (per_seed needs it): the studied selector is not yet
            row["reading"] = f"no {studied} runs yet"
        rows.append(row)
    return pd.DataFrame(rows)


def report(evidence: Sequence[Evidence], baseline: str = BASELINE) -> str:
    """:func:`evidence_table` and :func:`who_won` as text, rounded (:func:`rounded`)."""
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        return "\n\n".join(rounded(t).to_string(index=False)
                             for t in (evidence_table(evidence, baseline),
                                       who_won(evidence, baseline)))


def rounded(table: pd.DataFrame, decimals: int = 3) -> pd.DataFrame:
    """``table`` for display: accuracies and ratios to ``decimals``, ``z`` to one decimal."""
    out = table.copy()
    for col in out.columns:
        if col.endswith("_z") or col == "z":
            out[col] = out[col].round(1)
        elif pd.api.types.is_float_dtype(out[col]):
            out[col] = out[col].round(decimals)
    return out

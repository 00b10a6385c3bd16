"""The training runs made in a checkout (``runs/``), read beside the committed ones."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from mathagent.results import RunError
from mathagent.run_facts.tables import run_folders


def runs_made_here(root: str | Path | None = None) -> list[Path]:
    """The training runs made in this checkout, under ``runs/`` (``root``, default
    :func:`mathagent.paths.runs_dir`): every ``train-local`` run folder
    (``train_local/<stamp>-...``, by name, so by the time it began; one killed before its
    first step is listed too), then the Trinity-RFT runs found under any ``smoke`` folder (the
    short runs of notebook 04 and ``launch.run_smoke``), by path. While ``python -m mathagent
    tutorial`` runs, the notebooks' scratch folders are in its run folder (``--out``, which
    may lie outside ``runs/``): its ``smoke`` folders are searched too. Simulated sweeps are not
    training runs and are left out."""
    from mathagent import paths
    from mathagent.results import find_runs, has_runs

    root = Path(root) if root is not None else paths.runs_dir()
    found = sorted(d for d in (root / paths.TRAIN_LOCAL_RUNS).glob("*") if d.is_dir())
    searched = [root]
    tutorial_run = os.environ.get(paths.RUN_DIR_ENV)
    if tutorial_run and not Path(tutorial_run).resolve().is_relative_to(root.resolve()):
        searched.append(Path(tutorial_run))
    for where in searched:
        for smoke in sorted(p for p in where.rglob(paths.SMOKE_RUNS) if p.is_dir()):
            if has_runs(smoke):
                found += [r for r in find_runs(smoke) if r not in found]
    return found


def _made_by(run: Path) -> str:
    """``train-local`` or ``Trinity-RFT``, from the ``kind`` the run's ``params.json`` records
    (``train-local`` or ``train``); without one, from the files the run holds."""
    try:
        kind = json.loads((run / "params.json").read_text()).get("kind")
    except (OSError, ValueError):
        kind = None
    if kind in ("train-local", "train"):
        return "train-local" if kind == "train-local" else "Trinity-RFT"
    return "train-local" if (run / "metrics.csv").is_file() else "Trinity-RFT"


def runs_overview(runs: Iterable[str | Path], source: str,
                  relative_to: str | Path) -> pd.DataFrame:
    """One row per run: where it comes from (``source``), whether ``train-local`` or
    Trinity-RFT made it, its folder relative to ``relative_to`` (else in full), selector, seed,
    last step, held-out accuracy at the first and the last evaluation (with their steps) and
    the mean rollout accuracy of the last step that has one. A run with nothing to read yet is
    a row whose ``note`` names the file at fault."""
    from mathagent.results import read_run

    rows = []
    for run in map(Path, runs):
        try:
            name = str(run.relative_to(relative_to))
        except ValueError:
            name = str(run)
        row = {"source": source, "made by": _made_by(run), "run": name}
        try:
            table = read_run(run)
            if table.empty:
                raise RunError(f"{run}: its table has no rows yet")
        except RunError as err:
            rows.append({**row, "steps": 0, "note": str(err)})
            continue
        evals = table.dropna(subset=["eval_accuracy"]).sort_values("step")
        rollout = table.dropna(subset=["rollout_accuracy"])
        row.update({"selector": table["selector"].iloc[0], "seed": int(table["seed"].iloc[0]),
                    "steps": int(table["step"].max())})
        if len(rollout):
            last = rollout[rollout["step"] == rollout["step"].max()]
            row["rollout accuracy, last step"] = f"{last['rollout_accuracy'].mean():.3f}"
        if len(evals):
            first_eval, last_eval = evals.iloc[0], evals.iloc[-1]
            row["held-out, first eval"] = \
                f"{first_eval['eval_accuracy']:.3f} (step {int(first_eval['step'])})"
            row["held-out, last eval"] = \
                f"{last_eval['eval_accuracy']:.3f} (step {int(last_eval['step'])})"
        rows.append(row)
    columns = ["source", "made by", "run", "selector", "seed", "steps", "held-out, first eval",
               "held-out, last eval", "rollout accuracy, last step", "note"]
    table = pd.DataFrame(rows, columns=columns).dropna(axis=1, how="all")
    return table.fillna("-")


def your_runs(committed: Iterable[str | Path],
              root: str | Path | None = None) -> tuple[str, pd.DataFrame]:
    """A line saying how many training runs were made here (:func:`runs_made_here`) and one
    :func:`runs_overview` table of them above the committed run folders of the results
    folders ``committed``."""
    from mathagent import paths

    root = Path(root) if root is not None else paths.runs_dir()
    mine = runs_made_here(root)
    line = f"{len(mine)} training run(s) made here under {root}" + (
        "" if mine else ": notebook 04 makes them (train-local on the CPU, Trinity-RFT on a GPU)")
    table = pd.concat([runs_overview(mine, "made here", root),
                       runs_overview(run_folders(committed), "committed", paths.RESULTS_DIR)],
                      ignore_index=True).fillna("-")
    return line, table

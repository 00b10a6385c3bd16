"""GPU time of the runs still to do, from the phase times of the runs already in the folder.

A run's minutes from ``train`` to its end are estimated as

    start-up (``startup.csv``: minutes to "step 1 starts")
    + steps x the whole step (``phase_times.csv``: one explore start to the next)
    + per held-out evaluation after step 0, what it adds beyond the training step it runs
      beside (``evaluation`` less ``training step``: the explorer evaluates while the trainer
      trains, so a step with an evaluation takes about the longer of the two)
    + a step-0 evaluation, whole, where the run has one and the folder's runs had none,

each a median over the folder's runs of the same arm (over all its runs where the arm has
none yet). The Ray head's start and the laying out come on top (under a minute each).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from mathagent.experiment.schedule import schedule
from mathagent.results.spec import Run

STEP_ROW = "whole step (log: one explore start to the next)"
EVAL_ROW, TRAIN_ROW = "evaluation", "training step"
START_ROW, STEP0_ROW = "step 1 starts", "step-0 evaluation starts"


@dataclass(frozen=True)
class Estimate:
    """Minutes of one run from ``train`` to its end, and the runs the medians came from."""

    minutes: float
    based_on: tuple[str, ...]


def folder_times(out: Path) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """``phase_times.csv`` and ``startup.csv`` of ``out`` (one column per run), or None."""
    phases, startup = out / "phase_times.csv", out / "startup.csv"
    if not (phases.is_file() and startup.is_file()):
        return None
    return pd.read_csv(phases, index_col=0), pd.read_csv(startup, index_col=0)


def estimate(run: Run, out: Path) -> Estimate | None:
    """The minutes ``run`` should take, from the runs in ``out``; None without any."""
    times = folder_times(out)
    if times is None:
        return None
    phases, startup = times
    runs = [c for c in phases.columns if c in startup.columns]
    same_arm = [c for c in runs if c.rsplit("_seed", 1)[0] == run.arm]
    based_on = same_arm or runs
    if not based_on:
        return None
    phase = phases[based_on].median(axis=1, skipna=True)
    start = startup[based_on].median(axis=1, skipna=True)
    plan = schedule(run)
    later_evals = sum(1 for s in plan.eval_steps if s > 0)
    extra_eval = max(0.0, phase[EVAL_ROW] - phase[TRAIN_ROW]) if later_evals else 0.0
    seconds = plan.steps * phase[STEP_ROW] + later_evals * extra_eval
    minutes = start[START_ROW] + seconds / 60
    if 0 in plan.eval_steps and math.isnan(start.get(STEP0_ROW, math.nan)):
        minutes += phase[EVAL_ROW] / 60
    return Estimate(round(float(minutes), 1), tuple(based_on))

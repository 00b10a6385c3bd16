"""The ``target_reward`` knob: the same world run at several targets, side by side.

Notebook 03's toy steps use ``target_reward = 0.5`` (where GRPO's expected signal peaks), the
reference configs and every reported run use 0.8, and the results notebooks suspect 0.8 of
serving easy tasks. :func:`compare_targets` runs ``random`` and ``difficulty_based`` at each
target on one world (shared random streams, so differences are differences of the target) and
returns the per-step table and one summary row per selector.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from mathagent.simulation.config import SimConfig
from mathagent.simulation.specs import UPSTREAM_BOTS, SelectorSpec, target_specs
from mathagent.simulation.sweep import SweepResult, run_sweep

#: The two targets the tutorial compares: the signal's peak and the reference configs' value.
TUTORIAL_TARGETS = (0.5, 0.8)
#: The summary columns :func:`compare_targets` reports, in order.
KNOB_COLUMNS = ("selector", "target_reward", "selected_pass_rate", "rollout_accuracy_mean",
                "etr_mean", "eval_final_mean", "ttb_mean", "ttb_reached", "bsf_mean")
#: The panels of :func:`plot_target_comparison`: ``(metric, label, smoothing window)``.
KNOB_PANELS = (("selected_true_pass_rate", "true pass rate of the selected tasks", 5),
               ("effective_task_ratio", "effective task ratio (ETR)", 5),
               ("eval_accuracy", "eval accuracy (hard set)", 1))


@dataclass
class TargetComparison:
    """``result``: the sweep (per-step tables); ``table``: one row per selector with
    :data:`KNOB_COLUMNS` (``target_reward`` is NaN for the baseline)."""

    result: SweepResult
    table: pd.DataFrame


def compare_targets(config: SimConfig, targets: Sequence[float] = TUTORIAL_TARGETS,
                    baseline: str = "random", workers: int | None = None,
                    progress: bool = False) -> TargetComparison:
    """Run ``baseline`` and ``difficulty_based`` at each of ``targets`` on one world.

    ``selected_pass_rate`` is the learner's true pass rate on the tasks the selector picked,
    averaged over training steps and seeds: where the target actually puts the batches.
    TTB and BSF are against ``baseline`` (see :mod:`mathagent.metrics`).
    """
    from mathagent import metrics

    specs = target_specs(targets, config.n_rollouts, baseline)
    result = run_sweep(config, specs, workers=workers, progress=progress)
    summary = metrics.summarize(result.steps, baseline=baseline)
    train = result.steps[result.steps["step"] > 0]
    selected = train.groupby("selector", sort=False)["selected_true_pass_rate"].mean()
    target_of = {s.label: s.kwargs.get("target_reward", float("nan")) for s in specs}
    summary["target_reward"] = summary["selector"].map(target_of).astype(float)
    summary["selected_pass_rate"] = summary["selector"].map(selected)
    return TargetComparison(result, summary[list(KNOB_COLUMNS)].reset_index(drop=True))


def plot_target_comparison(comparison: TargetComparison, title: str | None = None):
    """Where each target puts the batches, the share of them GRPO can use, and eval accuracy,
    over steps (mean line, min-max band over seeds), one panel each."""
    from mathagent import plots

    steps = comparison.result.steps
    names = list(comparison.table["selector"])
    return plots.plot_panels(steps, KNOB_PANELS, selectors=names,
                             title=title or "the target_reward knob, same world and streams")


def evidence_specs(n_rollouts: int = 8, targets: Sequence[float] = (0.5,)) -> list[SelectorSpec]:
    """The selectors the real runs compared, in the simulated world: ``random``,
    ``offline_easy2hard``, ``difficulty_based`` with the reference settings
    (``target_reward`` 0.8, as every real run) and, labelled ``difficulty_based
    target=<t>``, at each of ``targets``. The verdict of notebook 05 reads their sweep."""
    base = {**UPSTREAM_BOTS, "m": n_rollouts}
    specs = [SelectorSpec("random", "random"),
             SelectorSpec("offline_easy2hard", "offline_easy2hard"),
             SelectorSpec("difficulty_based", "difficulty_based", base)]
    for t in targets:
        if float(t) == base["target_reward"]:
            continue
        specs.append(SelectorSpec(f"difficulty_based target={float(t):g}", "difficulty_based",
                                  {**base, "target_reward": float(t)}, "ablation"))
    return specs

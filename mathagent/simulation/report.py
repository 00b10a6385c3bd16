"""A sweep written out: tables, metrics, the heatmap table and figures; the stand-in runs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from mathagent import paths
from mathagent.simulation.config import smoke_config
from mathagent.simulation.signal import signal_curve
from mathagent.simulation.specs import LAMB_GRID, RHO_GRID, UPSTREAM_BOTS, default_specs
from mathagent.simulation.sweep import SweepResult, run_sweep


def heatmap_table(summary: pd.DataFrame, selectors: pd.DataFrame,
                  lamb_grid: Sequence[float] = LAMB_GRID,
                  rho_grid: Sequence[float] = RHO_GRID) -> pd.DataFrame:
    """Summary rows of the ``lamb x rho`` grid (BOTSSelector at the default target), with
    ``lamb`` and ``rho`` columns, for :func:`mathagent.plots.plot_ttb_heatmap`."""
    if not {"lamb", "rho", "target_reward"} <= set(selectors.columns):
        return summary.iloc[0:0].assign(lamb=[], rho=[])
    sel = selectors[(selectors["name"] == "bots")
                    & ~selectors.get("implicit_only", pd.Series(False, index=selectors.index))
                    .fillna(False).astype(bool)
                    & np.isclose(selectors["target_reward"].astype(float),
                                 UPSTREAM_BOTS["target_reward"])]
    sel = sel[sel["lamb"].isin(lamb_grid) & sel["rho"].isin(rho_grid)]
    return summary.merge(sel[["selector", "lamb", "rho"]], on="selector")


def runs_or_stand_in(runs: str | Path, work: str | Path, n_tasks: int, steps: int,
                     n_seeds: int, seed: int = 0) -> tuple[str, Path]:
    """``(what they are, folder)``: the real runs under ``runs`` when there are any, else a
    simulated stand-in of ``random`` vs ``difficulty_based`` written to ``work/simulated``.

    The label says plainly which of the two a figure shows (notebook 05 titles with it).
    """
    from mathagent import results

    runs = Path(runs)
    if results.has_runs(runs):
        where = runs.relative_to(paths.REPO_ROOT) if runs.is_relative_to(paths.REPO_ROOT) \
            else runs
        return f"tutorial-scale GRPO runs ({where})", runs
    config = smoke_config(n_tasks=n_tasks, steps=steps, n_seeds=n_seeds, seed=seed)
    specs = [s for s in default_specs(config.n_rollouts)
             if s.label in ("random", "difficulty_based")]
    out = Path(work) / "simulated"
    write_sweep(run_sweep(config, specs), out, figures=False)
    return "SIMULATED runs (mathagent.simulation, not model training)", out


def write_sweep(result: SweepResult, out_dir: str | Path, figures: bool = True,
                baseline: str = "random", force: bool = True) -> dict[str, Path]:
    """Write tables (CSV), the metrics summary, ``params.json`` and figures to ``out_dir``.

    Everything is written into a temporary folder beside ``out_dir`` and swapped in at the
    end, so a failure midway leaves an existing ``out_dir`` as it was
    (:class:`~mathagent.outputs.OutputError`). ``force=False`` keeps a non-empty ``out_dir``
    (``OutputError`` before anything is written); the library default replaces it, the
    ``simulate`` command passes its ``--force``.
    """
    from mathagent.outputs import check_output, rebase, staged_output

    out = Path(out_dir)
    check_output(out, force)
    with staged_output(out) as tmp:
        files = _write_sweep_files(result, tmp, figures, baseline)
    return rebase(files, tmp, out)


def _write_sweep_files(result: SweepResult, out: Path, figures: bool,
                       baseline: str) -> dict[str, Path]:
    from mathagent import metrics

    files = {
        "steps": out / "steps.csv",
        "posteriors": out / "posteriors.csv",
        "selectors": out / "selectors.csv",
        "signal_curve": out / "signal_curve.csv",
    }
    result.steps.to_csv(files["steps"], index=False)
    result.posteriors.to_csv(files["posteriors"], index=False)
    result.selectors.to_csv(files["selectors"], index=False)
    signal_curve(sorted({4, result.config.n_rollouts, 16})).to_csv(files["signal_curve"],
                                                                   index=False)
    params = result.params()
    with open(out / "params.json", "w") as f:
        json.dump(params, f, indent=2, default=str)
    files["params"] = out / "params.json"
    written = metrics.write_metrics(result.steps, out, params=params, baseline=baseline)
    files.update(written)
    summary = pd.read_csv(written["summary"])
    heat = heatmap_table(summary, result.selectors)
    heat.to_csv(out / "heatmap.csv", index=False)
    files["heatmap"] = out / "heatmap.csv"
    if figures:
        files.update(draw_figures(result, summary, heat, out / "figures"))
    return files


MAIN_SELECTORS = ("sequential", "shuffle", "random", "offline_easy2hard", "difficulty_based",
                  "bots")


def draw_figures(result: SweepResult, summary: pd.DataFrame, heat: pd.DataFrame,
                 folder: str | Path) -> dict[str, Path]:
    """The sweep's figures, drawn from its tables only; returns ``figure:<name>`` -> PNG."""
    import matplotlib.pyplot as plt

    from mathagent import plots

    present = set(result.steps["selector"])
    main = [s for s in MAIN_SELECTORS if s in present]
    groups = result.selectors.set_index("selector")["group"]
    ablations = [s for s in groups.index
                 if s in present and (s == "random" or groups[s] in ("bots", "ablation"))]
    figs = {
        "training_curves": plots.plot_training_curves(result.steps, selectors=main),
        "training_curves_ablations": plots.plot_training_curves(result.steps,
                                                                selectors=ablations),
        "effective_task_ratio": plots.plot_etr(result.steps, selectors=main),
        "signal_curve": plots.plot_signal_curve(
            signal_curve(sorted({4, result.config.n_rollouts, 16}))),
        "summary": plots.plot_summary(summary),
    }
    if len(result.posteriors) and "bots" in set(result.posteriors["selector"]):
        figs["posteriors"] = plots.plot_posteriors(result.posteriors, selector="bots")
    if len(heat):
        figs["ttb_heatmap"] = plots.plot_ttb_heatmap(heat)
    written = {}
    for name, fig in figs.items():
        written[f"figure:{name}"] = plots.save_figure(fig, name, folder)
        plt.close(fig)
    return written

"""Figures about selectors and training runs, drawn from tidy tables only.

Every function takes ``pandas.DataFrame`` tables, the tidy per-step results table (one row per
``selector, seed, step``; see :mod:`mathagent.metrics`), one of the small tables the
simulation writes, or a taskset as a DataFrame (the pass-rate landscape figures at the end),
draws one matplotlib figure and returns it. Nothing here imports a trainer
or a selector, so the same figures come from simulated, tutorial-scale and Trinity runs.
:func:`save_figure` writes a figure where the tutorial collects them (:func:`mathagent.paths.figure_dir`).

Seeds are summarised as a mean line with a band: ``band="minmax"`` (the range over seeds) or
``band="std"`` (mean +- one standard deviation).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

# Fixed colours for the selectors a reader meets most, so every figure agrees.
SELECTOR_COLORS = {
    "random": "tab:gray",
    "sequential": "tab:brown",
    "shuffle": "tab:pink",
    "offline_easy2hard": "tab:olive",
    "difficulty_based": "tab:blue",
    "bots": "tab:orange",
}
# Trinity's difficulty_based and BOTSSelector coincide on the same inputs; dashes keep both
# visible when their lines overlap.
SELECTOR_STYLES = {"difficulty_based": (0, (4, 3))}
_CYCLE = ["tab:green", "tab:red", "tab:purple", "tab:cyan", "navy", "darkgoldenrod", "teal",
          "crimson", "slateblue", "darkgreen", "peru", "orchid", "black"]


def _plt():
    import matplotlib.pyplot as plt

    return plt


def selector_colors(selectors: Sequence[str]) -> dict[str, str]:
    """A colour per selector: fixed ones for the common names, a cycle for the rest."""
    out, k = {}, 0
    for s in selectors:
        if s in SELECTOR_COLORS:
            out[s] = SELECTOR_COLORS[s]
        else:
            out[s] = _CYCLE[k % len(_CYCLE)]
            k += 1
    return out


def save_figure(fig, name: str, folder: str | Path | None = None) -> Path:
    """Write ``fig`` as ``<folder>/<name>.png`` (default: the tutorial's figure folder)."""
    if folder is None:
        from mathagent.paths import figure_dir

        folder = figure_dir()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return path


def _check(table: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ValueError(f"{what}: table lacks column(s) {missing}; it has "
                         f"{list(table.columns)}")


def _selectors(table: pd.DataFrame, selectors: Sequence[str] | None) -> list[str]:
    present = list(dict.fromkeys(table["selector"]))
    if selectors is None:
        return present
    unknown = [s for s in selectors if s not in present]
    if unknown:
        raise ValueError(f"selector(s) {unknown} not in the table; it has {present}")
    return list(selectors)


def seed_band(table: pd.DataFrame, metric: str, band: str = "minmax",
              smooth: int = 1) -> pd.DataFrame:
    """Per (selector, step): ``mean, lo, hi, n`` of ``metric`` over seeds, its NaN rows
    dropped first (eval curves use eval steps only); ``smooth > 1``: a trailing moving
    average of that many points within each seed before aggregating."""
    if band not in ("minmax", "std"):
        raise ValueError(f"band must be 'minmax' or 'std', not {band!r}")
    t = table.dropna(subset=[metric]).sort_values(["selector", "seed", "step"])
    if smooth > 1:
        t = t.assign(**{metric: t.groupby(["selector", "seed"])[metric].transform(
            lambda s: s.rolling(smooth, min_periods=1).mean())})
    g = t.groupby(["selector", "step"])[metric]
    out = g.agg(["mean", "min", "max", "std", "count"]).reset_index()
    if band == "minmax":
        out["lo"], out["hi"] = out["min"], out["max"]
    else:
        sd = out["std"].fillna(0.0)
        out["lo"], out["hi"] = out["mean"] - sd, out["mean"] + sd
    return out.rename(columns={"count": "n"})[["selector", "step", "mean", "lo", "hi", "n"]]


def plot_metric(table: pd.DataFrame, metric: str, ax=None, selectors: Sequence[str] | None = None,
                band: str = "minmax", smooth: int = 1, colors: dict | None = None,
                ylabel: str | None = None, legend: bool = True, styles: dict | None = None,
                marker: str | None = None):
    """One panel: ``metric`` over steps, a mean line and a seed band per selector;
    ``styles``: selector -> line style (default :data:`SELECTOR_STYLES`, else solid);
    ``marker``: a marker on every point (for metrics measured at a few steps)."""
    from matplotlib.ticker import MaxNLocator

    plt = _plt()
    _check(table, ("selector", "seed", "step", metric), f"plot_metric({metric!r})")
    names = _selectors(table, selectors)
    colors = colors or selector_colors(names)
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 3.5))
    stats = seed_band(table[table["selector"].isin(names)], metric, band, smooth)
    for name in names:
        s = stats[stats["selector"] == name]
        if s.empty:
            continue
        style = (styles or {}).get(name) or SELECTOR_STYLES.get(name, "-")
        ax.plot(s["step"], s["mean"], color=colors[name], label=name, lw=1.6, ls=style,
                zorder=3 if style != "-" else 2, marker=marker, ms=3.5)
        if (s["n"] > 1).any():
            ax.fill_between(s["step"], s["lo"], s["hi"], color=colors[name], alpha=0.15, lw=0)
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))   # steps are whole numbers
    ax.set_ylabel(ylabel or metric.replace("_", " "))
    ax.grid(alpha=0.3)
    if legend:
        handles, labels = ax.get_legend_handles_labels()
        ax.legend(handles, _seed_labels(table, labels, metric), fontsize=8)
    return ax


def plot_training_curves(table: pd.DataFrame, selectors: Sequence[str] | None = None,
                         band: str = "minmax", smooth: int = 5, title: str | None = None,
                         eval_label: str = "eval accuracy", colors: dict | None = None,
                         start=None):
    """The reference figure's two panels for every selector (``selectors``, in legend order;
    default all), mean line and seed band (``band``): left, rollout accuracy over steps,
    smoothed over ``smooth`` steps; right, eval accuracy (labelled ``eval_label``) over the
    steps that have one. ``start``, where runs that evaluate no step 0 start from
    (:class:`mathagent.results.StartPoint`), is drawn at step 0 on the right panel, its range
    as an error bar, a dotted line from it to each selector's first evaluation."""
    plt = _plt()
    _check(table, ("selector", "seed", "step", "rollout_accuracy", "eval_accuracy"),
           "plot_training_curves")
    names = _selectors(table, selectors)
    colors = colors or selector_colors(names)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    plot_metric(table, "rollout_accuracy", left, names, band, smooth, colors,
                "rollout accuracy", legend=False)
    # evaluations come every few steps: each one marked, so that a lone one shows too
    plot_metric(table, "eval_accuracy", right, names, band, 1, colors, eval_label,
                legend=False, marker="o")
    if start is not None:
        start.check(table)
        _draw_start(right, table, names, colors, start)
    left.set_title("rollout accuracy (training batches)")
    right.set_title(eval_label)
    handles, labels = left.get_legend_handles_labels()
    if start is not None:   # the starting point's marker, from the right panel
        for handle, label in zip(*right.get_legend_handles_labels(), strict=True):
            if label.startswith(START_LABEL):
                handles, labels = [*handles, handle], [*labels, label]
    labels = _seed_labels(table, labels, "rollout_accuracy")
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8,
               frameon=False)
    seeds = table[table["selector"].isin(names)].groupby("selector")["seed"].nunique()
    counts = (f"{int(seeds.max())} seed(s)" if seeds.nunique() == 1
              else f"{int(seeds.min())}-{int(seeds.max())} seeds a selector")
    band_text = "min-max" if band == "minmax" else "+-1 std"
    fig.suptitle(title or f"mean over {counts}, band: {band_text}", fontsize=10)
    fig.tight_layout()
    return fig


#: The legend's name of a start measured once for all runs (step-0 evaluations of others).
START_LABEL = "start: step-0 evaluation"


def _seed_labels(table: pd.DataFrame, labels: Sequence[str], metric: str) -> list[str]:
    """The legend's selector names with the number of seeds each line of ``metric`` is a mean
    over, where the selectors in ``labels`` do not all have as many (a mean over three seeds
    beside a single run); seeds without a value of ``metric`` do not count, nor do selectors
    the legend does not name. Other labels (the start point's) as they are."""
    seeds = table.dropna(subset=[metric]).groupby("selector")["seed"].nunique()
    shown = [seeds[name] for name in labels if name in seeds.index]
    if len(set(shown)) <= 1:
        return list(labels)
    return [f"{name} ({seeds[name]} seed{'s' if seeds[name] > 1 else ''})"
            if name in seeds.index else name for name in labels]


def _draw_start(ax, table: pd.DataFrame, names: Sequence[str], colors: dict, start) -> None:
    """The shared starting point on the eval panel ``ax`` and a dotted line from it to each
    selector's first evaluation (its mean over seeds)."""
    for name in names:
        first = seed_band(table[table["selector"] == name], "eval_accuracy")
        if not first.empty:
            ax.plot([0, first["step"].iloc[0]], [start.mean, first["mean"].iloc[0]],
                    color=colors[name], lw=1.0, ls=":")
    n = len(start.sources)
    ax.errorbar([0], [start.mean], yerr=[[start.mean - start.lo], [start.hi - start.mean]],
                fmt="o", color="black", ms=4, capsize=3, zorder=4,
                label=f"{START_LABEL} ({n} other run{'s' if n > 1 else ''}, range)")


def plot_panels(table: pd.DataFrame, panels: Sequence[tuple[str, str, int]],
                selectors: Sequence[str] | None = None, colors: dict | None = None,
                styles: dict | None = None, band: str = "minmax", title: str | None = None):
    """One row of panels, one per ``(metric, label, smooth)`` of ``panels``, one legend."""
    plt = _plt()
    names = _selectors(table, selectors)
    colors = colors or selector_colors(names)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.8), squeeze=False)
    for ax, (metric, label, smooth) in zip(axes[0], panels, strict=True):
        plot_metric(table, metric, ax, names, band, smooth, colors, label, legend=False,
                    styles=styles)
        ax.set_title(label)
    handles, labels = axes[0][0].get_legend_handles_labels()
    labels = _seed_labels(table, labels, panels[0][0])
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8,
               frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_etr(table: pd.DataFrame, selectors: Sequence[str] | None = None,
             band: str = "minmax", smooth: int = 5, title: str | None = None,
             colors: dict | None = None):
    """Effective task ratio (share of the batch with 0 < pass rate < 1) over steps."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    plot_metric(table, "effective_task_ratio", ax, selectors, band, smooth, colors,
                "effective task ratio", legend=False)
    ax.set_ylim(-0.02, 1.02)
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles, _seed_labels(table, labels, "effective_task_ratio"), fontsize=8,
              loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    ax.set_title(title or "share of selected tasks GRPO can learn from")
    fig.tight_layout()
    return fig


def plot_signal_curve(curve: pd.DataFrame, title: str | None = None):
    """Expected learning signal ``p (1 - p)`` and the chance of a mixed group vs pass rate.

    Args:
        curve: table with ``p, n, signal, p_mixed`` (see
            :func:`mathagent.simulation.signal_curve`).
    """
    plt = _plt()
    _check(curve, ("p", "n", "signal", "p_mixed"), "plot_signal_curve")
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.5))
    first = True
    for n, g in curve.groupby("n"):
        b.plot(g["p"], g["p_mixed"], label=f"n = {n}")
        if first:
            a.plot(g["p"], g["signal"], color="black")
            first = False
    a.axvline(0.5, color="gray", ls=":")
    a.set_xlabel("task pass rate p")
    a.set_ylabel("expected signal p(1-p)")
    a.set_title("GRPO signal per task peaks at p = 0.5")
    b.set_xlabel("task pass rate p")
    b.set_ylabel("P(group has mixed outcomes)")
    b.set_title("chance a group is not all-right/all-wrong")
    b.legend(fontsize=8)
    for ax in (a, b):
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_posteriors(posteriors: pd.DataFrame, selector: str | None = None,
                    seed: int | None = None, tasks: Sequence[int] | None = None,
                    title: str | None = None):
    """Posterior mean pass rate of a few tasks over steps, +-2 sd band, against the truth.

    Args:
        posteriors: table with ``selector, seed, step, task, mean, sd, true_pass_rate,
            selected`` (the simulation's ``posteriors.csv``).
        selector, seed: which run (default: the first in the table).
        tasks: which tasks (default: all in the run).

    Dots mark the steps at which a task was selected (explicit evidence); between them the
    posterior moves only through forgetting and implicit evidence.
    """
    plt = _plt()
    _check(posteriors, ("selector", "seed", "step", "task", "mean", "sd", "true_pass_rate",
                        "selected"), "plot_posteriors")
    if posteriors.empty:
        raise ValueError("plot_posteriors: the table is empty")
    selector = selector if selector is not None else posteriors["selector"].iloc[0]
    t = posteriors[posteriors["selector"] == selector]
    if t.empty:
        raise ValueError(f"plot_posteriors: no rows for selector {selector!r}")
    seed = seed if seed is not None else t["seed"].iloc[0]
    t = t[t["seed"] == seed]
    tasks = list(tasks) if tasks is not None else list(dict.fromkeys(t["task"]))
    fig, ax = plt.subplots(figsize=(8, 4))
    colors = _CYCLE
    for k, task in enumerate(tasks):
        g = t[t["task"] == task].sort_values("step")
        if g.empty:
            raise ValueError(f"plot_posteriors: task {task} has no rows")
        c = colors[k % len(colors)]
        ax.plot(g["step"], g["mean"], color=c, lw=1.5, label=f"task {task}")
        ax.fill_between(g["step"], (g["mean"] - 2 * g["sd"]).clip(0, 1),
                        (g["mean"] + 2 * g["sd"]).clip(0, 1), color=c, alpha=0.12, lw=0)
        ax.plot(g["step"], g["true_pass_rate"], color=c, ls="--", lw=1)
        sel = g[g["selected"].astype(bool)]
        ax.scatter(sel["step"], sel["mean"], color=c, s=12, zorder=3)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("step")
    ax.set_ylabel("pass rate")
    ax.set_title(title or f"{selector}, seed {seed}: posterior mean (solid, +-2 sd) vs true "
                          f"pass rate (dashed); dots: selected")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_beta_densities(posteriors: pd.DataFrame, title: str | None = None, points: int = 400):
    """Beta densities of a few tasks' posteriors (``task, alpha, beta``, optionally
    ``label``), one curve per row."""
    from math import lgamma

    plt = _plt()
    _check(posteriors, ("task", "alpha", "beta"), "plot_beta_densities")
    x = np.linspace(0.0005, 0.9995, points)
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    for k, row in enumerate(posteriors.itertuples(index=False)):
        a, b = float(row.alpha), float(row.beta)
        log_norm = lgamma(a + b) - lgamma(a) - lgamma(b)
        dens = np.exp(log_norm + (a - 1) * np.log(x) + (b - 1) * np.log1p(-x))
        label = getattr(row, "label", None) or f"task {row.task}: Beta({a:.2g}, {b:.2g})"
        ax.plot(x, dens, color=_CYCLE[k % len(_CYCLE)], label=label)
    ax.set_xlabel("pass rate p")
    ax.set_ylabel("density")
    ax.set_title(title or "posterior belief per task")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_ttb_heatmap(table: pd.DataFrame, x: str = "rho", y: str = "lamb",
                     value: str = "ttb_mean", title: str | None = None):
    """Heatmap of ``value`` (default mean TTB) over a ``lamb x rho`` grid, cells annotated;
    ``table`` has one row per cell (``x``, ``y``, ``value``, optionally ``ttb_reached``,
    shown when below 1)."""
    plt = _plt()
    _check(table, (x, y, value), "plot_ttb_heatmap")
    grid = table.pivot_table(index=y, columns=x, values=value, aggfunc="mean")
    reached = (table.pivot_table(index=y, columns=x, values="ttb_reached", aggfunc="mean")
               if "ttb_reached" in table else None)
    fig, ax = plt.subplots(figsize=(1.3 * len(grid.columns) + 2.5, 1.0 * len(grid.index) + 1.6))
    data = grid.to_numpy(dtype=float)
    im = ax.imshow(data, cmap="viridis_r", aspect="auto", origin="lower")
    ax.set_xticks(range(len(grid.columns)), [f"{v:g}" for v in grid.columns])
    ax.set_yticks(range(len(grid.index)), [f"{v:g}" for v in grid.index])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    for i in range(data.shape[0]):
        for j in range(data.shape[1]):
            v = data[i, j]
            text = "n/a" if np.isnan(v) else f"{v:.2f}"
            if reached is not None:
                r = reached.to_numpy(dtype=float)[i, j]
                if not np.isnan(r) and r < 1:
                    text += f"\n({r:.0%} reached)"
            ax.text(j, i, text, ha="center", va="center", fontsize=9,
                    color="white" if np.isnan(v) or v > np.nanmean(data) else "black")
    fig.colorbar(im, ax=ax, label=value.replace("_", " "))
    ax.set_title(title or "time to random's best eval accuracy (lower is faster)")
    fig.tight_layout()
    return fig


def plot_summary(summary: pd.DataFrame, selectors: Sequence[str] | None = None,
                 title: str | None = None):
    """Bars of mean ETR, TTB and BSF per selector with min-max whiskers over seeds, from
    :func:`mathagent.metrics.summarize`'s table."""
    plt = _plt()
    cols = [f"{m}_{s}" for m in ("etr", "ttb", "bsf") for s in ("mean", "min", "max")]
    _check(summary, ("selector", *cols), "plot_summary")
    s = summary if selectors is None else summary.set_index("selector").loc[
        list(selectors)].reset_index()
    names = list(s["selector"])
    colors = selector_colors(names)
    fig, axes = plt.subplots(1, 3, figsize=(13, 0.32 * len(names) + 1.8), sharey=True)
    y = np.arange(len(names))
    for ax, m, label, ref in zip(axes, ("etr", "ttb", "bsf"),
                                 ("effective task ratio", "TTB vs random (lower: faster)",
                                  "BSF vs random (higher: better)"), (None, 1.0, 1.0),
                                 strict=True):
        mean = s[f"{m}_mean"].to_numpy(dtype=float)
        lo = mean - s[f"{m}_min"].to_numpy(dtype=float)
        hi = s[f"{m}_max"].to_numpy(dtype=float) - mean
        ax.barh(y, np.nan_to_num(mean), xerr=np.nan_to_num(np.vstack([lo, hi])),
                color=[colors[n] for n in names], alpha=0.8, error_kw={"lw": 1})
        for k, v in enumerate(mean):
            if np.isnan(v):
                ax.text(0, k, " not reached", va="center", fontsize=7)
            elif m == "ttb" and "ttb_reached" in s and s["ttb_reached"].iloc[k] < 1:
                ax.text(v, k, f" {s['ttb_reached'].iloc[k]:.0%} of seeds reached", va="center",
                        fontsize=7)
        if ref is not None:
            ax.axvline(ref, color="black", lw=0.8, ls=":")
        ax.set_xlabel(label)
        ax.grid(alpha=0.3, axis="x")
    axes[0].set_yticks(y, names, fontsize=8)
    axes[0].invert_yaxis()
    fig.suptitle(title or "mean over seeds, whiskers: min-max", fontsize=10)
    fig.tight_layout()
    return fig

# --- Taskset figures (before any training): pass-rate landscapes and difficulty levels.
# They read DataFrames in the taskset schema (see mathagent.tasks).


def pass_rate_histograms(frame: pd.DataFrame, columns: Sequence[str], bins: int = 17,
                         title: str | None = None):
    """One histogram per pass-rate column, side by side.

    ``bins`` equal-width bins over [0, 1] centred on ``k / (bins - 1)``: with 17 bins, each
    possible value of a rate measured from 16 samples gets its own bar, so the spikes at
    exactly 0 and 1 stand out.
    """
    plt = _plt()
    edges = (np.arange(bins + 1) - 0.5) / (bins - 1)
    fig, axes = plt.subplots(1, len(columns), figsize=(4.2 * len(columns), 3.2), squeeze=False,
                             sharey=True)
    for ax, name in zip(axes[0], columns, strict=True):
        p = frame[name].to_numpy(dtype=float)
        ax.hist(p, bins=edges, color="tab:blue", edgecolor="white")
        ax.set_xlabel(name)
        ax.set_xlim(-0.05, 1.05)
        ax.set_title(f"at 0: {np.mean(p == 0):.0%}   at 1: {np.mean(p == 1):.0%}", fontsize=9)
    axes[0][0].set_ylabel("tasks")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def pass_rate_scatter(frame: pd.DataFrame, x: str, y: str, title: str | None = None):
    """Weak (``x``) against strong (``y``) pass rate, one marker per distinct pair.

    Pass rates sit on a grid (multiples of 1/n), so plain points hide each other; marker
    area is proportional to how many tasks share a pair.
    """
    plt = _plt()
    counts = frame.groupby([x, y]).size().rename("tasks").reset_index()
    fig, ax = plt.subplots(figsize=(4.4, 4.2))
    ax.scatter(counts[x], counts[y], s=12 + 300 * counts["tasks"] / counts["tasks"].max(),
               alpha=0.5, color="tab:purple", edgecolor="none")
    ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls="--")
    ax.set_xlim(-0.05, 1.05)
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    both = frame[x].to_numpy(float), frame[y].to_numpy(float)
    above = float(np.mean(both[1] >= both[0]))
    ax.set_title(title or f"{len(frame)} tasks; strong >= weak on {above:.0%}", fontsize=9)
    fig.tight_layout()
    return fig


def extremes_bars(summary: pd.DataFrame):
    """Stacked shares of tasks at exactly 0, strictly between, and exactly 1 per column.

    ``summary`` is :func:`mathagent.tasks.pass_rate_summary`'s table.
    """
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.6, 1.1 + 0.55 * len(summary)))
    left = np.zeros(len(summary))
    for key, color, label in (("share_0", "tab:red", "always wrong (p = 0)"),
                              ("share_between", "tab:green", "mixed (0 < p < 1)"),
                              ("share_1", "tab:gray", "always right (p = 1)")):
        values = summary[key].to_numpy(float)
        ax.barh(summary.index, values, left=left, color=color, label=label)
        left += values
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of tasks")
    ax.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3,
              frameon=False)
    fig.tight_layout()
    return fig


def level_counts_bars(splits: Mapping[str, pd.DataFrame], param: str = "difficulty"):
    """Tasks per generator level, one bar group per split (shares, so splits compare)."""
    plt = _plt()
    table = pd.DataFrame({s: f[param].value_counts(normalize=True) for s, f in splits.items()})
    table = table.fillna(0.0).sort_index()
    fig, ax = plt.subplots(figsize=(5.6, 3.2))
    width = 0.8 / max(len(table.columns), 1)
    for k, split in enumerate(table.columns):
        ax.bar(table.index + (k - (len(table.columns) - 1) / 2) * width, table[split],
               width=width, label=f"{split} ({len(splits[split])})")
    ax.set_xlabel(param)
    ax.set_ylabel("share of tasks")
    ax.set_xticks(table.index)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def pass_rate_by_parameter(frame: pd.DataFrame, features: Sequence[str],
                           param: str = "difficulty"):
    """Mean pass rate (± standard error) per value of a generator parameter."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.2, 3.2))
    grouped = frame.groupby(param)
    for name in features:
        mean = grouped[name].mean()
        sem = grouped[name].sem().fillna(0.0)
        ax.errorbar(mean.index.astype(float), mean.to_numpy(), yerr=sem.to_numpy(), marker="o",
                    capsize=3, label=name)
    ax.set_xlabel(param)
    ax.set_ylabel("mean pass rate")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# The training loop of notebook 01's opening figure: (from, to, what travels along the arrow).
# The cycle task -> selector -> agent -> judge -> pass_rate_calculator -> selector is the
# data-centric part; the judge's rewards also feed the GRPO trainer, which updates the policy.
LOOP_NODES = {  # name -> (x, y, text)
    "taskset": (-0.4, 1.0, "taskset\nquestion, answer,\nreference pass rates"),
    "selector": (2.5, 1.0, "selector\nrandom | difficulty_based\n(BOTS posteriors)"),
    "agent": (5.4, 1.0, "ReAct agent\n(the policy, on the\nexplorer's vLLM engine)"),
    "judge": (8.1, 1.0, "judge\ngsm8k_judge |\nlenient_judge"),
    "pass_rate_calculator": (5.4, -0.9, "pass_rate_calculator\nmean reward per task"),
    "trainer": (8.1, 2.9, "GRPO trainer\nadvantages within\neach group"),
}
LOOP_EDGES = (
    ("taskset", "selector", "every task, with its\nfeature columns"),
    ("selector", "agent", "a batch of B tasks"),
    ("agent", "judge", "n replies per task\n(one group)"),
    ("judge", "pass_rate_calculator", "0/1 rewards"),
    ("pass_rate_calculator", "selector", "observed pass rate\nk/n per task (feedback)"),
    ("judge", "trainer", "rewards"),
    ("trainer", "agent", "updated weights"),
)


def plot_loop(title: str | None = None):
    """The training loop as a diagram: what the selector picks, who scores it, and how the
    scores come back to the selector (:data:`LOOP_NODES`, :data:`LOOP_EDGES`)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10.5, 4.6))
    colors = {"selector": "#fde2b3", "pass_rate_calculator": "#fde2b3", "trainer": "#d9e8f5"}
    boxes = {}
    for name, (x, y, text) in LOOP_NODES.items():
        boxes[name] = ax.text(x, y, text, ha="center", va="center", fontsize=8.5, zorder=3,
                              bbox={"boxstyle": "round,pad=0.5", "ec": "#555555",
                                    "fc": colors.get(name, "#eeeeee")})
    for src, dst, label in LOOP_EDGES:
        (x0, y0, _), (x1, y1, _) = LOOP_NODES[src], LOOP_NODES[dst]
        color = "tab:orange" if (src, dst) == ("pass_rate_calculator", "selector") else "#333"
        ax.annotate("", xy=(0.5, 0.5), xycoords=boxes[dst], xytext=(0.5, 0.5),
                    textcoords=boxes[src], zorder=2,
                    arrowprops={"arrowstyle": "-|>", "lw": 1.4, "color": color,
                                "shrinkA": 2, "shrinkB": 2,
                                "patchA": boxes[src].get_bbox_patch(),
                                "patchB": boxes[dst].get_bbox_patch()})
        ax.text((x0 + x1) / 2, (y0 + y1) / 2 + (0.45 if y0 == y1 else 0.0), label,
                ha="center", va="center", fontsize=7.5, color=color, zorder=4,
                bbox={"fc": "white", "ec": "none", "alpha": 0.85, "pad": 1})
    ax.set_xlim(-1.5, 9.2)
    ax.set_ylim(-1.6, 3.6)
    ax.axis("off")
    ax.set_title(title or "one training step: the selector's choice comes back to it as "
                 "pass rates", fontsize=10)
    fig.tight_layout()
    return fig

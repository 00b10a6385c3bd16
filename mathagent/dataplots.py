"""Figures about tasksets (before any training): pass-rate landscapes and difficulty levels.

Every function reads a ``pandas.DataFrame`` in the taskset schema (see
:mod:`mathagent.tasks`), draws one matplotlib figure and returns it; :func:`save` writes it
where the tutorial collects figures. Training-curve figures live in :mod:`mathagent.plots`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from mathagent.tasks import informative_probability


def _plt():
    import matplotlib.pyplot as plt

    return plt


def save(fig, name: str, folder: Path | None = None) -> Path:
    """Write ``fig`` as ``<folder>/<name>.png`` (default: the tutorial's figure folder)."""
    if folder is None:
        from mathagent.tutorial import figure_dir

        folder = figure_dir()
    path = Path(folder) / f"{name}.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return path


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


def informative_curve(group_sizes: Sequence[int] = (4, 8, 16)):
    """Chance that a group of n rollouts carries a GRPO signal, against the pass rate p."""
    plt = _plt()
    p = np.linspace(0, 1, 201)
    fig, ax = plt.subplots(figsize=(4.8, 3.2))
    for n in group_sizes:
        ax.plot(p, informative_probability(p, n), label=f"n = {n}")
    ax.set_xlabel("task pass rate p")
    ax.set_ylabel("P(rewards not all equal)")
    ax.set_title("1 - p^n - (1 - p)^n", fontsize=9)
    ax.legend(fontsize=8)
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

"""The results figures and the summaries drawn beside them: a start measured once for runs
that evaluate no step 0 (:class:`StartPoint`), :func:`draw`, and several sources side by side."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mathagent.results.runs import RunError, eval_label, read_run


@dataclass(frozen=True)
class StartPoint:
    """The held-out accuracy of the weights every run starts from, measured once for all of
    them by other runs' step-0 evaluations (for runs that evaluate no step 0 of their own).

    ``sources``: run folder -> its step-0 accuracy; ``mean``, ``lo`` and ``hi`` (the range of
    the measurements) are drawn at step 0.
    """

    sources: Mapping[str, float]
    eval_taskset: str | None = None

    def __post_init__(self) -> None:
        if not self.sources:
            raise RunError("a starting point needs at least one measurement")

    @property
    def mean(self) -> float:
        return float(np.mean(list(self.sources.values())))

    @property
    def lo(self) -> float:
        return float(min(self.sources.values()))

    @property
    def hi(self) -> float:
        return float(max(self.sources.values()))

    def check(self, table: pd.DataFrame) -> None:
        """Refuse (:class:`RunError`) runs this start is not for: runs that evaluated step 0
        themselves, or that evaluate another taskset than its step-0 evaluations did."""
        if table.loc[table["step"] == 0, "eval_accuracy"].notna().any():
            raise RunError("the runs evaluated step 0 themselves; a start measured elsewhere is "
                           "for runs that did not")
        evaluated_on = (set(table["eval_taskset"].dropna().unique())
                        if "eval_taskset" in table else set())
        if self.eval_taskset is not None and evaluated_on and evaluated_on != {self.eval_taskset}:
            raise RunError(f"the start's runs evaluated {self.eval_taskset!r} at step 0, these "
                           f"runs evaluate {sorted(evaluated_on)}")

    def table(self) -> pd.DataFrame:
        """One row per measurement: ``run, step, eval_accuracy, eval_taskset``."""
        return pd.DataFrame({"run": list(self.sources), "step": 0,
                             "eval_accuracy": list(self.sources.values()),
                             "eval_taskset": self.eval_taskset})

    @classmethod
    def read(cls, file: str | Path) -> StartPoint:
        """The start a results folder was drawn from (its ``start_point.csv``, written by
        :func:`draw`); a file that is missing or not such a table (one row per run, at step 0,
        with its accuracy, on one eval taskset) is one :class:`RunError` naming it."""
        if not Path(file).is_file():
            raise RunError(f"{file}: no such file")
        bad = f"{file}: not a start point written by draw"
        try:
            table = pd.read_csv(file, float_precision="round_trip")
            runs, steps = table["run"].astype(str), table["step"]
            accuracy = table["eval_accuracy"].astype(float)
        except (KeyError, ValueError) as exc:
            raise RunError(f"{bad} ({exc})") from None
        tasksets = set(table["eval_taskset"].dropna()) if "eval_taskset" in table else set()
        if (table.empty or runs.duplicated().any() or (steps != 0).any()
                or accuracy.isna().any() or len(tasksets) > 1):
            raise RunError(f"{bad} (one row per run, at step 0, each with its accuracy, on one "
                           "eval taskset)")
        return cls(dict(zip(runs, accuracy, strict=True)), tasksets.pop() if tasksets else None)


def start_point(folders: Sequence[str | Path]) -> StartPoint:
    """The step-0 held-out accuracy of the runs in ``folders`` as one :class:`StartPoint`;
    each must have evaluated step 0, all on the same eval taskset."""
    sources, tasksets = {}, set()
    for folder in folders:
        if not Path(folder).is_dir():
            raise RunError(f"{folder}: no such run folder")
        table = read_run(folder).dropna(subset=["eval_accuracy"])
        at0 = table[table["step"] == 0]
        if at0.empty:
            raise RunError(f"{folder}: no held-out evaluation at step 0")
        if len(at0) > 1:
            raise RunError(f"{folder}: {len(at0)} held-out evaluations at step 0; give one "
                           "run's folder")
        tasksets.add(at0["eval_taskset"].iloc[0] if "eval_taskset" in at0 else None)
        sources[str(folder)] = float(at0["eval_accuracy"].iloc[0])
    if len(tasksets) > 1:
        raise RunError(f"the step-0 evaluations of {', '.join(map(str, folders))} are on "
                       f"different eval tasksets: {sorted(map(str, tasksets))}")
    return StartPoint(sources, tasksets.pop())


#: The agent's behaviour over training, drawn beside the accuracies when the runs logged it:
#: (tidy column, panel label). Replies that shrink to a few tokens, or tool calls that vanish,
#: are how a shortcut shows before the replies themselves are read.
BEHAVIOUR = (("response_length", "response tokens (per model call)"),
             ("rollout_tool_calls", "tool calls per agent run"))


def draw(table: pd.DataFrame, out_dir: str | Path | None = None, baseline: str = "random",
         eval_name: str = "eval accuracy", smooth: int = 5, prefix: str = "",
         title: str | None = None, force: bool = True,
         start: StartPoint | None = None) -> dict[str, Any]:
    """The results figures and metrics of a tidy table.

    Returns ``{"figures": {name: Figure}, "files": {name: Path}, "summary": DataFrame or
    None}``. The summary (ETR, TTB, BSF per selector) needs the ``baseline`` selector in
    the table; without it only ETR and accuracies are reported (``summary`` is None and
    ``"summary_error"`` says why). Figure files are named ``<prefix><figure>.png``: the two
    panels (``training_curves``), the effective task ratio where a run logged it and the
    agent's behaviour (``behaviour``: the :data:`BEHAVIOUR` columns the runs logged).

    ``out_dir`` is written as a whole: into a temporary folder beside it, swapped in at the
    end, so a failure midway leaves an existing ``out_dir`` as it was
    (:class:`mathagent.outputs.OutputError`). ``force=False`` keeps a non-empty ``out_dir``
    (``OutputError`` before anything is written); the ``plot`` command passes ``--force``.
    ``start``: the held-out accuracy every run starts from, measured once elsewhere
    (:func:`start_point`), drawn at step 0 and written as ``start_point.csv``
    (:class:`RunError` for runs it is not for: :meth:`StartPoint.check`).
    """
    from mathagent import metrics, plots
    from mathagent.outputs import check_output, rebase, staged_output

    if out_dir is not None:
        check_output(out_dir, force)
    figs = {"training_curves": plots.plot_training_curves(table, eval_label=eval_name,
                                                         smooth=smooth, title=title,
                                                         start=start)}
    if table["effective_task_ratio"].notna().any():
        figs["effective_task_ratio"] = plots.plot_etr(table, smooth=smooth, title=title)
    behaviour = [(column, label, smooth) for column, label in BEHAVIOUR
                 if column in table and table[column].notna().any()]
    if behaviour:
        figs["behaviour"] = plots.plot_panels(table, behaviour, title=title)
    out: dict[str, Any] = {"figures": figs, "files": {}, "summary": None}
    try:
        out["summary"] = metrics.summarize(table, baseline=baseline)
    except (metrics.TableError, ValueError) as exc:
        out["summary_error"] = str(exc)
    if out_dir is not None:
        out_dir = Path(out_dir)
        files: dict[str, Path] = {}
        with staged_output(out_dir) as tmp:
            for name, fig in figs.items():
                files[name] = plots.save_figure(fig, f"{prefix}{name}", tmp)
            table.to_csv(tmp / "results.csv", index=False)
            files["results"] = tmp / "results.csv"
            if start is not None:
                start.table().to_csv(tmp / "start_point.csv", index=False)
                files["start_point"] = tmp / "start_point.csv"
            if out["summary"] is not None:
                files.update(metrics.write_metrics(table, tmp, baseline=baseline))
        out["files"] = rebase(files, tmp, out_dir)
    return out


#: Line styles of the sources drawn side by side: the first solid, the second dashed.
SOURCE_STYLES = ("-", (0, (4, 2)), ":")


def side_by_side(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Several sources' tidy tables in one, each selector renamed ``"<selector>, <source>"``
    (e.g. Trinity-RFT's runs and ``train-local``'s with the same settings); a ``source``
    column keeps the source."""
    parts = [t.assign(source=src, selector=t["selector"].astype(str) + ", " + src)
             for src, t in tables.items()]
    if not parts:
        raise RunError("no tables given")
    return pd.concat(parts, ignore_index=True)


def draw_side_by_side(tables: Mapping[str, pd.DataFrame], title: str | None = None,
                      smooth: int = 3,
                      panels: Sequence[tuple[str, str, int]] | None = None):
    """Several sources' runs in one figure: a colour per selector, a line style per source
    (:data:`SOURCE_STYLES`). ``panels``: ``(column, label, smoothing window)`` per panel;
    by default rollout accuracy, effective task ratio (both smoothed over ``smooth``
    steps) and eval accuracy."""
    from mathagent import plots

    if len(tables) > len(SOURCE_STYLES):
        raise ValueError(f"at most {len(SOURCE_STYLES)} sources, got {len(tables)}")
    table = side_by_side(tables)
    selectors = list(dict.fromkeys(s for t in tables.values() for s in t["selector"]))
    base = plots.selector_colors(selectors)
    present = set(table["selector"])
    names, colors, styles = [], {}, {}
    for sel in selectors:
        for style, src in zip(SOURCE_STYLES, tables, strict=False):
            name = f"{sel}, {src}"
            if name in present:
                names.append(name)
                colors[name], styles[name] = base[sel], style
    if panels is None:
        panels = [("rollout_accuracy", "rollout accuracy", smooth),
                  ("effective_task_ratio", "effective task ratio", smooth),
                  ("eval_accuracy", eval_label(table), 1)]
    return plots.plot_panels(table, panels, names, colors, styles, title=title)


def side_by_side_summary(tables: Mapping[str, pd.DataFrame], window: int = 10) -> pd.DataFrame:
    """Per source and selector: seeds, steps (the longest seed's; ``shortest_run`` the
    shortest's, so a run that stopped early shows), and the first and last ``window`` training
    steps' mean rollout accuracy, effective task ratio and response length; the eval accuracy
    at step 0 and at the last eval step (means over the seeds that have it; how many in
    ``eval_last_seeds``)."""
    rows = []
    for src, table in tables.items():
        for sel, run in table.groupby("selector", sort=False):
            steps = run[run["step"] > 0]
            last = int(steps["step"].max())
            first_w, last_w = steps[steps["step"] <= window], steps[steps["step"] > last - window]
            evals = run.dropna(subset=["eval_accuracy"])
            row = {"source": src, "selector": sel, "seeds": run["seed"].nunique(),
                   "steps": last, "shortest_run": int(steps.groupby("seed")["step"].max().min())}
            for col, name in (("rollout_accuracy", "rollout_accuracy"),
                              ("effective_task_ratio", "etr"),
                              ("response_length", "response_length")):
                if col in run and steps[col].notna().any():
                    row[f"{name}_first{window}"] = first_w[col].mean()
                    row[f"{name}_last{window}"] = last_w[col].mean()
            if not evals.empty:
                row["eval_step0"] = evals[evals["step"] == 0]["eval_accuracy"].mean()
                last_eval = int(evals["step"].max())
                at_last = evals[evals["step"] == last_eval]
                row["eval_last"] = at_last["eval_accuracy"].mean()
                row["eval_last_step"] = last_eval
                row["eval_last_seeds"] = at_last["seed"].nunique()
            rows.append(row)
    return pd.DataFrame(rows).round(3)

"""Read training runs into tidy tables, and draw the results figures from them.

Three kinds of run end up here, and all leave the same table: one row per
``(selector, seed, step)`` with ``rollout_accuracy``, ``eval_accuracy`` (NaN on steps
without an evaluation) and ``effective_task_ratio``, plus a ``run`` column naming the folder.
A Trinity run's effective task ratio is its ``pass_rate_calculator``'s; a run without that
operator (``random``) takes it from the ``buffer_steps.csv`` beside its event files, where
``scripts/gpu/buffer_samples.py`` computed it the same way from the run's experience buffer.

* **Trinity-RFT runs** (``python -m mathagent train``): TensorBoard event files under
  ``<checkpoint_job_dir>/monitor/tensorboard/{explorer,trainer}/``. Trinity 0.6.0 names the
  scalars as mapped in :mod:`mathagent.trinity_tags` (read from its explorer:
  ``rollout_coordinator`` aggregates each task's metrics with prefix ``rollout``; eval batches
  get ``eval/<taskset name>`` and task-level ``<metric>/mean@<repeats>``; the experience
  pipeline prefixes operator metrics with ``experience_pipeline/``).
* **Tutorial-scale runs** (``python -m mathagent train-local``): a tidy ``metrics.csv`` with
  ``params.json``, and TensorBoard events with the same Trinity tag names.
* **Simulated runs** (``python -m mathagent simulate``): a tidy ``steps.csv`` and ``params.json``.

A folder holding a tidy CSV is read from that CSV; otherwise from its event files. Which
selector and seed a run used come from its ``params.json`` (written by ``train`` and the
other commands) or, failing that, from the folder name and Trinity's default seed 42.

``python -m mathagent plot RUN_DIR...`` reads runs and writes the combined table, the
two-panel figure of the reference (rollout accuracy left, eval accuracy right), the
effective-task-ratio figure and the ETR/TTB/BSF summary of :mod:`mathagent.metrics`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mathagent import paths
from mathagent.metrics import KEYS, METRICS
from mathagent.trinity_tags import EVAL_TAG, PHASE_TAGS, TAGS, with_current_names

TIDY_CSV_NAMES = ("results.csv", "metrics.csv", "steps.csv")
TRINITY_DEFAULT_SEED = 42
EVENT_GLOB = "events.out.tfevents.*"


class CutShortWarning(UserWarning):
    """An event file that ends in an unfinished record: what it held after the cut is lost."""


class RunError(ValueError):
    """A run folder that cannot be read; the message names the path and what is missing."""


# --------------------------------------------------------------------------------------
# Event files
# --------------------------------------------------------------------------------------


def read_scalars(path: str | Path) -> pd.DataFrame:
    """All scalars of one event file, or of every event file under a folder.

    Returns columns ``tag, step, value, wall_time, file``; when a (tag, step) was written
    twice (a resumed run), the later write wins. A file cut short in a record (a killed run)
    is read up to the cut, with a warning naming the file and the steps it lost.
    """
    from tensorboard.backend.event_processing import event_accumulator

    from mathagent.event_files import lost_steps, unfinished_tail

    path = Path(path)
    files = sorted(path.rglob(EVENT_GLOB)) if path.is_dir() else [path]
    frames = []
    for f in files:
        acc = event_accumulator.EventAccumulator(str(f), size_guidance={
            event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0})
        acc.Reload()
        tags = acc.Tags()
        for tag in tags.get("scalars", []):
            ev = acc.Scalars(tag)
            frames.append(pd.DataFrame({"tag": tag, "step": [e.step for e in ev],
                                        "value": [e.value for e in ev],
                                        "wall_time": [e.wall_time for e in ev], "file": str(f)}))
        for tag in tags.get("tensors", []):  # TF2-style writers store scalars as tensors
            ev = acc.Tensors(tag)
            values = [_tensor_scalar(e.tensor_proto) for e in ev]
            frames.append(pd.DataFrame({"tag": tag, "step": [e.step for e in ev],
                                        "value": values,
                                        "wall_time": [e.wall_time for e in ev], "file": str(f)}))
        cut = unfinished_tail(f)
        if cut:
            mine = [fr for fr in frames if (fr["file"] == str(f)).all()]
            read = pd.concat(mine) if mine else pd.DataFrame(columns=["tag", "step"])
            warnings.warn(f"{f} is cut short ({cut} bytes of an unfinished record at its "
                          f"end): {lost_steps(read)}", CutShortWarning, stacklevel=2)
    if not frames:
        return pd.DataFrame(columns=["tag", "step", "value", "wall_time", "file"])
    out = pd.concat(frames, ignore_index=True).sort_values("wall_time", kind="stable")
    return out.drop_duplicates(["tag", "step"], keep="last").reset_index(drop=True)


def _tensor_scalar(proto: Any) -> float:
    from tensorboard.util import tensor_util

    arr = tensor_util.make_ndarray(proto)
    return float(arr.reshape(-1)[0]) if arr.size == 1 else math.nan


def phase_times(path: str | Path) -> pd.DataFrame:
    """Seconds per phase (rows, :data:`PHASE_TAGS`) and step (columns) of a Trinity run."""
    scalars = read_scalars(path)
    wanted = scalars[scalars["tag"].isin(PHASE_TAGS.values())]
    table = wanted.pivot_table(index="tag", columns="step", values="value", aggfunc="last")
    names = {tag: phase for phase, tag in PHASE_TAGS.items()}
    table.index = [names[t] for t in table.index]
    table.columns = [f"step {c}" for c in table.columns]
    return table.reindex([p for p in PHASE_TAGS if p in table.index])


def eval_tags(tags: Iterable[str]) -> dict[str, str]:
    """``{eval taskset name: tag}`` of the eval-accuracy tags present (largest ``k`` wins)."""
    best: dict[str, tuple[int, str]] = {}
    for tag in tags:
        m = EVAL_TAG.match(tag)
        if not m:
            continue
        k = int(m.group("k") or 0)
        name = m.group("taskset")
        if name not in best or k > best[name][0]:
            best[name] = (k, tag)
    return {name: tag for name, (_, tag) in sorted(best.items())}


def scalars_to_table(scalars: pd.DataFrame, selector: str, seed: int,
                     eval_taskset: str | None = None, source: str = "run") -> pd.DataFrame:
    """Map Trinity's tags to tidy columns: one row per step that has any of them.

    ``eval_taskset`` picks the eval set when a run has several (default: the only one).
    """
    tags = set(scalars["tag"])
    evals = eval_tags(tags)
    if eval_taskset is None and len(evals) > 1:
        raise RunError(f"{source}: several eval tasksets {sorted(evals)}; choose one with "
                       "eval_taskset=... (--eval-taskset)")
    if eval_taskset is not None and eval_taskset not in evals:
        raise RunError(f"{source}: no eval accuracy for taskset {eval_taskset!r}; "
                       f"eval tasksets logged: {sorted(evals) or 'none'}")
    columns = {column: tag for column, tag in TAGS.items() if tag in tags}
    chosen = eval_taskset or (next(iter(evals)) if evals else None)
    if chosen is not None:
        columns["eval_accuracy"] = evals[chosen]
    if "rollout_accuracy" not in columns:
        raise RunError(f"{source}: no {TAGS['rollout_accuracy']!r} scalar among "
                       f"{len(tags)} tags; is this a Trinity-RFT explorer log?")
    wide = (scalars[scalars["tag"].isin(columns.values())]
            .pivot_table(index="step", columns="tag", values="value", aggfunc="last"))
    wide = wide.rename(columns={tag: col for col, tag in columns.items()}).reset_index()
    for col in METRICS:
        if col not in wide:
            wide[col] = np.nan
    wide.insert(0, "seed", seed)
    wide.insert(0, "selector", selector)
    wide.columns.name = None
    if chosen is not None:
        wide["eval_taskset"] = chosen
    ordered = [*KEYS, *METRICS]
    rest = [c for c in wide.columns if c not in ordered]
    return wide[ordered + rest].sort_values("step").reset_index(drop=True)


# --------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------


def selector_label(selector_type: str) -> str:
    """The short name a selector is reported under (``bots`` for the BOTSSelector path)."""
    if selector_type.rsplit(".", 1)[-1] == "BOTSSelector":
        return "bots"
    return selector_type


def _read_params(folder: Path) -> dict[str, Any]:
    file = folder / "params.json"
    if not file.is_file():
        return {}
    try:
        return json.loads(file.read_text())
    except json.JSONDecodeError as exc:
        raise RunError(f"{file}: not valid JSON ({exc})") from None


def _is_tidy_csv(file: Path) -> bool:
    try:
        head = pd.read_csv(file, nrows=0)
    except Exception:
        return False
    return {*KEYS, "rollout_accuracy", "eval_accuracy"} <= set(head.columns)


def _tidy_csv(folder: Path) -> Path | None:
    for name in TIDY_CSV_NAMES:
        if (folder / name).is_file() and _is_tidy_csv(folder / name):
            return folder / name
    candidates = sorted(p for p in folder.glob("*.csv") if _is_tidy_csv(p))
    return candidates[0] if candidates else None


def _event_root(event_file: Path) -> Path:
    """The run folder an event file belongs to (Trinity: the checkpoint job dir)."""
    parts = event_file.parts
    for i in range(len(parts) - 2, 0, -1):
        if parts[i] == "tensorboard":
            root = Path(*parts[:i])
            return root.parent if root.name == "monitor" else root
    return event_file.parent


def find_runs(path: str | Path) -> list[Path]:
    """Run folders under ``path``: folders with a tidy CSV, or the roots of event files.

    ``path`` may be a run folder itself, a folder of runs (e.g. a checkpoint root with
    ``<project>/<name>/`` below it), or a tidy CSV file.
    """
    path = Path(path)
    if not path.exists():
        raise RunError(f"{path}: no such file or folder")
    if path.is_file():
        return [path]
    if _tidy_csv(path) is not None:
        return [path]
    roots: list[Path] = []
    for f in sorted(path.rglob("*.csv")):
        if _is_tidy_csv(f) and not any(r in f.parents for r in roots):
            roots.append(f.parent)
    for f in sorted(path.rglob(EVENT_GLOB)):
        root = _event_root(f)
        if not any(r == root or r in root.parents for r in roots):
            roots.append(root)
    if not roots:
        raise RunError(f"{path}: no tidy results CSV (with columns {', '.join(KEYS)}, "
                       "rollout_accuracy, eval_accuracy) and no TensorBoard event files")
    return sorted(set(roots))


def has_runs(path: str | Path) -> bool:
    """Whether ``path`` holds at least one readable run (see :func:`find_runs`)."""
    try:
        return bool(find_runs(path))
    except RunError:
        return False


def read_run(path: str | Path, selector: str | None = None, seed: int | None = None,
             eval_taskset: str | None = None) -> pd.DataFrame:
    """One run as a tidy table (see the module docstring); ``selector``/``seed`` override
    what the run's ``params.json`` says."""
    path = Path(path)
    if path.is_file() and path.suffix == ".csv":
        table = pd.read_csv(path)
        source = path
        params = _read_params(path.parent)
    else:
        csv = _tidy_csv(path)
        params = _read_params(path)
        if csv is not None:
            table, source = pd.read_csv(csv), csv
        else:
            scalars = read_scalars(path)
            if scalars.empty:
                raise RunError(f"{path}: no scalars in its TensorBoard event files")
            sel = selector or params.get("selector") or path.name
            sd = seed if seed is not None else params.get("seed", TRINITY_DEFAULT_SEED)
            table = scalars_to_table(scalars, selector_label(str(sel)), int(sd), eval_taskset,
                                     source=str(path))
            table = _etr_from_buffer(table, path)
            source = path
    table = with_current_names(table)  # tables of earlier versions
    missing = [c for c in (*KEYS, "rollout_accuracy", "eval_accuracy") if c not in table]
    if missing:
        raise RunError(f"{source}: missing column(s) {missing}")
    if selector is not None:
        table["selector"] = selector
    if seed is not None:
        table["seed"] = seed
    if "effective_task_ratio" not in table:
        table["effective_task_ratio"] = np.nan
    if "eval_taskset" not in table and params.get("eval_taskset"):
        table["eval_taskset"] = params["eval_taskset"]
    table["run"] = str(path)
    return table


#: Per-step numbers read from a Trinity run's experience buffer (``scripts/gpu/buffer_samples.py``)
BUFFER_STEPS = "buffer_steps.csv"


def _buffer_etr(run: Path) -> pd.Series | None:
    """The effective task ratio per step of the run folder's :data:`BUFFER_STEPS`, or None
    where the folder has none or one written before the buffer gave the ratio."""
    file = run / BUFFER_STEPS
    if not file.is_file():
        return None
    try:   # blank lines kept (and dropped below) so that a row's index gives its line
        steps = pd.read_csv(file, dtype=str, keep_default_na=False, skip_blank_lines=False)
    except (ValueError, OSError) as exc:
        raise RunError(f"{file}: not a readable CSV ({str(exc).splitlines()[0]})") from None
    if "effective_task_ratio" not in steps:
        return None
    if "step" not in steps:
        raise RunError(f"{file}: no 'step' column")
    steps = steps[(steps != "").any(axis=1)]
    seen: set[int] = set()
    ratios = {}
    for i, step, cell in zip(steps.index, steps["step"], steps["effective_task_ratio"],
                             strict=True):
        where = f"{file}: line {i + 2}"
        if not step.strip().isdigit():
            raise RunError(f"{where}: step {step!r} is not a whole number")
        if int(step) in seen:
            raise RunError(f"{where}: step {int(step)} a second time")
        seen.add(int(step))
        try:
            ratio = float(cell) if cell.strip() else math.nan
        except ValueError:
            ratio = -1.0
        if not ((math.isnan(ratio) and not cell.strip()) or 0 <= ratio <= 1):
            raise RunError(f"{where}: effective_task_ratio {cell!r} is not a share in [0, 1]")
        ratios[int(step)] = ratio
    return pd.Series(ratios, dtype=float, name="buffer")


def _etr_from_buffer(table: pd.DataFrame, run: Path) -> pd.DataFrame:
    """``table`` with its ``effective_task_ratio`` taken from the run folder's
    :data:`BUFFER_STEPS` where Trinity logged none (it logs the ratio only where a pass-rate
    operator runs: not in ``random`` runs). Trinity's own values are kept."""
    if table["effective_task_ratio"].notna().any():
        return table
    ratio = _buffer_etr(run)
    if ratio is None:
        return table
    out = table.copy()
    out["effective_task_ratio"] = out["step"].map(ratio)
    return out


def etr_sources(runs: Sequence[str | Path]) -> pd.DataFrame:
    """Where each Trinity run's effective task ratio comes from, one row per run folder:
    ``source`` (``pass_rate_calculator`` where Trinity logged it, from that operator or
    BOTS's, else ``experience buffer`` or ``none``), the steps each gave and, where both did,
    their largest difference (the buffer's ratio is rounded to 4 places, Trinity's is a
    float32: up to about 5e-5 apart where they agree)."""
    rows = []
    for run in map(Path, runs):
        scalars = read_scalars(run)
        own = (scalars[scalars["tag"] == TAGS["effective_task_ratio"]]
               .groupby("step")["value"].last().dropna())
        buffer = _buffer_etr(run)
        buffer = buffer.dropna() if buffer is not None else pd.Series(dtype=float)
        both = own.index.intersection(buffer.index)
        rows.append({
            "run": run.name,
            "source": "pass_rate_calculator" if len(own) else
                      "experience buffer" if len(buffer) else "none",
            "steps_pass_rate_calculator": len(own), "steps_experience_buffer": len(buffer),
            "largest_difference": float((own[both] - buffer[both]).abs().max())
            if len(both) else np.nan})
    return pd.DataFrame(rows)


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


def load_runs(paths_: Sequence[str | Path], eval_taskset: str | None = None,
              progress: bool = True) -> pd.DataFrame:
    """Every run under ``paths_`` in one tidy table (a ``run`` column tells them apart).

    Raises :class:`RunError` when two runs report the same ``(selector, seed, step)``;
    give them different seeds (``params.json``) or read them separately.
    """
    from tqdm.auto import tqdm

    runs = [r for p in paths_ for r in find_runs(p)]
    tables = [read_run(r, eval_taskset=eval_taskset)
              for r in tqdm(runs, desc="reading runs", disable=not progress, file=sys.stderr)]
    if not tables:
        raise RunError("no runs given")
    table = pd.concat(tables, ignore_index=True)
    dup = table.duplicated(list(KEYS), keep=False)
    if dup.any():
        clash = table[dup].groupby(list(KEYS[:2]))["run"].unique().iloc[0]
        raise RunError(f"runs {sorted(map(str, clash))} report the same selector and seed; "
                       "set different seeds in their params.json")
    return table


def eval_label(table: pd.DataFrame) -> str:
    """A y label for the eval panel: the runs' eval taskset (AIME-24 for the full runs)."""
    names = (table["eval_taskset"].dropna().unique() if "eval_taskset" in table else [])
    if len(names) != 1:
        return "eval accuracy"
    name = str(names[0])
    return "AIME-24 accuracy" if "aime" in name.lower() else f"{name} accuracy"


# --------------------------------------------------------------------------------------
# Figures and metrics
# --------------------------------------------------------------------------------------


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


def plot_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR",
                        help="run folders (Trinity checkpoint job dirs, train-local or "
                             "simulate outputs), folders of runs, or tidy CSV files")
    parser.add_argument("--out", type=Path, default=None,
                        help="where to write results.csv, figures and metrics "
                             f"(default {paths.runs_dir() / 'plots'}/<timestamp>)")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing, non-empty --out folder")
    parser.add_argument("--eval-taskset", default=None,
                        help="eval taskset to plot when a run logged several")
    parser.add_argument("--baseline", default="random",
                        help="selector TTB and BSF are measured against (default random)")
    parser.add_argument("--smooth", type=int, default=5,
                        help="moving-average window of the rollout curves (default 5)")


def _inside(path: Path, folder: Path) -> bool:
    path, folder = path.resolve(), folder.resolve()
    return path == folder or folder in path.parents


def plot_command(args: argparse.Namespace) -> int:
    import matplotlib

    from mathagent.outputs import OutputError, check_output, fresh_run_dir, has_content

    matplotlib.use("Agg")
    try:
        if args.out is not None:
            inputs = [r for r in args.runs if _inside(r, args.out)]
            if inputs:  # replacing --out would delete the runs being read
                raise OutputError(f"{args.out}: holds the input {inputs[0]}; choose an --out "
                                  "outside the run folders")
            check_output(args.out, args.force)  # before reading: fail fast
        with warnings.catch_warnings(record=True) as cut:
            warnings.simplefilter("always", CutShortWarning)
            table = load_runs(args.runs, eval_taskset=args.eval_taskset)
        for w in cut:
            if issubclass(w.category, CutShortWarning):
                print(f"warning: {w.message}", file=sys.stderr)
            else:
                warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    except (RunError, OutputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out_dir = args.out or fresh_run_dir("plots")
    replaced = args.out is not None and has_content(out_dir)
    try:
        drawn = draw(table, out_dir, baseline=args.baseline, eval_name=eval_label(table),
                     smooth=args.smooth, force=args.force or args.out is None)
    except OutputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    counts = table.groupby("selector")["seed"].nunique()
    print(f"read {table['run'].nunique()} run(s): "
          + ", ".join(f"{s} ({n} seed{'s' if n > 1 else ''})" for s, n in counts.items()))
    if drawn["summary"] is not None:
        cols = ["selector", "n_seeds", "etr_mean", "rollout_accuracy_mean", "eval_best_mean",
                "ttb_mean", "bsf_mean"]
        print(drawn["summary"][cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    else:
        print(f"no TTB/BSF: {drawn.get('summary_error')}")
    for name, file in drawn["files"].items():
        print(f"{name}: {file}")
    if replaced:
        print(f"replaced the previous contents of {out_dir} (--force)")
    return 0

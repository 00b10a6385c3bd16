"""Reading runs: Trinity-RFT's event files, ``train-local``'s and ``simulate``'s tidy CSVs, a
Trinity run's experience-buffer table, into one tidy table (see :mod:`mathagent.results`)."""

from __future__ import annotations

import json
import math
import sys
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

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


#: Per-step numbers read from a Trinity run's experience buffer (``mathagent.experiment.buffer``)
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

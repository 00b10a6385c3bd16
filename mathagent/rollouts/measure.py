"""Pass-rate measurement: ``n`` rollouts of every task into a feature column, resumably.

:func:`measure_pass_rates` hands tasks in chunks to a backend (or a dispatcher of several),
appends every finished chunk to the side table (:mod:`mathagent.rollouts.store`), and writes
the column and its provenance record once every rollout of every task has succeeded.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mathagent.rollouts.backends import _LocalDispatch
from mathagent.rollouts.records import (
    ROLLOUT_KEYS,
    chunk_seed,
    describe_failures,
    failure_counts,
    failure_kind,
    is_failed,
)
from mathagent.rollouts.store import (
    MeasureError,
    _fingerprint,
    _lock,
    _prepare_side_table,
    _update_provenance,
    _write_column,
    _write_part,
    default_rollouts_dir,
    failed_mask,
    read_side_table,
)


@dataclass
class MeasureResult:
    """Outcome of :func:`measure_pass_rates`.

    ``values`` (shape ``(tasks,)``) is the pass rate per task in row order, NaN for tasks
    not measured yet; ``complete`` says whether every task is done and the column written.
    ``failed_rollouts`` counts the rollouts whose latest attempt failed (the next run
    retries them; the column is not written while any remain) and ``failures`` splits
    them by kind (:data:`FAILURE_KINDS`); ``total_rollouts`` is ``tasks * n``.
    """

    column: str
    split: str
    values: np.ndarray
    complete: bool
    side_table: Path
    taskset_file: Path
    tasks: int
    measured_this_run: int
    resumed: int
    rollouts: int
    failed_rollouts: int
    seconds: float
    failures: dict = None
    total_rollouts: int = 0

    def failure_message(self) -> str:
        """The one line the command prints when rollouts failed."""
        return (f"{self.failed_rollouts} of {self.total_rollouts} rollouts failed "
                f"({describe_failures(self.failures or {})}); the column {self.column!r} was "
                f"not written; rerun to retry them (side table {self.side_table})")


def _pass_rates(side: pd.DataFrame, num_tasks: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-task mean accuracy over rollouts ``0..n-1`` and a mask of complete tasks.

    Only successful records count: a task with a failed rollout is not done (it is rerun).
    Returns ``values`` (shape ``(num_tasks,)``, NaN where incomplete) and ``done`` (bool).
    """
    values = np.full(num_tasks, np.nan)
    done = np.zeros(num_tasks, dtype=bool)
    if len(side):
        rows = side[(side["rollout"] >= 0) & (side["rollout"] < n) & ~failed_mask(side)]
        grouped = rows.groupby("row")["accuracy"].agg(["mean", "count"])
        grouped = grouped[(grouped.index >= 0) & (grouped.index < num_tasks)]
        full = grouped[grouped["count"] == n]
        done[full.index.to_numpy()] = True
        values[full.index.to_numpy()] = full["mean"].to_numpy()
    return values, done


def check_measurement(taskset: Path, column: str, split: str, rollouts_dir: Path,
                      overwrite: bool) -> pd.DataFrame:
    """Validate the split and the column name before any model time is spent; the split."""
    from mathagent.tasks import read_split

    if not column or column in ("question", "answer"):
        raise MeasureError(f"column {column!r}: choose a new feature column name, e.g. "
                           "'mymodel_pass_rate'")
    file = Path(taskset) / f"{split}.parquet"
    frame = read_split(taskset, split)  # validates; errors name file, row and column
    if column in frame.columns and not overwrite and not (rollouts_dir / "run.json").exists():
        raise MeasureError(f"{file}: column {column!r} exists already; pass --overwrite to "
                           "measure it again or choose another --column")
    return frame


def measure_pass_rates(taskset: str | os.PathLike, column: str, backend: Any, *,
                       split: str = "train", n: int = 16, seed: int = 0,
                       chunk_size: int = 8, rollouts_dir: str | os.PathLike | None = None,
                       keep_responses: bool = True, overwrite: bool = False,
                       restart: bool = False, max_tasks: int | None = None,
                       progress: bool = True) -> MeasureResult:
    """Measure every task's pass rate over ``n`` rollouts into ``column`` of the split file.

    ``backend`` is a backend (``run_batch``) or a :class:`RayFanout`. Tasks are handed out in
    chunks of ``chunk_size``; each finished chunk is appended to the side table in
    ``rollouts_dir`` (default :func:`default_rollouts_dir`), so a rerun with the same
    settings resumes where the last run stopped. ``max_tasks`` stops after that many new
    tasks (a partial run; the column is written only once every task is done).
    ``overwrite`` allows replacing a column that exists without a matching side table;
    ``restart`` discards the side table.
    """
    from tqdm import tqdm

    started = time.perf_counter()
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    taskset = Path(taskset)
    file = taskset / f"{split}.parquet"
    folder = Path(rollouts_dir) if rollouts_dir else default_rollouts_dir(taskset, split, column)
    frame = check_measurement(taskset, column, split, folder, overwrite)
    dispatch = backend if hasattr(backend, "map_unordered") else _LocalDispatch(backend)
    state = {"taskset_file": str(file.resolve()), "split": split, "column": column,
             "fingerprint": _fingerprint(frame), "n": int(n), "seed": int(seed),
             "backend": dispatch.settings(),
             "created": datetime.now(UTC).isoformat(timespec="seconds")}

    folder.mkdir(parents=True, exist_ok=True)
    with _lock(folder):
        _prepare_side_table(folder, state, restart)
        side = read_side_table(folder)
        values, done = _pass_rates(side, len(frame), n)
        resumed = int(done.sum())
        todo = np.flatnonzero(~done)
        if max_tasks is not None:
            todo = todo[:max(0, int(max_tasks))]
        records = frame.to_dict("records")
        jobs, job_ids = [], []
        for start in range(0, len(todo), chunk_size):
            ids = [int(i) for i in todo[start:start + chunk_size]]
            tasks = [{**records[i], "row": i} for i in ids]
            job_seed = seed if dispatch.seeds_per_task else chunk_seed(seed, ids)
            jobs.append((tasks, n, job_seed))
            job_ids.append(ids)

        failed = 0
        bar = tqdm(total=len(todo) * n, desc=f"measure {column}", unit="rollout",
                   disable=not progress, dynamic_ncols=True)
        inner = getattr(dispatch, "backend", None)
        per_rollout = inner is not None and hasattr(inner, "on_rollout")
        if per_rollout:
            inner.on_rollout = lambda record: bar.update()
        try:
            for index, results in dispatch.map_unordered(jobs):
                ids = job_ids[index]
                if len(results) != len(ids) or any(len(r) != n for r in results):
                    raise MeasureError(f"backend {state['backend'].get('backend')} returned "
                                       f"{[len(r) for r in results]} records for {len(ids)} "
                                       f"tasks x n={n}")
                rows = []
                for row_number, recs in zip(ids, results, strict=True):
                    for rec in recs:
                        row = {k: rec.get(k) for k in ROLLOUT_KEYS}
                        for key in ("response", "extracted", "error"):  # any backend's types
                            if row[key] is not None and not isinstance(row[key], str):
                                row[key] = str(row[key])
                        row["row"] = row_number
                        if not keep_responses:
                            row["response"] = None
                        if is_failed(row["error"], row["reward"]):
                            failed += 1
                            row["reward"] = row["accuracy"] = math.nan
                            row["error"] = row["error"] or "the backend returned no reward"
                        rows.append(row)
                _write_part(folder, rows)
                if not per_rollout:
                    bar.update(len(rows))
                bar.set_postfix(failed=failed)
        finally:
            bar.close()
            if per_rollout:
                inner.on_rollout = None

        side = read_side_table(folder)
        values, done = _pass_rates(side, len(frame), n)
        complete = bool(done.all())
        in_range = ((side["rollout"] >= 0) & (side["rollout"] < n) & (side["row"] >= 0)
                    & (side["row"] < len(frame))).to_numpy()
        failed_errors = side.loc[in_range & failed_mask(side), "error"].tolist()
        failed_total = len(failed_errors)
        if complete:
            _write_column(file, column, values)
            _update_provenance(taskset, column, split, {
                "statistic": f"mean accuracy over n={n} rollouts per task (workflow + judge)",
                "n": int(n), "seed": int(seed), "settings": state["backend"],
                "tasks": int(len(frame)), "rollouts": int(len(frame) * n),
                "failed_rollouts": failed_total,
                "timeouts": sum(failure_kind(e) == "timeout" for e in failed_errors),
                "mean_pass_rate": float(np.mean(values)),
                "side_table": str(folder.resolve()),
                "finished": datetime.now(UTC).isoformat(timespec="seconds"),
                "command": " ".join(sys.argv) if sys.argv else "",
            })
    return MeasureResult(column=column, split=split, values=values, complete=complete,
                         side_table=folder, taskset_file=file, tasks=int(len(frame)),
                         measured_this_run=int(len(todo)), resumed=resumed,
                         rollouts=int(len(side)), failed_rollouts=failed_total,
                         seconds=time.perf_counter() - started,
                         failures=failure_counts(failed_errors),
                         total_rollouts=int(len(frame) * n))

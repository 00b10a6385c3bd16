"""The resumable store of a measurement: side table chunks, locks, column and provenance.

Every rollout record goes to a side table of parquet chunks, each renamed into place
atomically, so a run killed at any moment loses only the chunk in flight; ``run.json``
records what is measured, and a rerun with other settings is refused. One measurement
writes a side table at a time (a ``filelock`` on ``<side table>/.lock``, never waited
for), and every read-modify-write of a split file or ``provenance.json`` holds the
taskset's lock (``<taskset>/.write.lock``). The operating system drops a lock when its
process dies (also on SIGKILL), so a killed run leaves no stale lock behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from mathagent import paths
from mathagent.rollouts.records import is_failed

# The side table's schema: the rollout keys plus the task's row number.
SIDE_SCHEMA = pa.schema([
    ("row", pa.int64()), ("rollout", pa.int32()), ("reward", pa.float64()),
    ("accuracy", pa.float64()), ("response", pa.string()), ("extracted", pa.string()),
    ("latency_s", pa.float64()), ("tokens", pa.int64()), ("error", pa.string()),
])

# Backend settings that may change between a run and its resumption (they do not change
# what is measured): where the endpoint lives and how hard it is pushed.
_RESUMABLE_SETTING_KEYS = {"base_url", "endpoints", "concurrency", "timeout", "request_timeout",
                           "max_retries", "device", "chunk_size", "fanout"}


class MeasureError(RuntimeError):
    """The measurement cannot start or resume; the message names the file or setting."""


def _fingerprint(frame: pd.DataFrame) -> str:
    """sha256 over the questions and answers, in order: resuming needs the same rows."""
    h = hashlib.sha256()
    for q, a in zip(frame["question"], frame["answer"], strict=True):
        h.update(str(q).encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
        h.update(str(a).encode("utf-8", "surrogatepass"))
        h.update(b"\x01")
    return h.hexdigest()


def default_rollouts_dir(taskset: Path, split: str, column: str) -> Path:
    """``runs/pass_rates/<taskset folder name>/<split>/<column>``: the side table's home."""
    return paths.runs_dir() / "pass_rates" / Path(taskset).resolve().name / split / column


def read_side_table(rollouts_dir: str | os.PathLike) -> pd.DataFrame:
    """All rollout records written so far (one row per task and rollout, sorted).

    Where a rollout was written more than once (a failed attempt, then a retry), the first
    successful record wins; a rollout that never succeeded shows its latest failure.
    """
    folder = Path(rollouts_dir)
    parts = sorted(folder.glob("part-*.parquet"))
    if not parts:
        return SIDE_SCHEMA.empty_table().to_pandas()
    tables = [pq.read_table(p, schema=SIDE_SCHEMA) for p in parts]
    frame = pa.concat_tables(tables).to_pandas()
    order = np.concatenate([np.full(len(t), i) for i, t in enumerate(tables)])
    failed = np.array([is_failed(e, r) for e, r in zip(frame["error"], frame["reward"],
                                                       strict=True)], dtype=bool)
    frame["_key"] = np.where(failed, len(tables) - order, -len(tables) + order - 1)
    frame = frame.sort_values(["row", "rollout", "_key"], kind="stable")
    frame = frame.drop_duplicates(["row", "rollout"], keep="first").drop(columns="_key")
    return frame.reset_index(drop=True)


def failed_mask(side: pd.DataFrame) -> np.ndarray:
    """Which records of a side table failed (see :func:`is_failed`)."""
    return np.array([is_failed(e, r) for e, r in zip(side["error"], side["reward"],
                                                      strict=True)], dtype=bool)


def _write_part(folder: Path, rows: list[dict]) -> Path:
    """Write one chunk of records atomically (a temporary name, then a rename)."""
    table = pa.Table.from_pylist(rows, schema=SIDE_SCHEMA)
    name = f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet"
    tmp = folder / f".tmp-{name}"
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, folder / name)
    return folder / name


@contextlib.contextmanager
def _held(path: Path, timeout: float, busy: str):
    """Hold a ``filelock`` on ``path`` (waiting up to ``timeout`` s; 0: not at all), else
    raise :class:`MeasureError` with ``busy``. The operating system drops the lock when its
    process dies (also on SIGKILL), so a killed run leaves nothing to clean up."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(path), timeout=timeout)
    try:
        lock.acquire()
    except Timeout:
        raise MeasureError(busy) from None
    try:
        yield
    finally:
        lock.release()


def _lock(folder: Path):
    """One writer per side table: its lock is never waited for."""
    return _held(folder / ".lock", 0, f"{folder}: another measurement is writing this side "
                 f"table (it holds {folder / '.lock'}); wait for it to finish or pass another "
                 "--rollouts-dir")


TASKSET_LOCK_NAME = ".write.lock"
TASKSET_LOCK_TIMEOUT = 600.0


def _taskset_lock(taskset: Path):
    """Serialise read-modify-writes of a taskset's files (split parquet, provenance.json),
    waiting up to :data:`TASKSET_LOCK_TIMEOUT` seconds for another measurement's write."""
    path = Path(taskset) / TASKSET_LOCK_NAME
    return _held(path, TASKSET_LOCK_TIMEOUT, f"{path}: another process has held this "
                 f"taskset's write lock for {TASKSET_LOCK_TIMEOUT:.0f} s; is a measurement "
                 "stuck?")


def _comparable(settings: dict) -> dict:
    return {k: v for k, v in settings.items() if k not in _RESUMABLE_SETTING_KEYS}


def _prepare_side_table(folder: Path, state: dict, restart: bool) -> None:
    """Create the side table folder or check that it holds the same measurement."""
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob(".tmp-part-*.parquet"):  # a chunk that a killed run never renamed
        stale.unlink()
    run_file = folder / "run.json"
    if run_file.exists() and restart:
        for p in folder.glob("part-*.parquet"):
            p.unlink()
        run_file.unlink()
    if run_file.exists():
        old = json.loads(run_file.read_text())
        checks = [("taskset file", old.get("taskset_file"), state["taskset_file"]),
                  ("taskset rows (fingerprint)", old.get("fingerprint"), state["fingerprint"]),
                  ("n", old.get("n"), state["n"]), ("seed", old.get("seed"), state["seed"]),
                  ("backend settings", _comparable(old.get("backend", {})),
                   _comparable(state["backend"]))]
        for what, was, now in checks:
            if was != now:
                raise MeasureError(
                    f"{run_file}: this side table belongs to a measurement with different "
                    f"{what} ({was!r} there, {now!r} now). Resume with the same settings, "
                    "pass --restart to discard it, or --rollouts-dir for a separate one.")
    else:
        run_file.write_text(json.dumps(state, indent=2, default=str) + "\n")


def _write_column(file: Path, column: str, values: np.ndarray) -> None:
    """Put ``values`` into ``column`` of the split file (replaced atomically), validated.

    The read-modify-write holds the taskset's lock, so two measurements writing different
    columns of one split both keep their column.
    """
    from mathagent.tasks import validate_taskset

    file = Path(file)
    with _taskset_lock(file.parent):
        table = pq.read_table(file)
        array = pa.array(values.astype(np.float64), type=pa.float64())
        if column in table.column_names:
            table = table.set_column(table.column_names.index(column), column, array)
        else:
            table = table.append_column(column, array)
        validate_taskset(table, [column], source=file)
        tmp = file.with_name(f".tmp-{uuid.uuid4().hex[:8]}-{file.name}")
        try:
            pq.write_table(table.replace_schema_metadata(None), tmp, compression="zstd")
            os.replace(tmp, file)
        finally:
            tmp.unlink(missing_ok=True)


def _update_provenance(taskset: Path, column: str, split: str, record: dict) -> None:
    """Record the measurement under ``measurements[column][split]`` in provenance.json."""
    taskset = Path(taskset)
    file = taskset / "provenance.json"
    with _taskset_lock(taskset):
        prov = json.loads(file.read_text()) if file.exists() else {}
        prov.setdefault("measurements", {}).setdefault(column, {})[split] = record
        tmp = file.with_name(f".tmp-{uuid.uuid4().hex[:8]}-provenance.json")
        try:
            tmp.write_text(json.dumps(prov, indent=2, default=str) + "\n")
            os.replace(tmp, file)
        finally:
            tmp.unlink(missing_ok=True)

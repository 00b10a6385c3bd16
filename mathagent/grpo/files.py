"""Run files that survive a kill at any instant: atomic writes, and cutting logs back to a step.

A resumed run writes again what the steps after its checkpoint wrote, so it first drops
those records (:func:`truncate_jsonl`) and reads how far the run had logged
(:func:`last_logged_step`).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path


def _fsync(fd: int) -> None:
    # some file systems do not support it; the order of the renames still holds
    with contextlib.suppress(OSError):
        os.fsync(fd)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        _fsync(fd)
    finally:
        os.close(fd)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``path`` through a temporary file and a rename: readers (and a resume after a
    kill) see the old content or the new one, never a torn file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        _fsync(f.fileno())
    os.replace(tmp, path)


def truncate_jsonl(path: Path, last_step: int) -> int:
    """Keep the records of ``path`` with ``step <= last_step`` (atomically); returns how
    many were dropped. A torn last line (a kill during the append) is dropped too.

    Raises:
        ValueError: a line other than the last is not a JSON record with a step.
    """
    path = Path(path)
    if not path.exists():
        return 0
    text = path.read_text()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    keep, dropped = [], 0
    for k, line in enumerate(lines, start=1):
        try:
            step = json.loads(line)["step"]
        except (ValueError, TypeError, KeyError):
            if k == len(lines) and not text.endswith("\n"):  # torn by a kill
                dropped += 1
                continue
            raise ValueError(f"{path}: line {k} is not a JSON record with a 'step'") from None
        if int(step) <= last_step:
            keep.append(line)
        else:
            dropped += 1
    if dropped:
        atomic_write_text(path, "".join(line + "\n" for line in keep))
    return dropped


def last_logged_step(csv: Path) -> int:
    """The largest step in a run's ``metrics.csv`` (0 when it is absent or empty)."""
    import pandas as pd

    if not Path(csv).exists():
        return 0
    try:
        steps = pd.read_csv(csv)["step"]
    except (ValueError, KeyError, pd.errors.ParserError) as exc:
        raise ValueError(f"{csv}: not a metrics table with a 'step' column ({exc})") from None
    return int(steps.max()) if len(steps) else 0


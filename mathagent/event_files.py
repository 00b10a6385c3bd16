"""TensorBoard event files cut short: how much of the end is unfinished, and what it lost.

An event file is a sequence of records (TFRecord framing: an 8-byte length, its 4-byte CRC,
the data, the data's 4-byte CRC). A run killed while writing, or a copy that stopped early,
leaves a last record unfinished; TensorBoard's reader stops there without a word, so the
steps written in it (and any after) vanish from the plots. :func:`unfinished_tail` finds such
an end; :func:`lost_steps` says which steps of the file it took.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pandas as pd

_HEADER = 12  # length (8 bytes) and its CRC (4)
_FOOTER = 4  # the data's CRC


def unfinished_tail(path: str | Path) -> int:
    """Bytes after the file's last whole record (0 when it ends where a record ends)."""
    size = os.path.getsize(path)
    at = 0
    with open(path, "rb") as fh:
        while at < size:
            header = fh.read(_HEADER)
            if len(header) < _HEADER:
                return size - at
            (length,) = struct.unpack("<Q", header[:8])
            end = at + _HEADER + length + _FOOTER
            if end > size:
                return size - at
            fh.seek(end)
            at = end
    return 0


def lost_steps(scalars: pd.DataFrame) -> str:
    """What a cut-short file lost, from the scalars read before the cut (``tag, step``).

    Records are written in step order, so the cut takes the end of the last step and every
    step after it. A tag logged at every step (its steps run without a gap) that stops before
    the file's last step lost the steps in between; tags logged now and then (eval) cannot
    say, and are left out."""
    if scalars.empty:
        return "every step it held is lost"
    top = int(scalars["step"].max())
    partly: dict[int, list[str]] = {}
    for tag, steps in scalars.groupby("tag")["step"]:
        first, last = int(steps.min()), int(steps.max())
        if last < top and len(steps) > 1 and steps.nunique() == last - first + 1:
            for s in range(last + 1, top + 1):
                partly.setdefault(s, []).append(str(tag))
    said = "; ".join(f"step {s} lost {', '.join(sorted(tags))}" for s, tags in sorted(partly.items()))
    return (f"{said + '; ' if said else ''}any step after {top} that the run wrote there is "
            "lost")

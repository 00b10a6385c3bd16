"""Taskset folders on disk: loading a split, writing splits safely, and the provenance file.

A taskset directory holds one parquet file per split (``train``, ``validation``, ``test``)
and a ``provenance.json``. Writes are staged beside the folder and swapped in when complete;
a build replaces only the splits it owns and keeps every other split and file there.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from mathagent.outputs import OutputError, one_line, staged_output
from mathagent.run_sync import run_sync
from mathagent.tasks.files import _read_parquet, check_parquet
from mathagent.tasks.schema import SPLITS, TasksetError, _is_text, validate_taskset

PROVENANCE_FILE = "provenance.json"


def split_file(path: str | Path, split: str) -> Path:
    """``<path>/<split>.parquet``, or ``path`` itself when it already is a parquet file."""
    path = Path(path)
    return path if path.suffix == ".parquet" else path / f"{split}.parquet"


def load_taskset(path: str | Path, split: str = "train",
                 feature_keys: Sequence[str] = ()):
    """Load one split of a taskset directory as a validated ``datasets.Dataset``.

    Reads ``<path>/<split>.parquet`` the way a Trinity config's taskset does
    (``datasets.load_dataset(path, split=split)``); ``path`` may also name a parquet file.
    ``feature_keys`` must exist and hold pass rates in [0, 1]. A missing directory or
    split raises :class:`TasksetError` listing what is there instead.
    """
    import datasets

    path = Path(path)
    if not path.exists():
        raise TasksetError(f"{path}: no such taskset directory; build one with "
                           "`python -m mathagent prepare-data`, `prepare-aime` or "
                           "`generate-arithmetic`")
    file = split_file(path, split)
    if not file.is_file():
        found = sorted(p.stem for p in path.glob("*.parquet"))
        raise TasksetError(f"{file}: split {split!r} not found in {path} "
                           f"(splits present: {', '.join(found) or 'none'})")
    check_parquet(file)
    try:
        if path.is_dir():
            ds = datasets.load_dataset(str(path), split=split)
        else:
            ds = datasets.load_dataset("parquet", data_files={split: str(file)}, split=split)
    except Exception as exc:  # datasets wraps Arrow's errors in its own; report one line
        raise TasksetError(f"{file}: cannot be read as a taskset split ({type(exc).__name__}: "
                           f"{one_line(exc)})") from exc
    validate_taskset(ds, feature_keys, source=file)
    return ds


def read_split(path: str | Path, split: str = "train",
               feature_keys: Sequence[str] = ()) -> pd.DataFrame:
    """One split as a validated ``pandas.DataFrame`` (for analysis and figures)."""
    file = split_file(path, split)
    if not file.is_file():
        raise TasksetError(f"{file}: no such file")
    frame = _read_parquet(file).to_pandas()
    validate_taskset(frame, feature_keys, source=file)
    return frame


def existing_splits(out_dir: str | Path) -> list[str]:
    """The splits a taskset folder holds now (``<split>.parquet`` files), in SPLITS order."""
    out_dir = Path(out_dir)
    return [s for s in SPLITS if (out_dir / f"{s}.parquet").is_file()]


def _taskset_files(out_dir: Path) -> list[str]:
    names = [f"{s}.parquet" for s in existing_splits(out_dir)]
    return names + ([PROVENANCE_FILE] if (out_dir / PROVENANCE_FILE).exists() else [])


def replacement_note(out_dir: str | Path, replaces: Sequence[str]) -> str | None:
    """What writing the splits ``replaces`` into ``out_dir`` changes there, in one line, or
    None when the folder holds no taskset yet."""
    out_dir = Path(out_dir)
    present = existing_splits(out_dir)
    if not present and not (out_dir / PROVENANCE_FILE).exists():
        return None
    gone = [s for s in present if s in replaces]
    kept = [s for s in present if s not in replaces]
    replaced = ([f"split(s) {', '.join(gone)}"] if gone else []) + (
        [PROVENANCE_FILE] if (out_dir / PROVENANCE_FILE).exists() else [])
    return (f"{out_dir}: replaced {' and '.join(replaced) or 'nothing'}; kept "
            + (", ".join(kept) if kept else "no other split"))


def check_taskset_output(out_dir: str | Path, replaces: Sequence[str], force: bool) -> None:
    """Raise :class:`OutputError` when ``out_dir`` holds a taskset and ``force`` is off.

    With ``force`` the splits in ``replaces`` are replaced and every other split (and any
    other file in the folder) is kept, so say which in the message.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputError(f"{out_dir}: exists and is not a folder; choose another --out")
    if force or not out_dir.is_dir():
        return
    files = _taskset_files(out_dir)
    if files:
        kept = [s for s in existing_splits(out_dir) if s not in replaces]
        raise OutputError(
            f"{out_dir}: already holds a taskset ({', '.join(files)}) and is kept; pass "
            f"--force to replace its {'/'.join(replaces)} split"
            + (f" (keeping {', '.join(kept)})" if kept else "")
            + ", or choose another --out")


def save_taskset(splits: Mapping[str, pd.DataFrame], out_dir: str | Path,
                 provenance: Mapping[str, Any], feature_keys: Sequence[str] = (), *,
                 force: bool = True, replaces: Sequence[str] = SPLITS) -> dict[str, Path]:
    """Validate and write ``{split: frame}`` as ``<out_dir>/<split>.parquet`` + provenance.

    ``replaces`` are the splits this build owns (``splits`` always count among them): an
    earlier file of an owned split that ``splits`` lacks (say, a stale
    ``validation.parquet``) is removed, so a reader never mixes two builds of one split
    family. Every other split and every other file in ``out_dir`` is kept, and the new
    ``provenance.json`` carries each kept split's own provenance under ``kept_splits``.
    The default owns all splits: the folder then holds exactly this taskset.

    The files are written into a temporary folder beside ``out_dir`` and swapped in when
    all are written: a failure midway leaves ``out_dir`` as it was. ``force=False`` refuses
    (:class:`OutputError`) to touch a folder that already holds a taskset; the commands
    pass their ``--force`` here, the library default replaces (notebooks re-run into their
    scratch folders). Returns the written paths by split.
    """
    out_dir = Path(out_dir)
    bad = [s for s in splits if s not in SPLITS]
    if bad:
        raise TasksetError(f"{out_dir}: unknown split name(s) {bad}; use {list(SPLITS)}")
    owned = [s for s in SPLITS if s in replaces or s in splits]
    for split, frame in splits.items():
        validate_taskset(frame, feature_keys, source=out_dir / f"{split}.parquet")
    check_taskset_output(out_dir, owned, force)
    kept = [s for s in existing_splits(out_dir) if s not in owned] if out_dir.is_dir() else []
    prov = dict(provenance)
    if kept:
        old: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError):
            loaded = json.loads((out_dir / PROVENANCE_FILE).read_text())
            old = loaded if isinstance(loaded, dict) else {}
        earlier = old.get("kept_splits") if isinstance(old.get("kept_splits"), dict) else {}
        own = {k: v for k, v in old.items() if k != "kept_splits"} or None
        prov["kept_splits"] = {s: earlier.get(s, own) for s in kept}
    owned_files = {f"{s}.parquet" for s in owned} | {PROVENANCE_FILE}
    written = {}
    with staged_output(out_dir, keep=lambda entry: entry.name not in owned_files) as tmp:
        for split, frame in splits.items():
            table = pa.Table.from_pandas(frame.reset_index(drop=True), preserve_index=False)
            # pandas 3 hands over large_string; plain string is what every reader expects.
            schema = pa.schema([f.with_type(pa.string()) if _is_text(f.type) else f
                                for f in table.schema])
            table = table.cast(schema).replace_schema_metadata(None)
            pq.write_table(table, tmp / f"{split}.parquet", compression="zstd")
            written[split] = out_dir / f"{split}.parquet"
        (tmp / PROVENANCE_FILE).write_text(json.dumps(prov, indent=2, default=str) + "\n")
    return written


def read_provenance(path: str | Path) -> dict[str, Any]:
    """The ``provenance.json`` of a taskset directory."""
    file = Path(path) / PROVENANCE_FILE
    if not file.is_file():
        raise TasksetError(f"{file}: no provenance file")
    return json.loads(file.read_text())


def read_with_trinity(path: str | Path, split: str = "train", name: str = "taskset",
                      workflow_type: str = "math_workflow", batch_size: int = 256) -> list:
    """Read a whole taskset split with Trinity-RFT's own task file reader, as training does.

    Builds a ``TasksetConfig`` like the one ``agentscope.tuner.tune`` builds (``path`` is
    what a config's ``buffer.explorer_input.taskset.path`` holds), asks
    ``trinity.buffer.get_buffer_reader`` for its reader (a ``FileReader`` wrapping
    ``TaskFileReader``, which calls ``datasets.load_dataset(path, split=split)``) and
    drains it once in eval mode. Returns Trinity ``Task`` objects; ``task.raw_task`` is the
    row as a dict. The reader insists on a workflow class: ``tune`` sets
    ``agentscope_workflow_adapter_v1``, whose module needs vLLM, so the default here is
    Trinity's plain ``math_workflow``, which imports anywhere and does not change how rows
    are read. Trinity's reader turns off the ``datasets`` cache for the whole process.
    """
    from trinity.buffer import get_buffer_reader
    from trinity.common.config import TasksetConfig

    config = TasksetConfig(name=name, path=str(path), split=split, is_eval=True,
                           default_workflow_type=workflow_type)
    reader = get_buffer_reader(config)

    async def drain() -> list:
        out = []
        while True:
            try:
                out.extend(await reader.read(batch_size=batch_size))
            except StopAsyncIteration:
                return out

    return run_sync(drain())

"""Tasksets: the schema, its validator, loading and saving, and three ways to build one.

A *taskset* is what RL training samples its prompts from. In this package it is a
``datasets.Dataset`` with

* ``question`` (str, non-empty): the problem shown to the agent;
* ``answer`` (str): ``"#### <truth>"``, the form the judge splits on;
* optional float *feature* columns in [0, 1], named ``*_pass_rate``: how often a reference
  model solved the task; ``difficulty_based`` selection (BOTS) reads two of them;
* optional provenance or difficulty columns (``source_row``, ``difficulty``, ...).

On disk a taskset is a directory with one parquet file per split (``train.parquet``,
``test.parquet``, optionally ``validation.parquet``) and a ``provenance.json`` saying where
the rows came from. ``datasets.load_dataset(dir, split="train")`` reads it, and so does
Trinity-RFT's task file reader, which is what a config's ``buffer.explorer_input.taskset.path``
points at.

Three builders feed this schema:

* :func:`convert_guru` / ``prepare-data``: the math part of LLM360/guru-RL-92k, with the
  reference cleanup (the "Please output the final answer within \\boxed{}." sentence
  removed, ``answer = "#### " + ground_truth``, the two Qwen pass-rate columns kept) plus an
  account of every dropped row, explicit handling of missing pass rates and duplicates;
* :func:`convert_aime` / ``prepare-aime``: the AIME-24 evaluation set;
* :func:`generate_arithmetic` / ``generate-arithmetic``: the bundled offline taskset of
  arithmetic word problems with a wide, controlled difficulty range.

Every loader goes through :func:`validate_taskset`, whose errors name the file, the row
(counted from 0) and the column at fault; an input file that cannot be read at all (empty,
truncated, corrupt, malformed csv/json) is one :class:`TasksetError` line naming it.

Outputs are never lost silently: a taskset is written into a temporary folder beside its
directory and swapped in when complete (:func:`mathagent.outputs.staged_output`), so a
failure midway leaves the old one intact; the commands keep an existing taskset unless
``--force``, and with ``--force`` replace only the splits they build (``prepare-aime`` the
test split, ``prepare-data`` train/validation), keeping every other split and file there.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mathagent import __version__, paths
from mathagent.answers import last_box
from mathagent.outputs import OutputError, one_line, staged_output
from mathagent.run_sync import run_sync

# --------------------------------------------------------------------------------------
# Schema
# --------------------------------------------------------------------------------------

QUESTION = "question"
ANSWER = "answer"
ANSWER_PREFIX = "#### "
PASS_RATE_SUFFIX = "pass_rate"
SPLITS = ("train", "validation", "test")
PROVENANCE_FILE = "provenance.json"

# The sentence guru appends to every math prompt; the agent's own system prompt asks for
# a boxed answer, so the reference conversion removes it from the question.
BOXED_SENTENCE = "Please output the final answer within \\boxed{}."

GURU_REPO = "LLM360/guru-RL-92k"
GURU_FILE = "train/math__combined_54.4k.parquet"
# Pass rates of a weaker and a stronger reference model (16 samples each), in the order
# ``difficulty_based`` expects: column 0 weak, column 1 strong.
GURU_PASS_RATE_KEYS = ("qwen2.5_7b_pass_rate", "qwen3_30b_pass_rate")

AIME_REPO = "HuggingFaceH4/aime_2024"

# Measured on the bundled arithmetic taskset by ``measure-pass-rates`` (weak, strong).
WEAK_KEY = "smollm2_weak_pass_rate"
STRONG_KEY = "smollm2_strong_pass_rate"
ARITHMETIC_FEATURE_KEYS = (WEAK_KEY, STRONG_KEY)
ARITHMETIC_SEED = 7


class TasksetError(ValueError):
    """Bad taskset input; the message names the file, row and column at fault."""


class HubUnavailable(RuntimeError):
    """The Hugging Face hub could not be reached; the message says what to pass instead."""


def _as_table(data: Any) -> pa.Table:
    """A ``pyarrow.Table`` view of a Dataset, DataFrame or Table (no copy where possible)."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pd.DataFrame):
        return pa.Table.from_pandas(data, preserve_index=False)
    if hasattr(data, "with_format"):  # datasets.Dataset; honours select()/shuffle() indices
        return data.with_format("arrow")[:]
    raise TypeError(f"expected a datasets.Dataset, pandas.DataFrame or pyarrow.Table, "
                    f"got {type(data).__name__}")


def _first_true(mask: pa.ChunkedArray | pa.Array) -> int | None:
    """Index of the first True in a boolean array (nulls count as False), or None."""
    mask = pc.fill_null(mask, False)
    if not pc.any(mask).as_py():
        return None
    return int(pc.index(mask, True).as_py())


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or (
        hasattr(pa.types, "is_string_view") and pa.types.is_string_view(t))


def pass_rate_columns(columns: Iterable[str]) -> list[str]:
    """The columns the schema treats as pass rates (names ending in ``pass_rate``)."""
    return [c for c in columns if c.endswith(PASS_RATE_SUFFIX)]


def pass_rate_values(col: pa.ChunkedArray | pa.Array, name: str, where: str,
                     label: Callable[[int], str] = lambda row: f"row {row}",
                     booleans: bool = False) -> np.ndarray:
    """One pass-rate column as float64, NaN where a value is null or NaN.

    The one check of pass-rate values, used by the schema, the guru reader and the
    selectors: :class:`TasksetError` when the column is not numeric (a column of nulls
    only is read as all missing; ``booleans`` also accepts 0/1 flags) or a present value
    lies outside [0, 1]; the message names ``where``, the column, the first offending row
    (``label(row)``) and how many such rows there are. Missing values are left to the caller.
    """
    kind = col.type
    if not (pa.types.is_floating(kind) or pa.types.is_integer(kind) or pa.types.is_null(kind)
            or (booleans and pa.types.is_boolean(kind))):
        raise TasksetError(f"{where}: column {name!r} has type {kind}, expected float "
                           "pass rates in [0, 1]")
    values = pc.fill_null(pc.cast(col, pa.float64()), np.nan).to_numpy(zero_copy_only=False)
    bad = np.flatnonzero((values < 0.0) | (values > 1.0))
    if bad.size:
        row = int(bad[0])
        raise TasksetError(f"{where}: {label(row)}, column {name!r}: pass rate "
                           f"{values[row]!r} outside [0, 1] ({bad.size} such row(s) in all)")
    return values


def fill_value(present: np.ndarray, rule: str) -> float:
    """The value that fills a column's missing pass rates: the ``mean`` or ``median`` of
    its ``present`` values."""
    if rule not in ("mean", "median"):
        raise ValueError(f"fill rule must be 'mean' or 'median', not {rule!r}")
    return float(np.mean(present) if rule == "mean" else np.median(present))


def validate_taskset(data: Any, feature_keys: Sequence[str] = (), source: Any = "taskset") -> None:
    """Check ``data`` against the taskset schema; raise :class:`TasksetError` on the first fault.

    ``data`` is a ``datasets.Dataset``, ``pandas.DataFrame`` or ``pyarrow.Table`` with one
    row per task. Checks, in order: at least one row; ``question``, ``answer`` and every
    ``feature_keys`` column present; question/answer are strings, not null, not blank;
    every answer contains ``####`` followed by a truth; every feature column and every
    ``*_pass_rate`` column is numeric, free of NaN/null and within [0, 1]. ``source`` (a
    file path, usually) starts every message, and rows are counted from 0.
    """
    where = str(source)
    table = _as_table(data)
    if table.num_rows == 0:
        raise TasksetError(f"{where}: the taskset has no rows")
    columns = table.column_names
    missing = [c for c in (QUESTION, ANSWER, *feature_keys) if c not in columns]
    if missing:
        raise TasksetError(f"{where}: missing column(s) {', '.join(map(repr, missing))}; "
                           f"columns present: {', '.join(map(repr, columns))}")
    for name in (QUESTION, ANSWER):
        col = table.column(name)
        if not _is_text(col.type):
            raise TasksetError(f"{where}: column {name!r} has type {col.type}, expected string")
        row = _first_true(col.is_null())
        if row is not None:
            raise TasksetError(f"{where}: row {row}, column {name!r}: missing (null)")
        row = _first_true(pc.equal(pc.utf8_trim_whitespace(col), ""))
        if row is not None:
            raise TasksetError(f"{where}: row {row}, column {name!r}: empty")
    answers = table.column(ANSWER)
    row = _first_true(pc.invert(pc.match_substring_regex(answers, r"####\s*\S")))
    if row is not None:
        raise TasksetError(f"{where}: row {row}, column 'answer': expected '#### <truth>', "
                           f"got {answers[row].as_py()!r}")
    for name in dict.fromkeys([*feature_keys, *pass_rate_columns(columns)]):
        values = pass_rate_values(table.column(name), name, where)
        missing_rows = np.flatnonzero(np.isnan(values))
        if missing_rows.size:
            raise TasksetError(f"{where}: row {int(missing_rows[0])}, column {name!r}: missing "
                               "pass rate (NaN or null); drop or impute it (see prepare-data "
                               "--missing-pass-rate)")


def _not_parquet(path: Path, exc: BaseException) -> TasksetError:
    return TasksetError(f"{path}: not a readable parquet file ({one_line(exc)}); it may be "
                        "truncated, corrupt or still downloading: fetch it again")


def check_parquet(path: str | Path) -> None:
    """Raise :class:`TasksetError` (one line, naming the file) unless ``path`` is a parquet
    file whose footer can be read (0 bytes, truncated or not parquet at all)."""
    path = Path(path)
    if path.stat().st_size == 0:
        raise TasksetError(f"{path}: the file is empty (0 bytes); it may be an interrupted "
                           "download: fetch it again")
    try:
        pq.read_metadata(path)
    except (pa.ArrowException, OSError) as exc:
        raise _not_parquet(path, exc) from exc


def _read_parquet(path: Path, columns: Sequence[str] | None = None) -> pa.Table:
    """``pq.read_table`` whose failures are one :class:`TasksetError` line naming the file."""
    check_parquet(path)
    try:
        names = pq.read_schema(path).names
        wanted = None if columns is None else [c for c in columns if c in names]
        return pq.read_table(path, columns=wanted)
    except (pa.ArrowException, OSError) as exc:
        raise _not_parquet(path, exc) from exc


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


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file (provenance: which input exactly)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"mathagent": __version__}
    for pkg in ("datasets", "pyarrow", "pandas", "numpy"):
        with contextlib.suppress(md.PackageNotFoundError):
            out[pkg] = md.version(pkg)
    return out


def _table_from_rows(rows: list, where: Any) -> pa.Table:
    """Rows of JSON objects as a table; keys missing from a row become nulls.

    Types are inferred per column over all rows. A column mixing types (``19`` in one row,
    ``"060"`` in another, as hand-made answer files do) is read as text.
    """
    if not all(isinstance(r, dict) for r in rows):
        raise TasksetError(f"{where}: every line must be a JSON object")
    names = list(dict.fromkeys(k for r in rows for k in r))
    columns = {}
    for name in names:
        values = [r.get(name) for r in rows]
        try:
            columns[name] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            columns[name] = pa.array([None if v is None else
                                      v if isinstance(v, str) else json.dumps(v)
                                      for v in values], pa.string())
    return pa.table(columns)


def read_raw_table(path: str | Path, columns: Sequence[str] | None = None) -> pa.Table:
    """Read a raw input file (parquet, jsonl/json or csv) as a ``pyarrow.Table``.

    JSON lines are parsed with Python's ``json`` (which accepts ``NaN``), and the column
    types are inferred over all rows, so hand-written files may omit keys (they become
    nulls). A missing, empty, truncated or malformed file raises :class:`TasksetError`
    with one line naming the file (and the line, for csv and jsonl).
    """
    path = Path(path)
    if not path.is_file():
        raise TasksetError(f"{path}: no such input file")
    suffix = "".join(path.suffixes[-1:]).lower()
    if suffix not in (".parquet", ".jsonl", ".json", ".csv"):
        raise TasksetError(f"{path}: unsupported file type {suffix!r}; use parquet, jsonl or csv")
    if path.stat().st_size == 0:
        raise TasksetError(f"{path}: the file is empty (0 bytes); it may be an interrupted "
                           "download: fetch it again")
    if suffix == ".parquet":
        return _read_parquet(path, columns)
    if suffix in (".jsonl", ".json"):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise TasksetError(f"{path}: not UTF-8 text (bad byte at offset {exc.start}); "
                               f"is it a binary file named {suffix}?") from exc
        if suffix == ".json" and text.lstrip().startswith("["):
            try:
                rows = json.loads(text)
            except json.JSONDecodeError as exc:
                raise TasksetError(f"{path}: line {exc.lineno}, column {exc.colno}: not valid "
                                   f"JSON ({exc.msg})") from exc
        else:
            rows = []
            for lineno, line in enumerate(text.splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise TasksetError(f"{path}: line {lineno}: not valid JSON ({exc.msg})") from exc
        if not rows:
            raise TasksetError(f"{path}: no rows")
        table = _table_from_rows(rows, path)
    else:
        table = _read_csv(path)
    if columns is not None:
        table = table.select([c for c in columns if c in table.column_names])
    return table


def _read_csv(path: Path) -> pa.Table:
    """A csv file as a table; a malformed one is one :class:`TasksetError` line naming the
    file and, where Python's csv module can find it, the line at fault."""
    import csv

    import pyarrow.csv as pacsv

    last = 0  # the line the previous record ended on
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh, strict=True)
            width = None
            for record in reader:
                if width is None:
                    width = len(record)
                elif record and len(record) != width:
                    raise TasksetError(f"{path}: line {last + 1}: {len(record)} field(s) "
                                       f"where the header has {width}")
                last = reader.line_num
    except csv.Error as exc:
        raise TasksetError(f"{path}: line {last + 1}: not valid CSV ({exc}); look for an "
                           "unterminated quote there") from exc
    except UnicodeDecodeError as exc:
        raise TasksetError(f"{path}: not UTF-8 text (bad byte at offset {exc.start}); "
                           "is it a binary file named .csv?") from exc
    try:
        return pacsv.read_csv(path)
    except (pa.ArrowException, OSError) as exc:
        raise TasksetError(f"{path}: not a readable CSV file ({one_line(exc)})") from exc


# --------------------------------------------------------------------------------------
# Hugging Face hub (optional; every path also works from a local file)
# --------------------------------------------------------------------------------------

def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` asks for no hub access at all."""
    return os.environ.get("HF_HUB_OFFLINE", "0").strip().lower() not in ("", "0", "false")


def probe_hub(api_path: str, timeout: float, endpoint: str | None = None) -> int | None:
    """The HTTP status the hub answers ``HEAD {endpoint}/api/{api_path}`` with (200, or the
    error code such as 404/401), or None when it does not answer within ``timeout`` s.

    ``huggingface_hub`` retries a failed lookup with back-off (about 25 s in all) before
    it gives up; one quick request first keeps the unreachable case short. ``endpoint``
    defaults to ``HF_ENDPOINT`` or the public hub.
    """
    import urllib.error
    import urllib.request

    endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    request = urllib.request.Request(f"{endpoint.rstrip('/')}/api/{api_path}", method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:  # the hub answered
        return int(exc.code)
    except (OSError, ValueError):
        return None


def download_from_hub(repo_id: str, filename: str | None = None, *, timeout: float = 10.0,
                      endpoint: str | None = None, what_instead: str = "--input PATH") -> Path:
    """Fetch ``filename`` (or a snapshot of the repo's data files) from a hub dataset repo.

    A copy already in the local hub cache is used without any network call. Otherwise the
    hub gets ``timeout`` seconds to answer; unreachable (or ``HF_HUB_OFFLINE=1``), this
    raises :class:`HubUnavailable` with one line naming ``what_instead``.
    """
    target = f"{repo_id}/{filename}" if filename else repo_id
    try:
        import huggingface_hub as hub
        from huggingface_hub import constants

        if filename is not None:
            cached = hub.try_to_load_from_cache(repo_id, filename, repo_type="dataset")
            if isinstance(cached, str) and Path(cached).is_file():
                return Path(cached)
        if constants.HF_HUB_OFFLINE:
            raise OSError("offline mode (HF_HUB_OFFLINE is set) and no cached copy")
        endpoint = endpoint or constants.ENDPOINT
        if probe_hub(f"datasets/{repo_id}", timeout, endpoint) is None:
            # an HTTP error means the hub answered: the download reports it precisely
            raise OSError(f"the hub at {endpoint} did not answer within {timeout:g} s")
        if filename is not None:
            return Path(hub.hf_hub_download(repo_id, filename, repo_type="dataset",
                                            etag_timeout=timeout, endpoint=endpoint))
        return Path(hub.snapshot_download(repo_id, repo_type="dataset", etag_timeout=timeout,
                                          endpoint=endpoint,
                                          allow_patterns=["*.parquet", "*.jsonl"]))
    except Exception as exc:  # any hub failure becomes one actionable line
        reason = " ".join(str(exc).split()).split(". ")[0][:200] or "no details"
        raise HubUnavailable(f"could not fetch {target} from the Hugging Face hub "
                             f"({type(exc).__name__}: {reason}); download it where the hub "
                             f"is reachable and pass {what_instead}") from exc


# --------------------------------------------------------------------------------------
# Guru math -> taskset
# --------------------------------------------------------------------------------------

# Why a row is dropped, in the order the checks run; each dropped row gets exactly one.
DROP_EMPTY_PROMPT = "empty prompt"
DROP_EMPTY_QUESTION = "empty question"
DROP_MISSING_TRUTH = "missing ground truth"
DROP_MISSING_PASS_RATE = "missing pass rate"
DROP_DUPLICATE = "duplicate question"
DROP_REASONS = (DROP_EMPTY_PROMPT, DROP_EMPTY_QUESTION, DROP_MISSING_TRUTH,
                DROP_MISSING_PASS_RATE, DROP_DUPLICATE)
MISSING_PASS_RATE_POLICIES = ("drop", "mean", "median", "constant")


@dataclass
class GuruOptions:
    """How :func:`convert_guru` treats the rows the reference conversion glosses over.

    ``missing_pass_rate``: ``drop`` rows with a NaN/null in any pass-rate column, or impute
    it: ``mean``/``median`` of that column over the rows that pass the structural checks
    (prompt, question, ground truth) and have a value, or ``constant`` = ``fill_value``.
    ``drop_duplicates``: drop later copies of an exact-duplicate (cleaned) question, keeping
    the first; duplicates are reported either way. ``val_fraction``: share of the kept rows
    moved to a ``validation`` split, chosen by a permutation seeded with ``seed``.
    ``keep_columns``: raw columns copied through unchanged (besides ``data_source``).
    """

    pass_rate_columns: tuple[str, ...] = GURU_PASS_RATE_KEYS
    missing_pass_rate: str = "drop"
    fill_value: float | None = None
    drop_duplicates: bool = True
    val_fraction: float = 0.0
    seed: int = 0
    keep_columns: tuple[str, ...] = ()

    def check(self) -> None:
        if self.missing_pass_rate not in MISSING_PASS_RATE_POLICIES:
            raise TasksetError(f"missing_pass_rate={self.missing_pass_rate!r}: choose one of "
                               f"{', '.join(MISSING_PASS_RATE_POLICIES)}")
        if self.missing_pass_rate == "constant" and (
                self.fill_value is None or not 0.0 <= float(self.fill_value) <= 1.0):
            raise TasksetError("missing_pass_rate='constant' needs fill_value in [0, 1] "
                               f"(got {self.fill_value!r}; pass --fill-value)")
        if not 0.0 <= self.val_fraction < 1.0:
            raise TasksetError(f"val_fraction={self.val_fraction}: expected 0 <= fraction < 1")


@dataclass
class ConversionReport:
    """Rows in and out of a conversion, and what happened to every row that left.

    Invariant: ``rows_in == rows_out + sum(dropped.values())``.
    """

    source: str
    rows_in: int
    rows_out: int = 0
    splits: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    missing_pass_rates: dict[str, int] = field(default_factory=dict)
    imputed: dict[str, dict[str, Any]] = field(default_factory=dict)
    duplicates: dict[str, Any] = field(default_factory=dict)
    dropped_rows: dict[str, list[int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def drop(self, reason: np.ndarray, mask: np.ndarray, why: str) -> None:
        """Drop the rows of ``mask`` that are still kept, for ``why``: each dropped row gets
        exactly one reason (the first check that fails), recorded in ``reason`` and counted."""
        mask = mask & (reason == "")
        reason[mask] = why
        self.dropped[why] = self.dropped.get(why, 0) + int(mask.sum())
        self.dropped_rows.setdefault(why, []).extend(np.flatnonzero(mask).tolist())

    def check(self) -> None:
        lost = self.rows_in - self.rows_out - sum(self.dropped.values())
        if lost:
            raise AssertionError(f"{self.source}: {lost} row(s) unaccounted for")
        if any(len(self.dropped_rows.get(r, ())) != n for r, n in self.dropped.items()):
            raise AssertionError(f"{self.source}: dropped row lists disagree with the counts")
        if sum(self.splits.values()) != self.rows_out:
            raise AssertionError(f"{self.source}: split sizes do not add up to rows_out")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def dropped_frame(self) -> pd.DataFrame:
        """One row per dropped input row: ``source_row`` and ``reason``, by row number."""
        rows = [(r, why) for why, lst in self.dropped_rows.items() for r in lst]
        frame = pd.DataFrame(rows, columns=["source_row", "reason"])
        return frame.sort_values("source_row").reset_index(drop=True)


def format_report(report: ConversionReport) -> str:
    """A short human-readable account of a conversion (printed by the commands)."""
    lines = [f"source: {report.source}", f"rows in:  {report.rows_in:>8,}"]
    for reason, count in report.dropped.items():
        lines.append(f"  dropped, {reason + ':':<22}{count:>8,}")
    lines.append(f"rows out: {report.rows_out:>8,}  ("
                 + ", ".join(f"{s} {n:,}" for s, n in report.splits.items()) + ")")
    for col, n in report.missing_pass_rates.items():
        lines.append(f"missing values in {col}: {n:,}")
    for col, info in report.imputed.items():
        lines.append(f"imputed {info['rows']:,} value(s) in {col} with {info['rule']} = "
                     f"{info['value']:.4f}")
    if report.duplicates:
        d = report.duplicates
        lines.append(f"duplicate questions: {d['rows']:,} extra copies in {d['groups']:,} groups "
                     f"({d['conflicting_groups']:,} with differing answers), {d['action']}")
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines)


def clean_question(text: pd.Series | pa.ChunkedArray | pa.Array) -> pa.Array:
    """Remove every copy of :data:`BOXED_SENTENCE` and strip surrounding whitespace."""
    arr = pa.array(text) if isinstance(text, pd.Series) else text
    return pc.utf8_trim_whitespace(pc.replace_substring(arr, BOXED_SENTENCE, ""))


def _combined(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _first_message_content(prompt: pa.Array, n: int, where: str,
                           column: str = "prompt") -> np.ndarray:
    """``prompt[0]["content"]`` per row as an object array (None where absent), vectorised."""
    out = np.full(n, None, dtype=object)
    if _is_text(prompt.type):  # already a plain string prompt
        out[:] = prompt.to_numpy(zero_copy_only=False)
        return out
    if not _is_list(prompt.type):
        raise TasksetError(f"{where}: column {column!r} has type {prompt.type}, expected text "
                           "or a list of {role, content} messages")
    first = pc.list_slice(prompt, 0, 1)
    flat = pc.list_flatten(first)
    parents = pc.list_parent_indices(first).to_numpy()
    if pa.types.is_struct(flat.type):
        if flat.type.get_field_index("content") < 0:
            raise TasksetError(f"{where}: column {column!r} messages have no 'content' field "
                               f"(fields: {[f.name for f in flat.type]})")
        content = pc.struct_field(flat, "content")
    elif _is_text(flat.type):
        content = flat
    else:
        raise TasksetError(f"{where}: column {column!r} holds {flat.type}, expected messages")
    if not _is_text(content.type):
        content = pc.cast(content, pa.string())
    out[parents] = content.to_numpy(zero_copy_only=False)
    return out


def raw_prompt_text(table: pa.Table) -> pd.Series:
    """``prompt[0].content`` of every raw guru row, before cleanup (None where absent)."""
    return pd.Series(_first_message_content(_combined(table.column("prompt")), table.num_rows,
                                            "input"), name="prompt_text")


def _truth_text(value: Any) -> str | None:
    """One ground-truth value as text: integral floats as integers (``42.0`` -> ``"42"``),
    None for null, NaN and blank."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return str(int(value)) if float(value).is_integer() else repr(float(value))
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value)
    text = str(value)
    return text if text.strip() else None


def single_truth(value: Any, where: str, row: str, column: str) -> str | None:
    """A ground-truth cell as one truth string (None when empty).

    A list cell (guru's writer and some hub files store truths as lists) gives its one
    distinct non-empty element; an empty list is a missing truth. A list of several
    different truths raises :class:`TasksetError` naming the row and column: in the
    upstream reward functions several truths mean *any of these is right*, which a
    ``"#### <truth>"`` answer with its single-truth judge cannot express, and joining
    them would make a truth no answer matches.
    """
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        return _truth_text(value)
    items = list(dict.fromkeys(t for t in (_truth_text(v) for v in value) if t is not None))
    if len(items) > 1:
        shown = ", ".join(repr(t) for t in items[:3]) + (", ..." if len(items) > 3 else "")
        raise TasksetError(f"{where}: {row}, column {column!r}: {len(items)} different ground "
                           f"truths [{shown}]; a task here has one truth (the judge compares "
                           "against a single answer): keep one or drop the row")
    return items[0] if items else None


def _ground_truth(reward_model: pa.Array, where: str,
                  label: Callable[[int], str] = lambda r: f"row {r}") -> pa.Array:
    """``reward_model["ground_truth"]`` as plain ``string`` (nulls kept), vectorised.

    Text of any width (``large_string`` from recent pandas and the hub's writer) becomes
    ``string``; numbers print as :func:`_truth_text` does; a list-typed truth gives its one
    element (see :func:`single_truth`).
    """
    if not pa.types.is_struct(reward_model.type) or \
            reward_model.type.get_field_index("ground_truth") < 0:
        raise TasksetError(f"{where}: column 'reward_model' has type {reward_model.type}, "
                           "expected a struct with a 'ground_truth' field")
    truth = pc.struct_field(reward_model, "ground_truth")
    # A null struct hides its children; make that explicit.
    truth = pc.if_else(reward_model.is_null(), pa.scalar(None, truth.type), truth)
    if _is_list(truth.type):
        values = truth.to_pylist()
        return pa.array([single_truth(v, where, label(i), "reward_model.ground_truth")
                         for i, v in enumerate(values)], pa.string())
    if pa.types.is_floating(truth.type):
        # 42.0 -> "42": integral floats print as integers, the form answers take.
        return pa.array([_truth_text(v) for v in truth.to_numpy(zero_copy_only=False)],
                        pa.string())
    try:
        return pc.cast(truth, pa.string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise TasksetError(f"{where}: column 'reward_model.ground_truth' has type "
                           f"{truth.type}, which cannot be read as text") from exc


def _row_label(table: pa.Table, row: int) -> str:
    """``row 12`` plus the source's own index when ``extra_info.index`` exists."""
    label = f"row {row}"
    if "extra_info" in table.column_names:
        info = table.column("extra_info")[row].as_py()
        if isinstance(info, dict) and info.get("index") is not None:
            label += f" (extra_info.index={info['index']})"
    return label


def _pass_rate_matrix(table: pa.Table, columns: Sequence[str], where: str) -> np.ndarray:
    """Pass-rate columns as a float array of shape (rows, len(columns)); NaN where missing.

    Values outside [0, 1] are not data to drop but a broken file: they raise with the row.
    """
    out = np.empty((table.num_rows, len(columns)), dtype=np.float64)
    for j, name in enumerate(columns):
        if name not in table.column_names:
            raise TasksetError(f"{where}: pass-rate column {name!r} not found (columns: "
                               f"{', '.join(table.column_names)}); pass --pass-rate-columns to "
                               "name the ones present")
        out[:, j] = pass_rate_values(table.column(name), name, where,
                                     label=lambda row: _row_label(table, row))
    return out


def convert_guru(table: pa.Table, options: GuruOptions | None = None,
                 source: str = "input") -> tuple[dict[str, pd.DataFrame], ConversionReport]:
    """Convert raw guru math rows into taskset splits and a report of every row.

    ``table`` has guru's raw columns: ``prompt`` (list of {role, content}), ``reward_model``
    ({ground_truth, style}), the pass-rate columns, and optionally ``data_source`` and
    ``extra_info`` ({index}). Per row, as in the reference conversion,
    ``question = prompt[0].content`` without :data:`BOXED_SENTENCE`, stripped, and
    ``answer = "#### " + ground_truth``. Then, in order, each dropped row counted once
    under its first reason: empty prompt, empty question, missing ground truth; missing
    pass rates (dropped or imputed, ``options.missing_pass_rate``); exact-duplicate
    questions (later copies). Text columns may be ``string`` or ``large_string``; a
    list-typed ground truth gives its one element (several different ones raise
    :class:`TasksetError` naming the row, see :func:`single_truth`). Kept rows carry
    ``source_row`` (input row number),
    ``source_index`` (``extra_info.index``) and ``data_source`` when present.
    Vectorised with pyarrow/numpy: 54k rows convert in well under a second.
    """
    options = options or GuruOptions()
    options.check()
    where = str(source)
    n = table.num_rows
    for name in ("prompt", "reward_model"):
        if name not in table.column_names:
            raise TasksetError(f"{where}: missing column {name!r}; columns present: "
                               f"{', '.join(table.column_names)} (is this guru's raw schema?)")
    report = ConversionReport(source=where, rows_in=n, dropped=dict.fromkeys(DROP_REASONS, 0),
                              dropped_rows={r: [] for r in DROP_REASONS})
    rates = _pass_rate_matrix(table, options.pass_rate_columns, where)

    content = _first_message_content(_combined(table.column("prompt")), n, where)
    has_prompt = ~pd.isna(content)
    question = clean_question(pa.array(content, pa.string()))
    truth = pc.utf8_trim_whitespace(_ground_truth(_combined(table.column("reward_model")), where,
                                                  lambda r: _row_label(table, r)))

    reason = np.full(n, "", dtype=object)

    blank = pc.fill_null(pc.equal(question, ""), True).to_numpy(zero_copy_only=False)
    no_truth = pc.fill_null(pc.equal(truth, ""), True).to_numpy(zero_copy_only=False)
    report.drop(reason, ~has_prompt, DROP_EMPTY_PROMPT)
    report.drop(reason, blank, DROP_EMPTY_QUESTION)
    report.drop(reason, no_truth, DROP_MISSING_TRUTH)

    # Missing pass rates: drop or impute, counted either way.
    valid = reason == ""
    missing = np.isnan(rates)
    for j, name in enumerate(options.pass_rate_columns):
        report.missing_pass_rates[name] = int((missing[:, j] & valid).sum())
    if options.missing_pass_rate == "drop":
        report.drop(reason, missing.any(axis=1), DROP_MISSING_PASS_RATE)
    else:
        for j, name in enumerate(options.pass_rate_columns):
            rows = missing[:, j] & valid
            if not rows.any():
                continue
            present = rates[valid & ~missing[:, j], j]
            if options.missing_pass_rate == "constant":
                value = float(options.fill_value)
            elif present.size == 0:
                raise TasksetError(f"{where}: column {name!r} has no values to take the "
                                   f"{options.missing_pass_rate} of; use --fill-value")
            else:
                value = fill_value(present, options.missing_pass_rate)
            rates[rows, j] = value
            report.imputed[name] = {"rule": options.missing_pass_rate, "value": value,
                                    "rows": int(rows.sum())}

    frame = pd.DataFrame({
        QUESTION: question.to_numpy(zero_copy_only=False),
        ANSWER: pc.binary_join_element_wise(ANSWER_PREFIX, truth, "").to_numpy(
            zero_copy_only=False),
    })
    for j, name in enumerate(options.pass_rate_columns):
        frame[name] = rates[:, j]
    if "data_source" in table.column_names:
        frame["data_source"] = table.column("data_source").to_numpy(zero_copy_only=False)
    if "extra_info" in table.column_names:
        info = _combined(table.column("extra_info"))
        if pa.types.is_struct(info.type) and info.type.get_field_index("index") >= 0:
            idx = pc.struct_field(info, "index")
            frame["source_index"] = pd.array(
                pc.if_else(info.is_null(), pa.scalar(None, idx.type), idx)
                .to_numpy(zero_copy_only=False))
    for name in options.keep_columns:
        if name not in table.column_names:
            raise TasksetError(f"{where}: --keep-columns names {name!r}, which is not a column")
        frame[name] = table.column(name).to_pandas()
    frame.insert(2, "source_row", np.arange(n, dtype=np.int64))

    # Exact duplicates among the rows still kept (first copy wins).
    alive = frame[reason == ""]
    dup = alive.duplicated(QUESTION, keep="first")
    groups = alive[alive[QUESTION].isin(alive.loc[dup, QUESTION])]
    report.duplicates = {
        "rows": int(dup.sum()),
        "groups": int(groups[QUESTION].nunique()),
        "conflicting_groups": int((groups.groupby(QUESTION)[ANSWER].nunique() > 1).sum()),
        "action": "dropped" if options.drop_duplicates else "kept",
    }
    if options.drop_duplicates:
        report.drop(reason, frame.index.isin(alive.index[dup.to_numpy()]), DROP_DUPLICATE)

    kept = frame[reason == ""].reset_index(drop=True)
    splits = split_train_validation(kept, options.val_fraction, options.seed)
    report.rows_out = len(kept)
    report.splits = {s: len(f) for s, f in splits.items()}
    report.check()
    return splits, report


def split_train_validation(frame: pd.DataFrame, val_fraction: float,
                           seed: int) -> dict[str, pd.DataFrame]:
    """Deterministic split: ``round(val_fraction * n)`` rows, picked by a seeded permutation.

    Both parts keep the input order, so the same input, fraction and seed always give the
    same files.
    """
    n_val = int(round(val_fraction * len(frame)))
    if n_val == 0:
        return {"train": frame}
    if n_val >= len(frame):
        raise TasksetError(f"val_fraction={val_fraction} leaves no training rows out of "
                           f"{len(frame)}")
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    is_val = np.zeros(len(frame), dtype=bool)
    is_val[rng.permutation(len(frame))[:n_val]] = True
    return {"train": frame[~is_val].reset_index(drop=True),
            "validation": frame[is_val].reset_index(drop=True)}


MAX_LISTED_ROWS = 1000


def _provenance(kind: str, source: str, input_path: Path | None, options: Any,
                report: ConversionReport | None, **extra: Any) -> dict[str, Any]:
    prov: dict[str, Any] = {"kind": kind, "source": source}
    if input_path is not None:
        prov["input_file"] = str(input_path)
        prov["input_sha256"] = sha256_file(input_path)
    prov["options"] = asdict(options) if hasattr(options, "__dataclass_fields__") else options
    if report is not None:
        counts = {k: v for k, v in report.to_dict().items() if k != "source"}
        # Input row numbers of dropped rows, so any drop can be traced back (capped).
        counts["dropped_rows"] = {r: rows[:MAX_LISTED_ROWS]
                                  for r, rows in report.dropped_rows.items()}
        if any(len(rows) > MAX_LISTED_ROWS for rows in report.dropped_rows.values()):
            counts["dropped_rows_note"] = f"at most {MAX_LISTED_ROWS} rows listed per reason"
        prov["counts"] = counts
    prov.update(extra)
    prov["versions"] = _versions()
    return prov


GURU_SPLITS = ("train", "validation")


def prepare_guru(input_path: str | Path | None = None, out_dir: str | Path = paths.GURU_DIR,
                 options: GuruOptions | None = None, hub_timeout: float = 10.0,
                 progress: bool = False, force: bool = True) -> ConversionReport:
    """Read guru's math file (``input_path``, or the hub when None), convert and save it.

    Writes ``<out_dir>/train.parquet`` (+ ``validation.parquet`` when asked) and
    ``provenance.json`` (source, input sha256, options, counts, versions). A ``test`` split
    already in ``out_dir`` is kept; an earlier ``validation`` split is replaced (or removed
    when none is asked for), since its rows came from the same input. ``force=False``
    refuses an ``out_dir`` that holds a taskset (:class:`OutputError`), before any work.
    The report's notes say what was replaced.
    """
    from tqdm import tqdm

    options = options or GuruOptions()
    options.check()
    if input_path is not None and not Path(input_path).is_file():
        raise TasksetError(f"{input_path}: no such input file")
    check_taskset_output(out_dir, GURU_SPLITS, force)
    # leave=False: the bar erases itself, so an error below stays a single line.
    with tqdm(total=4, desc="prepare-data", disable=not progress, unit="step",
              leave=False) as bar:
        if input_path is None:
            bar.set_postfix_str("download")
            input_path = download_from_hub(GURU_REPO, GURU_FILE, timeout=hub_timeout)
            source = f"hf://datasets/{GURU_REPO}/{GURU_FILE}"
        else:
            source = str(input_path)
        input_path = Path(input_path)
        bar.update()
        bar.set_postfix_str("read")
        wanted = ["prompt", "reward_model", "data_source", "extra_info",
                  *options.pass_rate_columns, *options.keep_columns]
        table = read_raw_table(input_path, columns=wanted)
        bar.update()
        bar.set_postfix_str("convert")
        splits, report = convert_guru(table, options, source=str(input_path))
        bar.update()
        bar.set_postfix_str("write")
        prov = _provenance("guru-math", source, input_path, options, report)
        note = replacement_note(out_dir, GURU_SPLITS)
        save_taskset(splits, out_dir, prov, feature_keys=options.pass_rate_columns,
                     force=force, replaces=GURU_SPLITS)
        bar.update()
    if note:
        report.notes.append(note)
    return report


def prepare_data_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", type=Path, metavar="PATH",
                        help="local copy of guru's train/math__combined_54.4k.parquet (or a "
                             "jsonl in the same raw schema); default: download from the hub")
    parser.add_argument("--out", type=Path, default=paths.GURU_DIR, metavar="DIR",
                        help="taskset directory to write (default: %(default)s)")
    parser.add_argument("--pass-rate-columns", nargs="*", default=list(GURU_PASS_RATE_KEYS),
                        metavar="COL", help="pass-rate columns to keep, weak model first "
                                            "(default: %(default)s)")
    parser.add_argument("--missing-pass-rate", choices=MISSING_PASS_RATE_POLICIES, default="drop",
                        help="rows with a NaN/missing pass rate: drop them, or impute the "
                             "column's mean/median over the valid rows, or a constant "
                             "(--fill-value) (default: %(default)s)")
    parser.add_argument("--fill-value", type=float, metavar="P",
                        help="the value for --missing-pass-rate constant, in [0, 1]")
    parser.add_argument("--keep-duplicates", action="store_true",
                        help="keep exact-duplicate questions (they are reported either way)")
    parser.add_argument("--val-fraction", type=float, default=0.0, metavar="F",
                        help="share of rows for a validation split (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the split (default: 0)")
    parser.add_argument("--keep-columns", nargs="*", default=[], metavar="COL",
                        help="further raw columns to copy through")
    parser.add_argument("--hub-timeout", type=float, default=10.0, metavar="S",
                        help="seconds to wait for the hub (default: %(default)s)")
    parser.add_argument("--force", action="store_true",
                        help="replace the train/validation splits of an existing taskset in "
                             "--out (a test split there is kept)")


def _fail(exc: Exception | str) -> int:
    print("error: " + " ".join(str(exc).splitlines()), file=sys.stderr)
    return 2


def _arrow_failure(input_path: Any, exc: Exception) -> str:
    """One line for an Arrow error the checks above did not foresee (never a traceback)."""
    where = input_path if input_path is not None else "the downloaded input"
    return f"{where}: cannot convert ({type(exc).__name__}: {one_line(exc)})"


def prepare_data_command(args: argparse.Namespace) -> int:
    options = GuruOptions(pass_rate_columns=tuple(args.pass_rate_columns),
                          missing_pass_rate=args.missing_pass_rate, fill_value=args.fill_value,
                          drop_duplicates=not args.keep_duplicates,
                          val_fraction=args.val_fraction, seed=args.seed,
                          keep_columns=tuple(args.keep_columns))
    try:
        report = prepare_guru(args.input, args.out, options, hub_timeout=args.hub_timeout,
                              progress=True, force=args.force)
    except (TasksetError, HubUnavailable, OutputError) as exc:
        return _fail(exc)
    except pa.ArrowException as exc:
        return _fail(_arrow_failure(args.input, exc))
    print(format_report(report))
    print(f"wrote {args.out}")
    return 0


# --------------------------------------------------------------------------------------
# AIME-24 eval set
# --------------------------------------------------------------------------------------

QUESTION_COLUMN_CANDIDATES = ("question", "problem", "prompt", "input", "query")
# ``reward_model`` last: guru-schema files keep the truth in ``reward_model.ground_truth``.
ANSWER_COLUMN_CANDIDATES = ("answer", "final_answer", "expected_answer", "ground_truth",
                            "target", "label", "reward_model")
ID_COLUMN_CANDIDATES = ("id", "problem_id", "idx", "uid")


def _pick_column(columns: Sequence[str], given: str | None, candidates: Sequence[str],
                 role: str, where: str) -> str | None:
    """The column named ``given``, else the first candidate present (case-insensitive)."""
    if given is not None:
        if given not in columns:
            raise TasksetError(f"{where}: {role} column {given!r} not found; columns: "
                               f"{', '.join(columns)}")
        return given
    lower = {c.lower(): c for c in columns}
    for cand in candidates:
        if cand in lower:
            return lower[cand]
    return None


def normalize_answer(value: Any) -> str | None:
    """An answer cell as the truth string of ``"#### <truth>"``, or None when empty.

    Numbers print as integers when integral; ``\\boxed{x}``, surrounding ``$`` and a
    leading ``####`` are unwrapped; all-digit answers lose leading zeros (AIME answers
    are integers 0-999, sometimes written ``033``).
    """
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return str(int(value)) if float(value).is_integer() else repr(float(value))
    text = str(value).strip()
    boxed = last_box(text)
    if boxed is not None:
        text = boxed.strip()
    if text.startswith("####"):
        text = text[4:].strip()
    text = text.strip("$").strip()
    if text.isdigit():
        text = str(int(text))
    return text or None


@dataclass
class AimeOptions:
    """Column mapping for :func:`convert_aime` (None: detect from common names)."""

    question_column: str | None = None
    answer_column: str | None = None
    id_column: str | None = None
    drop_duplicates: bool = True


def convert_aime(table: pa.Table, options: AimeOptions | None = None,
                 source: str = "input") -> tuple[pd.DataFrame, ConversionReport]:
    """Map a problem/answer table onto the taskset schema (the eval split).

    Columns are found by ``options`` or, when unset, by common names (``problem``,
    ``question``, ... and ``answer``, ``final_answer``, ...; case-insensitive). Answers
    go through :func:`normalize_answer`; rows with an empty question or answer and later
    duplicate questions are dropped and counted. Kept rows carry ``source_row`` and, when an
    id column exists, ``source_id``.
    """
    options = options or AimeOptions()
    where = str(source)
    cols = table.column_names
    qcol = _pick_column(cols, options.question_column, QUESTION_COLUMN_CANDIDATES,
                        "question", where)
    acol = _pick_column(cols, options.answer_column, ANSWER_COLUMN_CANDIDATES, "answer", where)
    if qcol is None or acol is None:
        role = "question" if qcol is None else "answer"
        raise TasksetError(f"{where}: no {role} column found among {', '.join(cols)}; pass "
                           f"--{role}-column NAME")
    icol = _pick_column(cols, options.id_column, ID_COLUMN_CANDIDATES, "id", where)
    n = table.num_rows
    reasons = (DROP_EMPTY_QUESTION, DROP_MISSING_TRUTH, DROP_DUPLICATE)
    report = ConversionReport(source=where, rows_in=n, dropped=dict.fromkeys(reasons, 0),
                              dropped_rows={r: [] for r in reasons})
    qarr = _combined(table.column(qcol))
    if _is_list(qarr.type):  # chat messages (guru's schema): the first message's content
        qarr = pa.array(_first_message_content(qarr, n, where, qcol), pa.string())
    elif not _is_text(qarr.type):
        try:
            qarr = pc.cast(qarr, pa.string())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise TasksetError(f"{where}: question column {qcol!r} has type {qarr.type}, "
                               "expected text or a list of {role, content} messages") from exc
    question = clean_question(pc.cast(qarr, pa.string())).to_numpy(zero_copy_only=False)
    acolumn, aname = _combined(table.column(acol)), acol
    if pa.types.is_struct(acolumn.type):  # guru's reward_model: {ground_truth, style}
        if acolumn.type.get_field_index("ground_truth") < 0:
            raise TasksetError(f"{where}: answer column {acol!r} is a struct without a "
                               f"'ground_truth' field (fields: "
                               f"{', '.join(f.name for f in acolumn.type)}); pass --answer-column")
        truth = pc.struct_field(acolumn, "ground_truth")
        acolumn = pc.if_else(acolumn.is_null(), pa.scalar(None, truth.type), truth)
        aname = f"{acol}.ground_truth"
    truths = [normalize_answer(single_truth(v, where, f"row {i}", aname))  # 30-ish rows
              for i, v in enumerate(acolumn.to_pylist())]
    frame = pd.DataFrame({
        QUESTION: question,
        ANSWER: [None if t is None else ANSWER_PREFIX + t for t in truths],
        "source_row": np.arange(n, dtype=np.int64),
    })
    if icol is not None:
        frame["source_id"] = [None if v is None else str(v) for v in table.column(icol).to_pylist()]
    reason = np.full(n, "", dtype=object)

    empty = frame[QUESTION].isna().to_numpy() | (frame[QUESTION].fillna("") == "").to_numpy()
    report.drop(reason, empty, DROP_EMPTY_QUESTION)
    report.drop(reason, frame[ANSWER].isna().to_numpy(), DROP_MISSING_TRUTH)
    alive = frame[reason == ""]
    dup = alive.duplicated(QUESTION, keep="first")
    report.duplicates = {"rows": int(dup.sum()),
                         "groups": int(alive.loc[dup, QUESTION].nunique()),
                         "conflicting_groups": int(
                             (alive[alive[QUESTION].isin(alive.loc[dup, QUESTION])]
                              .groupby(QUESTION)[ANSWER].nunique() > 1).sum()),
                         "action": "dropped" if options.drop_duplicates else "kept"}
    if options.drop_duplicates:
        report.drop(reason, frame.index.isin(alive.index[dup.to_numpy()]), DROP_DUPLICATE)
    kept = frame[reason == ""].reset_index(drop=True)
    report.rows_out = len(kept)
    report.splits = {"test": len(kept)}
    report.notes.append(f"columns used: question={qcol!r}, answer={aname!r}, id={icol!r}")
    report.check()
    return kept, report


AIME_SPLITS = ("test",)


def prepare_aime(input_path: str | Path | None = None, out_dir: str | Path = paths.AIME24_DIR,
                 options: AimeOptions | None = None, hub_repo: str = AIME_REPO,
                 hub_timeout: float = 10.0, force: bool = True) -> ConversionReport:
    """Build the AIME-24 eval taskset (``<out_dir>/test.parquet``) from a file or the hub.

    Only the ``test`` split is replaced: a ``train``/``validation`` split already in
    ``out_dir`` is kept (and named in the report's notes). ``force=False`` refuses an
    ``out_dir`` that holds a taskset (:class:`OutputError`), before any work.
    """
    options = options or AimeOptions()
    check_taskset_output(out_dir, AIME_SPLITS, force)
    if input_path is None:
        snapshot = download_from_hub(hub_repo, timeout=hub_timeout,
                                     what_instead="--input PATH (jsonl/parquet/csv with problem "
                                                  "and answer columns)")
        files = sorted(p for p in snapshot.rglob("*") if p.suffix in (".parquet", ".jsonl"))
        if not files:
            raise TasksetError(f"{snapshot}: the hub snapshot of {hub_repo} holds no data files")
        table = pa.concat_tables([read_raw_table(f) for f in files], promote_options="default")
        source, input_file = f"hf://datasets/{hub_repo}", files[0] if len(files) == 1 else None
    else:
        input_file = Path(input_path)
        table = read_raw_table(input_file)
        source = str(input_file)
    frame, report = convert_aime(table, options, source=source)
    if report.rows_out != 30:
        report.notes.append(f"AIME 2024 has 30 problems; this set has {report.rows_out}")
    note = replacement_note(out_dir, AIME_SPLITS)
    save_taskset({"test": frame}, out_dir,
                 _provenance("aime", source, input_file, options, report),
                 force=force, replaces=AIME_SPLITS)
    if note:
        report.notes.append(note)
    return report


def reference_tasksets(work: str | Path) -> tuple[Path, Path, str]:
    """``(train folder, eval folder, what they are)`` for the reference configs.

    The prepared guru math and AIME-24 tasksets under ``data/`` when both exist (``prepare-data``
    and ``prepare-aime`` wrote them); otherwise the small raw samples in ``data/samples/``
    converted into ``work`` the same way, a stand-in that lets the configs load and check.
    """
    if (paths.GURU_DIR / "train.parquet").is_file() and \
            (paths.AIME24_DIR / "test.parquet").is_file():
        return paths.GURU_DIR, paths.AIME24_DIR, "the prepared guru math and AIME-24 tasksets"
    train, evals = Path(work) / "guru_math", Path(work) / "aime24"
    prepare_guru(paths.SAMPLES_DIR / "guru_raw.jsonl", out_dir=train)
    prepare_aime(paths.SAMPLES_DIR / "aime_style.jsonl", out_dir=evals)
    return train, evals, "the raw samples of data/samples converted (prepare-data not run here)"


def prepare_aime_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", type=Path, metavar="PATH",
                        help="local jsonl/parquet/csv with problem and answer columns; "
                             "default: download from the hub")
    parser.add_argument("--out", type=Path, default=paths.AIME24_DIR, metavar="DIR",
                        help="taskset directory; the split is test (default: %(default)s)")
    parser.add_argument("--question-column", metavar="NAME",
                        help=f"problem text column (default: first of "
                             f"{', '.join(QUESTION_COLUMN_CANDIDATES)}; any case)")
    parser.add_argument("--answer-column", metavar="NAME",
                        help=f"answer column (default: first of "
                             f"{', '.join(ANSWER_COLUMN_CANDIDATES)}; any case)")
    parser.add_argument("--id-column", metavar="NAME", help="problem id column (optional)")
    parser.add_argument("--keep-duplicates", action="store_true",
                        help="keep exact-duplicate problems (reported either way)")
    parser.add_argument("--hub-repo", default=AIME_REPO,
                        help="hub dataset repo to download (default: %(default)s)")
    parser.add_argument("--hub-timeout", type=float, default=10.0, metavar="S",
                        help="seconds to wait for the hub (default: %(default)s)")
    parser.add_argument("--force", action="store_true",
                        help="replace the test split of an existing taskset in --out (other "
                             "splits there are kept)")


def prepare_aime_command(args: argparse.Namespace) -> int:
    options = AimeOptions(question_column=args.question_column,
                          answer_column=args.answer_column, id_column=args.id_column,
                          drop_duplicates=not args.keep_duplicates)
    try:
        report = prepare_aime(args.input, args.out, options, hub_repo=args.hub_repo,
                              hub_timeout=args.hub_timeout, force=args.force)
    except (TasksetError, HubUnavailable, OutputError) as exc:
        return _fail(exc)
    except pa.ArrowException as exc:
        return _fail(_arrow_failure(args.input, exc))
    print(format_report(report))
    print(f"wrote {args.out / 'test.parquet'}")
    return 0


# --------------------------------------------------------------------------------------
# Bundled arithmetic taskset
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ArithmeticLevel:
    """One difficulty level of the generator.

    ``n_terms`` operands joined by operators drawn from ``ops``; ``+``/``-`` operands lie in
    [``min_operand``, ``max_operand``], ``*`` operands in [2, min(12, ``max_operand``)].
    ``word_share`` of the tasks are phrased as a short story read left to right, the rest
    as a bare expression with the usual precedence.
    """

    difficulty: int
    n_terms: int
    min_operand: int
    max_operand: int
    ops: str
    word_share: float


# From "What is 3 + 4?" (a 135M model sometimes gets it) to five 3-digit terms with
# products (it never does): single-digit sums, single-digit differences, sums and
# differences up to 20, two-digit sums, three single-digit terms, then products and longer
# chains. Levels 0-2 are deliberately common in train.
ARITHMETIC_LEVELS = (
    ArithmeticLevel(0, 2, 1, 9, "+", 0.3),
    ArithmeticLevel(1, 2, 1, 9, "-", 0.5),
    ArithmeticLevel(2, 2, 10, 20, "+-", 0.5),
    ArithmeticLevel(3, 2, 10, 99, "+", 0.3),
    ArithmeticLevel(4, 3, 1, 9, "+-", 0.5),
    ArithmeticLevel(5, 3, 1, 50, "+-*", 0.5),
    ArithmeticLevel(6, 4, 10, 99, "+-*", 0.5),
    ArithmeticLevel(7, 5, 100, 999, "+-*", 0.5),
)
TRAIN_LEVEL_SHARES = (0.18, 0.16, 0.14, 0.14, 0.12, 0.10, 0.08, 0.08)
# The held-out eval set is skewed harder, as AIME is for a large model.
TEST_LEVEL_SHARES = (0.04, 0.06, 0.08, 0.12, 0.15, 0.17, 0.18, 0.20)

_NAMES = ("Mia", "Leo", "Ava", "Noah", "Zoe", "Omar", "Lena", "Ravi", "Ines", "Tom", "Yuki",
          "Sara", "Ben", "Nia", "Hugo", "Maya")
_ITEMS = ("apples", "marbles", "stickers", "pencils", "coins", "books", "cards", "shells",
          "cookies", "stamps", "beads", "buttons", "eggs", "paper cranes", "seeds", "toy cars")
_BARE = ("What is {e}?", "Compute {e}.", "Calculate {e}.", "Evaluate {e}.", "{e} = ?",
         "Work out {e}.")
_BARE_SUM = ("What is the sum of {a} and {b}?", "Add {a} and {b}.")
_BARE_DIFF = ("What is {a} minus {b}?", "Subtract {b} from {a}.")
_START = ("{n} has {a} {i}.", "There are {a} {i} in {n}'s box.")
_STEP = {
    "+": ("{n} gets {b} more.", "{n} buys {b} more {i}.", "A friend gives {n} {b} more {i}.",
          "{n} finds {b} more {i}."),
    "-": ("{n} gives away {b}.", "{n} loses {b} {i}.", "{n} uses {b} of them."),
    "*": ("Then the number of {i} becomes {b} times as large.",
          "{n} ends up with {b} times as many {i} as before."),
}
_ASK = ("How many {i} does {n} have now?", "How many {i} does {n} have in the end?")
_SYMBOL = {"+": "+", "-": "-", "*": "×"}


def _pick(rng: np.random.Generator, options: Sequence[str]) -> str:
    return options[int(rng.integers(len(options)))]


def _operand(rng: np.random.Generator, level: ArithmeticLevel, op: str,
             cap: int | None = None) -> int:
    if op == "*":
        return int(rng.integers(2, min(12, level.max_operand) + 1))
    hi = level.max_operand if cap is None else min(level.max_operand, cap)
    return int(rng.integers(level.min_operand, hi + 1))


def _evaluate(terms: Sequence[int], ops: Sequence[str]) -> int:
    """Value of ``terms[0] ops[0] terms[1] ...`` with ``*`` before ``+``/``-``."""
    sums, signs = [terms[0]], []
    for op, t in zip(ops, terms[1:], strict=True):
        if op == "*":
            sums[-1] *= t
        else:
            sums.append(t)
            signs.append(op)
    total = sums[0]
    for op, t in zip(signs, sums[1:], strict=True):
        total = total + t if op == "+" else total - t
    return total


def _bare_task(rng: np.random.Generator, level: ArithmeticLevel) -> tuple[str, str, int]:
    for _ in range(1000):
        ops = [_pick(rng, level.ops) for _ in range(level.n_terms - 1)]
        terms = [_operand(rng, level, "+")] + [_operand(rng, level, op) for op in ops]
        value = _evaluate(terms, ops)
        if value >= 0:
            break
    else:  # pragma: no cover - the levels above never get here
        raise RuntimeError(f"level {level.difficulty}: no non-negative expression found")
    expr = " ".join([str(terms[0])] + [f"{op} {t}" for op, t in zip(ops, terms[1:], strict=True)])
    shown = " ".join([str(terms[0])] + [f"{_SYMBOL[op]} {t}"
                                        for op, t in zip(ops, terms[1:], strict=True)])
    templates = _BARE + {"+": _BARE_SUM, "-": _BARE_DIFF}.get("".join(ops), ())
    text = _pick(rng, templates).format(e=shown, a=terms[0], b=terms[1] if len(terms) > 1 else "")
    return text, expr, value


def _word_task(rng: np.random.Generator, level: ArithmeticLevel) -> tuple[str, str, int]:
    name, item = _pick(rng, _NAMES), _pick(rng, _ITEMS)
    total = _operand(rng, level, "+")
    parts = [_pick(rng, _START).format(n=name, a=total, i=item)]
    expr = str(total)
    for _ in range(level.n_terms - 1):
        op = _pick(rng, level.ops)
        if op == "-" and total < max(level.min_operand, 1):
            op = "+"  # a story cannot take away more than there is
        b = _operand(rng, level, op, cap=total if op == "-" else None)
        total = total + b if op == "+" else total - b if op == "-" else total * b
        parts.append(_pick(rng, _STEP[op]).format(n=name, b=b, i=item))
        expr = f"({expr} {op} {b})"
    parts.append(_pick(rng, _ASK).format(n=name, i=item))
    return " ".join(parts), expr, total


def level_table(levels: Sequence[ArithmeticLevel] = ARITHMETIC_LEVELS) -> pd.DataFrame:
    """The generator's levels with their train/test shares, one row per level."""
    frame = pd.DataFrame([asdict(lv) for lv in levels]).set_index("difficulty")
    frame["train_share"] = TRAIN_LEVEL_SHARES[: len(frame)]
    frame["test_share"] = TEST_LEVEL_SHARES[: len(frame)]
    return frame


def level_counts(n: int, shares: Sequence[float]) -> list[int]:
    """Split ``n`` tasks over levels by ``shares`` (largest remainder; sums to ``n``)."""
    raw = np.asarray(shares, dtype=float) / float(np.sum(shares)) * n
    counts = np.floor(raw).astype(int)
    order = np.argsort(-(raw - counts), kind="stable")
    counts[order[: n - counts.sum()]] += 1
    return counts.tolist()


def task_id(question: str) -> str:
    """A stable id derived from the question text (same question, same id, any seed)."""
    return "arith-" + hashlib.sha1(question.encode()).hexdigest()[:10]


def generate_arithmetic(n_train: int = 2000, n_test: int = 200, seed: int = ARITHMETIC_SEED,
                        levels: Sequence[ArithmeticLevel] = ARITHMETIC_LEVELS,
                        train_shares: Sequence[float] = TRAIN_LEVEL_SHARES,
                        test_shares: Sequence[float] = TEST_LEVEL_SHARES,
                        progress: bool = False) -> dict[str, pd.DataFrame]:
    """Generate the arithmetic taskset: ``{"train": frame, "test": frame}``, deterministic.

    Each split draws its level counts from its shares (test skews harder), then tasks one by
    one from a ``numpy`` Generator spawned from ``SeedSequence(seed)``; a question already
    used in either split is redrawn, so all questions are distinct and test is disjoint
    from train. Rows come shuffled. Columns: ``task_id, question, answer, difficulty,
    n_terms, min_operand, max_operand, ops, word_problem, expression`` (``expression`` is a
    Python expression whose value is the answer; word problems nest left to right).
    """
    from tqdm import tqdm

    if len(train_shares) != len(levels) or len(test_shares) != len(levels):
        raise ValueError("one share per level is needed")
    streams = np.random.SeedSequence(seed).spawn(2)
    seen: set[str] = set()
    out = {}
    bar = tqdm(total=n_train + n_test, desc="generate-arithmetic", disable=not progress)
    for (split, n, shares), ss in zip((("train", n_train, train_shares),
                                       ("test", n_test, test_shares)), streams, strict=True):
        rng = np.random.default_rng(ss)
        rows = []
        for level, count in zip(levels, level_counts(n, shares), strict=True):
            for _ in range(count):
                for _attempt in range(10_000):
                    word = bool(rng.random() < level.word_share)
                    text, expr, value = (_word_task if word else _bare_task)(rng, level)
                    if text not in seen:
                        break
                else:
                    raise RuntimeError(f"level {level.difficulty}: ran out of distinct tasks; "
                                       "lower its share")
                seen.add(text)
                rows.append({"task_id": task_id(text), QUESTION: text,
                             ANSWER: f"{ANSWER_PREFIX}{value}", "difficulty": level.difficulty,
                             "n_terms": level.n_terms, "min_operand": level.min_operand,
                             "max_operand": level.max_operand, "ops": level.ops,
                             "word_problem": word, "expression": expr})
                bar.update()
        frame = pd.DataFrame(rows)
        frame = frame.iloc[rng.permutation(len(frame))].reset_index(drop=True)
        out[split] = frame.astype({"difficulty": "int64", "n_terms": "int64",
                                   "min_operand": "int64", "max_operand": "int64",
                                   "word_problem": "bool"})
    bar.close()
    return out


GENERATOR_COLUMNS = ("task_id", QUESTION, ANSWER, "difficulty", "n_terms", "min_operand",
                     "max_operand", "ops", "word_problem", "expression")


def write_arithmetic(out_dir: str | Path = paths.ARITHMETIC_DIR, n_train: int = 2000,
                     n_test: int = 200, seed: int = ARITHMETIC_SEED, force: bool = False,
                     progress: bool = False) -> dict[str, pd.DataFrame]:
    """Generate and save the arithmetic taskset (``train.parquet``, ``test.parquet``).

    Refuses to overwrite a taskset that already carries measured columns (anything beyond
    the generator's) unless ``force``: those measurements took hours of model time.
    """
    out_dir = Path(out_dir)
    if not force:
        for split in ("train", "test"):
            file = out_dir / f"{split}.parquet"
            if file.is_file():
                try:
                    names = pq.read_schema(file).names
                except (pa.ArrowException, OSError) as exc:
                    raise OutputError(f"{file}: cannot be read ({one_line(exc)}), so it may hold "
                                      "measured columns; pass --force to replace it") from exc
                extra = [c for c in names if c not in GENERATOR_COLUMNS]
                if extra:
                    raise TasksetError(f"{file}: holds measured column(s) {', '.join(extra)} "
                                       "that regenerating would lose; pass --force or "
                                       "choose another --out")
    splits = generate_arithmetic(n_train, n_test, seed, progress=progress)
    counts = {s: {str(k): int(v) for k, v in f["difficulty"].value_counts().sort_index().items()}
              for s, f in splits.items()}
    prov = {
        "kind": "arithmetic",
        "source": "generated by mathagent.tasks.generate_arithmetic",
        "command": f"python -m mathagent generate-arithmetic --n-train {n_train} "
                   f"--n-test {n_test} --seed {seed}",
        "options": {"n_train": n_train, "n_test": n_test, "seed": seed},
        "levels": [asdict(lv) for lv in ARITHMETIC_LEVELS],
        "level_shares": {"train": list(TRAIN_LEVEL_SHARES), "test": list(TEST_LEVEL_SHARES)},
        "counts": {"rows": {s: len(f) for s, f in splits.items()}, "by_difficulty": counts},
        "feature_columns": {"weak": WEAK_KEY, "strong": STRONG_KEY,
                            "status": "not measured yet (python -m mathagent measure-pass-rates)"},
        "versions": {"mathagent": __version__},
    }
    save_taskset(splits, out_dir, prov, replaces=("train", "test"))
    return splits


def generate_arithmetic_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=paths.ARITHMETIC_DIR, metavar="DIR",
                        help="taskset directory (default: %(default)s)")
    parser.add_argument("--n-train", type=int, default=2000, help="train tasks (default: 2000)")
    parser.add_argument("--n-test", type=int, default=200,
                        help="held-out eval tasks, skewed harder (default: 200)")
    parser.add_argument("--seed", type=int, default=ARITHMETIC_SEED,
                        help=f"generator seed (default: {ARITHMETIC_SEED}, the bundled data)")
    parser.add_argument("--force", action="store_true",
                        help="overwrite a taskset that already has measured columns")


def generate_arithmetic_command(args: argparse.Namespace) -> int:
    try:
        splits = write_arithmetic(args.out, args.n_train, args.n_test, args.seed,
                                  force=args.force, progress=True)
    except (TasksetError, OutputError) as exc:
        return _fail(exc)
    for split, frame in splits.items():
        levels = frame["difficulty"].value_counts().sort_index()
        print(f"{split}: {len(frame)} tasks; by difficulty "
              + ", ".join(f"{k}: {v}" for k, v in levels.items()))
    print(f"wrote {args.out}")
    return 0


# --------------------------------------------------------------------------------------
# Difficulty landscape (data side; figures live in mathagent.plots)
# --------------------------------------------------------------------------------------

def informative_probability(p: np.ndarray | float, n: int) -> np.ndarray:
    """Chance that ``n`` rollouts of a task with pass rate ``p`` do not all agree.

    GRPO normalises rewards within a group of ``n`` rollouts; when all ``n`` are right
    (prob ``p**n``) or all wrong (``(1-p)**n``) every advantage is zero and the task
    teaches nothing. Shape follows ``p``.
    """
    p = np.asarray(p, dtype=float)
    return 1.0 - p**n - (1.0 - p) ** n


def pass_rate_summary(frame: pd.DataFrame, columns: Sequence[str] | None = None,
                      group_size: int = 8) -> pd.DataFrame:
    """One row per pass-rate column: mean, share at exactly 0 and 1, and GRPO signal.

    ``informative`` is the mean of :func:`informative_probability` over tasks: the
    expected share of groups of ``group_size`` rollouts with a non-zero advantage.
    """
    columns = list(columns) if columns is not None else pass_rate_columns(frame.columns)
    rows = []
    for name in columns:
        p = frame[name].to_numpy(dtype=float)
        rows.append({"column": name, "tasks": len(p), "mean": float(np.mean(p)),
                     "share_0": float(np.mean(p == 0.0)), "share_1": float(np.mean(p == 1.0)),
                     "share_between": float(np.mean((p > 0.0) & (p < 1.0))),
                     f"informative_n{group_size}": float(
                         np.mean(informative_probability(p, group_size)))})
    return pd.DataFrame(rows).set_index("column")


def difficulty_correlations(frame: pd.DataFrame, features: Sequence[str],
                            params: Sequence[str] = ("difficulty", "n_terms", "max_operand",
                                                     "word_problem")) -> pd.DataFrame:
    """Spearman correlation of each pass-rate column (columns) with each generator parameter
    (rows); how well the generator's knobs predict measured difficulty."""
    present = [p for p in params if p in frame.columns]
    data = frame[list(features) + present].astype(float)
    return data.corr(method="spearman").loc[present, list(features)]


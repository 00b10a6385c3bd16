"""Reading input files (parquet, jsonl/json, csv) as Arrow tables, and their checksums.

Every failure (a missing, empty, truncated, corrupt or malformed file) is one
:class:`~mathagent.tasks.schema.TasksetError` line naming the file, and the line where the
format has one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from mathagent.outputs import one_line, parse_jsonl
from mathagent.tasks.schema import TasksetError


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


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file (provenance: which input exactly)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


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
            rows = parse_jsonl(text, path, TasksetError)
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

"""The taskset schema: column names, the error type, and the validator every loader runs.

A taskset's rows have a non-empty ``question`` and an ``answer`` of the form
``"#### <truth>"``; columns named ``*_pass_rate`` hold pass rates in [0, 1]. This module
checks a ``datasets.Dataset``, ``pandas.DataFrame`` or ``pyarrow.Table`` against that, with
errors that name the file, the row and the column, and reads pass-rate columns for the
converters and the selectors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

QUESTION = "question"
ANSWER = "answer"
ANSWER_PREFIX = "#### "
PASS_RATE_SUFFIX = "pass_rate"
SPLITS = ("train", "validation", "test")


class TasksetError(ValueError):
    """Bad taskset input; the message names the file, row and column at fault."""


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

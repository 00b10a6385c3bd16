"""The taskset as Trinity's selectors read it: feature columns, the data source, index lists.

:func:`read_features` reads pass-rate columns through Arrow into a validated float64 matrix
(errors name the column and row). :class:`DataSource` is what Trinity's selectors read from
their data source (``dataset[key]`` and ``dataset_size``), and :class:`TaskColumns` the fast
column view it hands them by default.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from mathagent.selectors.capabilities import SelectorConfigError
from mathagent.tasks import TasksetError, fill_value, pass_rate_values

log = logging.getLogger(__name__)


def _arrow_column(dataset: datasets.Dataset, key: str) -> pa.ChunkedArray:
    """Column ``key`` of ``dataset`` as Arrow, honouring a ``select``/``shuffle`` mapping."""
    table = dataset.data.table if hasattr(dataset.data, "table") else dataset.data
    col = table.column(key)
    indices = getattr(dataset, "_indices", None)
    if indices is not None:
        col = col.take(indices.column(0))
    return col


def read_features(dataset: datasets.Dataset, keys: Sequence[str], *,
                  impute: str | None = None, source: str = "dataset",
                  ) -> tuple[np.ndarray, dict[str, int]]:
    """Read pass-rate columns into a float64 matrix, validated, without Python lists.

    Args:
        dataset: the taskset.
        keys: feature column names, weak reference first.
        impute: ``None`` (a NaN or missing value is an error), ``"mean"`` or ``"median"``
            (replaced by that column's statistic over its present values).
        source: how errors name the data (a path or a selector name).

    Returns:
        ``(features, imputed)``: ``features`` has shape ``(len(dataset), len(keys))``,
        C-contiguous float64 in [0, 1]; ``imputed`` maps each key to how many values were
        filled (all zero unless ``impute`` is set).

    Raises:
        SelectorConfigError: a key is missing, a column is not numeric, a value lies
            outside [0, 1], or a value is NaN/null and ``impute`` is ``None``. The message
            names the column, the first offending row (counted from 0) and the count.
    """
    if impute not in (None, "mean", "median"):
        raise SelectorConfigError(f"{source}: impute must be None, 'mean' or 'median', "
                                  f"not {impute!r}")
    missing = [k for k in keys if k not in dataset.column_names]
    if missing:
        raise SelectorConfigError(
            f"{source}: feature column(s) {missing} not found; the dataset has "
            f"{dataset.column_names}")
    n = len(dataset)
    features = np.empty((n, len(keys)), dtype=np.float64)
    imputed: dict[str, int] = {}
    for j, key in enumerate(keys):
        try:
            values = pass_rate_values(_arrow_column(dataset, key), key, source, booleans=True)
        except TasksetError as exc:
            raise SelectorConfigError(str(exc)) from None
        bad = np.isnan(values)  # nulls come through Arrow as NaN
        if bad.any() and impute is None:
            raise SelectorConfigError(
                f"{source}: feature column {key!r} has {int(bad.sum())} missing/NaN "
                f"value(s), first at row {int(np.argmax(bad))}; drop those rows or pass "
                f"impute='mean' or 'median'")
        present = values[~bad]
        if bad.any():
            if present.size == 0:
                raise SelectorConfigError(
                    f"{source}: feature column {key!r} has no values to impute from")
            fill = fill_value(present, impute)
            values = np.where(bad, fill, values)
            log.warning("%s: imputed %d NaN value(s) of %r with the column %s %.4f",
                        source, int(bad.sum()), key, impute, fill)
        imputed[key] = int(bad.sum())
        features[:, j] = values
    return features, imputed


class TaskColumns:
    """A ``datasets.Dataset`` seen the way Trinity's selectors read it, with fast columns.

    Trinity's selectors build their feature matrices with ``np.array(list(dataset[key]))``;
    on a ``datasets.Dataset`` that walks the column row by row through the formatter (seconds
    for 54k rows). Here ``columns[key]`` returns the column as a numpy array read once through
    Arrow (numbers as float64 or int64, exactly the values Python lists would carry), so the
    same code takes milliseconds. Rows (``columns[i]``), ``len`` and ``column_names`` pass
    through to the dataset, which stays available as ``.dataset``.
    """

    def __init__(self, dataset: datasets.Dataset):
        self.dataset = dataset
        self._cache: dict[str, Any] = {}

    def __len__(self) -> int:
        return len(self.dataset)

    @property
    def column_names(self) -> list[str]:
        return self.dataset.column_names

    def __getitem__(self, key):
        if not isinstance(key, str):
            return self.dataset[key]
        if key not in self._cache:
            if key not in self.dataset.column_names:
                raise KeyError(f"column {key!r} not in {self.dataset.column_names}")
            col = _arrow_column(self.dataset, key)
            if pa.types.is_floating(col.type):
                self._cache[key] = pc.cast(col, pa.float64()).to_numpy(zero_copy_only=False)
            elif pa.types.is_integer(col.type) and col.null_count == 0:
                self._cache[key] = pc.cast(col, pa.int64()).to_numpy(zero_copy_only=False)
            else:
                self._cache[key] = self.dataset[key]
        return self._cache[key]


def _hf_dataset(data: Any) -> datasets.Dataset:
    """The ``datasets.Dataset`` behind a data source's ``dataset`` attribute."""
    return data.dataset if isinstance(data, TaskColumns) else data


class DataSource:
    """What Trinity's selectors read from their data source, and nothing more.

    In a Trinity run the data source is the task file reader's batch reader; selectors touch
    only ``dataset`` (columns by name) and ``dataset_size``. With ``fast_columns`` (default)
    ``dataset`` is a :class:`TaskColumns` view, so Trinity's selectors read their feature
    columns as numpy arrays instead of walking the dataset row by row; their decisions are
    the same either way. ``fast_columns=False`` hands over the ``datasets.Dataset`` itself,
    exactly as Trinity's reader does.
    """

    def __init__(self, dataset: datasets.Dataset, name: str = "taskset",
                 fast_columns: bool = True):
        self.name = name
        self.dataset = TaskColumns(dataset) if fast_columns else dataset

    @property
    def dataset_size(self) -> int:
        return len(self.dataset)


def _as_index_list(indices: Any) -> list[int]:
    if isinstance(indices, torch.Tensor | np.ndarray):
        return [int(i) for i in indices.tolist()]
    return [int(i) for i in indices]

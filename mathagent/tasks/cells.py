"""Reading the cells of raw rows: a prompt's first message, ground truths, the question cleanup.

Shared by the guru and the AIME converters: guru's raw schema stores a prompt as a list of
``{role, content}`` messages and a ground truth that may be a number or a list; both
converters clean questions the same way.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from mathagent.tasks.schema import TasksetError, _is_text

# The sentence guru appends to every math prompt; the agent's own system prompt asks for
# a boxed answer, so the reference conversion removes it from the question.
BOXED_SENTENCE = "Please output the final answer within \\boxed{}."


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

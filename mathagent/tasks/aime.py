"""The AIME-24 evaluation set: any problem/answer file (or the hub's copy) as a test split.

Columns are found by name (or given), answers normalised to their truth (``033`` -> ``33``,
``\\boxed{x}`` unwrapped), and empty or duplicate rows dropped and counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from mathagent import paths
from mathagent.answers import last_box
from mathagent.settings import setting
from mathagent.tasks.cells import (
    _combined,
    _first_message_content,
    _is_list,
    clean_question,
    single_truth,
)
from mathagent.tasks.files import read_raw_table
from mathagent.tasks.hub import download_from_hub
from mathagent.tasks.io import check_taskset_output, replacement_note, save_taskset
from mathagent.tasks.report import (
    DROP_DUPLICATE,
    DROP_EMPTY_QUESTION,
    DROP_MISSING_TRUTH,
    ConversionReport,
    _provenance,
)
from mathagent.tasks.schema import ANSWER, ANSWER_PREFIX, QUESTION, TasksetError, _is_text

AIME_REPO = "HuggingFaceH4/aime_2024"

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

    question_column: str | None = setting(
        None, flag=True, metavar="NAME",
        help=f"problem text column (default: first of {', '.join(QUESTION_COLUMN_CANDIDATES)}; "
             "any case)")
    answer_column: str | None = setting(
        None, flag=True, metavar="NAME",
        help=f"answer column (default: first of {', '.join(ANSWER_COLUMN_CANDIDATES)}; any case)")
    id_column: str | None = setting(None, flag=True, metavar="NAME",
                                    help="problem id column (optional)")
    drop_duplicates: bool = setting(
        True, flag="--keep-duplicates", invert=True,
        help="drop later copies of an exact-duplicate problem (reported either way)",
        flag_help="keep exact-duplicate problems (reported either way)")


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

"""The math part of LLM360/guru-RL-92k as a taskset, with an account of every dropped row.

The reference cleanup (the boxed-answer sentence removed, ``answer = "#### " +
ground_truth``, the two Qwen pass-rate columns kept), plus explicit handling of missing
pass rates (drop or impute) and of duplicate questions, and an optional validation split.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from mathagent import paths
from mathagent.settings import setting
from mathagent.tasks.cells import (
    _combined,
    _first_message_content,
    _is_list,
    _truth_text,
    clean_question,
    single_truth,
)
from mathagent.tasks.files import read_raw_table
from mathagent.tasks.hub import download_from_hub
from mathagent.tasks.io import check_taskset_output, replacement_note, save_taskset
from mathagent.tasks.report import (
    DROP_DUPLICATE,
    DROP_EMPTY_PROMPT,
    DROP_EMPTY_QUESTION,
    DROP_MISSING_PASS_RATE,
    DROP_MISSING_TRUTH,
    DROP_REASONS,
    ConversionReport,
    _provenance,
)
from mathagent.tasks.schema import ANSWER, ANSWER_PREFIX, QUESTION, TasksetError, pass_rate_values
from mathagent.tasks.stats import fill_value

GURU_REPO = "LLM360/guru-RL-92k"
GURU_FILE = "train/math__combined_54.4k.parquet"
# Pass rates of a weaker and a stronger reference model (16 samples each), in the order
# ``difficulty_based`` expects: column 0 weak, column 1 strong.
GURU_PASS_RATE_KEYS = ("qwen2.5_7b_pass_rate", "qwen3_30b_pass_rate")

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

    pass_rate_columns: tuple[str, ...] = setting(
        GURU_PASS_RATE_KEYS, flag=True, nargs="*", metavar="COL",
        help="pass-rate columns to keep, weak model first (none: a file without pass rates)")
    missing_pass_rate: str = setting(
        "drop", flag=True, choices=MISSING_PASS_RATE_POLICIES,
        help="rows with a NaN/missing pass rate: drop them, or impute the column's mean/median "
             "over the valid rows, or a constant (--fill-value)")
    fill_value: float | None = setting(
        None, flag=True, metavar="P", help="the value for --missing-pass-rate constant, in [0, 1]")
    drop_duplicates: bool = setting(
        True, flag="--keep-duplicates", invert=True,
        help="drop later copies of an exact-duplicate question (reported either way)",
        flag_help="keep exact-duplicate questions (they are reported either way)")
    val_fraction: float = setting(0.0, flag=True, metavar="F",
                                  help="share of rows for a validation split")
    seed: int = setting(0, flag=True, metavar="SEED", help="seed of the split")
    keep_columns: tuple[str, ...] = setting((), flag=True, nargs="*", metavar="COL",
                                            help="further raw columns to copy through")

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


def raw_prompt_text(table: pa.Table) -> pd.Series:
    """``prompt[0].content`` of every raw guru row, before cleanup (None where absent)."""
    return pd.Series(_first_message_content(_combined(table.column("prompt")), table.num_rows,
                                            "input"), name="prompt_text")


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

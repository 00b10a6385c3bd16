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
* :func:`generate_arithmetic` / ``generate-arithmetic``: the bundled offline tasksets of
  arithmetic word problems with a wide, controlled difficulty range, one per level set
  (:func:`generate_level_set`): ``smollm2`` (``data/arithmetic``) and ``qwen``
  (``data/arithmetic_qwen``, for Qwen2.5-Coder-0.5B-Instruct).

Every loader goes through :func:`validate_taskset`, whose errors name the file, the row
(counted from 0) and the column at fault; an input file that cannot be read at all (empty,
truncated, corrupt, malformed csv/json) is one :class:`TasksetError` line naming it.

Outputs are never lost silently: a taskset is written into a temporary folder beside its
directory and swapped in when complete (:func:`mathagent.outputs.staged_output`), so a
failure midway leaves the old one intact; the commands keep an existing taskset unless
``--force``, and with ``--force`` replace only the splits they build (``prepare-aime`` the
test split, ``prepare-data`` train/validation), keeping every other split and file there.

Modules:

* :mod:`~mathagent.tasks.schema`: the column names, :class:`TasksetError` and the validator;
* :mod:`~mathagent.tasks.files`: reading input files (parquet, jsonl/json, csv) as tables;
* :mod:`~mathagent.tasks.io`: taskset folders: loading a split, staged writes, provenance;
* :mod:`~mathagent.tasks.hub`: optional Hugging Face hub access;
* :mod:`~mathagent.tasks.report`: drop reasons, the conversion report and the provenance record;
* :mod:`~mathagent.tasks.cells`: reading raw cells (prompt messages, ground truths);
* :mod:`~mathagent.tasks.stats`: pass-rate statistics (imputation, the difficulty landscape);
* :mod:`~mathagent.tasks.guru`: the guru-RL-92k math converter;
* :mod:`~mathagent.tasks.aime`: the AIME-24 eval set;
* :mod:`~mathagent.tasks.reference`: the tasksets the reference configs read;
* :mod:`~mathagent.tasks.arithmetic`: the arithmetic generator and the ``smollm2`` level set;
* :mod:`~mathagent.tasks.arithmetic_qwen`: the ``qwen`` level set (expression-shape levels);
* :mod:`~mathagent.tasks.commands`: the ``prepare-data``, ``prepare-aime`` and
  ``generate-arithmetic`` commands.
"""

from __future__ import annotations

from mathagent.tasks.aime import AimeOptions, convert_aime, normalize_answer, prepare_aime
from mathagent.tasks.arithmetic import (
    ARITHMETIC_FEATURE_KEYS,
    ARITHMETIC_SEED,
    GENERATOR_COLUMNS,
    LEVEL_SET_NAMES,
    SMOLLM2_LEVELS,
    STRONG_KEY,
    TRAIN_LEVEL_SHARES,
    WEAK_KEY,
    ArithmeticOptions,
    LevelSet,
    generate_arithmetic,
    generate_level_set,
    level_counts,
    level_set,
    level_table,
    write_arithmetic,
)
from mathagent.tasks.arithmetic_qwen import QWEN_FEATURE_KEYS, QWEN_LEVELS
from mathagent.tasks.cells import BOXED_SENTENCE
from mathagent.tasks.commands import (
    generate_arithmetic_command,
    generate_arithmetic_parser,
    prepare_aime_command,
    prepare_aime_parser,
    prepare_data_command,
    prepare_data_parser,
)
from mathagent.tasks.files import read_raw_table, sha256_file
from mathagent.tasks.guru import (
    GURU_FILE,
    GURU_PASS_RATE_KEYS,
    GURU_REPO,
    GuruOptions,
    convert_guru,
    prepare_guru,
    raw_prompt_text,
)
from mathagent.tasks.hub import HubUnavailable, download_from_hub, hub_offline, probe_hub
from mathagent.tasks.io import (
    load_taskset,
    read_provenance,
    read_split,
    read_with_trinity,
    save_taskset,
)
from mathagent.tasks.reference import reference_tasksets
from mathagent.tasks.report import format_report
from mathagent.tasks.schema import (
    SPLITS,
    TasksetError,
    pass_rate_columns,
    pass_rate_values,
    validate_taskset,
)
from mathagent.tasks.stats import (
    difficulty_correlations,
    fill_value,
    informative_probability,
    pass_rate_summary,
)

__all__ = [
    "AimeOptions", "ARITHMETIC_FEATURE_KEYS", "ARITHMETIC_SEED", "ArithmeticOptions",
    "BOXED_SENTENCE", "convert_aime", "convert_guru", "difficulty_correlations",
    "download_from_hub", "fill_value", "format_report", "generate_arithmetic",
    "generate_arithmetic_command", "generate_arithmetic_parser", "generate_level_set",
    "GENERATOR_COLUMNS", "GURU_FILE", "GURU_PASS_RATE_KEYS", "GURU_REPO", "GuruOptions",
    "hub_offline", "HubUnavailable", "informative_probability", "level_counts", "level_set",
    "LEVEL_SET_NAMES", "level_table", "LevelSet", "load_taskset", "normalize_answer",
    "pass_rate_columns", "pass_rate_summary", "pass_rate_values", "prepare_aime",
    "prepare_aime_command", "prepare_aime_parser", "prepare_data_command", "prepare_data_parser",
    "prepare_guru", "probe_hub", "QWEN_FEATURE_KEYS", "QWEN_LEVELS", "raw_prompt_text",
    "read_provenance", "read_raw_table", "read_split", "read_with_trinity", "reference_tasksets",
    "save_taskset", "sha256_file", "SMOLLM2_LEVELS", "SPLITS", "STRONG_KEY", "TasksetError",
    "TRAIN_LEVEL_SHARES", "validate_taskset", "WEAK_KEY", "write_arithmetic",
]

"""Tasksets: guru and AIME conversion, the arithmetic generator and the schema validator.

The guru fixtures (``tests/tasks/fixtures/guru_raw*.jsonl``) are hand-written rows in guru's raw
schema, one edge case per row; each test turns them into parquet first, as the real file
is. Everything here is real: ``datasets``, pyarrow and Trinity-RFT's own task file reader.
"""

from __future__ import annotations

import ast
import json
import operator
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from bounds import hang_bound

from mathagent import cli, paths, tasks

FIXTURES = Path(__file__).parent / "fixtures"  # test-only inputs (broken files)
RATES = list(tasks.GURU_PASS_RATE_KEYS)

# What the default conversion must keep from data/samples/guru_raw.jsonl, in input order:
# (row, question, answer). Row 3 had the boxed sentence twice, row 2 never; row 11 duplicates
# row 0 once cleaned.
EXPECTED_KEPT = [
    (0, "A cyclist rides 45 kilometres in 1.5 hours. What is her average speed in kilometres "
        "per hour?", "#### 30"),
    (1, "Write $\\frac{12}{16}$ in lowest terms.", "#### \\frac{3}{4}"),
    (2, "How many positive divisors does 36 have?", "#### 9"),
    (3, "Compute $8^2 - 5^2$.", "#### 39"),
    (12, "What is $0.15 + 0.2$?", "#### 0.35"),
    (13, "Solve $x^2 = 3$ for $x > 0$.", "#### \\sqrt{3}"),
    (16, "If $2x + 3 = 11$, what is $x$?", "#### 4"),
]
EXPECTED_DROPPED_ROWS = {
    "empty prompt": [6, 8, 15],          # [], null, and [] with a NaN rate (counted once)
    "empty question": [7],               # only the boxed sentence
    "missing ground truth": [9, 10],     # null, blank
    "missing pass rate": [4, 5, 14],     # NaN, key absent, both
    "duplicate question": [11],
}


def _to_parquet(src, dst):
    pq.write_table(tasks.read_raw_table(src), dst)
    return dst


@pytest.fixture()
def guru_parquet(tmp_path):
    return _to_parquet(paths.SAMPLES_DIR / "guru_raw.jsonl", tmp_path / "math__combined_fixture.parquet")


def _run_cli(argv, capsys):
    rc = cli.main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


# ---------------------------------------------------------------- guru conversion


def test_prepare_data_fixture_gives_expected_rows_and_report(guru_parquet, tmp_path, capsys):
    out = tmp_path / "guru"
    rc, stdout, _ = _run_cli(["prepare-data", "--input", str(guru_parquet), "--out", str(out)],
                             capsys)
    assert rc == 0
    frame = pq.read_table(out / "train.parquet").to_pandas()
    assert list(frame["source_row"]) == [r for r, _, _ in EXPECTED_KEPT]
    assert list(frame["question"]) == [q for _, q, _ in EXPECTED_KEPT]
    assert list(frame["answer"]) == [a for _, _, a in EXPECTED_KEPT]
    assert list(frame["source_index"]) == [100 + r for r, _, _ in EXPECTED_KEPT]
    assert frame.loc[0, RATES].tolist() == [0.75, 0.9375]
    assert set(frame["data_source"]) == {"math__deepscaler_preview",
                                         "math__merged_deduped_dapo_or1_dataset"}
    # extra raw columns are not carried unless asked for
    assert "apply_chat_template" not in frame.columns and "solution" not in frame.columns

    prov = json.loads((out / "provenance.json").read_text())
    counts = prov["counts"]
    assert counts["rows_in"] == 17 and counts["rows_out"] == 7
    assert counts["dropped"] == {k: len(v) for k, v in EXPECTED_DROPPED_ROWS.items()}
    assert counts["dropped_rows"] == EXPECTED_DROPPED_ROWS
    assert counts["missing_pass_rates"] == {RATES[0]: 2, RATES[1]: 2}
    assert counts["duplicates"] == {"rows": 1, "groups": 1, "conflicting_groups": 0,
                                    "action": "dropped"}
    assert prov["input_sha256"] == tasks.sha256_file(guru_parquet)
    assert prov["options"]["missing_pass_rate"] == "drop"
    assert prov["versions"]["mathagent"]
    assert "rows in:        17" in stdout and "dropped, missing pass rate:" in stdout


def test_nothing_is_lost_silently_under_any_option(guru_parquet):
    table = tasks.read_raw_table(guru_parquet)
    for opts in (tasks.GuruOptions(),
                 tasks.GuruOptions(missing_pass_rate="mean", drop_duplicates=False),
                 tasks.GuruOptions(missing_pass_rate="median", val_fraction=0.3, seed=3),
                 tasks.GuruOptions(missing_pass_rate="constant", fill_value=0.5)):
        splits, report = tasks.convert_guru(table, opts, source="fixture")
        kept = sorted(np.concatenate([f["source_row"].to_numpy() for f in splits.values()]))
        dropped = sorted(r for rows in report.dropped_rows.values() for r in rows)
        assert sorted(kept + dropped) == list(range(table.num_rows)), opts
        assert report.rows_in == report.rows_out + sum(report.dropped.values())
        assert sum(report.splits.values()) == report.rows_out


def test_mean_imputation_fills_the_stated_value(guru_parquet):
    splits, report = tasks.convert_guru(tasks.read_raw_table(guru_parquet),
                                        tasks.GuruOptions(missing_pass_rate="mean"))
    frame = splits["train"].set_index("source_row")
    # means over rows passing the structural checks and having a value (9 each)
    assert report.imputed == {RATES[0]: {"rule": "mean", "value": 0.5625, "rows": 2},
                              RATES[1]: {"rule": "mean", "value": 0.75, "rows": 2}}
    assert report.dropped["missing pass rate"] == 0 and report.rows_out == 10
    assert frame.loc[4, RATES].tolist() == [0.5625, 0.25]
    assert frame.loc[5, RATES].tolist() == [0.875, 0.75]
    assert frame.loc[14, RATES].tolist() == [0.5625, 0.75]
    assert frame[RATES].notna().all().all()


def test_constant_imputation_needs_a_value_in_range(guru_parquet, tmp_path, capsys):
    rc, _, err = _run_cli(["prepare-data", "--input", str(guru_parquet), "--out",
                           str(tmp_path / "o"), "--missing-pass-rate", "constant"], capsys)
    assert rc == 2 and "--fill-value" in err
    _, report = tasks.convert_guru(tasks.read_raw_table(guru_parquet),
                                   tasks.GuruOptions(missing_pass_rate="constant", fill_value=0.0))
    assert report.imputed[RATES[1]] == {"rule": "constant", "value": 0.0, "rows": 2}


def test_duplicates_are_reported_and_kept_when_asked(guru_parquet):
    splits, report = tasks.convert_guru(tasks.read_raw_table(guru_parquet),
                                        tasks.GuruOptions(drop_duplicates=False))
    assert report.duplicates["rows"] == 1 and report.duplicates["action"] == "kept"
    assert report.dropped["duplicate question"] == 0
    assert list(splits["train"]["source_row"]) == [0, 1, 2, 3, 11, 12, 13, 16]


def test_validation_split_is_deterministic_and_disjoint(guru_parquet):
    table = tasks.read_raw_table(guru_parquet)
    opts = tasks.GuruOptions(missing_pass_rate="mean", val_fraction=0.3, seed=11)
    a, report = tasks.convert_guru(table, opts)
    b, _ = tasks.convert_guru(table, opts)
    assert report.splits == {"train": 7, "validation": 3}
    for split in a:
        pd.testing.assert_frame_equal(a[split], b[split])
    rows = [set(a[s]["source_row"]) for s in ("train", "validation")]
    assert not rows[0] & rows[1] and len(rows[0] | rows[1]) == 10
    # both parts keep the input order
    assert all(list(a[s]["source_row"]) == sorted(a[s]["source_row"]) for s in a)
    with pytest.raises(tasks.TasksetError, match="val_fraction"):
        tasks.convert_guru(table, tasks.GuruOptions(val_fraction=1.0))


def test_output_loads_with_datasets_and_trinity_reader(guru_parquet, tmp_path):
    import datasets

    out = tmp_path / "guru"
    tasks.prepare_guru(guru_parquet, out, tasks.GuruOptions(missing_pass_rate="mean",
                                                            val_fraction=0.2, seed=0))
    assert (out / "provenance.json").is_file()
    train = datasets.load_dataset(str(out), split="train")
    val = datasets.load_dataset(str(out), split="validation")
    assert (len(train), len(val)) == (8, 2)
    assert train.features["question"].dtype == "string"
    assert train.features[RATES[0]].dtype == "float64"
    # the package loader validates on top
    ds = tasks.load_taskset(out, "train", feature_keys=RATES)
    assert ds["question"] == train["question"]
    # Trinity-RFT's own reader, given the directory as a config's taskset.path
    read = tasks.read_with_trinity(out, split="train")
    assert [t.raw_task["question"] for t in read] == train["question"]
    assert [t.raw_task["answer"] for t in read] == train["answer"]
    assert read[0].raw_task[RATES[1]] == train[0][RATES[1]]


def test_out_of_range_pass_rate_is_rejected_with_the_row(tmp_path, capsys):
    bad = _to_parquet(FIXTURES / "guru_raw_bad_rate.jsonl", tmp_path / "bad.parquet")
    rc, _, err = _run_cli(["prepare-data", "--input", str(bad), "--out", str(tmp_path / "o")],
                          capsys)
    assert rc == 2
    assert err.count("\n") == 1 and err.rsplit("\r", 1)[-1].startswith("error: ")
    assert str(bad) in err and "row 2 (extra_info.index=202)" in err
    assert "'qwen3_30b_pass_rate'" in err and "1.25" in err
    assert not (tmp_path / "o").exists()


def test_structural_faults_name_file_and_column(guru_parquet, tmp_path):
    table = tasks.read_raw_table(guru_parquet)
    with pytest.raises(tasks.TasksetError, match=r"fx\.parquet: missing column 'reward_model'"):
        tasks.convert_guru(table.drop_columns(["reward_model"]), source="fx.parquet")
    with pytest.raises(tasks.TasksetError, match=r"pass-rate column 'qwen3_30b_pass_rate' "
                                                 r"not found"):
        tasks.convert_guru(table.drop_columns([RATES[1]]), source="fx.parquet")
    as_text = table.set_column(table.column_names.index(RATES[0]), RATES[0],
                               pa.array(["0.5"] * table.num_rows))
    with pytest.raises(tasks.TasksetError, match=r"column 'qwen2.5_7b_pass_rate' has type string"):
        tasks.convert_guru(as_text, source="fx.parquet")
    # the pass-rate columns are configurable (here: none kept at all)
    splits, report = tasks.convert_guru(table.drop_columns(RATES),
                                        tasks.GuruOptions(pass_rate_columns=()))
    assert report.rows_out == 10 and not tasks.pass_rate_columns(splits["train"].columns)


def test_numeric_ground_truths_become_integer_strings(tmp_path):
    rows = [{"prompt": [{"role": "user", "content": f"Q{i}?"}],
             "reward_model": {"ground_truth": v, "style": "rule"},
             "qwen2.5_7b_pass_rate": 0.5, "qwen3_30b_pass_rate": 0.5}
            for i, v in enumerate([42.0, 2.5, None])]
    splits, report = tasks.convert_guru(pa.Table.from_pylist(rows))
    assert list(splits["train"]["answer"]) == ["#### 42", "#### 2.5"]
    assert report.dropped["missing ground truth"] == 1


def test_missing_input_file_is_one_clear_line(tmp_path, capsys):
    rc, _, err = _run_cli(["prepare-data", "--input", str(tmp_path / "nope.parquet")], capsys)
    assert rc == 2 and err == f"error: {tmp_path / 'nope.parquet'}: no such input file\n"


def test_unreachable_hub_says_what_to_pass(tmp_path, monkeypatch):
    from huggingface_hub import constants

    # an empty hub cache: a machine that has the file cached would not ask the hub at all
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    with pytest.raises(tasks.HubUnavailable, match=r"pass --input PATH$"):
        # a closed port refuses at once; the timeout is only a bound
        tasks.download_from_hub(tasks.GURU_REPO, tasks.GURU_FILE, timeout=30,
                                endpoint="http://127.0.0.1:9")
    # the command itself, in offline mode with an empty cache: one line on stderr, exit 2
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    proc = subprocess.run([sys.executable, "-m", "mathagent", "prepare-data", "--out",
                           str(tmp_path / "o")], capture_output=True, text=True, env=env,
                          cwd=paths.REPO_ROOT, timeout=hang_bound(300))
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and tasks.GURU_FILE in lines[0] and "--input PATH" in lines[0]


# ---------------------------------------------------------------- AIME


def test_prepare_aime_from_jsonl_with_default_columns(tmp_path, capsys):
    out = tmp_path / "aime"
    rc, stdout, _ = _run_cli(["prepare-aime", "--input", str(paths.SAMPLES_DIR / "aime_style.jsonl"),
                              "--out", str(out)], capsys)
    assert rc == 0
    frame = pq.read_table(out / "test.parquet").to_pandas()
    assert list(frame["answer"]) == ["#### 19", "#### 60", "#### 576", "#### 14"]
    assert list(frame["source_id"]) == ["mock-I-1", "mock-I-2", "mock-I-3", "mock-I-4"]
    assert frame["question"][0].startswith("Find the number of ordered pairs")
    counts = json.loads((out / "provenance.json").read_text())["counts"]
    assert counts["dropped"] == {"empty question": 1, "missing ground truth": 1,
                                 "duplicate question": 0}
    assert "question='Problem', answer='Answer', id='ID'" in stdout
    assert "AIME 2024 has 30 problems; this set has 4" in stdout
    # the configs read it as split "test": through datasets and through Trinity's reader
    import datasets

    assert len(datasets.load_dataset(str(out), split="test")) == 4
    assert [t.raw_task["answer"] for t in tasks.read_with_trinity(out, split="test")] == \
        list(frame["answer"])


def test_prepare_aime_csv_and_explicit_columns(tmp_path):
    report = tasks.prepare_aime(FIXTURES / "aime_style.csv", tmp_path / "a")
    assert report.rows_out == 2
    assert list(tasks.read_split(tmp_path / "a", "test")["answer"]) == ["#### 55", "#### 20"]
    table = tasks.read_raw_table(FIXTURES / "aime_style.csv").rename_columns(
        ["key", "text", "truth"])
    with pytest.raises(tasks.TasksetError, match="no question column found.*--question-column"):
        tasks.convert_aime(table)
    frame, _ = tasks.convert_aime(table, tasks.AimeOptions(question_column="text",
                                                           answer_column="truth",
                                                           id_column="key"))
    assert list(frame["source_id"]) == ["csv-1", "csv-2"]
    with pytest.raises(tasks.TasksetError, match="answer column 'nope' not found"):
        tasks.convert_aime(table, tasks.AimeOptions(answer_column="nope"))


@pytest.mark.parametrize(("raw", "truth"), [
    (204, "204"), (33.0, "33"), ("033", "33"), ("$\\boxed{17}$", "17"), ("#### 5", "5"),
    ("\\frac{1}{2}", "\\frac{1}{2}"), ("\\boxed{\\frac{a}{b}}", "\\frac{a}{b}"), ("  ", None),
    (None, None), (float("nan"), None)])
def test_normalize_answer(raw, truth):
    assert tasks.normalize_answer(raw) == truth


def test_prepare_aime_unreachable_hub(tmp_path, capsys):
    rc, _, err = _run_cli(["prepare-aime", "--out", str(tmp_path / "a"), "--hub-repo",
                           "nobody/none", "--hub-timeout", "2"], capsys)
    # either the hub is unreachable (here) or the repo does not exist: one line either way
    assert rc == 2 and err.count("\n") == 1
    assert "nobody/none" in err and "--input PATH" in err


# ---------------------------------------------------------------- schema validator


def _good_frame():
    return pd.DataFrame({"question": ["What is 2 + 2?", "What is 3 + 3?"],
                         "answer": ["#### 4", "#### 6"],
                         tasks.WEAK_KEY: [0.25, 0.0], tasks.STRONG_KEY: [0.5, 1.0]})


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda f: f.drop(columns="answer"), r"src\.parquet: missing column\(s\) 'answer'"),
    (lambda f: f.assign(answer=[4, 6]), r"column 'answer' has type int64, expected string"),
    (lambda f: f.assign(question=["ok", "  "]), r"row 1, column 'question': empty"),
    (lambda f: f.assign(question=["ok", None]), r"row 1, column 'question': missing"),
    (lambda f: f.assign(answer=["#### 4", "6"]), r"row 1, column 'answer': expected '#### "),
    (lambda f: f.assign(answer=["####  ", "#### 6"]), r"row 0, column 'answer'"),
    (lambda f: f.assign(**{tasks.WEAK_KEY: [0.1, np.nan]}),
     r"row 1, column 'smollm2_weak_pass_rate': missing pass rate"),
    (lambda f: f.assign(**{tasks.STRONG_KEY: [1.5, 0.2]}),
     r"row 0, column 'smollm2_strong_pass_rate': pass rate 1.5 outside \[0, 1\]"),
    (lambda f: f.assign(**{tasks.STRONG_KEY: ["a", "b"]}), r"has type (large_)?string, expected float"),
    (lambda f: f.assign(other_pass_rate=[0.5, -0.1]), r"row 1, column 'other_pass_rate'"),
    (lambda f: f.iloc[:0], r"src\.parquet: the taskset has no rows"),
])
def test_validator_names_file_row_and_column(mutate, message):
    tasks.validate_taskset(_good_frame(), tasks.ARITHMETIC_FEATURE_KEYS, source="src.parquet")
    with pytest.raises(tasks.TasksetError, match=message):
        tasks.validate_taskset(mutate(_good_frame()), tasks.ARITHMETIC_FEATURE_KEYS,
                               source="src.parquet")


def test_validator_requires_requested_feature_keys():
    with pytest.raises(tasks.TasksetError, match="missing column.*'smollm2_weak_pass_rate'"):
        tasks.validate_taskset(_good_frame().drop(columns=tasks.WEAK_KEY),
                               tasks.ARITHMETIC_FEATURE_KEYS)


def test_load_taskset_errors_name_the_path(tmp_path):
    with pytest.raises(tasks.TasksetError, match="no such taskset directory"):
        tasks.load_taskset(tmp_path / "missing")
    frame = _good_frame()
    tasks.save_taskset({"test": frame}, tmp_path / "t", {"kind": "unit"})
    with pytest.raises(tasks.TasksetError, match=r"split 'train' not found.*splits present: test"):
        tasks.load_taskset(tmp_path / "t")
    # a file broken on disk is reported with its path and row
    broken = frame.assign(answer=["#### 4", "six"])
    pq.write_table(pa.Table.from_pandas(broken, preserve_index=False), tmp_path / "t/test.parquet")
    with pytest.raises(tasks.TasksetError, match=r"t/test\.parquet: row 1, column 'answer'"):
        tasks.load_taskset(tmp_path / "t", "test")
    # save_taskset refuses to write an invalid split at all
    with pytest.raises(tasks.TasksetError, match=r"u/train\.parquet: row 1"):
        tasks.save_taskset({"train": broken}, tmp_path / "u", {})
    assert not (tmp_path / "u").exists()


def test_save_taskset_removes_stale_splits(tmp_path):
    frame = _good_frame()
    tasks.save_taskset({"train": frame, "validation": frame}, tmp_path, {})
    tasks.save_taskset({"train": frame}, tmp_path, {})
    assert sorted(p.name for p in tmp_path.glob("*.parquet")) == ["train.parquet"]


# ---------------------------------------------------------------- arithmetic generator

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def _safe_eval(expr):
    def ev(node):
        if isinstance(node, ast.BinOp):
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        raise ValueError(ast.dump(node))
    return ev(ast.parse(expr, mode="eval").body)


def test_generator_is_deterministic_and_correct():
    a = tasks.generate_arithmetic(300, 60, seed=3)
    b = tasks.generate_arithmetic(300, 60, seed=3)
    c = tasks.generate_arithmetic(300, 60, seed=4)
    for split in ("train", "test"):
        pd.testing.assert_frame_equal(a[split], b[split])
    assert list(a["train"]["question"]) != list(c["train"]["question"])
    both = pd.concat([a["train"], a["test"]])
    assert both["question"].is_unique and both["task_id"].is_unique
    truths = both["answer"].str.removeprefix("#### ").astype(int)
    assert (truths >= 0).all()
    assert [_safe_eval(e) for e in both["expression"]] == truths.tolist()
    tasks.validate_taskset(a["train"])
    assert set(a["train"].columns) == set(tasks.GENERATOR_COLUMNS)


def test_generator_spans_easy_to_hard():
    splits = tasks.generate_arithmetic(2000, 200)
    train, test = splits["train"], splits["test"]
    assert train["difficulty"].value_counts().sort_index().tolist() == \
        tasks.level_counts(2000, tasks.TRAIN_LEVEL_SHARES)
    assert (train["difficulty"] <= 2).mean() >= 0.45        # many short, easy tasks
    assert test["difficulty"].mean() > train["difficulty"].mean() + 1.0   # eval skews harder
    easy = train[(train["difficulty"] == 0) & ~train["word_problem"]]
    assert easy["question"].str.fullmatch(r"What is \d \+ \d\?").any()
    assert easy["question"].str.len().max() <= 40
    hard = train[train["difficulty"] == 7]
    assert (hard["n_terms"] == 5).all() and hard["ops"].eq("+-*").all()
    assert 0.3 < train["word_problem"].mean() < 0.6


def test_bundled_taskset_matches_the_generator():
    """data/arithmetic is exactly what `generate-arithmetic` (default seed) writes."""
    regenerated = tasks.generate_arithmetic()
    for split in ("train", "test"):
        frame = tasks.read_split(paths.ARITHMETIC_DIR, split)
        pd.testing.assert_frame_equal(frame[list(tasks.GENERATOR_COLUMNS)],
                                      regenerated[split][list(tasks.GENERATOR_COLUMNS)])
        # measured columns, when present, are valid pass rates
        measured = [k for k in tasks.ARITHMETIC_FEATURE_KEYS if k in frame.columns]
        tasks.validate_taskset(frame, measured)
    prov = tasks.read_provenance(paths.ARITHMETIC_DIR)
    assert prov["options"]["seed"] == tasks.ARITHMETIC_SEED
    assert sum(prov["counts"]["rows"].values()) == 2200
    assert (paths.ARITHMETIC_DIR / "train.parquet").stat().st_size < 200_000


def test_generate_arithmetic_refuses_to_drop_measured_columns(tmp_path, capsys):
    out = tmp_path / "ar"
    rc, stdout, _ = _run_cli(["generate-arithmetic", "--out", str(out), "--n-train", "80",
                              "--n-test", "20", "--seed", "1"], capsys)
    assert rc == 0 and "train: 80 tasks" in stdout
    frame = tasks.read_split(out, "train")
    frame[tasks.WEAK_KEY] = 0.5
    frame[tasks.STRONG_KEY] = 0.75
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), out / "train.parquet")
    ds = tasks.load_taskset(out, "train", feature_keys=tasks.ARITHMETIC_FEATURE_KEYS)
    assert ds[0][tasks.STRONG_KEY] == 0.75
    rc, _, err = _run_cli(["generate-arithmetic", "--out", str(out), "--n-train", "80"], capsys)
    assert rc == 2 and "smollm2_weak_pass_rate" in err and "--force" in err
    rc, _, _ = _run_cli(["generate-arithmetic", "--out", str(out), "--n-train", "80",
                         "--force"], capsys)
    assert rc == 0 and tasks.WEAK_KEY not in tasks.read_split(out).columns


# ---------------------------------------------------------------- landscape helpers


def test_informative_probability_and_summary():
    assert tasks.informative_probability(0.5, 8) == pytest.approx(1 - 2 / 256)
    assert tasks.informative_probability(np.array([0.0, 1.0]), 8).tolist() == [0.0, 0.0]
    frame = pd.DataFrame({"a_pass_rate": [0.0, 0.0, 1.0, 0.5], "b_pass_rate": [0.25] * 4})
    summary = tasks.pass_rate_summary(frame, group_size=2)
    assert summary.loc["a_pass_rate", ["share_0", "share_1", "share_between"]].tolist() == \
        [0.5, 0.25, 0.25]
    assert summary.loc["a_pass_rate", "informative_n2"] == pytest.approx(0.5 / 4)
    assert summary.loc["b_pass_rate", "informative_n2"] == pytest.approx(1 - 0.25**2 - 0.75**2)


def test_difficulty_correlations_follow_the_levels():
    train = tasks.generate_arithmetic(400, 40, seed=5)["train"]
    rng = np.random.default_rng(0)
    # a stand-in for measured rates: falls with the level, plus sampling noise (8 samples)
    train[tasks.WEAK_KEY] = rng.binomial(8, np.clip(0.8 - 0.12 * train["difficulty"], 0, 1)) / 8
    train[tasks.STRONG_KEY] = 1.0 - train["difficulty"] / 7
    corr = tasks.difficulty_correlations(train, tasks.ARITHMETIC_FEATURE_KEYS)
    assert list(corr.index) == ["difficulty", "n_terms", "max_operand", "word_problem"]
    assert corr.loc["difficulty", tasks.STRONG_KEY] == pytest.approx(-1.0)
    assert corr.loc["difficulty", tasks.WEAK_KEY] < -0.5


def test_plots_draw_what_the_data_says(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from mathagent import plots

    frame = pd.DataFrame({"w_pass_rate": [0.0, 0.0, 0.5, 1.0, 0.0625],
                          "s_pass_rate": [0.0, 0.5, 1.0, 1.0, 0.125],
                          "difficulty": [2, 2, 1, 0, 1]})
    fig = plots.pass_rate_histograms(frame, ["w_pass_rate", "s_pass_rate"])
    heights = [sum(p.get_height() for p in ax.patches) for ax in fig.axes]
    assert heights == [5, 5]
    assert fig.axes[0].get_title().startswith("at 0: 40%")
    fig2 = plots.pass_rate_scatter(frame, "w_pass_rate", "s_pass_rate")
    assert len(fig2.axes[0].collections[0].get_offsets()) == 5
    fig3 = plots.pass_rate_by_parameter(frame, ["w_pass_rate"])
    assert fig3.axes[0].lines[0].get_ydata().tolist() == [1.0, (0.5 + 0.0625) / 2, 0.0]
    path = plots.save_figure(fig, "hist", folder=tmp_path)
    assert path.stat().st_size > 1000


def test_commands_have_help(capsys):
    for name in ("prepare-data", "prepare-aime", "generate-arithmetic"):
        with pytest.raises(SystemExit) as exc:
            cli.main([name, "--help"])
        assert exc.value.code == 0
        assert "usage:" in capsys.readouterr().out


def test_command_flags_fill_their_settings(guru_parquet, tmp_path, capsys):
    """Each flag sets its options field; the options land in the provenance as given."""
    out = tmp_path / "guru"
    rc, _, _ = _run_cli(["prepare-data", "--input", str(guru_parquet), "--out", str(out),
                         "--missing-pass-rate", "constant", "--fill-value", "0.5",
                         "--val-fraction", "0.2", "--seed", "3", "--keep-duplicates",
                         "--keep-columns", "ability"], capsys)
    assert rc == 0
    expected = tasks.GuruOptions(missing_pass_rate="constant", fill_value=0.5, val_fraction=0.2,
                                 seed=3, drop_duplicates=False, keep_columns=("ability",))
    assert tasks.read_provenance(out)["options"] == json.loads(json.dumps(asdict(expected)))
    assert "ability" in tasks.read_split(out).columns
    # --pass-rate-columns given no columns keeps none
    rc, _, _ = _run_cli(["prepare-data", "--input", str(guru_parquet), "--out",
                         str(tmp_path / "bare"), "--pass-rate-columns"], capsys)
    assert rc == 0
    assert tasks.read_provenance(tmp_path / "bare")["options"]["pass_rate_columns"] == []
    assert not tasks.pass_rate_columns(tasks.read_split(tmp_path / "bare").columns)
    rc, _, _ = _run_cli(["prepare-aime", "--input", str(FIXTURES / "aime_style.csv"), "--out",
                         str(tmp_path / "aime"), "--question-column", "problem",
                         "--id-column", "id", "--keep-duplicates"], capsys)
    assert rc == 0
    assert tasks.read_provenance(tmp_path / "aime")["options"] == {
        "question_column": "problem", "answer_column": None, "id_column": "id",
        "drop_duplicates": False}
    rc, _, _ = _run_cli(["generate-arithmetic", "--out", str(tmp_path / "ar"), "--n-train", "30",
                         "--n-test", "5", "--seed", "2"], capsys)
    assert rc == 0
    assert tasks.read_provenance(tmp_path / "ar")["options"] == {"levels": "smollm2",
                                                                 "n_train": 30, "n_test": 5,
                                                                 "seed": 2}
    for argv in (["prepare-data", "--missing-pass-rate", "often"], ["generate-arithmetic",
                                                                     "--n-train", "many"]):
        with pytest.raises(SystemExit) as exc:
            cli.main(argv)
        assert exc.value.code == 2


def test_notebook_01_is_committed_clean():
    import nbformat

    nb = nbformat.read(paths.NOTEBOOKS_DIR / "01_data_preparation.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code)
    assert code[0].metadata.get("tags") == ["parameters"]
    assert "SMOKE = paths.smoke()" in code[0].source

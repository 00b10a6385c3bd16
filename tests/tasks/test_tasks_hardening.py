"""Hardening of the taskset commands: an existing taskset is never lost, and an input that
cannot be read is one line on stderr (exit 2), never a traceback.

Every bad file is built here with pyarrow/pandas under ``tmp_path``: ``large_string`` text
(what recent pandas and the hub's parquet writer produce), list-typed ground truths, a parquet
cut to half its bytes, a 0-byte file, random bytes and a csv with an unterminated quote.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mathagent import cli, outputs, paths, tasks
from mathagent.tasks import io as tasks_io

FIXTURES = Path(__file__).parent / "fixtures"  # test-only inputs (broken files)
AIME_JSONL = paths.SAMPLES_DIR / "aime_style.jsonl"
RATES = list(tasks.GURU_PASS_RATE_KEYS)


def _run(argv, capsys):
    rc = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _error_line(err: str) -> str:
    """The one line a failing command prints (tqdm's erased bar may precede it on it)."""
    assert "Traceback" not in err
    assert err.count("\n") == 1, err
    line = err.rsplit("\r", 1)[-1].rstrip("\n")
    assert line.startswith("error: "), line
    return line


def _snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def _splits(folder):
    return [s for s in tasks.SPLITS if (folder / f"{s}.parquet").is_file()]


def _leftovers(folder):
    """Temporary folders of a staged write left beside ``folder``."""
    return [p.name for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name}.")]


@pytest.fixture()
def guru_parquet(tmp_path):
    dst = tmp_path / "math__combined_fixture.parquet"
    pq.write_table(tasks.read_raw_table(paths.SAMPLES_DIR / "guru_raw.jsonl"), dst)
    return dst


@pytest.fixture()
def measured(tmp_path):
    """A taskset with train and test splits and measured pass-rate columns in train."""
    out = tmp_path / "measured"
    tasks.write_arithmetic(out, n_train=40, n_test=10, seed=1)
    frame = tasks.read_split(out, "train")
    frame[tasks.WEAK_KEY] = 0.25
    frame[tasks.STRONG_KEY] = 0.75
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), out / "train.parquet")
    return out


# ---------------------------------------------------------------- --out keeps what is there


def test_prepare_data_keeps_an_existing_taskset_without_force(guru_parquet, measured, capsys):
    before = _snapshot(measured)
    rc, _, err = _run(["prepare-data", "--input", guru_parquet, "--out", measured], capsys)
    assert rc == 2
    line = _error_line(err)
    assert str(measured) in line and "--force" in line and "test" in line
    assert _snapshot(measured) == before  # train, its measured columns and test untouched


def test_prepare_aime_force_replaces_only_the_test_split(measured, capsys):
    before = _snapshot(measured)
    rc, _, err = _run(["prepare-aime", "--input", AIME_JSONL, "--out", measured], capsys)
    assert rc == 2 and "--force" in _error_line(err)
    assert _snapshot(measured) == before

    rc, out, _ = _run(["prepare-aime", "--input", AIME_JSONL, "--out", measured, "--force"],
                      capsys)
    assert rc == 0
    after = _snapshot(measured)
    assert after[Path("train.parquet")] == before[Path("train.parquet")]  # measured columns kept
    assert tasks.WEAK_KEY in tasks.read_split(measured, "train").columns
    assert list(tasks.read_split(measured, "test")["answer"]) == ["#### 19", "#### 60",
                                                                  "#### 576", "#### 14"]
    prov = tasks.read_provenance(measured)
    assert prov["kind"] == "aime" and prov["kept_splits"]["train"]["kind"] == "arithmetic"
    assert f"{measured}: replaced split(s) test and provenance.json; kept train" in out


def test_prepare_data_force_replaces_its_splits_and_says_so(guru_parquet, tmp_path, capsys):
    out = tmp_path / "guru"
    rc, _, _ = _run(["prepare-data", "--input", guru_parquet, "--out", out, "--val-fraction",
                     "0.3", "--missing-pass-rate", "mean"], capsys)
    assert rc == 0 and _splits(out) == ["train", "validation"]
    rc, _, _ = _run(["prepare-aime", "--input", AIME_JSONL, "--out", out, "--force"], capsys)
    assert rc == 0 and _splits(out) == ["train", "validation", "test"]
    test_bytes = (out / "test.parquet").read_bytes()
    # no validation asked for this time: the old one (rows of the same input) must go, and
    # the message says so; the AIME test split stays
    rc, stdout, _ = _run(["prepare-data", "--input", guru_parquet, "--out", out, "--force"],
                         capsys)
    assert rc == 0
    assert _splits(out) == ["train", "test"]
    assert (out / "test.parquet").read_bytes() == test_bytes
    assert f"{out}: replaced split(s) train, validation and provenance.json; kept test" in stdout
    prov = tasks.read_provenance(out)
    assert prov["kind"] == "guru-math" and prov["kept_splits"]["test"]["kind"] == "aime"
    assert len(tasks.read_split(out, "train")) == 7


def test_a_write_failing_midway_leaves_the_old_taskset(guru_parquet, tmp_path, capsys,
                                                       monkeypatch):
    out = tmp_path / "guru"
    tasks.prepare_guru(guru_parquet, out, tasks.GuruOptions(val_fraction=0.3, seed=1))
    (out / "notes.txt").write_text("mine\n")
    before = _snapshot(out)
    real_write = pq.write_table
    calls = []

    def write_then_fail(*args, **kwargs):
        calls.append(args[1])
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(*args, **kwargs)

    monkeypatch.setattr(tasks_io.pq, "write_table", write_then_fail)
    rc, _, err = _run(["prepare-data", "--input", guru_parquet, "--out", out, "--force",
                       "--val-fraction", "0.3", "--missing-pass-rate", "mean"], capsys)
    assert len(calls) == 2  # the first split was written, the second failed
    assert rc == 2
    line = _error_line(err)
    assert str(out) in line and "No space left on device" in line and "left as it was" in line
    assert _snapshot(out) == before
    assert _leftovers(out) == []


def test_library_calls_replace_by_default_and_refuse_when_asked(guru_parquet, tmp_path):
    out = tmp_path / "guru"
    tasks.prepare_guru(guru_parquet, out)
    tasks.prepare_guru(guru_parquet, out)  # notebooks re-run into their scratch folders
    with pytest.raises(outputs.OutputError, match=r"guru: already holds a taskset .*--force"):
        tasks.prepare_guru(guru_parquet, out, force=False)
    with pytest.raises(outputs.OutputError, match="already holds a taskset"):
        tasks.save_taskset({"test": tasks.read_split(out)}, out, {}, force=False)
    # an empty folder (paths.new_run_dir makes those) is free to write
    (tmp_path / "empty").mkdir()
    tasks.prepare_aime(AIME_JSONL, tmp_path / "empty", force=False)
    assert _splits(tmp_path / "empty") == ["test"]


# ---------------------------------------------------------------- unreadable inputs


def _half(path, dst):
    data = path.read_bytes()
    dst.write_bytes(data[: len(data) // 2])
    return dst


@pytest.mark.parametrize("kind", ["empty", "truncated", "corrupt", "random"])
@pytest.mark.parametrize("command", ["prepare-data", "prepare-aime"])
def test_broken_parquet_is_one_line(guru_parquet, tmp_path, capsys, kind, command):
    bad = tmp_path / f"{kind}.parquet"
    if kind == "empty":
        bad.write_bytes(b"")
    elif kind == "truncated":
        _half(guru_parquet, bad)
    elif kind == "corrupt":  # footer intact, data pages overwritten
        data = bytearray(guru_parquet.read_bytes())
        end = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
        data[4:end] = np.random.default_rng(0).bytes(end - 4)
        bad.write_bytes(bytes(data))
        assert pq.read_metadata(bad).num_rows == 17
    else:
        bad.write_bytes(np.random.default_rng(0).bytes(4096))
    rc, _, err = _run([command, "--input", bad, "--out", tmp_path / "o"], capsys)
    assert rc == 2
    line = _error_line(err)
    assert f"error: {bad}: " in line
    assert ("0 bytes" in line) if kind == "empty" else ("not a readable parquet file" in line)
    assert not (tmp_path / "o").exists()


def test_malformed_text_inputs_name_file_and_line(tmp_path, capsys):
    csv = tmp_path / "aime.csv"
    csv.write_text('id,problem,answer\nx-1,"What is 2 + 2?,4\nx-2,Compute 3.,3\n')
    rc, _, err = _run(["prepare-aime", "--input", csv, "--out", tmp_path / "o"], capsys)
    assert rc == 2
    line = _error_line(err)
    assert f"{csv}: line 2: not valid CSV" in line and "unterminated quote" in line
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("id,problem,answer\nx-1,What is 2 + 2?,4,extra\n")
    rc, _, err = _run(["prepare-aime", "--input", ragged, "--out", tmp_path / "o"], capsys)
    assert rc == 2 and f"{ragged}: line 2: 4 field(s) where the header has 3" in _error_line(err)
    for name, data in (("bin.jsonl", np.random.default_rng(1).bytes(512)),
                       ("empty.csv", b""), ("array.json", b'[{"problem": "x", "answer": 1},\n')):
        f = tmp_path / name
        f.write_bytes(data)
        rc, _, err = _run(["prepare-aime", "--input", f, "--out", tmp_path / "o"], capsys)
        assert rc == 2 and f"error: {f}: " in _error_line(err), name
    assert not (tmp_path / "o").exists()


def _large(t: pa.DataType) -> pa.DataType:
    """``t`` with every string (at any depth) made ``large_string``."""
    if pa.types.is_string(t):
        return pa.large_string()
    if pa.types.is_list(t):
        return pa.large_list(_large(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_large(f.type)) for f in t])
    return t


def test_large_string_guru_file_converts_like_plain_text(guru_parquet, tmp_path, capsys):
    table = pq.read_table(guru_parquet)
    large = table.cast(pa.schema([f.with_type(_large(f.type)) for f in table.schema]))
    assert pa.types.is_large_string(large.schema.field("data_source").type)
    assert pa.types.is_large_string(
        large.schema.field("reward_model").type.field("ground_truth").type)
    pq.write_table(large, tmp_path / "large.parquet")
    rc, _, err = _run(["prepare-data", "--input", tmp_path / "large.parquet", "--out",
                       tmp_path / "a"], capsys)
    assert rc == 0, err
    rc, _, _ = _run(["prepare-data", "--input", guru_parquet, "--out", tmp_path / "b"], capsys)
    assert rc == 0
    a, b = tasks.read_split(tmp_path / "a"), tasks.read_split(tmp_path / "b")
    assert a.equals(b) and list(a["answer"])[:2] == ["#### 30", "#### \\frac{3}{4}"]
    assert pq.read_schema(tmp_path / "a" / "train.parquet").field("answer").type == pa.string()


def _guru_rows(truths):
    return [{"prompt": [{"role": "user", "content": f"Q{i}? {tasks.BOXED_SENTENCE}"}],
             "reward_model": {"ground_truth": t, "style": "rule"},
             "extra_info": {"index": 500 + i},
             RATES[0]: 0.5, RATES[1]: 0.5} for i, t in enumerate(truths)]


@pytest.mark.parametrize("list_type", [pa.list_(pa.string()), pa.large_list(pa.large_string())])
def test_list_typed_ground_truths(tmp_path, capsys, list_type):
    rows = _guru_rows([["30"], ["7", "7"], [], [None], [" \\frac{1}{2} "]])
    schema = pa.schema([("prompt", pa.list_(pa.struct([("role", pa.string()),
                                                        ("content", pa.string())]))),
                        ("reward_model", pa.struct([("ground_truth", list_type),
                                                    ("style", pa.string())])),
                        ("extra_info", pa.struct([("index", pa.int64())])),
                        (RATES[0], pa.float64()), (RATES[1], pa.float64())])
    pq.write_table(pa.Table.from_pylist(rows, schema), tmp_path / "lists.parquet")
    rc, _, err = _run(["prepare-data", "--input", tmp_path / "lists.parquet", "--out",
                       tmp_path / "o"], capsys)
    assert rc == 0, err
    frame = tasks.read_split(tmp_path / "o")
    assert list(frame["answer"]) == ["#### 30", "#### 7", "#### \\frac{1}{2}"]
    assert list(frame["question"]) == ["Q0?", "Q1?", "Q4?"]
    dropped = tasks.read_provenance(tmp_path / "o")["counts"]["dropped_rows"]
    assert dropped["missing ground truth"] == [2, 3]  # [] and [null]: no truth

    several = _guru_rows([["5"], ["1", "2"]])
    pq.write_table(pa.Table.from_pylist(several, schema), tmp_path / "several.parquet")
    rc, _, err = _run(["prepare-data", "--input", tmp_path / "several.parquet", "--out",
                       tmp_path / "s"], capsys)
    assert rc == 2
    line = _error_line(err)
    assert f"{tmp_path / 'several.parquet'}: row 1 (extra_info.index=501), column " \
           "'reward_model.ground_truth': 2 different ground truths ['1', '2']" in line
    assert not (tmp_path / "s").exists()


def test_numeric_list_ground_truth_prints_as_integer():
    rows = _guru_rows([[42.0], [2.5]])
    splits, _ = tasks.convert_guru(pa.Table.from_pylist(rows))
    assert list(splits["train"]["answer"]) == ["#### 42", "#### 2.5"]


def _guru_aime(path, large=False):
    """An AIME file in guru's schema (its eval files look like this)."""
    rows = [{"data_source": "aime", "prompt": [{"role": "user", "content":
                                                f"Problem {i}. {tasks.BOXED_SENTENCE}"}],
             "reward_model": {"ground_truth": truth, "style": "rule"},
             "extra_info": {"index": i}} for i, truth in enumerate(["033", "17"])]
    table = pa.Table.from_pylist(rows)
    if large:
        table = table.cast(pa.schema([f.with_type(_large(f.type)) for f in table.schema]))
    pq.write_table(table, path)
    return path


@pytest.mark.parametrize("large", [False, True])
def test_guru_schema_aime_file(tmp_path, capsys, large):
    src = _guru_aime(tmp_path / "aime_guru.parquet", large)
    for extra in (["--question-column", "prompt", "--answer-column", "reward_model"],
                  ["--question-column", "prompt"], []):
        out = tmp_path / f"o{len(extra)}{large}"
        rc, stdout, err = _run(["prepare-aime", "--input", src, "--out", out, *extra], capsys)
        assert rc == 0, err
        frame = tasks.read_split(out, "test")
        assert list(frame["question"]) == ["Problem 0.", "Problem 1."]
        assert list(frame["answer"]) == ["#### 33", "#### 17"]
        assert "answer='reward_model.ground_truth'" in stdout


def test_aime_list_answers_one_converts_several_fail(tmp_path, capsys):
    table = pa.table({"problem": ["P1", "P2"],
                      "answer": pa.array([["19"], ["033"]], pa.list_(pa.large_string()))})
    frame, _ = tasks.convert_aime(table)
    assert list(frame["answer"]) == ["#### 19", "#### 33"]
    pq.write_table(pa.table({"problem": ["P1", "P2"], "answer": [["19"], ["1", "2"]]}),
                   tmp_path / "two.parquet")
    rc, _, err = _run(["prepare-aime", "--input", tmp_path / "two.parquet", "--out",
                       tmp_path / "o"], capsys)
    assert rc == 2
    assert "row 1, column 'answer': 2 different ground truths" in _error_line(err)


def test_question_column_of_another_type_is_one_line(tmp_path, capsys):
    pq.write_table(pa.table({"problem": pa.array([{"a": 1}, {"a": 2}]), "answer": [1, 2]}),
                   tmp_path / "odd.parquet")
    rc, _, err = _run(["prepare-aime", "--input", tmp_path / "odd.parquet", "--out",
                       tmp_path / "o"], capsys)
    assert rc == 2 and "question column 'problem' has type struct" in _error_line(err)


def test_loading_a_broken_split_names_the_file(guru_parquet, tmp_path):
    out = tmp_path / "guru"
    tasks.prepare_guru(guru_parquet, out)
    _half(out / "train.parquet", out / "train.parquet")
    for load in (tasks.load_taskset, tasks.read_split):
        with pytest.raises(tasks.TasksetError, match=r"guru/train\.parquet: not a readable "
                                                     r"parquet file"):
            load(out, "train")
    (out / "train.parquet").write_bytes(b"")
    with pytest.raises(tasks.TasksetError, match=r"train\.parquet: the file is empty"):
        tasks.load_taskset(out, "train")
    assert json.loads((out / "provenance.json").read_text())["kind"] == "guru-math"

"""The arithmetic level sets: the ``qwen`` set's design, its committed taskset, the command.

Answers are re-derived here from the question text alone (bare expressions evaluated by
Python itself, stories replayed sentence by sentence), not from the generator's own fields.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from dataclasses import asdict

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mathagent import cli, paths, tasks
from mathagent.rollouts import measure_pass_rates
from mathagent.settings import SettingsError
from mathagent.tasks import arithmetic, arithmetic_qwen
from mathagent.tasks.arithmetic_qwen import ExpressionLevel, long_hand_steps

QWEN = tasks.QWEN_LEVELS
COLUMNS = list(tasks.GENERATOR_COLUMNS)

RESULTS = paths.REPO_ROOT / "results" / "qwen_features"


@pytest.fixture(scope="module")
def qwen_splits():
    return tasks.generate_level_set("qwen")


def _run_cli(argv, capsys):
    rc = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _python_value(expression: str) -> int:
    """Python's own evaluation of an integer + - * expression (anything else is refused)."""
    tree = ast.parse(expression, mode="eval")
    allowed = (ast.Expression, ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Constant)
    assert all(isinstance(node, allowed) for node in ast.walk(tree)), expression
    return eval(compile(tree, "<task>", "eval"), {"__builtins__": {}})  # noqa: S307


_TWO_TERMS = [
    (r"What is the sum of (\d+) and (\d+)\?", lambda a, b: a + b),
    (r"Add (\d+) and (\d+)\.", lambda a, b: a + b),
    (r"What is (\d+) minus (\d+)\?", lambda a, b: a - b),
    (r"Subtract (\d+) from (\d+)\.", lambda b, a: a - b),
    (r"What is the product of (\d+) and (\d+)\?", lambda a, b: a * b),
    (r"Multiply (\d+) by (\d+)\.", lambda a, b: a * b),
]
_BARE = r"(?:What is |Compute |Calculate |Evaluate |Work out )?([\d ()+×-]+?)(?: = \?|\?|\.)"


def _answer_from_question(question: str, word: bool) -> int:
    if not word:
        for pattern, value in _TWO_TERMS:
            m = re.fullmatch(pattern, question)
            if m:
                return value(int(m.group(1)), int(m.group(2)))
        m = re.fullmatch(_BARE, question)
        assert m, question
        return _python_value(m.group(1).replace("×", "*"))
    sentences = re.split(r"(?<=[.?]) ", question)
    assert sentences[-1].startswith("How many"), question
    total = int(re.search(r"\d+", sentences[0]).group())
    for sentence in sentences[1:-1]:
        (b,) = map(int, re.findall(r"\d+", sentence))
        if "times" in sentence:
            total *= b
        elif "more" in sentence:
            total += b
        else:
            assert re.search(r"gives away|loses|uses", sentence), sentence
            assert b <= total, question  # a story never takes away more than there is
            total -= b
    return total


# ---------------------------------------------------------------- design


def test_level_sets_are_known_by_name():
    assert tasks.level_set("smollm2") is tasks.SMOLLM2_LEVELS
    assert tasks.level_set("qwen") is QWEN
    assert tasks.LEVEL_SET_NAMES == ("smollm2", "qwen")
    assert tasks.SMOLLM2_LEVELS.levels == arithmetic.ARITHMETIC_LEVELS
    assert QWEN.out_dir == paths.ARITHMETIC_QWEN_DIR
    assert QWEN.feature_keys == ("qwen_short_pass_rate", "qwen_bare_pass_rate")
    with pytest.raises(SettingsError, match="unknown level set 'llama'.*smollm2, qwen"):
        tasks.level_set("llama")
    table = tasks.level_table("qwen")
    assert list(table.index) == list(range(11))
    assert table["train_share"].tolist() == list(QWEN.train_shares)
    assert tasks.level_table().equals(tasks.level_table(tasks.SMOLLM2_LEVELS))


def test_long_hand_steps_counts_schoolbook_digit_steps():
    assert long_hand_steps("7 + 8") == 1
    assert long_hand_steps("12 - 345") == 3
    assert long_hand_steps("123 * 4") == 3                  # one row of digit products
    assert long_hand_steps("12 * 34") == 2 * 2 + 1 * 4      # two rows, then one addition
    assert long_hand_steps("(1 + 2) * 3") == 2
    assert long_hand_steps("((10 + 5) * 7)") == 2 + 2      # 15 x 7, intermediate used
    with pytest.raises(ValueError, match="only integers"):
        long_hand_steps("2 ** 8")


def test_qwen_levels_rise_in_construction_difficulty_and_tiers(qwen_splits):
    for split, frame in qwen_splits.items():
        steps = frame.groupby("difficulty")["expression"].agg(
            lambda s: np.mean([long_hand_steps(e) for e in s]))
        assert list(steps.index) == list(range(11)), split
        assert (np.diff(steps.to_numpy()) > 0).all(), (split, steps.round(2).tolist())
    tiers = [lv.tier for lv in QWEN.levels]
    assert tiers == sorted(tiers, key=arithmetic_qwen.TIERS.index)
    assert tiers.count("easy") == 2 and tiers.count("middle") == 3 and tiers.count("hard") == 6
    rates = {t: [lv.no_tool_rate for lv in QWEN.levels if lv.tier == t] for t in arithmetic_qwen.TIERS}
    # the tiers separate the measured rates: every easy level above every middle one, and so on
    assert min(rates["easy"]) > max(rates["middle"]) > max(r for r in rates["hard"] if r is not None)
    assert all(r is not None for r in rates["easy"] + rates["middle"])


def test_expression_levels_reject_bad_shapes():
    with pytest.raises(ValueError, match="letters must be a, b, c"):
        ExpressionLevel(0, "easy", "", "b + a", ((1, 9), (1, 9)))
    with pytest.raises(ValueError, match="one positive range per letter"):
        ExpressionLevel(0, "easy", "", "a + b", ((1, 9),))
    with pytest.raises(ValueError, match="'\\?' needs choices"):
        ExpressionLevel(0, "easy", "", "a ? b", ((1, 9), (1, 9)))
    with pytest.raises(ValueError, match="tier 'trivial'"):
        ExpressionLevel(0, "trivial", "", "a + b", ((1, 9), (1, 9)))
    with pytest.raises(ValueError, match="word_share must be 0"):
        ExpressionLevel(0, "hard", "", "(a - b) * (c + d)", ((1, 9),) * 4, word_share=0.5)
    with pytest.raises(ValueError, match="one share per level"):
        dataclasses.replace(QWEN, train_shares=QWEN.train_shares[:-1])


# ---------------------------------------------------------------- generated tasks


def test_every_answer_follows_from_its_question_and_expression(qwen_splits):
    both = pd.concat(list(qwen_splits.values()), ignore_index=True)
    assert both["answer"].str.fullmatch(r"#### (0|[1-9]\d*)").all()   # integers, no sign
    truths = both["answer"].str.removeprefix("#### ").astype(int)
    assert truths.max() < 2**31
    from_expression = [_python_value(e) for e in both["expression"]]
    from_question = [_answer_from_question(q, w)
                     for q, w in zip(both["question"], both["word_problem"], strict=True)]
    assert from_expression == truths.tolist()
    assert from_question == truths.tolist()
    for split, frame in qwen_splits.items():
        tasks.validate_taskset(frame, source=split)
        assert set(frame.columns) == set(COLUMNS)


def test_levels_produce_their_shapes(qwen_splits):
    train = qwen_splits["train"]
    for level in QWEN.levels:
        rows = train[train["difficulty"] == level.difficulty]
        assert (rows["n_terms"] == level.n_terms).all()
        assert (rows["ops"] == level.ops).all()
        numbers = rows["expression"].map(lambda e: [int(x) for x in re.findall(r"\d+", e)])
        assert (numbers.map(len) == level.n_terms).all()
        assert numbers.map(min).min() >= min(level.min_operand, level.times[0])
        assert numbers.map(max).max() <= level.max_operand
        share = rows["word_problem"].mean()
        assert share == 0.0 if level.word_share == 0 else abs(share - level.word_share) < 0.1
    hard = train[train["difficulty"] == 10]
    bare = hard["question"]
    assert bare.str.contains(r"\(\d{4} × \d{2} - \d{4}\) × \(\d{3} \+ \d{3}\) - \d{4}").all()
    nested = train[(train["difficulty"] == 9) & ~train["word_problem"]]["question"]
    assert nested.str.contains(r"\(\(\d{3} \+ \d{3}\) × \d{2} - \d{3}\) × \d{2}").all()
    assert 0.3 < train["word_problem"].mean() < 0.5


def test_no_duplicate_or_overlapping_tasks(qwen_splits):
    train, test = qwen_splits["train"], qwen_splits["test"]
    both = pd.concat([train, test])
    assert both["question"].is_unique and both["task_id"].is_unique
    assert both["task_id"].tolist() == [arithmetic.task_id(q) for q in both["question"]]
    assert not set(train["task_id"]) & set(test["task_id"])
    assert not set(train["question"]) & set(test["question"])


def test_shares_and_counts_are_as_declared(qwen_splits):
    train, test = qwen_splits["train"], qwen_splits["test"]
    assert len(train) == QWEN.n_train >= 4000 and len(test) == QWEN.n_test >= 600
    for frame, n, shares in ((train, QWEN.n_train, QWEN.train_shares),
                             (test, QWEN.n_test, QWEN.test_shares)):
        counts = frame["difficulty"].value_counts().sort_index()
        assert counts.tolist() == tasks.level_counts(n, shares)
    assert test["difficulty"].value_counts().tolist() == [60] * 11
    tier = train["difficulty"].map({lv.difficulty: lv.tier for lv in QWEN.levels})
    assert tier.value_counts(normalize=True).round(4).to_dict() == {
        "hard": 0.65, "middle": 0.2, "easy": 0.15}
    # the design goal: under random selection, the mean no-tool pass rate stays below 0.2
    rate = train["difficulty"].map({lv.difficulty: lv.no_tool_rate or 0.0 for lv in QWEN.levels})
    assert 0.1 < rate.mean() < 0.2
    assert rate.mean() == pytest.approx(arithmetic_qwen.QWEN_EXPECTED_RANDOM_PASS_RATE, abs=1e-3)


def test_generation_is_deterministic_and_follows_the_seed():
    a = tasks.generate_level_set("qwen", n_train=220, n_test=33, seed=5)
    b = tasks.generate_level_set("qwen", n_train=220, n_test=33, seed=5)
    c = tasks.generate_level_set("qwen", n_train=220, n_test=33, seed=6)
    for split in ("train", "test"):
        pd.testing.assert_frame_equal(a[split], b[split])
    assert list(a["train"]["question"]) != list(c["train"]["question"])


# ---------------------------------------------------------------- committed tasksets


def test_committed_qwen_taskset_is_a_fresh_generation_with_its_seed():
    prov = tasks.read_provenance(paths.ARITHMETIC_QWEN_DIR)
    assert prov["level_set"] == "qwen" and prov["options"]["seed"] == QWEN.seed
    regenerated = tasks.generate_level_set("qwen", prov["options"]["n_train"],
                                           prov["options"]["n_test"], prov["options"]["seed"])
    for split in ("train", "test"):
        frame = tasks.read_split(paths.ARITHMETIC_QWEN_DIR, split)
        pd.testing.assert_frame_equal(frame[COLUMNS], regenerated[split][COLUMNS])
        measured = [k for k in QWEN.feature_keys if k in frame.columns]
        tasks.validate_taskset(frame, measured)  # features, once measured, are pass rates
    assert prov["levels"] == json.loads(json.dumps([asdict(lv) for lv in QWEN.levels]))
    assert prov["level_shares"] == {"train": list(QWEN.train_shares),
                                    "test": list(QWEN.test_shares)}
    assert prov["design"]["tier_shares"]["train"] == {"easy": 0.15, "middle": 0.2, "hard": 0.65}
    assert prov["versions"]["arithmetic_generator"] == arithmetic.GENERATOR_VERSION
    assert prov["feature_columns"]["weak"] == "qwen_short_pass_rate"
    assert prov["feature_columns"]["strong"] == "qwen_bare_pass_rate"
    assert (paths.ARITHMETIC_QWEN_DIR / "train.parquet").stat().st_size < 400_000


def test_committed_qwen_taskset_loads_with_its_features_and_in_trinity():
    for split, n in (("train", QWEN.n_train), ("test", QWEN.n_test)):
        ds = tasks.load_taskset(paths.ARITHMETIC_QWEN_DIR, split, QWEN.feature_keys)
        assert len(ds) == n and set(QWEN.feature_keys) <= set(ds.column_names)
    rows = tasks.read_with_trinity(paths.ARITHMETIC_QWEN_DIR, "test")
    assert len(rows) == QWEN.n_test
    assert rows[0].raw_task["question"] == tasks.read_split(paths.ARITHMETIC_QWEN_DIR,
                                                            "test")["question"][0]


def test_committed_qwen_features_are_as_the_design_needs():
    """The measured references, both on both splits: the policy's own rate (strong, 512 tokens)
    falls by tier and starts below 0.2 under random selection; the short budget (weak, 128
    tokens) is clearly weaker on the same tasks. The Python tool alone (test split, kept beside
    the taskset) scores below both references."""
    weak, strong = QWEN.feature_keys
    tier = {lv.difficulty: lv.tier for lv in QWEN.levels}
    frames = {split: tasks.read_split(paths.ARITHMETIC_QWEN_DIR, split)
              for split in ("train", "test")}
    train = frames["train"]
    by_tier = train.groupby(train["difficulty"].map(tier))[strong].mean()
    assert by_tier["easy"] > by_tier["middle"] > by_tier["hard"]
    assert 0.1 < train[strong].mean() < 0.2
    for frame in frames.values():
        assert frame[weak].mean() < 0.7 * frame[strong].mean()
    measured = tasks.read_provenance(paths.ARITHMETIC_QWEN_DIR)["measurements"]
    beside = json.loads((RESULTS / "measurement_provenance.json").read_text())
    tool = pd.read_csv(RESULTS / "tool_test_pass_rates.csv")
    assert tool["task_id"].tolist() == frames["test"]["task_id"].tolist()
    assert tool["qwen_tool_pass_rate"].mean() < frames["test"][weak].mean()
    checks = [(measured[column][split], frames[split], column, n, tokens, False)
              for column, tokens in ((strong, 512), (weak, 128))
              for split, n in (("train", 4), ("test", 8))]
    checks.append((beside["qwen_tool_pass_rate"]["test"], tool, "qwen_tool_pass_rate", 4, 512,
                   True))
    for record, frame, column, n, tokens, python_tool in checks:
        assert record["n"] == n and record["failed_rollouts"] == 0
        settings = record["settings"]
        assert settings["meta_tool"] is False and settings["python_tool"] is python_tool
        assert settings["judge"] == "gsm8k_judge" and settings["max_tokens"] == tokens
        assert frame[column].mean() == pytest.approx(record["mean_pass_rate"])


def test_smollm2_level_set_still_gives_data_arithmetic():
    """The command's path (generate_level_set) reproduces data/arithmetic row for row."""
    regenerated = tasks.generate_level_set("smollm2")
    for split in ("train", "test"):
        pd.testing.assert_frame_equal(regenerated[split],
                                      tasks.generate_arithmetic()[split])
        frame = tasks.read_split(paths.ARITHMETIC_DIR, split)
        pd.testing.assert_frame_equal(frame[COLUMNS], regenerated[split][COLUMNS])
    assert tasks.read_provenance(paths.ARITHMETIC_DIR)["options"]["seed"] == \
        tasks.SMOLLM2_LEVELS.seed


# ---------------------------------------------------------------- the command


def _snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _add_feature(folder, column, value):
    frame = tasks.read_split(folder, "train")
    frame[column] = value
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), folder / "train.parquet")


def test_command_writes_the_named_level_set_and_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "aq"
    rc, stdout, _ = _run_cli(["generate-arithmetic", "--levels", "qwen", "--out", out,
                              "--n-train", 110, "--n-test", 22, "--seed", 3], capsys)
    assert rc == 0 and "train: 110 tasks" in stdout and "9: 12, 10: 11" in stdout
    prov = tasks.read_provenance(out)
    assert prov["level_set"] == "qwen"
    assert prov["options"] == {"levels": "qwen", "n_train": 110, "n_test": 22, "seed": 3}
    assert prov["command"] == ("python -m mathagent generate-arithmetic --levels qwen "
                               "--n-train 110 --n-test 22 --seed 3")
    pd.testing.assert_frame_equal(tasks.read_split(out, "test"),
                                  tasks.generate_level_set("qwen", 110, 22, 3)["test"])

    _add_feature(out, tasks.QWEN_FEATURE_KEYS[0], 0.5)
    before = _snapshot(out)
    rc, _, err = _run_cli(["generate-arithmetic", "--levels", "qwen", "--out", out], capsys)
    assert rc == 2 and err.count("\n") == 1 and err.startswith("error: ")
    assert "qwen_short_pass_rate" in err and "--force" in err
    assert _snapshot(out) == before
    # another level set into this folder is refused too, even without measured columns
    rc, _, _ = _run_cli(["generate-arithmetic", "--levels", "qwen", "--out", out, "--n-train",
                         110, "--n-test", 22, "--force"], capsys)
    assert rc == 0 and tasks.QWEN_FEATURE_KEYS[0] not in tasks.read_split(out).columns
    before = _snapshot(out)
    rc, _, err = _run_cli(["generate-arithmetic", "--out", out], capsys)
    assert rc == 2 and err.count("\n") == 1
    assert "holds the 'qwen' level set, not 'smollm2'" in err and "--force" in err
    assert _snapshot(out) == before
    rc, _, _ = _run_cli(["generate-arithmetic", "--out", out, "--n-train", 40, "--n-test", 8,
                         "--force"], capsys)
    assert rc == 0 and tasks.read_provenance(out)["level_set"] == "smollm2"


def test_command_default_folder_and_bad_input(tmp_path, monkeypatch, capsys):
    from mathagent.tasks import commands

    # without --out the command writes the level set's own folder
    moved = dataclasses.replace(QWEN, out_dir=tmp_path / "default_qwen")
    monkeypatch.setattr(commands, "level_set", lambda name: moved)
    rc, stdout, _ = _run_cli(["generate-arithmetic", "--levels", "qwen", "--n-train", 22,
                              "--n-test", 11], capsys)
    assert rc == 0 and f"wrote {moved.out_dir}" in stdout
    assert tasks.read_provenance(moved.out_dir)["level_set"] == "qwen"

    rc, _, err = _run_cli(["generate-arithmetic", "--levels", "qwen", "--out", tmp_path / "z",
                           "--n-train", 0], capsys)
    assert rc == 2 and err == "error: --n-train and --n-test must be at least 1, got 0 and 660\n"
    assert not (tmp_path / "z").exists()
    with pytest.raises(SystemExit) as exc:
        cli.main(["generate-arithmetic", "--levels", "llama"])
    assert exc.value.code == 2
    assert "invalid choice: 'llama'" in capsys.readouterr().err


# ---------------------------------------------------------------- features come later


class _StubBackend:
    """In-process stand-in for a model: task row r gets reward (r + rollout) % 2."""

    seeds_per_task = True

    def settings(self):
        return {"backend": "stub"}

    def run_batch(self, batch, n, seed):
        return [[{"rollout": r, "reward": float((t["row"] + r) % 2),
                  "accuracy": float((t["row"] + r) % 2), "response": "x", "extracted": None,
                  "latency_s": 0.0, "tokens": 1, "error": None} for r in range(n)]
                for t in batch]


def test_measure_pass_rates_adds_a_feature_column_to_a_qwen_taskset(tmp_path):
    out = tmp_path / "arithmetic_qwen"
    tasks.write_arithmetic(out, n_train=22, n_test=11, seed=1, levels="qwen")
    result = measure_pass_rates(out, tasks.QWEN_FEATURE_KEYS[0], _StubBackend(), n=4,
                                chunk_size=5, rollouts_dir=tmp_path / "side", progress=False)
    assert result.complete
    ds = tasks.load_taskset(out, "train", feature_keys=[tasks.QWEN_FEATURE_KEYS[0]])
    assert ds[tasks.QWEN_FEATURE_KEYS[0]] == [0.5] * 22
    prov = tasks.read_provenance(out)
    assert prov["level_set"] == "qwen"                      # the generator's record is kept
    assert prov["measurements"][tasks.QWEN_FEATURE_KEYS[0]]["train"]["n"] == 4
    frame = tasks.read_split(out, "train")
    assert frame[COLUMNS].equals(tasks.generate_level_set("qwen", 22, 11, 1)["train"][COLUMNS])
    with pytest.raises(tasks.TasksetError, match="measured column.*qwen_short_pass_rate"):
        tasks.write_arithmetic(out, n_train=22, n_test=11, seed=1, levels="qwen")

"""What notebook 01 checks and shows of the generated tasksets: that a folder is what its
provenance command writes (:func:`tasks.check_regeneration`), and the ``qwen`` set's tiers with
their measured pass rates (:func:`tasks.tier_table`)."""

from __future__ import annotations

import pandas as pd
import pytest

from mathagent import paths, tasks


@pytest.mark.parametrize("folder", [paths.ARITHMETIC_DIR, paths.ARITHMETIC_QWEN_DIR],
                         ids=lambda p: p.name)
def test_the_committed_tasksets_are_fresh_generations(folder):
    """Both level sets: the smollm2 set's provenance predates the "levels" option."""
    table = tasks.check_regeneration(folder)
    prov = tasks.read_provenance(folder)
    assert table["tasks"].to_dict() == prov["counts"]["rows"]
    assert table["identical"].all()


def test_a_changed_row_is_named(tmp_path):
    folder = tmp_path / "arith"
    tasks.write_arithmetic(folder, n_train=30, n_test=5, seed=2)
    assert tasks.check_regeneration(folder)["tasks"].to_dict() == {"train": 30, "test": 5}
    frame = pd.read_parquet(folder / "test.parquet")
    frame.loc[3, "question"] = "What is 1 + 1?"
    frame.to_parquet(folder / "test.parquet", index=False)
    with pytest.raises(tasks.TasksetError, match=r"test\.parquet: row 3 differs from a fresh "
                                                 r"generation \(python -m mathagent "
                                                 r"generate-arithmetic --levels smollm2 "
                                                 r"--n-train 30 --n-test 5 --seed 2\)"):
        tasks.check_regeneration(folder)
    frame.head(4).to_parquet(folder / "test.parquet", index=False)
    with pytest.raises(tasks.TasksetError, match=r"test\.parquet: 4 tasks, a fresh generation "
                                                 r"has 5"):
        tasks.check_regeneration(folder)


def test_a_folder_that_was_not_generated_is_refused_in_one_line(tmp_path):
    tasks.save_taskset({"train": pd.DataFrame({"question": ["q?"], "answer": ["#### 1"]})},
                       tmp_path / "mine", {"source": "hand-written"})
    with pytest.raises(tasks.TasksetError, match=r"provenance\.json: not a generated "
                                                 r"arithmetic taskset"):
        tasks.check_regeneration(tmp_path / "mine")


def test_tier_table_of_the_qwen_taskset():
    splits = {s: tasks.read_split(paths.ARITHMETIC_QWEN_DIR, s) for s in ("train", "test")}
    table = tasks.tier_table(splits)
    design = tasks.read_provenance(paths.ARITHMETIC_QWEN_DIR)["design"]
    for split in ("train", "test"):
        shares = table.loc[split, "share"].to_dict()
        assert shares == pytest.approx(design["tier_shares"][split], abs=1e-6)
        assert table.loc[split, "tasks"].sum() == len(splits[split])
        strong = table.loc[split, "qwen_bare_pass_rate"]
        assert strong["easy"] > strong["middle"] > strong["hard"]
    assert table.loc[("train", "hard"), "levels"] == "5-10"
    # a tier's mean, by hand
    train = splits["train"]
    easy = train[train["difficulty"] <= 1]["qwen_short_pass_rate"].mean()
    assert table.loc[("train", "easy"), "qwen_short_pass_rate"] == pytest.approx(easy)


def test_tier_table_leaves_out_a_column_a_split_lacks_and_names_a_bad_split():
    frame = pd.DataFrame({"difficulty": [0, 5, 5, 9], "qwen_bare_pass_rate": [0.5, 0, 0.25, 0]})
    table = tasks.tier_table({"mine": frame})
    assert list(table.columns) == ["levels", "tasks", "share", "qwen_bare_pass_rate"]
    assert table.loc[("mine", "middle"), "tasks"] == 0
    assert table.loc[("mine", "hard"), "qwen_bare_pass_rate"] == pytest.approx(0.25 / 3)
    with pytest.raises(tasks.TasksetError, match="mine: difficulty 11 is no level"):
        tasks.tier_table({"mine": frame.assign(difficulty=[0, 5, 11, 9])})
    with pytest.raises(tasks.TasksetError, match="mine: no 'difficulty' column"):
        tasks.tier_table({"mine": frame.drop(columns="difficulty")})

"""``data/arithmetic_qwen/README.md`` states what the taskset holds: its level table's counts,
the splits' sizes, the share of stories and the test questions that reword a training
question's arithmetic are the parquet files'."""

from __future__ import annotations

import re

import pandas as pd

from mathagent import paths

FOLDER = paths.ARITHMETIC_QWEN_DIR


def test_the_readme_states_what_the_splits_hold():
    text = (FOLDER / "README.md").read_text()
    train, test = (pd.read_parquet(FOLDER / f"{s}.parquet") for s in ("train", "test"))
    rows = re.findall(r"^\| (\d+) \| \w+ \| .* \| (\d+) \| (\d+) \|$", text, re.M)
    assert [(int(level), int(a), int(b)) for level, a, b in rows] == [
        (level, int((train["difficulty"] == level).sum()), int((test["difficulty"] == level).sum()))
        for level in sorted(train["difficulty"].unique())]
    assert f"`train` holds {len(train):,} tasks" in text and f"`test` holds {len(test)}" in text
    assert f"About {round(100 * train['word_problem'].mean())}% of the tasks" in text
    assert not test["question"].isin(set(train["question"])).any()
    same = test[test["expression"].isin(set(train["expression"]))]["difficulty"].value_counts()
    assert (f"{same.sum()} test questions\n({same[0]} of level 0, {same[2]} of level 2)"
            in text) and set(same.index) == {0, 2}

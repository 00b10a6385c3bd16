"""The headline experiment's answer block: the per-arm table and the three computed lines."""

from __future__ import annotations

import numpy as np

from mathagent import paths
from mathagent.report import stats
from mathagent.report.spec import read_spec

QWEN = paths.RESULTS_DIR / "trinity_qwen"


def test_arm_table_is_mean_and_se_over_seeds_at_the_final_step():
    arms = stats.arm_table(QWEN)
    assert list(arms.index) == ["random", "difficulty_based", "bots"]
    runs = stats.read_runs(read_spec(QWEN))
    step = int(arms["step"].iloc[0])
    finals = runs[runs["step"] == step].dropna(subset=["eval_accuracy"])
    for arm, part in finals.groupby("selector"):
        v = part["eval_accuracy"]
        assert arms.at[arm, "seeds"] == len(v)
        assert np.isclose(arms.at[arm, "mean"], v.mean())
        assert np.isclose(arms.at[arm, "se"], v.std(ddof=1) / np.sqrt(len(v)))


def test_verdict_lines_name_the_leader_and_the_power_from_the_differences():
    lines = stats.verdict_lines(QWEN)
    assert len(lines) == 3
    arms = stats.arm_table(QWEN).sort_values("mean", ascending=False)
    best, runner_up = arms.index[:2]
    assert lines[0].startswith(f"**Ahead:** `{best}`") and f"`{runner_up}`" in lines[0]
    exp = read_spec(QWEN)
    diffs = stats.differences(stats.per_seed(exp, stats.read_runs(exp)), int(arms["step"].iloc[0]))
    pair = diffs[diffs["a"].isin([best, runner_up]) & diffs["b"].isin([best, runner_up])]
    assert f"is {stats.se_text(pair['power'].iloc[0])} between" in lines[2]
    clear = (diffs["z"].abs() >= stats.SHOWN).any()
    assert ("clear difference" in lines[1]) == clear
    assert ("cannot confirm" in lines[1]) == (not clear)

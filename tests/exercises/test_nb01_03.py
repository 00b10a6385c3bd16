"""The reference solutions of notebooks 01-03's exercises are right: each is checked against
the package's own functions or against what the exercise asks for."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mathagent import judge, metrics, simulation, tasks
from mathagent.exercises import nb01, nb02, nb03


# -- notebook 01 ---------------------------------------------------------------------------
@pytest.mark.parametrize("p", sorted(nb01.PREDICTIONS))
def test_nb01_predictions_match_the_formula_and_the_sampling(p):
    exact = float(tasks.informative_probability(p, 8))
    assert nb01.PREDICTIONS[p] == pytest.approx(exact, abs=0.006)
    groups = 100_000
    se = np.sqrt(exact * (1 - exact) / groups)
    assert nb01.signal_by_sampling(p, 8, groups) == pytest.approx(exact, abs=4 * se + 1e-9)


def test_nb01_sampling_knows_the_edges():
    assert nb01.signal_by_sampling(0.0, 8, 1000) == 0.0
    assert nb01.signal_by_sampling(1.0, 8, 1000) == 0.0


def test_nb01_broken_pass_rate_is_named_by_file_row_and_column(tmp_path):
    message = nb01.broken_pass_rate(tmp_path)
    assert "\n" not in message
    assert "guru_broken.jsonl" in message and "row 3" in message
    assert "'qwen2.5_7b_pass_rate'" in message and "1.5" in message
    assert not (tmp_path / "guru_broken").exists()  # nothing written for a broken file
    other = nb01.broken_pass_rate(tmp_path / "b", row=5, column="qwen3_30b_pass_rate",
                                  value=-0.25)
    assert "row 5" in other and "'qwen3_30b_pass_rate'" in other and "-0.25" in other


# -- notebook 02 ---------------------------------------------------------------------------
@pytest.mark.parametrize("reply, truth, upstream, strict, lenient", nb02.PREDICTIONS)
def test_nb02_judge_predictions_are_what_the_judges_say(reply, truth, upstream, strict,
                                                        lenient):
    assert sum(judge.upstream_reward(reply, truth).values()) == upstream
    assert judge.score(reply, truth)["accuracy"] == strict
    assert judge.score(reply, truth, lenient=True)["accuracy"] == lenient


def test_nb02_predictions_cover_every_disagreement():
    rows = {(u, s, lz) for _, _, u, s, lz in nb02.PREDICTIONS}
    assert {(1, 1, 1), (0, 0, 1), (0, 1, 1), (0, 0, 0)} <= rows


def test_nb02_pass_rates_keep_failed_rollouts_out_of_the_mean():
    table = pd.DataFrame({
        "row": [0, 0, 0, 0, 1, 1, 1, 1, 2, 2],
        "reward": [1.0, 0.0, 1.0, 1.0, 0.0, np.nan, 1.0, 0.0, 0.0, 0.0],
        "error": [None, None, None, None, None, "timeout after 60 s", None, None, None,
                  "endpoint error: refused"],
    })
    out = nb02.pass_rates(table)
    assert list(out.index) == [0, 1, 2]
    assert out.loc[0, "pass_rate"] == 0.75 and out.loc[0, "failed"] == 0
    assert np.isnan(out.loc[1, "pass_rate"]) and out.loc[1, "failed"] == 1
    assert np.isnan(out.loc[2, "pass_rate"]) and out.loc[2, "failed"] == 1  # not 0.0
    assert list(out["rollouts"]) == [4, 4, 2]


# -- notebook 03 ---------------------------------------------------------------------------
def test_nb03_own_selector_is_about_ten_lines_and_picks_near_half():
    import ast
    import inspect

    cls = ast.parse(inspect.getsource(nb03.ClosestToHalf)).body[0]
    methods = [n for n in cls.body if isinstance(n, ast.FunctionDef)]
    assert sum(m.end_lineno - m.lineno + 1 for m in methods) <= 12
    toy = simulation.toy_taskset(12, seed=0)
    sel = nb03.ClosestToHalf(toy, seed=0, n_rollouts=8)
    weak = np.asarray(toy[simulation.WEAK_KEY])
    batch = sel.get_indices(3)
    assert np.abs(weak[batch] - 0.5).max() <= np.sort(np.abs(weak - 0.5))[2] + 1e-9
    sel.feedback(batch, [0.0, 0.0, 0.0])  # now known to be out of reach
    assert not set(sel.get_indices(3)) & set(batch)


def test_nb03_own_selector_runs_in_the_sweep_and_keeps_groups_mixed():
    config = simulation.smoke_config(n_tasks=1500, steps=30, n_seeds=2, eval_every=5)
    result = nb03.sweep_with_own_selector(config)
    summary = metrics.summarize(result.steps).set_index("selector")
    assert list(summary.index) == ["random", "difficulty_based", "closest to 0.5"]
    assert summary.loc["closest to 0.5", "etr_mean"] > summary.loc["random", "etr_mean"] + 0.2


def test_nb03_knob_predictions_hold_in_the_smoke_world():
    assert nb03.knob_answers() == nb03.KNOB_PREDICTIONS

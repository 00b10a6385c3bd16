"""The reference solutions of notebooks 04 and 05's exercises are right: each is checked
against the package's own functions or an independent record of the same runs."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from mathagent import metrics, paths, results, verdict
from mathagent.exercises import nb04, nb05

LOCAL = paths.RESULTS_DIR / "trinity_h200_local"


# -- notebook 04 ---------------------------------------------------------------------------
def test_nb04_preflight_without_operator_names_the_setting(tmp_path):
    problems = nb04.preflight_without_operator(tmp_path)
    assert len(problems) == 1
    assert problems[0].startswith("data_processor.experience_pipeline.operators")
    assert "pass_rate_calculator" in problems[0] and "\n" not in problems[0]
    # random ignores feedback, so the same config without the operator passes
    assert nb04.preflight_without_operator(tmp_path / "random", "config_random.yaml") == []


@pytest.mark.parametrize("run", ["difficulty_seed0", "random_seed1"])
def test_nb04_etr_from_events_matches_the_tidy_table(run):
    etr = nb04.etr_from_events(LOCAL / run)
    tidy = pd.read_csv(LOCAL / run / "metrics.csv").set_index("step")["effective_task_ratio"]
    tidy = tidy.dropna()
    assert list(etr.index) == list(tidy.index)
    assert np.allclose(etr.to_numpy(), tidy.to_numpy())
    ps = metrics.per_seed(results.load_runs([LOCAL], progress=False), budget=int(etr.index.max()))
    sel, seed = run.replace("difficulty", "difficulty_based").rsplit("_seed", 1)
    mean = ps.set_index(["selector", "seed"]).loc[(sel, int(seed)), "etr"]
    assert etr.mean() == pytest.approx(mean)


def test_nb04_etr_from_events_names_a_run_without_the_tag(tmp_path):
    with pytest.raises(results.RunError):
        nb04.etr_from_events(tmp_path)


# -- notebook 05 ---------------------------------------------------------------------------
@pytest.mark.parametrize("folder", ["trinity_h200", "trinity_h200_local", "grpo_h200"])
def test_nb05_margin_by_hand_is_the_verdicts(folder):
    ev = verdict.from_runs(folder, paths.RESULTS_DIR / folder)
    mine = nb05.margin_by_hand(ev.table)
    row = verdict.evidence_table([ev]).set_index("selector").loc["difficulty_based"]
    assert mine["z"] == pytest.approx(row["z"]) and mine["se"] == pytest.approx(row["se"])
    # the seeds it asks for do reach two standard errors, one fewer does not
    n = mine["seeds_for_2se"]
    ps = metrics.per_seed(ev.table)
    var = ps.groupby("selector")["eval_final"].var(ddof=1)
    spread = var["difficulty_based"] + var["random"]
    assert mine["diff"] / np.sqrt(spread / n) >= 2
    assert n == 1 or mine["diff"] / np.sqrt(spread / (n - 1)) < 2


def test_nb05_shortcut_runs_are_those_whose_saved_replies_shrank():
    table = results.load_runs([LOCAL], progress=False)
    found = nb05.shortcut_runs(table)
    assert found
    for run in sorted(LOCAL.glob("*_seed*")):
        lines = [json.loads(x) for x in (run / "samples.jsonl").read_text().splitlines()]
        steps = sorted({x["step"] for x in lines})
        words = {s: np.mean([len(x["response"].split()) for x in lines if x["step"] == s])
                 for s in steps}
        first = np.mean([words[s] for s in steps[:10]])
        last = np.mean([words[s] for s in steps[-10:]])
        params = json.loads((run / "params.json").read_text())
        flagged = (params["selector"], params["seed"]) in found
        assert flagged == (last < 0.25 * first), run.name


def test_nb05_shortcut_runs_on_a_made_up_table():
    rows = []
    for seed, (a, b) in enumerate([(100, 10), (100, 60)]):
        for s in range(1, 21):
            rows.append({"selector": "x", "seed": seed, "step": s,
                         "response_length": a if s <= 10 else b})
    assert nb05.shortcut_runs(pd.DataFrame(rows)) == [("x", 0)]

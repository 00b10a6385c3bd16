"""Metrics from tidy tables: ETR, TTB, BSF and their summaries, on tables whose answers are
worked out by hand."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from mathagent import metrics as M


def table(curves: dict[tuple[str, int], list[float]], every: int = 10,
          etr: dict[str, float] | None = None) -> pd.DataFrame:
    """Tidy table with an eval every ``every`` steps; curves[(selector, seed)] lists the
    eval accuracies at steps 0, every, 2 every, ..."""
    rows = []
    for (sel, seed), evals in curves.items():
        last = every * (len(evals) - 1)
        for step in range(last + 1):
            ev = evals[step // every] if step % every == 0 else np.nan
            rows.append({"selector": sel, "seed": seed, "step": step,
                         "rollout_accuracy": np.nan if step == 0 else 0.1 + 0.001 * step,
                         "eval_accuracy": ev,
                         "effective_task_ratio": np.nan if step == 0 else
                         (etr or {}).get(sel, 0.5)})
    return pd.DataFrame(rows)


CURVES = {
    ("random", 0): [0.10, 0.20, 0.30, 0.30],  # best 0.30, first at step 20
    ("random", 1): [0.10, 0.15, 0.20, 0.25],  # best 0.25 at step 30
    ("bots", 0): [0.10, 0.30, 0.35, 0.40],  # reaches 0.30 at 10: TTB 0.5, BSF 0.40/0.30
    ("bots", 1): [0.10, 0.20, 0.25, 0.26],  # reaches 0.25 at 20: TTB 2/3, BSF 0.26/0.25
    ("slow", 0): [0.10, 0.11, 0.12, 0.13],  # never reaches
    ("slow", 1): [0.10, 0.11, 0.20, 0.25],  # reaches at 30: TTB 1
}


def test_effective_task_ratio_counts_strictly_mixed_pass_rates():
    assert M.effective_task_ratio([0, 0.5, 1, 0.125]) == 0.5
    out = M.effective_task_ratio(np.array([[0, 1, 0.5, 0.5], [0.1, 0.2, 0.3, 1.0]]))
    np.testing.assert_allclose(out, [0.5, 0.75])


def test_time_to_baseline_by_hand():
    ttb = M.time_to_baseline(table(CURVES)).set_index(["selector", "seed"])
    assert ttb.loc[("random", 0), "ttb"] == 1 and ttb.loc[("random", 1), "ttb"] == 1
    assert ttb.loc[("bots", 0), "ttb"] == pytest.approx(0.5)
    assert ttb.loc[("bots", 1), "ttb"] == pytest.approx(20 / 30)
    assert np.isnan(ttb.loc[("slow", 0), "ttb"]) and not ttb.loc[("slow", 0), "reached"]
    assert ttb.loc[("slow", 1), "ttb"] == 1
    # TTB(80%): the goal is 0.8 x random's best
    ttb80 = M.time_to_baseline(table(CURVES), target=0.8).set_index(["selector", "seed"])
    assert ttb80.loc[("bots", 0), "goal"] == pytest.approx(0.24)
    assert ttb80.loc[("bots", 0), "ttb"] == pytest.approx(10 / 20)


def test_budget_cuts_the_curves():
    ttb = M.time_to_baseline(table(CURVES), budget=20).set_index(["selector", "seed"])
    # random seed 1 within 20 steps: best 0.20 first at 20; bots seed 1 reaches it at 10
    assert ttb.loc[("bots", 1), "ttb"] == pytest.approx(0.5)
    bsf = M.best_so_far_ratio(table(CURVES), budget=20).set_index(["selector", "seed"])
    assert bsf.loc[("bots", 0), "bsf"] == pytest.approx(0.35 / 0.30)


def test_best_so_far_ratio_by_hand():
    bsf = M.best_so_far_ratio(table(CURVES)).set_index(["selector", "seed"])["bsf"]
    assert bsf[("bots", 0)] == pytest.approx(0.40 / 0.30)
    assert bsf[("bots", 1)] == pytest.approx(0.26 / 0.25)
    assert bsf[("random", 0)] == 1


def test_summary_mean_and_spread_over_seeds():
    s = M.summarize(table(CURVES, etr={"bots": 0.8, "random": 0.3})).set_index("selector")
    assert list(s.index) == ["random", "bots", "slow"]
    assert s.loc["bots", "ttb_mean"] == pytest.approx((0.5 + 2 / 3) / 2)
    assert s.loc["bots", "ttb_std"] == pytest.approx(np.std([0.5, 2 / 3], ddof=1))
    assert s.loc["bots", "ttb_min"] == pytest.approx(0.5)
    assert s.loc["slow", "ttb_reached"] == 0.5 and s.loc["slow", "ttb_mean"] == 1
    assert s.loc["bots", "bsf_mean"] == pytest.approx((0.4 / 0.3 + 0.26 / 0.25) / 2)
    assert s.loc["bots", "etr_mean"] == pytest.approx(0.8)
    assert s.loc["random", "etr_mean"] == pytest.approx(0.3)
    assert s.loc["bots", "eval_final_mean"] == pytest.approx((0.40 + 0.26) / 2)
    assert s.loc["bots", "n_seeds"] == 2
    # rollout accuracy: mean over training steps 1..30 of 0.1 + 0.001 step
    assert s.loc["bots", "rollout_accuracy_mean"] == pytest.approx(0.1 + 0.001 * 15.5)


def test_a_seed_the_baseline_lacks_counts_where_it_can_and_has_no_ttb_or_bsf():
    # an experiment under way: bots has seed 2, random not yet
    curves = {**CURVES, ("bots", 2): [0.10, 0.12, 0.14, 0.50], ("slow", 2): [0.1] * 4}
    ps = M.per_seed(table(curves)).set_index(["selector", "seed"])
    assert ps.loc[("bots", 2), "eval_final"] == pytest.approx(0.50)
    for column in ("ttb", "ttb_reached", "bsf"):
        assert pd.isna(ps.loc[("bots", 2), column]) and pd.isna(ps.loc[("slow", 2), column])
    # the paired seeds keep what they had; slow seed 0 did not reach random's best
    assert ps.loc[("bots", 0), "ttb"] == pytest.approx(0.5)
    assert ps.loc[("slow", 0), "ttb_reached"] is False
    s = M.summarize(table(curves)).set_index("selector")
    assert s.loc["bots", "n_seeds"] == 3 and s.loc["random", "n_seeds"] == 2
    assert s.loc["bots", "eval_final_mean"] == pytest.approx((0.40 + 0.26 + 0.50) / 3)
    assert s.loc["bots", "ttb_mean"] == pytest.approx((0.5 + 2 / 3) / 2)
    assert s.loc["bots", "bsf_mean"] == pytest.approx((0.4 / 0.3 + 0.26 / 0.25) / 2)
    # shares of the paired seeds: slow's unpaired seed 2 is not a seed that failed to reach
    assert s.loc["slow", "ttb_reached"] == 0.5 and s.loc["bots", "ttb_reached"] == 1.0
    # where every seed is paired the column stays boolean, as before
    assert M.per_seed(table(CURVES))["ttb_reached"].dtype == bool
    # the held-out difference is Welch's over all seeds of each side
    d = M.difference(M.per_seed(table(curves)), "bots", "random")
    a, b = np.array([0.40, 0.26, 0.50]), np.array([0.30, 0.25])
    assert d["diff"] == pytest.approx(a.mean() - b.mean())
    assert d["se"] == pytest.approx(np.sqrt(a.var(ddof=1) / 3 + b.var(ddof=1) / 2))


def test_write_metrics_writes_csv_and_params(tmp_path):
    files = M.write_metrics(table(CURVES), tmp_path, params={"kind": "test"})
    summary = pd.read_csv(files["summary"])
    assert set(summary["selector"]) == {"random", "bots", "slow"}
    assert len(pd.read_csv(files["per_seed"])) == 6
    meta = json.loads(files["metrics_params"].read_text())
    assert meta["baseline"] == "random" and meta["budget"] == 30 and meta["run"]["kind"] == "test"


def test_bad_tables_get_clear_errors():
    t = table(CURVES)
    with pytest.raises(M.TableError, match=r"missing column\(s\) \['effective_task_ratio'\]"):
        M.summarize(t.drop(columns="effective_task_ratio"))
    with pytest.raises(M.TableError, match="repeated"):
        M.summarize(pd.concat([t, t.iloc[:1]]))
    with pytest.raises(M.TableError, match="baseline selector 'uniform'"):
        M.time_to_baseline(t, baseline="uniform")
    unpaired = t.copy()
    unpaired.loc[unpaired["selector"] == "bots", "seed"] += 5
    with pytest.raises(M.TableError, match="seeds must be paired"):
        M.time_to_baseline(unpaired)
    with pytest.raises(M.TableError, match="not numeric"):
        M.validate_table(t.assign(eval_accuracy="high"))


def test_eval_se_is_the_bound_of_a_mean_of_task_accuracies():
    assert M.eval_se(0.5, 100) == pytest.approx(0.05)
    assert M.eval_se(0.0, 660) == 0.0 and M.eval_se(1.0, 660) == 0.0
    assert M.eval_se([0.5, 0.1], [100, 100]) == pytest.approx([0.05, 0.03])
    with pytest.raises(ValueError, match="tasks must be positive"):
        M.eval_se(0.5, 0)


def _spread_of_evaluations(task_accuracy, n: int = 660, runs: int = 4, draws: int = 4000,
                           redraw_tasks: bool = True) -> float:
    """The standard deviation over ``draws`` evaluations of ``n`` tasks x ``runs`` runs."""
    rng = np.random.default_rng(1)
    fixed = rng.choice(task_accuracy, size=n)
    q = rng.choice(task_accuracy, size=(draws, n)) if redraw_tasks else np.tile(fixed, (draws, 1))
    return float((rng.binomial(runs, q) / runs).mean(axis=1).std())


def test_eval_se_is_tight_where_tasks_are_all_or_nothing_and_an_upper_bound_elsewhere():
    """Simulated evaluations of 660 tasks x 4 runs at an accuracy of 0.35: tasks the policy
    always or never solves spread the accuracy as far as the bound says; tasks it solves at
    random, or the same tasks drawn again, spread it less (by about the 2 of sqrt(4 runs))."""
    bound = M.eval_se(0.35, 660)
    all_or_nothing = np.r_[np.zeros(65), np.ones(35)]
    assert _spread_of_evaluations(all_or_nothing) == pytest.approx(bound, rel=0.05)
    coin = np.full(100, 0.35)
    assert _spread_of_evaluations(coin) == pytest.approx(bound / 2, rel=0.05)
    assert _spread_of_evaluations(all_or_nothing, redraw_tasks=False) < 0.01 * bound


def test_welchs_t_test_of_a_difference_over_few_seeds():
    """Student's t tails against printed tables: two-sided 5 % at 12.706 (df 1) and 2.776
    (df 4), 0.116 at t = 2 with df 4; a normal's 1.96 with df large."""
    from mathagent.metrics import two_sided_t

    assert two_sided_t(12.706, 1) == pytest.approx(0.05, abs=1e-4)
    assert two_sided_t(2.776, 4) == pytest.approx(0.05, abs=1e-4)
    assert two_sided_t(-2.0, 4) == pytest.approx(0.1161, abs=1e-4)
    assert two_sided_t(1.96, 1e6) == pytest.approx(0.05, abs=1e-3)
    assert two_sided_t(0.0, 3) == 1.0
    # two seeds against three, worked by hand: var 0.0002 / 2 and 0.0001 / 3
    table = pd.DataFrame({"selector": ["a", "a", "b", "b", "b"],
                          "eval_final": [0.40, 0.42, 0.30, 0.31, 0.32]})
    d = M.difference(table, "a", "b")
    va, vb = 0.0002 / 2, 0.0001 / 3
    assert d["se"] == pytest.approx((va + vb) ** 0.5)
    assert d["df"] == pytest.approx((va + vb) ** 2 / (va ** 2 / 1 + vb ** 2 / 2))
    assert d["p"] == pytest.approx(two_sided_t(d["z"], d["df"]))
    assert d["p"] < 0.05 < two_sided_t(d["z"] / 4, d["df"])

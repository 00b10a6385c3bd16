"""The bandit simulation: its world, its learning signal, its streams, the sweep and the
command, and the behaviour it exists to show (BOTS keeps more learnable tasks than random
and reaches random's best eval accuracy sooner)."""

from __future__ import annotations

import argparse
import json
from math import comb

import numpy as np
import pandas as pd
import pytest

from mathagent import metrics
from mathagent import simulation as sim
from mathagent.tasks import informative_probability

SMALL = sim.smoke_config(n_tasks=1500, steps=40, n_seeds=3, eval_every=5)


@pytest.fixture(scope="module")
def world():
    return sim.make_world(SMALL)


@pytest.fixture(scope="module")
def specs():
    return {s.label: s for s in sim.default_specs(SMALL.n_rollouts)}


def test_world_shapes_and_reference_measurements(world):
    S, N = SMALL.n_seeds, SMALL.n_tasks
    assert world.difficulty.shape == world.weak.shape == world.strong.shape == (S, N)
    assert world.eval_difficulty.shape == (S, SMALL.n_eval)
    for ref in (world.weak, world.strong):
        assert np.all((ref * 16) == np.round(ref * 16)) and ref.min() >= 0 and ref.max() <= 1
    assert world.weak.mean() < world.strong.mean()
    truth = world.initial_pass_rates()
    for s in range(S):  # informative but noisy: correlated with the truth, not equal to it
        r = np.corrcoef(truth[s], world.strong[s])[0, 1]
        assert 0.5 < r < 0.98
    # the eval set is harder than the training set (AIME-like)
    assert world.eval_difficulty.mean() > world.difficulty.mean()
    ds = world.datasets()
    assert len(ds) == S and set(sim.FEATURE_KEYS) <= set(ds[1].column_names)
    np.testing.assert_array_equal(np.asarray(ds[1][sim.STRONG_KEY]), world.strong[1])


def test_worlds_come_from_seed_sequences_and_extra_seeds_leave_others_alone():
    a = sim.make_world(sim.replace_config(SMALL, n_seeds=2))
    b = sim.make_world(SMALL)
    np.testing.assert_array_equal(a.difficulty, b.difficulty[:2])
    np.testing.assert_array_equal(a.weak, b.weak[:2])
    assert a.selector_seeds == b.selector_seeds[:2]
    assert not np.array_equal(b.difficulty[0], b.difficulty[1])
    c = sim.make_world(sim.replace_config(SMALL, seed=1))
    assert not np.array_equal(c.difficulty[0], b.difficulty[0])


def test_learning_signal_is_zero_for_uniform_groups_and_averages_to_p_one_minus_p():
    n = 8
    k = np.arange(n + 1)
    g = sim.learning_signal(k, n)
    assert g[0] == g[n] == 0 and np.argmax(g) == n // 2 and np.all(g[1:n] > 0)
    for p in (0.05, 0.3, 0.5, 0.9):
        pmf = np.array([comb(n, j) * p**j * (1 - p) ** (n - j) for j in k])
        assert pmf @ g == pytest.approx(sim.expected_signal(p, n))
        assert pmf[1:n].sum() == pytest.approx(informative_probability(p, n))
    curve = sim.signal_curve((4, 8), points=11)
    assert set(curve.columns) == {"p", "n", "signal", "p_mixed"} and len(curve) == 22
    assert curve.loc[curve["signal"].idxmax(), "p"] == pytest.approx(0.5)


def test_run_selector_writes_a_tidy_table(world, specs):
    steps, posts = sim.run_selector(specs["bots"], world)
    T, S = SMALL.steps, SMALL.n_seeds
    assert len(steps) == S * (T + 1)
    metrics.validate_table(steps)
    start = steps[steps["step"] == 0]
    assert start["rollout_accuracy"].isna().all() and start["eval_accuracy"].notna().all()
    evals = steps.dropna(subset=["eval_accuracy"])["step"].unique()
    assert sorted(evals) == list(range(0, T + 1, SMALL.eval_every))
    train = steps[steps["step"] > 0]
    assert train["effective_task_ratio"].between(0, 1).all()
    # ability only grows, and by learning_rate x the mean signal of each step
    for _, g in steps.groupby("seed"):
        g = g.sort_values("step")
        np.testing.assert_allclose(np.diff(g["ability"]),
                                   SMALL.learning_rate * g["signal"].to_numpy()[1:])
    assert set(posts["task"]) == set(world.tracked.tolist())
    assert len(posts) == (T + 1) * len(world.tracked)
    assert posts["selected"].any()


def test_selectors_replay_the_same_streams(world, specs):
    a, _ = sim.run_selector(specs["shuffle"], world)
    b, _ = sim.run_selector(specs["shuffle"], world)
    pd.testing.assert_frame_equal(a, b)
    # Trinity's difficulty_based and BOTSSelector choose the same tasks, so on the same
    # streams every number of their runs coincides.
    t, pt = sim.run_selector(specs["difficulty_based"], world)
    o, po = sim.run_selector(specs["bots"], world)
    pd.testing.assert_frame_equal(t.drop(columns="selector"), o.drop(columns="selector"))
    pd.testing.assert_frame_equal(pt.drop(columns="selector"), po.drop(columns="selector"))


def test_bots_keeps_more_learnable_tasks_and_reaches_randoms_best_sooner(world, specs):
    chosen = [specs[k] for k in ("random", "bots")]
    result = sim.run_sweep(SMALL, chosen, workers=1, progress=False, world=world)
    ps = metrics.per_seed(result.steps)
    bots, rand = ps[ps["selector"] == "bots"], ps[ps["selector"] == "random"]
    # ETR: clearly higher on every seed
    assert (bots["etr"].to_numpy() > rand["etr"].to_numpy() + 0.1).all()
    # TTB: every seed reaches random's best, in fewer steps
    assert bots["ttb_reached"].all()
    assert (bots["ttb"] < 1).all() and bots["ttb"].mean() < 0.9
    assert (bots["bsf"] > 1).all()


def test_default_specs_cover_trinity_bots_and_ablations():
    specs = sim.default_specs(8)
    labels = [s.label for s in specs]
    assert labels[:6] == ["sequential", "shuffle", "random", "offline_easy2hard",
                          "difficulty_based", "bots"]
    assert len(set(labels)) == len(labels)
    table = sim.specs_table(specs)
    assert (table.loc[table["name"].isin(["bots", "difficulty_based"]), "m"] == 8).all()
    grid = table[(table["name"] == "bots") & (table["target_reward"] == 0.8)
                 & (table["implicit_only"] != True)]  # noqa: E712
    cells = set(zip(grid["lamb"], grid["rho"], strict=True))
    assert cells == {(lam, rho) for lam in sim.LAMB_GRID for rho in sim.RHO_GRID}
    assert "bots implicit" in labels and "bots rho=0" in labels
    assert {"bots target=0.5", "bots target=0.95"} <= set(labels)


def test_bad_sweeps_fail_before_anything_runs(tmp_path):
    bad_m = sim.SelectorSpec("bots m=16", "bots", {"m": 16})
    with pytest.raises(ValueError, match="'bots m=16'.*m=16 but every task is rolled out 8"):
        sim.run_sweep(SMALL, [bad_m], progress=False)
    with pytest.raises(ValueError, match="unknown selector 'greedy'"):
        sim.run_sweep(SMALL, [sim.SelectorSpec("g", "greedy")], progress=False)
    with pytest.raises(ValueError, match="unknown keyword"):
        sim.run_sweep(SMALL, [sim.SelectorSpec("r", "random", {"seed": 3})], progress=False)
    with pytest.raises(ValueError, match="duplicate selector labels"):
        sim.run_sweep(SMALL, [sim.SelectorSpec("r", "random")] * 2, progress=False)
    with pytest.raises(ValueError, match="n_rollouts=1"):
        sim.make_world(sim.replace_config(SMALL, n_rollouts=1))
    with pytest.raises(ValueError, match="batch_size=2000 exceeds n_tasks=1500"):
        sim.make_world(sim.replace_config(SMALL, batch_size=2000))


def _args(**kw) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sim.simulate_parser(parser)
    argv = []
    for k, v in kw.items():
        flag = "--" + k.replace("_", "-")
        if v is True:
            argv.append(flag)
        elif isinstance(v, list):
            argv += [flag, *map(str, v)]
        else:
            argv += [flag, str(v)]
    return parser.parse_args(argv)


def test_simulate_command_writes_tables_metrics_and_figures(tmp_path, capsys):
    out = tmp_path / "run"
    rc = sim.simulate_command(_args(smoke=True, tasks=800, steps=20, seeds=2, eval_every=5,
                                    selectors=["random", "bots", "bots rho=0"], out=out,
                                    workers=1))
    assert rc == 0
    for name in ("steps.csv", "posteriors.csv", "selectors.csv", "summary.csv", "per_seed.csv",
                 "params.json", "metrics_params.json", "signal_curve.csv"):
        assert (out / name).stat().st_size > 0, name
    steps = pd.read_csv(out / "steps.csv")
    assert set(steps["selector"]) == {"random", "bots", "bots rho=0"}
    assert len(steps) == 3 * 2 * 21
    params = json.loads((out / "params.json").read_text())
    assert params["config"]["n_tasks"] == 800 and params["config"]["steps"] == 20
    figures = {p.stem for p in (out / "figures").glob("*.png")}
    assert {"training_curves", "effective_task_ratio", "signal_curve", "posteriors",
            "summary"} <= figures
    assert "random" in capsys.readouterr().out


def test_simulate_command_rejects_unknown_entries(tmp_path, capsys):
    rc = sim.simulate_command(_args(smoke=True, selectors=["random", "bogus"],
                                    out=tmp_path / "x"))
    assert rc == 2 and "unknown sweep entries ['bogus']" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    rc = sim.simulate_command(_args(smoke=True, rollouts=1, out=tmp_path / "y"))
    assert rc == 2 and "n_rollouts=1" in capsys.readouterr().err


def test_cli_help_lists_the_options(capsys):
    from mathagent.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--seeds", "--steps", "--tasks", "--selectors", "--workers", "--smoke"):
        assert flag in text


def test_toy_taskset_observer_and_identical_runs(world, specs):
    toy = sim.toy_taskset(10, seed=4)
    assert toy.column_names == ["task", "true_pass_rate", *sim.FEATURE_KEYS]
    assert len(toy) == 10
    observe = sim.observer(toy["true_pass_rate"], 8)
    rates = observe([0, 3, 3], np.random.default_rng(0))
    assert rates.shape == (3,) and np.all(rates * 8 == np.round(rates * 8))
    steps = pd.concat([sim.run_selector(specs[k], world)[0]
                       for k in ("random", "difficulty_based", "bots")])
    assert sim.identical_runs(steps, "difficulty_based", "bots")
    assert not sim.identical_runs(steps, "random", "bots")
    with pytest.raises(ValueError, match="'greedy' is not in the table"):
        sim.identical_runs(steps, "greedy", "bots")


def test_simulate_command_with_static_selectors_only(tmp_path):
    out = tmp_path / "static"
    rc = sim.simulate_command(_args(smoke=True, tasks=500, steps=10, seeds=2,
                                    selectors=["random", "sequential"], out=out, workers=1))
    assert rc == 0
    assert pd.read_csv(out / "heatmap.csv").empty
    posteriors = pd.read_csv(out / "posteriors.csv")  # static selectors have no posterior
    assert posteriors.empty and "alpha" in posteriors.columns
    assert not (out / "figures" / "ttb_heatmap.png").exists()
    assert (out / "figures" / "training_curves.png").exists()


# ---------------------------------------------------------------- output folders are kept


def _snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def _tiny(out, **kw):
    return _args(smoke=True, tasks=300, steps=4, seeds=1, eval_every=2, selectors=["random"],
                 out=out, workers=1, no_figures=True, **kw)


def _error_line(err):
    """The one error line on stderr; anything else there is the sweep's progress bar."""
    assert "Traceback" not in err, err
    *bars, line = [ln.rsplit("\r", 1)[-1] for ln in err.rstrip("\n").split("\n")]
    assert all("%|" in b for b in bars), err
    assert line.startswith("simulate: "), err
    return line


def test_simulate_keeps_an_existing_run_unless_force(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "steps.csv").write_text("an earlier run\n")
    (out / "notes.txt").write_text("mine\n")
    before = _snapshot(out)
    assert sim.simulate_command(_tiny(out)) == 2
    line = _error_line(capsys.readouterr().err)
    assert str(out) in line and "--force" in line
    assert _snapshot(out) == before
    assert sim.simulate_command(_tiny(out, force=True)) == 0
    assert "replaced its previous contents" in capsys.readouterr().out
    assert len(pd.read_csv(out / "steps.csv")) == 5 and not (out / "notes.txt").exists()
    # library callers (notebooks re-run) replace by default; force=False refuses
    result = sim.run_sweep(sim.smoke_config(n_tasks=300, steps=2, n_seeds=1),
                           [sim.SelectorSpec("random", "random")], workers=1, progress=False)
    files = sim.write_sweep(result, out, figures=False)
    assert files["steps"] == out / "steps.csv" and len(pd.read_csv(files["steps"])) == 3
    with pytest.raises(ValueError, match="already exists and is kept; pass --force"):
        sim.write_sweep(result, out, figures=False, force=False)


def test_simulate_failing_midway_leaves_the_old_run(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    assert sim.simulate_command(_tiny(out)) == 0
    before = _snapshot(out)
    capsys.readouterr()
    real = pd.DataFrame.to_csv
    calls = []

    def write_then_fail(self, path=None, *args, **kwargs):
        calls.append(path)
        if len(calls) > 1:
            raise OSError(28, "No space left on device")
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "to_csv", write_then_fail)
    assert sim.simulate_command(_tiny(out, seed=5, force=True)) == 2
    assert len(calls) == 2
    line = _error_line(capsys.readouterr().err)
    assert str(out) in line and "No space left on device" in line and "left as it was" in line
    assert _snapshot(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # no temporary folder left

"""Reading runs into tidy tables and drawing the results figures (mathagent.results).

The Trinity runs here are written the way Trinity-RFT 0.6.0 writes them: per-task metric
dicts go through Trinity's own aggregation functions (``trinity.utils.metrics``), the
pass-rate ratios come from its ``pass_rate_calculator`` operator, and Trinity's
``TensorboardMonitor`` writes the event files into ``<job>/monitor/tensorboard/<role>/``.
Only the numbers are made up (no GPU training can run here).
"""

from __future__ import annotations

import inspect
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mathagent import cli, paths, results, trinity_tags

EVAL_NAME = "eval-aime24"


def _experiences(pass_rates: list[float], repeats: int = 4):
    """Trinity Experience objects: task i gets round(p * repeats) rewards of 1, the rest 0."""
    import torch
    from trinity.common.experience import Experience

    exps = []
    for i, p in enumerate(pass_rates):
        hits = round(p * repeats)
        for r in range(repeats):
            exps.append(Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=1,
                                   reward=float(r < hits),
                                   info={"task_index": {"taskset_id": 0, "index": i}}))
    return exps


def trinity_step_metrics(rng: np.random.Generator, level: float, n_tasks: int = 6,
                         repeats: int = 4) -> tuple[dict, list[float]]:
    """One explore step's logged metrics, built by Trinity's own code paths."""
    from trinity.buffer.operators.mappers.pass_rate_calculator import PassRateCalculator
    from trinity.utils.metrics import aggregate_metrics, calculate_task_level_metrics

    rates = [float(np.clip(level + rng.normal(0, 0.2), 0, 1)) for _ in range(n_tasks)]
    rates = [round(p * repeats) / repeats for p in rates]
    task_metrics = []
    for p in rates:
        runs = [{"accuracy": float(r < round(p * repeats)), "format_score": 0.0}
                for r in range(repeats)]
        task_metrics.append(calculate_task_level_metrics(runs, is_eval=False))
    metrics = aggregate_metrics(task_metrics, prefix="rollout")
    _, op_metrics = PassRateCalculator().process(_experiences(rates, repeats))
    # ExperiencePipeline prefixes numeric operator metrics with "experience_pipeline/".
    metrics.update({f"experience_pipeline/{k}": float(v) for k, v in op_metrics.items()
                    if isinstance(v, float | int)})
    return metrics, rates


def trinity_eval_metrics(accuracy: list[list[float]], name: str = EVAL_NAME) -> dict:
    from trinity.utils.metrics import aggregate_eval_metrics, calculate_task_level_metrics

    per_task = [calculate_task_level_metrics([{"accuracy": a} for a in runs], is_eval=True)
                for runs in accuracy]
    return aggregate_eval_metrics(per_task, prefix=f"eval/{name}")


def write_trinity_run(root: Path, name: str, selector: str, seed: int, level: float,
                      steps: int = 12, eval_every: int = 4, params: bool = True,
                      with_operator: bool = True, eval_names=(EVAL_NAME,),
                      behaviour: bool = False) -> tuple[Path, dict]:
    """A Trinity job folder with explorer and trainer event files; returns it and the truth.
    ``behaviour``: the trainer also logs the mean response length (``200 - 10 * step``
    tokens) and the explorer the tool calls per agent run (``level``), as Trinity's do."""
    from trinity.common.config import Config
    from trinity.utils.monitor import TensorboardMonitor

    job = root / "Data-Augmentation" / name
    config = Config()
    config.monitor.cache_dir = str(job / "monitor")
    explorer = TensorboardMonitor("Data-Augmentation", "", name, "explorer", config)
    trainer = TensorboardMonitor("Data-Augmentation", "", name, "trainer", config)
    rng = np.random.default_rng(seed)
    truth = {"rollout": {}, "eval": {}, "etr": {}}
    for step in range(steps + 1):
        if step % eval_every == 0:
            acc = [[float(rng.random() < level / 2) for _ in range(2)] for _ in range(5)]
            logged = {}
            for n in eval_names:
                logged.update(trinity_eval_metrics(acc, n))
            explorer.log(logged, step)
            truth["eval"][step] = float(np.mean(acc))
        if step > 0:
            metrics, rates = trinity_step_metrics(rng, level + 0.01 * step)
            if not with_operator:
                metrics = {k: v for k, v in metrics.items() if "experience_pipeline" not in k}
            trained = {"critic/rewards/mean": float(np.mean(rates)), "actor/pg_loss": 0.1}
            if behaviour:
                metrics[trinity_tags.TAGS["rollout_tool_calls"]] = level
                trained[trinity_tags.TAGS["response_length"]] = 200.0 - 10 * step
            explorer.log(metrics, step)
            trainer.log(trained, step)
            truth["rollout"][step] = float(np.mean(rates))
            truth["etr"][step] = float(np.mean([(0 < p < 1) for p in rates]))
    explorer.close()
    trainer.close()
    if params:
        (job / "params.json").write_text(json.dumps(
            {"kind": "train", "selector": selector, "seed": seed, "eval_taskset": eval_names[0]}))
    return job, truth


def test_tag_names_match_trinity_code():
    """The tags the reader maps are the ones Trinity 0.6.0 composes."""
    from trinity.buffer.pipelines import experience_pipeline

    metrics, _ = trinity_step_metrics(np.random.default_rng(0), 0.5)
    assert trinity_tags.TAGS["rollout_accuracy"] in metrics
    assert trinity_tags.TAGS["effective_task_ratio"] in metrics
    assert 'f"experience_pipeline/{key}"' in inspect.getsource(experience_pipeline)
    ev = trinity_eval_metrics([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    assert results.eval_tags(ev) == {EVAL_NAME: f"eval/{EVAL_NAME}/accuracy/mean@3"}
    assert ev[f"eval/{EVAL_NAME}/accuracy/mean@3"] == pytest.approx(2 / 6)


def test_read_trinity_run_maps_tags_to_tidy_columns(tmp_path):
    job, truth = write_trinity_run(tmp_path, "Difficulty-Based-Selector", "difficulty_based",
                                   7, 0.4)
    assert (job / "monitor" / "tensorboard" / "explorer").is_dir()
    table = results.read_run(job)
    assert list(table.columns[:6]) == ["selector", "seed", "step", "rollout_accuracy",
                                       "eval_accuracy", "effective_task_ratio"]
    assert set(table["selector"]) == {"difficulty_based"} and set(table["seed"]) == {7}
    assert list(table["step"]) == list(range(13))
    t = table.set_index("step")
    for step, value in truth["rollout"].items():
        assert t.loc[step, "rollout_accuracy"] == pytest.approx(value, abs=1e-6)
        assert t.loc[step, "effective_task_ratio"] == pytest.approx(truth["etr"][step], abs=1e-6)
    for step, value in truth["eval"].items():
        assert t.loc[step, "eval_accuracy"] == pytest.approx(value, abs=1e-6)
    assert t["eval_accuracy"].notna().sum() == len(truth["eval"])
    assert math.isnan(t.loc[0, "rollout_accuracy"])  # step 0: the startup eval only
    assert t.loc[5, "trainer_reward"] == pytest.approx(truth["rollout"][5], abs=1e-6)
    assert set(table["eval_taskset"]) == {EVAL_NAME}
    assert results.eval_label(table) == "AIME-24 accuracy"


def test_run_without_params_falls_back_to_folder_name_and_default_seed(tmp_path):
    job, _ = write_trinity_run(tmp_path, "Random-Selector", "random", 3, 0.1, params=False,
                               with_operator=False)
    table = results.read_run(job)
    assert set(table["selector"]) == {"Random-Selector"}
    assert set(table["seed"]) == {results.TRINITY_DEFAULT_SEED}
    assert table["effective_task_ratio"].isna().all()  # no pass_rate_calculator: no ETR
    named = results.read_run(job, selector="random", seed=5)
    assert set(named["selector"]) == {"random"} and set(named["seed"]) == {5}


def _buffer_steps(job: Path, ratios: dict[int, object]) -> None:
    """The run's ``buffer_steps.csv`` (mathagent.experiment.buffer) with these ratios."""
    rows = "".join(f"{step},128,16,{ratio}\n" for step, ratio in ratios.items())
    (job / results.BUFFER_STEPS).write_text(
        f"step,experiences,tasks,effective_task_ratio\n{rows}")


def test_a_run_without_the_operator_takes_its_etr_from_its_buffer_steps(tmp_path):
    job, _ = write_trinity_run(tmp_path, "Random-Selector", "random", 3, 0.1,
                               with_operator=False, steps=3)
    _buffer_steps(job, {1: 0.25, 2: "", 3: 0.5})
    t = results.read_run(job).set_index("step")["effective_task_ratio"]
    assert t[1] == 0.25 and t[3] == 0.5
    assert math.isnan(t[0]) and math.isnan(t[2])  # no step 0 in the buffer; an empty cell


def test_trinitys_own_etr_wins_over_the_buffers(tmp_path):
    job, truth = write_trinity_run(tmp_path, "Difficulty", "difficulty_based", 3, 0.4, steps=3)
    _buffer_steps(job, {1: 0.01, 2: 0.01, 3: 0.01})
    t = results.read_run(job).set_index("step")["effective_task_ratio"]
    assert [t[s] for s in (1, 2, 3)] == pytest.approx([truth["etr"][s] for s in (1, 2, 3)])


def test_a_buffer_table_from_before_the_ratio_or_with_a_bad_one(tmp_path):
    job, _ = write_trinity_run(tmp_path, "Random-Selector", "random", 3, 0.1,
                               with_operator=False, steps=2)
    (job / results.BUFFER_STEPS).write_text("step,experiences\n1,128\n2,128\n")
    assert results.read_run(job)["effective_task_ratio"].isna().all()
    _buffer_steps(job, {1: 0.5, 2: 1.5})
    with pytest.raises(results.RunError, match=r"buffer_steps.csv: line 3: effective_task_ratio "
                                                r"'1.5' is not a share in \[0, 1\]"):
        results.read_run(job)
    (job / results.BUFFER_STEPS).write_text("experiences,effective_task_ratio\n128,0.5\n")
    with pytest.raises(results.RunError, match="buffer_steps.csv: no 'step' column"):
        results.read_run(job)
    # each names its line, blank lines counted
    for text, said in [("1,0.5\n\n2,nan\n", "line 4: effective_task_ratio 'nan' is not a share"),
                       ("1,0.5\n1,0.25\n", "line 3: step 1 a second time"),
                       ("abc,0.5\n", "line 2: step 'abc' is not a whole number"),
                       (",0.5\n", "line 2: step '' is not a whole number")]:
        (job / results.BUFFER_STEPS).write_text(f"step,effective_task_ratio\n{text}")
        with pytest.raises(results.RunError) as caught:
            results.read_run(job)
        assert str(caught.value) == f"{job / results.BUFFER_STEPS}: {said}" + (
            " in [0, 1]" if "share" in said else "")


def test_etr_sources_say_where_each_runs_ratio_comes_from_and_how_far_two_agree(tmp_path):
    both, truth = write_trinity_run(tmp_path / "a", "Difficulty", "difficulty_based", 1, 0.4,
                                    steps=3)
    _buffer_steps(both, {1: truth["etr"][1], 2: truth["etr"][2] - 0.05, 3: truth["etr"][3]})
    buffer, _ = write_trinity_run(tmp_path / "b", "Random", "random", 1, 0.4, steps=3,
                                  with_operator=False)
    _buffer_steps(buffer, {1: 0.5, 2: 0.25, 3: ""})
    none, _ = write_trinity_run(tmp_path / "c", "Random-2", "random", 2, 0.4, steps=3,
                                with_operator=False)
    table = results.etr_sources([both, buffer, none]).set_index("run")
    assert table["source"].to_dict() == {"Difficulty": "pass_rate_calculator",
                                         "Random": "experience buffer", "Random-2": "none"}
    assert table["steps_pass_rate_calculator"].tolist() == [3, 0, 0]
    assert table["steps_experience_buffer"].tolist() == [3, 2, 0]
    assert table.at["Difficulty", "largest_difference"] == pytest.approx(0.05, abs=1e-6)
    assert table["largest_difference"].iloc[1:].isna().all()


def test_bots_selector_path_is_reported_as_bots():
    assert results.selector_label("mathagent.selectors.BOTSSelector") == "bots"
    assert results.selector_label("difficulty_based") == "difficulty_based"


def test_resumed_run_keeps_the_later_write(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    folder = tmp_path / "job" / "monitor" / "tensorboard" / "explorer"
    for value in (0.1, 0.9):  # a restart rewrites step 2 in a second event file
        w = SummaryWriter(str(folder))
        w.add_scalar("rollout/accuracy/mean", value, 2)
        w.add_scalar("rollout/accuracy/mean", value, 1)
        w.close()
    assert len(list(folder.glob(results.EVENT_GLOB))) == 2
    table = results.read_run(tmp_path / "job", selector="random", seed=0)
    assert list(table["rollout_accuracy"]) == pytest.approx([0.9, 0.9])


def test_find_runs_under_a_checkpoint_root(tmp_path):
    a, _ = write_trinity_run(tmp_path, "Random-Selector", "random", 1, 0.1, steps=2)
    b, _ = write_trinity_run(tmp_path, "Difficulty-Based-Selector", "difficulty_based", 1, 0.4,
                             steps=2)
    assert results.find_runs(tmp_path) == sorted([a, b])
    assert results.find_runs(a) == [a]


def test_several_eval_sets_need_a_choice(tmp_path):
    job, truth = write_trinity_run(tmp_path, "R", "random", 1, 0.2, steps=4,
                                   eval_names=(EVAL_NAME, "eval-math500"))
    with pytest.raises(results.RunError, match=r"several eval tasksets \['eval-aime24', "
                                               r"'eval-math500'\]"):
        results.read_run(job)
    table = results.read_run(job, eval_taskset="eval-math500")
    assert table.set_index("step").loc[4, "eval_accuracy"] == pytest.approx(truth["eval"][4])
    with pytest.raises(results.RunError, match="no eval accuracy for taskset 'gsm8k'"):
        results.read_run(job, eval_taskset="gsm8k")


def test_bad_inputs_name_the_path(tmp_path):
    with pytest.raises(results.RunError, match="no such file or folder"):
        results.find_runs(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(results.RunError, match="empty: no tidy results CSV"):
        results.find_runs(tmp_path / "empty")
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path / "other" / "tensorboard"))
    w.add_scalar("train/loss", 1.0, 1)
    w.close()
    with pytest.raises(results.RunError, match="no 'rollout/accuracy/mean' scalar among 1 tags"):
        results.read_run(tmp_path / "other")
    bad = tmp_path / "bad.csv"
    pd.DataFrame({"selector": ["random"], "seed": [0], "step": [1],
                  "rollout_accuracy": [0.1]}).to_csv(bad, index=False)
    with pytest.raises(results.RunError, match=r"bad.csv: missing column\(s\) \['eval_accuracy'\]"):
        results.read_run(bad)


def test_same_selector_and_seed_twice_is_an_error(tmp_path):
    write_trinity_run(tmp_path / "a", "R", "random", 1, 0.1, steps=2)
    write_trinity_run(tmp_path / "b", "R", "random", 1, 0.1, steps=2)
    with pytest.raises(results.RunError, match="report the same selector and seed"):
        results.load_runs([tmp_path / "a", tmp_path / "b"], progress=False)


def test_simulated_run_is_read_from_its_tidy_csv(tmp_path):
    from mathagent import simulation as sim
    from mathagent.selectors import check_selector_settings  # noqa: F401  (selectors importable)

    config = sim.smoke_config(n_tasks=300, steps=12, n_seeds=2, eval_every=4)
    specs = [s for s in sim.default_specs(config.n_rollouts)
             if s.label in ("random", "difficulty_based")]
    result = sim.run_sweep(config, specs, workers=1, progress=False)
    out = tmp_path / "sim"
    out.mkdir()
    result.steps.to_csv(out / "steps.csv", index=False)
    (out / "params.json").write_text(json.dumps(result.params(), default=str))
    # other CSVs in the folder (not tidy step tables) are ignored
    pd.DataFrame({"selector": ["random"], "etr_mean": [0.1]}).to_csv(out / "summary.csv")
    assert results.find_runs(out) == [out]
    table = results.load_runs([out], progress=False)
    assert len(table) == len(result.steps)
    assert set(table["selector"]) == {"random", "difficulty_based"}
    pd.testing.assert_series_equal(table["rollout_accuracy"], result.steps["rollout_accuracy"],
                                   check_names=False)


def test_plot_command_draws_the_two_panel_figure(tmp_path, capsys):
    root = tmp_path / "checkpoints"
    for seed in (1, 2):
        write_trinity_run(root / f"s{seed}", "Random-Selector", "random", seed, 0.1,
                          with_operator=False)
        write_trinity_run(root / f"s{seed}", "Difficulty-Based-Selector", "difficulty_based",
                          seed, 0.45)
    out = tmp_path / "plots"
    rc = cli.main(["plot", str(root), "--out", str(out), "--smooth", "1"])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "read 4 run(s): difficulty_based (2 seeds), random (2 seeds)" in text
    for name in ("training_curves.png", "effective_task_ratio.png", "results.csv",
                 "summary.csv", "per_seed.csv"):
        assert (out / name).is_file(), name
    assert not (out / "behaviour.png").exists()   # the runs logged neither length nor tools
    table = pd.read_csv(out / "results.csv")
    assert len(table) == 4 * 13
    summary = pd.read_csv(out / "summary.csv").set_index("selector")
    assert summary.loc["random", "bsf_mean"] == pytest.approx(1.0)
    # the difficulty runs were written with a higher level: better rollout accuracy and ETR
    assert summary.loc["difficulty_based", "rollout_accuracy_mean"] > \
        summary.loc["random", "rollout_accuracy_mean"]
    assert math.isnan(summary.loc["random", "etr_mean"])  # random has no feedback operator

    drawn = results.draw(results.load_runs([root], progress=False), smooth=1,
                         eval_name="AIME-24 accuracy")
    fig = drawn["figures"]["training_curves"]
    left, right = fig.axes[:2]
    assert left.get_title().startswith("rollout accuracy")
    assert right.get_title() == "AIME-24 accuracy"
    assert {ln.get_label() for ln in left.get_lines()} == {"random", "difficulty_based"}
    # the eval panel has one point per eval step (0, 4, 8, 12)
    assert all(len(ln.get_xdata()) == 4 for ln in right.get_lines())


def test_the_agents_behaviour_is_drawn_from_what_the_runs_logged(tmp_path):
    """Response length and tool calls per agent run, per selector over the steps with a band
    over seeds, from the tags Trinity logs them under; each is left out where no run has it."""
    root = tmp_path / "checkpoints"
    for seed in (1, 2):
        write_trinity_run(root / f"s{seed}", "Random-Selector", "random", seed, 0.1,
                          behaviour=True)
        write_trinity_run(root / f"s{seed}", "Difficulty-Based-Selector", "difficulty_based",
                          seed, 0.45, behaviour=True)
    table = results.load_runs([root], progress=False)
    drawn = results.draw(table, tmp_path / "figs", smooth=1)
    assert (tmp_path / "figs" / "behaviour.png").is_file()
    length, tools = drawn["figures"]["behaviour"].axes[:2]
    assert [length.get_title(), tools.get_title()] == [label for _, label in results.BEHAVIOUR]
    lines = {ln.get_label(): ln for ln in length.get_lines()}
    assert set(lines) == {"random", "difficulty_based"}
    assert list(lines["random"].get_xdata()) == list(range(1, 13))
    assert list(lines["random"].get_ydata()) == [200.0 - 10 * step for step in range(1, 13)]
    tool_lines = {ln.get_label(): ln.get_ydata() for ln in tools.get_lines()}
    assert tool_lines["random"] == pytest.approx([0.1] * 12)   # float32 in the event files
    assert tool_lines["difficulty_based"] == pytest.approx([0.45] * 12)
    # runs with response lengths and no tool metric: one panel
    only_length = results.draw(table.drop(columns=["rollout_tool_calls"]), smooth=1)
    assert [ax.get_title() for ax in only_length["figures"]["behaviour"].axes] == [
        results.BEHAVIOUR[0][1]]


def test_plot_command_reports_unreadable_runs(tmp_path, capsys):
    rc = cli.main(["plot", str(tmp_path / "nothing")])
    assert rc == 2
    assert "nothing: no such file or folder" in capsys.readouterr().err


# ---------------------------------------------------------------- --out is kept


def _tidy_run(folder: Path) -> Path:
    rng = np.random.default_rng(0)
    rows = [{"selector": sel, "seed": seed, "step": step,
             "rollout_accuracy": float(rng.random()) if step else np.nan,
             "eval_accuracy": float(rng.random()) if step % 2 == 0 else np.nan,
             "effective_task_ratio": float(rng.random())}
            for sel in ("random", "bots") for seed in (1, 2) for step in range(7)]
    folder.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(folder / "steps.csv", index=False)
    return folder


def _snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_plot_keeps_an_existing_out_unless_force(tmp_path, capsys):
    run = _tidy_run(tmp_path / "run")
    out = tmp_path / "plots"
    out.mkdir()
    (out / "results.csv").write_text("an earlier plot\n")
    before = _snapshot(out)
    assert cli.main(["plot", str(run), "--out", str(out), "--smooth", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert str(out) in err and "--force" in err
    assert _snapshot(out) == before
    assert cli.main(["plot", str(run), "--out", str(out), "--smooth", "1", "--force"]) == 0
    assert f"replaced the previous contents of {out}" in capsys.readouterr().out
    assert len(pd.read_csv(out / "results.csv")) == 28
    # an --out holding the runs being read is refused even with --force
    before_run = _snapshot(run)
    assert cli.main(["plot", str(run), "--out", str(tmp_path), "--force"]) == 2
    assert f"{tmp_path}: holds the input {run}" in capsys.readouterr().err
    assert _snapshot(run) == before_run


def test_plot_failing_midway_leaves_the_old_out(tmp_path, capsys, monkeypatch):
    from mathagent import plots

    run = _tidy_run(tmp_path / "run")
    out = tmp_path / "plots"
    assert cli.main(["plot", str(run), "--out", str(out), "--smooth", "1"]) == 0
    before = _snapshot(out)
    capsys.readouterr()
    real = plots.save_figure
    calls = []

    def save_then_fail(fig, name, folder=None):
        calls.append(name)
        if len(calls) > 1:
            raise OSError(28, "No space left on device")
        return real(fig, name, folder)

    monkeypatch.setattr(plots, "save_figure", save_then_fail)
    assert cli.main(["plot", str(run), "--out", str(out), "--smooth", "1", "--force"]) == 2
    assert len(calls) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    *bars, line = [ln.rsplit("\r", 1)[-1] for ln in err.rstrip("\n").split("\n")]
    assert all("%|" in b for b in bars), err  # the progress bar of reading the runs
    assert line.startswith("error: ") and str(out) in line
    assert "No space left on device" in line and "left as it was" in line
    assert _snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plots", "run"]


def test_tidy_tables_of_earlier_versions_read_with_todays_column_names(tmp_path):
    """The committed tutorial-scale table predates the one name map: its `loss`, `kl`,
    `clipfrac` and `rollout_reward` columns read as `pg_loss`, `kl_loss`, ..."""
    committed = pd.read_csv(paths.RESULTS_DIR / "grpo_h200" / "grpo_h200.csv")
    assert {"loss", "rollout_reward"} <= set(committed.columns)
    table = results.load_runs([paths.RESULTS_DIR / "grpo_h200"], progress=False)
    for old, new in trinity_tags.FORMER_COLUMNS.items():
        assert old not in table and new in table
        np.testing.assert_array_equal(table[new].to_numpy(), committed[old].to_numpy())
    # a table that has both names keeps both as they are
    both = committed.head(3).assign(pg_loss=1.0)
    both.to_csv(tmp_path / "results.csv", index=False)
    read = results.read_run(tmp_path)
    assert list(read["pg_loss"]) == [1.0] * 3 and "loss" in read


def _source_table(selectors, steps, accuracy, seeds=(0,)):
    rows = []
    for sel in selectors:
        for seed in seeds:
            for step in range(steps + 1):
                rows.append({"selector": sel, "seed": seed, "step": step,
                             "rollout_accuracy": np.nan if step == 0 else accuracy(sel, step),
                             "eval_accuracy": 0.1 * step / steps if step % 10 == 0 else np.nan,
                             "effective_task_ratio": np.nan if step == 0 else 0.5,
                             "response_length": np.nan if step == 0 else 100.0 - step})
    return pd.DataFrame(rows)


def test_side_by_side_names_each_selector_by_source_and_summarises_both():
    import matplotlib.pyplot as plt

    engine = _source_table(["random", "difficulty_based"], 40, lambda s, k: 0.1,
                           seeds=(0, 1))
    local = _source_table(["difficulty_based"], 40, lambda s, k: k / 40)
    tables = {"Trinity-RFT": engine, "train-local": local}
    both = results.side_by_side(tables)
    assert list(dict.fromkeys(both["selector"])) == [
        "random, Trinity-RFT", "difficulty_based, Trinity-RFT", "difficulty_based, train-local"]
    assert set(both["source"]) == {"Trinity-RFT", "train-local"}

    summary = results.side_by_side_summary(tables).set_index(["source", "selector"])
    row = summary.loc[("train-local", "difficulty_based")]
    assert row["seeds"] == 1 and row["steps"] == 40
    assert row["rollout_accuracy_first10"] == pytest.approx(5.5 / 40, abs=1e-3)  # steps 1-10
    assert row["rollout_accuracy_last10"] == pytest.approx(35.5 / 40, abs=1e-3)  # steps 31-40
    assert row["response_length_last10"] == pytest.approx(100 - 35.5)
    assert (row["eval_step0"], row["eval_last"], row["eval_last_step"]) == (0.0, 0.1, 40)
    assert summary.loc[("Trinity-RFT", "random"), "seeds"] == 2
    assert row["shortest_run"] == 40 and row["eval_last_seeds"] == 1

    # a seed that stopped early (step 37, no step-40 evaluation) is counted, not hidden
    short = _source_table(["difficulty_based"], 40, lambda s, k: k / 40, seeds=(1,))
    partial = pd.concat([local, short[short["step"] <= 37]])
    row = results.side_by_side_summary({"train-local": partial}).iloc[0]
    assert (row["seeds"], row["steps"], row["shortest_run"]) == (2, 40, 37)
    assert (row["eval_last_step"], row["eval_last_seeds"]) == (40, 1)

    fig = results.draw_side_by_side(tables)
    lines = fig.axes[0].lines
    assert [ln.get_label() for ln in lines] == [
        "random, Trinity-RFT", "difficulty_based, Trinity-RFT", "difficulty_based, train-local"]
    assert lines[1].get_color() == lines[2].get_color()  # a colour per selector
    assert lines[1].get_linestyle() == "-" and lines[2].get_linestyle() != "-"  # a style per source
    plt.close("all")
    fig = results.draw_side_by_side(tables, panels=[("response_length", "reply tokens", 1)])
    assert [ax.get_title() for ax in fig.axes] == ["reply tokens"]
    local_line = fig.axes[0].lines[2]
    assert list(local_line.get_ydata())[-1] == pytest.approx(100 - 40)  # unsmoothed, step 40
    plt.close("all")
    with pytest.raises(results.RunError, match="no tables"):
        results.side_by_side({})


def test_plot_names_the_steps_a_cut_short_event_file_lost(tmp_path, capsys):
    job, _ = write_trinity_run(tmp_path, "R", "random", 1, 0.2, steps=6)
    explorer = max((f for f in job.rglob(results.EVENT_GLOB) if "explorer" in str(f)),
                   key=lambda f: f.stat().st_size)
    whole = explorer.stat().st_size
    with open(explorer, "r+b") as fh:  # a run killed in its last write
        fh.truncate(whole - 20)
    before = results.read_scalars(explorer.parent)
    assert cli.main(["plot", str(job), "--out", str(tmp_path / "plots")]) == 0
    err = capsys.readouterr().err
    assert f"warning: {explorer} is cut short (" in err and "bytes of an unfinished record" in err
    last = int(before["step"].max())
    assert f"any step after {last} that the run wrote there is lost" in err
    assert len([ln for ln in err.splitlines() if "cut short" in ln]) == 1


def test_a_whole_event_file_has_no_unfinished_tail(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    from mathagent.event_files import lost_steps, unfinished_tail

    w = SummaryWriter(str(tmp_path))
    for step in (1, 2, 3):
        w.add_scalar("a", 0.5, step)
        w.add_scalar("b", 0.5, step)
    w.close()
    (file,) = tmp_path.glob(results.EVENT_GLOB)
    assert unfinished_tail(file) == 0
    with open(file, "r+b") as fh:
        fh.truncate(file.stat().st_size - 3)
    assert unfinished_tail(file) > 0
    read = results.read_scalars(file)
    assert lost_steps(read) == ("step 3 lost b; any step after 3 that the run wrote there is "
                                "lost")

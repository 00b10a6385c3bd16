"""``python -m mathagent report``: every number of a results page computed from the runs.

The run folders here are ``train-local``'s layout (``params.json`` and a tidy
``metrics.csv``) with made-up accuracies, so that each figure of the page can be worked out
by hand; the committed folders under ``results/`` (Trinity-RFT event files included) are
checked by the regeneration test at the end.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mathagent import cli, paths, report
from mathagent.report import stats

CONFIG = "configs/config_random_qwen.yaml"   # an arm's config must exist; any one serves


def make_run(folder: Path, selector: str, seed: int, evals: dict[int, float],
             steps: int = 60, rollout: float = 0.5) -> None:
    """A run folder: ``steps`` training steps, held-out accuracy at each step of ``evals``."""
    folder.mkdir(parents=True)
    (folder / "params.json").write_text(json.dumps({"kind": "train-local", "selector": selector,
                                                    "seed": seed}))
    rows = [{"selector": selector, "seed": seed, "step": s,
             "rollout_accuracy": rollout if s else np.nan,
             "eval_accuracy": evals.get(s, np.nan),
             "effective_task_ratio": 0.5 if s else np.nan,
             "response_length": 100.0 if s <= steps // 4 else 60.0,
             "time_step_s": 6.0 if s else np.nan}
            for s in range(steps + 1)]
    pd.DataFrame(rows).to_csv(folder / "metrics.csv", index=False)


def spec(folder: Path, arms=("random", "bots"), experiment: str | None = None,
         **extra) -> None:
    """An experiment.yaml; with ``experiment`` (a spec's path) its arms hold only ``about``
    and the seeds are the spec's."""
    if experiment:
        held = {"experiment": experiment, "arms": {a: {"about": f"the {a} arm"} for a in arms}}
    else:
        held = {"arms": {a: {"config": CONFIG, "about": f"the {a} arm"} for a in arms},
                "seeds": [0, 1, 2]}
    data = {"title": "A test experiment", "question": "Which arm learns more?",
            **held, "hardware": "NVIDIA H100 80GB HBM3",
            "settings": {"policy": "a policy", "steps": "60", "batch": "16 x 8",
                         "evaluation": "step 0 and every 10 steps", "software": "trinity-rft"},
            **extra}
    import yaml
    (folder / "experiment.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


EVERY_10 = range(0, 61, 10)


@pytest.fixture
def three_seeds(tmp_path):
    """random and bots, seeds 0-2, evaluated at step 0 and every 10 steps to 60."""
    folder = tmp_path / "exp"
    finals = {"random": (0.30, 0.34, 0.38), "bots": (0.40, 0.41, 0.45)}
    for arm, accs in finals.items():
        for seed, final in enumerate(accs):
            make_run(folder / f"{arm}_seed{seed}", arm, seed,
                     {s: 0.16 + (final - 0.16) * s / 60 for s in EVERY_10})
    spec(folder, answer="bots {diff_bots_vs_random} ({z_bots_vs_random} SE).")
    return folder


def test_numbers_of_several_evaluations_and_seeds_are_worked_out_by_hand(three_seeds):
    exp = report.read_spec(three_seeds)
    table = stats.read_runs(exp)
    seeds = stats.per_seed(exp, table)
    assert list(seeds.columns) == list(EVERY_10) and stats.final_step(table) == 60
    assert seeds.loc[("bots", 2), 60] == pytest.approx(0.45)
    means = stats.arm_means(seeds).set_index(["arm", "step"])
    assert means.loc[("random", 60), "mean"] == pytest.approx(0.34)
    assert means.loc[("random", 60), "se"] == pytest.approx(0.04 / math.sqrt(3))  # sd 0.04
    d = stats.differences(seeds, 60).iloc[0]
    se = math.sqrt(0.04 ** 2 / 3 + np.var([0.40, 0.41, 0.45], ddof=1) / 3)
    assert (d["a"], d["b"]) == ("bots", "random")
    assert d["diff"] == pytest.approx(0.08) and d["se"] == pytest.approx(se)
    assert d["z"] == pytest.approx(0.08 / se) and d["power"] == pytest.approx(2 * se)
    values = stats.named_values(exp, table)
    assert values["mean_random_step30"] == "0.250" and values["seeds_bots"] == "3"
    assert (values["final_bots_seed1"], values["min_final"], values["max_final"]) == (
        "0.410", "0.300", "0.450")
    assert values["z_bots_vs_random"] == f"{0.08 / se:+.1f}"
    b = stats.behaviour(table, exp.arm_names).set_index("arm")
    assert b.loc["bots", "window"] == 15
    assert (b.loc["bots", "length_first"], b.loc["bots", "length_last"]) == (100.0, 60.0)
    runs = stats.runs_table(exp, table)
    assert runs["steps"].tolist() == [60] * 6 and runs["wall_min"].tolist() == [6.0] * 6


def test_the_page_shows_every_evaluation_the_answer_and_the_settings(three_seeds):
    page, block, _ = report.build(report.read_spec(three_seeds), "results/x")
    assert "| `bots` | 2 | 0.160 | 0.208 | 0.257 | 0.305 | 0.353 | 0.402 | 0.450 |" in page
    assert "| `random` | 3 | 0.160 ± 0.000 |" in page and "0.340 ± 0.023 |" in page
    assert "**Answer.** bots +0.080 (+2.9 SE)." in page
    assert "| batch | 16 x 8 |" in page and "| arm `bots` | the bots arm (`" in page
    assert "| `bots` | 3 | 0.420 ± 0.015 |" in block
    assert len(page.split()) <= report.MAX_WORDS


def test_one_seed_has_no_standard_error_and_one_arm_no_differences(tmp_path):
    make_run(tmp_path / "random_seed0", "random", 0, {0: 0.2, 60: 0.3})
    spec(tmp_path, arms=("random",), seeds=[0, 1])
    exp = report.read_spec(tmp_path)
    page, block, table = report.build(exp, "r")
    assert "| `random` | 1 | 0.200 ± n/a | 0.300 ± n/a |" in page
    assert "| `random` | 1 | not run | not run |" in page       # planned, no folder yet
    assert "## Differences" not in page and stats.named_values(exp, table)["se_random"] == "n/a"
    assert report.progress(tmp_path).values.tolist() == [
        ["random", 0, 60, "0.200", "0.300"], ["random", 1, "not run", "not run", "not run"]]
    make_run(tmp_path / "bots_seed0", "bots", 0, {0: 0.2, 60: 0.4})
    spec(tmp_path, seeds=[0])
    exp = report.read_spec(tmp_path)
    values = stats.named_values(exp, stats.read_runs(exp))
    assert (values["diff_bots_vs_random"], values["z_bots_vs_random"]) == ("+0.100", "n/a")


def test_a_run_still_being_laid_out_under_a_hidden_name_is_not_read(tmp_path):
    """The experiment command writes a run as ``.<run>.tmp`` and renames it once whole; a try
    that failed midway leaves that folder behind."""
    make_run(tmp_path / "random_seed0", "random", 0, {0: 0.2, 60: 0.3})
    make_run(tmp_path / ".random_seed1.tmp", "random", 1, {0: 0.2, 60: 0.9})
    spec(tmp_path, arms=("random",), seeds=[0, 1])
    exp = report.read_spec(tmp_path)
    assert sorted(stats.read_runs(exp)["run"].unique()) == ["random_seed0"]
    page, _, _ = report.build(exp, "r")
    assert "| `random` | 1 | not run | not run |" in page


def test_runs_kept_as_one_table_and_numbers_of_files(tmp_path):
    make_run(tmp_path / "tidy", "random", 0, {0: 0.1, 60: 0.2})
    pd.read_csv(tmp_path / "tidy" / "metrics.csv").to_csv(tmp_path / "runs.csv", index=False)
    pd.DataFrame({"level": [0, 1], "rate": [0.5, 0.25]}).to_csv(tmp_path / "f.csv", index=False)
    (tmp_path / "tidy" / "params.json").unlink()
    spec(tmp_path, arms=("random",), table="runs.csv",
         values={"rate": {"file": "f.csv", "column": "rate", "decimals": 2}},
         tables=[{"file": "f.csv", "caption": "Rates by level", "columns": {"level": "level",
                                                                            "rate": "pass rate"}}],
         interpretation="The mean rate is {rate}; random ends at {mean_random}.")
    page, _, _ = report.build(report.read_spec(tmp_path), "r")
    assert "| `random seed 0` | `random` | 0 | 60 |" in page
    assert "**Rates by level** (`f.csv`)\n\n| level | pass rate |\n| --- | --- |\n| 0 | 0.500 |" in page
    assert "The mean rate is 0.38; random ends at 0.200." in page


@pytest.mark.parametrize("change, message", [
    ({"question": None}, "no 'question' (required)"),
    ({"colour": "red"}, "unknown key(s) colour"),
    ({"baseline": "greedy"}, "baseline 'greedy' is not an arm"),
    ({"settings": {"policy": "p"}}, "settings lack steps, batch, evaluation, software"),
    ({"arms": {"random": {"config": "configs/nope.yaml"}}}, "arms.random.config"),
    ({"answer": "{mean_greedy}"}, "answer cites {mean_greedy}, which nothing computes"),
    ({"values": {"x": {"file": "nope.csv", "column": "c"}}}, "values.x.file"),
    ({"arms": {"bots": {"config": CONFIG}}}, "selector 'random' is not an arm"),
    ({"values": {"x": {"file": "experiment.yaml", "column": "c", "decimals": "abc"}}},
     "values.x.decimals: 'abc' is not a whole number of decimals"),
    ({"values": {"x": {"file": "random_seed0/metrics.csv", "column": "selector"}}},
     "column 'selector' is not numbers"),
])
def test_bad_input_is_one_line_naming_the_file_and_key(tmp_path, capsys, change, message):
    make_run(tmp_path / "random_seed0", "random", 0, {0: 0.2, 60: 0.3})
    spec(tmp_path, arms=("random",))
    import yaml
    data = yaml.safe_load((tmp_path / "experiment.yaml").read_text())
    data.update(change)
    (tmp_path / "experiment.yaml").write_text(yaml.safe_dump({k: v for k, v in data.items()
                                                              if v is not None}))
    assert cli.main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "README.md").exists()


def test_the_same_arm_and_seed_twice_and_a_bad_start_point_are_refused(tmp_path, capsys):
    make_run(tmp_path / "a", "random", 0, {60: 0.3})
    make_run(tmp_path / "b", "random", 0, {60: 0.3})
    spec(tmp_path, arms=("random",))
    assert cli.main(["report", str(tmp_path)]) == 2
    assert "random seed 0 twice (a, b)" in capsys.readouterr().err
    shutil.rmtree(tmp_path / "b")
    (tmp_path / "start.csv").write_text("run,step,eval_accuracy\nx,3,0.1\n")
    spec(tmp_path, arms=("random",), start_point="start.csv")
    assert cli.main(["report", str(tmp_path)]) == 2
    assert "start.csv: not a start point written by draw" in capsys.readouterr().err


def test_check_exits_1_in_one_line_when_the_page_differs_and_force_guards_hand_pages(
        three_seeds, capsys):
    readme = three_seeds / "README.md"
    readme.write_text("# written by hand\n")
    assert cli.main(["report", str(three_seeds)]) == 2
    assert "was not written by `report`; --force replaces it" in capsys.readouterr().err
    assert cli.main(["report", str(three_seeds), "--force"]) == 0
    assert cli.main(["report", str(three_seeds), "--check"]) == 0
    assert cli.main(["report", str(three_seeds)]) == 0    # its own page: rewritten freely
    readme.write_text(readme.read_text().replace("0.450", "0.451"))
    capsys.readouterr()
    assert cli.main(["report", str(three_seeds), "--check"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "README.md differs from what" in err


def test_missing_results_figures_are_drawn_and_a_check_names_them(three_seeds, capsys):
    spec(three_seeds, figures={"training_curves.png": "Held-out accuracy by step"})
    assert cli.main(["report", str(three_seeds), "--check"]) == 1
    assert "training_curves.png: not drawn yet" in capsys.readouterr().err
    assert cli.main(["report", str(three_seeds)]) == 0
    assert (three_seeds / "training_curves.png").stat().st_size > 10_000
    page = (three_seeds / "README.md").read_text()
    assert "![training_curves](training_curves.png)" in page and "*Held-out accuracy by step*" in page
    # a run added since: the figure is drawn again with it (not kept as first drawn)
    before = (three_seeds / "training_curves.png").read_bytes()
    make_run(three_seeds / "bots_seed3", "bots", 3, {s: 0.9 for s in EVERY_10})
    assert cli.main(["report", str(three_seeds)]) == 0
    assert (three_seeds / "training_curves.png").read_bytes() != before
    spec(three_seeds, figures={"other.png": "x"})
    assert cli.main(["report", str(three_seeds)]) == 2
    assert "other.png: no such figure" in capsys.readouterr().err


def test_the_project_readmes_answer_block_is_written_between_its_markers(three_seeds, tmp_path,
                                                                         monkeypatch, capsys):
    root = tmp_path / "repo"
    folder = root / "results" / "exp"
    folder.parent.mkdir(parents=True)
    three_seeds.rename(folder)
    (root / "configs").mkdir()
    (root / CONFIG).write_text("x: 1\n")
    monkeypatch.setattr(paths, "REPO_ROOT", root)
    (root / "README.md").write_text("intro\n<!-- report results/exp: answer -->\nold\n"
                                    "<!-- /report results/exp -->\nrest\n")
    assert cli.main(["report", str(folder)]) == 0
    text = (root / "README.md").read_text()
    assert text.startswith("intro\n<!-- report results/exp: answer -->\n**A test experiment.**"
                           "\n\nbots +0.080")
    assert "| `random` | 3 | 0.340 ± 0.023 |" in text and text.endswith("-->\nrest\n")
    assert "[`results/exp/`](results/exp/README.md)" in text
    (root / "README.md").write_text(text.replace("0.340", "0.345"))
    assert cli.main(["report", str(folder), "--check"]) == 1
    assert "the answer block of results/exp differs" in capsys.readouterr().err


# --------------------------------------------------------------------------------------
# A folder whose arms and seeds are its experiment spec's (``experiment:``)
# --------------------------------------------------------------------------------------

SPEC_ARMS = {"random": "configs/config_random_qwen.yaml",
             "difficulty": "configs/config_difficulty_qwen.yaml"}


@pytest.fixture
def from_spec(tmp_path, monkeypatch):
    """A repository root holding ``configs/experiment_t.yaml`` (arms ``random`` and
    ``difficulty``, seeds 0 and 1, the committed configs) and its output folder with one run
    of each arm at seed 0; the folder's experiment.yaml names the spec."""
    import yaml

    root = tmp_path / "repo"
    (root / "configs").mkdir(parents=True)
    for config in SPEC_ARMS.values():
        shutil.copyfile(paths.REPO_ROOT / config, root / config)
    (root / "configs" / "experiment_t.yaml").write_text(yaml.safe_dump(
        {"out": "results/exp", "arms": SPEC_ARMS, "seeds": [0, 1]}, sort_keys=False))
    monkeypatch.setattr(paths, "REPO_ROOT", root)
    folder = root / "results" / "exp"
    make_run(folder / "random_seed0", "random", 0, {0: 0.2, 60: 0.3})
    make_run(folder / "difficulty_seed0", "difficulty_based", 0, {0: 0.2, 60: 0.4})
    spec(folder, arms=("random", "difficulty_based"), experiment="configs/experiment_t.yaml")
    return folder


def test_a_folder_naming_its_spec_takes_the_arms_and_seeds_from_it(from_spec):
    exp = report.read_spec(from_spec)
    assert exp.experiment == "configs/experiment_t.yaml"
    assert [(a.name, a.config, a.about) for a in exp.arms] == [
        ("random", SPEC_ARMS["random"], "the random arm"),
        ("difficulty_based", SPEC_ARMS["difficulty"], "the difficulty_based arm")]
    assert exp.seeds == (0, 1) and exp.baseline == "random"
    page, _, _ = report.build(exp, "results/exp")
    assert ("| arm `difficulty_based` | the difficulty_based arm "
            "(`configs/config_difficulty_qwen.yaml`) |") in page
    assert "| seeds | 0, 1 |" in page
    assert "| `difficulty_based` | 1 | not run | not run |" in page   # seed 1: planned, not run
    assert "| `difficulty_seed0` | `difficulty_based` | 0 | 60 |" in page
    # an arm's about is optional: the spec's arms are the arms all the same
    spec(from_spec, arms=("random",), experiment="configs/experiment_t.yaml")
    exp = report.read_spec(from_spec)
    assert exp.arm_names == ["random", "difficulty_based"] and exp.arms[1].about == ""


def _edit(folder: Path, change) -> None:
    import yaml

    file = folder / "experiment.yaml"
    data = yaml.safe_load(file.read_text())
    change(data)
    file.write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(seeds=[0, 1]),
     "experiment.yaml: seeds: the spec configs/experiment_t.yaml holds them"),
    (lambda d: d["arms"]["random"].update(config=SPEC_ARMS["random"]),
     "experiment.yaml: arms.random.config: the spec configs/experiment_t.yaml holds the arm's "
     "config"),
    (lambda d: d.update(experiment="configs/experiment_gone.yaml"),
     "experiment.yaml: experiment: configs/experiment_gone.yaml: no such file"),
    (lambda d: d.update(experiment=["configs/experiment_t.yaml"]),
     "experiment.yaml: experiment: the spec's path"),
    (lambda d: d.update(arms={"difficulty": {"about": "x"}}),
     "arms.difficulty: not an arm of configs/experiment_t.yaml (its arms, by the selector "
     "their runs report: random, difficulty_based)"),
    (lambda d: d.update(experiment="configs/config_random_qwen.yaml"),
     "config_random_qwen.yaml: mode: unknown key (a spec holds"),   # a config, not a spec
])
def test_a_spec_named_twice_missing_or_wrong_is_one_line(from_spec, capsys, change, message):
    _edit(from_spec, change)
    assert cli.main(["report", str(from_spec)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert str(from_spec / "experiment.yaml") in err
    assert not (from_spec / "README.md").exists()


def test_runs_that_do_not_match_the_specs_arms_are_refused(from_spec, capsys):
    import yaml

    def refused(message: str) -> None:
        assert cli.main(["report", str(from_spec)]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err

    assert cli.main(["report", str(from_spec)]) == 0
    # a run of an arm the spec does not have
    make_run(from_spec / "bots_seed0", "bots", 0, {0: 0.2, 60: 0.5})
    refused(f"{from_spec / 'bots_seed0'}: not a run of configs/experiment_t.yaml (its runs: "
            "random_seed0, random_seed1, difficulty_seed0, difficulty_seed1)")
    shutil.rmtree(from_spec / "bots_seed0")
    # the spec's run folder, made with another arm's selector or another seed
    make_run(from_spec / "difficulty_seed1", "random", 1, {0: 0.2, 60: 0.5})
    refused(f"{from_spec / 'difficulty_seed1'}: ran selector 'random' with seed 1; "
            "configs/experiment_t.yaml plans it as selector 'difficulty_based' with seed 1")
    shutil.rmtree(from_spec / "difficulty_seed1")
    make_run(from_spec / "difficulty_seed1", "difficulty_based", 7, {0: 0.2, 60: 0.5})
    refused("ran selector 'difficulty_based' with seed 7; configs/experiment_t.yaml plans it "
            "as selector 'difficulty_based' with seed 1")
    shutil.rmtree(from_spec / "difficulty_seed1")
    # two arms of the spec running one selector: the report could not tell them apart
    spec_file = paths.REPO_ROOT / "configs" / "experiment_t.yaml"
    spec_file.write_text(yaml.safe_dump({"out": "results/exp", "seeds": [0, 1], "arms": {
        "random": SPEC_ARMS["random"], "difficulty": SPEC_ARMS["difficulty"],
        "shuffled": SPEC_ARMS["random"]}}, sort_keys=False))
    refused("experiment: configs/experiment_t.yaml: arms random and shuffled both run selector "
            "'random'")


def test_what_each_notebook_did_is_read_from_the_tutorials_summary(tmp_path):
    (tmp_path / "tutorial.log").write_text(
        "Tutorial summary\n================\n"
        "  01_data_preparation.ipynb          ok         18.3 s\n"
        "      skipped: 01 AIME-24 eval set: no local AIME file\n"
        "  02_agent_and_judge.ipynb           ok        122.1 s\n")
    (tmp_path / "experiment.yaml").write_text(
        "title: t\nquestion: q\ntables:\n  - {tutorial_log: tutorial.log, caption: c}\n")
    page, _, _ = report.build(report.read_spec(tmp_path), "n")
    assert "| `01_data_preparation` | ok | 18.3 | 01 AIME-24 eval set |" in page
    assert "| `02_agent_and_judge` | ok | 122.1 | - |" in page


QWEN_BOTS_CONFIG = paths.RESULTS_DIR / "trinity_qwen" / "bots_seed0" / "launched_config.yaml"


def selector_run(folder: Path, steps: int, saved: str = "own", config: Path = QWEN_BOTS_CONFIG):
    """A Trinity run folder whose ``buffer_tasks.csv`` holds the selector's own ``steps``
    batches of 16 with fed pass rates (the strong reference plus 0.25); ``saved``: the state
    after the last step (``own``), after the first (``early``) or the position only
    (``position``). Returns the driver after the last step."""
    from mathagent import run_facts

    folder.mkdir(parents=True)
    shutil.copy(config, folder / "launched_config.yaml")
    driver = run_facts.run_selector(folder, paths.ARITHMETIC_QWEN_DIR)
    strong = np.asarray(driver.dataset["qwen_bare_pass_rate"])
    rows, early = [], None
    for step in range(1, steps + 1):
        batch = driver.get_indices(16)
        rates = [min(1.0, float(strong[i]) + 0.25) for i in batch]
        driver.feedback(batch, rates)
        early = early or driver.state_dict()
        rows += [{"step": step, "taskset": "0", "task_index": i, "experiences": 8,
                  "pass_rate": r} for i, r in zip(batch, rates, strict=True)]
    pd.DataFrame(rows).to_csv(folder / run_facts.BUFFER_TASKS, index=False)
    state = {"own": driver.state_dict(), "early": early,
             "position": {"current_index": 16 * steps}}[saved]
    (folder / "explorer_meta.json").write_text(json.dumps({"taskset_states": [state]}))
    return driver


def selector_page(folder: Path, run: str, prose: str = "c", **table) -> str:
    import yaml

    (folder / "experiment.yaml").write_text(yaml.safe_dump({
        "title": "t", "question": "q", "interpretation": prose,
        "tables": [{"selector": run, "taskset": "data/arithmetic_qwen", "caption": "cap",
                    **table}]}))
    page, _, _ = report.build(report.read_spec(folder), "n")
    return page


def test_a_selector_table_replays_the_run_and_names_what_the_references_implied(tmp_path):
    """Each step's fed pass rate, what the references implied of the batch at the capability
    once fed, the batch's share of pinned references and c: worked out from the selector's
    own draws; the page shows the first step and every tenth, and names every step's values."""
    driver = selector_run(tmp_path / "own", 12)
    page = selector_page(tmp_path, "own", prose="{rate_own_step12} {implied_own_step12} "
                         "{pinned_own_step12} {capability_own_step12} {pinned_share_own}")
    table, same, share = stats.selector_replay(tmp_path / "own", paths.ARITHMETIC_QWEN_DIR)
    batches = pd.read_csv(tmp_path / "own" / "buffer_tasks.csv")
    last = batches[batches["step"] == 12]
    tasks = last["task_index"].tolist()
    weak, strong = (np.asarray(driver.dataset[k], dtype=float) for k in
                    ("qwen_short_pass_rate", "qwen_bare_pass_rate"))
    pinned = (weak == strong) & (weak > 0) & (weak < 1)
    c = driver.capability()
    implied = np.clip(weak[tasks] + c * (strong[tasks] - weak[tasks]), 0, 1).mean()
    assert same is True and share == pytest.approx(float(pinned.mean()))
    assert table["pass rate"].iloc[-1] == pytest.approx(last["pass_rate"].mean())
    assert table["implied pass rate"].iloc[-1] == pytest.approx(implied)
    assert table["pinned references"].iloc[-1] == pytest.approx(float(pinned[tasks].mean()))
    assert table["capability"].iloc[-1] == c and table["capability"].notna().all()
    assert 0.01 < share < 0.5 and c > 0
    words = page.split("## What it means")[1].split()
    assert words == [stats.acc(last["pass_rate"].mean()), stats.acc(implied),
                     stats.acc(float(pinned[tasks].mean())), stats.capability_text(c),
                     stats.acc(share)]
    shown = [int(line.split("|")[1]) for line in page.splitlines()
             if line.startswith("| ") and line.split("|")[1].strip().isdigit()]
    assert shown == [1, 10]
    assert "The replay drew 192 of the run's 192 tasks and ends in the state the run saved." \
        in page
    assert f"which they imply whatever c is): {stats.acc(share)}." in page


@pytest.mark.parametrize("saved, says", [
    ("early", "does not end in the state the run saved"),
    ("position", "cannot be set beside a saved state (the run saved its position only)")])
def test_a_selector_table_says_when_the_replay_cannot_be_set_beside_the_saved_state(
        tmp_path, saved, says):
    selector_run(tmp_path / "r", 3, saved=saved)
    assert f"drew 48 of the run's 48 tasks and {says}." in selector_page(tmp_path, "r")


@pytest.mark.parametrize("table, message", [
    ({"taskset": "data/no_such_taskset"}, r"tables\[0\]\.taskset: .*no_such_taskset: no such "
                                          "folder"),
    ({"taskset": None}, r"tables\[0\]\.taskset: needs the taskset folder"),
    ({"columns": {"a": "b"}}, r"tables\[0\]: unknown key\(s\) columns"),
])
def test_a_selector_table_without_its_taskset_or_with_a_files_keys_is_one_line(
        tmp_path, table, message):
    selector_run(tmp_path / "own", 2)
    with pytest.raises(report.ReportError, match=message):
        selector_page(tmp_path, "own", **table)


def _set_first(file: Path, column: str, value: float) -> None:
    table = pd.read_csv(file)
    table.loc[0, column] = value
    table.to_csv(file, index=False)


@pytest.mark.parametrize("change, message", [
    (lambda f: f.unlink(), "buffer_tasks.csv: no such file"),
    (lambda f: f.write_text(""), "buffer_tasks.csv: empty"),
    (lambda f: f.write_text("step,taskset,task_index,experiences,pass_rate\n"),
     "buffer_tasks.csv: no rows"),
    (lambda f: _set_first(f, "pass_rate", 1.5), "buffer_tasks.csv: step 1: a pass rate outside"),
    (lambda f: _set_first(f, "task_index", 99999),
     "buffer_tasks.csv: step 1: a task index outside the 4400 tasks"),
])
def test_a_selector_table_of_a_run_with_bad_pass_rates_is_one_line(tmp_path, change, message):
    selector_run(tmp_path / "own", 2)
    change(tmp_path / "own" / "buffer_tasks.csv")
    with pytest.raises(report.ReportError, match=message):
        selector_page(tmp_path, "own")


def test_a_selector_table_of_a_selector_without_references_is_one_line(tmp_path):
    """``random`` draws without a belief: nothing to imply a pass rate from."""
    config = paths.RESULTS_DIR / "trinity_qwen" / "random_seed0" / "launched_config.yaml"
    selector_run(tmp_path / "rnd", 2, saved="position", config=config)
    with pytest.raises(report.ReportError, match="rnd: its selector .* has no reference pass "
                                                 "rates to imply"):
        selector_page(tmp_path, "rnd")


# --------------------------------------------------------------------------------------
# The committed pages
# --------------------------------------------------------------------------------------

FOLDERS = sorted(p for p in paths.RESULTS_DIR.iterdir() if p.is_dir())


def test_every_results_folder_has_an_experiment_and_there_are_at_most_eight():
    assert 0 < len(FOLDERS) <= 8
    assert [f.name for f in FOLDERS if not (f / "experiment.yaml").is_file()] == []


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_every_committed_report_is_what_report_writes_now(folder):
    report.write_report(folder, check=True)
    assert len((folder / "README.md").read_text().split()) <= report.MAX_WORDS
def test_the_project_readme_is_short_and_its_answer_block_comes_from_a_report():
    text = (paths.REPO_ROOT / "README.md").read_text()
    assert len(text.split()) <= 2000
    assert "<!-- report results/" in text

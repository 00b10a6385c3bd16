"""Notebook 05's "your own runs": the training runs made in this checkout (``runs/``), read
beside the committed ones (``run_facts.runs_made_here``, ``runs_overview``, ``your_runs``)."""

from __future__ import annotations

import shutil

import pandas as pd

from mathagent import paths, run_facts

RESULTS = paths.RESULTS_DIR


def _stopped_before_step_1(job):
    """A Trinity-RFT job folder of a run that stopped before its first step: its params.json
    and event files that hold no scalar yet."""
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    (job / "monitor" / "tensorboard" / "explorer").mkdir(parents=True)
    shutil.copyfile(RESULTS / "trinity_qwen" / "random_seed0" / "params.json",
                    job / "params.json")
    EventFileWriter(str(job / "monitor" / "tensorboard" / "explorer")).close()


def _runs_dir(tmp_path):
    """A ``runs/`` as notebook 04 leaves it on a GPU: two train-local runs, the smoke run's
    Trinity-RFT job folder, one that stopped before its first step, and a simulated sweep."""
    root = tmp_path / "runs"
    for stamp, src in (("20261204-105957", "random_seed1"), ("20261204-110011", "difficulty_seed0")):
        shutil.copytree(RESULTS / "trinity_h200_local" / src, root / "train_local" / stamp)
    job = root / "notebooks" / "04_training_launch" / "smoke" / "config_difficulty_arithmetic" \
        / "checkpoints" / "Data-Augmentation" / "Difficulty-Based-Selector-Arithmetic"
    shutil.copytree(RESULTS / "trinity_h200" / "difficulty_seed2", job)
    early = root / "smoke" / "config_random_qwen" / "checkpoints" / "P" / "Random"
    _stopped_before_step_1(early)
    killed = root / "train_local" / "20261204-120000-random-s0"   # killed before step 1
    killed.mkdir(parents=True)
    shutil.copyfile(RESULTS / "trinity_h200_local" / "random_seed0" / "params.json",
                    killed / "params.json")
    (root / "simulate" / "20261204-105149").mkdir(parents=True)
    shutil.copyfile(RESULTS / "trinity_h200" / "trinity_h200.csv",
                    root / "simulate" / "20261204-105149" / "steps.csv")
    return root, job, early


def test_runs_made_here_are_the_training_runs_under_runs(tmp_path):
    root, job, early = _runs_dir(tmp_path)
    found = run_facts.runs_made_here(root)
    assert found == [root / "train_local" / "20261204-105957",
                     root / "train_local" / "20261204-110011",
                     root / "train_local" / "20261204-120000-random-s0", job, early]
    assert run_facts.runs_made_here(tmp_path / "nothing") == []


def test_the_tutorials_run_folder_is_searched_for_smoke_runs_too(tmp_path, monkeypatch):
    """Under ``python -m mathagent tutorial --out DIR`` notebook 04's scratch folders (and so
    its Trinity-RFT smoke run) are in DIR, which may lie outside ``runs/``: notebook 05 lists
    that run as well, once, whether DIR is outside ``runs/`` or inside it."""
    root, job, early = _runs_dir(tmp_path)
    out = tmp_path / "tutorial"
    elsewhere = out / "04_training_launch" / "smoke" / "config_random_arithmetic" \
        / "checkpoints" / "Data-Augmentation" / "Random-Selector-Arithmetic"
    shutil.copytree(RESULTS / "trinity_h200" / "random_seed0", elsewhere)
    assert elsewhere not in run_facts.runs_made_here(root)
    monkeypatch.setenv(paths.RUN_DIR_ENV, str(out))
    found = run_facts.runs_made_here(root)
    assert found[-1] == elsewhere and found.count(elsewhere) == 1
    table = run_facts.runs_overview(found, "made here", root)
    assert table.iloc[-1]["run"] == str(elsewhere)   # outside runs/: named in full
    assert table.iloc[-1]["held-out, last eval"] == "0.080 (step 40)"
    inside = root / "tutorial" / "20261204-140000"   # the default --out, under runs/
    shutil.move(out, inside)
    moved = inside / elsewhere.relative_to(out)
    monkeypatch.setenv(paths.RUN_DIR_ENV, str(inside))
    found = run_facts.runs_made_here(root)
    assert found.count(moved) == 1 and len(found) == 6


def test_the_overview_reads_each_run_and_says_which_logged_nothing(tmp_path):
    root, job, early = _runs_dir(tmp_path)
    table = run_facts.runs_overview(run_facts.runs_made_here(root), "made here", root)
    assert table["made by"].tolist() == ["train-local"] * 3 + ["Trinity-RFT"] * 2
    local = table.iloc[1]
    assert (local["run"], local["selector"], local["seed"], local["steps"]) == (
        "train_local/20261204-110011", "difficulty_based", 0, 40)
    assert local["held-out, first eval"] == "0.025 (step 0)"
    assert local["held-out, last eval"] == "0.105 (step 40)"
    killed = table.iloc[2]
    assert killed["steps"] == 0 and "train_local/20261204-120000-random-s0" in killed["note"]
    trinity = table.iloc[3]
    assert trinity["run"] == str(job.relative_to(root))
    assert trinity["held-out, last eval"] == "0.115 (step 40)"
    assert trinity["rollout accuracy, last step"] == "0.828"
    stopped = table.iloc[4]
    assert stopped["steps"] == 0 and "no scalars" in stopped["note"]
    assert str(early) in stopped["note"]   # the note names the folder at fault


def test_your_runs_puts_the_runs_made_here_above_the_committed_ones(tmp_path):
    root, _, _ = _runs_dir(tmp_path)
    line, table = run_facts.your_runs([RESULTS / "trinity_h200", RESULTS / "trinity_h200_local"],
                                      root)
    assert line == f"5 training run(s) made here under {root}"
    assert table["source"].tolist() == ["made here"] * 5 + ["committed"] * 12
    assert table["run"].iloc[5] == "trinity_h200/difficulty_seed0"
    line, nothing = run_facts.your_runs([RESULTS / "trinity_h200"], tmp_path / "empty")
    assert line.startswith("0 training run(s) made here") and "notebook 04 makes them" in line
    assert set(nothing["source"]) == {"committed"} and len(nothing) == 6


def test_the_overview_reads_runs_with_no_evaluation_an_empty_table_or_a_gap(tmp_path):
    """A run without evaluations has no held-out cells; a ``metrics.csv`` with a header only is
    a row naming it; a last step without rollout accuracy gives the last one that has it; a
    folder outside ``relative_to`` is named in full."""
    src = RESULTS / "trinity_h200_local" / "random_seed0"
    metrics = pd.read_csv(src / "metrics.csv")
    cases = {"no_eval": metrics.assign(eval_accuracy=float("nan")),
             "empty": metrics.iloc[:0],
             "gap": pd.concat([metrics, metrics.tail(1).assign(
                 step=metrics["step"].max() + 1, rollout_accuracy=float("nan"))])}
    for name, table in cases.items():
        (tmp_path / name).mkdir()
        shutil.copyfile(src / "params.json", tmp_path / name / "params.json")
        table.to_csv(tmp_path / name / "metrics.csv", index=False)
    overview = run_facts.runs_overview([tmp_path / n for n in cases], "here", tmp_path / "x")
    no_eval, empty, gap = (overview.iloc[i] for i in range(3))
    assert no_eval["held-out, first eval"] == "-" and no_eval["steps"] == 40
    assert empty["steps"] == 0 and str(tmp_path / "empty") in empty["note"]
    last = metrics[metrics["step"] == metrics["step"].max()]["rollout_accuracy"].mean()
    assert gap["steps"] == 41 and gap["rollout accuracy, last step"] == f"{last:.3f}"
    assert gap["run"] == str(tmp_path / "gap")

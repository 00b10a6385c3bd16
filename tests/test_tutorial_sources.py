"""What the notebooks read when the real inputs are not on this machine: the bundled raw
samples converted for the reference configs (notebook 04) and the committed runs or a
simulated stand-in (notebook 05). Each says which one it returned."""

from __future__ import annotations

import pytest

from mathagent import paths, results, simulation, tasks


def test_reference_tasksets_fall_back_to_the_converted_samples(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "GURU_DIR", tmp_path / "no_guru")
    monkeypatch.setattr(paths, "AIME24_DIR", tmp_path / "no_aime")
    train, evals, what = tasks.reference_tasksets(tmp_path / "work")
    assert (train, evals) == (tmp_path / "work" / "guru_math", tmp_path / "work" / "aime24")
    assert "data/samples" in what
    assert len(tasks.load_taskset(train, "train")) > 0
    assert len(tasks.load_taskset(evals, "test")) > 0


def test_reference_tasksets_take_the_prepared_ones_when_both_exist(tmp_path, monkeypatch):
    guru, aime = tmp_path / "guru", tmp_path / "aime"
    tasks.prepare_guru(paths.SAMPLES_DIR / "guru_raw.jsonl", out_dir=guru)
    tasks.prepare_aime(paths.SAMPLES_DIR / "aime_style.jsonl", out_dir=aime)
    monkeypatch.setattr(paths, "GURU_DIR", guru)
    monkeypatch.setattr(paths, "AIME24_DIR", aime)
    work = tmp_path / "work"
    assert tasks.reference_tasksets(work)[:2] == (guru, aime)
    assert not work.exists()  # nothing converted


def test_runs_or_stand_in_prefers_real_runs_and_says_which(tmp_path):
    what, folder = simulation.runs_or_stand_in(paths.RESULTS_DIR / "grpo_h200", tmp_path,
                                               n_tasks=300, steps=10, n_seeds=2)
    assert folder == paths.RESULTS_DIR / "grpo_h200" and what.startswith("tutorial-scale")
    what, folder = simulation.runs_or_stand_in(tmp_path / "nothing_here", tmp_path,
                                               n_tasks=300, steps=10, n_seeds=2)
    assert what.startswith("SIMULATED") and folder == tmp_path / "simulated"
    table = results.load_runs([folder], progress=False)
    assert set(table["selector"]) == {"random", "difficulty_based"}
    assert table["seed"].nunique() == 2 and table["step"].max() == 10


def test_scratch_dir_sits_beside_the_figures(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.RUN_DIR_ENV, str(tmp_path))
    assert paths.scratch_dir("05_results") == tmp_path / "05_results"
    assert (tmp_path / "05_results").is_dir() and paths.figure_dir() == tmp_path / "figures"


@pytest.mark.parametrize("name", ["guru_raw.jsonl", "aime_style.jsonl"])
def test_samples_are_bundled(name):
    assert (paths.SAMPLES_DIR / name).is_file()

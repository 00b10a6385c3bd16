"""The tutorial runner executes notebooks in fresh kernels and reports honestly."""

from __future__ import annotations

import nbformat
import pytest

from mathagent import paths, tutorial


def _write_nb(path, *sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nbformat.write(nb, path)
    return path


@pytest.mark.slow
def test_runner_collects_skips_and_names_the_failing_cell(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    good = _write_nb(src / "01_good.ipynb",
                     "from mathagent.tutorial import skip",
                     "skip('GPU launch', 'no GPU on this machine')")
    bad = _write_nb(src / "02_bad.ipynb", "x = 1", "raise ValueError('boom')")
    never = _write_nb(src / "03_never.ipynb", "pass")
    out = tmp_path / "out"
    out.mkdir()
    notebooks = tutorial.tutorial_notebooks(src)
    assert notebooks == [good, bad, never]

    results = tutorial.run_tutorial(notebooks, out, smoke=True)

    assert [r.ok for r in results] == [True, False]  # stops at the first failure
    assert results[0].skipped == ["GPU launch: no GPU on this machine"]
    assert results[1].error.startswith("cell 1:") and "boom" in results[1].error
    assert (out / "01_good.ipynb").exists() and (out / "02_bad.ipynb").exists()
    summary = tutorial.format_summary(results, notebooks, out)
    assert "skipped: GPU launch: no GPU on this machine" in summary
    assert "03_never.ipynb" in summary and "not run" in summary


def test_figure_dir_follows_the_run_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.RUN_DIR_ENV, str(tmp_path))
    assert paths.figure_dir() == tmp_path / "figures"
    assert (tmp_path / "figures").is_dir()


def test_a_test_session_keeps_its_runs_out_of_the_checkout():
    """conftest.py gives the session (and the notebooks' kernels, which inherit it) a runs
    temporary folder of its own: notebook 04's train-local run alone leaves 1.6 GB, and the
    checkout's runs/ is the user's."""
    runs = paths.runs_dir()
    assert runs.is_dir()
    assert not runs.resolve().is_relative_to(paths.REPO_ROOT.resolve())

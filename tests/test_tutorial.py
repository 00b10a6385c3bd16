"""The tutorial runner executes notebooks in fresh kernels and reports honestly."""

from __future__ import annotations

import json
import os
from pathlib import Path

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
    linked = nbformat.read(good, as_version=4)
    linked.cells.insert(0, nbformat.v4.new_markdown_cell("[the glossary](../docs/glossary.md)"))
    nbformat.write(linked, good)
    bad = _write_nb(src / "02_bad.ipynb", "x = 1", "raise ValueError('boom')")
    never = _write_nb(src / "03_never.ipynb", "pass")
    out = tmp_path / "runs" / "out"
    out.mkdir(parents=True)
    notebooks = tutorial.tutorial_notebooks(src)
    assert notebooks == [good, bad, never]

    results = tutorial.run_tutorial(notebooks, out, smoke=True)

    assert [r.ok for r in results] == [True, False]  # stops at the first failure
    assert results[0].skipped == ["GPU launch: no GPU on this machine"]
    assert results[1].error.startswith("cell 1:") and "boom" in results[1].error
    assert (out / "01_good.ipynb").exists() and (out / "02_bad.ipynb").exists()
    copy = nbformat.read(out / "01_good.ipynb", as_version=4)  # out is a folder deeper
    assert copy.cells[0].source == "[the glossary](../../docs/glossary.md)"
    summary = tutorial.format_summary(results, notebooks, out)
    assert "skipped: GPU launch: no GPU on this machine" in summary
    assert "03_never.ipynb" in summary and "not run" in summary


@pytest.mark.parametrize("callers", [None, "/elsewhere", "/elsewhere{sep}{root}"])
def test_the_kernels_get_the_repository_root_first_on_pythonpath(tmp_path, monkeypatch,
                                                                  callers):
    """What ``run_tutorial`` gives each notebook's kernel (``run_notebook`` is replaced by
    a recorder of the environment here; the next test starts a real kernel)."""
    root = str(paths.REPO_ROOT)
    if callers is None:
        monkeypatch.delenv("PYTHONPATH", raising=False)
    else:
        callers = callers.format(sep=os.pathsep, root=root)
        monkeypatch.setenv("PYTHONPATH", callers)
    seen = []

    def record(path, out_dir, timeout=1800):
        seen.append(os.environ["PYTHONPATH"])
        return tutorial.NotebookResult(path.name, 0.0, True)

    monkeypatch.setattr(tutorial, "run_notebook", record)
    tutorial.run_tutorial([tmp_path / "01_a.ipynb", tmp_path / "02_b.ipynb"], tmp_path, True)
    expected = [root] if callers is None else [root, "/elsewhere"]
    assert [entry.split(os.pathsep) for entry in seen] == [expected, expected]
    assert os.environ.get("PYTHONPATH") == callers  # the caller's value is back


@pytest.mark.slow
def test_a_kernel_outside_the_checkout_imports_this_checkouts_package(tmp_path, monkeypatch):
    """A real kernel, started from a folder outside the repository with no ``PYTHONPATH`` of
    the caller's, finds the repository root on ``sys.path`` and imports ``mathagent`` from
    it. Where the package is also installed (this project's venv installs it in editable
    mode, through an import hook rather than a ``sys.path`` entry), the root being on the
    kernel's ``sys.path`` is what only the runner can have put there; the file the kernel
    imported is this checkout's."""
    assert not tmp_path.resolve().is_relative_to(paths.REPO_ROOT.resolve())
    monkeypatch.delenv("PYTHONPATH", raising=False)
    nb = _write_nb(tmp_path / "01_where.ipynb",
                   "import json, sys, mathagent\n"
                   "print(json.dumps([mathagent.__file__, sys.path]))")
    out = tmp_path / "out"
    out.mkdir()

    [result] = tutorial.run_tutorial([nb], out, smoke=True)

    assert result.ok, result.error
    text = nbformat.read(out / nb.name, as_version=4).cells[0].outputs[0]["text"]
    module_file, sys_path = json.loads(text)
    assert str(paths.REPO_ROOT) in sys_path
    assert Path(module_file).resolve() == (paths.REPO_ROOT / "mathagent" / "__init__.py").resolve()


def test_an_executed_copys_links_point_from_the_folder_it_is_written_to(tmp_path):
    """A copy three folders down (runs/tutorial/<timestamp>/) reaches the same files as its
    notebook in notebooks/; a link to another tutorial notebook means that one's copy beside
    it; URLs and in-page anchors stay."""
    source, out = tmp_path / "notebooks", tmp_path / "runs" / "tutorial" / "20250101-000000"
    source.mkdir()
    out.mkdir(parents=True)
    _write_nb(source / "05_results.ipynb")
    text = ("See the [glossary](../docs/glossary.md), the [README](../README.md#references), "
            "[notebook 05](05_results.ipynb), [a folder](../results/demo/), "
            "![a figure](figures/x.png), <a href=\"../docs/site.md\">site</a>, "
            "[upstream](https://github.com/agentscope-ai/Trinity-RFT), [below](#summary).")
    assert tutorial.rebase_links(text, source, out) == (
        "See the [glossary](../../../docs/glossary.md), "
        "the [README](../../../README.md#references), [notebook 05](05_results.ipynb), "
        "[a folder](../../../results/demo/), ![a figure](../../../notebooks/figures/x.png), "
        "<a href=\"../../../docs/site.md\">site</a>, "
        "[upstream](https://github.com/agentscope-ai/Trinity-RFT), [below](#summary).")
    assert tutorial.rebase_links(text, source, source) == text
    # code is shown as written
    code = "Index with `a[i](x)`, or\n```python\nprint('[x](../y.md)')\n```\nthen [z](../z.md)."
    assert tutorial.rebase_links(code, source, out) == code.replace("(../z.md)",
                                                                    "(../../../z.md)")


def test_prose_is_carried_into_an_executed_copy_around_its_outputs(tmp_path, capsys):
    source, out = tmp_path / "notebooks", tmp_path / "results" / "ran"
    source.mkdir()
    out.mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("Old words, [glossary](../docs/glossary.md)."),
                nbformat.v4.new_code_cell("print(1)")]
    nbformat.write(nb, source / "01_a.ipynb")
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="1\n")]
    nbformat.write(nb, out / "01_a.ipynb")
    nb.cells[1].outputs = []
    nb.cells[0].source = "New words, [glossary](../docs/glossary.md)."
    nb.cells.append(nbformat.v4.new_markdown_cell("A new closing cell."))
    nbformat.write(nb, source / "01_a.ipynb")
    assert tutorial.carry_prose(source / "01_a.ipynb", out / "01_a.ipynb") is True
    copy = nbformat.read(out / "01_a.ipynb", as_version=4)
    assert [c.source for c in copy.cells] == [
        "New words, [glossary](../../docs/glossary.md).", "print(1)", "A new closing cell."]
    assert copy.cells[1].outputs[0].text == "1\n"   # the output as it ran
    assert tutorial.carry_prose(source / "01_a.ipynb", out / "01_a.ipynb") is False
    # a copy executed from other code is refused, and the command says so in one line
    nb.cells[1].source = "print(2)"
    nbformat.write(nb, source / "01_a.ipynb")
    with pytest.raises(tutorial.ProseError, match="its code cells are not those of"):
        tutorial.carry_prose(source / "01_a.ipynb", out / "01_a.ipynb")
    assert tutorial.carry_prose_command([source / "01_a.ipynb"], out) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {out / '01_a.ipynb'}: its code cells")
    assert tutorial.carry_prose_command([source / "01_a.ipynb"], tmp_path) == 2
    assert "no executed copy of 01_a.ipynb" in capsys.readouterr().err


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

"""The course's limits on its notebooks, counted by ``benchmarks/notebook_counts.py``: no
markdown cell over 250 words, no cell of notebooks 04 and 05 with over 16 typed numbers, and
every notebook ends with a summary, its exercises and a cell calling their checks."""

from __future__ import annotations

import json

import pytest
from bench_scripts import load_script

from mathagent import paths

counts = load_script(paths.REPO_ROOT / "benchmarks" / "notebook_counts.py")

NOTEBOOKS = sorted((paths.REPO_ROOT / "notebooks").glob("0*.ipynb"))


def test_the_counter_counts_words_and_typed_numbers():
    cell = {"source": ["It took 6.5-7.0 minutes on an H200, `config_v2.yaml`, 1,000 tasks."]}
    assert counts.counts(cell) == (10, 3)   # 6.5, 7.0 and 1,000; H200 and v2 are names


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_no_cell_over_the_limits(notebook):
    over = [(i, kind, words, numbers) for name, i, kind, words, numbers in counts.rows(notebook)
            if counts.over(name, kind, words, numbers)]
    assert not over, f"{notebook.name}: cells over a limit (index, kind, words, numbers): {over}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_ends_with_summary_exercises_and_checks(notebook):
    cells = json.loads(notebook.read_text())["cells"]
    summary, exercises, checks = ("".join(c["source"]) for c in cells[-3:])
    assert summary.startswith("## Summary")
    assert 3 <= summary.count("\n* ") <= 6
    assert exercises.startswith("## Exercises")
    number = notebook.name[:2]
    for k in (1, 2, 3):
        assert f"\n{k}. **" in exercises and f"nb{number}.check_exercise{k}(" in exercises
    assert f"from mathagent.exercises import nb{number}" in checks
    assert cells[-1]["cell_type"] == "code" and not cells[-1].get("outputs")

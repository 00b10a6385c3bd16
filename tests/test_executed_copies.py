"""The executed GPU copies in results/notebooks_h200/ are the notebooks as they are now: the
same code cells, in the same order, and the same prose (links pointing from the copies'
folder). Re-execute them with ``python -m mathagent tutorial --smoke`` on a GPU machine after
changing a notebook's code; after changing only its prose,
``python -m mathagent tutorial --carry-prose results/notebooks_h200``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mathagent import paths
from mathagent.tutorial import rebase_links

NOTEBOOKS = sorted((paths.REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
COPIES = paths.RESULTS_DIR / "notebooks_h200"


def code_cells(path: Path) -> list[str]:
    cells = json.loads(path.read_text())["cells"]
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in cells if c["cell_type"] == "code"]


def differences(notebook: Path, copy: Path) -> list[str]:
    """What differs between the code cells of ``notebook`` and of its executed ``copy``."""
    mine, theirs = code_cells(notebook), code_cells(copy)
    pairs = zip(mine, theirs, strict=False)  # a difference in length is reported below
    found = [f"code cell {i}" for i, (a, b) in enumerate(pairs) if a != b]
    if len(mine) != len(theirs):
        found.append(f"{len(mine)} code cells in the notebook, {len(theirs)} in the copy")
    return found


def test_there_are_five_notebooks():
    assert [p.name[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04", "05"]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_executed_copy_has_the_notebooks_code_cells(notebook):
    copy = COPIES / notebook.name
    assert copy.is_file(), f"{copy}: no executed copy of {notebook.name}"
    assert not differences(notebook, copy), (
        f"{copy} was executed from another version of {notebook}: "
        f"{'; '.join(differences(notebook, copy))}")
    outputs = [c for c in json.loads(copy.read_text())["cells"]
               if c["cell_type"] == "code" and c.get("outputs")]
    assert outputs, f"{copy}: no outputs (not an executed copy)"


def markdown_cells(path: Path) -> list[str]:
    cells = json.loads(path.read_text())["cells"]
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in cells if c["cell_type"] == "markdown"]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_executed_copy_has_the_notebooks_prose(notebook):
    want = [rebase_links(text, notebook.parent, COPIES) for text in markdown_cells(notebook)]
    assert markdown_cells(COPIES / notebook.name) == want, (
        f"{COPIES / notebook.name} has other prose than {notebook}: run `python -m mathagent "
        f"tutorial --carry-prose {COPIES.relative_to(paths.REPO_ROOT)}`")


def test_the_check_sees_a_changed_cell(tmp_path):
    notebook = NOTEBOOKS[0]
    data = json.loads(notebook.read_text())
    code = [c for c in data["cells"] if c["cell_type"] == "code"]
    code[1]["source"] = "print('changed')\n"
    data["cells"].append({"cell_type": "code", "metadata": {}, "outputs": [],
                          "execution_count": None, "source": "1 + 1"})
    changed = tmp_path / notebook.name
    changed.write_text(json.dumps(data))
    assert differences(notebook, changed) == [
        "code cell 1", f"{len(code)} code cells in the notebook, {len(code) + 1} in the copy"]

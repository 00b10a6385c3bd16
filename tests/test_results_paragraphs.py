"""Every number a results paragraph of notebooks 04 and 05 states is printed by the code
cells just above it, computed from the committed run folders, never typed in.

A results paragraph is a markdown cell tagged ``results``. The notebook (05 whole, 04 the
cells that paragraph needs) is executed in smoke mode; each number of the paragraph outside
code spans must appear among the numbers of the outputs of the code cells between the
previous markdown cell and the paragraph.
"""

from __future__ import annotations

import os
import re

import nbformat
import pytest
from nbclient import NotebookClient

from mathagent import paths

# a number not glued to a name (float32, H200 and Qwen3 are names, not figures)
NUMBER = re.compile(r"(?<![A-Za-z_\d.])\d+(?:\.\d+)?")
CODE_SPAN = re.compile(r"`[^`]*`")
# "section 8", "notebook 03": where to read, not what was measured
REFERENCE = re.compile(r"\b(?:[Ss]ection|notebook)s? \d+")


def numbers(text: str) -> list[str]:
    return NUMBER.findall(REFERENCE.sub(" ", CODE_SPAN.sub(" ", text)))


def output_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out["text"])
        elif "data" in out:
            parts.append(out["data"].get("text/plain", ""))
    return "\n".join(parts)


def untyped(nb) -> dict[int, list[str]]:
    """Per results paragraph (cell index): its numbers that the code cells above it do not
    print."""
    out = {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown" or "results" not in cell.metadata.get("tags", []):
            continue
        printed, j = set(), i - 1
        while j >= 0 and nb.cells[j].cell_type == "code":
            printed |= set(re.findall(r"\d+(?:\.\d+)?", output_text(nb.cells[j])))
            j -= 1
        out[i] = [n for n in numbers(cell.source) if n not in printed]
    return out


def execute(nb):
    os.environ["MATHAGENT_SMOKE"] = "1"
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(paths.REPO_ROOT / "notebooks")}}
                   ).execute()
    return nb


def test_the_checker_finds_a_typed_number():
    nb = nbformat.v4.new_notebook()
    code = nbformat.v4.new_code_cell("print('6.5-7.0')")
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text="6.5-7.0\n")]
    para = nbformat.v4.new_markdown_cell("It took 6.5-7.0 minutes on an H200, 29 s of it "
                                         "`compile 3.1` (section 4).")
    para.metadata["tags"] = ["results"]
    nb.cells = [code, para]
    assert untyped(nb) == {1: ["29"]}


@pytest.mark.parametrize("name, keep", [
    ("05_results.ipynb", None),
    # notebook 04: its parameters, imports and the cells of the Trinity start-up paragraph
    ("04_training_launch.ipynb", ("parameters", "from mathagent import cli",
                                  "TRINITY_H200 =", "Start-up took")),
])
def test_results_paragraphs_state_only_printed_numbers(name, keep):
    nb = nbformat.read(paths.REPO_ROOT / "notebooks" / name, as_version=4)
    tagged = [c for c in nb.cells if "results" in c.metadata.get("tags", [])]
    assert tagged, f"{name}: no results paragraph tagged"
    if keep is not None:
        nb.cells = [c for c in nb.cells
                    if "parameters" in c.metadata.get("tags", [])
                    or any(c.source.startswith(k) or (k in c.source and c.cell_type == "code")
                           for k in keep[1:])]
        assert any("results" in c.metadata.get("tags", []) for c in nb.cells)
    missing = untyped(execute(nb))
    assert missing and all(not v for v in missing.values()), missing

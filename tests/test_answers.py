"""mathagent.answers: where a final answer sits, shared by the data readers and the judge."""

from __future__ import annotations

import pytest

from mathagent.answers import last_box
from mathagent.judge import extract_answer
from mathagent.tasks import normalize_answer


@pytest.mark.parametrize("text, box", [
    ("so \\boxed{42}.", "42"),
    ("\\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("\\fbox{7}", "7"),
    ("\\boxed{3} and a cut-off \\boxed{\\frac{1", "3"),  # the unclosed box is skipped
    ("\\boxed 9", "9"),
    ("no box here", None),
])
def test_last_box(text, box):
    assert last_box(text) == box


def test_a_replys_box_and_a_taskset_cell_unwrap_alike():
    for text, inner in (("\\boxed{12}", "12"), ("\\fbox{12}", "12"),
                        ("x \\boxed{5} \\boxed{12", "5")):
        assert normalize_answer(text) == extract_answer(text) == inner
    assert normalize_answer("$\\boxed{033}$") == "33"
    assert normalize_answer("#### 7") == "7"

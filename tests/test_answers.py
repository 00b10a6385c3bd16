"""The two small helpers shared by the data readers, the judge and the rollout runner."""

from __future__ import annotations

import asyncio

import pytest

from mathagent.answers import last_box
from mathagent.judge import extract_answer
from mathagent.run_sync import run_sync
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


def test_run_sync_outside_and_inside_a_running_loop():
    async def value(x):
        await asyncio.sleep(0)
        return x * 2

    assert run_sync(value(3)) == 6

    async def caller():  # as in a Jupyter cell: a loop already runs in this thread
        return run_sync(value(5))

    assert asyncio.run(caller()) == 10

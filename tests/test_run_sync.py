"""mathagent.run_sync: coroutines from sync code, also where a loop already runs (Jupyter)."""

from __future__ import annotations

import asyncio

import pytest

from mathagent.run_sync import run_sync


def test_run_sync_outside_and_inside_a_running_loop():
    async def value(x):
        await asyncio.sleep(0)
        return x * 2

    assert run_sync(value(3)) == 6

    async def caller():  # as in a Jupyter cell: a loop already runs in this thread
        return run_sync(value(5))

    assert asyncio.run(caller()) == 10


def test_errors_and_finished_tasks_are_as_with_asyncio_run():
    async def failing():
        await asyncio.sleep(0)
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        run_sync(failing())

    async def with_a_background_task():
        background = asyncio.ensure_future(asyncio.sleep(3600))
        await asyncio.sleep(0)
        return background

    assert run_sync(with_a_background_task()).cancelled()  # cancelled, not left pending

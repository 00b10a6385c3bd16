"""mathagent.run_sync: coroutines from sync code, in Jupyter too; Ctrl-C always gets through."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import pytest

from mathagent import paths
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


# Two tasks that swallow every cancellation (as an agent that turns a cancel into a reply, or
# an HTTP client mid-request, can), and a thread that presses Ctrl-C once they run.
STUBBORN = textwrap.dedent("""
    import asyncio, os, signal, sys, threading, time

    from mathagent.run_sync import run_sync

    running = threading.Event()

    async def stubborn():
        running.set()
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue

    async def main():
        await asyncio.gather(stubborn(), stubborn())

    def press_ctrl_c():
        running.wait()
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=press_ctrl_c, daemon=True).start()
    runner = asyncio.run if sys.argv[1] == "asyncio.run" else run_sync
    try:
        runner(main())
    except KeyboardInterrupt:
        print("interrupted")
        sys.exit(130)
""")


def _press_ctrl_c(runner: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", STUBBORN, runner], cwd=paths.REPO_ROOT,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_ctrl_c_stops_tasks_that_swallow_their_cancellation():
    with pytest.raises(subprocess.TimeoutExpired):  # what a command would do without it
        _press_ctrl_c("asyncio.run", timeout=10)
    done = _press_ctrl_c("run_sync", timeout=120)
    assert done.returncode == 130, done.stderr
    assert done.stdout.strip() == "interrupted"
    assert done.stderr == ""  # the dropped tasks leave no noise

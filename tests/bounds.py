"""Bounds on waits in the tests: each only stops a hung test, never decides a result.

A test that waits for something waits for that thing (a line, a file, a process's exit, a
logged step) and goes on as soon as it happens; the bound only ends a wait that would
otherwise never end. Every bound is several times what the operation needs on a loaded
two-core machine (another process holding one core), so a slow machine is never a failure.

``MATHAGENT_TEST_TIMEOUT_SCALE`` (default 1) multiplies every bound, for machines slower
than that. A few waits are not hang bounds but part of what a test proves (a limit that
must fire, a process that must be gone before a slower mechanism would act); those keep
their fixed values and say so where they stand.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Hashable

SCALE_ENV = "MATHAGENT_TEST_TIMEOUT_SCALE"


def _scale() -> float:
    raw = os.environ.get(SCALE_ENV, "1")
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise ValueError(f"{SCALE_ENV} must be a positive number, not {raw!r}")
    return value


SCALE = _scale()


def hang_bound(seconds: float) -> float:
    """``seconds`` (a bound chosen wide for a loaded two-core machine) times the scale."""
    return seconds * SCALE


def wait_for(condition: Callable[[], bool], what: str, *, progress: Callable[[], Hashable],
             stall_s: float, poll_s: float = 0.05) -> None:
    """Return as soon as ``condition()`` holds; fail only when nothing moves for a while.

    ``progress()`` is a snapshot of what the awaited work changes as it goes (a log's size,
    rows written, files present). The wait ends in an ``AssertionError`` naming ``what``
    only after ``progress()`` stayed the same for ``hang_bound(stall_s)`` seconds, so a slow
    machine that is still working is waited for, however long the whole takes.
    """
    limit = hang_bound(stall_s)
    last, since = progress(), time.monotonic()
    while not condition():
        time.sleep(poll_s)
        now = progress()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > limit:
            raise AssertionError(f"{what}: no progress for {limit:.0f} s")


def finish(proc: subprocess.Popen, what: str, *, progress: Callable[[], Hashable],
           stall_s: float) -> int:
    """Wait for ``proc`` to exit while it keeps making ``progress``; its return code.

    A process that makes no progress for ``hang_bound(stall_s)`` seconds is killed and the
    wait fails, naming ``what``.
    """
    try:
        wait_for(lambda: proc.poll() is not None, what, progress=progress, stall_s=stall_s)
    except AssertionError:
        proc.kill()
        proc.wait()
        raise
    return proc.returncode

"""Run a coroutine to completion from sync code, also where an event loop already runs.

Jupyter kernels run a loop in the main thread, where ``asyncio.run`` refuses to start;
there the coroutine runs on a fresh loop in a worker thread.

In the main thread, Ctrl-C stops the run at once. ``asyncio.run`` turns the first Ctrl-C
into a cancellation of the running tasks and waits for them to end, which never happens
when a library inside them swallows the cancellation and goes on waiting for a reply
(an agent that turns a cancel into an answer, an HTTP client mid-request): a command would
hang on Ctrl-C. Here Ctrl-C raises ``KeyboardInterrupt`` in the caller; the tasks still in
flight are cancelled and given :data:`CANCEL_GRACE_S` seconds to finish, then dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

CANCEL_GRACE_S = 2.0


def run_sync(coro) -> Any:
    """Run ``coro`` to its end, on a worker thread when the calling thread runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # plain Python: no loop running
        return _run(coro)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _run(coro) -> Any:
    """``asyncio.run(coro)``, except that Ctrl-C neither waits for the tasks nor can be lost."""
    loop = asyncio.new_event_loop()
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, _interrupt) if main_thread else None
    interrupted = False
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(coro)
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        if main_thread:
            signal.signal(signal.SIGINT, previous)
        try:
            _cancel_remaining(loop, interrupted)
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def _cancel_remaining(loop: asyncio.AbstractEventLoop, interrupted: bool) -> None:
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in pending:
        task.cancel()
    if interrupted:  # tasks that ignore the cancellation are dropped, and so are their logs
        loop.set_exception_handler(lambda _loop, _context: None)
    with contextlib.suppress(BaseException):
        if pending:
            loop.run_until_complete(asyncio.wait(pending, timeout=CANCEL_GRACE_S))
        loop.run_until_complete(loop.shutdown_asyncgens())
        if not interrupted:
            loop.run_until_complete(loop.shutdown_default_executor())

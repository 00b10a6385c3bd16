"""Run a coroutine to completion from sync code, also where an event loop already runs.

Jupyter kernels run a loop in the main thread, where ``asyncio.run`` refuses to start;
there the coroutine runs on a fresh loop in a worker thread.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def run_sync(coro) -> Any:
    """``asyncio.run(coro)``, on a worker thread when the calling thread runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # plain Python: no loop running
        return asyncio.run(coro)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()

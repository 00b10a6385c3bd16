"""Temporary server logs: where servers started without a log file log, and their cleanup."""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path

# Temporary server logs. A log without ``log_path`` lives in a folder of this user's under
# the temp dir and is named after the process that started the server (its pid and start
# time). ``stop()`` deletes it; when that never runs (the owner was SIGKILLed, or died
# before its atexit hook) the next start of any server of this package finds the log's
# owner gone and deletes it. Logs of owners that still run are left alone.
_LOG_NAME = re.compile(r"^server-(\d+)-(\d+\.\d+)-.*\.log$")


def temporary_log_dir() -> Path:
    """``$TMPDIR/mathagent-llama-<uid>``: where servers started without ``log_path`` log."""
    folder = Path(tempfile.gettempdir()) / f"mathagent-llama-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def _owner_prefix() -> str:
    import psutil

    return f"server-{os.getpid()}-{psutil.Process().create_time():.2f}-"


def remove_stale_logs(folder: str | os.PathLike | None = None) -> list[Path]:
    """Delete the temporary server logs whose owner process has exited; return their paths.

    The owner is the process that started the server, recognised by pid and start time
    (a pid reused by another process does not keep a log alive). Only files named the way
    :meth:`LocalServer.start` names them are considered.
    """
    import psutil

    removed = []
    for path in sorted(Path(folder or temporary_log_dir()).glob("server-*.log")):
        match = _LOG_NAME.match(path.name)
        if not match:
            continue
        pid, started = int(match[1]), float(match[2])
        try:
            alive = abs(psutil.Process(pid).create_time() - started) < 0.011
        except psutil.NoSuchProcess:
            alive = False
        except psutil.Error:  # cannot tell: keep it
            alive = True
        if not alive:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path)
    return removed

"""Stop the processes a command started when the command dies, even by SIGKILL.

A SIGKILLed Python process runs no cleanup, so daemons it started live on: the GCS, raylet
and agents of ``ray.init(address="local")`` (the Ray fan-out of ``measure-pass-rates``) stayed
about 100 s. :func:`reap_when_gone` starts a small watchdog in a process session of its own.
It checks the owner (pid and start time) twice a second; once the owner is gone it
terminates the recorded processes, and what they started since, then kills what is left
after a few seconds. A recorded process is signalled only while its pid still has the start
time recorded with it, so a pid the kernel has reused is never touched. The watchdog also
exits when every recorded process is gone (a normal shutdown).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

#: Seconds two start times of one pid may differ by (psutil reads clock ticks, 10 ms).
CREATE_TIME_TOLERANCE = 0.005


def stop_process_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """Stop the process group that ``proc`` leads (started with ``start_new_session=True``,
    so the group holds only what this package started): SIGTERM, then SIGKILL for whatever of
    the group is left after ``grace`` seconds; return once ``proc`` has exited and the group is
    gone (or ``grace`` seconds after the SIGKILL)."""
    import signal

    def signal_group(sig: int) -> bool:  # False: the group is gone
        try:
            os.killpg(proc.pid, sig)
            return True
        except ProcessLookupError:
            return False

    def ended_within(seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if proc.poll() is not None and not signal_group(0):
                return True
            time.sleep(0.05)
        return False

    if signal_group(signal.SIGTERM) and not ended_within(grace):
        signal_group(signal.SIGKILL)
        ended_within(grace)
    proc.wait()


def record(pids: list[int]) -> list[list[float]]:
    """``[pid, start time]`` of each live process in ``pids``."""
    import psutil

    rows = []
    for pid in pids:
        try:
            rows.append([pid, psutil.Process(pid).create_time()])
        except psutil.Error:
            continue
    return rows


def children_of_this_process() -> list[list[float]]:
    """``[pid, start time]`` of every live descendant of this process."""
    import psutil

    return record([p.pid for p in psutil.Process().children(recursive=True)])


def same_process(pid: int, created: float):
    """The process ``pid`` if it is still the one that started at ``created``, else None."""
    import psutil

    try:
        proc = psutil.Process(int(pid))
        if abs(proc.create_time() - created) <= CREATE_TIME_TOLERANCE and \
                proc.status() != psutil.STATUS_ZOMBIE:
            return proc
    except psutil.Error:
        pass
    return None


def reap_when_gone(processes: list[list[float]], owner: int | None = None) -> subprocess.Popen:
    """Start the watchdog for ``processes`` (``[pid, start time]`` rows) and ``owner``
    (default: this process). Returns its handle; it needs no further care."""
    owner = os.getpid() if owner is None else owner
    spec = {"owner": record([owner])[0], "processes": processes}
    return subprocess.Popen([sys.executable, "-m", "mathagent.reaper", json.dumps(spec)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def _watch(spec: dict, interval: float = 0.5, grace: float = 5.0) -> None:
    import psutil

    owner = spec["owner"]
    while same_process(*owner) is not None:
        if not any(same_process(*row) for row in spec["processes"]):
            return  # everything was shut down properly
        time.sleep(interval)
    procs = {}
    for row in spec["processes"]:
        proc = same_process(*row)
        if proc is None:
            continue
        procs[proc.pid] = proc
        try:
            for child in proc.children(recursive=True):
                procs.setdefault(child.pid, child)
        except psutil.Error:
            continue
    for proc in procs.values():
        try:
            proc.terminate()
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(list(procs.values()), timeout=grace)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            continue


if __name__ == "__main__":
    _watch(json.loads(sys.argv[1]))

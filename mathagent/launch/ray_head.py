"""A local Ray head that this package starts, inspects and stops itself.

:func:`start_ray_head` records the ids and start times of the head's processes in a
:class:`RayHead`, whose ``stop()`` signals only those (and their descendants), never processes
found by name or folder. Also: finding a reachable cluster (:func:`find_ray`), asking it for
its resources, the environment of heads and drivers (:func:`_ray_env`) and the ``runtime_env``
of a run's workers (:func:`worker_runtime_env`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mathagent import paths


def _ray_executable() -> str:
    local = Path(sys.executable).with_name("ray")
    found = str(local) if local.exists() else shutil.which("ray")
    if not found:
        raise RuntimeError("the `ray` command is not installed (pip install 'ray[default]')")
    return found


def _tcp_open(address: str, timeout: float = 2.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def find_ray(address: str | None = "auto") -> str | None:
    """The ``host:port`` of a reachable Ray cluster for ``address``, or None.

    ``auto`` (Trinity's default ``cluster.ray_address``) means what it means to
    ``ray.init``: ``RAY_ADDRESS``, else the cluster last started on this machine.
    """
    if address in (None, "", "auto"):
        try:
            from ray._private.services import get_ray_address_from_environment

            address = get_ray_address_from_environment("auto", None)
        except Exception:
            return None
        if not address or address == "auto":
            return None
    address = address.removeprefix("ray://")
    return address if _tcp_open(address) else None


@dataclass
class RayHead:
    """A Ray head started by :func:`start_ray_head`: its address and the processes to stop.

    ``started`` holds ``[pid, create_time]`` of every process of the head when ``ray start``
    returned (its process group and their descendants; ``create_time`` is psutil's start
    time of the process). A process counts as this head's only while that pid still has that
    start time, so a pid the kernel has given to another process since, a process that
    merely mentions the session folder, or one that joined the recorded process group is
    never signalled. Processes Ray starts later (workers, agents) are found as descendants
    of recorded processes that pass this check. ``pgid`` (the group of the ``ray start``
    call) is kept for reports only; ``temp_dir`` is the head's session root, removed on stop
    when ``owns_temp_dir`` (a private folder :func:`start_ray_head` made).
    """

    address: str
    pgid: int
    temp_dir: str
    owns_temp_dir: bool = False
    started: list[list[float]] = field(default_factory=list)

    #: Prefix of the private session folders :func:`start_ray_head` makes; only such a
    #: folder is ever removed (a record edited by hand cannot point the removal elsewhere).
    TEMP_PREFIX = "mathagent-ray-"  # not a field: no annotation

    @staticmethod
    def group_snapshot(pgid: int) -> list[list[float]]:
        """``[pid, create_time]`` of the live processes of group ``pgid`` and their descendants.

        Only meaningful while the caller knows the group is its own, e.g. while the group
        leader is its child and not yet reaped (then no other process can have that pid,
        and only processes of the leader's session, its descendants, can be in the group).
        """
        import psutil

        found: dict[int, Any] = {}
        for proc in psutil.process_iter():
            try:
                if proc.pid != os.getpid() and os.getpgid(proc.pid) == pgid:
                    found[proc.pid] = proc
            except (psutil.Error, OSError):
                continue
        for proc in list(found.values()):
            try:
                for child in proc.children(recursive=True):
                    found.setdefault(child.pid, child)
            except psutil.Error:
                continue
        rows = []
        for pid, proc in sorted(found.items()):
            try:
                if proc.status() != psutil.STATUS_ZOMBIE:
                    rows.append([pid, proc.create_time()])
            except psutil.Error:
                continue
        return rows

    def _verified(self) -> list[Any]:
        """The recorded processes that are still the same processes (pid and start time)."""
        from mathagent.reaper import same_process

        procs = []
        for entry in self.started:
            try:
                pid, create_time = int(entry[0]), float(entry[1])
            except (TypeError, ValueError, IndexError):
                continue
            proc = same_process(pid, create_time)
            if proc is not None and pid != os.getpid():
                procs.append(proc)
        return procs

    def _live(self) -> dict[int, Any]:
        """``pid -> psutil.Process`` of the verified processes and their live descendants."""
        import psutil

        found = {p.pid: p for p in self._verified()}
        for proc in list(found.values()):
            try:
                children = proc.children(recursive=True)
            except psutil.Error:
                continue
            for child in children:
                with contextlib.suppress(psutil.Error):
                    if child.pid != os.getpid() and child.status() != psutil.STATUS_ZOMBIE:
                        found.setdefault(child.pid, child)
        return found

    def processes(self) -> list[int]:
        """Ids of the live processes of this head: recorded ones (same start time) and
        their descendants."""
        return sorted(self._live())

    def alive(self) -> bool:
        return bool(self.processes())

    def resources(self, timeout: float = 120.0) -> dict[str, float]:
        """``ray.cluster_resources()`` of this head, asked from a short-lived driver process."""
        return cluster_resources(self.address, timeout)

    def stop(self, timeout: float = 10.0) -> list[int]:
        """Terminate this head's processes (SIGTERM, then SIGKILL); return the ids stopped.

        The whole tree is listed before the first signal (a worker whose raylet exits first
        is no longer its descendant); psutil checks each pid's start time again right
        before signalling it. The processes are stopped in the order of ``ray stop``
        (:func:`_stop_order`): the raylet, then the others, then the GCS server, each group
        waited for (up to ``timeout`` seconds) before the next is signalled. Processes
        spawned during the shutdown are caught by a second round. Then the private session
        folder is removed (:meth:`remove_temp_dir`).
        """
        import psutil

        stopped: set[int] = set()
        for _ in range(3):
            procs = list(self._live().values())
            if not procs:
                break
            stopped.update(p.pid for p in procs)
            for bucket in _stop_order(procs):
                for proc in bucket:
                    with contextlib.suppress(psutil.Error):
                        proc.terminate()
                alive = _wait_gone(bucket, timeout)
                for proc in alive:
                    with contextlib.suppress(psutil.Error):
                        proc.kill()
                _wait_gone(alive, 5)
        self.remove_temp_dir()
        return sorted(stopped)

    def remove_temp_dir(self) -> bool:
        """Remove the private session folder (only one :func:`start_ray_head` made)."""
        folder = Path(self.temp_dir) if self.temp_dir else None
        if not (self.owns_temp_dir and folder and folder.name.startswith(self.TEMP_PREFIX)
                and folder.is_dir()):
            return False
        shutil.rmtree(folder, ignore_errors=True)
        return True

    def to_json(self) -> dict[str, Any]:
        return {"address": self.address, "pgid": self.pgid, "temp_dir": self.temp_dir,
                "owns_temp_dir": self.owns_temp_dir, "started": self.started}


def _stop_order(procs: list[Any]) -> list[list[Any]]:
    """``procs`` in the three groups that ``ray stop`` signals one after the other: the
    raylet, every other process, the GCS server (empty groups left out).

    Signalled all at once, a head takes about 10 s to go: a raylet told to stop while its GCS
    server is stopping waits for it until a timeout, and the GCS server and the autoscaler's
    monitor outlast a grace of 10 s. In this order each group is gone within about a second.
    """
    import psutil

    def name(proc: Any) -> str:
        try:
            return proc.name()
        except psutil.Error:
            return ""

    first = [p for p in procs if name(p) == "raylet"]
    last = [p for p in procs if name(p) == "gcs_server"]
    rest = [p for p in procs if p not in first and p not in last]
    return [group for group in (first, rest, last) if group]


def _wait_gone(procs: list[Any], timeout: float) -> list[Any]:
    """Wait up to ``timeout`` seconds for ``procs`` to exit; return those still running.

    A process that exited but is not yet reaped (a zombie) counts as gone: the head's
    processes are not this process's children, and the process that reaps them (the init
    process) may take seconds to do it, which ``psutil.wait_procs`` would wait for.
    """
    import psutil

    def running(proc: Any) -> bool:
        try:
            return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    deadline = time.monotonic() + timeout
    alive = [p for p in procs if running(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if running(p)]
    return alive


def cluster_resources(address: str, timeout: float = 120.0) -> dict[str, float]:
    """``ray.cluster_resources()`` of the cluster at ``address``, asked from a short-lived
    driver process (so this process does not stay connected to it)."""
    code = (f"import json, ray; ray.init(address={address!r}, logging_level='ERROR', "
            "log_to_driver=False); print(json.dumps(ray.cluster_resources())); "
            "ray.shutdown()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=timeout, env=_ray_env())
    if out.returncode != 0:
        raise RuntimeError(f"cannot reach the Ray cluster at {address}: "
                           f"{out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _ray_env() -> dict[str, str]:
    """Environment of the head and of drivers talking to it.

    Ray 2.60 switches a head to token authentication when ``~/.ray/auth_token`` exists,
    but a driver given an explicit address does not pick the token up and is refused. The
    heads started here are single-machine heads (tutorial, dry run, one-node launch), so
    their auth mode is pinned to ``disabled`` on both sides and the outcome does not depend
    on what else ran on the machine. Ray listens on all interfaces: on a shared network,
    start the head yourself with ``RAY_AUTH_MODE=token ray start --head``.
    """
    env = dict(os.environ)
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    env["RAY_AUTH_MODE"] = "disabled"
    env.pop("RAY_ADDRESS", None)
    return env


def start_ray_head(num_cpus: int | None = 1, port: int | None = None, temp_dir: str | None = None,
                   object_store_memory: int | None = None, timeout: float = 180.0,
                   attempts: int = 3, num_gpus: int | None = None,
                   env: dict[str, str] | None = None) -> RayHead:
    """Start a local Ray head like ``ray start --head --num-cpus=1 --include-dashboard=false``.

    ``num_cpus`` / ``num_gpus`` None let Ray offer every CPU and GPU of the machine (what a
    training run needs); the tutorial's and the tests' heads pass 1 CPU and stay small.

    A single-machine head without token authentication (see :func:`_ray_env`); for a
    cluster of several machines use ``ray start`` itself. ``temp_dir=None`` makes a private
    session folder (removed on stop). The returned :class:`RayHead` records the ids and
    start times of the head's processes, the only processes its ``stop()`` signals. Ray
    gives its raylet 30 s to register; on a busy machine that can run out, so a failed
    start is cleaned up (the processes that ``ray start`` left are stopped) and retried up
    to ``attempts`` times; so is one whose port (chosen here when ``port`` is None) one of
    Ray's own components wanted too, with another free port. Returns once the head answers
    on its port.
    """
    errors = []
    for _ in range(max(1, attempts)):
        try:
            return _start_ray_head_once(num_cpus, port, temp_dir, object_store_memory, timeout,
                                        num_gpus, env)
        except RuntimeError as exc:
            errors.append(str(exc))
            if not _worth_retrying(str(exc), port_chosen_here=port is None):
                break
    raise RuntimeError(errors[-1] + (f"\n(after {len(errors)} attempts)" if len(errors) > 1
                                     else ""))


def _worth_retrying(error: str, port_chosen_here: bool) -> bool:
    """Whether a failed ``ray start`` may succeed on a second try: a raylet that registered too
    late on a busy machine, or (when this package chose the port) a port that one of Ray's own
    components also uses, such as the dashboard agent's default 52365; the next try takes
    another free port."""
    if "timed out during startup" in error:
        return True
    return port_chosen_here and ("used by other components" in error
                                 or "already in use" in error)


def _start_ray_head_once(num_cpus: int | None, port: int | None, temp_dir: str | None,
                         object_store_memory: int | None, timeout: float,
                         num_gpus: int | None = None,
                         env: dict[str, str] | None = None) -> RayHead:
    """One ``ray start --head`` in a new session; record its processes before reaping it.

    ``ray start`` runs in a session and process group of its own whose id is its pid, and
    Ray's daemons stay in that group. Until ``ray start`` is reaped its pid cannot be
    reused, so every process in that group is one it started: the group (and its
    descendants) is recorded then, with start times (:meth:`RayHead.group_snapshot`), and
    the group id is never used for signalling afterwards.
    """
    import threading

    from mathagent.serving import free_port

    port = port or free_port()
    owns = temp_dir is None
    temp_dir = temp_dir or tempfile.mkdtemp(prefix=RayHead.TEMP_PREFIX, dir="/tmp")
    cmd = [_ray_executable(), "start", "--head", "--include-dashboard=false", f"--port={port}",
           f"--temp-dir={temp_dir}", "--disable-usage-stats"]
    if num_cpus is not None:
        cmd.append(f"--num-cpus={num_cpus}")
    if num_gpus is not None:
        cmd.append(f"--num-gpus={num_gpus}")
    if object_store_memory:
        cmd.append(f"--object-store-memory={int(object_store_memory)}")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, env={**_ray_env(), **(env or {})})
    head = RayHead(address="", pgid=proc.pid, temp_dir=temp_dir, owns_temp_dir=owns)
    chunks: list[bytes] = []

    def read_output() -> None:
        for chunk in iter(lambda: proc.stdout.read1(65536), b""):
            chunks.append(chunk)

    reader = threading.Thread(target=read_output, daemon=True)
    reader.start()
    code = None
    try:
        deadline = time.monotonic() + timeout
        while code is None and time.monotonic() < deadline:
            # WNOWAIT: learn the exit status but leave `ray start` unreaped (its pid held)
            info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            if info is None:
                time.sleep(0.1)
            else:
                code = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
        if code is None:
            proc.kill()  # our unreaped child: the pid is still ours
        head.started = RayHead.group_snapshot(proc.pid)
    except BaseException:  # Ctrl-C while starting: leave nothing behind
        proc.kill()
        head.started = RayHead.group_snapshot(proc.pid)
        proc.wait()
        head.stop()
        raise
    proc.wait()
    reader.join(timeout=5)
    output = b"".join(chunks).decode("utf-8", errors="replace")
    if code is None:
        head.stop()
        raise RuntimeError(f"`{' '.join(cmd)}` did not finish within {timeout:.0f} s")
    if code != 0:
        head.stop()
        tail = "\n".join(output.strip().splitlines()[-3:])
        raise RuntimeError(f"`{' '.join(cmd)}` failed (exit {code}): {tail}")
    address_file = Path(temp_dir) / "ray_current_cluster"
    head.address = (address_file.read_text().strip() if address_file.is_file()
                    else f"127.0.0.1:{port}")
    deadline = time.monotonic() + 30
    while not _tcp_open(head.address) and time.monotonic() < deadline:
        time.sleep(0.5)
    return head


@contextlib.contextmanager
def local_ray_head(num_cpus: int = 1, **kwargs: Any) -> Iterator[RayHead]:
    """A Ray head for the duration of a ``with`` block; every process of it is stopped after."""
    head = start_ray_head(num_cpus=num_cpus, **kwargs)
    try:
        yield head
    finally:
        head.stop()


@contextlib.contextmanager
def ray_for(address: str | None) -> Iterator[tuple[str, RayHead | None]]:
    """The reachable cluster at ``address``, or a temporary local head when there is none.

    Yields ``(address, head)``; ``head`` is None when an existing cluster was used.
    """
    found = find_ray(address)
    if found:
        yield found, None
        return
    with local_ray_head(object_store_memory=100 * 1024**2) as head:
        yield head.address, head


def ray_state_file() -> Path:
    """Where ``ray start`` records the head it started, for ``ray stop`` / ``ray status``."""
    return paths.runs_dir() / "ray" / "head.json"


def worker_runtime_env(checked_config: Any) -> dict[str, Any]:
    """The Ray ``runtime_env`` of the run: Trinity's own env vars, this process's ``NCCL_*``,
    ``TORCH_SYMM_MEM_*`` and ``NVSHMEM_*`` variables (NVLink multicast settings reach every
    worker) and the opt-in levers of :mod:`mathagent.compat` (:data:`~mathagent.compat.LEVER_ENVS`),
    this package importable in every worker, and :mod:`mathagent.compat`'s fixes
    applied in every worker process."""
    from mathagent.compat import LEVER_ENVS, WORKER_SETUP_HOOK

    env = dict(checked_config.get_envs())
    for name, value in os.environ.items():
        if name.startswith(("NCCL_", "TORCH_SYMM_MEM_", "NVSHMEM_")) or name in LEVER_ENVS:
            env.setdefault(name, value)
    env["PYTHONPATH"] = paths.pythonpath_with_repo()
    # Processes that workers start themselves (vLLM's engine workers) join Ray through an
    # implicit ray.init(), which finds only RAY_ADDRESS or a head recorded in Ray's default
    # session folder, and the heads started here keep theirs elsewhere; else they start an
    # empty cluster of their own and Trinity's weight sync cannot find its synchronizer.
    env["RAY_ADDRESS"] = checked_config.cluster.ray_address
    return {"env_vars": env, "worker_process_setup_hook": WORKER_SETUP_HOOK}

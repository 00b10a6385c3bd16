"""Running model-written Python in an isolated child process (the agent's code tool).

:func:`run_code` runs a piece of code in a fresh interpreter and returns what it printed as a
:class:`SandboxResult`; :func:`arun_code` does the same without blocking an event loop, and
:func:`python_tool` makes the AgentScope tool ``execute_python_code`` (one argument, ``code``;
the :class:`SandboxLimits` are fixed when the tool is made and the model cannot change them).

Each call gets these layers; each exists for what the others cannot do (docs/sandbox.md has
the table of which layer stops which attack, and what none of them stops):

* **the kernel layer** (:mod:`mathagent.sandbox_layer`): bubblewrap puts the child in new
  user, mount, PID, network, IPC and UTS namespaces as uid 65534 without capabilities, on a
  read-only view of the system with one writable, size-capped work folder of its own, no
  ``/proc`` of other processes, four harmless devices and a seccomp filter; its PID 1 reaps
  every process of the call. Where this layer cannot run, code is refused unless
  ``MATHAGENT_SANDBOX_WEAK=1`` asks for the layers below only;
* **a child process** in a session (process group) of its own, with an environment built
  from nothing (``PATH``, ``LANG``, ``HOME`` and ``TMPDIR`` in its folder, one thread for the
  math libraries) and an empty stdin. A crash or a hang stays in the child, no key or token
  of this process reaches the code, and when the call ends everything it started is killed;
* **kernel limits** (``setrlimit``): address space, CPU seconds, size of a written file, open
  files, no core dumps, no new processes (nor threads, which the kernel counts alike);
* **an audit hook** (``sys.addaudithook``, installed by :mod:`mathagent.sandbox_child` before
  the code runs) refusing at the Python level what the code never needs: processes, signals
  to others, sockets, ``ctypes``, subinterpreters, writes outside its folder, other
  processes' ``/proc`` entries, device files, raising the limits;
* **bounded output**: the parent reads both pipes a chunk at a time, keeps the head and tail
  of each and kills the child once it has written :attr:`SandboxLimits.flood_bytes`, so a
  print loop fills neither this process's memory nor the model's context.

:func:`run_code` never raises for what the code does: a signal, a full disk, a flag on a
file, a dead child all come back as a result whose ``error`` says what happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mathagent.sandbox_layer import LAYERS as KERNEL_LAYERS
from mathagent.sandbox_layer import (
    WORK,
    Isolation,
    bwrap_args,
    isolation,
    read_info,
    read_only_paths,
    require_isolation,
)

#: The first word of every tool result that reports a failed run (timeout, exception, ...).
ERROR_MARKER = "Error:"
#: The script the child runs first: it limits itself, then runs the code (its docstring).
CHILD_SCRIPT = Path(__file__).with_name("sandbox_child.py")
#: The longest wall-clock limit one run may be given, in seconds (an hour).
MAX_TIMEOUT = 3600.0


def timeout_problem(value: Any) -> str | None:
    """Why ``value`` is not a usable wall-clock limit in seconds (None when it is one):
    a number, finite, above 0 and at most :data:`MAX_TIMEOUT`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"must be a number of seconds, got {value!r}"
    if not (math.isfinite(value) and 0 < value <= MAX_TIMEOUT):
        return f"must be a number of seconds above 0 and at most {MAX_TIMEOUT:g}, got {value!r}"
    return None


@dataclass(frozen=True)
class SandboxLimits:
    """What one run may use. ``timeout``: wall-clock seconds from start to finish (the CPU
    limit is one second more; at most :data:`MAX_TIMEOUT`); ``memory_bytes``: address space;
    ``file_bytes``: the largest file it may write; ``disk_bytes``: all its files together
    (the size of its work folder); ``output_chars``: characters of stdout and of stderr kept
    (head and tail); ``flood_bytes``: output after which the run is stopped."""

    timeout: float = 10.0
    memory_bytes: int = 1 << 30
    file_bytes: int = 16 << 20
    open_files: int = 64
    output_chars: int = 4000
    flood_bytes: int = 4 << 20
    disk_bytes: int = 64 << 20

    def __post_init__(self) -> None:
        problem = timeout_problem(self.timeout)
        if problem:
            raise ValueError(f"SandboxLimits.timeout {problem}")
        for name, value in asdict(self).items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not (
                    math.isfinite(value) and value > 0):
                raise ValueError(f"SandboxLimits.{name} must be positive, got {value!r}")

    def describe(self) -> dict[str, Any]:
        """JSON-able record for provenance files (the limits and the layer they run under)."""
        return {"sandbox": "mathagent.sandbox", **asdict(self),
                "isolation": isolation().describe()}


@dataclass
class SandboxResult:
    """One run: its output (head and tail kept), exit status, why it failed (``error``, None
    when it did not), the protective layers that were active and the bytes left out."""

    stdout: str
    stderr: str
    returncode: int | None
    error: str | None
    layers: tuple[str, ...] = ()
    seconds: float = 0.0
    dropped_bytes: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None

    def text(self) -> str:
        """What the agent reads: a status line, then stdout and stderr when not empty."""
        lines = [f"{ERROR_MARKER} {self.error}" if self.error else "Exit status 0."]
        for name in ("stdout", "stderr"):
            value = getattr(self, name)
            if value:
                lines.append(f"{name}:\n{value.rstrip()}")
        if len(lines) == 1 and self.ok:
            lines[0] += " Nothing was printed: print() the values you want to see."
        return "\n".join(lines)


def _package_paths() -> list[str]:
    """The installed packages' folders (numpy, sympy): the child adds them to its path."""
    return [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")]


def _child_args(limits: SandboxLimits, work: str, report_fd: int,
                isolated: bool) -> tuple[list[str], dict]:
    """The child's command line and its whole environment (nothing of this process's)."""
    cpu = math.ceil(limits.timeout) + 1
    config = {"report_fd": report_fd, "path": _package_paths(), "isolated": isolated,
              "rlimits": {"RLIMIT_AS": [limits.memory_bytes] * 2, "RLIMIT_CPU": [cpu, cpu + 1],
                          "RLIMIT_FSIZE": [limits.file_bytes] * 2,
                          "RLIMIT_NOFILE": [limits.open_files] * 2, "RLIMIT_CORE": [0, 0],
                          "RLIMIT_NPROC": [0, 0]}}  # no process nor thread (root: only as uid 65534)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": work,
           "TMPDIR": work, "PYTHONHASHSEED": "0", "PYTHONIOENCODING": "utf-8",
           "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1"}
    # -s -S: no site-packages of the user or the interpreter (the child adds the installed
    # packages' folders itself); -P: the working folder is not put on sys.path. Under
    # bubblewrap the interpreter is named by its real path (a venv's link leads outside).
    python = os.path.realpath(sys.executable) if isolated else sys.executable
    return [python, "-s", "-S", "-P", str(CHILD_SCRIPT), json.dumps(config)], env


class _Capture:
    """Head and tail of one output stream, whatever its length (bounded memory)."""

    def __init__(self, keep_bytes: int):
        self.keep, self.head, self.tail, self.total = keep_bytes, b"", b"", 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = max(self.keep - len(self.head), 0)
        self.head += chunk[:room]
        if len(chunk) > room:
            self.tail = (self.tail + chunk[room:])[-self.keep:]

    def text(self, chars: int) -> tuple[str, int]:
        """At most ``chars`` characters (head and tail) and the bytes left out between them."""
        whole = self.total == len(self.head) + len(self.tail)  # nothing was dropped yet
        head = (self.head + self.tail if whole else self.head).decode("utf-8", "replace")
        tail = head if whole else self.tail.decode("utf-8", "replace")
        if whole and len(head) <= chars:
            return head, 0
        head, tail = head[:chars // 2], tail[max(len(tail) - chars // 2, 0):]
        dropped = self.total - len(head.encode()) - len(tail.encode())
        return f"{head}\n[... {dropped:,} bytes of output left out ...]\n{tail}", dropped


def signal_name(number: int) -> str:
    """``SIGKILL`` for 9, ``SIGRTMIN+6`` for 40, ``signal 99`` for a number with no name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        if signal.SIGRTMIN <= number <= signal.SIGRTMAX:
            return f"SIGRTMIN+{number - signal.SIGRTMIN}"
        return f"signal {number}"


def _why(returncode: int, stop: str | None, limits: SandboxLimits, strong: bool) -> str | None:
    """The status line of a failed run (None for a run that exited with status 0).

    A child killed by signal N ends with -N; under bubblewrap, which reports the code's end
    as its own exit status, with 128 + N (a code that calls ``sys.exit(128 + N)`` reads the
    same)."""
    if stop == "timeout":
        return f"TimeoutError: the code ran longer than {limits.timeout:g} s and was stopped."
    if stop == "flood":
        return f"the code printed more than {limits.flood_bytes:,} bytes and was stopped."
    killed = -returncode if returncode < 0 else (
        returncode - 128 if strong and 128 < returncode <= 128 + 64 else None)
    if killed is not None:
        name = signal_name(killed)
        return f"the code was killed by {name}" + (" (CPU time limit)." if name == "SIGXCPU"
                                                   else ".")
    return f"the code exited with status {returncode}." if returncode else None


def _refused(message: str, start: float) -> SandboxResult:
    return SandboxResult(stdout="", stderr="", returncode=None, error=message,
                         seconds=time.monotonic() - start)


def run_code(code: str, limits: SandboxLimits = SandboxLimits(), *,
             layer: Isolation | None = None) -> SandboxResult:
    """Run ``code`` in a sandboxed child process (see the module docstring). Never raises for
    what the code does; returns once every process of the call is gone and its folder with
    them. ``layer`` (default: :func:`~mathagent.sandbox_layer.isolation`) is what runs it;
    ``Isolation(None)`` asks for the weaker layers only (the benchmark compares them)."""
    start = time.monotonic()
    if not isinstance(code, str):  # a model's tool call may carry anything
        return _refused(f"the code must be text, not {type(code).__name__}.", start)
    layer = isolation() if layer is None else layer
    if layer.refusal:
        return _refused(layer.refusal, start)
    with contextlib.ExitStack() as stack:
        work = WORK if layer.strong else stack.enter_context(_weak_folder())
        try:
            return _run(code, limits, layer, work, start)
        except OSError as exc:  # the child could not start: no process, pipe or memory
            return _refused(f"the sandbox could not start the code: {exc}", start)


@contextlib.contextmanager
def _weak_folder():
    """Without the kernel layer: a fresh temporary folder, removed afterwards as far as it
    can be (a warning names what is left, never an exception)."""
    import shutil

    work = os.path.realpath(tempfile.mkdtemp(prefix="mathagent-sandbox-"))
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if os.path.lexists(work):
            import logging

            logging.getLogger(__name__).warning(
                "mathagent.sandbox: could not remove everything in %s", work)


def _run(code: str, limits: SandboxLimits, layer: Isolation, work: str,
         start: float) -> SandboxResult:
    deadline = start + limits.timeout
    out, err = _Capture(4 * limits.output_chars), _Capture(4 * limits.output_chars)
    stop = None
    mine: list[int] = []  # descriptors this process reads, closed at the end
    try:
        theirs: list[int] = []  # the child's ends, closed here once it has them
        try:
            report_r, report_w = os.pipe()  # the child names its active layers here
            mine.append(report_r)
            theirs.append(report_w)
            args, env = _child_args(limits, work, report_w, layer.strong)
            info_r = None
            if layer.strong:
                seccomp_fd = os.memfd_create("mathagent-seccomp")
                theirs.append(seccomp_fd)
                os.write(seccomp_fd, layer.bpf)
                os.lseek(seccomp_fd, 0, os.SEEK_SET)
                info_r, info_w = os.pipe()  # bwrap writes its PID 1's number here
                mine.append(info_r)
                theirs.append(info_w)
                paths = read_only_paths(args[0], _package_paths(), str(CHILD_SCRIPT))
                args = [*bwrap_args(layer.bwrap, seccomp_fd, info_w, limits.disk_bytes,
                                    paths), *args]
            proc = subprocess.Popen(args, cwd="/" if layer.strong else work, env=env,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, pass_fds=theirs,
                                    start_new_session=True)
        finally:
            for fd in theirs:
                os.close(fd)
        try:
            exited = os.pidfd_open(proc.pid)  # readable once it ends (not reaped)
            mine.append(exited)
            stop = _talk(proc, code, out, err, limits, deadline)
            if stop is None and not _readable(exited, deadline - time.monotonic()):
                stop = "timeout"
        finally:
            _end(proc, layer, stop, info_r)
        reported = _read_all(report_r)
    finally:
        for fd in mine:
            os.close(fd)
    try:
        layers = tuple(json.loads(reported))
    except ValueError:
        layers = ()  # the child died before its setup was done
    if layers:
        layers = (*(KERNEL_LAYERS if layer.strong else ()), *layers, "process group",
                  "clean environment")
    (stdout, out_dropped), (stderr, err_dropped) = (out.text(limits.output_chars),
                                                    err.text(limits.output_chars))
    error = _why(proc.returncode, stop, limits, layer.strong)
    if not layers and error and stop is None and stderr.startswith("bwrap:"):
        error = f"the sandbox could not start the code ({stderr.splitlines()[0]})."
    return SandboxResult(stdout=stdout, stderr=stderr, returncode=proc.returncode,
                         error=error, layers=layers, seconds=time.monotonic() - start,
                         dropped_bytes={"stdout": out_dropped, "stderr": err_dropped})


def _talk(proc: subprocess.Popen, code: str, out: _Capture, err: _Capture,
          limits: SandboxLimits, deadline: float) -> str | None:
    """Send the code, read both pipes as data comes (a chunk at a time) until both close;
    ``"timeout"`` or ``"flood"`` when the run must be stopped, else None."""
    with contextlib.suppress(BrokenPipeError):  # a child that died early reads nothing
        proc.stdin.write(code.encode("utf-8", "replace"))
        proc.stdin.close()
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        while sel.get_map():
            if time.monotonic() >= deadline:
                return "timeout"
            for key, _ in sel.select(max(deadline - time.monotonic(), 0)):
                chunk = os.read(key.fd, 1 << 16)
                key.data.add(chunk)
                if not chunk:
                    sel.unregister(key.fileobj)
            if out.total + err.total > limits.flood_bytes:
                return "flood"
    return None


def _readable(fd: int, seconds: float) -> bool:
    return bool(selectors.select.select([fd], [], [], max(seconds, 0))[0])


def _end(proc: subprocess.Popen, layer: Isolation, stop: str | None, info_r: int | None) -> None:
    """Make sure no process of the call is left, then reap the child.

    Under bubblewrap, killing the sandbox's PID 1 makes the kernel kill every process of its
    namespace before PID 1 counts as gone, and bwrap (the child) exits only after that; so
    once it is reaped nothing of the call runs. Before PID 1 exists (bwrap still setting up)
    the group is killed instead, and ``--die-with-parent`` takes PID 1 along. Without the
    kernel layer the whole process group is killed, always, before the child is reaped (its
    zombie keeps the group's number from being anyone else's)."""
    if layer.strong:
        if proc.poll() is None:
            _kill_sandbox(proc, info_r)
    else:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        with contextlib.suppress(OSError):  # stdin may hold what a dead child missed
            pipe.close()


def _kill_sandbox(proc: subprocess.Popen, info_r: int | None) -> None:
    os.set_blocking(info_r, False)
    pid1 = read_info(info_r)
    pidfd = None
    if pid1 is not None and proc.poll() is None:  # bwrap alive: its PID 1 is not yet reaped
        with contextlib.suppress(OSError):
            pidfd = os.pidfd_open(pid1)
    if pidfd is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        return
    try:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    finally:
        os.close(pidfd)


def _read_all(fd: int) -> bytes:
    """What the child reported (written at its start), without waiting on a process that
    still holds the pipe (without the kernel layer, one that left the group could)."""
    os.set_blocking(fd, False)
    chunks = []
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    return b"".join(chunks)


#: Threads that wait on children (they use no CPU): more than asyncio's default pool has, so
#: many agents of one event loop can run code at once.
_WAITERS = ThreadPoolExecutor(max_workers=64, thread_name_prefix="mathagent-sandbox")


async def arun_code(code: str, limits: SandboxLimits = SandboxLimits()) -> SandboxResult:
    """:func:`run_code` in a worker thread, so the event loop (other agents) keeps going."""
    return await asyncio.get_running_loop().run_in_executor(_WAITERS, run_code, code, limits)


def python_tool(limits: SandboxLimits = SandboxLimits()):
    """The AgentScope tool ``execute_python_code(code)``, running code under ``limits``.

    ``code`` is its only parameter: the limits are bound here, so a model that sends more
    arguments gets AgentScope's error instead of a larger budget. Raises
    :class:`~mathagent.sandbox_layer.SandboxUnavailable` (one line) where code would be
    refused (the kernel layer is missing and ``MATHAGENT_SANDBOX_WEAK`` is not set).
    """
    require_isolation()
    from agentscope.message import TextBlock
    from agentscope.tool import ToolResponse

    async def execute_python_code(code: str) -> ToolResponse:
        result = await arun_code(code, limits)
        return ToolResponse(content=[TextBlock(type="text", text=result.text())])

    execute_python_code.__doc__ = f"""Run Python code in a fresh, sandboxed interpreter.

        What the code prints comes back, and the value of its last line when that line is an
        expression (as in a notebook cell). Nothing is kept between calls. The standard library and, where installed, numpy and sympy can be
        imported; there is no network, and the code is stopped after {limits.timeout:g} s.

        Args:
            code (`str`):
                The Python code to run.
        """
    return execute_python_code

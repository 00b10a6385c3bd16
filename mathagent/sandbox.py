"""Running model-written Python in a limited child process (the agent's code tool).

:func:`run_code` runs a piece of code in a fresh interpreter and returns what it printed as a
:class:`SandboxResult`; :func:`arun_code` does the same without blocking an event loop, and
:func:`python_tool` makes the AgentScope tool ``execute_python_code`` (one argument, ``code``;
the :class:`SandboxLimits` are fixed when the tool is made and the model cannot change them).

Each call gets these layers; each exists for what the others cannot do:

* **a child process** in a session (process group) of its own, with a fresh temporary working
  folder (deleted afterwards), an environment built from nothing (``PATH``, ``LANG``, ``HOME``
  and ``TMPDIR`` in that folder, one thread for the math libraries) and an empty stdin. A crash
  or a hang stays in the child, no key or token of this process reaches the code, and on the
  wall-clock timeout one signal to the group kills everything the call started;
* **kernel limits** (``setrlimit``): address space, CPU seconds, size of a written file, open
  files, no core dumps, no new processes (nor threads, which the kernel counts alike). The
  kernel holds them whatever the code does, native code in numpy included; the process limit
  does not bind root;
* **a network namespace** of its own (``unshare``; as root directly, otherwise inside a user
  namespace where the kernel allows one): the code sees only a loopback that is down, so a
  socket that got past the hook still reaches nothing;
* **an audit hook** (``sys.addaudithook``, which Python cannot remove; installed by
  :mod:`mathagent.sandbox_child` before the code runs) for what limits cannot say: it refuses
  starting processes (which root could otherwise do), signalling other processes, sockets,
  ``ctypes`` (a way around the hook), writing or changing files outside the working folder,
  reading other processes' ``/proc`` entries (their environment) and raising the limits;
* **bounded output**: the parent reads both pipes a chunk at a time, keeps the head and tail
  of each and kills the child once it has written :attr:`SandboxLimits.flood_bytes`, so a
  print loop fills neither this process's memory nor the model's context.

What it does not guard against: this is defence in depth for a tutorial, not a security
boundary against a determined attacker. There is no seccomp filter, no chroot and no
container: the code can read any file the user running it can read, and code that rewrites
the interpreter's own objects (monkeypatching ``os``, crafted bytecode) can get past the audit
hook; the kernel limits, the namespace and the timeout still hold then. The disk space of the
working folder is limited per file, not in total. Run agents that execute model code on a
machine (or in a container) where that is acceptable.
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

#: The first word of every tool result that reports a failed run (timeout, exception, ...).
ERROR_MARKER = "Error:"
#: The script the child runs first: it limits itself, then runs the code (its docstring).
CHILD_SCRIPT = Path(__file__).with_name("sandbox_child.py")


@dataclass(frozen=True)
class SandboxLimits:
    """What one run may use. ``timeout``: wall-clock seconds from start to finish (the CPU
    limit is one second more); ``memory_bytes``: address space; ``file_bytes``: the largest
    file it may write; ``output_chars``: characters of stdout and of stderr kept (head and
    tail); ``flood_bytes``: output after which the run is stopped."""

    timeout: float = 10.0
    memory_bytes: int = 1 << 30
    file_bytes: int = 16 << 20
    open_files: int = 64
    output_chars: int = 4000
    flood_bytes: int = 4 << 20

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not value > 0:
                raise ValueError(f"SandboxLimits.{name} must be positive, got {value!r}")

    def describe(self) -> dict[str, Any]:
        """JSON-able record for provenance files."""
        return {"sandbox": "mathagent.sandbox", **asdict(self)}


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


def _child_args(limits: SandboxLimits, work: str, report_fd: int) -> tuple[list[str], dict]:
    """The child's command line and its whole environment (nothing of this process's)."""
    cpu = math.ceil(limits.timeout) + 1
    config = {"report_fd": report_fd,
              "path": [p for p in sys.path if os.path.basename(p) in ("site-packages",
                                                                      "dist-packages")],
              "rlimits": {"RLIMIT_AS": [limits.memory_bytes] * 2, "RLIMIT_CPU": [cpu, cpu + 1],
                          "RLIMIT_FSIZE": [limits.file_bytes] * 2,
                          "RLIMIT_NOFILE": [limits.open_files] * 2, "RLIMIT_CORE": [0, 0],
                          "RLIMIT_NPROC": [0, 0]}}  # no new process (nor thread) unless root
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": work,
           "TMPDIR": work, "PYTHONHASHSEED": "0", "PYTHONIOENCODING": "utf-8",
           "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1"}
    # -s -S: no site-packages of the user or the interpreter (the child adds the installed
    # packages' folders itself); -P: the working folder is not put on sys.path.
    return [sys.executable, "-s", "-S", "-P", str(CHILD_SCRIPT), json.dumps(config)], env


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


def _why(returncode: int, stop: str | None, limits: SandboxLimits) -> str | None:
    """The status line of a failed run (None for a run that exited with status 0)."""
    if stop == "timeout":
        return f"TimeoutError: the code ran longer than {limits.timeout:g} s and was stopped."
    if stop == "flood":
        return f"the code printed more than {limits.flood_bytes:,} bytes and was stopped."
    if returncode < 0:
        name = signal.Signals(-returncode).name
        return f"the code was killed by {name}" + (" (CPU time limit)." if name == "SIGXCPU"
                                                   else ".")
    return f"the code exited with status {returncode}." if returncode else None


def run_code(code: str, limits: SandboxLimits = SandboxLimits()) -> SandboxResult:
    """Run ``code`` in a sandboxed child process (see the module docstring). Never raises for
    what the code does; returns once the child is gone and its folder deleted."""
    start = time.monotonic()
    deadline = start + limits.timeout
    out, err = _Capture(4 * limits.output_chars), _Capture(4 * limits.output_chars)
    stop = None
    with tempfile.TemporaryDirectory(prefix="mathagent-sandbox-",
                                     ignore_cleanup_errors=True) as work:
        report_r, report_w = os.pipe()  # the child names its active layers here
        args, env = _child_args(limits, os.path.realpath(work), report_w)
        try:
            proc = subprocess.Popen(args, cwd=work, env=env, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    pass_fds=(report_w,), start_new_session=True)
        except BaseException:
            os.close(report_r)
            raise
        finally:
            os.close(report_w)
        try:
            with contextlib.suppress(BrokenPipeError):  # a child that died early reads nothing
                proc.stdin.write(code.encode("utf-8", "replace"))
                proc.stdin.close()
            # Read both pipes as data comes, never more than a chunk at a time.
            with selectors.DefaultSelector() as sel:
                sel.register(proc.stdout, selectors.EVENT_READ, out)
                sel.register(proc.stderr, selectors.EVENT_READ, err)
                while sel.get_map() and stop is None:
                    if time.monotonic() >= deadline:
                        stop = "timeout"
                    for key, _ in sel.select(max(deadline - time.monotonic(), 0)):
                        chunk = os.read(key.fd, 1 << 16)
                        key.data.add(chunk)
                        if not chunk:
                            sel.unregister(key.fileobj)
                    if out.total + err.total > limits.flood_bytes:
                        stop = "flood"
            if stop is None:
                try:
                    proc.wait(max(deadline - time.monotonic(), 0))
                except subprocess.TimeoutExpired:
                    stop = "timeout"
        finally:
            if stop is not None or proc.poll() is None:
                # the whole group, before reaping (until then its id is no one else's)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                with contextlib.suppress(OSError):  # stdin may hold what a dead child missed
                    pipe.close()
            with os.fdopen(report_r, "rb") as report:
                reported = report.read()
    try:
        layers = (*json.loads(reported), "process group", "clean environment")
    except ValueError:
        layers = ()  # the child died before its setup was done
    (stdout, out_dropped), (stderr, err_dropped) = (out.text(limits.output_chars),
                                                    err.text(limits.output_chars))
    return SandboxResult(stdout=stdout, stderr=stderr, returncode=proc.returncode,
                         error=_why(proc.returncode, stop, limits), layers=tuple(layers),
                         seconds=time.monotonic() - start,
                         dropped_bytes={"stdout": out_dropped, "stderr": err_dropped})


#: Threads that wait on children (they use no CPU): more than asyncio's default pool has, so
#: many agents of one event loop can run code at once.
_WAITERS = ThreadPoolExecutor(max_workers=64, thread_name_prefix="mathagent-sandbox")


async def arun_code(code: str, limits: SandboxLimits = SandboxLimits()) -> SandboxResult:
    """:func:`run_code` in a worker thread, so the event loop (other agents) keeps going."""
    return await asyncio.get_running_loop().run_in_executor(_WAITERS, run_code, code, limits)


def python_tool(limits: SandboxLimits = SandboxLimits()):
    """The AgentScope tool ``execute_python_code(code)``, running code under ``limits``.

    ``code`` is its only parameter: the limits are bound here, so a model that sends more
    arguments gets AgentScope's error instead of a larger budget.
    """
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

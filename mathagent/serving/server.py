"""The local model server: llama-cpp-python's OpenAI-compatible server as a managed process.

:class:`LocalServer` starts ``python -m llama_cpp.server`` for a GGUF file (the bundled
model by default) on a free port of 127.0.0.1, waits until it answers, and stops it on
exit, on exceptions and on Ctrl-C.

Three details of llama-cpp-python's server shape how it is started here:

* ``--chat_format chatml``: SmolLM2's own template is ChatML, and this format renders only
  the messages. The tool schema that AgentScope's ReActAgent sends with every request
  (its meta tool ``reset_equipped_tools``) is accepted and ignored, so the model answers
  in plain text, which ends the ReAct loop after one call. (``chatml-function-calling``
  behaves the same as long as a request sets no ``tool_choice``, which ReActAgent does not;
  with ``tool_choice="auto"`` the 135M model calls the meta tool instead of answering.)
* The server rejects list-of-parts message contents for system messages, which is how
  AgentScope's ``OpenAIChatFormatter`` writes them; :class:`mathagent.agent.MeteredChatModel`
  sends text-only contents as plain strings.
* Two llama.cpp behaviours are switched off by default (see :class:`LocalServer`): weight
  repacking into extra buffer types such as Intel AMX tiles (some virtual machines
  advertise AMX but fault on it), and reuse of the previous request's KV cache (it makes a
  reply depend on the request before it).
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path
from typing import Any

from mathagent.reaper import stop_process_group
from mathagent.serving.endpoint_settings import LOCAL_API_KEY, ModelSettings
from mathagent.serving.errors import ServerStartError
from mathagent.serving.logs import _owner_prefix, remove_stale_logs, temporary_log_dir
from mathagent.serving.model_file import BUNDLED_ALIAS, bundled_gguf
from mathagent.serving.ports import free_port, port_in_use, port_in_use_message

DEFAULT_CHAT_FORMAT = "chatml"


# The server process: ask the kernel to SIGTERM it when the process that started it dies
# (so a killed notebook kernel or test run leaves no server behind), optionally switch off
# llama.cpp's extra weight buffers and its reuse of the previous request's prompt, then run
# the server's module (``llama_cpp.server``; a subclass may run another) as ``python -m`` would.
# Arguments: the parent's pid, extra buffers on/off, prompt reuse on/off ("-" for a server
# that is not llama.cpp's: no patch), the module, its arguments.
_LAUNCHER = """
import ctypes, os, runpy, signal, sys
try:
    ctypes.CDLL('libc.so.6', use_errno=True).prctl(1, signal.SIGTERM)
except OSError:
    pass
if os.getppid() != int(sys.argv[1]):
    sys.exit(0)
if sys.argv[2] == 'off':
    import llama_cpp.llama_cpp as lib
    _defaults = lib.llama_model_default_params
    def _without_extra_buffers():
        params = _defaults()
        params.use_extra_bufts = False
        return params
    lib.llama_model_default_params = _without_extra_buffers
if sys.argv[3] == 'off':
    import llama_cpp
    _generate = llama_cpp.Llama.generate
    def _generate_from_scratch(self, *args, **kwargs):
        self.reset()
        return _generate(self, *args, **kwargs)
    llama_cpp.Llama.generate = _generate_from_scratch
sys.argv = [sys.argv[4]] + sys.argv[5:]
runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)
"""


def llama_cpp_importable() -> bool:
    """Whether llama-cpp-python, the local server's package, can be imported here (found, not
    imported; the offline GPU bundle does not carry it)."""
    return importlib.util.find_spec("llama_cpp") is not None


class LocalServer:
    """llama-cpp-python's OpenAI-compatible server for a GGUF model, as a context manager.

    ``with LocalServer() as server:`` starts ``python -m llama_cpp.server`` on a free port
    of 127.0.0.1 with the bundled model, waits until ``GET /v1/models`` answers (at most
    ``startup_timeout`` seconds, else :class:`ServerStartError` with the end of the server
    log and no process left behind), and stops the whole process group on exit, also on an
    exception or Ctrl-C. ``start()``/``stop()`` do the same by hand (notebooks), and an
    ``atexit`` hook plus a parent-death signal (Linux) stop a server whose owner forgets or
    dies. The parent-death signal follows the *thread* that started the server, so start it
    from a long-lived thread (the main thread of a script, test or notebook kernel).

    A ``port`` given that another process holds fails at once with one line
    (:func:`port_in_use_message`), and the server counts as up only once its own process
    listens on the port (not when some other server there answers). Without ``log_path``
    the log is a temporary file (see :func:`remove_stale_logs`) deleted on stop.

    ``n_threads`` defaults to llama.cpp's choice (half the CPU cores); ``n_ctx`` is the
    context length in tokens (prompt + reply); ``chat_format`` see the module docstring.
    ``extra_buffers`` (off by default) lets llama.cpp repack weights into its extra buffer
    types, such as Intel AMX tiles: some virtual machines advertise AMX but fault on its
    instructions (the server dies with SIGILL on the first request), and a 135M model
    gains little from it.
    ``prompt_reuse`` (off by default) lets llama.cpp keep the previous request's tokens in
    its KV cache and evaluate only the new suffix of the next prompt. That saves re-reading
    the shared system prompt, but the logits then depend on what was asked before (the same
    prompt sent twice can get two different greedy replies), so it is off: with it off,
    greedy decoding (temperature 0) or a per-request ``seed`` gives the same reply for the
    same request whatever the order, which resumable and fanned-out measurements rely on.
    The server handles one request at a time.
    """

    def __init__(self, model_path: str | os.PathLike | None = None, *,
                 host: str = "127.0.0.1", port: int | None = None, n_ctx: int = 2048,
                 n_threads: int | None = None, chat_format: str = DEFAULT_CHAT_FORMAT,
                 model_alias: str = BUNDLED_ALIAS, startup_timeout: float = 120.0,
                 log_path: str | os.PathLike | None = None, extra_args: tuple[str, ...] = (),
                 extra_buffers: bool = False, prompt_reuse: bool = False,
                 python: str = sys.executable):
        self.model_path = Path(model_path) if model_path else None
        self.host = host
        self.port = port
        self.n_ctx = int(n_ctx)
        self.n_threads = n_threads
        self.chat_format = chat_format
        self.model_alias = model_alias
        self.startup_timeout = float(startup_timeout)
        self.log_path = Path(log_path) if log_path else None
        self.extra_args = tuple(extra_args)
        self.extra_buffers = extra_buffers
        self.prompt_reuse = prompt_reuse
        self.python = python
        self.process: subprocess.Popen | None = None
        self._log_file = None
        self._log_offset = 0
        self._owns_log = False

    # -- state --------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``http://host:port/v1``, the value for ``MATHAGENT_BASE_URL``."""
        if self.port is None:
            raise RuntimeError("the server has not been started")
        return f"http://{self.host}:{self.port}/v1"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def settings(self, **overrides: Any) -> ModelSettings:
        """:class:`ModelSettings` for this server (``overrides`` set decoding options)."""
        return ModelSettings(base_url=self.base_url, api_key=LOCAL_API_KEY,
                             model=self.model_alias, **overrides)

    def command(self) -> list[str]:
        """The server command line (``python -m llama_cpp.server ...``)."""
        model = self.model_path or bundled_gguf()
        args = [self.python, "-m", "llama_cpp.server", "--model", str(model),
                "--model_alias", self.model_alias, "--host", self.host,
                "--port", str(self.port), "--n_ctx", str(self.n_ctx),
                "--chat_format", self.chat_format]
        if self.n_threads:
            args += ["--n_threads", str(self.n_threads)]
        return args + list(self.extra_args)

    def check_port(self) -> None:
        """Raise :class:`ServerStartError` (one line) when the chosen port is taken."""
        if self.port is not None and port_in_use(self.host, self.port):
            raise ServerStartError(port_in_use_message(self.host, self.port))

    def _listens_on_port(self) -> bool:
        """Whether the server process itself listens on ``self.port``."""
        import psutil

        try:
            conns = psutil.Process(self.process.pid).net_connections(kind="inet")
        except psutil.AccessDenied:  # cannot check here: trust the answer
            return True
        except psutil.Error:
            return False
        return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == self.port
                   for c in conns)

    def log_tail(self, lines: int = 25) -> str:
        """The last ``lines`` lines of the server log (for error messages)."""
        if not self.log_path or not self.log_path.exists():
            return ""
        with open(self.log_path, encoding="utf-8", errors="replace") as fh:
            return "".join(deque(fh, maxlen=lines))

    # -- lifecycle ------------------------------------------------------------------------

    def check_startable(self) -> None:
        """Raise :class:`ServerStartError` (one line) when the model or the server is missing."""
        model = self.model_path or bundled_gguf()
        if not Path(model).is_file():
            raise ServerStartError(f"model file {model} does not exist")
        if not llama_cpp_importable():
            raise ServerStartError("llama-cpp-python is not installed: "
                                   "pip install 'llama-cpp-python[server]==0.3.36'")

    def launcher_switches(self) -> list[str]:
        """The launcher's llama.cpp switches: extra buffers, prompt reuse (``on``/``off``)."""
        return ["on" if self.extra_buffers else "off", "on" if self.prompt_reuse else "off"]

    def start(self) -> LocalServer:
        """Start the server and block until it answers; raise :class:`ServerStartError`."""
        if self.running:
            return self
        self.check_port()
        self.check_startable()
        if self.port is None:
            self.port = free_port(self.host)
        if self.log_path is None:
            folder = temporary_log_dir()
            remove_stale_logs(folder)
            fd, name = tempfile.mkstemp(prefix=_owner_prefix(), suffix=".log", dir=folder)
            os.close(fd)
            self.log_path, self._owns_log = Path(name), True
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 (closed in stop())
        self._log_offset = self._log_file.tell()  # a kept log may hold earlier runs
        launcher = [self.python, "-c", _LAUNCHER, str(os.getpid()),
                    *self.launcher_switches(), *self.command()[2:]]
        self.process = subprocess.Popen(launcher, stdin=subprocess.DEVNULL,
                                        stdout=self._log_file, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        atexit.register(self.stop)
        try:
            self._wait_until_healthy()
        except BaseException:
            self.stop(keep_log=True)  # the error message points at the log
            raise
        return self

    def _wait_until_healthy(self) -> None:
        url = f"http://{self.host}:{self.port}/v1/models"
        deadline = time.monotonic() + self.startup_timeout
        while True:
            code = self.process.poll()
            if code is not None:
                with open(self.log_path, "rb") as fh:
                    fh.seek(self._log_offset)
                    this_run = fh.read().decode("utf-8", errors="replace")
                if "address already in use" in this_run.lower():  # taken since check_port()
                    raise ServerStartError(port_in_use_message(self.host, self.port))
                raise ServerStartError(
                    f"the model server exited with code {code} before answering on "
                    f"{self.base_url}; command: {' '.join(self.command())}\n"
                    f"--- end of {self.log_path} ---\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2.0) as reply:
                    if reply.status == 200 and self._listens_on_port():
                        break  # (another server on the port would answer too)
            except (urllib.error.URLError, OSError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise ServerStartError(
                    f"the model server did not answer on {url} within "
                    f"{self.startup_timeout:.0f} s (raise startup_timeout on a busy "
                    f"machine)\n--- end of {self.log_path} ---\n{self.log_tail()}")
            time.sleep(0.25)
        self._warm_up(deadline)

    def _warm_up(self, deadline: float) -> None:
        """One 1-token completion: a backend that crashes on inference fails here, clearly."""
        body = json.dumps({"model": self.model_alias, "max_tokens": 1, "temperature": 0.0,
                           "messages": [{"role": "user", "content": "Hi"}]}).encode()
        request = urllib.request.Request(f"{self.base_url}/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=max(5.0, deadline - time.monotonic())):
                return
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            time.sleep(0.5)
            code = self.process.poll()
            died = (f"the model server died (exit code {code}"
                    + (", SIGILL: an instruction this CPU does not run; keep "
                       "extra_buffers off" if code == -signal.SIGILL else "") + ")"
                    if code is not None else "the model server failed")
            raise ServerStartError(f"{died} on its first completion at {self.base_url}: "
                                   f"{exc}\n--- end of {self.log_path} ---\n"
                                   f"{self.log_tail()}") from exc

    def stop(self, grace: float = 10.0, keep_log: bool = False) -> None:
        """Stop the server's process group: SIGTERM, then SIGKILL after ``grace`` seconds.

        A temporary log file (no ``log_path`` given) is deleted unless ``keep_log``.
        """
        atexit.unregister(self.stop)
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            stop_process_group(proc, grace)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self._owns_log and self.log_path is not None:
            if keep_log:
                self._owns_log = False  # from now on the file is the user's to read
            else:
                self.log_path.unlink(missing_ok=True)
                self.log_path, self._owns_log = None, False

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = self.base_url if self.running else "stopped"
        return f"LocalServer({state})"

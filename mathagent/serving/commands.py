"""``python -m mathagent serve``: a model by name (or a GGUF file) served until Ctrl-C."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from mathagent.models import MODELS, ModelError, model_file
from mathagent.serving.endpoint_settings import ENV_BASE_URL, ENV_MODEL
from mathagent.serving.errors import ServerStartError
from mathagent.serving.model_file import BUNDLED_ALIAS
from mathagent.serving.server import DEFAULT_CHAT_FORMAT, LocalServer
from mathagent.settings import add_flags, from_flags, setting


@dataclass
class ServeSettings:
    """The :class:`LocalServer` options that ``serve`` takes from the command line."""

    model: str = setting(BUNDLED_ALIAS, flag=True, metavar="MODEL",
                         help="a model name (python -m mathagent models lists them), served "
                              "under that name, or a .gguf file, served under its file name")
    host: str = setting("127.0.0.1", flag=True, metavar="HOST", help="interface")
    port: int | None = setting(None, flag=True, metavar="PORT", help="port; None picks a free one")
    n_ctx: int = setting(2048, flag=True, metavar="N_CTX", help="context length in tokens")
    n_threads: int | None = setting(None, flag=True, metavar="N_THREADS",
                                    help="CPU threads; None leaves llama.cpp's choice")
    chat_format: str = setting(DEFAULT_CHAT_FORMAT, flag=True, metavar="CHAT_FORMAT",
                               help="llama.cpp chat format")
    startup_timeout: float = setting(120.0, flag=True, metavar="STARTUP_TIMEOUT",
                                     help="seconds to wait for the server")
    log: Path | None = setting(None, flag=True, metavar="LOG",
                               help="server log file, kept; None logs to a temporary file, "
                                    "deleted when the server stops, or at the next start if "
                                    "serve was killed")
    prompt_reuse: bool = setting(False, flag=True,
                                 help="reuse the previous prompt's KV cache (faster, but "
                                      "replies then depend on request order)")
    extra_buffers: bool = setting(False, flag=True,
                                  help="let llama.cpp use extra weight buffers such as AMX "
                                       "(some virtual machines fault on AMX instructions)")


def served_model(model: str) -> tuple[Path, str]:
    """The GGUF file and the served name for ``--model``: a registry name is served under
    itself, a ``.gguf`` file under its file name without the suffix."""
    if model in MODELS:
        return model_file(model, progress=True), model
    path = Path(model).expanduser()
    if path.suffix != ".gguf" or not path.is_file():
        raise ModelError(f"--model {model!r}: not a model name ({', '.join(MODELS)}) nor an "
                         "existing .gguf file")
    return path, path.stem


def serve_parser(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, ServeSettings)


def serve_command(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C (or SIGTERM), printing the base URL and how to use it."""
    from tqdm import tqdm

    options = from_flags(ServeSettings, args)

    def _terminate(signum, frame):  # SIGTERM -> the same clean exit as Ctrl-C
        raise KeyboardInterrupt

    try:
        model_path, alias = served_model(options.model)
    except ModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    previous = signal.signal(signal.SIGTERM, _terminate)
    server = LocalServer(model_path, model_alias=alias, host=options.host, port=options.port,
                         n_ctx=options.n_ctx, n_threads=options.n_threads,
                         chat_format=options.chat_format,
                         startup_timeout=options.startup_timeout, log_path=options.log,
                         extra_buffers=options.extra_buffers, prompt_reuse=options.prompt_reuse)
    try:
        server.check_port()  # before the progress bar: a busy port is one line, at once
        with tqdm(total=1, desc="starting model server", bar_format="{desc}: {elapsed}") as bar:
            server.start()
            bar.update()
        print(f"serving {server.model_path} as {server.model_alias}", flush=True)
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

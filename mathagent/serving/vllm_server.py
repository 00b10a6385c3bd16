"""vLLM on this machine: whether it can run here, and its OpenAI-compatible server as a process.

:func:`visible_gpus` and :func:`vllm_importable` are the two questions both the endpoint
choice (:func:`mathagent.serving.choose_endpoint`) and the launch preflight
(:mod:`mathagent.launch.machine_checks`) ask. :class:`VLLMServer` is :class:`LocalServer`'s
lifecycle (a free port of 127.0.0.1, the wait until ``GET /v1/models`` answers and one
completion succeeds, a parent-death signal, the whole process group stopped on exit) around
vLLM's OpenAI-compatible server for a Hugging Face model folder, with the flags of the ``*_arithmetic``
configs' rollout engine (hermes tool-call parsing, no CUDA graphs for a quick start).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from mathagent.serving.errors import ServerStartError
from mathagent.serving.server import LocalServer

#: vLLM's OpenAI-compatible server module (what the Qwen feature measurements ran on the H200).
VLLM_MODULE = "vllm.entrypoints.openai.api_server"


def visible_gpus() -> int:
    """CUDA GPUs this process sees (``torch.cuda.device_count()``; 0 without torch)."""
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:
        return 0


def vllm_importable() -> bool:
    """Whether vllm can be imported here (found, not imported: importing it is slow)."""
    return importlib.util.find_spec("vllm") is not None


def hf_folder(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a Hugging Face model folder (holds ``config.json``)."""
    return (Path(path).expanduser() / "config.json").is_file()


class VLLMServer(LocalServer):
    """vLLM's server for ``MODEL_FOLDER`` on a free port of 127.0.0.1, as a context manager.

    ``model_path`` is a Hugging Face folder (``python -m mathagent export-model DIR`` writes
    one from the bundled model), served under ``model_alias``. ``gpu_memory_utilization``
    (default 0.25) leaves the rest of the GPU to other work, ``max_model_len`` bounds prompt
    plus reply, ``enforce_eager`` skips torch.compile and CUDA graphs (a start in about a
    minute instead of four; each decoding step is slower). ``extra_args`` go to vLLM as they
    are. Start-up waits at most ``startup_timeout`` seconds (default 600).
    """

    def __init__(self, model_path: str | os.PathLike, *, model_alias: str,
                 host: str = "127.0.0.1", port: int | None = None,
                 max_model_len: int = 4096, gpu_memory_utilization: float = 0.25,
                 enforce_eager: bool = True, startup_timeout: float = 600.0,
                 log_path: str | os.PathLike | None = None, extra_args: tuple[str, ...] = (),
                 python: str = sys.executable):
        super().__init__(model_path, host=host, port=port, n_ctx=max_model_len,
                         model_alias=model_alias, startup_timeout=startup_timeout,
                         log_path=log_path, extra_args=extra_args, python=python)
        self.gpu_memory_utilization = float(gpu_memory_utilization)
        self.enforce_eager = enforce_eager

    def command(self) -> list[str]:
        """The server command line (``python -m vllm.entrypoints.openai.api_server ...``)."""
        args = [self.python, "-m", VLLM_MODULE, "--model", str(self.model_path),
                "--served-model-name", self.model_alias, "--host", self.host,
                "--port", str(self.port), "--max-model-len", str(self.n_ctx),
                "--gpu-memory-utilization", f"{self.gpu_memory_utilization:g}",
                "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
        if self.enforce_eager:
            args.append("--enforce-eager")
        return args + list(self.extra_args)

    def check_startable(self) -> None:
        if self.model_path is None or not hf_folder(self.model_path):
            raise ServerStartError(
                f"model folder {self.model_path}: not a Hugging Face model folder (no "
                "config.json); write one with `python -m mathagent export-model DIR`")
        if not vllm_importable():
            raise ServerStartError("vllm is not installed here: install requirements/gpu.lock "
                                   "(docs/install.md)")
        if visible_gpus() < 1:
            raise ServerStartError("no CUDA GPU visible (torch.cuda.device_count() is 0): "
                                   "vLLM serves on a GPU")

    def launcher_switches(self) -> list[str]:
        return ["-", "-"]  # the llama.cpp patches do not apply

    def __repr__(self) -> str:
        state = self.base_url if self.running else "stopped"
        return f"VLLMServer({state})"

"""The choice of endpoint: a given one, checked, or a named model on a local server.

:func:`connect` serves a named model with llama.cpp when no endpoint is given.
:func:`choose_endpoint` decides, on any machine, which endpoint a notebook's agent talks to and
says why, starting nothing: an endpoint given (``MATHAGENT_BASE_URL``) first; else, on a
machine with a CUDA GPU and vllm, a vLLM server (one already listening that
``MATHAGENT_VLLM_URL`` names, or one the package starts for the model folder in
``TRINITY_MODEL_PATH``); else the bundled model on the local llama.cpp server, or, on a GPU
machine without llama-cpp-python (the offline GPU bundle's), one error line saying how to make
the folder vLLM serves. :func:`open_endpoint` then starts what the choice says and returns the
settings to use.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import asdict, dataclass, replace
from typing import Any

from mathagent.models import DEFAULT_MODEL, MODELS, model_file
from mathagent.serving.endpoint_settings import (
    ENV_BASE_URL,
    ENV_MODEL,
    LOCAL_API_KEY,
    ModelSettings,
    check_served_model,
)
from mathagent.serving.errors import EndpointError
from mathagent.serving.server import LocalServer, llama_cpp_importable
from mathagent.serving.vllm_server import VLLMServer, hf_folder, visible_gpus, vllm_importable

#: A vLLM server already listening (base URL ending in /v1), chosen on a GPU machine.
ENV_VLLM_URL = "MATHAGENT_VLLM_URL"
#: The Hugging Face model folder a started vLLM server serves: the variable the one-GPU
#: training configs read too (``python -m mathagent export-model models/smollm2`` writes it).
ENV_MODEL_FOLDER = "TRINITY_MODEL_PATH"
#: The kinds of endpoint :func:`choose_endpoint` returns.
GIVEN, VLLM, LLAMA_CPP = "given", "vllm", "llama.cpp"


def connect(settings: ModelSettings | None = None, setting: str = "model",
            **server_kwargs: Any) -> tuple[ModelSettings, LocalServer | None]:
    """Usable settings and the server started for them, if any (call ``server.stop()``).

    The one choice of endpoint: with ``settings.base_url`` set (or ``MATHAGENT_BASE_URL``),
    checks that the endpoint answers and serves ``settings.model``
    (:func:`check_served_model`; ``setting`` names where that name came from) and returns
    ``(settings, None)``; otherwise starts a :class:`LocalServer` for ``settings.model``, a
    name of :data:`mathagent.models.MODELS` (by default the bundled SmolLM2;
    ``server_kwargs`` go to the server), and returns settings pointing at it, with the
    decoding options kept. Any other model without an endpoint is an :class:`EndpointError`.
    Notebooks use this; scripts prefer :func:`endpoint`.
    """
    settings = settings or ModelSettings.from_env()
    if settings.base_url:
        check_served_model(settings, setting)
        return settings, None
    if settings.model not in MODELS:
        raise EndpointError(f"{setting} {settings.model!r}: a local server serves only "
                            f"{', '.join(MODELS)}; give an endpoint serving "
                            f"{settings.model!r} ({ENV_BASE_URL} or --base-url), or drop it")
    server = LocalServer(model_file(settings.model), model_alias=settings.model,
                         **server_kwargs).start()
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


@dataclass(frozen=True)
class EndpointChoice:
    """Which endpoint the agent talks to, and why.

    ``kind`` is ``"given"``, ``"vllm"`` or ``"llama.cpp"``; ``base_url`` is None while the
    server is still to be started (:func:`open_endpoint` fills it in); ``model`` is the name
    requests carry; ``model_path`` is what a server to be started serves.
    """

    kind: str
    base_url: str | None
    model: str
    why: str
    model_path: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        url = self.base_url or "(to be started)"
        return f"endpoint: {self.kind} at {url} | model: {self.model}\nwhy: {self.why}"


@dataclass(frozen=True)
class Machine:
    """What the choice asks of the machine: CUDA GPUs visible, vllm importable,
    llama-cpp-python (the local server) importable."""

    gpus: int
    vllm: bool
    llama_cpp: bool

    @classmethod
    def here(cls) -> Machine:
        return cls(gpus=visible_gpus(), vllm=vllm_importable(), llama_cpp=llama_cpp_importable())


def _export_hint(model: str = DEFAULT_MODEL) -> str:
    """The commands, run from the repository root, that write a Hugging Face folder of the
    registry model ``model`` and point ``TRINITY_MODEL_PATH`` at it (an absolute path: the
    notebooks' kernels run from ``notebooks/``)."""
    folder, flag = "models/smollm2", ""
    if model in MODELS and model != DEFAULT_MODEL:
        folder, flag = f"models/{model}", f" --model {model}"
    return (f"`python -m mathagent export-model {folder}{flag} && "
            f"export {ENV_MODEL_FOLDER}=$PWD/{folder}`")


def choose_endpoint(settings: ModelSettings | None = None, *, vllm_url: str | None = None,
                    model_folder: str | None = None,
                    machine: Machine | None = None) -> EndpointChoice:
    """Decide which endpoint the agent talks to; starts and contacts nothing.

    In order: ``settings.base_url`` (``MATHAGENT_BASE_URL``), as given; on a machine with a
    CUDA GPU and vllm (``machine``, by default :meth:`Machine.here`), a vLLM server already
    listening at ``vllm_url`` (``MATHAGENT_VLLM_URL``), else one to start for the Hugging
    Face folder ``model_folder`` (``TRINITY_MODEL_PATH``), served under the folder's name;
    otherwise the named model (by default the bundled one) on the local llama.cpp server.
    ``why`` says which setting or probe decided. Where that last choice meets a GPU machine
    with vllm but without llama-cpp-python (the offline GPU bundle carries vLLM only), an
    :class:`EndpointError` says in one line how to give vLLM a model folder.
    """
    settings = settings or ModelSettings.from_env()
    if settings.base_url:
        return EndpointChoice(GIVEN, settings.base_url, settings.model,
                              f"an endpoint is given ({ENV_BASE_URL} or base_url)")
    machine = machine or Machine.here()
    vllm_url = vllm_url or os.environ.get(ENV_VLLM_URL) or None
    folder = model_folder or os.environ.get(ENV_MODEL_FOLDER) or None
    local = f"{settings.model} on the local llama.cpp server (CPU)"
    if machine.gpus < 1:
        return EndpointChoice(LLAMA_CPP, None, settings.model,
                              f"no CUDA GPU visible here; {local}")
    if not machine.vllm:
        return EndpointChoice(LLAMA_CPP, None, settings.model,
                              f"{machine.gpus} CUDA GPU(s) but vllm is not importable "
                              f"(install requirements/gpu.lock); {local}")
    if vllm_url:
        return EndpointChoice(VLLM, vllm_url, settings.model,
                              f"{machine.gpus} CUDA GPU(s), vllm importable and a vLLM server "
                              f"listening at {vllm_url} ({ENV_VLLM_URL})")
    if folder and hf_folder(folder):
        name = os.path.basename(os.path.normpath(os.path.expanduser(folder)))
        return EndpointChoice(VLLM, None, name,
                              f"{machine.gpus} CUDA GPU(s) and vllm importable: a vLLM server "
                              f"started here for {folder} ({ENV_MODEL_FOLDER})", folder)
    missing = (f"{ENV_MODEL_FOLDER}={folder} is not a Hugging Face model folder" if folder
               else f"{ENV_MODEL_FOLDER} is not set")
    serves_it = (f"{_export_hint(settings.model)} (from the repository root) gives vLLM the "
                 "model to serve")
    if not machine.llama_cpp:
        raise EndpointError(f"{machine.gpus} CUDA GPU(s) and vllm importable, but {missing} "
                            f"and llama-cpp-python (the CPU server) is not installed: "
                            f"{serves_it} (or give an endpoint in {ENV_BASE_URL})")
    return EndpointChoice(LLAMA_CPP, None, settings.model,
                          f"{machine.gpus} CUDA GPU(s) and vllm importable, but {missing} "
                          f"({serves_it}); {local}")


def open_endpoint(choice: EndpointChoice, settings: ModelSettings | None = None,
                  **server_kwargs: Any) -> tuple[EndpointChoice, ModelSettings,
                                                  LocalServer | None]:
    """Start what ``choice`` says, if anything: ``(choice, settings, server)``.

    The returned choice carries the base URL and model the returned settings point at (what
    a notebook shows is what its agent uses); ``server`` is the server started here (stop it
    with ``server.stop()``), None for an endpoint that was already listening, which is
    checked to answer and to serve the model (:func:`check_served_model`). ``settings``
    keeps its decoding options; ``server_kwargs`` go to the server started.
    """
    settings = settings or ModelSettings.from_env()
    if choice.kind == LLAMA_CPP:
        used, server = connect(replace(settings, base_url=None, model=choice.model),
                               **server_kwargs)
        return replace(choice, base_url=used.base_url, model=used.model), used, server
    if choice.base_url:  # given, or a vLLM server already listening
        used = replace(settings, base_url=choice.base_url, model=choice.model)
        where = ENV_MODEL if choice.kind == GIVEN else f"{ENV_MODEL} (for {ENV_VLLM_URL})"
        check_served_model(used, where)
        return choice, used, None
    server = VLLMServer(choice.model_path, model_alias=choice.model, **server_kwargs).start()
    used = replace(settings, base_url=server.base_url, api_key=LOCAL_API_KEY, model=choice.model)
    return replace(choice, base_url=server.base_url), used, server

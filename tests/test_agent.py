"""The ReAct workflow: signature, prompt, the optional Python tool, and real runs.

End-to-end tests talk to the bundled SmolLM2 behind the real llama.cpp server (greedy,
a few tokens per reply to spare the CPU); nothing is mocked. The tool-call metrics are
checked offline with a scripted chat model (a model that calls the tool, which SmolLM2 behind
llama.cpp never does) and the real sandbox.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from agentscope.message import Msg, TextBlock, ToolResultBlock, ToolUseBlock
from agentscope.model import ChatModelBase, ChatResponse
from agentscope.tuner import WorkflowOutput, check_workflow_function
from bounds import hang_bound

from mathagent import agent, trinity_tags
from mathagent.agent import AgentOptions, build_model, make_workflow, metered, run_react_agent
from mathagent.judge import gsm8k_judge, score
from mathagent.serving import LocalServer, ModelSettings

MAX_TOKENS = 12


@pytest.fixture(scope="module")
def server():
    with LocalServer(n_ctx=1024) as srv:
        yield srv


@pytest.fixture()
def model(server):
    return build_model(server.settings(temperature=0.0, max_tokens=MAX_TOKENS))


# -- offline -------------------------------------------------------------------------------


def test_workflows_pass_agentscope_signature_check():
    check_workflow_function(run_react_agent)
    check_workflow_function(make_workflow(AgentOptions(python_tool=True)))


def test_reference_prompt_keeps_the_doubled_braces():
    assert agent.SYSTEM_PROMPTS["reference"].endswith("within \\boxed{{}}.")
    assert agent.SYSTEM_PROMPTS["single_braces"].endswith("within \\boxed{}.")
    assert "{{" not in agent.SYSTEM_PROMPTS["single_braces"]
    assert AgentOptions().sys_prompt == agent.REFERENCE_PROMPT


@pytest.mark.parametrize("kwargs, message", [
    ({"prompt_variant": "fancy"}, "prompt_variant"), ({"tool_timeout": 0}, "tool_timeout"),
    ({"max_iters": 0}, "max_iters"),
])
def test_bad_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AgentOptions(**kwargs)


def test_flatten_text_content():
    messages = [{"role": "system", "content": [{"type": "text", "text": "a"},
                                               {"type": "text", "text": "b"}]},
                {"role": "user", "content": "plain"},
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]
    flat = agent.flatten_text_content(messages)
    assert flat[0]["content"] == "a\nb"
    assert flat[1] == messages[1] and flat[2] == messages[2]
    assert isinstance(messages[0]["content"], list)       # the input is not modified


def test_with_seed_shares_the_client():
    base = build_model(ModelSettings(base_url="http://127.0.0.1:9/v1", seed=1, max_tokens=5))
    seeded = base.with_seed(7)
    assert seeded.client is base.client
    assert seeded.generate_kwargs["seed"] == 7 and base.generate_kwargs["seed"] == 1
    assert "seed" not in base.with_seed(None).generate_kwargs
    assert seeded.stream is False


def test_build_model_needs_an_endpoint():
    with pytest.raises(ValueError, match="base_url"):
        build_model(ModelSettings(base_url=None))


def test_python_tool_is_off_by_default():
    assert agent.build_toolkit(AgentOptions()) is None


async def call_tool(toolkit, arguments: dict) -> str:
    block = ToolUseBlock(type="tool_use", id="1", name="execute_python_code", input=arguments)
    last = None
    async for chunk in await toolkit.call_tool_function(block):
        last = chunk
    return "".join(b.get("text", "") for b in last.content)


def test_python_tool_is_the_sandboxed_one_with_a_fixed_timeout():
    toolkit = agent.build_toolkit(AgentOptions(python_tool=True, tool_timeout=2.0))
    # code that finishes runs under a limit that only stops a hang (a busy machine starts
    # the sandbox's child slowly); the 2 s limit is for code that never finishes
    roomy = agent.build_toolkit(AgentOptions(python_tool=True, tool_timeout=hang_bound(30.0)))
    schemas = {s["function"]["name"]: s for s in toolkit.get_json_schemas()}
    assert set(schemas) == {"execute_python_code"}
    assert set(schemas["execute_python_code"]["function"]["parameters"]["properties"]) == {
        "code"}
    assert asyncio.run(call_tool(roomy, {"code": "print(6 * 7)"})) == \
        "Exit status 0.\nstdout:\n42"
    # code that never finishes hits the preset timeout, and no argument raises it
    for arguments in ({"code": "while True:\n    pass"},
                      {"code": "while True:\n    pass", "timeout": 600.0}):
        text = asyncio.run(call_tool(toolkit, arguments))
        assert any(text.startswith(p) for p in agent.TOOL_ERROR_PREFIXES), text
    assert "ran longer than 2 s" in asyncio.run(call_tool(toolkit, {"code": "while 1: pass"}))
    # model code cannot reach this process's environment or the network
    text = asyncio.run(call_tool(roomy, {"code": "import os, socket\n"
                                                 "print(sorted(os.environ)[:1])\n"
                                                 "socket.socket()"}))
    assert "['HOME']" in text and "sandbox: socket.__new__ is not allowed" in text


def test_describe_records_the_sandbox_and_its_limits():
    assert AgentOptions().tool_timeout == 10.0
    off = AgentOptions().describe()  # as before the sandbox: earlier side tables resume
    assert off == {"prompt_variant": "reference", "python_tool": False, "tool_timeout": None,
                   "max_iters": 10}
    on = AgentOptions(python_tool=True, tool_timeout=3.0).describe()
    assert on["tool_timeout"] == 3.0
    assert on["tool_sandbox"]["sandbox"] == "mathagent.sandbox"
    assert on["tool_sandbox"]["timeout"] == 3.0
    assert on["tool_sandbox"]["memory_bytes"] == 1 << 30
    json.dumps(on)  # provenance files are JSON


def test_count_tool_use_counts_calls_and_error_results():
    def result(text):
        return ToolResultBlock(type="tool_result", id="r", name="execute_python_code",
                               output=[TextBlock(type="text", text=text)])

    call = ToolUseBlock(type="tool_use", id="c", name="execute_python_code", input={"code": "1"})
    messages = [
        Msg("user", "What is 3 + 4?", role="user"),
        Msg("react_agent", [call, call], role="assistant"),
        Msg("system", [result("Exit status 0.\nstdout:\n7"),
                       result("Error: the code exited with status 1.")], role="system"),
        Msg("react_agent", [call], role="assistant"),
        Msg("system", [ToolResultBlock(type="tool_result", id="r", name="nope",
                                       output="FunctionNotFoundError: Cannot find nope")],
            role="system"),
        Msg("react_agent", "The answer is 7. Error: none", role="assistant"),
    ]
    assert agent.count_tool_use(messages) == {"tool_calls": 3.0, "tool_errors": 2.0}
    assert agent.count_tool_use(messages[:1]) == {"tool_calls": 0.0, "tool_errors": 0.0}


class ScriptedModel(ChatModelBase):
    """A chat model that replies from a script: one tool call per code, then a text."""

    def __init__(self, codes: list[str], answer: str):
        super().__init__("scripted", stream=False)
        self.replies = [[ToolUseBlock(type="tool_use", id=f"call{i}",
                                      name="execute_python_code", input={"code": code})]
                        for i, code in enumerate(codes)] + [[TextBlock(type="text",
                                                                       text=answer)]]
        self.seen: list[list[dict]] = []
        self.tools: list[list[str]] = []  # the names of the tools each request offered

    async def __call__(self, messages, tools=None, tool_choice=None, **kwargs):
        self.seen.append(messages)
        self.tools.append([t["function"]["name"] for t in tools or []])
        return ChatResponse(content=self.replies[len(self.seen) - 1])


def test_workflow_reports_tool_calls_and_errors_as_metrics():
    model = ScriptedModel(["print(3 + 4)", "1 / 0"], "So \\boxed{7}.")
    workflow = make_workflow(AgentOptions(python_tool=True, console_output=False))
    output = asyncio.run(workflow({"question": "What is 3 + 4?"}, model))
    assert output.metrics == {"tool_calls": 2.0, "tool_errors": 1.0}
    assert output.response.get_text_content() == "So \\boxed{7}."
    # the sandbox's answers reached the model
    sent = json.dumps(model.seen[-1])
    assert "stdout:\\n7" in sent and "ZeroDivisionError" in sent

    # Trinity-RFT aggregates the metrics per task, then per step, under these tags
    from trinity.utils.metrics import aggregate_metrics, calculate_task_level_metrics

    task = calculate_task_level_metrics([output.metrics, {"tool_calls": 0.0,
                                                          "tool_errors": 0.0}], False)
    step = aggregate_metrics([task], prefix="rollout")
    assert step[trinity_tags.TAGS["rollout_tool_calls"]] == 1.0
    assert step[trinity_tags.TAGS["rollout_tool_errors"]] == 0.5


def test_without_the_meta_tool_the_requests_offer_no_tools():
    reference = ScriptedModel([], "\\boxed{7}")
    asyncio.run(run_react_agent({"question": "What is 3 + 4?"}, reference))
    assert reference.tools == [["reset_equipped_tools"]]
    bare = ScriptedModel([], "\\boxed{7}")
    workflow = make_workflow(AgentOptions(meta_tool=False, console_output=False))
    output = asyncio.run(workflow({"question": "What is 3 + 4?"}, bare))
    assert bare.tools == [[]] and output.response.get_text_content() == "\\boxed{7}"
    tool_only = ScriptedModel(["print(3 + 4)"], "\\boxed{7}")
    workflow = make_workflow(AgentOptions(meta_tool=False, python_tool=True,
                                          console_output=False))
    asyncio.run(workflow({"question": "What is 3 + 4?"}, tool_only))
    assert tool_only.tools == [["execute_python_code"]] * 2
    # recorded only when off, so the side tables of the upstream agent still resume
    assert "meta_tool" not in AgentOptions().describe()
    assert AgentOptions(meta_tool=False).describe()["meta_tool"] is False


def test_reference_workflow_reports_no_tool_calls():
    model = ScriptedModel([], "7")
    output = asyncio.run(run_react_agent({"question": "What is 3 + 4?"}, model))
    assert output.metrics == {"tool_calls": 0.0, "tool_errors": 0.0}
    assert run_react_agent.options == AgentOptions()


def test_workflow_options_survive_the_trip_to_a_ray_worker():
    """Ray hands the workflow to Trinity's workers with cloudpickle; another interpreter
    loading it must get the same options (not the reference workflow of the same name)."""
    from ray import cloudpickle

    workflow = make_workflow(AgentOptions(python_tool=True, tool_timeout=4.0, max_iters=3))
    code = ("import pickle, sys\n"
            "w = pickle.loads(sys.stdin.buffer.read())\n"
            "import mathagent.agent as a\n"
            "print(w is a.run_react_agent, w.options.python_tool, w.options.tool_timeout, "
            "w.options.max_iters)\n")
    done = subprocess.run([sys.executable, "-c", code], input=cloudpickle.dumps(workflow),
                          capture_output=True, timeout=hang_bound(300))
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == ["False", "True", "4.0", "3"]


def test_workflow_rejects_bad_tasks_and_auxiliary_models():
    workflow = make_workflow()
    with pytest.raises(ValueError, match="question"):
        asyncio.run(workflow({"answer": "#### 1"}, model=None))
    with pytest.raises(ValueError, match="non-empty"):
        asyncio.run(workflow({"question": "  ", "task_id": 3}, model=None))
    with pytest.raises(ValueError, match="auxiliary"):
        asyncio.run(workflow({"question": "q"}, None, {"judge": object()}))


# -- against the real local server ---------------------------------------------------------

TASKS = [{"question": "What is 3 + 4?", "answer": "#### 7"},
         {"question": "Tom has 5 apples and buys 3 more. How many apples does he have now?",
          "answer": "#### 8"}]


@pytest.mark.slow
def test_workflow_and_judge_end_to_end(model):
    async def one(task):
        with metered(capture=True) as meter:
            output = await run_react_agent(task, model)
        verdict = await gsm8k_judge(task, output.response)
        return output, verdict, meter

    for task in TASKS:
        output, verdict, meter = asyncio.run(one(task))
        assert isinstance(output, WorkflowOutput)
        reply = output.response
        assert isinstance(reply, Msg) and reply.role == "assistant"
        assert reply.name == "react_agent"
        text = reply.get_text_content()
        assert isinstance(text, str) and text.strip()
        assert verdict.reward in (0.0, 1.0)
        assert verdict.reward == score(text, task["answer"])["accuracy"]
        # one model call (a text reply ends the ReAct loop), usage metered
        assert meter.calls == 1
        assert 0 < meter.output_tokens <= MAX_TOKENS and meter.input_tokens > 20
        request = meter.requests[0]
        assert request["messages"][0]["role"] == "system"
        assert request["messages"][0]["content"] == agent.REFERENCE_PROMPT   # sent as a string
        assert request["messages"][-1] == {"role": "user", "name": "user",
                                           "content": task["question"]}
        assert [t["function"]["name"] for t in request["tools"]] == ["reset_equipped_tools"]
        assert request["generate_kwargs"]["temperature"] == 0.0


@pytest.mark.slow
def test_python_tool_is_offered_to_the_model(model):
    workflow = make_workflow(AgentOptions(python_tool=True, console_output=False))

    async def one():
        with metered(capture=True) as meter:
            output = await workflow(TASKS[0], model)
        return output, meter

    output, meter = asyncio.run(one())
    names = {t["function"]["name"] for t in meter.requests[0]["tools"]}
    assert names == {"reset_equipped_tools", "execute_python_code"}
    assert output.response.get_text_content()


@pytest.mark.slow
def test_transcript_shows_the_conversation(model):
    transcript = asyncio.run(agent.run_with_transcript(TASKS[0], model,
                                                       AgentOptions(console_output=False)))
    table = agent.transcript_table(transcript)
    assert list(table["role"]) == ["system", "user", "assistant"]
    assert table["text"].iloc[1] == TASKS[0]["question"]
    assert table["text"].iloc[2] == transcript.output.response.get_text_content()

"""The ReAct workflow: signature, prompt, the optional Python tool, and real runs.

End-to-end tests talk to the bundled SmolLM2 behind the real llama.cpp server (greedy,
a few tokens per reply to spare the CPU); nothing is mocked.
"""

from __future__ import annotations

import asyncio

import pytest
from agentscope.message import Msg, ToolUseBlock
from agentscope.tuner import WorkflowOutput, check_workflow_function

from mathagent import agent
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


def test_python_tool_runs_code_with_a_fixed_timeout():
    toolkit = agent.build_toolkit(AgentOptions(python_tool=True, tool_timeout=2.0))
    schemas = {s["function"]["name"]: s for s in toolkit.get_json_schemas()}
    assert set(schemas) == {"execute_python_code"}
    assert "timeout" not in schemas["execute_python_code"]["function"]["parameters"]["properties"]

    async def call(kit, code: str) -> str:
        block = ToolUseBlock(type="tool_use", id="1", name="execute_python_code",
                             input={"code": code})
        last = None
        async for chunk in await kit.call_tool_function(block):
            last = chunk
        return "".join(b.get("text", "") for b in last.content)

    # code that finishes gets a generous bound (a fresh interpreter starts for each call,
    # which can take seconds on a busy machine) ...
    roomy = agent.build_toolkit(AgentOptions(python_tool=True, tool_timeout=120.0))
    assert "42" in asyncio.run(call(roomy, "print(6 * 7)"))
    # ... code that never finishes hits the preset timeout on any machine
    assert "timeout of 2.0 seconds" in asyncio.run(call(toolkit, "while True:\n    pass"))


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

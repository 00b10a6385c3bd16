"""The workflow: AgentScope's ReActAgent solving one math task, as in the upstream example.

:func:`run_react_agent` is the upstream math-agent workflow (the one the data-augmentation
example trains with): a ``ReActAgent`` named ``react_agent`` with the system prompt below,
``enable_meta_tool=True``, an ``OpenAIChatFormatter`` and no toolkit, answering the task's
question in one ``reply``. It has the signature AgentScope's tuner checks
(``check_workflow_function``), so ``agentscope.tuner.tune`` and Trinity-RFT can run it.

**The doubled braces.** The upstream prompt is a plain (not formatted) Python string that
contains ``\\\\boxed{{}}``, so the model literally reads ``\\boxed{{}}``. The default
``"reference"`` prompt keeps that, on purpose: pass rates measured here must describe the
prompt that training uses, and the judge accepts what a model copying it writes
(``\\boxed{{7}}`` normalises to ``7``). ``prompt_variant="single_braces"`` gives the prompt
its author presumably meant; changing it changes what every number in the tutorial means,
so it is recorded wherever pass rates are stored.

**The Python tool.** The prompt promises code execution but the upstream agent has no tool.
``AgentOptions(python_tool=True)`` equips ``execute_python_code`` from :mod:`mathagent.sandbox`:
each call runs in a fresh child process under bubblewrap (its own user, mount, PID and network
namespaces as an unprivileged user, a read-only system, one small folder of its own and a
seccomp filter), with a clean environment, kernel limits on memory, CPU, file sizes and
processes, an audit hook refusing processes, sockets and writes outside its folder, and a
wall-clock limit of ``tool_timeout`` seconds; its output is cut to a few thousand characters.
The limits are fixed when the tool is made: the model's only argument is ``code``. It is off
by default so the default matches the reference. docs/sandbox.md says which layer stops
which attack and what none of them stops. Nothing else in the package executes model text.

**Tool calls.** Every workflow returns ``metrics={"tool_calls": n, "tool_errors": k}`` in its
``WorkflowOutput`` (:func:`count_tool_use`): the tool calls in the agent's memory and the
results among them that report an error (:data:`TOOL_ERROR_PREFIXES`). Trinity-RFT logs them
per step as ``rollout/tool_calls/mean`` and ``rollout/tool_errors/mean`` (``/max``, ``/min``
beside them; ``eval/<taskset>/tool_calls/mean@<k>`` on eval steps); the batch runner stores
them per rollout.

Models are AgentScope ``OpenAIChatModel`` objects built by :func:`build_model` from
:class:`mathagent.serving.ModelSettings`; a thin subclass meters each call (tokens, time)
into a per-task :class:`CallMeter` so the batch runner can report them.
"""

from __future__ import annotations

import copy
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentscope.agent import ReActAgent
from agentscope.formatter import OpenAIChatFormatter
from agentscope.message import Msg
from agentscope.model import OpenAIChatModel
from agentscope.tool import Toolkit
from agentscope.tuner import WorkflowOutput

from mathagent.outputs import parse_jsonl
from mathagent.sandbox import ERROR_MARKER, SandboxLimits, python_tool, timeout_problem
from mathagent.serving import ModelSettings
from mathagent.text_tool_calls import TextToolCalls

AGENT_NAME = "react_agent"

# The upstream system prompt, character for character: ``\\boxed{{}}`` in its source is the
# text ``\boxed{{}}`` the model reads (see the module docstring).
REFERENCE_PROMPT = (
    "You are an agent specialized in solving math problems with tools. "
    "Please solve the math problem given to you. You can write and "
    "execute Python code to perform calculation or verify your answer. "
    "You should return your final answer within \\boxed{{}}."
)
SYSTEM_PROMPTS = {
    "reference": REFERENCE_PROMPT,
    "single_braces": REFERENCE_PROMPT.replace("\\boxed{{}}", "\\boxed{}"),
}
DEFAULT_PROMPT = "reference"


@dataclass(frozen=True)
class AgentOptions:
    """How the workflow builds its agent. The defaults reproduce the upstream example.

    ``prompt_variant``: a key of :data:`SYSTEM_PROMPTS`. ``python_tool``: equip the
    sandboxed ``execute_python_code`` of :mod:`mathagent.sandbox` (each run limited to
    ``tool_timeout`` seconds of wall-clock time and the other :class:`SandboxLimits`).
    ``max_iters``: reasoning-acting rounds before ReActAgent summarises (upstream: 10).
    ``text_tool_calls``: also take tool calls the model wrote as JSON in its text
    (:mod:`mathagent.text_tool_calls`; small models rarely use their template's format).
    ``meta_tool``: offer AgentScope's meta tool ``reset_equipped_tools`` (upstream: on). With
    it off and no Python tool, the request carries no tools at all, so a chat template that
    describes offered tools (Qwen2.5's does) adds nothing to the system prompt.
    ``console_output``: let the agent print its messages (the batch runner turns it off).
    """

    prompt_variant: str = DEFAULT_PROMPT
    python_tool: bool = False
    tool_timeout: float = 10.0
    max_iters: int = 10
    text_tool_calls: bool = False
    meta_tool: bool = True
    console_output: bool = True

    def __post_init__(self) -> None:
        if self.prompt_variant not in SYSTEM_PROMPTS:
            raise ValueError(f"prompt_variant={self.prompt_variant!r}: choose one of "
                             f"{sorted(SYSTEM_PROMPTS)}")
        problem = timeout_problem(self.tool_timeout)
        if problem:
            raise ValueError(f"tool_timeout {problem}")
        if self.max_iters < 1:
            raise ValueError(f"max_iters must be >= 1, got {self.max_iters}")

    @property
    def sys_prompt(self) -> str:
        return SYSTEM_PROMPTS[self.prompt_variant]

    @property
    def sandbox_limits(self) -> SandboxLimits:
        """What one run of the Python tool may use (the wall clock: ``tool_timeout``)."""
        return SandboxLimits(timeout=float(self.tool_timeout))

    def describe(self) -> dict[str, Any]:
        """JSON-able record for provenance files. With the tool on it names the sandbox and
        its limits (``tool_sandbox``); without, the record is the one earlier side tables
        hold, so their measurements still resume."""
        record = {"prompt_variant": self.prompt_variant, "python_tool": self.python_tool,
                  "tool_timeout": self.tool_timeout if self.python_tool else None,
                  "max_iters": self.max_iters}
        if self.python_tool:
            record["tool_sandbox"] = self.sandbox_limits.describe()
        if self.text_tool_calls:
            record["text_tool_calls"] = True
        if not self.meta_tool:
            record["meta_tool"] = False
        return record


# --------------------------------------------------------------------------------------
# Metered model
# --------------------------------------------------------------------------------------


@dataclass
class CallMeter:
    """What one task's model calls cost: counts, tokens (None when the server does not say)
    and seconds spent waiting for the endpoint. ``requests`` keeps the request payloads
    when ``capture`` is set (the benchmark replays them against the raw API)."""

    calls: int = 0
    input_tokens: int | None = 0
    output_tokens: int | None = 0
    model_s: float = 0.0
    capture: bool = False
    requests: list[dict] = field(default_factory=list)


_METER: ContextVar[CallMeter | None] = ContextVar("mathagent_call_meter", default=None)


@contextmanager
def metered(capture: bool = False):
    """Meter every model call made in this context (one asyncio task) into a fresh meter."""
    meter = CallMeter(capture=capture)
    token = _METER.set(meter)
    try:
        yield meter
    finally:
        _METER.reset(token)


def flatten_text_content(messages: list[dict]) -> list[dict]:
    """Messages whose content is a list of text parts get that text as one string.

    AgentScope's ``OpenAIChatFormatter`` writes every content as a list of parts
    (``[{"type": "text", "text": ...}]``). The OpenAI API and vLLM accept that, but
    llama-cpp-python's server only accepts a plain string for system messages and rejects
    the request (HTTP 500). The formatter writes one text part per message here, so the
    string is exactly that text and the prompt the model reads does not change; several
    parts would be joined with newlines, as vLLM does. Messages holding images, audio or
    tool calls are left alone; the input list is not modified.
    """
    out = []
    for msg in messages:
        content = msg.get("content")
        if (isinstance(content, list) and content
                and all(isinstance(p, dict) and p.get("type") == "text" for p in content)):
            msg = {**msg, "content": "\n".join(str(p.get("text", "")) for p in content)}
        out.append(msg)
    return out


class MeteredChatModel(OpenAIChatModel):
    """AgentScope's ``OpenAIChatModel`` plus bookkeeping into the current :class:`CallMeter`.

    The request itself is AgentScope's; only wall time and token usage are recorded around
    it, and text-only contents are sent as strings (:func:`flatten_text_content`).
    :meth:`with_seed` gives a copy with another sampling seed that shares the HTTP client
    (building a client per rollout would cost more than a short reply).
    """

    async def __call__(self, messages: list[dict], tools: list[dict] | None = None,
                       tool_choice: str | None = None, structured_model: Any = None,
                       **kwargs: Any):
        meter = _METER.get()
        messages = flatten_text_content(messages)
        if meter is not None and meter.capture:
            meter.requests.append({"messages": copy.deepcopy(messages),
                                   "tools": copy.deepcopy(tools), "tool_choice": tool_choice,
                                   "generate_kwargs": dict(self.generate_kwargs)})
        start = time.perf_counter()
        response = None
        try:
            response = await super().__call__(messages, tools=tools, tool_choice=tool_choice,
                                              structured_model=structured_model, **kwargs)
            return response
        finally:
            if meter is not None:
                meter.calls += 1
                meter.model_s += time.perf_counter() - start
                _add_usage(meter, None if self.stream else getattr(response, "usage", None))

    def with_seed(self, seed: int | None) -> MeteredChatModel:
        """A shallow copy whose requests carry ``seed`` (same client, same other settings)."""
        clone = copy.copy(self)
        clone.generate_kwargs = {**self.generate_kwargs}
        if seed is None:
            clone.generate_kwargs.pop("seed", None)
        else:
            clone.generate_kwargs["seed"] = int(seed)
        return clone


def _add_usage(meter: CallMeter, usage: Any) -> None:
    """Add one call's usage; unknown usage makes the task's token count unknown (None)."""
    if usage is None:
        meter.input_tokens = meter.output_tokens = None
        return
    if meter.input_tokens is not None:
        meter.input_tokens += int(getattr(usage, "input_tokens", 0) or 0)
    if meter.output_tokens is not None:
        meter.output_tokens += int(getattr(usage, "output_tokens", 0) or 0)


def build_model(settings: ModelSettings, seed: int | None = None) -> MeteredChatModel:
    """An AgentScope chat model for ``settings`` (non-streaming, metered).

    Streaming is off: a batch job wants whole replies, and non-streamed responses carry
    token usage. ``seed`` overrides ``settings.seed`` for this model's requests.
    """
    if not settings.base_url:
        raise ValueError("settings.base_url is empty: start a server (mathagent.serving."
                         "LocalServer) or set MATHAGENT_BASE_URL")
    return MeteredChatModel(
        model_name=settings.model,
        api_key=settings.api_key,
        stream=False,
        client_kwargs={"base_url": settings.base_url, "timeout": settings.request_timeout,
                       "max_retries": settings.max_retries},
        generate_kwargs=settings.generate_kwargs(seed),
    )


# --------------------------------------------------------------------------------------
# The workflow
# --------------------------------------------------------------------------------------


def build_toolkit(options: AgentOptions) -> Toolkit | None:
    """None (the upstream agent) or a toolkit holding the sandboxed ``execute_python_code``.

    The limits are bound inside the tool (:func:`mathagent.sandbox.python_tool`): its schema
    has ``code`` only, and a call carrying any other argument fails instead of changing them.
    """
    if not options.python_tool:
        return None
    toolkit = Toolkit()
    toolkit.register_tool_function(python_tool(options.sandbox_limits))
    return toolkit


#: A tool result whose text starts with one of these counts as a tool error: a failed run
#: of the sandbox (:data:`mathagent.sandbox.ERROR_MARKER`; AgentScope's text for a tool that
#: raised starts the same way) and AgentScope's answers to an unknown or inactive tool or to
#: bad arguments.
TOOL_ERROR_PREFIXES = (ERROR_MARKER, "Error during", "FunctionNotFoundError:",
                       "FunctionInactiveError:", "Invalid arguments:")


def _result_text(block: Any) -> str:
    output = block.get("output")
    if isinstance(output, str):
        return output
    return "".join(b.get("text", "") for b in output or [] if isinstance(b, dict))


def count_tool_use(messages: list) -> dict[str, float]:
    """``{"tool_calls": n, "tool_errors": k}`` over an agent's memory: every tool call the
    model made (``ToolUseBlock``, the meta tool ``reset_equipped_tools`` included) and the
    results that report an error (:data:`TOOL_ERROR_PREFIXES`)."""
    calls = errors = 0
    for msg in messages:
        calls += len(msg.get_content_blocks("tool_use"))
        errors += sum(_result_text(b).lstrip().startswith(TOOL_ERROR_PREFIXES)
                      for b in msg.get_content_blocks("tool_result"))
    return {"tool_calls": float(calls), "tool_errors": float(errors)}


def build_agent(model: Any, options: AgentOptions = AgentOptions()) -> ReActAgent:
    """The ReActAgent of the workflow, configured by ``options``."""
    agent = ReActAgent(
        name=AGENT_NAME,
        sys_prompt=options.sys_prompt,
        model=TextToolCalls(model) if options.text_tool_calls else model,
        enable_meta_tool=options.meta_tool,
        formatter=OpenAIChatFormatter(),
        toolkit=build_toolkit(options),
        max_iters=options.max_iters,
    )
    agent.set_console_output_enabled(options.console_output)
    return agent


def _check_task(task: Any) -> str:
    if not isinstance(task, dict) or "question" not in task:
        raise ValueError(f"a task is a dict with a 'question' key, got {task!r:.200}")
    question = task["question"]
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"task {task.get('task_id', '?')}: 'question' must be a non-empty "
                         f"string, got {question!r:.200}")
    return question


def make_workflow(options: AgentOptions = AgentOptions()):
    """A workflow function for ``options``, with the signature the tuner accepts.

    ``make_workflow()`` behaves exactly like :func:`run_react_agent`; the options are
    captured in a closure because the tuner allows no extra parameters. Ray hands the
    closure to Trinity-RFT's workers with cloudpickle, by value (its name,
    ``run_react_agent``, finds another object), so the options travel with it. The output
    carries the run's :func:`count_tool_use` as ``metrics``.
    """

    async def workflow(task: dict, model: Any, auxiliary_models: dict | None = None):
        if auxiliary_models:
            raise ValueError("this workflow uses no auxiliary models; got "
                             f"{sorted(auxiliary_models)}")
        question = _check_task(task)
        agent = build_agent(model, options)
        reply = await agent.reply(msg=Msg("user", question, role="user"))
        metrics = count_tool_use(await agent.memory.get_memory())
        return WorkflowOutput(response=reply, metrics=metrics)

    workflow.__name__ = workflow.__qualname__ = "run_react_agent"
    workflow.__doc__ = f"ReAct math workflow with {options.describe()}."
    workflow.options = options
    return workflow


_REFERENCE_WORKFLOW = make_workflow(AgentOptions())


async def run_react_agent(task: dict, model: Any, auxiliary_models: dict | None = None):
    """The upstream math-agent workflow: one ReActAgent reply to ``task["question"]``.

    ``model`` is an AgentScope chat model (under Trinity-RFT: the explorer's model, during
    tutorials: :func:`build_model`). Returns ``WorkflowOutput(response=<reply Msg>)`` for
    the judge and ``metrics`` (:func:`count_tool_use`).
    """
    return await _REFERENCE_WORKFLOW(task, model, auxiliary_models)


run_react_agent.options = _REFERENCE_WORKFLOW.options


@dataclass
class Transcript:
    """A workflow run with its conversation: ``output`` for the judge, ``messages`` to read."""

    output: Any
    messages: list
    sys_prompt: str


async def run_with_transcript(task: dict, model: Any,
                              options: AgentOptions = AgentOptions()) -> Transcript:
    """Run the workflow once and keep the agent's memory (user turn, tool calls, reply)."""
    question = _check_task(task)
    agent = build_agent(model, options)
    reply = await agent.reply(msg=Msg("user", question, role="user"))
    messages = await agent.memory.get_memory()
    return Transcript(WorkflowOutput(response=reply, metrics=count_tool_use(messages)),
                      list(messages), options.sys_prompt)


def read_transcripts(path: str | Path) -> list[dict]:
    """Recorded conversations (``results/qwen_features/``, recorded on a GPU), one dict per run: the task,
    the judge's ``reward`` and ``messages`` as AgentScope wrote them (dicts)."""
    return parse_jsonl(Path(path).read_text(encoding="utf-8"), path)


def _blocks(message: dict, kind: str) -> list[dict]:
    content = message.get("content")
    return [b for b in content if b.get("type") == kind] if isinstance(content, list) else []


def recorded_summary(runs: list[dict]):
    """One row per recorded run: task, level, reward, tool calls, and how the run ended."""
    import pandas as pd

    rows = []
    for run in runs:
        messages = run.get("messages", [])
        calls = sum(len(_blocks(m, "tool_use")) for m in messages)
        last = next((m for m in reversed(messages) if m.get("role") == "assistant"), {})
        text = " ".join(b.get("text", "") for b in _blocks(last, "text")) or str(
            last.get("content", ""))
        rows.append({"task_id": run.get("task_id"), "level": run.get("difficulty"),
                     "question": run.get("question"), "reward": run.get("reward"),
                     "tool_calls": calls, "messages": len(messages),
                     "last_reply": text.strip()[:120], "error": run.get("error")})
    return pd.DataFrame(rows)


def recorded_transcript_table(run: dict, max_chars: int = 300):
    """A recorded run's conversation as :func:`transcript_table` shows a live one."""
    import pandas as pd

    rows = [{"turn": 0, "role": "system", "name": "system",
             "text": run.get("sys_prompt", "")[:max_chars], "tool_calls": ""}]
    for i, msg in enumerate(run.get("messages", []), 1):
        calls = [f"{b.get('name')}({b.get('input')})" for b in _blocks(msg, "tool_use")]
        results = ["".join(o.get("text", "") for o in b.get("output", []))
                   if isinstance(b.get("output"), list) else str(b.get("output"))
                   for b in _blocks(msg, "tool_result")]
        text = (" ".join(b.get("text", "") for b in _blocks(msg, "text"))
                if isinstance(msg.get("content"), list) else str(msg.get("content", "")))
        rows.append({"turn": i, "role": msg.get("role"), "name": msg.get("name"),
                     "text": (text or "\n".join(results))[:max_chars],
                     "tool_calls": "; ".join(calls)})
    return pd.DataFrame(rows)


def transcript_table(transcript: Transcript):
    """The conversation as a ``pandas.DataFrame``: ``turn, role, name, text, tool_calls``."""
    import pandas as pd

    rows = [{"turn": 0, "role": "system", "name": "system", "text": transcript.sys_prompt,
             "tool_calls": ""}]
    for i, msg in enumerate(transcript.messages, 1):
        calls = [f"{b.get('name')}({b.get('input')})" for b in msg.get_content_blocks("tool_use")]
        results = [str(b.get("output")) for b in msg.get_content_blocks("tool_result")]
        text = msg.get_text_content() or "\n".join(results)
        rows.append({"turn": i, "role": msg.role, "name": msg.name, "text": text,
                     "tool_calls": "; ".join(calls)})
    return pd.DataFrame(rows)

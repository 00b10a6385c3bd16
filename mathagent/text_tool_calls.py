"""Tool calls that a model wrote as plain text, read back as tool calls (an agent setting).

A chat model calls a tool by answering in the format its chat template asks for; Qwen2.5's
asks for ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, and vLLM's ``hermes``
parser turns exactly that into an OpenAI ``tool_calls`` entry. Small models often get the
wrapping wrong while the call itself is clear: Qwen2.5-Coder-0.5B-Instruct, given the agent's
tools, mostly answers with a fenced JSON block::

    ```json
    {"name": "execute_python_code", "arguments": {"code": "print(84 * 83 + 30 * 39)"}}
    ```

which no parser reads, so the ReAct loop ends on it as the final answer (no box, reward 0):
measured on one H200 with the upstream agent, 0.7% of its training-set runs were right
(``results/qwen_features/README.md``). :class:`TextToolCalls` wraps the agent's chat model and,
when a reply carries no tool call, looks in its text for JSON objects naming one of the tools
offered in that request, with an ``arguments`` (or ``parameters``) object, and adds them to the
reply as tool calls. The text stays in the reply as written. Off by default, like everything
that departs from the upstream agent (``AgentOptions(text_tool_calls=True)``).

:func:`tools_section` is the other half of that format: the text with which Qwen2.5's template
offers tools in the system message, for a chat template that ignores the tools it is given
(SmolLM2's; :meth:`mathagent.policy.Policy.chat_text` adds it then).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

_DECODER = json.JSONDecoder()


def find_tool_calls(text: str, names: set[str]) -> list[tuple[str, dict]]:
    """``(name, arguments)`` of every JSON object in ``text`` that names a tool of ``names``
    and has an ``arguments`` (or ``parameters``) object; a JSON list of such objects counts
    too. Objects are read where they start, whatever surrounds them (fences, tags, prose)."""
    calls: list[tuple[str, dict]] = []
    start = 0
    while (begin := _next_json(text, start)) >= 0:
        try:
            value, end = _DECODER.raw_decode(text, begin)
        except ValueError:
            start = begin + 1
            continue
        for item in value if isinstance(value, list) else [value]:
            if not isinstance(item, dict) or item.get("name") not in names:
                continue
            arguments = item.get("arguments", item.get("parameters"))
            if isinstance(arguments, str):  # OpenAI's own wire format: arguments as a string
                try:
                    arguments = json.loads(arguments)
                except ValueError:
                    continue
            if isinstance(arguments, dict):
                calls.append((item["name"], arguments))
        start = end
    return calls


def tools_section(tools: list[dict]) -> str:
    """The "# Tools" section that Qwen2.5's chat template appends to the system message when
    it is given ``tools`` (OpenAI function schemas): each schema as one JSON line inside
    ``<tools>``, then how to call one (``<tool_call>{"name": ..., "arguments": ...}</tool_call>``,
    which :func:`find_tool_calls` reads back)."""
    lines = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
    return ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n"
            f"<tools>\n{lines}\n</tools>\n\n"
            "For each function call, return a json object with function name and arguments "
            "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


def _next_json(text: str, start: int) -> int:
    positions = [p for p in (text.find("{", start), text.find("[", start)) if p >= 0]
    return min(positions) if positions else -1


def _tool_names(tools: list[dict] | None) -> set[str]:
    names = set()
    for tool in tools or []:
        function = tool.get("function", tool) if isinstance(tool, dict) else {}
        if isinstance(function, dict) and function.get("name"):
            names.add(function["name"])
    return names


class TextToolCalls:
    """A chat model whose replies get the tool calls written in their text (see module).

    Every attribute but the call itself is the wrapped model's, so the agent, the meter and
    Trinity-RFT's model see the same object they passed in. ``recovered`` counts the calls
    added so far.
    """

    def __init__(self, model: Any):
        self._model = model
        self.recovered = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def __setattr__(self, name: str, value: Any) -> None:
        # the agent sets e.g. ``model.stream``: that belongs to the wrapped model
        if name in ("_model", "recovered"):
            object.__setattr__(self, name, value)
        else:
            setattr(self._model, name, value)

    async def __call__(self, messages: list[dict], tools: list[dict] | None = None,
                       *args: Any, **kwargs: Any):
        from agentscope.message import ToolUseBlock

        response = await self._model(messages, tools, *args, **kwargs)
        content = getattr(response, "content", None)
        names = _tool_names(tools)
        if not names or not isinstance(content, list):
            return response  # a stream, or no tools offered
        if any(block.get("type") == "tool_use" for block in content):
            return response
        text = "".join(b.get("text", "") for b in content if b.get("type") == "text")
        calls = find_tool_calls(text, names)
        for name, arguments in calls:
            content.append(ToolUseBlock(type="tool_use", id=f"text_call_{uuid.uuid4().hex[:12]}",
                                        name=name, input=arguments))
        self.recovered += len(calls)
        return response

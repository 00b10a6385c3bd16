"""Rollouts with the Python tool: a reply, its code run in the sandbox, the next reply.

With ``rollout.python_tool`` on, a rollout of ``train-local`` is a short exchange instead of
one reply, as the agent's ReAct loop is with ``AgentOptions(python_tool=True)``:

1. the policy replies to the prompt, which offers ``execute_python_code`` with the schema
   the agent's toolkit sends (:meth:`~mathagent.policy.Policy.chat_text` writes it the way
   the chat template does, or as Qwen2.5's does for a template that ignores tools);
2. the calls of that tool in the reply, read by
   :func:`mathagent.text_tool_calls.find_tool_calls` (the ``<tool_call>{...}</tool_call>``
   format and the bare JSON small models write instead), run in :mod:`mathagent.sandbox`
   under the agent's limits; what each run printed (:meth:`SandboxResult.text`, what the
   agent reads) becomes a tool message;
3. the chat template's text for the end of the reply, the tool messages and the start of the
   next assistant turn is appended to the context, and the policy replies again;

until a reply calls no tool or ``rollout.max_turns`` replies are written (the calls of the
last allowed reply are not run). The judge reads the last reply.

A rollout's tokens are its replies and the tool turns between them, in order
(:class:`ToolRollout`). Its ``loss_mask`` is 1 on the replies' tokens only, so the policy
gradient and the KL penalty cover what the policy wrote, never the tool's output nor the
template's tokens around it. The replies' tokens stay as sampled; only the tool turns are
tokenized.

Sampling stays batched: every rollout's first reply is sampled in one call of
:meth:`~mathagent.policy.Policy.sample`, then the rollouts whose reply called the tool
sample their next reply together, and so on. The sandbox runs of one turn run side by side,
one per CPU core at a time (more would eat into each other's wall-clock limit).
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from mathagent.policy import Completion, Policy
from mathagent.sandbox import ERROR_MARKER, SandboxLimits, run_code
from mathagent.sandbox_layer import require_isolation
from mathagent.text_tool_calls import find_tool_calls

TOOL_NAME = "execute_python_code"


@dataclass
class ToolRollout(Completion):
    """One rollout with the tool: ``ids`` hold every reply and the tool turns between them
    (``loss_mask`` 1 on the replies), ``text`` is the last reply (what the judge reads) and
    ``finished`` whether that reply ended by itself.

    ``tool_calls`` counts the calls that ran (one tool message each), ``tool_errors`` those
    whose run failed or whose arguments were not one string ``code``; ``turns`` is the
    exchange after the prompt as chat messages (assistant, tool, ..., assistant).
    """

    tool_calls: int = 0
    tool_errors: int = 0
    turns: list[dict] = field(default_factory=list)


class PythonTool:
    """The sandboxed ``execute_python_code`` in ``train-local``'s rollouts.

    ``max_turns``: replies per rollout at most (the agent's ``max_iters``); ``timeout``:
    wall-clock seconds of one run. The limits and the schema are the agent's
    (:class:`mathagent.agent.AgentOptions`, :func:`mathagent.agent.build_toolkit`), so the
    policy is offered the tool the agent would offer it (without AgentScope's meta tool).
    """

    def __init__(self, max_turns: int, timeout: float = SandboxLimits().timeout):
        try:  # AgentScope, only when the tool is used
            from mathagent.agent import AgentOptions, build_toolkit
        except ImportError as exc:
            raise ValueError(f"rollout.python_tool needs AgentScope, which does not import "
                             f"here: {exc}") from None

        options = AgentOptions(python_tool=True, tool_timeout=timeout, max_iters=max_turns)
        require_isolation()  # one line where the sandbox would refuse every call
        self.max_turns = max_turns
        self.limits = options.sandbox_limits
        self.schemas = build_toolkit(options).get_json_schemas()

    def describe(self) -> dict[str, Any]:
        """JSON-able record for the run's ``params.json``."""
        return {"tool": TOOL_NAME, "max_turns": self.max_turns,
                "tool_sandbox": self.limits.describe()}

    # -- the sandbox ---------------------------------------------------------------------
    def run(self, arguments: list[dict]) -> list[tuple[str, bool]]:
        """Run each call's ``arguments``; ``(text the policy reads, failed)`` per call, in order.

        A call must carry exactly one argument, ``code``, a string (the tool's schema); any
        other arguments get an error message instead of a run, as the agent's toolkit would.
        """
        out: list[tuple[str, bool] | None] = [None] * len(arguments)
        todo = []
        for k, args in enumerate(arguments):
            if set(args) == {"code"} and isinstance(args["code"], str):
                todo.append(k)
            else:
                out[k] = (f"{ERROR_MARKER} {TOOL_NAME} takes one argument, code (a string of "
                          f"Python); it was called with {json.dumps(args)[:200]}", True)
        if todo:
            workers = min(len(todo), os.cpu_count() or 1)
            with ThreadPoolExecutor(max_workers=workers) as pool:
                results = pool.map(lambda k: run_code(arguments[k]["code"], self.limits), todo)
                for k, result in zip(todo, results, strict=True):
                    out[k] = (result.text(), not result.ok)
        return out

    # -- the exchange --------------------------------------------------------------------
    def check_template(self, policy: Policy) -> None:
        """Raise ``ValueError`` (one line) if the policy's chat template does not keep a reply
        as written when a tool message follows it: then the tool turns cannot be cut out of
        the rendered conversation (:func:`tool_turn_ids`)."""
        probe = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]
        call = json.dumps({"name": TOOL_NAME, "arguments": {"code": "1"}})
        # space around the reply: a template that trims the content it writes fails here,
        # not steps into a run
        text = f"\nA <tool_call>{call}</tool_call>\n "
        ids = policy.tokenizer(text, add_special_tokens=False)["input_ids"]
        tool_turn_ids(policy, probe, Completion(ids=ids, text=text, finished=False),
                      [{"role": "tool", "content": "1"}], self.schemas)

    def rollouts(self, policy: Policy, prompts: list[list[int]], messages: list[list[dict]],
                 *, max_new_tokens: int, temperature: float, generator,
                 chunk_size: int) -> list[ToolRollout]:
        """One exchange per prompt (see the module docstring), in order.

        ``prompts`` are the token ids of ``messages`` with the tool offered
        (``policy.encode(question, tools=self.schemas)``); the other arguments are
        :meth:`Policy.sample`'s, ``max_new_tokens`` per reply.
        """
        out = [ToolRollout(ids=[], text="", finished=False, loss_mask=[]) for _ in prompts]
        contexts = [list(p) for p in prompts]
        conversations = [list(m) for m in messages]
        active = list(range(len(prompts)))
        for turn in range(1, self.max_turns + 1):
            replies = policy.sample([contexts[i] for i in active], max_new_tokens=max_new_tokens,
                                    temperature=temperature, generator=generator,
                                    chunk_size=chunk_size)
            calling = []  # (rollout, its reply, the tool calls in it)
            for i, reply in zip(active, replies, strict=True):
                r = out[i]
                r.ids += reply.ids
                r.loss_mask += [1] * len(reply.ids)
                r.text, r.finished = reply.text, reply.finished
                contexts[i] += reply.ids
                r.turns.append({"role": "assistant", "content": reply.text})
                calls = find_tool_calls(reply.text, {TOOL_NAME}) if turn < self.max_turns else []
                if calls:
                    calling.append((i, reply, calls))
            if not calling:
                break
            results = iter(self.run([args for _, _, calls in calling for _, args in calls]))
            for i, reply, calls in calling:
                r = out[i]
                done = [next(results) for _ in calls]
                tool_messages = [{"role": "tool", "content": text} for text, _ in done]
                between = tool_turn_ids(policy, conversations[i], reply, tool_messages,
                                        self.schemas)
                conversations[i] += [{"role": "assistant", "content": reply.text},
                                     *tool_messages]
                r.ids += between
                r.loss_mask += [0] * len(between)
                contexts[i] += between
                r.turns += tool_messages
                r.tool_calls += len(calls)
                r.tool_errors += sum(failed for _, failed in done)
            active = [i for i, _, _ in calling]
        return out


def tool_turn_ids(policy: Policy, conversation: list[dict], reply: Completion,
                  tool_messages: list[dict], tools: list[dict]) -> list[int]:
    """Token ids of what the chat template writes after ``reply`` up to the next reply.

    That is the end of the assistant turn (less the end token the policy wrote itself), the
    tool messages and the start of the next assistant turn: the template's text of the
    conversation with them, past the text of ``conversation`` (which ends where ``reply``
    began) followed by the reply.
    """
    head = policy.chat_text(conversation, tools) + reply.text
    full = policy.chat_text([*conversation, {"role": "assistant", "content": reply.text},
                             *tool_messages], tools)
    if not full.startswith(head):
        raise ValueError("rollout.python_tool: the policy's chat template does not keep a "
                         "reply as written when a tool message follows it (it rewrites "
                         "earlier turns), so the tool's output cannot be appended to the "
                         "context")
    between = full[len(head):]
    if reply.finished:  # the policy ended its turn with a stop token the template writes too
        between = between.removeprefix(policy.tokenizer.decode(reply.ids[-1:]))
    return policy.tokenizer(between, add_special_tokens=False)["input_ids"]

"""One rollout's record: its keys, its seed, and how a failed one is told and counted.

A failed rollout (an endpoint error, a timeout, an exception in the agent or the judge)
has an ``error`` text and a NaN reward, never 0; :func:`failure_kind` sorts those texts
into :data:`FAILURE_KINDS` for the commands' summary lines.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

# Keys of one rollout record, the backend contract.
ROLLOUT_KEYS = ("rollout", "reward", "accuracy", "response", "extracted", "latency_s",
                "tokens", "error")

#: What the endpoint runner records besides :data:`ROLLOUT_KEYS`: prompt tokens, model calls
#: and seconds inside them, and the agent's tool calls and tool errors (the workflow's metrics,
#: :func:`mathagent.agent.count_tool_use`).
RUNNER_KEYS = ("input_tokens", "calls", "model_s", "tool_calls", "tool_errors")

MAX_ERROR_CHARS = 500


def rollout_seed(seed: int, row: int, rollout: int) -> int:
    """The sampling seed of one rollout: a 31-bit hash of ``(seed, row, rollout)``.

    Independent of chunking and order, so a resumed or fanned-out run sends exactly the
    requests an uninterrupted single-endpoint run sends.
    """
    state = np.random.SeedSequence([int(seed), int(row), int(rollout)]).generate_state(1)
    return int(state[0]) & 0x7FFFFFFF


def chunk_seed(seed: int, rows: Sequence[int]) -> int:
    """Seed handed to backends that seed per batch (``seeds_per_task`` false)."""
    return rollout_seed(seed, int(rows[0]) if len(rows) else 0, 1 << 20)


def _error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + "..."


def _failed_record(rollout: int, error: str | None, latency: float = math.nan) -> dict:
    """A record that has no reward (yet): NaN, never 0, so it cannot pass for a wrong reply.

    Besides :data:`ROLLOUT_KEYS` it has the endpoint runner's :data:`RUNNER_KEYS` (tool calls
    unknown, None, until the workflow returns its metrics)."""
    return {"rollout": rollout, "reward": math.nan, "accuracy": math.nan, "response": None,
            "extracted": None, "latency_s": latency, "tokens": None, "error": error,
            "input_tokens": None, "calls": 0, "model_s": 0.0, "tool_calls": None,
            "tool_errors": None}


ENDPOINT_ERROR_PREFIX = "endpoint error: "
TIMEOUT_PREFIX = "timeout after"

# What a failed rollout's ``error`` says, grouped for the summary lines of the commands.
FAILURE_KINDS = ("endpoint error", "timeout", "exception")


def _is_endpoint_error(exc: BaseException) -> bool:
    """True for errors of the HTTP client (openai / httpx), also when wrapped by the agent."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        module = type(exc).__module__ or ""
        if module.split(".")[0] in ("openai", "httpx", "httpcore"):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def is_failed(error: Any, reward: Any = 0.0) -> bool:
    """Whether a rollout record failed: an ``error`` text, or no finite reward."""
    if isinstance(error, str) and error:
        return True
    try:
        return not math.isfinite(float(reward))
    except (TypeError, ValueError):
        return True


def failure_kind(error: Any) -> str:
    """One of :data:`FAILURE_KINDS` for a failed record's ``error`` text."""
    text = error if isinstance(error, str) else ""
    if text.startswith(ENDPOINT_ERROR_PREFIX):
        return "endpoint error"
    if text.startswith(TIMEOUT_PREFIX):
        return "timeout"
    return "exception"


def failure_counts(errors: Sequence[Any]) -> dict[str, int]:
    """``{kind: count}`` over the ``error`` texts of failed records (kinds that occur)."""
    counts = dict.fromkeys(FAILURE_KINDS, 0)
    for e in errors:
        counts[failure_kind(e)] += 1
    return {k: v for k, v in counts.items() if v}


def describe_failures(counts: dict[str, int]) -> str:
    """``"10 endpoint errors, 2 timeouts"``."""
    parts = []
    for kind, count in counts.items():
        plural = {"endpoint error": "endpoint errors", "timeout": "timeouts",
                  "exception": "exceptions in the agent or judge"}[kind]
        parts.append(f"{count} {plural if count != 1 else kind}")
    return ", ".join(parts) if parts else "none"

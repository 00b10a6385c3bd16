"""Evaluation replies without log-probabilities: a lever for Trinity-RFT 0.6.0's evaluation.

Trinity's AgentScope workflow adapter (``AgentScopeWorkflowAdapterV1`` in
``trinity/common/workflows/agentscope_workflow.py``) builds the agent's chat model with
``logprobs: True`` for every task, training and evaluation alike, and Trinity's OpenAI client
records each reply as an experience with them (``ModelWrapper.get_openai_async_client``). An
evaluation task's experiences are dropped once its metrics are read (``WorkflowRunner`` returns
no payload for a task with ``is_eval``), so its log-probabilities are never used, yet the
engine's front end (the ``vLLMRolloutModel`` actor, near a full core through the evaluations in
``benchmarks/bench_engine_step_bootstrap.md``) builds, serialises and sends one log-probability
object per token of every reply, and the workflow runner parses them.

With ``MATHAGENT_EVAL_NO_LOGPROBS=1`` an evaluation task's chat model asks for none
(``logprobs: False``, no ``top_logprobs``); a training task's is unchanged. vLLM samples a
reply the same way with or without them (they are read off the logits, not fed back), so the
replies, rewards and metrics of an evaluation are draws from the same distribution; its
recorded experiences carry an empty log-probability tensor, and are dropped as before.

Only :func:`install` touches Trinity; it is applied through :mod:`mathagent.compat`
(``trinity-eval-no-logprobs``) in the worker that imports the adapter's module (each workflow
runner).
"""

from __future__ import annotations

import os

#: Set to 1 to leave log-probabilities out of evaluation requests.
EVAL_NO_LOGPROBS_ENV = "MATHAGENT_EVAL_NO_LOGPROBS"


def unwanted() -> str | None:
    """Why the lever is not applied here, or None."""
    if os.environ.get(EVAL_NO_LOGPROBS_ENV) != "1":
        return f"a speed lever, applied only with {EVAL_NO_LOGPROBS_ENV}=1"
    return None


def without_logprobs(generate_kwargs: dict) -> dict:
    """``generate_kwargs`` asking for no log-probabilities (Trinity's client asks for them
    unless a request says ``logprobs: False``)."""
    kept = {k: v for k, v in generate_kwargs.items() if k != "top_logprobs"}
    return {**kept, "logprobs": False}


def install(workflow_module) -> bool:
    """Patch ``AgentScopeWorkflowAdapterV1.__init__`` of Trinity's module
    ``workflow_module`` (``trinity.common.workflows.agentscope_workflow``); False when it
    already was."""
    from mathagent.compat import _replace

    cls = workflow_module.AgentScopeWorkflowAdapterV1
    original = cls.__init__

    def __init__(self, *args, **kwargs) -> None:
        original(self, *args, **kwargs)
        if self.task.is_eval:
            self.chat_model.generate_kwargs = without_logprobs(self.chat_model.generate_kwargs)

    __init__.__doc__ = original.__doc__
    return _replace(cls, "__init__", __init__)

"""Log-probabilities of the chosen tokens in blocks of rows, not one row at a time.

Without flash-attn's cross-entropy, verl 0.8.0 computes a micro-batch's log-probabilities with
``logprobs_from_logits_v2`` (``verl/utils/torch_functional.py``), which loops over the first
dimension of the logits in Python to bound peak memory. Its FSDP engine hands it the logits of
every token of the micro-batch as one ``(tokens, vocabulary)`` matrix, padded or not
(``FSDPEngineWithLMHead.prepare_model_outputs``), so the loop runs once per token: a
``log_softmax``, a ``gather`` and a copy each, tens of thousands of kernel launches a step
(the profile of a reference pass in ``benchmarks/engine_step/profile_h100/`` counts them).

:func:`logprobs_in_blocks` computes the same values block by block (:data:`BLOCK_ROWS` rows at
a time): in the logits' own precision with ``log_softmax`` for half precision, with
``logsumexp`` for float32 and float64, as verl does row by row, so each row's value is the
same computation. Applied through :mod:`mathagent.compat` (``verl-batched-logprobs``) with
``MATHAGENT_BATCHED_LOGPROBS=1``.
"""

from __future__ import annotations

import os

#: Set to 1 to apply ``verl-batched-logprobs``.
BATCHED_LOGPROBS_ENV = "MATHAGENT_BATCHED_LOGPROBS"
#: Rows of logits a block: 1,024 x 151,936 words is 0.3 GB in bfloat16.
BLOCK_ROWS = 1024


def unwanted() -> str | None:
    if os.environ.get(BATCHED_LOGPROBS_ENV) != "1":
        return f"a speed lever, applied only with {BATCHED_LOGPROBS_ENV}=1"
    return None


def logprobs_in_blocks(logits, labels, block_rows: int = BLOCK_ROWS):
    """The log-probability of each of ``labels`` under ``logits`` (``(..., vocabulary)``),
    shaped as ``labels``: verl's ``logprobs_from_logits_v2``, :data:`BLOCK_ROWS` rows at a time."""
    import torch
    import torch.nn.functional as F

    shape = labels.shape
    flat, index = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1, 1)
    parts = []
    for start in range(0, flat.shape[0], block_rows):
        rows, chosen = flat[start:start + block_rows], index[start:start + block_rows]
        if rows.dtype in (torch.float32, torch.float64):
            part = rows.gather(-1, chosen).squeeze(-1) - torch.logsumexp(rows, dim=-1)
        else:  # as verl: logsumexp is unstable in bfloat16
            part = F.log_softmax(rows, dim=-1).gather(-1, chosen).squeeze(-1)
        parts.append(part)
    if not parts:
        return flat.new_zeros(shape)
    return torch.cat(parts).reshape(shape)


def install(torch_functional) -> bool:
    """Replace ``logprobs_from_logits_v2`` in verl's ``torch_functional`` module (its
    ``logprobs_from_logits`` calls it through the module); False when already replaced."""
    from mathagent.compat import _replace

    def logprobs_from_logits_v2(logits, labels):
        return logprobs_in_blocks(logits, labels)

    logprobs_from_logits_v2.__doc__ = torch_functional.logprobs_from_logits_v2.__doc__
    return _replace(torch_functional, "logprobs_from_logits_v2", logprobs_from_logits_v2)

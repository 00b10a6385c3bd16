"""verl's fused policy head with an output layer that FSDP2 keeps sharded, on one device.

With ``use_fused_kernels`` (the ``torch`` backend) verl 0.8.0's ``forward_with_torch_backend``
(``verl/models/transformers/dense_common.py``, and its copies for other model families) hands
``self.lm_head.weight`` to ``FusedLinearForPPO`` (``verl/utils/experimental/torch_functional.py``)
without calling ``lm_head``. Where the output layer is not tied to the embeddings
(``tie_word_embeddings: false``, as in the Qwen2.5-Coder-0.5B folder), verl's FSDP2 wrapping
(``apply_fsdp2`` in ``verl/utils/fsdp_utils.py``) makes ``lm_head`` a ``fully_shard`` unit of
its own, and FSDP2 gathers a unit's weights only around the unit's forward: the head gets the
sharded float32 parameter, a DTensor, beside plain bfloat16 hidden states, and its first matrix
product raises "aten.mm.default got mixed torch.Tensor and DTensor".

:func:`full_weight` gives the head the whole weight where the DTensor's device mesh has one
device: ``full_tensor()`` (no communication on one device, and differentiable, so the gradient
reaches the sharded parameter), moved to the hidden states' device and dtype as FSDP2's
gather would (a CPU-offloaded parameter; mixed precision's ``param_dtype``). On a mesh of
more devices verl's behaviour is kept: there a gradient taken this way would skip FSDP2's
reduce-scatter, so each rank would step on its own data's gradient alone. Applied through
:mod:`mathagent.compat` (``verl-fused-head-fsdp2``).
"""

from __future__ import annotations


def full_weight(vocab_weights, hidden_states):
    """``vocab_weights`` as the fused head can use it beside ``hidden_states``: the full
    tensor for a DTensor on a one-device mesh beside a plain tensor, else unchanged."""
    from torch.distributed.tensor import DTensor

    if (not isinstance(vocab_weights, DTensor) or isinstance(hidden_states, DTensor)
            or vocab_weights.device_mesh.size() != 1):
        return vocab_weights
    return vocab_weights.full_tensor().to(device=hidden_states.device,
                                          dtype=hidden_states.dtype)


def install(torch_functional) -> bool:
    """Wrap ``FusedLinearForPPO.forward`` in verl's ``torch_functional`` module; False when
    already wrapped.

    Trinity-RFT's ``patch_fused_kernels`` wraps the same method and keeps what it wrapped as
    ``_original_forward``: installed first, this is under Trinity's wrapper; after, over it.
    """
    from mathagent.compat import _MARK, _replace

    cls = torch_functional.FusedLinearForPPO
    if getattr(getattr(cls, "_original_forward", None), _MARK, False):
        return False  # already in place, under Trinity's wrapper
    original = cls.forward

    def forward(self, hidden_states, vocab_weights, input_ids, temperature=1.0):
        return original(self, hidden_states, full_weight(vocab_weights, hidden_states),
                        input_ids, temperature)

    forward.__doc__ = original.__doc__
    return _replace(cls, "forward", forward)

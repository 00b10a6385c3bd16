"""Attention over packed sequences for verl's trainer where flash-attn is not installed.

With ``trainer.use_remove_padding: true`` verl 0.8.0's FSDP engine (as Trinity-RFT 0.6.0
patches it) drops the padding of a micro-batch and calls the model once on all its tokens in
a row: ``input_ids`` of shape ``(1, total)``, no attention mask, ``position_ids`` restarting
at 0 at each sequence and the boundaries as ``cu_seq_lens_q`` / ``cu_seq_lens_k`` (cumulative
lengths, int32) with ``max_length_q`` / ``max_length_k``. transformers passes those keyword
arguments on to the attention function the config names; its ``flash_attention_2`` needs the
flash-attn package (a distribution named ``flash-attn`` >= 2.3.3, else a kernel from the Hugging
Face hub), which has no wheel. Without it the project trains with ``sdpa`` over padded
micro-batches, so every micro-batch costs its longest sequence times its size.

This module is a third attention implementation for transformers, :data:`NAME`, registered
by :func:`register` (``transformers-varlen-attention`` in :mod:`mathagent.compat`, a lever
that is off unless asked for). It attends within each sequence of a packed row and nowhere
across, forward and backward:

* on a CUDA GPU in half precision, with PyTorch's own variable-length attention
  (``torch.nn.attention.varlen.varlen_attn``: FlashAttention-2 kernels built into PyTorch,
  with a backward; public since PyTorch 2.10, CUDA only);
* otherwise (the CPU, float32) with PyTorch's ``scaled_dot_product_attention`` once per
  sequence.

vLLM's ``vllm.vllm_flash_attn.flash_attn_varlen_func`` cannot stand in: vLLM builds its
FlashAttention extensions with ``FLASHATTENTION_DISABLE_BACKWARD`` and forward kernels only.

The sequences come from, in this order: a 2-D padding mask (padded input is unpadded here and
padded back), ``cu_seq_lens_q``, ``position_ids`` of one packed row (a new sequence wherever the
position falls back to its smallest value), else each row of the batch is one sequence.
"""

from __future__ import annotations

import inspect
import math
from functools import lru_cache
from typing import Any

import torch
import torch.nn.functional as F

from mathagent.compat import VARLEN_ATTN_NAME

#: The name a model config's ``attn_implementation`` gives to use this attention.
NAME = VARLEN_ATTN_NAME

#: The last packing worked out, kept for the next layer of the same forward pass: every layer
#: is handed the same mask / boundaries tensor, and reading its lengths waits for the GPU.
_LAST: dict[str, Any] = {"source": None, "packing": None}


class Packing:
    """Where each sequence lies among the tokens: ``cu_seqlens`` (int32, on the tokens'
    device), their ``lengths`` as Python ints, and ``indices`` of the kept tokens of a padded
    ``(batch, length)`` input (None for input that holds no padding)."""

    def __init__(self, cu_seqlens: torch.Tensor, indices: torch.Tensor | None = None) -> None:
        self.cu_seqlens = cu_seqlens.to(torch.int32)
        self.lengths = [int(n) for n in cu_seqlens.diff().tolist()]
        self.max_seqlen = max(self.lengths, default=0)
        self.indices = indices


def _cumulative(lengths: torch.Tensor) -> torch.Tensor:
    return F.pad(torch.cumsum(lengths, 0, dtype=torch.int32), (1, 0))


def packing_of(batch: int, length: int, device: torch.device,
               attention_mask: torch.Tensor | None = None,
               cu_seqlens: torch.Tensor | None = None,
               position_ids: torch.Tensor | None = None) -> Packing:
    """The sequences of a ``(batch, length)`` input (module docstring), reusing the packing of
    the previous call when it was worked out from the same tensor."""
    source = next((t for t in (attention_mask, cu_seqlens, position_ids) if t is not None), None)
    if source is not None and _LAST["source"] is source:
        return _LAST["packing"]
    if attention_mask is not None:
        mask = attention_mask.bool()
        indices = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
        packing = Packing(_cumulative(mask.sum(-1)), indices)
    elif cu_seqlens is not None:
        packing = Packing(cu_seqlens)
    elif position_ids is not None and batch == 1:
        flat = position_ids.reshape(-1)
        starts = torch.nonzero(flat == flat.min(), as_tuple=False).flatten()
        packing = Packing(torch.cat([starts, starts.new_tensor([flat.numel()])]))
    else:
        packing = Packing(torch.arange(0, (batch + 1) * length, length, device=device))
    _LAST.update(source=source, packing=packing)
    return packing


@lru_cache(maxsize=4)
def _parameters(fn) -> frozenset[str]:
    return frozenset(inspect.signature(fn).parameters)


def _torch_varlen(query: torch.Tensor):
    """PyTorch's ``varlen_attn`` where it can run this query, else None."""
    if not query.is_cuda or query.dtype not in (torch.float16, torch.bfloat16):
        return None
    if torch.cuda.get_device_capability(query.device)[0] < 8:  # FlashAttention-2: Ampere on
        return None
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:  # PyTorch before 2.10
        return None
    return varlen_attn


def _repeat_kv(x: torch.Tensor, times: int) -> torch.Tensor:
    """``(tokens, kv_heads, dim)`` -> ``(tokens, kv_heads * times, dim)``: query head ``h``
    reads key/value head ``h // times``, as transformers' ``repeat_kv`` pairs them."""
    return x if times == 1 else x.repeat_interleave(times, dim=1)


def _with_torch_varlen(fn, query, key, value, packing: Packing, causal: bool,
                       scale: float | None) -> torch.Tensor | None:
    """One call of PyTorch's ``varlen_attn``; None where its signature cannot take these
    settings. Its keywords changed between releases: ``is_causal`` (2.10), then ``scale`` and
    ``window_size`` with ``(-1, 0)`` for causal (2.11), then ``enable_gqa`` (2.12)."""
    params = _parameters(fn)
    kwargs: dict[str, Any] = {}
    if "window_size" in params:
        kwargs["window_size"] = (-1, 0) if causal else (-1, -1)
    else:
        kwargs["is_causal"] = causal
    if "scale" in params:
        kwargs["scale"] = scale
    elif scale is not None and not math.isclose(scale, query.shape[-1] ** -0.5):
        return None
    groups = query.shape[1] // key.shape[1]
    if groups > 1 and "enable_gqa" in params:
        kwargs["enable_gqa"] = True
    elif groups > 1:
        key, value = _repeat_kv(key, groups), _repeat_kv(value, groups)
    cu = packing.cu_seqlens
    return fn(query, key, value, cu, cu, packing.max_seqlen, packing.max_seqlen, **kwargs)


def _per_sequence(query, key, value, packing: Packing, causal: bool,
                  scale: float | None) -> torch.Tensor:
    """``scaled_dot_product_attention`` on each sequence alone."""
    groups = query.shape[1] // key.shape[1]
    outs = []
    for q, k, v in zip(query.split(packing.lengths), key.split(packing.lengths),
                       value.split(packing.lengths), strict=True):
        if q.shape[0] == 0:
            continue
        q, k, v = q.transpose(0, 1), _repeat_kv(k, groups).transpose(0, 1), \
            _repeat_kv(v, groups).transpose(0, 1)
        outs.append(F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                   scale=scale).transpose(0, 1))
    return torch.cat(outs) if outs else query.new_zeros(query.shape)


def packed_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     packing: Packing, causal: bool = True,
                     scale: float | None = None) -> torch.Tensor:
    """Attention within each sequence of packed tokens.

    ``query`` is ``(tokens, heads, dim)``, ``key`` and ``value`` ``(tokens, kv_heads, dim)``
    with ``heads`` a multiple of ``kv_heads``; the result is shaped as ``query``. ``scale``
    multiplies the scores (default ``dim ** -0.5``).
    """
    if query.shape[1] % key.shape[1]:
        raise ValueError(f"{query.shape[1]} query heads are not a multiple of "
                         f"{key.shape[1]} key/value heads")
    fn = _torch_varlen(query)
    if fn is not None:
        out = _with_torch_varlen(fn, query, key, value, packing, causal, scale)
        if out is not None:
            return out
    return _per_sequence(query, key, value, packing, causal, scale)


def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                      value: torch.Tensor, attention_mask: torch.Tensor | None,
                      dropout: float = 0.0, scaling: float | None = None,
                      sliding_window: int | None = None, softcap: float | None = None,
                      is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention interface: ``query`` ``(batch, heads, length, dim)``, ``key``
    and ``value`` ``(batch, kv_heads, length, dim)``; returns ``(batch, length, heads, dim)``
    and no weights. For training and scoring passes (no KV cache)."""
    batch, heads, length, dim = query.shape
    mask_shape = None if attention_mask is None else tuple(attention_mask.shape)
    unsupported = [what for what, used in (
        (f"dropout {dropout}", dropout and module.training),
        (f"sliding window {sliding_window}", sliding_window is not None),
        (f"softcap {softcap}", softcap is not None),
        (f"{length} queries for {key.shape[2]} keys (a KV cache)", key.shape[2] != length),
        (f"an attention mask of shape {mask_shape}",
         mask_shape is not None and len(mask_shape) != 2)) if used]
    if unsupported:
        raise ValueError(f"attn_implementation {NAME!r} does not support "
                         f"{', '.join(unsupported)}; use 'sdpa'")
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    packing = packing_of(batch, length, query.device, attention_mask,
                         kwargs.get("cu_seq_lens_q"), kwargs.get("position_ids"))
    q, k, v = (t.transpose(1, 2).reshape(batch * length, t.shape[1], dim)
               for t in (query, key, value))
    if packing.indices is not None:
        q, k, v = (t.index_select(0, packing.indices) for t in (q, k, v))
    out = packed_attention(q, k, v, packing, causal=causal, scale=scaling)
    if packing.indices is not None:
        out = out.new_zeros(batch * length, heads, dim).index_copy(0, packing.indices, out)
    return out.view(batch, length, heads, dim), None


def register() -> bool:
    """Make :data:`NAME` a valid ``attn_implementation`` in this process: the attention
    function, and flash-attention's mask function (None for unpadded input, else the 2-D
    padding mask). Returns False when it was already registered."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, flash_attention_mask
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if ALL_ATTENTION_FUNCTIONS.get(NAME) is attention_forward:
        return False
    ALL_ATTENTION_FUNCTIONS.register(NAME, attention_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, flash_attention_mask)
    return True

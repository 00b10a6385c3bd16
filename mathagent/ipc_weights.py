"""Colocated weight sync through CUDA IPC handles instead of copies through the CPU.

In ``colocate`` mode Trinity-RFT 0.6.0 syncs weights by memory
(``trinity/trainer/verl/fsdp_engine.py``, ``fsdp_upload_state_dict``): the trainer gathers its
full state dict to the CPU in float32 (about 2 GB for a 0.5B policy), hands it to the
Synchronizer actor through Ray's object store, and the vLLM worker pulls it back tensor by
tensor and copies each to the GPU it already shares with the trainer. The committed Qwen runs
spent 5-9 s a step on that; a device-to-device copy of the same weights takes milliseconds.

:func:`upload_state_dict` (applied by :mod:`mathagent.compat` as ``trinity-ipc-sync``) keeps
Trinity's protocol (the same Synchronizer call, the same ``(name, tensor)`` stream to the
explorer) and changes what travels: the trainer gathers the state dict on the GPU, casts it to
the dtype vLLM serves (bfloat16), keeps those tensors alive, and sends a :class:`Sealed` CUDA
IPC handle per tensor (a few hundred bytes each). A handle unpickles as a CUDA tensor only in a
process that already uses the GPU (:func:`open_handle`: the vLLM worker, which then reads the
trainer's memory directly); anywhere else (the Synchronizer actor) it stays sealed and is passed
on unopened.

The trainer keeps the last upload until the next one: Trinity's fixed sync style with
``sync_interval`` 1 makes the explorer load a version before the trainer can make the next, so
the memory is never rewritten while the explorer reads it. Extra GPU memory: one copy of the
weights in bfloat16 (about 1 GB for the 0.5B policy).
"""

from __future__ import annotations

from typing import Any

#: The last upload's tensors, kept alive while the explorer may still map them.
_KEPT: dict[str, Any] = {}


class Sealed:
    """A CUDA tensor's IPC handle as ``torch.multiprocessing.reductions.reduce_tensor`` makes
    it; unpickles through :func:`open_handle`. ``shape`` and ``dtype`` answer Trinity's
    ``get_state_dict_meta`` without opening it."""

    def __init__(self, rebuild: Any, args: tuple) -> None:
        self.rebuild, self.args = rebuild, args

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.args[1])

    @property
    def dtype(self) -> Any:
        return self.args[5]

    def __reduce__(self):
        return open_handle, (self.rebuild, self.args)


def open_handle(rebuild: Any, args: tuple) -> Any:
    """The tensor behind a handle in a process that already uses the GPU, else the handle."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return rebuild(*args)
    return Sealed(rebuild, args)


def seal(tensor: Any) -> Sealed:
    """The IPC handle of a CUDA tensor (the tensor must stay alive while others map it)."""
    from torch.multiprocessing.reductions import reduce_tensor

    rebuild, args = reduce_tensor(tensor)
    return Sealed(rebuild, args)


def sealed_state_dict(state_dict: dict[str, Any], dtype: Any) -> dict[str, Sealed]:
    """Cast every tensor of a GPU state dict to ``dtype`` (fresh copies that training will not
    touch), keep them in :data:`_KEPT` in place of the previous upload, and return their
    handles in the same order."""
    kept = {name: t.detach().to(dtype=dtype, copy=True).contiguous()
            for name, t in state_dict.items()}
    _KEPT.clear()
    _KEPT.update(kept)
    return {name: seal(t) for name, t in kept.items()}


def upload_state_dict(engine: Any, synchronizer: Any, global_step: int, logger: Any) -> None:
    """``fsdp_upload_state_dict`` of Trinity-RFT 0.6.0 with the state dict kept on the GPU and
    sent as IPC handles (module docstring). Step 0 uploads nothing, as upstream."""
    if global_step == 0:
        return
    import ray
    import torch
    from verl.utils.fsdp_utils import get_fsdp_full_state_dict

    state_dict = get_fsdp_full_state_dict(engine.module, offload_to_cpu=False, rank0_only=True)
    if torch.distributed.get_rank() == 0:
        sealed = sealed_state_dict(state_dict, torch.bfloat16)
        torch.cuda.synchronize()  # the copies exist before another process reads them
        ray.get(synchronizer.set_model_state_dict.remote(sealed, global_step))
    del state_dict
    torch.distributed.barrier()
    logger.info(f"[FSDP] state_dict handles uploaded to Synchronizer: step={global_step}")

"""The colocated weight sync through CUDA IPC handles (mathagent.ipc_weights, applied by
mathagent.compat as ``trinity-ipc-sync``).

A CUDA IPC handle needs a GPU, so here: what a handle does in a process that does not use the
GPU (stays sealed through any number of pickles, answers shape and dtype), the switch that opens
it where the GPU is in use (``torch.cuda`` answers faked, and ``rebuild`` a stand-in: said in
the test), the upload's bookkeeping (copies cast and kept until the next upload), and the fix's
gate and patch through Trinity-RFT 0.6.0's own module. The handles themselves are exercised by
the GPU runs of benchmarks/bench_engine_step.py.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch

from mathagent import compat, ipc_weights


def stand_in_rebuild(*args):
    """Stands for torch's ``rebuild_cuda_tensor``: returns what it was given."""
    return ("rebuilt", args)


ARGS = (torch.Tensor, (3, 4), (4, 1), 0, None, torch.bfloat16, 0, b"handle")


def test_a_handle_stays_sealed_where_the_gpu_is_not_in_use():
    sealed = ipc_weights.Sealed(stand_in_rebuild, ARGS)
    once = pickle.loads(pickle.dumps(sealed))
    twice = pickle.loads(pickle.dumps(once))  # the Synchronizer passes it on unopened
    assert isinstance(twice, ipc_weights.Sealed)
    assert twice.args == ARGS and twice.rebuild is stand_in_rebuild
    assert twice.shape == (3, 4) and twice.dtype == torch.bfloat16


def test_a_handle_opens_in_a_process_that_uses_the_gpu(monkeypatch):
    # faked: this machine has no GPU; in the vLLM worker both answers are True
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    opened = pickle.loads(pickle.dumps(ipc_weights.Sealed(stand_in_rebuild, ARGS)))
    assert opened == ("rebuilt", ARGS)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert isinstance(pickle.loads(pickle.dumps(ipc_weights.Sealed(stand_in_rebuild, ARGS))),
                      ipc_weights.Sealed)


def test_an_upload_casts_copies_and_keeps_them_until_the_next(monkeypatch):
    monkeypatch.setattr(ipc_weights, "seal", lambda t: ("sealed", t))
    first = {"w": torch.ones(2, 3), "b": torch.zeros(3)}
    handles = ipc_weights.sealed_state_dict(first, torch.bfloat16)
    assert list(handles) == ["w", "b"]
    kept = dict(ipc_weights._KEPT)
    assert all(t.dtype == torch.bfloat16 for t in kept.values())
    first["w"].add_(5)  # training goes on: the upload does not move
    assert torch.equal(kept["w"], torch.ones(2, 3, dtype=torch.bfloat16))
    assert handles["w"][1] is kept["w"]
    ipc_weights.sealed_state_dict({"w": torch.full((1,), 2.0)}, torch.bfloat16)
    assert list(ipc_weights._KEPT) == ["w"] and ipc_weights._KEPT["w"].item() == 2.0


def test_the_lever_is_on_unless_turned_off(monkeypatch):
    lever = next(f for f in compat.FIXES if f.name == "trinity-ipc-sync")
    monkeypatch.delenv(compat.IPC_SYNC_ENV, raising=False)
    assert compat._gate(lever, {"trinity-rft": "0.6.0"}) is None
    monkeypatch.setenv(compat.IPC_SYNC_ENV, "0")
    result = compat._gate(lever, {"trinity-rft": "0.6.0"})
    assert result.status == "skipped"
    assert result.reason == "a speed lever, turned off with MATHAGENT_IPC_SYNC=0"
    monkeypatch.setenv(compat.IPC_SYNC_ENV, "1")
    assert compat._gate(lever, {"trinity-rft": "0.6.0"}) is None
    assert compat._gate(lever, {"trinity-rft": "0.6.1"}).status == "skipped"


@pytest.mark.slow
def test_the_lever_replaces_trinitys_upload_on_one_gpu_only():
    """In a fresh interpreter (the patch is process-wide), Trinity-RFT 0.6.0's real module;
    the world size is faked (no GPU here) and the IPC upload recorded instead of run."""
    code = textwrap.dedent("""
        import os, json
        os.environ.pop("MATHAGENT_IPC_SYNC", None)  # on by default
        from unittest import mock
        from trinity.trainer.verl import fsdp_engine
        from mathagent import ipc_weights
        from mathagent.compat import apply_all
        original = fsdp_engine.fsdp_upload_state_dict
        status = {r.name: r.status for r in apply_all()}["trinity-ipc-sync"]
        patched = fsdp_engine.fsdp_upload_state_dict
        calls = []
        with mock.patch.object(ipc_weights, "upload_state_dict",
                               lambda *a: calls.append(("ipc", a[2]))):
            for world in (1, 2):
                with mock.patch("torch.distributed.get_world_size", return_value=world):
                    # step 0: Trinity's own upload returns at once without the trainer
                    fsdp_engine.fsdp_upload_state_dict(None, None, 0, None)
        print(json.dumps({"status": status, "replaced": patched is not original,
                          "wraps": patched.__wrapped__ is original, "calls": calls}))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"status": "applied", "replaced": True, "wraps": True,
                      "calls": [["ipc", 0]]}  # world size 1 only


def _checked(**change):
    """A checked Trinity config's fields that the IPC sync depends on (the Qwen configs')."""
    from types import SimpleNamespace

    values = {"mode": "colocate", "sync_method": "memory", "sync_style": "fixed",
              "sync_interval": 1, "dtype": "bfloat16", **change}
    return SimpleNamespace(
        mode=values["mode"],
        synchronizer=SimpleNamespace(sync_method=values["sync_method"],
                                     sync_style=values["sync_style"],
                                     sync_interval=values["sync_interval"]),
        explorer=SimpleNamespace(rollout_model=SimpleNamespace(dtype=values["dtype"])))


@pytest.mark.parametrize("change, says", [
    ({}, None),
    ({"mode": "both"}, "mode 'both', not 'colocate'"),
    ({"sync_method": "nccl"}, "synchronizer.sync_method nccl, not memory"),
    ({"sync_style": "dynamic_by_explorer"}, "synchronizer.sync_style dynamic_by_explorer, not fixed"),
    ({"sync_interval": 2}, "synchronizer.sync_interval 2, not 1"),
    ({"dtype": "float16"}, "explorer.rollout_model.dtype 'float16', not bfloat16"),
])
def test_the_sync_is_left_out_where_its_safety_argument_does_not_hold(change, says):
    assert compat.ipc_sync_misfit(_checked(**change)) == says


@pytest.mark.slow
def test_the_qwen_configs_as_trinity_checks_them_fit_the_ipc_sync(tmp_path):
    from mathagent import launch, paths

    plan = launch.load_plan(paths.CONFIGS_DIR / "config_bots_qwen.yaml", work_dir=tmp_path)
    checked = launch.check_and_update(plan, "127.0.0.1:1", dry_run=True)
    assert compat.ipc_sync_misfit(checked) is None

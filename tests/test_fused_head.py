"""mathagent.fused_head (``verl-fused-head-fsdp2``) on verl 0.8.0's own fused policy head.

What is real: verl's ``FusedLinearForPPO``, its FSDP2 wrapping (``apply_fsdp2``), Trinity-RFT
0.6.0's fused-kernels monkey patch (which points the model's forward at verl's
``forward_with_torch_backend`` and wraps ``FusedLinearForPPO.forward``), transformers'
Qwen2ForCausalLM, small, randomly initialised and with ``tie_word_embeddings=False`` as the
Qwen2.5-Coder folder. On CPU: a gloo process group of one process and a CPU device mesh, where
the run had NCCL and one GPU. Each check runs in a fresh interpreter (``fresh_python.py``): a
process group, and a fix, are the whole process's.
"""

from __future__ import annotations

import pytest
from fresh_python import fix_named, run_python, wrong_versions

from mathagent import compat

WRONG_VERSIONS = wrong_versions()
needs_upstream = pytest.mark.skipif(WRONG_VERSIONS is not None, reason=str(WRONG_VERSIONS))

#: A gloo process group of one process (``init_process_group`` in the scripts below); its
#: store is a file in a folder removed when the interpreter exits.
ONE_PROCESS = """
    import tempfile
    import torch
    import torch.distributed as dist

    STORE = tempfile.TemporaryDirectory()

    def init_process_group():
        dist.init_process_group("gloo", init_method=f"file://{STORE.name}/store", rank=0,
                                world_size=1)
"""

MIXED = "got mixed torch.Tensor and DTensor"


@pytest.mark.slow
@needs_upstream
def test_a_one_device_dtensor_weight_fails_in_verl_and_matches_the_plain_weight_with_the_fix():
    """Verl's FusedLinearForPPO with a sharded float32 weight (a DTensor parameter on a CPU
    mesh of one device) beside bfloat16 hidden states: the error of the run without the fix;
    with it, the log-probs, entropy and gradients of the same weight as a plain bfloat16
    parameter (the float32 values are bfloat16 ones, so the cast loses nothing)."""
    out, _ = run_python(ONE_PROCESS, """
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Shard, distribute_tensor
        from verl.utils.experimental import torch_functional
        from mathagent import compat

        init_process_group()
        torch.manual_seed(0)
        hidden = torch.randn(2, 5, 16, dtype=torch.bfloat16)
        weight = torch.randn(40, 16, dtype=torch.bfloat16)
        labels = torch.randint(0, 40, (2, 5))
        sharded = torch.nn.Parameter(distribute_tensor(
            weight.float(), init_device_mesh("cpu", (1,)), [Shard(0)]))
        plain = torch.nn.Parameter(weight.clone())

        def head(w):
            h = hidden.clone().requires_grad_()
            log_probs, entropy = torch_functional.FusedLinearForPPO(chunk_size=4)(h, w, labels)
            (log_probs.sum() + entropy.float().sum()).backward()
            return log_probs, entropy, h.grad

        try:
            head(sharded)
            before = None
        except RuntimeError as exc:
            before = str(exc)
        status = {r.name: r.status for r in compat.apply_all()}["verl-fused-head-fsdp2"]
        got, want = head(sharded), head(plain)
        grad = sharded.grad
        emit({"before": before, "status": status,
              "outputs_equal": [torch.equal(g, w) for g, w in zip(got, want)],
              "dtypes": [str(got[0].dtype), str(got[1].dtype)],
              "grad_is_dtensor": isinstance(grad, DTensor), "grad_dtype": str(grad.dtype),
              "grad_equal": torch.equal(grad.full_tensor(), plain.grad.float())})
        dist.destroy_process_group()
    """)
    assert out["before"] is not None and MIXED in out["before"], out["before"]
    assert out["status"] == "applied"
    assert out["outputs_equal"] == [True, True, True]  # log-probs, entropy, hidden grad
    assert out["dtypes"] == ["torch.float32", "torch.bfloat16"]
    assert out["grad_is_dtensor"] and out["grad_dtype"] == "torch.float32"
    assert out["grad_equal"]


#: A tiny Qwen2 with an untied output layer, Trinity's fused-kernels patch (torch backend),
#: verl's FSDP2 wrapping with bfloat16 parameters on a CPU mesh of one device; ``step(model)``
#: is a forward and backward as in training, ``reference(model)`` a no-grad forward.
FSDP2_MODEL = """
    import copy
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy
    from torch.distributed.tensor import DTensor
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from trinity.trainer.verl_legacy.monkey_patch import apply_monkey_patch

    def models():
        torch.manual_seed(0)
        config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             tie_word_embeddings=False)
        model = Qwen2ForCausalLM(config)
        apply_monkey_patch(model, use_remove_padding=False, use_fused_kernels=True,
                           fused_kernels_backend="torch")
        plain = copy.deepcopy(model)
        for p in plain.parameters():  # as FSDP2 casts them; buffers (rotary) stay float32
            p.data = p.data.to(torch.bfloat16)
        return model, plain

    def shard(model):
        from verl.utils.fsdp_utils import apply_fsdp2

        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32,
                                      cast_forward_inputs=True)
        apply_fsdp2(model, {"mesh": init_device_mesh("cpu", (1,)), "mp_policy": policy}, {})
        return model

    IDS = torch.randint(0, 64, (3, 9), generator=torch.Generator().manual_seed(1))

    def step(model):
        out = model(input_ids=IDS, return_dict=True)
        (out.log_probs.sum() + out.entropy.float().sum()).backward()
        return out.log_probs, out.entropy

    def reference(model):
        with torch.no_grad():
            return model(input_ids=IDS, return_dict=True).log_probs

    def grads(model):
        return {name: (p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad).float()
                for name, p in model.named_parameters()}

    def compare(model, plain):
        got, want = step(model), step(plain)
        got_grads, want_grads = grads(model), grads(plain)
        return {"lm_head_wrapped": type(model.lm_head).__name__,
                "lm_head_weight_dtensor": isinstance(model.lm_head.weight, DTensor),
                "outputs_equal": [torch.equal(g, w) for g, w in zip(got, want)],
                "grads_equal": sorted(n for n in want_grads
                                      if torch.equal(got_grads[n], want_grads[n])),
                "grads": sorted(want_grads),
                "reference_equal": torch.equal(reference(model), reference(plain))}
"""


@pytest.mark.slow
@needs_upstream
def test_verl_fsdp2_with_an_untied_output_layer_works_with_the_fix_applied_first():
    """As in a Ray worker: the fix waits for verl's module, Trinity's patch imports it (so
    Trinity's wrapper goes over the fix's). A training step and a reference pass give what the
    same weights give as a plain bfloat16 model, gradients of every parameter included (the
    next test has the same model's failure without the fix)."""
    out, _ = run_python(ONE_PROCESS, FSDP2_MODEL, """
        import sys
        from mathagent import compat

        init_process_group()
        waiting = compat.apply_on_import()
        imported_before = "verl.utils.experimental.torch_functional" in sys.modules
        model, plain = models()
        from verl.utils.experimental.torch_functional import FusedLinearForPPO

        layers = [FusedLinearForPPO.forward.__qualname__,
                  FusedLinearForPPO._original_forward.__qualname__,
                  FusedLinearForPPO._original_forward.__wrapped__.__qualname__]
        again = {r.name: r.status for r in compat.apply_all()}["verl-fused-head-fsdp2"]
        shard(model)
        result = compare(model, plain)
        emit({"waiting": "verl-fused-head-fsdp2" in waiting, "imported": imported_before,
              "layers": layers, "again": again, **result})
        dist.destroy_process_group()
    """)
    assert out["waiting"] and not out["imported"]
    assert out["layers"] == ["patch_fused_kernels.<locals>.torch_backend_forward",
                             "install.<locals>.forward", "FusedLinearForPPO.forward"]
    assert out["again"] == "already applied"  # found under Trinity's wrapper
    assert out["lm_head_wrapped"] == "FSDPLinear" and out["lm_head_weight_dtensor"]
    assert out["outputs_equal"] == [True, True]
    assert out["grads_equal"] == out["grads"] and "lm_head.weight" in out["grads"]
    assert out["reference_equal"]


@pytest.mark.slow
@needs_upstream
def test_the_fix_applied_over_trinitys_patch_after_the_failure():
    """The other order: Trinity's patch first and, without the fix, the run's error; then
    ``apply_all()`` (the module already imported) wraps Trinity's wrapper, and the same model
    trains and gives the plain model's values."""
    out, _ = run_python(ONE_PROCESS, FSDP2_MODEL, """
        from mathagent import compat

        init_process_group()
        model, plain = models()
        shard(model)
        try:
            step(model)
            before = None
        except RuntimeError as exc:
            before = str(exc)
        model.zero_grad()
        status = {r.name: r.status for r in compat.apply_all()}["verl-fused-head-fsdp2"]
        again = {r.name: r.status for r in compat.apply_all()}["verl-fused-head-fsdp2"]
        from verl.utils.experimental.torch_functional import FusedLinearForPPO

        outer = FusedLinearForPPO.forward
        emit({"before": before, "status": status, "again": again,
              "layers": [outer.__qualname__, outer.__wrapped__.__qualname__],
              **compare(model, plain)})
        dist.destroy_process_group()
    """)
    assert out["before"] is not None and MIXED in out["before"], out["before"]
    assert out["status"] == "applied" and out["again"] == "already applied"
    assert out["layers"] == ["install.<locals>.forward",
                             "patch_fused_kernels.<locals>.torch_backend_forward"]
    assert out["outputs_equal"] == [True, True]
    assert out["grads_equal"] == out["grads"]
    assert out["reference_equal"]


@pytest.mark.slow
@needs_upstream
def test_a_mesh_of_two_processes_keeps_verls_behaviour():
    """On a mesh of two devices (two gloo processes, forked) the weight is handed on unchanged."""
    out, _ = run_python("""
        import tempfile
        import torch
        import torch.distributed as dist
        import torch.multiprocessing as mp
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Shard, distribute_tensor
        from mathagent.fused_head import full_weight

        def rank_main(rank, store, results):
            dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                                    world_size=2)
            weight = distribute_tensor(torch.ones(4, 3), init_device_mesh("cpu", (2,)),
                                       [Shard(0)])
            results[rank] = full_weight(weight, torch.ones(2, 3, dtype=torch.bfloat16)) is weight
            dist.destroy_process_group()

        results = mp.Manager().dict()
        with tempfile.TemporaryDirectory() as folder:
            mp.start_processes(rank_main, nprocs=2, start_method="fork",
                               args=(f"{folder}/store", results))
        emit(dict(results))
    """)
    assert out == {"0": True, "1": True}


def test_the_fix_is_always_on_for_verl_0_8_0_and_skipped_for_other_versions():
    fix = fix_named("verl-fused-head-fsdp2")
    assert fix.module == "verl.utils.experimental.torch_functional"
    assert compat._gate(fix, {"verl": "0.8.0"}) is None
    result = compat._gate(fix, {"verl": "0.8.1"})
    assert result.status == "skipped"
    assert result.reason == ("verl 0.8.1 does not need it (fix is for 0.8.0; "
                             f"{fix.upstream})")
    assert compat._gate(fix, {}).reason == "verl is not installed"

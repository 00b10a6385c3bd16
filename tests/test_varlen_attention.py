"""mathagent.varlen_attention: attention within each sequence of a packed row, the lever that
registers it with transformers (``transformers-varlen-attention`` in mathagent.compat), and
the launch's choice of it.

Real parts: transformers' Qwen2 model (a small one built from a config, random weights) with
the attention registered under its name, fed as verl 0.8.0's padding-free path feeds it
(``input_ids`` of shape ``(1, total)``, ``position_ids`` restarting per sequence,
``cu_seq_lens_q``), against the same weights under ``sdpa`` with each sequence alone. On the
CPU the attention runs PyTorch's SDPA per sequence; PyTorch's ``varlen_attn`` runs on CUDA only,
so the checks of that path run where a GPU is (``benchmarks/engine_step_levers.sh`` runs this
file there first) and are skipped elsewhere. Here, stand-ins with the signatures of its
releases (2.10, 2.11, 2.12) compute the formula, to check what the call hands each of them.
"""

from __future__ import annotations

import math

import pytest
import torch
from fresh_python import run_python

from mathagent import compat, launch, paths, varlen_attention
from mathagent.launch import attention

ARITH = paths.CONFIGS_DIR / "config_difficulty_arithmetic.yaml"  # colocate, one GPU
CUDA = pytest.mark.skipif(not torch.cuda.is_available(),
                          reason="PyTorch's varlen_attn (FlashAttention-2) runs on CUDA only")


def written_out(q, k, v, lengths, causal=True, scale=None):
    """Attention as the formula reads, one sequence at a time, key/value heads shared by
    consecutive groups of query heads: softmax(q k^T * scale + mask) v, scale 1 / sqrt(d)
    unless given."""
    groups = q.shape[1] // k.shape[1]
    outs, start = [], 0
    for n in lengths:
        qs, ks, vs = (t[start:start + n] for t in (q, k, v))
        start += n
        ks, vs = ks.repeat_interleave(groups, 1), vs.repeat_interleave(groups, 1)
        scores = torch.einsum("qhd,khd->hqk", qs, ks) * (scale or 1 / math.sqrt(q.shape[-1]))
        if causal:
            scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -math.inf)
        outs.append(torch.einsum("hqk,khd->qhd", scores.softmax(-1), vs))
    return torch.cat(outs)


def packed(lengths, device="cpu"):
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32,
                      device=device)
    return varlen_attention.Packing(cu)


def qkv(total, heads=4, kv_heads=2, dim=8, dtype=torch.float64, device="cpu", seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    return [torch.randn(total, h, dim, generator=g, dtype=torch.float64).to(device, dtype)
            .requires_grad_() for h in (heads, kv_heads, kv_heads)]


@pytest.mark.parametrize("causal", [True, False])
def test_packed_attention_is_the_formula_per_sequence_forward_and_backward(causal):
    lengths = [5, 1, 0, 9, 3]  # an empty sequence too
    q, k, v = qkv(sum(lengths))
    out = varlen_attention.packed_attention(q, k, v, packed(lengths), causal=causal)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    ref = written_out(q, k, v, lengths, causal)
    ref_grads = torch.autograd.grad(ref.square().sum(), (q, k, v))
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    # a token's output depends on its own sequence only
    moved = v.detach().clone()
    moved[:5] += 1.0
    again = varlen_attention.packed_attention(q, k, moved, packed(lengths), causal=causal)
    torch.testing.assert_close(again[5:], out[5:])
    assert not torch.allclose(again[:5], out[:5])


def stand_in_varlen(release):
    """PyTorch's ``varlen_attn`` as each release's signature has it, computing the formula
    (the kernel itself runs on CUDA only): what the adapter passes is what arrives."""
    def checked(query, key, value, cu_q, cu_k, max_q, max_k, causal, scale, gqa):
        assert cu_q is cu_k and cu_q.dtype == torch.int32
        assert max_q == max_k == int(cu_q.diff().max())
        assert gqa or key.shape[1] == query.shape[1]  # without enable_gqa: heads repeated
        return written_out(query, key, value, cu_q.diff().tolist(), causal, scale)

    def v210(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal=False,
             return_aux=None):
        return checked(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal, None,
                       False)

    def v211(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None,
             scale=None, window_size=(-1, -1)):
        assert window_size in ((-1, 0), (-1, -1))
        return checked(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k,
                       window_size == (-1, 0), scale, False)

    def v212(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None,
             scale=None, window_size=(-1, -1), enable_gqa=False, seqused_k=None,
             block_table=None, num_splits=None):
        return checked(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k,
                       window_size == (-1, 0), scale, enable_gqa)

    return {"2.10": v210, "2.11": v211, "2.12": v212}[release]


@pytest.mark.parametrize("release", ["2.10", "2.11", "2.12"])
@pytest.mark.parametrize("causal", [True, False])
def test_the_call_fits_each_releases_varlen_attn(release, causal):
    lengths = [5, 1, 9, 3]
    q, k, v = qkv(sum(lengths))
    scale = q.shape[-1] ** -0.5
    out = varlen_attention._with_torch_varlen(stand_in_varlen(release), q, k, v,
                                              packed(lengths), causal, scale)
    torch.testing.assert_close(out, written_out(q, k, v, lengths, causal))
    # a scale other than the default: 2.10 cannot take it, so the caller falls back
    other = varlen_attention._with_torch_varlen(stand_in_varlen(release), q, k, v,
                                                packed(lengths), causal, 0.5)
    if release == "2.10":
        assert other is None
    else:
        torch.testing.assert_close(other, written_out(q, k, v, lengths, causal, 0.5))


def test_heads_that_do_not_group_get_one_line():
    q, k, v = qkv(4, heads=3, kv_heads=2)
    with pytest.raises(ValueError, match="3 query heads are not a multiple of 2"):
        varlen_attention.packed_attention(q, k, v, packed([4]))


# --------------------------------------------------------------------------------------
# through transformers: a Qwen2 model under the registered name
# --------------------------------------------------------------------------------------

LENGTHS = [5, 1, 9, 3]


def models(dtype=torch.float64, device="cpu"):
    """The same random Qwen2 weights under sdpa and under the registered attention."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    varlen_attention.register()
    shape = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=97)
    torch.manual_seed(0)
    ref = Qwen2ForCausalLM(Qwen2Config(**shape, attn_implementation="sdpa")).to(device, dtype)
    ours = Qwen2ForCausalLM(Qwen2Config(**shape, attn_implementation=varlen_attention.NAME))
    ours.load_state_dict(ref.state_dict())
    return ref, ours.to(device, dtype)


def sequences(device="cpu"):
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, 97, (n,), generator=g).to(device) for n in LENGTHS]


def verl_inputs(seqs):
    """A micro-batch as verl 0.8.0 (Trinity's prepare_model_inputs) hands it to the model."""
    cu = torch.tensor([0, *torch.tensor(LENGTHS).cumsum(0).tolist()], dtype=torch.int32,
                      device=seqs[0].device)
    seq_idx = torch.cat([torch.full((n,), i, dtype=torch.int32) for i, n in enumerate(LENGTHS)])
    return {"input_ids": torch.cat(seqs)[None], "attention_mask": None,
            "position_ids": torch.cat([torch.arange(len(s), device=s.device) for s in seqs])[None],
            "seq_idx": seq_idx[None].to(cu.device), "cu_seq_lens_q": cu, "cu_seq_lens_k": cu,
            "max_length_q": cu.diff().max(), "max_length_k": cu.diff().max(), "use_cache": False}


def logprob_sum(logits, ids):
    return torch.log_softmax(logits.float(), -1).gather(-1, ids[..., None]).sum()


def grads_of(model, loss):
    model.zero_grad()
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("given", ["cu_seq_lens", "position_ids"])
def test_a_packed_row_gives_each_sequence_its_own_forward_and_backward(given):
    """verl's inputs (or packed position_ids alone) through the registered attention: the
    logits and every parameter's gradient are those of each sequence run alone under sdpa."""
    ref, ours = models()
    seqs = sequences()
    inputs = verl_inputs(seqs)
    if given == "position_ids":
        inputs = {k: inputs[k] for k in ("input_ids", "position_ids", "use_cache")}
    logits = ours(**inputs).logits[0]
    alone = [ref(input_ids=s[None]).logits[0] for s in seqs]
    torch.testing.assert_close(logits, torch.cat(alone), rtol=1e-9, atol=1e-9)
    got = grads_of(ours, logprob_sum(logits, inputs["input_ids"][0]))
    want = grads_of(ref, sum(logprob_sum(a, s) for a, s in zip(alone, seqs, strict=True)))
    for name, grad in want.items():
        torch.testing.assert_close(got[name], grad, rtol=1e-9, atol=1e-9, msg=name)


@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_input_gives_what_sdpa_gives(side):
    """With padding kept (use_remove_padding false) the 2-D mask reaches the attention,
    which drops the padding and puts it back: the real tokens' logits are sdpa's."""
    ref, ours = models()
    seqs = sequences()
    width = max(LENGTHS)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, s in enumerate(seqs):
        span = slice(width - len(s), width) if side == "left" else slice(0, len(s))
        ids[row, span], mask[row, span] = s, 1
    got = ours(input_ids=ids, attention_mask=mask, use_cache=False).logits
    want = ref(input_ids=ids, attention_mask=mask, use_cache=False).logits
    keep = mask.bool()
    torch.testing.assert_close(got[keep], want[keep], rtol=1e-9, atol=1e-9)


def test_what_it_cannot_do_gets_one_line():
    _, ours = models()
    layer = ours.model.layers[0].self_attn
    q, k = torch.zeros(1, 4, 3, 16), torch.zeros(1, 2, 5, 16)
    with pytest.raises(ValueError, match=r"does not support 3 queries for 5 keys \(a KV cache\)"
                                         r"; use 'sdpa'"):
        varlen_attention.attention_forward(layer, q, k, k, None)
    with pytest.raises(ValueError, match="does not support sliding window 4"):
        varlen_attention.attention_forward(layer, q, q[:, :2], q[:, :2], None, sliding_window=4)


@pytest.mark.slow
def test_the_lever_is_off_unless_asked_for_and_then_registers_in_a_fresh_interpreter():
    """Off (the default): the name is unknown to transformers and a model asking for it is
    refused, as before. On: applied when transformers' modeling_utils is imported (as in a Ray
    worker) and a model under the name builds."""
    code = """
        import os
        from mathagent import compat

        def build():
            from transformers import Qwen2Config, Qwen2ForCausalLM
            cfg = Qwen2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                              num_attention_heads=4, num_key_value_heads=2, vocab_size=50,
                              attn_implementation=compat.VARLEN_ATTN_NAME)
            try:
                return Qwen2ForCausalLM(cfg).config._attn_implementation
            except ValueError as exc:
                return str(exc).splitlines()[0][:60]

        waiting = compat.apply_on_import()
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
        status = {r.name: [r.status, r.reason] for r in compat.apply_all()}
        emit({"waiting": "transformers-varlen-attention" in waiting, "status": status["transformers-varlen-attention"],
              "known": compat.VARLEN_ATTN_NAME in ALL_ATTENTION_FUNCTIONS, "model": build()})
    """
    off, _ = run_python("import os; os.environ.pop('MATHAGENT_VARLEN_ATTN', None)", code)
    assert off["waiting"] is False and off["known"] is False
    assert off["status"] == ["skipped", "a speed lever, applied only with MATHAGENT_VARLEN_ATTN=1"]
    assert off["model"].startswith('Specified `attn_implementation="mathagent_varlen"` is not')
    on, proc = run_python("import os; os.environ['MATHAGENT_VARLEN_ATTN'] = '1'", code)
    assert on["waiting"] is True
    assert on["known"] is True and on["model"] == "mathagent_varlen"
    assert on["status"][0] == "already applied"  # by the import, before apply_all()
    assert "mathagent.compat:" not in proc.stderr


def test_the_lever_is_gated_on_the_transformers_releases_it_was_checked_with(monkeypatch):
    lever = next(f for f in compat.FIXES if f.name == "transformers-varlen-attention")
    monkeypatch.setenv(compat.VARLEN_ATTN_ENV, "1")
    for version in compat.VARLEN_ATTN_TRANSFORMERS:
        assert compat._gate(lever, {"transformers": version}) is None
    assert compat._gate(lever, {"transformers": "5.99.0"}).status == "skipped"
    monkeypatch.setattr(compat, "installed_version", lambda package: "5.99.0")
    assert compat.varlen_attention_misfit() == (
        "transformers 5.99.0 is not a release it was checked with (5.17.0, 5.24.0)")
    monkeypatch.delenv(compat.VARLEN_ATTN_ENV)
    assert compat.varlen_attention_misfit() == "it is registered only with MATHAGENT_VARLEN_ATTN=1"


# --------------------------------------------------------------------------------------
# the launch's choice
# --------------------------------------------------------------------------------------


def test_without_the_lever_the_choice_is_as_before(monkeypatch):
    monkeypatch.delenv(compat.VARLEN_ATTN_ENV, raising=False)
    raw: dict = {}
    launch.choose_attention(raw, have_flash_attn=False)
    assert launch._get_dotted(raw, launch.ATTN_KEY) == "sdpa"
    assert launch._get_dotted(raw, launch.REMOVE_PADDING_KEY) is False


def test_with_the_lever_the_choice_is_varlen_with_padding_removed(monkeypatch):
    monkeypatch.setenv(compat.VARLEN_ATTN_ENV, "1")
    raw: dict = {}
    notes = launch.choose_attention(raw, have_flash_attn=False)
    assert launch._get_dotted(raw, launch.ATTN_KEY) == "mathagent_varlen"
    assert launch._get_dotted(raw, launch.REMOVE_PADDING_KEY) is True
    assert all("MATHAGENT_VARLEN_ATTN=1" in n for n in notes) and len(notes) == 2
    # an attention the YAML names stays, and keeps its padding
    raw = {"trainer": {"trainer_config": {"model": {"override_config": {
        "attn_implementation": "sdpa"}}}}}
    launch.choose_attention(raw, have_flash_attn=False)
    assert launch._get_dotted(raw, launch.REMOVE_PADDING_KEY) is False
    # flash-attn importable: verl's own defaults, lever or not
    raw = {}
    assert launch.choose_attention(raw, have_flash_attn=True) == [] and raw == {}


def test_the_preflight_passes_the_lever_and_refuses_its_name_without_it(tmp_path, monkeypatch):
    monkeypatch.setattr(attention, "flash_attn_available", lambda: False)
    monkeypatch.setenv(compat.VARLEN_ATTN_ENV, "1")
    plan = launch.load_plan(ARITH, work_dir=tmp_path / "on")
    assert plan.config.trainer.use_remove_padding is True
    result = launch.Preflight()
    launch.check_attention(plan.config, result, dry_run=True)
    assert result.problems == [] and result.requirements == []
    assert result.passed == ["attention: mathagent_varlen (MATHAGENT_VARLEN_ATTN=1), padding "
                             "removed (needs no flash-attn)"]
    plan = launch.load_plan(ARITH, ["trainer.ulysses_sequence_parallel_size=2"],
                            work_dir=tmp_path / "sp")
    result = launch.Preflight()
    launch.check_attention(plan.config, result, dry_run=True)
    assert result.problems == [f"`{launch.ATTN_KEY}` is 'mathagent_varlen', but it does not "
                               "split sequences over GPUs "
                               "(trainer.ulysses_sequence_parallel_size 2)"]
    monkeypatch.delenv(compat.VARLEN_ATTN_ENV)
    plan = launch.load_plan(ARITH, [f"{launch.ATTN_KEY}=mathagent_varlen"],
                            work_dir=tmp_path / "off")
    result = launch.Preflight()
    launch.check_attention(plan.config, result, dry_run=False)
    assert result.passed == []
    assert result.problems == [f"`{launch.ATTN_KEY}` is 'mathagent_varlen', but it is "
                               "registered only with MATHAGENT_VARLEN_ATTN=1"]


# --------------------------------------------------------------------------------------
# on a GPU: PyTorch's varlen_attn
# --------------------------------------------------------------------------------------


def assert_near_in_bfloat16(got, want, share=0.03):
    """Equal up to bfloat16's rounding of two kernels' sums: the largest difference at most
    ``share`` of the largest magnitude (bfloat16 keeps 8 bits of mantissa, about 0.4%)."""
    got, want = got.float(), want.float()
    worst, scale = (got - want).abs().max().item(), want.abs().max().item()
    assert worst <= share * scale, f"largest difference {worst:.3g} against magnitude {scale:.3g}"


@CUDA
@pytest.mark.parametrize("causal", [True, False])
def test_on_the_gpu_torchs_varlen_attn_runs_and_matches_sdpa_per_sequence(causal, monkeypatch):
    """bfloat16 on the GPU: the varlen kernel is the one used (seen by a spy), and its output
    and gradients match SDPA run per sequence within bfloat16's rounding."""
    used = []
    real = varlen_attention._with_torch_varlen

    def spy(*args):
        out = real(*args)
        used.append(out is not None)
        return out

    monkeypatch.setattr(varlen_attention, "_with_torch_varlen", spy)
    lengths = [37, 1, 300, 64, 0, 129]
    q, k, v = qkv(sum(lengths), heads=14, kv_heads=2, dim=64, dtype=torch.bfloat16,
                  device="cuda")
    pack = packed(lengths, "cuda")
    out = varlen_attention.packed_attention(q, k, v, pack, causal=causal)
    grads = torch.autograd.grad(out.float().square().sum(), (q, k, v))
    assert used == [True], "PyTorch's varlen_attn was not the kernel used"
    ref = varlen_attention._per_sequence(q, k, v, pack, causal, None)
    ref_grads = torch.autograd.grad(ref.float().square().sum(), (q, k, v))
    assert_near_in_bfloat16(out, ref)
    for got, want in zip(grads, ref_grads, strict=True):
        assert_near_in_bfloat16(got, want)


@CUDA
def test_on_the_gpu_a_packed_row_gives_each_sequence_its_own_logits():
    ref, ours = models(torch.bfloat16, "cuda")
    seqs = sequences("cuda")
    with torch.no_grad():
        logits = ours(**verl_inputs(seqs)).logits[0]
        alone = torch.cat([ref(input_ids=s[None]).logits[0] for s in seqs])
    assert_near_in_bfloat16(logits, alone)

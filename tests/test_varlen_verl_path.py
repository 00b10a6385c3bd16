"""The trainer's own code path for one micro-batch, with ``mathagent_varlen`` and padding
removed, against the same weights under ``sdpa`` with padding kept.

What is real, all installed code run as the trainer runs it: Trinity-RFT 0.6.0's
``to_data_proto`` (left-padded prompts, right-padded responses, ``position_ids``,
``response_mask``), ``DataProto.to_tensordict`` and Trinity's ``left_right_2_no_padding``
(jagged nested ``input_ids`` / ``position_ids``, verl's unpadding helpers), verl 0.8.0's
``prepare_micro_batches``, and ``FSDPEngineWithLMHead.forward_step`` with Trinity's
``patch_verl_engine`` applied: Trinity's ``prepare_model_inputs`` (packed row,
``cu_seq_lens_q``, ``seq_idx``), the model, verl's ``prepare_model_outputs`` (temperature,
``logprobs_from_logits``, entropy) and the loss function, whose loss is then backpropagated.
The fixes come from :mod:`mathagent.compat` in a fresh interpreter with
``MATHAGENT_VARLEN_ATTN=1``, as a Ray worker applies them: ``verl-bert-padding`` (verl's
unpadding imports flash-attn, which is not installed) and ``transformers-varlen-attention``.
The model is transformers' Qwen2ForCausalLM, small and randomly initialised, in float64.

Stand-ins, because an FSDP engine cannot be built here (its ``__init__`` needs a
``torch.distributed`` process group and a device mesh, and ``initialize()`` wraps the model in
FSDP on an accelerator): the engine is ``FSDPEngineWithLMHead.__new__`` with only the
attributes its ``forward_step`` / ``prepare_model_inputs`` / ``prepare_model_outputs`` read:
``module`` (the plain model), ``use_ulysses_sp`` (False), ``_autocast_dtype`` (float32: no
autocast, verl's setting for fp32 parameters), ``engine_config.entropy_checkpointing`` (False,
as Trinity sets it), ``compute_entropy_from_logits`` (verl's ``entropy_from_logits`` or
``entropy_from_logits_with_chunking``, chosen as ``__init__`` chooses them; uncompiled, where
``use_torch_compile`` would compile it) and ``get_data_parallel_group`` (None: one process).
The loss function slices the response log-probs and entropy out of the model output with
verl's ``no_padding_2_padding``, as Trinity's ``TrinityPolicyLoss`` does, and sums them.
"""

from __future__ import annotations

import pytest
import torch
from fresh_python import run_python, wrong_versions

WRONG_VERSIONS = wrong_versions()
pytestmark = [pytest.mark.slow,  # a fresh Python that imports verl, Trinity and transformers
              pytest.mark.skipif(WRONG_VERSIONS is not None, reason=str(WRONG_VERSIONS))]

#: (prompt length, response length) of each experience: every row holds left and right
#: padding, one prompt and one response of a single token.
LENGTHS = [(3, 9), (7, 2), (1, 12), (5, 1), (6, 7)]
TEMPERATURE = 0.7

TRAINER_STEP = """
    import logging, os
    from types import SimpleNamespace

    os.environ["MATHAGENT_VARLEN_ATTN"] = "1"
    from mathagent import compat, varlen_attention

    compat.apply_on_import()  # as mathagent's Ray worker hook does

    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from trinity.common.experience import Experience
    from trinity.trainer.verl import monkey_patch
    from trinity.trainer.verl.utils import to_data_proto
    from verl.utils import tensordict_utils as tu
    from verl.utils import torch_functional as verl_F
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead
    from verl.workers.engine.utils import prepare_micro_batches
    from verl.workers.utils.padding import no_padding_2_padding

    fixes = {r.name: r.status for r in compat.apply_all()}
    monkey_patch.patch_verl_engine()  # what Trinity's trainer does before building engines
    patched = FSDPEngineWithLMHead.prepare_model_inputs is monkey_patch.prepare_model_inputs

    shape = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=97)
    torch.manual_seed(0)
    models = {"sdpa": Qwen2ForCausalLM(Qwen2Config(**shape, attn_implementation="sdpa"))}
    models["varlen"] = Qwen2ForCausalLM(
        Qwen2Config(**shape, attn_implementation=compat.VARLEN_ATTN_NAME))
    models["varlen"].load_state_dict(models["sdpa"].state_dict())
    for model in models.values():
        model.to(torch.float64).train()

    g = torch.Generator().manual_seed(1)
    experiences = []
    for prompt, response in LENGTHS:
        action_mask = torch.ones(response, dtype=torch.bool)
        action_mask[response // 2] = response < 3  # a masked-out (environment) token
        experiences.append(Experience(tokens=torch.randint(1, 97, (prompt + response,),
                                                           generator=g),
                                      prompt_length=prompt, action_mask=action_mask))
    batch = to_data_proto(experiences, pad_token_id=0, model=models["sdpa"],
                          logger=logging.getLogger("test"))

    def engine(model, chunking):
        eng = FSDPEngineWithLMHead.__new__(FSDPEngineWithLMHead)
        eng.module = model
        eng.use_ulysses_sp = False
        eng._autocast_dtype = torch.float32
        eng.engine_config = SimpleNamespace(entropy_checkpointing=False)
        eng.compute_entropy_from_logits = (verl_F.entropy_from_logits_with_chunking if chunking
                                           else verl_F.entropy_from_logits)
        eng.get_data_parallel_group = lambda: None
        return eng

    def loss_function(model_output, data, dp_group=None):
        log_probs = no_padding_2_padding(model_output["log_probs"], data)
        entropy = no_padding_2_padding(model_output["entropy"], data)
        mask = data["response_mask"].to(log_probs.dtype)
        seen.update(log_probs=log_probs.detach(), entropy=entropy.detach())
        return (log_probs * mask).sum() + (entropy * mask).sum(), {}

    def step(name, remove_padding, chunking):
        model = models[name]
        data = monkey_patch.left_right_2_no_padding(batch.to_tensordict())
        tu.assign_non_tensor(data, use_remove_padding=remove_padding, calculate_entropy=True,
                             temperature=TEMPERATURE, use_fused_kernels=False,
                             use_dynamic_bsz=False, micro_batch_size_per_gpu=len(LENGTHS),
                             max_response_length=batch.batch["responses"].shape[1])
        micro_batches, _ = prepare_micro_batches(data)
        assert len(micro_batches) == 1, len(micro_batches)
        varlen_attention._LAST.update(source=None, packing=None)
        model.zero_grad()
        seen.clear()
        loss, _ = engine(model, chunking).forward_step(micro_batches[0], loss_function,
                                                       forward_only=False)
        loss.backward()
        packing = varlen_attention._LAST["packing"]
        return {**seen, "grads": {n: p.grad.clone() for n, p in model.named_parameters()},
                "packed_lengths": None if packing is None else packing.lengths,
                "unpadded_inside": None if packing is None else packing.indices is not None}

    def alone():
        # each sequence alone through the sdpa model: log p(next token) / entropy at
        # temperature (verl holds it in float32), at the positions that predict its response
        temperature = torch.tensor(TEMPERATURE, dtype=torch.float32).item()
        out = {"log_probs": [], "entropy": []}
        with torch.no_grad():
            for exp in experiences:
                logits = models["sdpa"](input_ids=exp.tokens[None]).logits[0] / temperature
                logp = logits.log_softmax(-1)[exp.prompt_length - 1:-1]
                out["log_probs"].append(
                    logp.gather(-1, exp.tokens[exp.prompt_length:, None])[:, 0])
                out["entropy"].append(-(logp.exp() * logp).sum(-1))
        return out

    seen = {}
    results = {"alone": alone()}
    for chunking in (False, True):
        results[("varlen", chunking)] = step("varlen", True, chunking)
        results[("sdpa", chunking)] = step("sdpa", False, chunking)
    results["batch"] = {k: v for k, v in batch.batch.items()}
    torch.save(results, OUT)
    emit({"fixes": fixes, "patched": patched})
"""


@pytest.fixture(scope="module")
def trainer_step(tmp_path_factory):
    out = tmp_path_factory.mktemp("verl_path") / "results.pt"
    info, _ = run_python(f"LENGTHS = {LENGTHS!r}\nTEMPERATURE = {TEMPERATURE!r}\n"
                         f"OUT = {str(out)!r}", TRAINER_STEP)
    return info, torch.load(out, weights_only=False)


def test_the_fixes_and_trinitys_engine_patch_are_in_place(trainer_step):
    info, _ = trainer_step
    assert info["fixes"]["verl-bert-padding"] == "already applied"  # by the import hook
    assert info["fixes"]["transformers-varlen-attention"] == "already applied"
    assert info["patched"] is True


@pytest.mark.parametrize("chunking", [False, True], ids=["entropy", "chunked-entropy"])
def test_packed_row_without_padding_gives_the_padded_sdpa_log_probs_entropy_and_grads(
        trainer_step, chunking):
    """use_remove_padding true with mathagent_varlen against false with sdpa: every response
    token's log-prob and entropy, and each parameter's gradient of their sum, agree to float64
    rounding. verl computes the chunked entropy in float32 in the packed path only (its padded
    path always uses ``entropy_from_logits``), so with chunking the entropy and the gradients
    agree to float32 rounding."""
    _, results = trainer_step
    ours, ref = results[("varlen", chunking)], results[("sdpa", chunking)]
    # the packed row went through the varlen attention, split into its sequences, unpadded
    assert ours["packed_lengths"] == [p + r for p, r in LENGTHS]
    assert ours["unpadded_inside"] is False
    assert ref["packed_lengths"] is None  # sdpa's run did not call it
    loose = dict(rtol=1e-5, atol=1e-5) if chunking else dict(rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(ours["log_probs"], ref["log_probs"], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(ours["entropy"].double(), ref["entropy"].double(), **loose)
    assert ours["grads"].keys() == ref["grads"].keys()
    for name, grad in ref["grads"].items():
        torch.testing.assert_close(ours["grads"][name], grad, **loose, msg=name)
        assert grad.abs().sum() > 0, name


def test_both_paths_give_the_log_probs_and_entropy_of_each_sequence_alone(trainer_step):
    """The trainer's response log-probs and entropy (right-padded with zeros to the longest
    response) are those of the formula on each sequence run alone at the temperature."""
    _, results = trainer_step
    alone = results["alone"]
    batch = results["batch"]
    assert batch["responses"].shape == (len(LENGTHS), max(r for _, r in LENGTHS))
    assert not batch["attention_mask"][:, 0].all() and not batch["attention_mask"][:, -1].all()
    for key in ("varlen", False), ("sdpa", False):
        for what in ("log_probs", "entropy"):
            got = results[key][what]
            for row, (_, response) in enumerate(LENGTHS):
                torch.testing.assert_close(got[row, :response], alone[what][row],
                                           rtol=1e-10, atol=1e-10, msg=f"{key} {what} {row}")
                assert (got[row, response:] == 0).all()

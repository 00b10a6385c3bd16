"""mathagent.batched_logprobs against verl 0.8.0's own ``logprobs_from_logits_v2`` (the row
loop it replaces), on real tensors: the same values and gradients, in blocks of rows."""

from __future__ import annotations

import pytest
import torch

from mathagent import batched_logprobs, compat

torch_functional = pytest.importorskip("verl.utils.torch_functional")
ORIGINAL = getattr(torch_functional.logprobs_from_logits_v2, "__wrapped__",
                   torch_functional.logprobs_from_logits_v2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(37, 50), (3, 13, 50)])  # tokens x words; batch x seq x words
def test_the_blocks_give_verls_values_and_gradients(dtype, shape):
    torch.manual_seed(0)
    logits = (torch.randn(*shape) * 4).to(dtype).requires_grad_()
    labels = torch.randint(0, shape[-1], shape[:-1])
    want = ORIGINAL(logits, labels)
    (want_grad,) = torch.autograd.grad(want.float().sum(), logits)
    got = batched_logprobs.logprobs_in_blocks(logits, labels, block_rows=8)
    (got_grad,) = torch.autograd.grad(got.float().sum(), logits)
    assert got.shape == want.shape == labels.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(got_grad, want_grad, rtol=0, atol=0)


def test_one_log_softmax_a_block_not_a_row(monkeypatch):
    calls = []
    real = torch.nn.functional.log_softmax
    monkeypatch.setattr(torch.nn.functional, "log_softmax",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    logits = torch.randn(2500, 20).to(torch.bfloat16)
    batched_logprobs.logprobs_in_blocks(logits, torch.zeros(2500, dtype=torch.long))
    assert len(calls) == 3  # 2,500 rows in blocks of 1,024
    calls.clear()
    ORIGINAL(logits, torch.zeros(2500, dtype=torch.long))
    assert len(calls) == 2500  # verl: one a row


def test_installed_in_verl_its_logprobs_from_logits_uses_the_blocks(monkeypatch):
    before = torch_functional.logprobs_from_logits_v2
    try:
        assert batched_logprobs.install(torch_functional) is True
        assert batched_logprobs.install(torch_functional) is False
        logits, labels = torch.randn(5, 7), torch.tensor([0, 1, 2, 3, 4])
        if not torch_functional.FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE:
            torch.testing.assert_close(torch_functional.logprobs_from_logits(logits, labels),
                                       ORIGINAL(logits, labels))
    finally:
        torch_functional.logprobs_from_logits_v2 = before


def test_the_compat_fix_is_a_lever_applied_only_when_asked(monkeypatch):
    fix = next(f for f in compat.FIXES if f.name == "verl-batched-logprobs")
    assert fix.module == "verl.utils.torch_functional"
    assert batched_logprobs.BATCHED_LOGPROBS_ENV in compat.LEVER_ENVS
    monkeypatch.delenv(batched_logprobs.BATCHED_LOGPROBS_ENV, raising=False)
    assert compat._gate(fix, {"verl": "0.8.0"}).status == "skipped"
    monkeypatch.setenv(batched_logprobs.BATCHED_LOGPROBS_ENV, "1")
    assert compat._gate(fix, {"verl": "0.8.0"}) is None
    assert compat.lever_problem(batched_logprobs.BATCHED_LOGPROBS_ENV, "yes") is not None

"""What one GRPO update of the 0.5B policy asks of the GPU, in plain PyTorch: the anchor that
``bench_engine_step.py`` sets every phase of a Trinity-RFT step against.

    python benchmarks/engine_anchor.py [--tokens 640] [--out anchor.json]

A randomly initialised model of Qwen2.5-0.5B-Instruct's shapes (494M parameters, bfloat16,
PyTorch's SDPA attention) on one GPU; 128 sequences (16 tasks x 8 rollouts) of ``--tokens``
tokens, no padding. For micro-batches of 4, 8 and 16 it times two forward-only log-probability
passes (old policy and reference) and one forward + backward + AdamW update, as verl's actor
does, and the peak memory; then a device-to-device copy of every weight (what a colocated
weight sync must at least do). Prints one JSON object (also written to ``--out``).

Needs only torch and transformers. No padding and no float32 master weights here, so the
engine's real work is somewhat larger: the order of magnitude is the point.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

SEQUENCES = 128  # 16 tasks x 8 rollouts
MICRO_BATCHES = (4, 8, 16)


def qwen05_shaped_model():
    """Qwen2.5-0.5B-Instruct's architecture with random weights, bfloat16, on the GPU."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                      num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                      max_position_embeddings=32768, tie_word_embeddings=True,
                      rms_norm_eps=1e-6, rope_theta=1e6)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return Qwen2ForCausalLM(cfg).to("cuda", dtype=torch.bfloat16)


def token_logprobs(model, ids):
    """log p(token t | tokens < t) of every sequence, in float32 (shape ``(batch, len - 1)``)."""
    import torch

    logits = model(input_ids=ids).logits[:, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def time_micro_batch(model, opt, ids, mb: int) -> dict[str, float]:
    """Seconds of two log-prob passes and of one update in micro-batches of ``mb``."""
    import torch

    def passes():
        with torch.no_grad():
            for i in range(0, len(ids), mb):
                token_logprobs(model, ids[i:i + mb])

    def update():
        opt.zero_grad(set_to_none=True)
        for i in range(0, len(ids), mb):
            loss = -token_logprobs(model, ids[i:i + mb]).mean() * (mb / len(ids))
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    torch.cuda.reset_peak_memory_stats()
    passes()
    update()  # warm-up: kernels chosen, optimizer state made
    torch.cuda.synchronize()
    t = time.perf_counter()
    passes()
    passes()
    torch.cuda.synchronize()
    logprob_s = time.perf_counter() - t
    t = time.perf_counter()
    update()
    torch.cuda.synchronize()
    update_s = time.perf_counter() - t
    return {"two_logprob_passes_s": round(logprob_s, 3), "update_s": round(update_s, 3),
            "total_s": round(logprob_s + update_s, 3),
            "peak_GiB": round(torch.cuda.max_memory_allocated() / 2**30, 1)}


def weight_copy_seconds(model) -> float:
    import torch

    src = [p.detach() for p in model.parameters()]
    dst = [torch.empty_like(p) for p in src]
    torch.cuda.synchronize()
    t = time.perf_counter()
    for a, b in zip(dst, src, strict=True):
        a.copy_(b)
    torch.cuda.synchronize()
    return round(time.perf_counter() - t, 4)


def measure(tokens: int) -> dict:
    import torch

    model = qwen05_shaped_model()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-6, fused=True)
    ids = torch.randint(0, model.config.vocab_size, (SEQUENCES, tokens), device="cuda")
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "params_M": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
           "sequences": SEQUENCES, "tokens": tokens}
    for mb in MICRO_BATCHES:
        try:
            out[f"mb{mb}"] = time_micro_batch(model, opt, ids, mb)
        except torch.cuda.OutOfMemoryError:
            out[f"mb{mb}"] = "out of memory"
            torch.cuda.empty_cache()
    out["weight_copy_s"] = weight_copy_seconds(model)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=640, help="tokens per sequence")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("error: engine_anchor.py measures a CUDA GPU; torch sees none here",
              file=sys.stderr)
        return 2
    result = json.dumps(measure(args.tokens))
    print(result, flush=True)
    if args.out:
        args.out.write_text(result + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

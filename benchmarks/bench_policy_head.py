"""What the 0.5B policy's head (hidden states -> log-probabilities and entropy over the
vocabulary) asks of the GPU in the trainer, with and without verl's fused kernels.

    python benchmarks/bench_policy_head.py [--sequence-tokens 640] [--micro-batches 8 16]
        [--out FILE.json] [--page FILE.md]

The head of Qwen2.5-0.5B's shapes (hidden 896, vocabulary 151,936, bfloat16 weights, random),
fed the hidden states of one micro-batch of ``--sequence-tokens``-token sequences with padding
removed (one ``(tokens, hidden)`` matrix, as verl's FSDP engine hands it). Two paths, each as
the engine-step runs take it:

- ``logits``: the logits of every token (``hidden @ weights.T``), their log-probabilities by
  :func:`mathagent.batched_logprobs.logprobs_in_blocks` (the runs' ``MATHAGENT_BATCHED_LOGPROBS``)
  and their entropy by verl's ``entropy_from_logits``;
- ``fused``: verl's ``FusedLinearForPPO`` (``use_fused_kernels`` with the ``torch`` backend):
  512 tokens at a time, recomputed in the backward.

For each micro-batch size it times, and takes the peak GPU memory beyond the inputs of, a
log-probability pass (no gradient, as the old-policy and reference passes) and an update's
forward and backward (gradients of the hidden states and the weights). It also checks that the
two paths agree (log-probabilities, entropy and gradients). Prints one JSON object (also
written to ``--out``) and, with ``--page``, a Markdown page. Runs on the CPU too (no memory
figures there): ``--device cpu`` with small ``--vocabulary`` and ``--hidden``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled

PATHS = ("logits", "fused")
CHUNK = 512  # verl's FusedLinearForPPO default
REPEATS = 3  # timed calls of each path and size, after one warm-up
QWEN_HIDDEN, QWEN_VOCABULARY = 896, 151936  # Qwen2.5-0.5B's head


def head(path: str, hidden, weights, labels):
    """(log-probabilities, entropy) of ``labels`` under ``hidden @ weights.T``, by ``path``."""
    if path == "fused":
        from verl.utils.experimental.torch_functional import FusedLinearForPPO

        return FusedLinearForPPO(chunk_size=CHUNK)(hidden, weights, labels)
    from verl.utils.torch_functional import entropy_from_logits

    from mathagent.batched_logprobs import logprobs_in_blocks

    logits = hidden @ weights.t()
    return logprobs_in_blocks(logits, labels), entropy_from_logits(logits)


def measure(path: str, tokens: int, grad: bool, args, repeats: int = REPEATS) -> dict:
    """Median seconds and the peak memory beyond the inputs of ``path`` on ``tokens`` tokens."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(0)
    dtype = torch.bfloat16
    weights = (torch.randn(args.vocabulary, args.hidden, generator=gen) * 0.02).to(
        args.device, dtype).requires_grad_(grad)
    hidden = torch.randn(tokens, args.hidden, generator=gen).to(args.device, dtype)
    hidden.requires_grad_(grad)
    labels = torch.randint(0, args.vocabulary, (tokens,), generator=gen).to(args.device)
    cuda = args.device.startswith("cuda")
    seconds, peak = [], None
    for _ in range(repeats + 1):  # the first is a warm-up
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        start = time.perf_counter()
        with torch.set_grad_enabled(grad):
            logp, ent = head(path, hidden, weights, labels)
            if grad:
                (logp.float().sum() + ent.float().sum()).backward()
        if cuda:
            torch.cuda.synchronize()
            peak = (torch.cuda.max_memory_allocated() - base) / 2**30
        seconds.append(time.perf_counter() - start)
        if grad:
            grads = (hidden.grad.float().clone(), weights.grad.float().clone())
            hidden.grad = weights.grad = None
    out = {"seconds": sorted(seconds[1:])[len(seconds[1:]) // 2],
           "peak_beyond_inputs_gib": peak, "logprobs": logp.detach().float().cpu(),
           "entropy": ent.detach().float().cpu()}
    if grad:
        out["grads"] = tuple(g.cpu() for g in grads)
    return out


def run(args) -> dict:
    results = {"device": args.device, "vocabulary": args.vocabulary, "hidden": args.hidden,
               "sequence_tokens": args.sequence_tokens, "chunk": CHUNK, "rows": []}
    if args.device.startswith("cuda"):
        import torch

        results["gpu"] = torch.cuda.get_device_name()
    for mb in args.micro_batches:
        tokens = mb * args.sequence_tokens
        for grad in (False, True):
            done = {path: measure(path, tokens, grad, args) for path in PATHS}
            a, b = done["logits"], done["fused"]
            agree = {"logprobs": float((a["logprobs"] - b["logprobs"]).abs().max()),
                     "entropy": float((a["entropy"] - b["entropy"]).abs().max())}
            if grad:
                agree["grad_hidden"] = float((a["grads"][0] - b["grads"][0]).abs().max())
                agree["grad_weights"] = float((a["grads"][1] - b["grads"][1]).abs().max())
            results["rows"].append({
                "micro_batch": mb, "tokens": tokens,
                "pass": "update (forward and backward)" if grad else "log-prob pass (no gradient)",
                **{f"{path}_seconds": done[path]["seconds"] for path in PATHS},
                **{f"{path}_peak_gib": done[path]["peak_beyond_inputs_gib"] for path in PATHS},
                "max_abs_difference": agree})
            print(f"micro-batch {mb} ({tokens} tokens), {results['rows'][-1]['pass']}: " + ", ".join(
                f"{p} {done[p]['seconds']:.3f} s" for p in PATHS), file=sys.stderr, flush=True)
    return results


def page(results: dict) -> str:
    """The Markdown page of ``results``."""
    def gib(value):
        return "" if value is None else f"{value:.2f}"

    lines = [
        "# The policy's head, with and without verl's fused kernels",
        "",
        f"Written by `python benchmarks/bench_policy_head.py` on "
        f"{results.get('gpu', results['device'])}: a policy head of hidden size "
        f"{results['hidden']} and vocabulary {results['vocabulary']:,} (Qwen2.5-0.5B's: "
        f"{QWEN_HIDDEN} and {QWEN_VOCABULARY:,}), bfloat16, random, on one micro-batch of "
        f"{results['sequence_tokens']}-token sequences, padding removed. `logits`: every "
        "token's logits, log-probabilities in blocks (`MATHAGENT_BATCHED_LOGPROBS`) and verl's "
        f"`entropy_from_logits`; `fused`: verl's `FusedLinearForPPO`, {results['chunk']} tokens "
        f"at a time. Seconds are medians of {REPEATS} calls after a warm-up; peaks are beyond "
        "the inputs (hidden states, weights, labels). The `logits` path's log-probabilities come out in "
        "bfloat16, the fused path's in float32: their difference is mostly that rounding.",
        "",
        "| micro-batch | tokens | pass | logits, s | fused, s | logits, peak GiB | "
        "fused, peak GiB | largest difference (log-prob, entropy, gradients) |",
        "| ---: | ---: | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in results["rows"]:
        diff = ", ".join(f"{v:.2g}" for v in row["max_abs_difference"].values())
        lines.append(f"| {row['micro_batch']} | {row['tokens']:,} | {row['pass']} | "
                     f"{row['logits_seconds']:.3f} | {row['fused_seconds']:.3f} | "
                     f"{gib(row['logits_peak_gib'])} | {gib(row['fused_peak_gib'])} | {diff} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sequence-tokens", type=int, default=640,
                        help="tokens of each sequence (default 640: prompt and longest reply)")
    parser.add_argument("--micro-batches", type=int, nargs="+", default=[8, 16],
                        help="sequences a micro-batch (default 8 16: the update's and the "
                             "log-prob passes' of the 60-step spec)")
    parser.add_argument("--vocabulary", type=int, default=QWEN_VOCABULARY)
    parser.add_argument("--hidden", type=int, default=QWEN_HIDDEN)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    parser.add_argument("--page", type=Path, help="write the Markdown page here")
    args = parser.parse_args(argv)
    for name in ("sequence_tokens", "micro_batches", "vocabulary", "hidden"):
        if min(getattr(args, name) if name == "micro_batches" else [getattr(args, name)]) < 1:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    try:
        import torch
    except ImportError:
        sys.exit("bench_policy_head.py: needs torch")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("bench_policy_head.py: no CUDA GPU here (--device cpu runs it on the CPU)")
    results = run(args)
    text = json.dumps(results, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    if args.page:
        args.page.write_text(page(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Time one tutorial-scale GRPO step, phase by phase, and two design choices side by side.

    python benchmarks/bench_grpo_step.py --device cuda            # default settings
    python benchmarks/bench_grpo_step.py --device cpu --batch-size 2 --n 4 --max-new-tokens 16

Reports, as JSON (stdout and ``--out``):

* ``phases``: median seconds of the select / generate / judge / update parts of a
  ``GRPOTrainer.step`` over ``--steps`` steps after one warm-up step, with the GPU memory
  peak, for the ``random`` selector on the bundled taskset;
* ``generation``: the trainer's KV-cached sampling loop against ``model.generate`` on the
  same prompts and token budget (tokens per second each, and their ratio);
* ``update``: the same policy-gradient update over every sequence of a batch with
  micro-batches of ``--micro`` and of twice that, after one warm-up update (seconds
  each, and the ratio).

Ratios are measured in one process, one after the other, on the same inputs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from mathagent import grpo, paths
from mathagent.policy import Policy, make_generator


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--model", default=None, help="GGUF file or checkpoint folder")
    ap.add_argument("--taskset", default=str(paths.ARITHMETIC_DIR))
    ap.add_argument("--batch-size", type=int, default=None, help="tasks per step (config's)")
    ap.add_argument("--n", type=int, default=None, help="completions per task (config's)")
    ap.add_argument("--max-new-tokens", type=int, default=None)
    ap.add_argument("--micro", type=int, default=None, help="micro-batch size (config's)")
    ap.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON here too")
    args = ap.parse_args()

    import torch

    over = {"selector.name": "random", "trainer.device": args.device,
            "taskset.path": args.taskset, "eval.interval": 0, "trainer.save_interval": 10**6,
            "trainer.samples_per_step": 0}
    for key, value in (("rollout.batch_size", args.batch_size),
                       ("rollout.repeat_times", args.n),
                       ("rollout.max_new_tokens", args.max_new_tokens),
                       ("algorithm.micro_batch_size", args.micro)):
        if value is not None:
            over[key] = value
    cfg = grpo.load_config(grpo.DEFAULT_CONFIG, over)
    t0 = time.perf_counter()
    policy = Policy.load(args.model, device=args.device)
    load_s = time.perf_counter() - t0
    report: dict = {"device": torch.cuda.get_device_name(0) if args.device.startswith("cuda")
                    else f"cpu ({torch.get_num_threads()} threads)",
                    "model_load_s": load_s,
                    "settings": {"batch_size": cfg.rollout.batch_size,
                                 "repeat_times": cfg.rollout.repeat_times,
                                 "max_new_tokens": cfg.rollout.max_new_tokens,
                                 "micro_batch_size": cfg.algorithm.micro_batch_size}}

    with tempfile.TemporaryDirectory() as tmp:
        trainer = grpo.GRPOTrainer(cfg, tmp, policy=policy)
        trainer.step()  # warm-up: kernels, allocator, first compilation of shapes
        rows = [trainer.step().row for _ in range(args.steps)]
        trainer.logger.close()
    keys = ["time_select_s", "time_generate_s", "time_score_s", "time_update_s", "time_step_s",
            "trained_sequences", "response_length", "gpu_mem_peak_gb"]
    report["phases"] = {k: statistics.median(r[k] for r in rows) for k in keys}

    # generation: the trainer's loop vs model.generate on the same prompts
    B, n = cfg.rollout.batch_size, cfg.rollout.repeat_times
    prompts = [policy.encode(q) for q in trainer.train_set["question"][:B] for _ in range(n)]
    _sync(args.device)
    t0 = time.perf_counter()
    comps = policy.sample(prompts, max_new_tokens=cfg.rollout.max_new_tokens, temperature=1.0,
                          generator=make_generator(args.device, 0))
    _sync(args.device)
    loop_s = time.perf_counter() - t0
    loop_tokens = sum(len(c.ids) for c in comps)
    ids, mask = policy._left_pad(prompts)
    _sync(args.device)
    t0 = time.perf_counter()
    with torch.inference_mode(), policy._autocast():
        out = policy.model.generate(input_ids=ids, attention_mask=mask, do_sample=True,
                                    temperature=1.0, top_k=0, top_p=1.0,
                                    max_new_tokens=cfg.rollout.max_new_tokens,
                                    eos_token_id=policy.stop_ids, pad_token_id=policy.pad_id)
    _sync(args.device)
    gen_s = time.perf_counter() - t0
    new = out[:, ids.shape[1]:]
    gen_tokens = int((new != policy.pad_id).sum())
    report["generation"] = {
        "sequences": len(prompts), "loop_s": loop_s, "loop_tokens_per_s": loop_tokens / loop_s,
        "generate_s": gen_s, "generate_tokens_per_s": gen_tokens / gen_s,
        "speedup_tokens_per_s": (loop_tokens / loop_s) / (gen_tokens / gen_s)}

    # update: micro-batch size m vs 2m on the same batch (every sequence trained)
    adv = np.tile([1.0, -1.0], len(comps) // 2 + 1)[: len(comps)]
    sizes = (cfg.algorithm.micro_batch_size, 2 * cfg.algorithm.micro_batch_size)
    trainer.cfg.algorithm.micro_batch_size = sizes[1]
    trainer._update(prompts, comps, adv)  # warm-up at the larger size (allocator, kernels)
    times = {}
    for micro in sizes:
        trainer.cfg.algorithm.micro_batch_size = micro
        _sync(args.device)
        t0 = time.perf_counter()
        trainer._update(prompts, comps, adv)
        _sync(args.device)
        times[micro] = time.perf_counter() - t0
    small, large = times
    report["update"] = {"sequences": len(comps), f"micro_{small}_s": times[small],
                        f"micro_{large}_s": times[large], "ratio": times[small] / times[large]}
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Measure the bundled taskset's two pass-rate features on a GPU (run by scripts/gpu/run_features.sh).

1. *Pilot*: answer the first ``--pilot-tasks`` training tasks ``n`` times under each
   candidate decoding setting (temperature x number of worked examples in the prompt) with
   the trainer's own chat formatting (``mathagent.policy.HFBackend``) and tabulate mean pass
   rate, the share of tasks strictly between 0 and 1, and the time taken.
2. *Choice*: the weak reference is the policy exactly as the GRPO trainer samples it
   (temperature 1.0, no worked examples); the strong reference is the candidate with the
   highest pilot mean among those whose mean beats the weak one by ``--min-gap`` and which
   keep at least ``--min-between`` of tasks strictly between 0 and 1.
3. *Measurement*: both columns on the train and test splits through the shared driver
   ``mathagent.rollouts.measure_pass_rates`` (side tables, provenance records), then a
   ``feature_measurement`` record (pilot table, choice rule, timings, GPU) in
   ``provenance.json``.
4. *Check*: two GRPO steps with ``difficulty_based`` on the measured taskset, so the
   training runs that follow find every piece working.

Writes to ``--out``: ``train.parquet``, ``test.parquet``, ``provenance.json``,
``pilot.json``, ``side_tables.tar.gz`` (rollout records without reply texts).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from mathagent import rollouts, tasks
from mathagent.policy import HFBackend, Policy

CANDIDATES = [  # (name, temperature, worked examples); the first is the weak reference
    ("t1.0_zero_shot", 1.0, 0),
    ("t0.7_zero_shot", 0.7, 0),
    ("t0.4_zero_shot", 0.4, 0),
    ("t1.0_three_shot", 1.0, 3),
    ("t0.7_three_shot", 0.7, 3),
    ("t0.4_three_shot", 0.4, 3),
]


def pilot(policy, frame: pd.DataFrame, n: int, max_new_tokens: int, seed: int) -> pd.DataFrame:
    task_dicts = frame.to_dict("records")
    rows = []
    for name, temp, shots in CANDIDATES:
        backend = HFBackend(policy=policy, temperature=temp, few_shot=shots,
                                 max_new_tokens=max_new_tokens, chunk_size=4096)
        start = time.perf_counter()
        out = backend.run_batch(task_dicts, n=n, seed=seed)
        secs = time.perf_counter() - start
        acc = np.array([[r["accuracy"] for r in recs] for recs in out])
        p = acc.mean(axis=1)
        tokens = np.array([[r["tokens"] for r in recs] for recs in out])
        rows.append({"setting": name, "temperature": temp, "few_shot": shots,
                     "tasks": len(task_dicts), "n": n, "mean_pass_rate": float(p.mean()),
                     "share_between": float(((p > 0) & (p < 1)).mean()),
                     "share_zero": float((p == 0).mean()), "share_one": float((p == 1).mean()),
                     "mean_tokens": float(tokens.mean()),
                     "share_max_tokens": float((tokens >= max_new_tokens).mean()),
                     "seconds": secs, "sequences_per_s": acc.size / secs})
        print(json.dumps(rows[-1]), flush=True)
    return pd.DataFrame(rows)


def choose(table: pd.DataFrame, min_gap: float, min_between: float) -> tuple[dict, dict, str]:
    weak = table.iloc[0].to_dict()
    ok = table.iloc[1:]
    ok = ok[(ok["mean_pass_rate"] >= weak["mean_pass_rate"] + min_gap)
            & (ok["share_between"] >= min_between)]
    if ok.empty:
        best = table.iloc[1:].sort_values("mean_pass_rate").iloc[-1].to_dict()
        rule = (f"no candidate met mean >= weak + {min_gap} and share_between >= "
                f"{min_between}; took the highest pilot mean")
    else:
        best = ok.sort_values("mean_pass_rate").iloc[-1].to_dict()
        rule = (f"highest pilot mean among candidates with mean >= weak + {min_gap} and "
                f"share_between >= {min_between}")
    return weak, best, rule


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--taskset", type=Path, required=True, help="working copy of data/arithmetic")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", default=None, help="GGUF file or checkpoint folder")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--pilot-tasks", type=int, default=256)
    ap.add_argument("--min-gap", type=float, default=0.05)
    ap.add_argument("--min-between", type=float, default=0.25)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chunk-tasks", type=int, default=256)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()

    import torch

    args.out.mkdir(parents=True, exist_ok=True)
    timings = {}
    t0 = time.perf_counter()
    policy = Policy.load(args.model, device=args.device)
    timings["model_load_s"] = time.perf_counter() - t0
    print(f"model loaded in {timings['model_load_s']:.1f} s", flush=True)

    train = tasks.read_split(args.taskset, "train")
    t0 = time.perf_counter()
    table = pilot(policy, train.iloc[: args.pilot_tasks], args.n, args.max_new_tokens, args.seed)
    timings["pilot_s"] = time.perf_counter() - t0
    table.to_json(args.out / "pilot.json", orient="records", indent=1)
    weak, strong, rule = choose(table, args.min_gap, args.min_between)
    print(f"weak: {weak['setting']}  strong: {strong['setting']}  ({rule})", flush=True)

    columns = [(tasks.WEAK_KEY, weak), (tasks.STRONG_KEY, strong)]
    results = {}
    for split in ("train", "test"):
        for column, setting in columns:
            backend = HFBackend(policy=policy, temperature=setting["temperature"],
                                     few_shot=int(setting["few_shot"]),
                                     max_new_tokens=args.max_new_tokens,
                                     chunk_size=args.chunk_tasks * args.n)
            t0 = time.perf_counter()
            res = rollouts.measure_pass_rates(
                args.taskset, column, backend, split=split, n=args.n, seed=args.seed,
                chunk_size=args.chunk_tasks, rollouts_dir=args.out / "side" / split / column,
                keep_responses=False, overwrite=True, restart=True, progress=False)
            secs = time.perf_counter() - t0
            timings[f"{split}/{column}_s"] = secs
            v = res.values
            results[f"{split}/{column}"] = {
                "complete": res.complete, "tasks": res.tasks, "seconds": secs,
                "mean": float(np.mean(v)), "share_between": float(((v > 0) & (v < 1)).mean()),
                "share_zero": float((v == 0).mean()), "share_one": float((v == 1).mean())}
            print(split, column, json.dumps(results[f"{split}/{column}"]), flush=True)

    prov_file = args.taskset / "provenance.json"
    prov = json.loads(prov_file.read_text())
    prov["feature_columns"] = {
        "weak": tasks.WEAK_KEY, "strong": tasks.STRONG_KEY,
        "status": "measured (scripts/gpu/features.py)"}
    prov["feature_measurement"] = {
        "what": "pass rate = mean lenient-judge accuracy of n sampled replies per task, from "
                "the bundled SmolLM2-135M-Instruct (GGUF Q4_1, dequantised) with transformers "
                "batched sampling and the chat formatting of mathagent.policy (the policy the "
                "tutorial-scale GRPO trainer starts from)",
        "weak": {k: weak[k] for k in ("setting", "temperature", "few_shot")},
        "strong": {k: strong[k] for k in ("setting", "temperature", "few_shot")},
        "choice_rule": f"weak = the trainer's own sampling (first candidate); strong = {rule}",
        "n": args.n, "max_new_tokens": args.max_new_tokens, "seed": args.seed,
        "pilot": {"tasks": f"first {args.pilot_tasks} rows of train",
                  "table": table.to_dict("records")},
        "results": results,
        "timings_s": timings,
        "device": torch.cuda.get_device_name(0) if args.device == "cuda" else args.device,
        "torch": torch.__version__,
        "judge": "mathagent.judge.score(lenient=True): last \\boxed{}, else '#### x', else the "
                 "last number of the reply",
    }
    prov_file.write_text(json.dumps(prov, indent=2, default=str) + "\n")
    for name in ("train.parquet", "test.parquet", "provenance.json"):
        shutil.copy(args.taskset / name, args.out / name)
    with tarfile.open(args.out / "side_tables.tar.gz", "w:gz") as tar:
        tar.add(args.out / "side", arcname="side")
    shutil.rmtree(args.out / "side")
    print(json.dumps({"timings_s": timings}, indent=1), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

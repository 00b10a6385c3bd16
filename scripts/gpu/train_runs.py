"""Run several ``train-local`` runs side by side on one GPU and gather their tables.

Each (selector, seed) run is its own process (``python -m mathagent train-local``), all on
the same GPU: the 135M model leaves the GPU mostly idle between kernel launches, so
parallel processes share it well. Every run gets the same step budget and wall-clock
limit; afterwards the tables are cut to the last step that *every* run reached, so all
selectors are compared on the same number of steps.

Writes to ``--out``:

* ``grpo_h200.csv``: the tidy table, one row per (selector, seed, step);
* ``params.json``: settings, steps reached per run, GPU, wall time;
* ``timing.csv``: median step-time breakdown per selector (generation, judge, update);
* ``runs.tar.gz``: every run's config, params, Trinity-named CSV, TensorBoard events,
  sample replies and log (checkpoints stay behind).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pandas as pd


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--taskset", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True, help="run folders (not returned)")
    ap.add_argument("--config", default="configs/train_local.yaml")
    ap.add_argument("--selectors", nargs="+",
                    default=["random", "difficulty_based", "offline_easy2hard"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--time-limit", type=float, default=7.5, help="minutes per run")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()

    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    procs = []
    n_runs = len(args.selectors) * len(args.seeds)
    start = time.perf_counter()
    for sel in args.selectors:
        for seed in args.seeds:
            run = args.work / f"{sel}-s{seed}"
            log = open(args.work / f"{sel}-s{seed}.log", "w")  # noqa: SIM115 - closed below
            cmd = [sys.executable, "-m", "mathagent", "train-local", "--config", args.config,
                   "--selector", sel, "--seed", str(seed), "--steps", str(args.steps),
                   "--device", args.device, "--taskset", args.taskset, "--model", args.model,
                   "--out", str(run), "--time-limit", str(args.time_limit), "--no-progress",
                   "--gpu-memory-fraction", f"{0.9 / n_runs:.3f}"]
            procs.append((sel, seed, run, log, subprocess.Popen(cmd, stdout=log,
                                                                  stderr=subprocess.STDOUT,
                                                                  env=env)))
    codes = {}
    for sel, seed, _run, log, proc in procs:
        codes[f"{sel}-s{seed}"] = proc.wait()
        log.close()
    wall = time.perf_counter() - start
    print("exit codes:", codes, f"wall {wall:.0f} s", flush=True)

    tables, reached = [], {}
    for sel, seed, run, _log, _proc in procs:
        file = run / "metrics.csv"
        if not file.exists():
            print(f"{sel} seed {seed}: no metrics.csv", flush=True)
            continue
        t = pd.read_csv(file)
        tables.append(t)
        reached[f"{sel}-s{seed}"] = int(t["step"].max())
    table = pd.concat(tables, ignore_index=True)
    common = min(reached.values())
    table = table[table["step"] <= common].sort_values(["selector", "seed", "step"])
    table.to_csv(args.out / "grpo_h200.csv", index=False)

    steps = table[table["step"] > 0]
    timing = steps.groupby("selector")[["time_generate_s", "time_score_s", "time_update_s",
                                        "time_eval_s", "time_step_s", "trained_sequences",
                                        "gpu_mem_peak_gb"]].median()
    timing.to_csv(args.out / "timing.csv")
    print(timing.to_string(), flush=True)

    import torch

    first = json.loads((procs[0][2] / "params.json").read_text())
    params = {
        "kind": "train-local runs on one GPU, side by side",
        "script": "scripts/gpu/train_runs.py",
        "selectors": args.selectors, "seeds": args.seeds,
        "steps_asked": args.steps, "time_limit_min": args.time_limit,
        "steps_reached": reached, "steps_in_table": common,
        "parallel_runs": len(procs), "wall_s": wall, "exit_codes": codes,
        "device": torch.cuda.get_device_name(0) if args.device == "cuda" else args.device,
        "torch": torch.__version__,
        "config": first["config"], "eval_taskset": first["eval_taskset"],
        "judge": first["judge"], "trinity_tags": first["trinity_tags"],
    }
    (args.out / "params.json").write_text(json.dumps(params, indent=2) + "\n")
    with tarfile.open(args.out / "runs.tar.gz", "w:gz") as tar:
        for sel, seed, run, _log, _proc in procs:
            name = f"{sel}-s{seed}"
            tar.add(args.work / f"{name}.log", arcname=f"{name}/train.log")
            for f in ("config.yaml", "params.json", "metrics.csv", "trinity_metrics.csv",
                      "samples.jsonl"):
                if (run / f).exists():
                    tar.add(run / f, arcname=f"{name}/{f}")
            if (run / "tensorboard").exists():
                tar.add(run / "tensorboard", arcname=f"{name}/tensorboard")
    return 0 if all(c == 0 for c in codes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

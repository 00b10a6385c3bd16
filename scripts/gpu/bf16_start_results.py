"""Build results/trinity_h200_local_bf16/: train-local started from the bfloat16 export.

The command that ran on the H200 (repository root, the bundle installed, ``B`` its folder):

    python -m mathagent export-model /root/model --dtype bfloat16 --model $B/*.gguf
    # configs/train_local_trinity.yaml without evaluations (eval.interval 1000, on_start false)
    python -m mathagent train-local --config T.yaml --selector SEL --seed 0 --steps 20 \\
        --device cuda --model /root/model --time-limit 3.8 --gpu-memory-fraction 0.45

for SEL in difficulty_based and random side by side; what came back (``SEL.metrics.csv``,
``SEL.params.json``, ``SEL.log``, ``grid.txt``) is COLLECTED. This script lays the runs out
as run folders in OUT and compares them, step by step, with Trinity-RFT's seed-0 runs
(``--engine``, which started from the same bfloat16 export) and the local trainer's seed-0
runs from the GGUF's float32 weights (``--local``):

    python scripts/gpu/bf16_start_results.py COLLECTED results/trinity_h200_local_bf16
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import pandas as pd

from mathagent import plots, results

NAMES = {"random": "random", "difficulty_based": "difficulty"}
COLUMNS = ["kl_loss", "response_length", "truncated_ratio", "rollout_accuracy"]


def lay_out(collected: Path, out: Path) -> None:
    """Copy each run's files from COLLECTED into OUT/<name>_seed0/, once all are there."""
    files = {(name, dest): collected / src for sel, name in NAMES.items()
             for src, dest in ((f"{sel}.metrics.csv", "metrics.csv"),
                               (f"{sel}.params.json", "params.json"), (f"{sel}.log", "train.log"))}
    files[(".", "export_grid.txt")] = collected / "grid.txt"
    for src in files.values():
        if not src.is_file():
            raise SystemExit(f"error: {src}: missing")
    for (name, dest), src in files.items():
        run = out / (name if name == "." else f"{name}_seed0")
        run.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, run / dest)


def seed0(folder: Path, steps: int | None = None) -> pd.DataFrame:
    """The seed-0 rows of the runs under ``folder``, up to ``steps`` when given."""
    table = results.load_runs(results.find_runs(folder), progress=False)
    table = table[table["seed"] == 0]
    return table if steps is None else table[table["step"] <= steps]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("collected", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--engine", type=Path, default=Path("results/trinity_h200_bf16"))
    ap.add_argument("--local", type=Path, default=Path("results/trinity_h200_local"))
    ap.add_argument("--force", action="store_true", help="replace an existing OUT")
    args = ap.parse_args(argv)
    if args.out.exists() and not args.force:
        print(f"error: {args.out} exists; pass --force to replace it", file=sys.stderr)
        return 2
    lay_out(args.collected, args.out)
    bf16 = seed0(args.out)
    steps = int(bf16["step"].max())
    tables = {"Trinity-RFT": seed0(args.engine, steps),
              "train-local, float32 start": seed0(args.local, steps),
              "train-local, bfloat16 start": bf16}
    rows = []
    for src, table in tables.items():
        keep = table[table["step"] > 0][["selector", "step", *COLUMNS]]
        rows.append(keep.assign(source=src))
    by_step = pd.concat(rows).pivot_table(index=["selector", "step"], columns="source",
                                          values=COLUMNS)
    by_step.columns = [f"{col} ({src})" for col, src in by_step.columns]
    by_step.round(5).to_csv(args.out / "by_step.csv")
    fig = results.draw_side_by_side(
        tables, title=f"bfloat16 start vs float32 start, seed 0, steps 1-{steps}",
        panels=[("kl_loss", "KL to the initial model", 1),
                ("response_length", "response length (tokens)", 3),
                ("rollout_accuracy", "rollout accuracy", 3)])
    plots.save_figure(fig, "bf16_start", args.out)
    print(results.side_by_side_summary(tables, window=5).to_string())
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

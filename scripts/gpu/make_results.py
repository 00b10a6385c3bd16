"""Turn what the GPU jobs returned into the committed ``results/grpo_h200/`` folder.

    python scripts/gpu/make_results.py --train DIR --features DIR [--bench FILE]

``--train`` is the folder ``run_training.sh`` filled (``grpo_h200.csv``, ``params.json``,
``timing.csv``, ``runs.tar.gz``); ``--features`` the one ``run_features.sh`` filled
(``pilot.json``, ``features.log``, ``side_tables.tar.gz``); ``--bench`` the JSON of
``benchmarks/bench_grpo_step.py``. Tables are copied unchanged; the summary comes from
``mathagent.metrics`` and the figures from ``mathagent.plots``, both reading the tidy table.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import sys
import tarfile
from pathlib import Path

import pandas as pd

from mathagent import metrics, paths, plots

OUT = paths.RESULTS_DIR / "grpo_h200"


def side_tables(archive: Path) -> pd.DataFrame:
    """All rollout records of the feature measurement, one row per (split, column, task
    row, rollout), from the side tables' parquet parts (reply texts were not kept)."""
    frames = []
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts  # side/<split>/<column>/part-*.parquet
            if member.isfile() and member.name.endswith(".parquet") and len(parts) == 4:
                frame = pd.read_parquet(io.BytesIO(tar.extractfile(member).read()))
                frames.append(frame.assign(split=parts[1], column=parts[2]))
    table = pd.concat(frames, ignore_index=True).rename(columns={"task_id": "row"})
    keep = ["split", "column", "row", "rollout", "accuracy", "extracted", "tokens", "error"]
    return table[keep].sort_values(["split", "column", "row", "rollout"]).reset_index(drop=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", type=Path, required=True)
    ap.add_argument("--features", type=Path, required=True)
    ap.add_argument("--bench", type=Path, default=None)
    args = ap.parse_args()

    OUT.mkdir(parents=True, exist_ok=True)
    for name in ("grpo_h200.csv", "params.json", "timing.csv"):
        shutil.copyfile(args.train / name, OUT / name)
    if args.bench:
        shutil.copyfile(args.bench, OUT / "bench_grpo_step_h200.json")
    table = pd.read_csv(OUT / "grpo_h200.csv")
    metrics.validate_table(table, source=str(OUT / "grpo_h200.csv"))
    params = json.loads((OUT / "params.json").read_text())
    metrics.write_metrics(table, OUT, params={k: params[k] for k in (
        "selectors", "seeds", "steps_in_table", "device")})
    order = ["random", "difficulty_based", "offline_easy2hard"]
    fig = plots.plot_training_curves(table, selectors=order, smooth=3,
                                     eval_label="held-out accuracy (arithmetic test)")
    plots.save_figure(fig, "grpo_h200_curves", OUT)
    fig = plots.plot_etr(table, selectors=order, smooth=3)
    plots.save_figure(fig, "grpo_h200_etr", OUT)

    feat = OUT / "features"
    feat.mkdir(exist_ok=True)
    shutil.copyfile(args.features / "pilot.json", feat / "pilot.json")
    shutil.copyfile(args.features / "features.log", feat / "features.log")
    rollouts = side_tables(args.features / "side_tables.tar.gz")
    rollouts.to_parquet(feat / "pass_rate_rollouts.parquet", index=False, compression="zstd")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

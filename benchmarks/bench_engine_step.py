"""The Trinity-RFT engine step of the Qwen policy, phase by phase, against the plain-PyTorch
anchor, for runs with and without the speed levers.

    python benchmarks/bench_engine_step.py RUN_FOLDER... --anchor ANCHOR.json
        [--labels NAME...] [--out benchmarks/bench_engine_step.md]

Each RUN_FOLDER is a Trinity-RFT run laid out as the results folders are (event files under
``monitor/``, ``timings.json`` with the start-up milestones, peak GPU memory per role and the
seconds of every whole step read from the run's log). ANCHOR.json is what
``benchmarks/engine_anchor.py`` printed on the same GPU in the same sitting. The runs compared
should be the same (arm, seed) (same tasks in the same order) on the same machine, one after the
other, alone on the GPU.

The table: for each phase the median over explore steps 2 and later (step 1 carries one-off
costs: CUDA graphs of new shapes, allocator growth), in seconds, and its ratio to the anchor's
matching figure: training phases to the anchor's update of 128 sequences in micro-batches of 8,
the reference log-prob pass to half its two passes, the weight sync to its device-to-device
copy of every weight. Start-up in minutes from ``train``; peak GPU memory per role in GiB.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd

from mathagent import results

#: Trinity-RFT's tags of the phases of a step: (row name, tag, which anchor figure it compares to)
PHASES: tuple[tuple[str, str, str | None], ...] = (
    ("rollout (16 x 8 agent runs)", "explore/time/sync_interval", None),
    ("trainer: read experiences", "time/read_experience", None),
    ("trainer: reference log-probs", "time/ref", "logprob_pass_s"),
    ("trainer: actor update", "time/update_actor", "update_s"),
    ("trainer: whole training step", "time/train_step", "total_s"),
    ("weight sync", "time/sync_weight", "weight_copy_s"),
    ("held-out evaluation (660 x 4)", "time/eval", None),
)
MEMORY_TAGS = (("trainer allocator, GiB (max reserved)", "actor/perf/max_memory_reserved_gb"),
               ("trainer tensors, GiB (max allocated)", "actor/perf/max_memory_allocated_gb"))
STARTUP = ("all workflow runners ready", "step 1 starts")
ANCHOR_MB = "mb8"


def anchor_figures(anchor: dict) -> dict[str, float]:
    """The anchor's figures a phase is set against (seconds)."""
    mb = anchor[ANCHOR_MB]
    return {"logprob_pass_s": mb["two_logprob_passes_s"] / 2, "update_s": mb["update_s"],
            "total_s": mb["total_s"], "weight_copy_s": anchor["weight_copy_s"]}


def run_column(folder: Path) -> pd.Series:
    """Medians over steps 2+ of one run's phases, its whole step, start-up and memory."""
    scalars = results.read_scalars(folder)
    out: dict[str, float] = {}
    for name, tag, _ in PHASES:
        rows = scalars[scalars["tag"] == tag]
        later = rows[rows["step"] >= 2]["value"] if tag != "time/eval" else rows["value"]
        out[name] = float(later.median()) if len(later) else math.nan
    timings = json.loads((folder / "timings.json").read_text())
    whole = pd.Series(timings["whole_step_s"])
    whole.index = [int(str(k).split()[-1]) for k in whole.index]
    out["whole step (log: one explore start to the next)"] = float(whole[whole.index >= 2].median())
    out["steps measured (2+)"] = float((whole.index >= 2).sum())
    for name in STARTUP:
        out[f"start-up: {name}, min"] = float(timings["startup_min"].get(name, math.nan))
    for role, gib in timings["gpu_memory_gib"].items():
        out[f"peak GPU memory: {role}, GiB"] = float(gib)
    for name, tag in MEMORY_TAGS:
        rows = scalars[scalars["tag"] == tag]["value"]
        out[name] = float(rows.max()) if len(rows) else math.nan
    return pd.Series(out)


def ratios(column: pd.Series, anchor: dict) -> pd.Series:
    figures = anchor_figures(anchor)
    out = {}
    for name, _, key in PHASES:
        out[name] = column[name] / figures[key] if key else math.nan
    return pd.Series(out)


def table(folders: list[Path], labels: list[str], anchor: dict) -> str:
    columns = {label: run_column(f) for label, f in zip(labels, folders, strict=True)}
    frame = pd.DataFrame(columns)
    lines = [f"| measure | {' | '.join(labels)} | "
             + " | ".join(f"{lab} / anchor" for lab in labels) + " |",
             "| --- " * (1 + 2 * len(labels)) + "|"]
    ratio_cols = {lab: ratios(frame[lab], anchor) for lab in labels}
    for name in frame.index:
        cells = [_fmt(frame.at[name, lab]) for lab in labels]
        rcells = [_fmt(ratio_cols[lab].get(name, math.nan), "x") for lab in labels]
        lines.append(f"| {name} | {' | '.join(cells)} | {' | '.join(rcells)} |")
    return "\n".join(lines)


def _fmt(value: float, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{value:.1f}{unit}" if unit else f"{value:.2f}"


def anchor_lines(anchor: dict) -> str:
    rows = ["| micro-batch | two log-prob passes, s | update, s | total, s | peak GiB |",
            "| --- | --- | --- | --- | --- |"]
    for key in ("mb4", "mb8", "mb16"):
        m = anchor.get(key)
        if isinstance(m, dict):
            rows.append(f"| {key[2:]} | {m['two_logprob_passes_s']} | {m['update_s']} | "
                        f"{m['total_s']} | {m['peak_GiB']} |")
    rows.append(f"\nWeight copy, device to device: {anchor['weight_copy_s']} s.")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="laid-out Trinity-RFT run folders")
    parser.add_argument("--anchor", type=Path, required=True,
                        help="JSON of benchmarks/engine_anchor.py from the same sitting")
    parser.add_argument("--labels", nargs="+", help="column names (default: folder names)")
    parser.add_argument("--out", type=Path, help="also write the markdown here")
    args = parser.parse_args(argv)
    labels = args.labels or [f.name for f in args.runs]
    if len(labels) != len(args.runs):
        print(f"error: {len(labels)} --labels for {len(args.runs)} runs", file=sys.stderr)
        return 2
    for folder in args.runs:
        if not (folder / "timings.json").is_file():
            print(f"error: {folder}: no timings.json (not a laid-out Trinity-RFT run)",
                  file=sys.stderr)
            return 2
    try:
        anchor = json.loads(args.anchor.read_text())
        anchor_figures(anchor)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"error: {args.anchor}: not an engine_anchor.py result ({exc})", file=sys.stderr)
        return 2
    try:
        body = table(args.runs, labels, anchor)
    except results.RunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = (f"# The engine step: Qwen2.5-Coder-0.5B under Trinity-RFT, one {anchor['gpu']}\n\n"
            f"Written by `python benchmarks/bench_engine_step.py` from the run folders "
            f"{', '.join(f'`{f}`' for f in args.runs)} and the anchor of the same sitting. "
            "Medians over explore steps 2 and later; evaluation: every evaluation of the run.\n\n"
            f"{body}\n\n## The anchor (`benchmarks/engine_anchor.py`, plain PyTorch)\n\n"
            f"{anchor_lines(anchor)}\n")
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

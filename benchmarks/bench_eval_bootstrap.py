"""The CPU one held-out evaluation's task metrics cost Trinity's RolloutCoordinator: Trinity-RFT
0.6.0's ``calculate_task_level_metrics`` over 660 tasks x 4 replies, with Trinity's own
``bootstrap_metric`` and with the lever's (``mathagent.eval_bootstrap``), side by side.

The two ways alternate round by round in one process; each round computes every task's metrics
from the same per-reply values (the agent's accuracy, format score, tool calls and tool errors,
drawn from a seeded generator) and the two results must be equal. Writes a Markdown page.

    python benchmarks/bench_eval_bootstrap.py [--rounds 3] [--tasks 660] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import time
from pathlib import Path

from trinity.utils import metrics as trinity_metrics

from mathagent import eval_bootstrap

TRINITY = getattr(trinity_metrics.bootstrap_metric, "__wrapped__",
                  trinity_metrics.bootstrap_metric)
WAYS = {"Trinity's bootstrap_metric": TRINITY, "the lever's": eval_bootstrap.bootstrap_metric}


def eval_tasks(n_tasks: int, replies: int, seed: int = 0) -> list[list[dict]]:
    """Per-reply metrics of ``n_tasks`` evaluation tasks, as the agent's workflow reports them."""
    rnd = random.Random(seed)
    return [[{"accuracy": float(rnd.random() < 0.35), "format_score": float(rnd.random() < 0.9),
              "tool_calls": rnd.randint(0, 3), "tool_errors": rnd.randint(0, 1),
              "time/run_execution": rnd.uniform(1, 9)} for _ in range(replies)]
            for _ in range(n_tasks)]


def one_evaluation(tasks: list[list[dict]], bootstrap) -> tuple[float, float, list[dict]]:
    """Wall and CPU seconds of every task's metrics with ``bootstrap`` in Trinity's module."""
    trinity_metrics.bootstrap_metric = bootstrap
    try:
        c0, t0 = time.process_time(), time.perf_counter()
        out = [trinity_metrics.calculate_task_level_metrics(m, True) for m in tasks]
        return time.perf_counter() - t0, time.process_time() - c0, out
    finally:
        trinity_metrics.bootstrap_metric = TRINITY


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both ways (default 3)")
    parser.add_argument("--tasks", type=int, default=660, help="evaluation tasks (default 660)")
    parser.add_argument("--replies", type=int, default=4, help="replies a task (default 4)")
    parser.add_argument("--out", type=Path, help="write the Markdown page here")
    parser.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    args = parser.parse_args(argv)
    if min(args.rounds, args.tasks, args.replies) < 1:
        parser.error("--rounds, --tasks and --replies: at least 1")
    if args.out and args.out.exists() and not args.force:
        print(f"error: {args.out} exists (--force to overwrite)", file=sys.stderr)
        return 1
    tasks = eval_tasks(args.tasks, args.replies)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in WAYS}
    for r in range(args.rounds):
        results = {}
        for name, fn in WAYS.items():
            wall, cpu, results[name] = one_evaluation(tasks, fn)
            times[name].append((wall, cpu))
            print(f"round {r + 1}/{args.rounds}  {name:28s} {wall:7.2f} s wall  {cpu:7.2f} s CPU",
                  flush=True)
        first, second = results.values()
        if first != second:
            print("error: the two ways gave different metrics", file=sys.stderr)
            return 1
    old, new = (sorted(t[0] for t in times[name]) for name in WAYS)
    ratios = sorted(a[0] / b[0] for a, b in zip(*times.values(), strict=True))
    med = ratios[len(ratios) // 2]
    lines = [
        f"# One held-out evaluation's task metrics (this machine: {os.cpu_count()} cores, "
        f"Python {platform.python_version()})", "",
        f"Written by `python benchmarks/bench_eval_bootstrap.py --rounds {args.rounds}`: "
        f"Trinity-RFT 0.6.0's `calculate_task_level_metrics` over {args.tasks} tasks x "
        f"{args.replies} replies (accuracy, format score, tool calls, tool errors), the two ways "
        "alternating round by round; both gave the same metrics in every round. This is the "
        "work Trinity's RolloutCoordinator does for an evaluation besides handing out its tasks "
        "(`mathagent/eval_bootstrap.py`).", "",
        "| way | wall s (fastest) | wall s (median) | CPU s (median) |",
        "| --- | --- | --- | --- |"]
    for name, walls in zip(WAYS, (old, new), strict=True):
        cpus = sorted(t[1] for t in times[name])
        lines.append(f"| {name} | {walls[0]:.3f} | {walls[len(walls) // 2]:.3f} | "
                     f"{cpus[len(cpus) // 2]:.3f} |")
    lines.append(f"| ratio Trinity's / the lever's, round by round | | {med:.0f} "
                 f"({ratios[0]:.0f}-{ratios[-1]:.0f}) | |")
    page = "\n".join(lines) + "\n"
    print("\n" + page)
    if args.out:
        args.out.write_text(page)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

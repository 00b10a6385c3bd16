"""BOTSSelector against Trinity's ``difficulty_based`` on a guru-sized taskset (54,404 tasks).

Both selectors get the same data source Trinity's reader hands them (the ``datasets.Dataset``
itself, not the fast column view) and the same settings. Timed side by side in one run:

* ``construct``: building the selector, which reads the two reference columns (Trinity: through
  Python lists; BOTSSelector: through Arrow). Trinity's selector is also timed on the
  :class:`~mathagent.selectors.TaskColumns` view that ``make_selector`` uses by default.
* ``step``: ``get_indices(32)`` + ``feedback`` with the same feedback values, the two selectors
  alternating step by step so that machine load hits both alike. Most of a step is the Beta
  draw over every task, which exact equivalence requires of both. The batches are checked to
  be identical as they go.

    python benchmarks/bench_selectors.py [--tasks 54404] [--steps 200] [--batch 32]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import datasets
import numpy as np
from trinity.buffer.selector import SELECTORS
from trinity.common.config import DataSelectorConfig

from mathagent.selectors import BOTS_PATH, BOTSSelector, DataSource

WEAK, STRONG = "qwen2.5_7b_pass_rate", "qwen3_30b_pass_rate"
SETTINGS = {
    "thompson (reference config)": {"m": 8, "lamb": 0.1, "rho": 0.1, "target_reward": 0.8,
                                    "tau": 0, "do_sample": True},
    "greedy (Trinity defaults, tau=0)": {"tau": 0},
}


def guru_sized(n: int, seed: int = 0) -> datasets.Dataset:
    """Questions, answers and two reference pass-rate columns measured from 16 samples."""
    rng = np.random.default_rng(seed)
    d = rng.normal(0.0, 2.0, n)
    weak = rng.binomial(16, 1 / (1 + np.exp(d + 1))) / 16
    strong = rng.binomial(16, 1 / (1 + np.exp(d - 1))) / 16
    return datasets.Dataset.from_dict({
        "question": [f"Problem {i}: compute {i} * 7." for i in range(n)],
        "answer": [f"#### {7 * i}" for i in range(n)],
        WEAK: weak, STRONG: strong})


def build(kind: str, data: datasets.Dataset, kwargs: dict, fast: bool = False):
    source = DataSource(data, fast_columns=fast)
    if kind == "trinity":
        config = DataSelectorConfig("difficulty_based", 42, [WEAK, STRONG], dict(kwargs))
        return SELECTORS.get("difficulty_based")(source, config)
    return BOTSSelector(source, DataSelectorConfig(BOTS_PATH, 42, [WEAK, STRONG], dict(kwargs)))


def time_construction(data: datasets.Dataset, repeat: int) -> dict:
    kw = SETTINGS["thompson (reference config)"]
    out = {}
    for label, kind, fast, reps in [("trinity", "trinity", False, repeat),
                                    ("trinity on TaskColumns", "trinity", True, repeat * 3),
                                    ("bots", "bots", False, repeat * 10)]:
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            build(kind, data, kw, fast)
            times.append(time.perf_counter() - t)
        out[label] = float(np.median(times))
    return out


def time_steps(data: datasets.Dataset, kwargs: dict, steps: int, batch: int) -> dict:
    trinity, bots = build("trinity", data, kwargs, fast=True), build("bots", data, kwargs)
    rng = np.random.default_rng(1)
    m = kwargs.get("m", 16)
    t_tr, t_bo = [], []
    for step in range(steps):
        values = (rng.binomial(m, rng.random(batch)) / m).tolist()
        order = (("t", trinity), ("b", bots)) if step % 2 == 0 else (("b", bots), ("t", trinity))
        chosen = {}
        for key, sel in order:
            t = time.perf_counter()
            idx = sel.get_indices(batch)
            idx = idx.tolist() if hasattr(idx, "tolist") else idx
            sel.feedback(idx, values)
            (t_tr if key == "t" else t_bo).append(time.perf_counter() - t)
            chosen[key] = idx
        if chosen["t"] != chosen["b"]:
            raise AssertionError(f"step {step}: the selectors chose different batches")
    return {"trinity_ms": 1e3 * float(np.median(t_tr)), "bots_ms": 1e3 * float(np.median(t_bo))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=54_404)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3, help="constructions of Trinity's")
    parser.add_argument("--json", help="also write the numbers to this file")
    args = parser.parse_args(argv)
    data = guru_sized(args.tasks)
    print(f"{args.tasks} tasks, batch {args.batch}, load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    cons = time_construction(data, args.repeat)
    print("\nconstruction (median seconds)")
    for label, sec in cons.items():
        print(f"  {label:<26} {sec:8.4f} s   Trinity / this = {cons['trinity'] / sec:7.1f}x")
    results = {"construction_s": cons, "steps": {}}
    print(f"\nget_indices({args.batch}) + feedback, median of {args.steps} alternating steps")
    for name, kw in SETTINGS.items():
        r = time_steps(data, kw, args.steps, args.batch)
        r["ratio_bots_over_trinity"] = r["bots_ms"] / r["trinity_ms"]
        results["steps"][name] = r
        print(f"  {name:<34} trinity {r['trinity_ms']:6.2f} ms   bots {r['bots_ms']:6.2f} ms"
              f"   bots / trinity = {r['ratio_bots_over_trinity']:.2f}  (identical batches)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

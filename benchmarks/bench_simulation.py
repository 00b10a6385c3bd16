"""How long the default simulated sweep takes: every selector and ablation, 5 seeds, 300 steps,
54,404 tasks (``python -m mathagent simulate`` without options).

Reports wall time and process CPU time for building the world and for the sweep, and the
share of the sweep's CPU spent in the Beta draws every Thompson-sampling selector makes over
all tasks each step (measured by timing the same draw alone). With ``--compare-workers`` the
sweep also runs in one process, side by side in the same run, to show what the worker processes
buy.

    python benchmarks/bench_simulation.py [--workers 2] [--compare-workers] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from mathagent import simulation as sim


def beta_draw_ms(n: int, repeat: int = 20) -> float:
    """Median ms of one ``Generator.beta`` over ``n`` tasks (posteriors away from 1)."""
    a, b = np.full(n, 3.0), np.full(n, 7.0)
    times = []
    for k in range(repeat):
        rng = np.random.default_rng(k)
        t = time.perf_counter()
        rng.beta(a, b)
        times.append(time.perf_counter() - t)
    return 1e3 * float(np.median(times))


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the sweep's forked workers)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def timed_sweep(config: sim.SimConfig, workers: int) -> dict:
    c0, t0 = _cpu(), time.perf_counter()
    world = sim.make_world(config)
    world.datasets()
    c1, t1 = _cpu(), time.perf_counter()
    result = sim.run_sweep(config, workers=workers, progress=False, world=world)
    c2, t2 = _cpu(), time.perf_counter()
    return {"workers": workers, "world_wall_s": t1 - t0, "world_cpu_s": c1 - c0,
            "sweep_wall_s": t2 - t1, "sweep_cpu_s": c2 - c1,
            "selectors": int(result.selectors.shape[0]),
            "sampled_selectors": int(result.selectors.get("do_sample", False).fillna(False)
                                     .astype(bool).sum())}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--compare-workers", action="store_true",
                        help="also run the sweep in one process")
    parser.add_argument("--smoke", action="store_true", help="the small world instead")
    parser.add_argument("--json", help="also write the numbers to this file")
    args = parser.parse_args(argv)
    config = sim.smoke_config() if args.smoke else sim.SimConfig()
    print(f"{config.n_tasks} tasks, {config.n_seeds} seeds, {config.steps} steps; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    runs = [timed_sweep(config, args.workers)]
    if args.compare_workers and args.workers != 1:
        runs.append(timed_sweep(config, 1))
    beta = beta_draw_ms(config.n_tasks)
    for r in runs:
        draws = r["sampled_selectors"] * config.n_seeds * config.steps
        r["beta_draw_ms"] = beta
        r["beta_share_of_cpu"] = draws * beta / 1e3 / r["sweep_cpu_s"]
        print(f"\nworkers={r['workers']}: {r['selectors']} selectors "
              f"({r['sampled_selectors']} Thompson-sampling)")
        print(f"  world  wall {r['world_wall_s']:6.1f} s   cpu {r['world_cpu_s']:6.1f} s")
        print(f"  sweep  wall {r['sweep_wall_s']:6.1f} s   cpu {r['sweep_cpu_s']:6.1f} s")
        print(f"  Beta draws: {draws} x {beta:.2f} ms = {draws * beta / 1e3:.1f} s, "
              f"{r['beta_share_of_cpu']:.0%} of the sweep's CPU")
    if len(runs) == 2:
        print(f"\nworker processes speed-up: {runs[1]['sweep_wall_s'] / runs[0]['sweep_wall_s']:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

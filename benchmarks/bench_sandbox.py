"""What one run of the Python tool costs, with the kernel layer and without it, side by side.

    python benchmarks/bench_sandbox.py [--rounds 15] [--out benchmarks/bench_sandbox.md]

Every tool call of the agent and of ``train-local``'s rollouts is one :func:`run_code`. Timed
here, for a trivial snippet (``print(6 * 7)``) and a numpy one (``import numpy``, a 200 x 200
matrix product), are its two ways:

* **weak**: the layers the sandbox had before its kernel layer (a child process in its own
  group, rlimits, the audit hook, bounded output; ``Isolation(None)``, what
  ``MATHAGENT_SANDBOX_WEAK=1`` gives where the kernel layer is missing);
* **kernel layer**: the same child under bubblewrap (namespaces, uid 65534, read-only root,
  tmpfs work folder, seccomp filter), what every call gets now.

The two ways alternate call by call (one warm-up round not counted), so a drift of the
machine's speed touches both alike. Reported per snippet: each way's wall milliseconds per
call (fastest and median) and the ratio of the two ways' wall times call by call; and, once,
what finding out that the kernel layer works costs the first call of a process
(:func:`mathagent.sandbox_layer.isolation`'s trial run). Wall time only: under bubblewrap the
code's process is reaped inside the sandbox's PID namespace, so this process's accounting of
its children's CPU time does not include it.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mathagent import sandbox_layer  # noqa: E402
from mathagent.sandbox import SandboxLimits, run_code  # noqa: E402
from mathagent.sandbox_layer import Isolation, isolation  # noqa: E402

SNIPPETS = {
    "trivial: `print(6 * 7)`": "print(6 * 7)",
    "numpy: `import numpy`, a 200 x 200 matrix product": (
        "import numpy as np\na = np.arange(40000, dtype=float).reshape(200, 200)\n"
        "print(float((a @ a).sum()))"),
}
LIMITS = SandboxLimits(timeout=60.0)


def one_call(code: str, layer: Isolation) -> float:
    """Wall seconds of one run that must succeed."""
    start = time.perf_counter()
    result = run_code(code, LIMITS, layer=layer)
    wall = time.perf_counter() - start
    if not result.ok:
        raise SystemExit(f"bench_sandbox: the run failed: {result.text()}")
    return wall


def probe_seconds() -> float:
    """What the first call of a process pays to find the kernel layer (a fresh probe)."""
    sandbox_layer._FOUND.clear()
    start = time.perf_counter()
    found = isolation()
    took = time.perf_counter() - start
    if not found.strong:
        raise SystemExit(f"bench_sandbox: no kernel layer here: {found.refusal}")
    return took


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15, help="counted calls of each way")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "bench_sandbox.md")
    args = ap.parse_args(argv)
    probe = probe_seconds()
    ways = {"weak (no kernel layer)": Isolation(None), "kernel layer": isolation()}
    lines = [f"# The Python tool's cost per call (this machine: {os.cpu_count()} cores, "
             f"Python {platform.python_version()})", "",
             f"Written by `python benchmarks/bench_sandbox.py --rounds {args.rounds}`: the two "
             "ways alternate call by call, one warm-up round not counted; milliseconds per "
             "call of `run_code`, from its start to its return.", "",
             f"Finding the kernel layer (the first call of a process, once): {ms(probe)} ms.",
             ""]
    for title, code in SNIPPETS.items():
        walls = {w: [] for w in ways}
        for round_ in range(args.rounds + 1):
            for name, layer in ways.items():
                wall = one_call(code, layer)
                if round_:  # round 0 warms the file cache
                    walls[name].append(wall)
        weak, strong = (walls[w] for w in ways)
        ratios = sorted(s / w for s, w in zip(strong, weak, strict=True))
        lines += [f"## {title}", "", "| way | wall ms (fastest) | wall ms (median) |",
                  "| --- | --- | --- |"]
        for name in ways:
            lines.append(f"| {name} | {ms(min(walls[name]))} | "
                         f"{ms(statistics.median(walls[name]))} |")
        lines += [f"| ratio kernel / weak, call by call | | {statistics.median(ratios):.2f} "
                  f"({ratios[0]:.2f}-{ratios[-1]:.2f}) |", ""]
    text = "\n".join(lines)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

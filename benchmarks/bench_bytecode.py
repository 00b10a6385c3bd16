"""What a process pays when torch's step of the install left no bytecode, side by side in one run.

    python benchmarks/bench_bytecode.py [--rounds 5] [--out benchmarks/bench_bytecode.md]

``scripts/install.sh`` installs torch on its own, then the lock. uv writes bytecode only when
asked and only for the packages of the step that asks, so until every step asked, torch and its
dependencies (sympy, networkx, jinja2, ...) were installed without it. Where Python writes no
bytecode (``PYTHONDONTWRITEBYTECODE``, set on some machines), every process that imports them
compiles them again. This script times one process that imports the training stack (torch,
transformers, verl, Trinity's config, AgentScope's agent through ``mathagent.agent``: what
``train`` imports before it launches) two ways, interleaved round by round:

* ``without``: the bytecode of torch and the packages it requires is missing, the rest present
  (the environment as the install left it before);
* ``with``: every module's bytecode present (the environment as the install leaves it now).

Both read their bytecode from a tree of their own (``PYTHONPYCACHEPREFIX``), written here by
running the same imports once, so the environment itself is not touched. Reported: wall and CPU
seconds of each way (fastest and median round) and their ratio round by round.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

IMPORTS = "import torch, transformers, verl, trinity.common.config, mathagent.agent"


def required(name: str, seen: set[str] | None = None) -> set[str]:
    """``name`` and every distribution it requires, recursively (extras left out)."""
    seen = set() if seen is None else seen
    key = re.sub(r"[-_.]+", "-", name).lower()
    if key in seen:
        return seen
    seen.add(key)
    try:
        requires = importlib.metadata.requires(name) or []
    except importlib.metadata.PackageNotFoundError:
        return seen
    for line in requires:
        if "extra ==" not in line:
            required(re.split(r"[ ;<>=!~\[(]", line, maxsplit=1)[0], seen)
    return seen


def top_levels(distributions: set[str]) -> set[str]:
    """The top-level module and package names the distributions install."""
    names = set()
    for dist in importlib.metadata.distributions():
        key = re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower()
        if key in distributions:
            for file in dist.files or []:
                first = file.parts[0]
                if not first.endswith((".dist-info", ".data")) and first != "..":
                    names.add(first.removesuffix(".py"))
    return names


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, the child's own accounting) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds of both ways (default 5)")
    parser.add_argument("--out", type=Path, default=None, help="also write the table here")
    args = parser.parse_args()

    command = [sys.executable, "-c", IMPORTS]
    work = Path(tempfile.mkdtemp(prefix="bench_bytecode_"))
    try:
        full, partial = work / "with", work / "without"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        subprocess.run(command, env={**env, "PYTHONPYCACHEPREFIX": str(full)}, check=True)
        shutil.copytree(full, partial)
        torch_step = top_levels(required("torch"))
        dropped = 0
        for folder in partial.rglob("site-packages"):
            for entry in folder.iterdir():
                if entry.name.split(".")[0] in torch_step:
                    dropped += sum(1 for _ in entry.rglob("*.pyc")) if entry.is_dir() else 1
                    shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        kept = sum(1 for _ in partial.rglob("*.pyc"))
        print(f"{kept + dropped} modules imported; without: {dropped} of them lack bytecode "
              f"({', '.join(sorted(torch_step))})")

        runs: dict[str, list[tuple[float, float]]] = {"without": [], "with": []}
        for round_ in range(args.rounds + 1):   # round 0 warms the file cache, not counted
            for way, tree in (("without", partial), ("with", full)):
                run_env = {**env, "PYTHONDONTWRITEBYTECODE": "1",
                           "PYTHONPYCACHEPREFIX": str(tree)}
                result = timed(command, run_env)
                if round_:
                    runs[way].append(result)
            if round_:
                print(f"round {round_}: " + ", ".join(
                    f"{way} {runs[way][-1][0]:.2f} s" for way in runs), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    ratios = [a[0] / b[0] for a, b in zip(runs["without"], runs["with"], strict=True)]
    lines = [
        f"# Bytecode of torch's install step: one process importing the training stack "
        f"(this machine: {os.cpu_count()} cores, Python {platform.python_version()})",
        "",
        "Written by `python benchmarks/bench_bytecode.py`: the two ways interleaved, "
        f"{args.rounds} rounds after one warm-up round; each a new process running "
        f"`{IMPORTS}` with Python writing no bytecode.",
        "",
        "| way | wall s (fastest) | wall s (median) | CPU s (median) |",
        "| --- | --- | --- | --- |",
    ]
    for way, label in (("without", f"without torch's ({dropped} modules compiled each run)"),
                       ("with", "with every module's bytecode")):
        walls = [w for w, _ in runs[way]]
        cpus = [c for _, c in runs[way]]
        lines.append(f"| {label} | {min(walls):.2f} | {statistics.median(walls):.2f} | "
                     f"{statistics.median(cpus):.2f} |")
    lines += ["", f"Ratio without / with, round by round: median {statistics.median(ratios):.2f} "
              f"(range {min(ratios):.2f}-{max(ratios):.2f})."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

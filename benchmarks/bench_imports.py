"""What one process pays to import the training stack, two install choices side by side.

    python benchmarks/bench_imports.py [--rounds 5] [--out benchmarks/bench_imports.md]

Every test process, notebook kernel, ``python -m mathagent`` command and Ray worker imports
part of the stack, so a second of import is paid many times over. Two choices of
``scripts/install.sh`` are timed here, each as two ways interleaved round by round, every run a
new process (the first round warms the file cache and is not counted):

1. **Bytecode of torch's install step.** uv writes bytecode only when asked and only for the
   packages of the step that asks, so until every step asked, torch and the packages it
   requires (sympy, networkx, jinja2, ...) were installed without it. Where Python writes no
   bytecode (``PYTHONDONTWRITEBYTECODE``) every process that imports them compiles them again.
   Timed: ``import torch, transformers, verl, trinity.common.config, mathagent.agent`` (what
   ``train`` imports before it launches), with torch's step's bytecode missing against all of it
   present. Each way reads its bytecode from a tree of its own (``PYTHONPYCACHEPREFIX``),
   written here by running the imports once, so the environment is not touched.
2. **rfc3987-syntax** (``requirements/excluded.txt``). jsonschema imports it whenever it is
   installed, and its import builds 36 Earley parsers. Timed: ``import ray`` (Ray imports
   jsonschema) and ``import mathagent.agent`` (AgentScope imports it through mcp), with the
   package on the path (installed, at the lock's version, into a temporary folder) against
   without it (the environment as the install leaves it).

Reported: each way's wall seconds (fastest and median round) and CPU seconds (median), and the
ratio of the two ways round by round.
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

REPO = Path(__file__).resolve().parents[1]
STACK = "import torch, transformers, verl, trinity.common.config, mathagent.agent"


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


def timed(code: str, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, the child's own accounting) of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def side_by_side(code: str, ways: dict[str, dict[str, str]], rounds: int) -> list[str]:
    """Time ``code`` under each environment of ``ways``, interleaved; the table's rows."""
    runs: dict[str, list[tuple[float, float]]] = {way: [] for way in ways}
    for round_ in range(rounds + 1):
        for way, env in ways.items():
            result = timed(code, env)
            if round_:
                runs[way].append(result)
        if round_:
            print(f"  round {round_}: " + ", ".join(f"{way} {runs[way][-1][0]:.2f} s"
                                                   for way in runs), flush=True)
    rows = []
    for way, results in runs.items():
        walls, cpus = [w for w, _ in results], [c for _, c in results]
        rows.append(f"| {way} | {min(walls):.2f} | {statistics.median(walls):.2f} | "
                    f"{statistics.median(cpus):.2f} |")
    first, second = runs.values()
    ratios = [a[0] / b[0] for a, b in zip(first, second, strict=True)]
    rows.append(f"| ratio, round by round | | {statistics.median(ratios):.2f} "
                f"({min(ratios):.2f}-{max(ratios):.2f}) | |")
    return rows


def bytecode_rows(work: Path, env: dict[str, str], rounds: int) -> tuple[str, list[str]]:
    full, partial = work / "with", work / "without"
    subprocess.run([sys.executable, "-c", STACK], check=True,
                   env={**env, "PYTHONPYCACHEPREFIX": str(full)})
    shutil.copytree(full, partial)
    torch_step = top_levels(required("torch"))
    dropped = 0
    for folder in partial.rglob("site-packages"):
        for entry in folder.iterdir():
            if entry.name.split(".")[0] in torch_step:
                dropped += sum(1 for _ in entry.rglob("*.pyc")) if entry.is_dir() else 1
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    kept = sum(1 for _ in partial.rglob("*.pyc"))
    print(f"`{STACK}`: {kept + dropped} modules, {dropped} of them torch's step's")
    quiet = {**env, "PYTHONDONTWRITEBYTECODE": "1"}
    rows = side_by_side(STACK, {
        f"without the bytecode of torch's step ({dropped} of {kept + dropped} modules)":
            {**quiet, "PYTHONPYCACHEPREFIX": str(partial)},
        "with every module's bytecode": {**quiet, "PYTHONPYCACHEPREFIX": str(full)},
    }, rounds)
    return (f"`{STACK}`, Python writing no bytecode; torch's step: "
            f"{', '.join(sorted(torch_step))}"), rows


def iri_rows(work: Path, env: dict[str, str], rounds: int) -> tuple[str, list[str]]:
    lock = (REPO / "requirements" / "cpu.lock").read_text()
    pin = re.search(r"^rfc3987-syntax==\S+", lock, re.M).group(0)
    target = work / "rfc3987"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--disable-pip-version-check", "--target", str(target), pin], check=True)
    with_it = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(target),
                                                                 env.get("PYTHONPATH")]))}
    rows = []
    for code in ("import ray", "import mathagent.agent"):
        print(f"`{code}`")
        rows += [f"| **`{code}`** | | | |"]
        rows += side_by_side(code, {f"with {pin}": with_it, "without it": env}, rounds)
    return f"{pin} installed against not", rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="counted rounds (default 5)")
    parser.add_argument("--out", type=Path, default=None, help="also write the tables here")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    work = Path(tempfile.mkdtemp(prefix="bench_imports_"))
    try:
        sections = [bytecode_rows(work, env, args.rounds), iri_rows(work, env, args.rounds)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lines = [f"# Importing the training stack: two install choices (this machine: "
             f"{os.cpu_count()} cores, Python {platform.python_version()})", "",
             f"Written by `python benchmarks/bench_imports.py --rounds {args.rounds}`: each "
             "comparison's two ways interleaved, a new process each run, one warm-up round "
             "not counted.", ""]
    for number, (title, rows) in enumerate(sections, 1):
        lines += [f"## {number}. {title}", "",
                  "| way | wall s (fastest) | wall s (median) | CPU s (median) |",
                  "| --- | --- | --- | --- |", *rows, ""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The README's test command in one process against two workers, on a fresh clone.

    python3 benchmarks/bench_suite.py [--hog] [--only serial|workers] [--workdir DIR]
                                      [--out benchmarks/bench_suite.md]

The script clones this repository's HEAD into ``--workdir``, links the checkout's ``.venv``
into the clone (installed by ``scripts/install.sh --qwen --browser``; the install is
``bench_install.py``'s business) and runs ``pytest --nbmake tests notebooks`` there:

1. ``serial``: one process, as before the suite ran on workers;
2. ``workers``: ``-n 2 --dist loadfile``, the README's command (pytest-xdist, one test file
   at a time to each of two workers).

The two run one after the other on the same clone, each from a fresh ``-p no:cacheprovider``
start and an empty model cache of its own. ``--hog`` keeps one process spinning
(``yes > /dev/null``, started and stopped here) for the whole of both runs: the suite must
pass on a machine busy with something else. Each row has the wall time, pytest's own summary
line and the load average before and after.
About 30 minutes on 2 cores, 45 with the hog. The table is written to ``--out``, each run's
output to ``NAME.log`` in the work folder (kept when ``--workdir`` is given, or a run failed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_install import load  # this folder is on sys.path when a script of it runs

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = {"serial": [], "workers": ["-n", "2", "--dist", "loadfile"]}


def run_suite(clone: Path, extra: list[str], model_cache: Path,
              log: Path) -> tuple[float, str, int]:
    """Seconds, pytest's last line and its exit status for one run of the suite in ``clone``,
    with the empty folder ``model_cache`` as the model cache (``MATHAGENT_MODEL_CACHE``): a
    run assembles the Qwen model file and exports the float32 folders it loads, as on a new
    machine. pytest's whole output goes to ``log``."""
    cmd = [str(clone / ".venv" / "bin" / "python"), "-m", "pytest", *extra, "--nbmake", "tests",
           "notebooks", "-p", "no:cacheprovider", "-q"]
    model_cache.mkdir()
    env = {**os.environ, "MATHAGENT_MODEL_CACHE": str(model_cache)}
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=clone, capture_output=True, text=True, env=env)
    seconds = time.monotonic() - start
    log.write_text(done.stdout + done.stderr)
    last = next((line.strip("= ") for line in reversed(done.stdout.splitlines())
                 if line.strip()), "(no output)")
    return seconds, last, done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hog", action="store_true", help="keep one core busy throughout")
    parser.add_argument("--only", choices=sorted(VARIANTS), help="run one variant")
    parser.add_argument("--workdir", type=Path, help="where to clone (default: a new temp dir)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "bench_suite.md")
    args = parser.parse_args(argv)
    venv = ROOT / ".venv"
    if not (venv / "bin" / "python").exists():
        print(f"error: {venv} is missing: run bash scripts/install.sh --qwen --browser first",
              file=sys.stderr)
        return 2
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-suite-"))
    clone = work / "mathagent"
    if clone.exists():
        print(f"error: {clone} exists; give another --workdir", file=sys.stderr)
        return 2
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    (clone / ".venv").symlink_to(venv)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone,
                            capture_output=True, text=True, check=True).stdout.strip()
    hog = subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) if args.hog else None
    rows, failed = [], False
    try:
        for name in ([args.only] if args.only else list(VARIANTS)):
            before = load()
            print(f"[bench_suite] {name} ...", flush=True)
            log = work / f"{name}.log"
            seconds, last, rc = run_suite(clone, VARIANTS[name], work / f"model_cache_{name}", log)
            if rc != 0:
                print(f"[bench_suite] {name} failed: its output is in {log}", flush=True)
            failed |= rc != 0
            rows.append(f"| {name} | {seconds:.1f} ({seconds / 60:.1f} min) | {last} | "
                        f"{before} -> {load()} |")
            print(rows[-1], flush=True)
    finally:
        if hog is not None:
            hog.terminate()
            hog.wait()
    table = "\n".join([
        f"# The test suite, one process against two workers ({commit}, {os.cpu_count()} cores"
        f"{', one held by a busy process' if args.hog else ''})", "",
        "Written by `python3 benchmarks/bench_suite.py"
        f"{' --hog' if args.hog else ''}`, a fresh clone, the runs one after the other.", "",
        "| variant | wall seconds | pytest's summary | load average (1/5/15 min) before -> after |",
        "| --- | --- | --- | --- |", *rows, ""])
    args.out.write_text(table)
    print(f"wrote {args.out}")
    if args.workdir is None and not failed:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

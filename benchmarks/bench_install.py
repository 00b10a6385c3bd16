"""scripts/install.sh with uv against plain pip, cold and warm, each on a fresh clone.

    python3 benchmarks/bench_install.py [--no-qwen] [--only pip|uv] [--workdir DIR]
                                        [--out benchmarks/bench_install.md]

For each installer (pip, then uv) the script clones this repository into ``--workdir`` and
runs ``bash scripts/install.sh --qwen`` there (what ``.ci/run`` runs) twice:

1. cold: empty cache folders (``PIP_CACHE_DIR``, ``UV_CACHE_DIR`` and ``MATHAGENT_WHEEL_DIR``
   point at new folders), so everything is downloaded and llama-cpp-python is compiled from
   its source;
2. warm: ``.venv`` removed, the same caches kept: what a second clone on the same machine,
   or a rebuilt environment, costs.

Then it compares ``pip freeze --all`` of the two environments, which must be identical
(the installer changes how fast, never what). The clone takes this tree's
``scripts/install.sh`` and ``requirements/`` (the files under test, committed or not).

Each figure comes with the load average before and after it (``os.getloadavg``) and the
machine's core count: on a shared machine an install competes for the cores, and
llama-cpp-python's compile, which uses them all, is most of a cold install. The installs run
one at a time; the cold ones take several minutes each. The table is written to ``--out``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INSTALLERS = ("pip", "uv")


def load() -> str:
    """The 1-, 5- and 15-minute load averages, as uptime prints them."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def clone(workdir: Path, installer: str) -> Path:
    """A fresh clone of this repository with this tree's installer files laid over it."""
    target = workdir / f"clone-{installer}"
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", str(ROOT), str(target)], check=True)
    shutil.copy2(ROOT / "scripts" / "install.sh", target / "scripts" / "install.sh")
    shutil.rmtree(target / "requirements")
    shutil.copytree(ROOT / "requirements", target / "requirements")
    return target


def install(tree: Path, installer: str, caches: Path, qwen: bool, log: Path) -> dict:
    """One run of scripts/install.sh in ``tree``: its wall seconds and the load around it."""
    env = dict(os.environ, MATHAGENT_INSTALLER=installer,
               PIP_CACHE_DIR=str(caches / "pip"), UV_CACHE_DIR=str(caches / "uv"),
               MATHAGENT_WHEEL_DIR=str(caches / "wheels"))
    command = ["bash", "scripts/install.sh"] + (["--qwen"] if qwen else [])
    before = load()
    started = time.monotonic()
    with log.open("w") as out:
        done = subprocess.run(command, cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT)
    seconds = time.monotonic() - started
    if done.returncode:
        sys.exit(f"error: {installer} install failed (exit {done.returncode}); see {log}")
    return {"seconds": seconds, "load_before": before, "load_after": load()}


def freeze(tree: Path) -> list[str]:
    """``pip freeze --all`` of the clone's environment, the editable mathagent left out."""
    listing = subprocess.run([str(tree / ".venv" / "bin" / "python"), "-m", "pip", "freeze",
                              "--all", "--exclude-editable"],
                             capture_output=True, text=True, check=True).stdout
    return sorted(listing.split())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-qwen", dest="qwen", action="store_false",
                        help="install without the Qwen parts (what plain install.sh does)")
    parser.add_argument("--only", choices=INSTALLERS, help="measure one installer")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/mathagent-bench-install"))
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "bench_install.md")
    args = parser.parse_args()

    args.workdir.mkdir(parents=True, exist_ok=True)
    rows, frozen = [], {}
    for installer in [args.only] if args.only else INSTALLERS:
        tree = clone(args.workdir, installer)
        caches = args.workdir / f"cache-{installer}"
        shutil.rmtree(caches, ignore_errors=True)
        for kind in ("cold", "warm"):
            shutil.rmtree(tree / ".venv", ignore_errors=True)
            print(f"[bench] {installer} {kind} (load {load()})", flush=True)
            figure = install(tree, installer, caches, args.qwen,
                             args.workdir / f"{installer}-{kind}.log")
            print(f"[bench] {installer} {kind}: {figure['seconds']:.0f} s", flush=True)
            rows.append((installer, kind, figure))
        frozen[installer] = freeze(tree)
        (args.workdir / f"freeze-{installer}.txt").write_text("\n".join(frozen[installer]) + "\n")

    lines = [f"# scripts/install.sh{' --qwen' if args.qwen else ''}: pip against uv, on a fresh clone",
             "", f"`python3 benchmarks/bench_install.py`, {time.strftime('%Y-%m-%d')}, "
             f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}.",
             "", "| installer | cache | wall s | load before | load after |",
             "| --- | --- | --- | --- | --- |"]
    lines += [f"| {installer} | {kind} | {figure['seconds']:.0f} | {figure['load_before']} | "
              f"{figure['load_after']} |" for installer, kind, figure in rows]
    if len(frozen) == 2:
        pip_only = sorted(set(frozen["pip"]) - set(frozen["uv"]))
        uv_only = sorted(set(frozen["uv"]) - set(frozen["pip"]))
        verdict = ("identical" if not pip_only and not uv_only
                   else f"differ: pip only {pip_only}, uv only {uv_only}")
        lines += ["", f"`pip freeze --all` of the two environments ({len(frozen['pip'])} "
                  f"packages): {verdict}."]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.write_text(text)


if __name__ == "__main__":
    main()

"""The ``experiment`` command: run every (arm, seed) of a spec not yet in its folder, then the
report.

    python -m mathagent experiment configs/experiment_qwen.yaml --dry-run
    python -m mathagent experiment configs/experiment_qwen.yaml [--parallel N]

``--dry-run`` (any machine, no GPU) checks every arm through ``train``'s preflight, prints the
plan (runs done, runs to do, partial runs to start again) and an estimate of the GPU time
from the phase times of the runs already in the folder. Without it, the runs to do go one
after the other (or ``--parallel N`` at once on the one GPU, when the memory the folder's
runs peaked at allows), each printing a line per step (``step n of N``, the last held-out
accuracy); each finished run is laid out in the folder, and the report is written at the end.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

from mathagent import paths
from mathagent.experiment import runner
from mathagent.experiment.estimate import estimate
from mathagent.experiment.layout import run_folders
from mathagent.experiment.plan import (
    DONE,
    PARTIAL,
    Planned,
    WorkLock,
    WorkLockError,
    move_aside,
    plan,
    work_dir,
)
from mathagent.experiment.progress import now, problem_lines
from mathagent.experiment.schedule import schedules as spec_schedules
from mathagent.results.spec import Run, Spec, SpecError, load_spec

#: Seconds between two looks at the runs' logs.
POLL_SECONDS = 5.0
#: Seconds without news after which a run's line is printed again.
HEARTBEAT_SECONDS = 60.0
#: The row of ``gpu_memory.csv`` with a run's peak (GiB, all its processes at one time).
PEAK_ROW = "run, all processes (sum at one time)"


def experiment_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", type=Path, help="the experiment's spec (YAML), e.g. "
                                                "configs/experiment_qwen.yaml")
    parser.add_argument("--dry-run", action="store_true",
                        help="check every arm through the preflight, print the plan and the "
                             "GPU-time estimate; run nothing (no GPU needed)")
    parser.add_argument("--parallel", type=int, default=1, metavar="N",
                        help="runs at once on the one GPU (default 1; more only where the "
                             "peak memory of the folder's runs allows)")
    parser.add_argument("--out", type=Path, default=None,
                        help="the output folder, instead of the spec's `out` (whose runs then "
                             "give the GPU-time estimate until this folder has its own)")
    parser.add_argument("--model", default=None,
                        help="the policy, overriding the spec's `model`: a name (python -m "
                             "mathagent models), a .gguf file or a Hugging Face folder")
    parser.add_argument("--work", type=Path, default=None,
                        help="where runs work and killed runs are kept aside (default "
                             "runs/experiment/<output folder's name>)")
    parser.add_argument("--keep-checkpoints", action="store_true",
                        help="keep each finished run's Trinity checkpoints (default: removed "
                             "once the run is laid out)")


def experiment_command(args: argparse.Namespace) -> int:
    try:
        spec = load_spec(args.spec)
        check_levers(spec)
        schedules = spec_schedules(spec)
        measured = spec.out
        if args.out is not None:
            spec = dataclasses.replace(spec, out=args.out.resolve())
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.parallel < 1:
        print(f"error: --parallel {args.parallel}: at least 1", file=sys.stderr)
        return 2
    work = args.work or work_dir(spec)
    planned = plan(spec, work)
    differ = [p for p in planned if p.mismatch]
    if differ:
        more = f" (and {len(differ) - 1} more run(s))" if len(differ) > 1 else ""
        print(f"error: {differ[0].mismatch}{more}; its results would be mixed with the "
              "spec's: choose another --out, or move it away", file=sys.stderr)
        return 2
    print_plan(spec, planned, schedules, timed_by(spec.out, measured))
    if not (spec.out / "experiment.yaml").exists():
        print(f"Report: {_rel(spec.out)} has no experiment.yaml; one is started from the spec "
              "when the runs end")
    if args.dry_run:
        return preflight_arms(spec, args.model)
    todo = [p for p in planned if p.state != DONE]
    failed: list[str] = []
    if todo:
        if (why := parallel_blocker(spec.out, args.parallel)) is not None:
            print(f"error: --parallel {args.parallel}: {why}", file=sys.stderr)
            return 2
        try:
            model = model_folder(args.model or spec.model)
        except (OSError, RuntimeError) as exc:
            print(f"error: model {args.model or spec.model}: {exc}", file=sys.stderr)
            return 2
        try:
            with WorkLock(work), WorkLock(spec.out, ".experiment.lock.json"):
                failed = run_all(todo, spec, work, model, schedules, args)
        except WorkLockError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print(f"[{now()}] stopped: the runs that were going are left in {work} and start "
                  "again from scratch at the next call", flush=True)
            return 130
    if not run_folders(spec.out):
        print("no finished run in the folder: no report")
        return 1 if failed else 0
    from mathagent.experiment.describe import write_starting_spec
    from mathagent.report import write_report

    try:
        if (started := write_starting_spec(spec, schedules)) is not None:
            print(f"wrote {started} from the spec: add the question, the answer and the "
                  f"limitations, then `python -m mathagent report {spec.out}`")
        report = write_report(spec.out)
    except Exception as exc:  # the runs are laid out; the report can be written again
        print(f"error: the report of {spec.out}: {type(exc).__name__}: {exc} (write it again "
              f"with `python -m mathagent report {spec.out}`)", file=sys.stderr)
        return 1
    print(f"report: {report}")
    if failed:
        print(f"{len(failed)} run(s) did not finish: {', '.join(failed)}; run the same command "
              "again to start them from scratch", file=sys.stderr)
        return 1
    return 0


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(paths.REPO_ROOT))
    except ValueError:
        return str(path)


def timed_by(out: Path, spec_out: Path) -> Path:
    """The folder whose runs' phase times give the estimate: ``out`` once it has finished
    runs, else the spec's own folder (a new output folder is timed by the spec's runs)."""
    return out if run_folders(out) or not run_folders(spec_out) else spec_out


def print_plan(spec: Spec, planned: list[Planned], schedules: dict, timed: Path) -> None:
    """The runs, each with its state and, for those to do, its estimated minutes (from the
    phase times of ``timed``'s runs)."""
    steps = sorted({s.steps for s in schedules.values()})
    print(f"Experiment {_rel(spec.path)} -> {_rel(spec.out)}: {len(spec.arms)} arm(s) "
          f"({', '.join(spec.arms)}) x seeds {', '.join(map(str, spec.seeds))}, "
          f"{'/'.join(map(str, steps))} steps a run")
    if spec.env:
        print("Levers of every run (mathagent.compat): "
              + ", ".join(f"{k}={v}" for k, v in sorted(spec.env.items())))
    total, unknown = 0.0, []
    for p in planned:
        evals = ", ".join(map(str, schedules[p.run.name].eval_steps))
        line = f"  {p.state:8s} {p.run.name:24s} {p.run.config.name} " + (
            f"(held-out at {evals})" if evals else "(no held-out evaluation)")
        if p.state != DONE:
            guess = estimate(p.run, timed)
            if guess is None:
                unknown.append(p.run.name)
            else:
                total += guess.minutes
                line += f"  ~{guess.minutes:.1f} min (median of {len(guess.based_on)} run(s))"
        if p.state == PARTIAL:
            line += "  [an earlier try's files are moved aside; started from scratch]"
        print(line)
    done = sum(p.state == DONE for p in planned)
    todo = len(planned) - done
    print(f"Runs: {done} done, {todo} to do"
          + (f" ({sum(p.state == PARTIAL for p in planned)} partial)" if todo else ""))
    if todo > len(unknown):
        print(f"GPU time: about {total:.0f} min for {todo - len(unknown)} run(s) one after the "
              f"other, from `train` to its end (phase times of {_rel(timed)})"
              + (f", and {len(unknown)} not estimated" if unknown else ""))
    if unknown:
        print(f"GPU time of {', '.join(unknown)}: no estimate (no finished run in the folder "
              "to measure it by)")
    if not todo:
        print("GPU time: none; every run is in the folder")
    per_arm = {arm: estimate(run, timed) for arm, run in first_runs(spec).items()}
    if all(per_arm.values()):
        print("One more run would take about " + ", ".join(
            f"{arm} {guess.minutes:.1f} min" for arm, guess in per_arm.items())
            + f" (medians of the runs of that arm in {_rel(timed)})")


def check_levers(spec: Spec) -> None:
    """Every variable of the spec's ``env`` is a lever of :mod:`mathagent.compat`, with a value
    the lever reads (:func:`mathagent.compat.lever_problem`)."""
    from mathagent.compat import LEVER_ENVS, lever_problem

    for key, value in (spec.env or {}).items():
        if key not in LEVER_ENVS:
            raise SpecError(f"{spec.path}: env.{key}: not a lever of mathagent.compat "
                            f"({', '.join(LEVER_ENVS)})")
        wrong = lever_problem(key, value)
        if wrong:
            raise SpecError(f"{spec.path}: env.{key}: {wrong}")


def first_runs(spec: Spec) -> dict[str, Run]:
    """Each arm's run of the first seed."""
    runs: dict[str, Run] = {}
    for run in spec.runs():
        runs.setdefault(run.arm, run)
    return runs


def preflight_arms(spec: Spec, model: str | None) -> int:
    """``train --dry-run`` of each arm (its first seed's settings and the spec's levers); one
    line per arm, and the problems of an arm that fails. Returns 0 when every arm passes."""
    env = dict(os.environ)
    folder = existing_model_folder(model or spec.model)
    if folder is not None:
        env["TRINITY_MODEL_PATH"] = str(folder)
    else:
        print(f"Model {model or spec.model}: its Hugging Face folder is made (once) before the "
              "first run; the preflight checks the configs' own model path")
    failed = 0
    for arm, run in first_runs(spec).items():
        cmd = [sys.executable, "-m", "mathagent", "train", "--config", str(run.config),
               "--compare", "none", "--dry-run", *run.overrides]
        done = subprocess.run(cmd, cwd=paths.REPO_ROOT, env={**env, **dict(run.env)},
                              capture_output=True, text=True)
        if done.returncode == 0:
            print(f"Preflight {arm}: passed ({run.config.name} with the spec's overrides)")
            continue
        failed += 1
        print(f"Preflight {arm}: failed ({run.config.name})")
        for line in problem_lines(done.stdout + done.stderr):
            print(f"    {line}")
    return 1 if failed else 0


def existing_model_folder(model: str) -> Path | None:
    """The Hugging Face folder ``model`` names, where one exists already (nothing written)."""
    path = Path(model).expanduser()
    path = path if path.is_absolute() else paths.REPO_ROOT / path
    if path.is_dir() and (path / "config.json").is_file():
        return path
    return None


def model_folder(model: str) -> Path:
    """The Hugging Face folder of ``model``: a folder as it is; a model name or a .gguf
    file exported once to its float32 folder in the model cache
    (:func:`mathagent.hf_export.float32_folder`)."""
    from mathagent.hf_export import float32_folder
    from mathagent.models import MODELS, model_file

    folder = existing_model_folder(model)
    if folder is not None:
        return folder
    path = Path(model).expanduser()
    path = path if path.is_absolute() else paths.REPO_ROOT / path
    if model in MODELS:
        gguf = model_file(model, progress=True)
    elif path.is_file() and path.suffix == ".gguf":
        gguf = path
    else:
        raise OSError("neither a model name (python -m mathagent models), a .gguf file nor a "
                      "Hugging Face folder with config.json")
    print(f"[{now()}] model {model}: its float32 Hugging Face folder (exported once)",
          flush=True)
    folder = float32_folder(gguf)
    print(f"[{now()}] model: {folder}", flush=True)
    return folder


def parallel_blocker(out: Path, parallel: int) -> str | None:
    """Why ``parallel`` runs cannot share this GPU, from the peak memory of the folder's
    runs (``gpu_memory.csv``); None when they can or nothing is known to say so."""
    if parallel == 1:
        return None
    import pandas as pd

    total = runner.gpu_total_mib()
    table = out / "gpu_memory.csv"
    if total is None or not table.is_file():
        print(f"--parallel {parallel}: no GPU memory figure or no runs in {out} to measure a "
              "run's peak by; starting them side by side unchecked")
        return None
    peaks = pd.read_csv(table, index_col=0)
    peak = peaks.loc[PEAK_ROW].max() if PEAK_ROW in peaks.index else float("nan")
    if peak != peak:  # NaN
        return None
    if parallel * peak * 1024 > total:
        return (f"the folder's runs peaked at {peak:.1f} GiB each and this GPU has "
                f"{total / 1024:.1f} GiB: {parallel} at once would not fit")
    return None


def run_all(todo: list[Planned], spec: Spec, work: Path, model: Path, schedules: dict,
            args: argparse.Namespace) -> list[str]:
    """Run ``todo``, ``args.parallel`` at a time; return the names of those that failed."""
    spec.out.mkdir(parents=True, exist_ok=True)
    queue, active, failed = list(todo), [], []
    with (runner.GpuMonitor(work / runner.GPU_APPS),
          runner.CpuMonitor(work / runner.CPU_SAMPLES)):
        try:
            while queue or active:
                while queue and len(active) < args.parallel:
                    planned = queue.pop(0)
                    name = planned.run.name
                    if planned.state == PARTIAL:
                        aside = move_aside(planned, work)
                        print(f"[{now()}] {name}: an earlier try stopped midway; its files "
                              f"are kept in {aside}, and the run starts again from scratch",
                              flush=True)
                    try:
                        active.append(runner.start(planned.run, work / name, model,
                                                   schedules[name].steps))
                    except RuntimeError as exc:  # its Ray head did not start
                        print(f"[{now()}] {name}: could not start: {exc}", flush=True)
                        failed.append(name)
                for run in list(active):
                    if runner.poll(run):
                        active.remove(run)
                        if not runner.finish(run, spec.out, work, model,
                                             args.keep_checkpoints):
                            failed.append(run.run.name)
                    elif time.monotonic() - run.printed_at > HEARTBEAT_SECONDS:
                        run.print_line()
                if active:
                    time.sleep(POLL_SECONDS)
        except BaseException:
            for run in active:
                runner.stop(run)
            raise
    return failed

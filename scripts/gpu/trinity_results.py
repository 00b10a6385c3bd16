"""Turn what ``trinity_h200.sh collect`` packed into a committed ``results/`` folder.

    python scripts/gpu/trinity_results.py COLLECTED OUT --runs NAME=FOLDER ... [--force]
        [--local LOCAL_OUT]

``COLLECTED`` holds ``<name>.tgz`` per run plus ``gpu_apps.csv`` (the GPU monitor's
per-process memory). ``OUT`` gets one folder per run (event files, ``params.json``, the
config handed to ``tune()``, Trinity's meta files, a log excerpt, Trinity's whole runtime
``Config`` as it printed it, and ``timings.json``: start-up milestones, peak GPU memory per
role and the seconds of every step, read from the log; and where ``collect`` could read the
run's experience buffer, ``samples.jsonl`` and ``buffer_steps.csv`` from ``buffer_samples.py``:
replies of the first and last explore step, numbers per explore step). Beside the run
folders, from *every* run folder in ``OUT`` (so the seeds of later stretches of GPU time join
those already there):
the tidy table (``trinity_h200.csv``), the figures and ETR/TTB/BSF from
``mathagent.results.draw``, the median time of each phase (``phase_times.csv``), the start-up
milestones (``startup.csv``), the peak GPU memory per run and role (``gpu_memory.csv``) and
where each run's effective task ratio comes from (``etr_sources.csv``: Trinity's
``pass_rate_calculator`` where it ran, else the run's ``buffer_steps.csv``; where both exist,
their largest difference).

``--local LOCAL_OUT`` also unpacks ``COLLECTED/local.tgz`` (the ``train-local`` runs with the
engine's settings, ``trinity_h200.sh local``) into ``LOCAL_OUT``: one folder per run, their
tidy table (``train_local.csv``), and the two sources side by side
(``engine_vs_local.png``, ``engine_vs_local.csv``), from every run folder in ``OUT`` and in
``LOCAL_OUT``. A stretch of GPU time that ran no ``train-local`` (no ``local.tgz``) still needs
``--local``: the side by side is then rebuilt from the runs already in ``LOCAL_OUT``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tarfile
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from mathagent import plots, results
from mathagent.launch.commands import LAUNCH_MARK

ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Trinity's log lines and `train`'s own start-up marks (mathagent.launch.commands.mark)
STAMP = re.compile(rf"(?:INFO|WARNING|ERROR|^{LAUNCH_MARK}) (\d\d-\d\d \d\d:\d\d:\d\d) ")
TRAIN_MARK = rf"^{LAUNCH_MARK} \S+ \S+ "
# start-up milestones: (name, pattern of the first log line that marks it)
MILESTONES = (
    ("`train`: config loaded", TRAIN_MARK + "config loaded"),
    ("`train`: preflight passed", TRAIN_MARK + "preflight passed"),
    ("`train`: Ray joined, tune() called", TRAIN_MARK + "Ray joined"),
    ("Ray actors (explorer, trainer) made", r"Finished initializing Explorer"),
    ("trainer workers ready", r"\[trainer\.py:\d+\] workers initialized"),
    ("vLLM actor's first line", r"\(vLLMRolloutModel pid=\d+\)"),
    ("vLLM engine core starts", r"Initializing a V1 LLM engine"),
    ("vLLM worker loads the model", r"Starting to load model"),
    ("vLLM engine ready", r"init engine \(profile, create kv cache, warmup model\) took"),
    ("all rollout models ready", r"All models are ready"),
    # made: its Ray worker started, imported Trinity's explorer and built its model wrapper;
    # ready: its prepare() found the model's server answering
    ("first workflow runner made", r"WorkflowRunner \[.*\]\([\w-]+\) initialized"),
    ("first workflow runner ready", r"WorkflowRunner .* is prepared and ready"),
    ("all workflow runners ready", r"Rollout coordinator is ready"),
    ("step-0 evaluation starts", r"Evaluation at step 0 started"),
    ("step 1 starts", r"Explore step 1 started"),
    ("last step trained", r"Trainer finished"),
)
EXCERPT = re.compile("|".join([
    r"compat\.py", r"Loading weights took", r"torch\.compile took", r"Graph capturing finished",
    r"init engine", r"Evaluation at step \d+ started", r"Explore step \d+ started",
    r"Training at step (1|2) (started|finished)", r"Trainer finished",
    r"Explorer \(explorer\) finished", r"Error|Traceback",
]))
ROLES = {"trainer (FSDP actor + reference)": re.compile(r"\(WorkerDict pid=(\d+)\)"),
         "vLLM engine worker": re.compile(r"\(Worker pid=(\d+)\)")}


def clean(line: str) -> str:
    return ANSI.sub("", line).rstrip()


def log_excerpt(log: str) -> str:
    """The launch report (up to its ``Launching:`` line) and the lines that mark each phase."""
    lines = [clean(x) for x in log.splitlines()]
    end = next((i + 1 for i, x in enumerate(lines) if x.startswith("Launching:")), 0)
    head = [x for x in lines[:end] if "it/s" not in x and "s/it" not in x]
    # the first line of each start-up milestone, then every line that marks a phase
    firsts = {next((i for i in range(end, len(lines))
                    if re.search(pattern, lines[i]) and STAMP.search(lines[i])), None)
              for _, pattern in MILESTONES}
    marks = [x for i, x in enumerate(lines) if i >= end and STAMP.search(x)
             and (i in firsts or EXCERPT.search(x))]
    return "\n".join(head + marks) + "\n"


def runtime_config(log: str) -> str:
    """Trinity's whole ``Config`` as its launcher printed it once every default was filled."""
    lines = [clean(x) for x in log.splitlines()]
    start = next((i for i, x in enumerate(lines) if x.startswith("Config(mode=")), None)
    if start is None:
        return ""
    end = next((i for i in range(start, len(lines)) if lines[i].endswith("stages=[])")),
               len(lines) - 1)
    return "\n".join(lines[start:end + 1]) + "\n"


def stamp(line: str, year: int) -> float | None:
    m = STAMP.search(line)
    if not m:
        return None
    t = datetime.strptime(f"{year}-{m.group(1)}", "%Y-%m-%d %H:%M:%S")
    return t.replace(tzinfo=UTC).timestamp()


def startup(log: str, t0: float) -> dict[str, float]:
    """Minutes from ``train`` to each milestone (log times are the machine's UTC clock)."""
    year = datetime.fromtimestamp(t0, UTC).year
    lines = [clean(x) for x in log.splitlines()]
    out = {}
    for name, pattern in MILESTONES:
        hit = next((x for x in lines if re.search(pattern, x) and stamp(x, year)), None)
        out[name] = round((stamp(hit, year) - t0) / 60, 2) if hit else float("nan")
    return out


def step_seconds(log: str, t0: float) -> pd.Series:
    """Seconds from the start of each explore step to the next one's (the whole step)."""
    year = datetime.fromtimestamp(t0, UTC).year
    starts = {}
    for line in map(clean, log.splitlines()):
        m = re.search(r"Explore step (\d+) started", line)
        if m and stamp(line, year):
            starts.setdefault(int(m.group(1)), stamp(line, year))
    steps = sorted(starts)
    return pd.Series({f"step {a}": starts[b] - starts[a] for a, b in zip(steps, steps[1:], strict=False)})


def gpu_memory(apps: pd.DataFrame, log: str, run: str) -> dict[str, float]:
    """Peak GiB of each GPU process of ``run``, named by the role its pid has in the log."""
    # one sample per process and time: two monitors on one machine write each sample twice,
    # a moment apart (the larger is kept)
    mine = apps[apps["run"] == run].groupby(["t", "pid"], as_index=False)["mib"].max()
    out = {}
    for role, pattern in ROLES.items():
        pids = {int(p) for p in pattern.findall(ANSI.sub("", log))}
        used = mine[mine["pid"].isin(pids)]["mib"]
        out[role] = round(used.max() / 1024, 1) if len(used) else float("nan")
    out["run, all processes (sum at one time)"] = round(
        mine.groupby("t")["mib"].sum().max() / 1024, 1)
    return out


TIMINGS = "timings.json"


def add_run(collected: Path, name: str, dest: Path, apps: pd.DataFrame) -> None:
    """Unpack run ``name`` of ``collected`` into ``dest`` with its excerpt and timings."""
    with tempfile.TemporaryDirectory() as tmp, \
            tarfile.open(collected / f"{name}.tgz") as tar:
        tar.extractall(tmp, filter="data")
        src = Path(tmp) / name
        for need in ("monitor", "params.json", "launched_config.yaml", "train.log",
                     "start_end_epoch.txt"):
            if not (src / need).exists():
                raise FileNotFoundError(f"{collected / name}.tgz holds no {name}/{need} "
                                        "(the run stopped before `train` wrote it?)")
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir()
        shutil.copytree(src / "monitor", dest / "monitor")
        for f in ("params.json", "launched_config.yaml"):
            shutil.copyfile(src / f, dest / f)
        # Trinity writes these after a step: a run stopped before its first has none
        for f in ("explorer_meta.json", "trainer_meta.json"):
            if (src / f).is_file():
                shutil.copyfile(src / f, dest / f)
        # replies of the first and last explore step, the per-step and per-task tables of
        # the experience buffer (scripts/gpu/buffer_samples.py), where collect could read it
        for f in ("samples.jsonl", "buffer_steps.csv", "buffer_tasks.csv"):
            if (src / "samples" / f).is_file():
                shutil.copyfile(src / "samples" / f, dest / f)
        log = (src / "train.log").read_text(errors="replace")
        # "T0 T1" or "T0 T1 running" (packed while the run went on: T1 is no end)
        t0, t1, *state = (src / "start_end_epoch.txt").read_text().split()
        t0, ended = float(t0), float(t1) if state != ["running"] else float("nan")
    (dest / "train_log_excerpt.txt").write_text(log_excerpt(log))
    (dest / "trinity_config_runtime.txt").write_text(runtime_config(log))
    timings = {
        "startup_min": {**startup(log, t0), "train command ends": round((ended - t0) / 60, 2)},
        # from its `train` on: an earlier try of the run on the machine (`again`) has its label
        "gpu_memory_gib": gpu_memory(apps[apps["t"] >= t0], log, name),
        "whole_step_s": step_seconds(log, t0).to_dict(),
    }
    (dest / TIMINGS).write_text(json.dumps(timings, indent=1) + "\n")


#: The tidy table's name in a results folder (``results.draw`` writes it as results.csv).
TIDY = "trinity_h200.csv"
#: What drawing a results folder writes at its top level.
DRAWN = (TIDY, "training_curves.png", "effective_task_ratio.png", "behaviour.png",
         "summary.csv", "per_seed.csv", "metrics_params.json", "start_point.csv")


def remove_undrawn(out: Path, written: set[str], why: dict[str, str | None],
                   otherwise: str) -> None:
    """Remove the :data:`DRAWN` files an earlier call left in ``out`` that this one did not
    write (``written``): they no longer hold. One line each, with ``why[name]`` or
    ``otherwise``."""
    for name in DRAWN:
        if name not in written and (out / name).is_file():
            (out / name).unlink()
            print(f"removed {out / name}: {why.get(name) or otherwise}")


def run_folders(out: Path) -> list[Path]:
    """The run folders of a results folder (those with a ``params.json``), by name."""
    return sorted(d for d in out.iterdir() if (d / "params.json").is_file())


def timing_tables(folders: list[Path]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Start-up minutes, peak GPU memory and median phase seconds, one column per run."""
    starts, memory, phases = {}, {}, {}
    for folder in folders:
        timings = json.loads((folder / TIMINGS).read_text())
        starts[folder.name] = timings["startup_min"]
        memory[folder.name] = timings["gpu_memory_gib"]
        table = results.phase_times(folder)
        if table.empty:   # stopped before its first step: start-up and memory only
            continue
        table.loc["whole step (log: one explore start to the next)"] = \
            pd.Series(timings["whole_step_s"])
        phases[folder.name] = table.drop(columns=["step 0"], errors="ignore").median(axis=1)
    return (pd.DataFrame(starts).rename_axis("minutes from `train` to"),
            pd.DataFrame(memory).rename_axis("peak GPU memory, GiB"),
            pd.DataFrame(phases).round(2).rename_axis("median seconds over steps 1+"))


def add_local_runs(collected: Path, out: Path, force: bool) -> list[Path]:
    """Unpack the train-local runs of ``collected/local.tgz`` into ``out/<selector>_seed<n>``."""
    added = []
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(collected / "local.tgz") as tar:
        tar.extractall(tmp, filter="data")
        work = Path(tmp) / "local" / "work"
        for src in sorted(d for d in work.iterdir() if (d / "metrics.csv").is_file()):
            params = json.loads((src / "params.json").read_text())
            name = f"{params['selector'].replace('_based', '')}_seed{params['seed']}"
            dest = out / name
            if dest.exists() and not force:
                raise FileExistsError(f"{dest} exists; --force replaces it")
            shutil.rmtree(dest, ignore_errors=True)
            # the run folder as train-local left it (collect packed no checkpoints), and its log
            shutil.copytree(src, dest, ignore=shutil.ignore_patterns("checkpoint*"))
            log = work / f"{src.name}.log"
            if log.exists():
                shutil.copyfile(log, dest / "train.log")
            added.append(dest)
    return added


def local_step_times(folders: list[Path]) -> pd.DataFrame:
    """Median seconds per phase of the train-local runs, one column per run."""
    columns = {"time_generate_s": "generation (rollout phase)", "time_score_s": "judge",
               "time_update_s": "training step", "time_step_s": "whole step"}
    out = {}
    for folder in folders:
        t = pd.read_csv(folder / "metrics.csv")
        out[folder.name] = t[t["step"] > 0][list(columns)].median().rename(columns)
    return pd.DataFrame(out).round(2).rename_axis("median seconds over steps 1+")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("collected", type=Path, help="folder with <name>.tgz and gpu_apps.csv")
    ap.add_argument("out", type=Path, help="results folder to write")
    ap.add_argument("--runs", nargs="+", required=True, metavar="NAME=FOLDER",
                    help="collected run name -> folder under OUT")
    ap.add_argument("--force", action="store_true", help="replace existing run folders")
    ap.add_argument("--title", default="Trinity-RFT on one H200",
                    help="figure title; the seeds are appended")
    ap.add_argument("--no-figures", action="store_true",
                    help="no tidy table, figures or metrics (runs of one selector and seed)")
    ap.add_argument("--start-from", nargs="+", type=Path, metavar="RUN",
                    help="runs whose step-0 held-out evaluation measured the weights these "
                         "runs start from (for runs that evaluate no step 0): drawn at step 0 "
                         "and written as start_point.csv")
    ap.add_argument("--local", type=Path, metavar="LOCAL_OUT",
                    help="also unpack local.tgz (train-local runs) into this folder")
    args = ap.parse_args()

    start = None
    if args.start_from and args.no_figures:
        print("error: --start-from is drawn in the figures, which --no-figures leaves out",
              file=sys.stderr)
        return 2
    if args.start_from:
        try:
            start = results.start_point(args.start_from)
        except results.RunError as exc:
            print(f"error: --start-from: {exc}", file=sys.stderr)
            return 2
    drawn_before = args.out / TIDY
    if args.no_figures and drawn_before.is_file():
        print(f"error: {drawn_before} is the tidy table of the runs already drawn there; with "
              "--no-figures it would leave out the runs added now: draw them all again "
              "(without --no-figures, with the --start-from the figure had)", file=sys.stderr)
        return 2
    apps = pd.read_csv(args.collected / "gpu_apps.csv", names=["t", "pid", "mib", "run"])
    args.out.mkdir(parents=True, exist_ok=True)
    specs = [spec.split("=", 1) for spec in args.runs]
    for _name, folder in specs:
        if (args.out / folder).exists() and not args.force:
            print(f"error: {args.out / folder} exists; --force replaces it", file=sys.stderr)
            return 2
    for name, folder in specs:
        try:
            add_run(args.collected, name, args.out / folder, apps)
        except FileNotFoundError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2

    folders = run_folders(args.out)
    startups, memory, split = timing_tables(folders)
    startups.to_csv(args.out / "startup.csv")
    memory.to_csv(args.out / "gpu_memory.csv")
    split.to_csv(args.out / "phase_times.csv")
    try:
        etr = results.etr_sources(folders)
    except results.RunError as exc:
        print(f"error: {exc} (the run folders are in place: --force replaces them)",
              file=sys.stderr)
        return 2
    etr.to_csv(args.out / "etr_sources.csv", index=False)
    stepped = [f for f in folders if not results.phase_times(f).empty]
    if not args.no_figures and len(stepped) < len(folders):
        print(f"no tidy table or figures in {args.out}: "
              f"{', '.join(f.name for f in folders if f not in stepped)} logged no step "
              "(--no-figures says so without this line)")
        # what an earlier call drew leaves the new runs out: gone, not left to mislead
        remove_undrawn(args.out, set(), {}, "drawn without the runs added now")
    elif not args.no_figures:
        table = results.load_runs(folders, progress=False)
        seeds = ", ".join(str(x) for x in sorted(table["seed"].unique()))
        with tempfile.TemporaryDirectory(dir=args.out) as tmp:
            try:
                drawn = results.draw(table, Path(tmp) / "d", eval_name=results.eval_label(table),
                                     smooth=3, title=f"{args.title}, seed(s) {seeds}",
                                     start=start)
            except results.RunError as exc:   # a start these runs do not start from
                print(f"error: --start-from: {exc}", file=sys.stderr)
                return 2
            written = set()
            for name, file in drawn["files"].items():
                target = TIDY if name == "results" else file.name
                shutil.move(str(file), args.out / target)
                written.add(target)
        why = {"start_point.csv": "the figure was drawn without --start-from",
               **dict.fromkeys(("summary.csv", "per_seed.csv", "metrics_params.json"),
                               drawn.get("summary_error"))}
        remove_undrawn(args.out, written, why, "not drawn now")
    print(split.to_string())
    print(startups.to_string())
    print(memory.to_string())
    print(etr.to_string(index=False))
    print(f"wrote {args.out}")

    if args.local:
        if (args.collected / "local.tgz").is_file():
            try:
                add_local_runs(args.collected, args.local, args.force)
            except FileExistsError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
        else:
            print(f"no local.tgz in {args.collected}: the side by side is rebuilt from the "
                  f"train-local runs already in {args.local}")
        local = run_folders(args.local) if args.local.is_dir() else []
        if not local:
            print(f"error: no train-local run folders in {args.local}", file=sys.stderr)
            return 2
        local_table = results.load_runs(local, progress=False)
        local_table.to_csv(args.local / "train_local.csv", index=False)
        local_step_times(local).to_csv(args.local / "step_times.csv")
        engine = results.load_runs(folders, progress=False)
        both = {"Trinity-RFT": engine, "train-local": local_table}
        fig = results.draw_side_by_side(both, title="the engine and its local mirror, "
                                        "the same settings")
        plots.save_figure(fig, "engine_vs_local", args.local)
        results.side_by_side_summary(both).to_csv(args.local / "engine_vs_local.csv",
                                                  index=False)
        print(results.side_by_side_summary(both).to_string())
        print(f"wrote {args.local}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

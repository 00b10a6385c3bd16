"""Lay a finished run into an experiment's results folder, and the folder's timing tables.

A run folder ``OUT/<run>/`` holds what a reader of the run needs and nothing that weighs
gigabytes: the TensorBoard event files (``monitor/``), ``params.json`` (``train``'s record of the
run), the config handed to ``tune()`` (``launched_config.yaml``), Trinity's meta files, a log
excerpt (the launch report and the lines that mark each phase), Trinity's whole runtime
``Config`` as it printed it, ``timings.json`` (start-up milestones, peak GPU memory per role,
the seconds of every step and of vLLM's ``torch.compile`` (compiled, or loaded from its cache),
read from the log, and, where the CPU monitor ran, the CPU cores each role kept busy during
the evaluations and the steps between them) and, from the run's experience buffer
(:mod:`mathagent.experiment.buffer`), ``samples.jsonl``, ``buffer_steps.csv`` and
``buffer_tasks.csv``; where the run was profiled (``MATHAGENT_PROFILE_STEP``,
:mod:`mathagent.step_profile`), ``profile/`` with each profiled call's summary and table (its
trace stays in the work folder). :func:`lay_out` writes it under a hidden name and renames it
into place once whole, so a folder named after a run is a finished run.

Beside the run folders, from *every* run folder in ``OUT`` (:func:`write_tables`): the median
time of each phase (``phase_times.csv``), the start-up milestones (``startup.csv``), the peak
GPU memory per run and role (``gpu_memory.csv``), where each run's effective task ratio
comes from (``etr_sources.csv``) and, for runs with the CPU monitor, the CPU cores busy per
phase and role (``cpu_use.csv``). The figures, tidy table and page are the report's.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pandas as pd

from mathagent import paths, results
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
    r"Directly load the compiled graph", r"Compiling a graph for",
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
    # the log's clock is the machine's local time (Python's logging, `train`'s marks)
    return datetime.strptime(f"{year}-{m.group(1)}", "%Y-%m-%d %H:%M:%S").timestamp()


def startup(log: str, t0: float) -> dict[str, float]:
    """Minutes from ``train`` (Unix time ``t0``) to each milestone."""
    year = datetime.fromtimestamp(t0).year
    lines = [clean(x) for x in log.splitlines()]
    out = {}
    for name, pattern in MILESTONES:
        hit = next((x for x in lines if re.search(pattern, x) and stamp(x, year)), None)
        out[name] = round((stamp(hit, year) - t0) / 60, 2) if hit else float("nan")
    return out


def vllm_compile(log: str) -> dict[str, float | bool]:
    """vLLM's ``torch.compile`` at start: its seconds (``torch.compile took``) and whether it
    loaded its graphs from its compile cache (``Directly load the compiled graph``) rather than
    compiling them; empty where the log has neither (an engine without ``torch.compile``)."""
    took = re.search(r"torch\.compile took ([\d.]+) s", log)
    if took is None:
        return {}
    return {"seconds": float(took.group(1)),
            "from cache": "Directly load the compiled graph" in log}


def step_seconds(log: str, t0: float) -> pd.Series:
    """Seconds from the start of each explore step to the next one's (the whole step)."""
    year = datetime.fromtimestamp(t0).year
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


#: Where an evaluation's window ends: the explorer's weight sync after it (which waits for its
#: results), or the next explore step where no sync is logged.
EVAL_END = re.compile(r"Explorer sync_weights at step \d+ started|Explore step \d+ started")
#: The CPU monitor's row for the whole machine (:class:`mathagent.experiment.runner.CpuMonitor`):
#: its pid and run.
MACHINE_PID, MACHINE_RUN = 0, "*"
#: The phases :func:`cpu_cores` splits a run into.
CPU_PHASES = ("evaluation", "steps between evaluations")


def phase_windows(log: str, t0: float) -> dict[str, list[tuple[float, float]]]:
    """The Unix-time spans of :data:`CPU_PHASES` in ``log``: each held-out evaluation (from
    "Evaluation at step N started" to :data:`EVAL_END`), and the training steps from step 2's
    start to the last step's, less the evaluations."""
    year = datetime.fromtimestamp(t0).year
    lines = [(stamp(x, year), x) for x in map(clean, log.splitlines())]
    lines = [(t, x) for t, x in lines if t is not None]
    evals = []
    for i, (t, line) in enumerate(lines):
        if re.search(r"Evaluation at step \d+ started", line):
            end = next((u for u, x in lines[i + 1:] if EVAL_END.search(x)), None)
            if end is not None:
                evals.append((t, end))
    starts = [t for t, x in lines if re.search(r"Explore step (?!1 )\d+ started", x)]
    steps = []
    if len(starts) > 1:
        cursor = min(starts)
        for a, b in sorted(evals) + [(max(starts), max(starts))]:
            if a > cursor:
                steps.append((cursor, min(a, max(starts))))
            cursor = max(cursor, b)
    return {"evaluation": evals, "steps between evaluations": steps}


def cpu_cores(samples: pd.DataFrame, log: str, run: str, t0: float) -> dict:
    """CPU cores busy on average in each of :data:`CPU_PHASES` of ``run``: per role (all its
    processes, and its busiest process alone) and for the whole machine, from the CPU
    monitor's samples (:class:`mathagent.experiment.runner.CpuMonitor`). Empty without
    samples of the run."""
    mine = samples[(samples["t"] >= t0) & samples["run"].isin([run, MACHINE_RUN])]
    if not (mine["run"] == run).any():
        return {}
    mine = mine.sort_values("t")
    grouped = mine.groupby("pid")
    mine = mine.assign(used=grouped["cpu_s"].diff(), dt=grouped["t"].diff())
    mine = mine[(mine["dt"] > 0) & (mine["used"] >= 0)]
    mine = mine.assign(mid=mine["t"] - mine["dt"] / 2)
    count = samples[samples["run"] == run].groupby("role")["pid"].nunique()
    out = {}
    for phase, spans in phase_windows(log, t0).items():
        inside = pd.Series(False, index=mine.index)
        for a, b in spans:
            inside |= (mine["mid"] >= a) & (mine["mid"] < b)
        part = mine[inside]
        machine = part[part["run"] == MACHINE_RUN]
        seconds = machine["dt"].sum()
        if seconds <= 0:
            continue
        roles = {}
        for role, rows in part.groupby("role"):
            per_pid = rows.groupby("pid")["used"].sum() / seconds
            name = role if role not in count or count[role] == 1 else \
                f"{role} ({count[role]} processes)"
            roles[name] = {"all": round(float(per_pid.sum()), 2),
                           "busiest": round(float(per_pid.max()), 2)}
        out[phase] = dict(sorted(roles.items(), key=lambda kv: -kv[1]["all"]))
    return out


TIMINGS = "timings.json"
#: What a finished run folder always holds (a folder without them is not one).
RUN_FILES = ("params.json", TIMINGS)
#: The files :mod:`mathagent.experiment.buffer` writes from the experience buffer.
BUFFER_FILES = ("samples.jsonl", "buffer_steps.csv", "buffer_tasks.csv")
#: Seconds the buffer's samples may take before the run is laid out without them.
BUFFER_SECONDS = 300


@dataclass(frozen=True)
class Finished:
    """What a finished run left: Trinity's job folder (``params.json``, ``monitor/``,
    ``buffer/``), the config ``train`` handed to ``tune()``, the log of ``train`` and its start
    and end (Unix times); ``profile``, the folder of its step profile, if any."""

    name: str
    job: Path
    launched_config: Path
    log: Path
    started: float
    ended: float
    profile: Path | None = None


def lay_out(run: Finished, out: Path, apps: pd.DataFrame, tokenizer: Path | None = None,
            buffer_seconds: float = BUFFER_SECONDS, cpu: pd.DataFrame | None = None) -> Path:
    """Write ``out/<run.name>/`` from ``run`` (see the module's docstring); return it.

    ``apps`` is the GPU monitor's table (``t, pid, mib, run``: every process's memory, with
    the run its environment names); ``cpu``, the CPU monitor's (:func:`read_cpu`), if any. The folder is written as ``out/.<name>.tmp`` and renamed
    into place at the end; an existing ``out/<name>`` is a :class:`FileExistsError` (a partial
    folder is moved aside before its run starts again, never written over).
    """
    dest = out / run.name
    if dest.exists():
        raise FileExistsError(f"{dest} exists; a run folder is never written over")
    for need in (run.job / "params.json", run.job / "monitor", run.launched_config, run.log):
        if not need.exists():
            raise FileNotFoundError(f"{need}: missing (the run stopped before `train` wrote "
                                    "it?)")
    tmp = out / f".{run.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    shutil.copytree(run.job / "monitor", tmp / "monitor",
                    ignore=shutil.ignore_patterns("*.log"))
    shutil.copyfile(run.job / "params.json", tmp / "params.json")
    shutil.copyfile(run.launched_config, tmp / "launched_config.yaml")
    # Trinity writes these after a step: a run stopped before its first has none
    for f in ("explorer_meta.json", "trainer_meta.json"):
        if (run.job / f).is_file():
            shutil.copyfile(run.job / f, tmp / f)
    if run.profile is not None and run.profile.is_dir():
        shutil.copytree(run.profile, tmp / "profile",
                        ignore=shutil.ignore_patterns("*.trace.json.gz"))
    said = buffer_samples(run.job, tmp, tokenizer, buffer_seconds)
    print(f"[{datetime.now():%H:%M:%S}] {run.name}: {said}", flush=True)
    log = run.log.read_text(errors="replace")
    (tmp / "train_log_excerpt.txt").write_text(log_excerpt(log))
    (tmp / "trinity_config_runtime.txt").write_text(runtime_config(log))
    timings = {
        "startup_min": {**startup(log, run.started),
                        "train command ends": round((run.ended - run.started) / 60, 2)},
        "gpu_memory_gib": gpu_memory(apps[apps["t"] >= run.started], log, run.name),
        "whole_step_s": step_seconds(log, run.started).to_dict(),
        "vllm_compile": vllm_compile(log),
    }
    cores = cpu_cores(cpu, log, run.name, run.started) if cpu is not None else {}
    if cores:
        timings["cpu_cores"] = cores
    # last: a folder with its timings is whole
    (tmp / TIMINGS).write_text(json.dumps(timings, indent=1) + "\n")
    tmp.rename(dest)
    return dest


def buffer_samples(job: Path, dest: Path, tokenizer: Path | None, seconds: float) -> str:
    """Write :data:`BUFFER_FILES` into ``dest`` from the run's experience buffer, in a process
    of its own (it imports Trinity's buffer classes) of at most ``seconds``; one line says
    what came of it. A run laid out without them says why."""
    cmd = [sys.executable, "-m", "mathagent.experiment.buffer", str(job), str(dest)]
    if tokenizer is not None and Path(tokenizer).is_dir():
        cmd += ["--tokenizer", str(tokenizer)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds,
                              cwd=paths.REPO_ROOT)
    except subprocess.TimeoutExpired:
        said, ok = f"stopped after {seconds:.0f} s", False
    else:
        lines = (done.stdout + done.stderr).strip().splitlines()
        said, ok = (lines[-1] if lines else f"exit {done.returncode}"), done.returncode == 0
    if ok:
        return said
    for name in BUFFER_FILES:
        (dest / name).unlink(missing_ok=True)
    return f"no buffer samples: {said}"


def read_apps(file: Path) -> pd.DataFrame:
    """The GPU monitor's table (``t, pid, mib, run``); empty where there was no monitor."""
    if not file.is_file() or file.stat().st_size == 0:
        return pd.DataFrame({"t": pd.Series(dtype=float), "pid": pd.Series(dtype=int),
                             "mib": pd.Series(dtype=float), "run": pd.Series(dtype=str)})
    return pd.read_csv(file, names=["t", "pid", "mib", "run"])


def read_cpu(file: Path) -> pd.DataFrame:
    """The CPU monitor's table (``t, pid, role, cpu_s, run``); empty where there was none."""
    names = ["t", "pid", "role", "cpu_s", "run"]
    if not file.is_file() or file.stat().st_size == 0:
        return pd.DataFrame({n: pd.Series(dtype=float if n in ("t", "cpu_s") else
                                          int if n == "pid" else str) for n in names})
    # a row cut short by a kill mid-write is dropped
    return pd.read_csv(file, names=names, on_bad_lines="skip").dropna()


def run_folders(out: Path) -> list[Path]:
    """The finished run folders of a results folder (those with :data:`RUN_FILES`), by name."""
    if not out.is_dir():
        return []
    return sorted(d for d in out.iterdir() if d.is_dir() and not d.name.startswith(".")
                  and all((d / f).is_file() for f in RUN_FILES))


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


def cpu_table(folders: list[Path]) -> pd.DataFrame:
    """The runs' CPU cores busy per phase and role (:func:`cpu_cores`), one column per run
    that had the CPU monitor."""
    columns = {}
    for folder in folders:
        cores = json.loads((folder / TIMINGS).read_text()).get("cpu_cores", {})
        columns[folder.name] = pd.Series({
            (phase, role, f"cores, {which} process" if which == "busiest" else "cores, all"):
                value
            for phase, roles in cores.items() for role, pair in roles.items()
            for which, value in pair.items()}, dtype=float)
    table = pd.DataFrame(columns)
    if not table.empty:
        table.index = table.index.set_names(["phase", "role", "measure"])
    return table


#: The folder's tables, from every run folder (:func:`write_tables`).
TABLES = ("startup.csv", "gpu_memory.csv", "phase_times.csv", "etr_sources.csv", "cpu_use.csv")


def write_tables(out: Path) -> list[Path]:
    """Write :data:`TABLES` into ``out`` from every run folder there; return them."""
    folders = run_folders(out)
    startups, memory, split = timing_tables(folders)
    written = []
    for name, table in zip(TABLES[:3], (startups, memory, split), strict=True):
        table.to_csv(out / name)
        written.append(out / name)
    results.etr_sources(folders).to_csv(out / TABLES[3], index=False)
    written.append(out / TABLES[3])
    cpu = cpu_table(folders)
    if not cpu.empty:   # only where a run had the CPU monitor
        cpu.to_csv(out / TABLES[4])
        written.append(out / TABLES[4])
    return written

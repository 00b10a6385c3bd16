"""Run one (arm, seed) of an experiment on this machine's GPU, and lay it out when it ends.

Each run gets a Ray head of its own (every CPU and the GPU), started before its ``train``
and stopped after it, rather than one head shared by all runs. Trinity-RFT's colocated mode
gives each run's explorer and trainer the whole GPU and names their actors per job, and a
run killed midway (an out-of-memory error, a failed weight sync) can leave actors that hold
GPU memory and names on its head: on a head of its own they go when the head is stopped, so
they never block the next run, and runs side by side (``--parallel``) never see each other's
actors. A head starts in about 20 s, little against a run's minutes.

A run works in ``WORK/<run>/``: ``train.log``, ``state.json`` (its stage and, while it goes,
the processes it started), ``runs/`` (``train``'s records), ``ckpt/`` (Trinity's job folder:
checkpoints, event files, the experience buffer); vLLM's compile cache is a folder the run
holds while it goes, kept for the runs after it (:mod:`mathagent.experiment.vllm_cache`). The
environment of the head, so of every actor, and of ``train`` is :func:`run_env`. If this
process dies, even by SIGKILL, a watchdog (:func:`mathagent.reaper.reap_when_gone`) stops the
run's ``train`` and head, so the GPU is free for the next try. Once every step is trained,
:func:`mathagent.experiment.layout.lay_out` writes the run's folder in the results.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from mathagent import paths, results
from mathagent.experiment import vllm_cache
from mathagent.experiment.layout import (
    MACHINE_PID,
    MACHINE_RUN,
    Finished,
    lay_out,
    read_apps,
    read_cpu,
    write_tables,
)
from mathagent.experiment.progress import LogFollower, Progress, now, problem_lines
from mathagent.results.spec import Run

#: Every run's environment: NVLink multicast off (NCCL, torch's symmetric memory and NVSHMEM:
#: a one-GPU run has no use for it and some machines fail to set it up), no usage reports, no
#: hub, unbuffered output for the log, and Trinity's explorer prepared beside the trainer's
#: construction (``trinity-early-explorer`` in :mod:`mathagent.compat`).
RUN_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
           "NVSHMEM_DISABLE_NVLS": "1", "RAY_USAGE_STATS_ENABLED": "0",
           "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "MATHAGENT_EARLY_EXPLORER": "1"}
#: The variable naming a process's run, which the GPU monitor reads from its environment.
RUN_LABEL = "MATHAGENT_RUN_LABEL"
#: Seconds a run that logged its failure is given to end by itself before it is stopped.
FAILED_GRACE = 30.0
STATE = "state.json"
GPU_APPS = "gpu_apps.csv"
CPU_SAMPLES = "cpu_samples.csv"


def run_env(run: Run, folder: Path, model: Path, cache: Path) -> dict[str, str]:
    """The variables of ``run``'s head and ``train`` (on top of this process's): the spec's
    levers (its ``env``) among them, and vLLM's compile cache in ``cache``."""
    return {**RUN_ENV, **dict(run.env), RUN_LABEL: run.name, "MATHAGENT_RUNS": str(folder / "runs"),
            "TRINITY_CHECKPOINT_ROOT_DIR": str(folder / "ckpt"),
            "TRINITY_MODEL_PATH": str(model), "VLLM_CACHE_ROOT": str(cache)}


def train_command(run: Run, ray_address: str) -> list[str]:
    """``python -m mathagent train`` for ``run`` on the head at ``ray_address``."""
    return [sys.executable, "-m", "mathagent", "train", "--config", str(run.config),
            "--compare", "none", "--ray-address", ray_address, *run.overrides]


def write_state(folder: Path, **state) -> None:
    file = folder / STATE
    old = json.loads(file.read_text()) if file.is_file() else {}
    file.write_text(json.dumps({**old, **state}, indent=1) + "\n")


def read_state(folder: Path) -> dict:
    file = folder / STATE
    try:
        return json.loads(file.read_text()) if file.is_file() else {}
    except ValueError:
        return {}


class _Monitor:
    """A thread that, every ``interval`` seconds until the ``with`` block ends, appends the
    rows of :meth:`sample` to ``file``; it does nothing where :meth:`available` is false."""

    def __init__(self, file: Path, interval: float = 5.0) -> None:
        self.file, self.interval = file, interval
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def available(self) -> bool:
        raise NotImplementedError

    def sample(self) -> list[str]:
        raise NotImplementedError

    def __enter__(self):
        if self.available():
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join(timeout=30)

    def _loop(self) -> None:
        while not self.stopped.is_set():
            rows = self.sample()
            if rows:
                with open(self.file, "a") as fh:
                    fh.writelines(rows)
            self.stopped.wait(self.interval)


class GpuMonitor(_Monitor):
    """Every ``interval`` seconds, each GPU process's memory and the run its environment
    names (:data:`RUN_LABEL`), appended to ``file`` as ``t, pid, MiB, run`` (what
    :func:`mathagent.experiment.layout.gpu_memory` reads). Does nothing without nvidia-smi."""

    def available(self) -> bool:
        return shutil.which("nvidia-smi") is not None

    def sample(self) -> list[str]:
        try:
            out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                                  "--format=csv,noheader,nounits"], capture_output=True,
                                 text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        t, rows = int(time.time()), []
        for line in out.splitlines():
            pid, _, mib = (x.strip() for x in line.partition(","))
            if pid.isdigit() and mib.isdigit():
                rows.append(f"{t},{pid},{mib},{label_of(int(pid))}\n")
        return rows


class CpuMonitor(_Monitor):
    """Every ``interval`` seconds, the CPU seconds each process of a run (one whose
    environment names it, :data:`RUN_LABEL`) has used since it started, appended to ``file``
    as ``t, pid, role, cpu_s, run`` (what :func:`mathagent.experiment.layout.cpu_cores`
    reads), and the machine's busy CPU seconds as pid :data:`MACHINE_PID`, run
    :data:`MACHINE_RUN`, role ``machine, N cores``. A process's seconds include those of the
    children it has waited for: a workflow runner's include its Python tool's sandboxes,
    which live too briefly to be sampled themselves. ``role`` is the process's title (Ray
    and vLLM name theirs: ``ray::WorkflowRunner``, ``VLLM::EngineCore``). Linux only
    (``/proc``); does nothing elsewhere."""

    #: Seconds between samples.
    INTERVAL = 2.0

    def __init__(self, file: Path, interval: float | None = None) -> None:
        super().__init__(file, interval or self.INTERVAL)
        self.labels: dict[tuple[int, str], str] = {}   # (pid, start time) -> run or ""
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.cores = os.cpu_count() or 1

    def available(self) -> bool:
        return Path("/proc/stat").is_file()

    def sample(self) -> list[str]:
        t = round(time.time(), 2)
        rows = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
                key = (int(entry.name), fields[19])  # pid and its start time
                if key not in self.labels:
                    self.labels[key] = label_of(key[0]).replace(",", " ")
                run = self.labels[key]
                if run == "?":
                    continue
                ticks = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
                title = (entry / "cmdline").read_bytes()
            except (OSError, IndexError, ValueError):
                continue   # gone since it was listed
            rows.append(f"{t},{key[0]},{role_of(title)},{ticks / self.tick:.2f},{run}\n")
        try:
            cpu = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
            busy = sum(int(x) for i, x in enumerate(cpu) if i not in (3, 4))  # not idle, iowait
        except (OSError, IndexError, ValueError):
            return rows
        rows.append(f"{t},{MACHINE_PID},machine ({self.cores} cores),{busy / self.tick:.2f},"
                    f"{MACHINE_RUN}\n")
        return rows


def role_of(cmdline: bytes) -> str:
    """A process's role from its command line: the title Ray or vLLM gave it (``ray::Name``,
    ``VLLM::Name``, without the method it runs), else its program and, for Python, the
    module or script it runs."""
    args = [a for a in cmdline.decode(errors="replace").replace("\0", " ").split() if a]
    if not args:
        return "?"
    first = args[0]
    if first.startswith(("ray::", "VLLM::")):
        return re.split(r"[.(\[]", first)[0]
    name = os.path.basename(first)
    if name.startswith("python") and len(args) > 1:
        rest = args[1:]
        while rest and rest[0].startswith("-") and rest[0] != "-m":
            rest = rest[1:]
        if rest[:1] == ["-m"] and len(rest) > 1:
            return f"{name} -m {rest[1]}"
        if rest:
            return f"{name} {os.path.basename(rest[0])}"
    return name


def label_of(pid: int) -> str:
    """The :data:`RUN_LABEL` in process ``pid``'s environment, or ``?``."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return "?"
    prefix = f"{RUN_LABEL}=".encode()
    return next((v[len(prefix):].decode(errors="replace") for v in environ
                 if v.startswith(prefix)), "?")


def gpu_total_mib() -> int | None:
    """The first GPU's memory in MiB (nvidia-smi), or None without one."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total",
                              "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, timeout=30).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return int(out[0]) if out and out[0].isdigit() else None


@dataclass
class Active:
    """A run that goes on: its folder, head, ``train`` process, log and progress."""

    run: Run
    folder: Path
    head: object
    proc: subprocess.Popen
    log: LogFollower
    progress: Progress
    started: float
    cache: vllm_cache.Slot
    failed_at: float | None = None
    #: when its last progress line was printed (time.monotonic())
    printed_at: float = 0.0

    def print_line(self) -> None:
        print(self.progress.line(), flush=True)
        self.printed_at = time.monotonic()


def start(run: Run, folder: Path, model: Path, steps: int) -> Active:
    """Start ``run`` in ``folder`` (made here, empty): its Ray head, then ``train``."""
    from mathagent.launch.ray_head import start_ray_head
    from mathagent.reaper import reap_when_gone, record

    folder.mkdir(parents=True)
    cache, head = vllm_cache.claim(), None
    try:
        env = run_env(run, folder, model, cache.folder)
        write_state(folder, stage="starting", run=run.name, config=str(run.config),
                    overrides=list(run.overrides), model=str(model),
                    vllm_cache=str(cache.folder))
        head = start_ray_head(num_cpus=None, num_gpus=None, object_store_memory=4 * 1024**3,
                              env=env)
        write_state(folder, ray_address=head.address, ray_head=head.to_json())
        log = folder / "train.log"
        command = train_command(run, head.address)
        with open(log, "w") as fh:
            fh.write(f"# {' '.join(command)}\n")
            fh.flush()
            proc = subprocess.Popen(command, cwd=paths.REPO_ROOT, env={**os.environ, **env},
                                    stdout=fh, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
    except BaseException:   # nothing of the run goes on: its head stopped, its cache free
        if head is not None:
            head.stop()
        cache.release()
        raise
    started = time.time()
    # if this process dies, the watchdog stops what the run started
    reap_when_gone([*head.started, *record([proc.pid])])
    write_state(folder, stage="training", started=started, train_pid=proc.pid)
    print(f"[{now()}] {run.name}: started ({run.config.name}, Ray head {head.address}, "
          f"log {log})", flush=True)
    return Active(run, folder, head, proc, LogFollower(log), Progress(run.name, steps), started,
                  cache, printed_at=time.monotonic())


def poll(active: Active) -> bool:
    """Read the run's new log lines, print its progress when it moved; True once it ended.
    A run that logged its failure and lives on past :data:`FAILED_GRACE` is stopped."""
    from mathagent.reaper import stop_process_group

    moved = active.progress.feed(active.log.lines())
    moved |= active.progress.read_accuracy(active.folder / "ckpt")
    if moved:
        active.print_line()
    if active.proc.poll() is not None:
        return True
    if active.progress.error:
        active.failed_at = active.failed_at or time.monotonic()
        if time.monotonic() - active.failed_at > FAILED_GRACE:
            print(f"[{now()}] {active.run.name}: stopping its `train` (it logged its failure "
                  "and did not end)", flush=True)
            stop_process_group(active.proc, grace=30)
            return True
    return False


def stop(active: Active) -> None:
    """Stop the run's ``train`` (its process group) and its Ray head."""
    from mathagent.reaper import stop_process_group

    if active.proc.poll() is None:
        stop_process_group(active.proc, grace=30)
    active.head.stop()
    active.cache.release()


def finish(active: Active, out: Path, work: Path, model: Path,
           keep_checkpoints: bool = False) -> bool:
    """After ``train`` ended: stop the head; lay out a run that trained every step (and
    rewrite the folder's tables); True when it did. A run that did not is left in its folder
    (the next call moves it aside and starts it again) with one line saying why."""
    ended = time.time()
    active.progress.feed(active.log.lines())
    active.progress.read_accuracy(active.folder / "ckpt")
    active.head.stop()
    active.cache.release()
    run, progress = active.run, active.progress
    code = active.proc.returncode
    if not progress.done or progress.error:
        why = progress.error or f"`train` exited with {code} after {progress.trained} of " \
                                f"{progress.steps} steps"
        write_state(active.folder, stage="failed", ended=ended, why=why)
        print(f"[{now()}] {run.name}: did not finish: {why}" +
              (f"; {progress.cause}" if progress.cause else "") +
              f" (log {active.folder / 'train.log'})", flush=True)
        log = (active.folder / "train.log").read_text(errors="replace")
        for line in problem_lines(log):
            print(f"    {line[:300]}", flush=True)
        return False
    records = sorted((active.folder / "runs" / "train").glob("*/params.json"))
    if not records:
        print(f"[{now()}] {run.name}: `train` left no params.json under "
              f"{active.folder / 'runs'}; not laid out", flush=True)
        return False
    params = json.loads(records[-1].read_text())
    if "checkpoint_job_dir" not in params:
        print(f"[{now()}] {run.name}: {records[-1]} names no checkpoint_job_dir; not laid out",
              flush=True)
        return False
    finished = Finished(run.name, Path(params["checkpoint_job_dir"]),
                        records[-1].with_name("trinity_config.yaml"),
                        active.folder / "train.log", active.started, ended,
                        profile=active.folder / "runs" / "profile")
    try:
        dest = lay_out(finished, out, read_apps(work / GPU_APPS), tokenizer=model,
                      cpu=read_cpu(work / CPU_SAMPLES))
    except (OSError, ValueError) as exc:   # its files stay; the next call starts it again
        print(f"[{now()}] {run.name}: trained, but could not be laid out: {exc}", flush=True)
        return False
    try:
        write_tables(out)
    except results.RunError as exc:   # the run folder is whole; the tables can be redone
        print(f"[{now()}] {run.name}: the folder's tables were not rewritten: {exc}",
              flush=True)
    write_state(active.folder, stage="laid out", ended=ended, laid_out=str(dest))
    if not keep_checkpoints:
        removed = remove_checkpoints(finished.job)
        if removed:
            print(f"[{now()}] {run.name}: removed its {removed / 1e9:.1f} GB of checkpoints "
                  f"(--keep-checkpoints keeps them)", flush=True)
    accuracy = progress.accuracy
    print(f"[{now()}] {run.name}: finished {progress.trained} steps in "
          f"{(ended - active.started) / 60:.1f} min"
          + (f", held-out accuracy {accuracy[1]:.3f} at step {accuracy[0]}" if accuracy else "")
          + f"; laid out in {dest}" + (f" (`train` exited with {code})" if code else ""),
          flush=True)
    return True


def remove_checkpoints(job: Path) -> int:
    """Remove the ``global_step_*`` folders of Trinity's job folder; return the bytes."""
    size = 0
    for folder in sorted(job.glob("global_step_*")):
        size += sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        shutil.rmtree(folder)
    return size

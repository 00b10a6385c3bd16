"""Laying out a finished run (:mod:`mathagent.experiment.layout`) from real committed runs'
files: the event files and records of ``results/trinity_qwen/bots_seed1`` (the experiment's
third arm) and ``results/trinity_h200/difficulty_seed0``, with their log excerpt or a
log written for the test (so its timings are known), a GPU monitor's table and, where a test
needs one, an experience buffer written by Trinity's own code.
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_experiment_buffer import three_steps, write_buffer

from mathagent import paths, results
from mathagent.experiment.layout import (
    Finished,
    cpu_cores,
    lay_out,
    read_apps,
    read_cpu,
    run_folders,
    write_tables,
)

QWEN_RUN = paths.RESULTS_DIR / "trinity_qwen" / "bots_seed1"
RUN_40 = paths.RESULTS_DIR / "trinity_h200" / "difficulty_seed0"
NO_APPS = read_apps(Path("/nonexistent"))


def job_from(committed: Path, tmp: Path, log: str) -> Finished:
    """A job folder, launched config and log holding what ``committed`` was laid out from."""
    job = tmp / "ckpt" / "Project" / "Name"
    shutil.copytree(committed / "monitor", job / "monitor")
    for name in ("params.json", "explorer_meta.json", "trainer_meta.json"):
        if (committed / name).is_file():
            shutil.copyfile(committed / name, job / name)
    launched = tmp / "runs" / "train" / "20261206-091007" / "trinity_config.yaml"
    launched.parent.mkdir(parents=True)
    shutil.copyfile(committed / "launched_config.yaml", launched)
    (tmp / "train.log").write_text(log)
    return Finished(committed.name, job, launched, tmp / "train.log", 0.0, 0.0)


def test_a_committed_run_lays_out_as_it_was_committed(tmp_path):
    """bots_seed1's files laid out again: the same tidy table, start-up milestones and step
    times as the committed folder (its excerpt keeps every line they are read from)."""
    committed = json.loads((QWEN_RUN / "timings.json").read_text())
    # `train` began 0.05 minutes before its "config loaded" mark (committed: 0.05)
    mark = next(x for x in (QWEN_RUN / "train_log_excerpt.txt").read_text().splitlines()
                if x.startswith("launch ") and "config loaded" in x)
    t0 = datetime.strptime(f"2026-{mark.split()[1]} {mark.split()[2]}", "%Y-%m-%d %H:%M:%S")
    started = t0.timestamp() - 0.05 * 60
    run = job_from(QWEN_RUN, tmp_path, (QWEN_RUN / "train_log_excerpt.txt").read_text())
    run = Finished(run.name, run.job, run.launched_config, run.log, started,
                   started + committed["startup_min"]["train command ends"] * 60)
    out = tmp_path / "out"
    dest = lay_out(run, out, NO_APPS)
    assert dest == out / "bots_seed1" and run_folders(out) == [dest]
    assert not list(out.glob(".*"))   # the hidden folder it was written as is gone
    timings = json.loads((dest / "timings.json").read_text())
    assert timings["startup_min"] == pytest.approx(committed["startup_min"], nan_ok=True)
    assert timings["whole_step_s"] == committed["whole_step_s"]
    # its excerpt: "torch.compile took 16.71 s in total", and no graph loaded from the cache
    assert timings["vllm_compile"] == {"seconds": 16.71, "from cache": False}
    pd.testing.assert_frame_equal(results.read_run(dest).drop(columns="run"),
                                  results.read_run(QWEN_RUN).drop(columns="run"))
    for name in ("params.json", "launched_config.yaml", "explorer_meta.json",
                 "trainer_meta.json"):
        assert (dest / name).read_bytes() == (QWEN_RUN / name).read_bytes(), name
    assert (dest / "train_log_excerpt.txt").read_text() == \
        (QWEN_RUN / "train_log_excerpt.txt").read_text()
    # the folder's tables from its one run: the committed phase times of that run
    write_tables(out)
    phases = pd.read_csv(out / "phase_times.csv", index_col=0)["bots_seed1"]
    committed_phases = pd.read_csv(QWEN_RUN.parent / "phase_times.csv", index_col=0)
    pd.testing.assert_series_equal(phases, committed_phases["bots_seed1"])
    # never written over
    with pytest.raises(FileExistsError, match="never written over"):
        lay_out(run, out, NO_APPS)


def test_a_profiled_run_carries_its_profile_summaries_and_tables_not_its_traces(tmp_path):
    run = job_from(QWEN_RUN, tmp_path, (QWEN_RUN / "train_log_excerpt.txt").read_text())
    profile = tmp_path / "runs" / "profile"
    profile.mkdir(parents=True)
    for name in ("infer_batch_call3.json", "infer_batch_call3.txt",
                 "infer_batch_call3.trace.json.gz"):
        (profile / name).write_text(name)
    run = Finished(run.name, run.job, run.launched_config, run.log, 0.0, 0.0, profile=profile)
    dest = lay_out(run, tmp_path / "out", NO_APPS, buffer_seconds=1)
    assert sorted(p.name for p in (dest / "profile").iterdir()) == [
        "infer_batch_call3.json", "infer_batch_call3.txt"]
    # a run without a profile has no profile folder
    unprofiled = Finished("plain", run.job, run.launched_config, run.log, 0.0, 0.0,
                          profile=tmp_path / "nowhere")
    assert not (lay_out(unprofiled, tmp_path / "out", NO_APPS, buffer_seconds=1)
                / "profile").exists()


def _log_line(t: datetime, text: str, actor: str = "(Explorer pid=1)") -> str:
    return f"\x1b[36m{actor}\x1b[0m INFO {t:%m-%d %H:%M:%S} [x.py:1] {text}"


def test_timings_memory_and_buffer_of_a_run_from_its_log_monitor_and_buffer(tmp_path):
    t0 = datetime(2026, 12, 1, 12, 0, 0)

    def at(seconds: float) -> datetime:
        return t0 + timedelta(seconds=seconds)

    log = "\n".join([
        "Config configs/x.yaml", "Preflight:", "  ok    all good",
        "Launching: TensorBoard logs under somewhere",
        _log_line(at(60), "workers initialized", "(Trainer pid=2)").replace("[x.py:1]",
                                                                           "[trainer.py:436]"),
        _log_line(at(120), "init engine (profile, create kv cache, warmup model) took 9 s",
                  "(vLLMRolloutModel pid=3) (EngineCore pid=4)"),
        _log_line(at(150), "WorkflowRunner [explorer_runner_0] is prepared and ready",
                  "(WorkflowRunner pid=6)"),
        "\x1b[36m(WorkflowRunner pid=6)\x1b[0m react_agent: a Traceback-looking model reply",
        _log_line(at(180), "Evaluation at step 0 started."),
        _log_line(at(210), "Explore step 1 started."),
        _log_line(at(226), "Explore step 2 started."),
        _log_line(at(244), "Explore step 3 started."),
        _log_line(at(300), "> Trainer finished.", "(Trainer pid=2)"),
        "\x1b[36m(WorkerDict pid=10)\x1b[0m INFO:2026 Saved", "(Worker pid=11) loading",
    ]) + "\n"
    run = job_from(RUN_40, tmp_path, log)
    start = t0.timestamp()
    run = Finished("difficulty_seed42", run.job, run.launched_config, run.log, start,
                   start + 310)
    write_buffer(run.job, three_steps())
    stamp = int(start)
    apps = tmp_path / "gpu_apps.csv"
    apps.write_text(
        f"{stamp},10,2048,difficulty_seed42\n{stamp},11,1024,difficulty_seed42\n"
        f"{stamp + 5},10,4096,difficulty_seed42\n{stamp + 5},11,1024,difficulty_seed42\n"
        f"{stamp + 5},99,9999,other\n"
        # a second monitor on the machine: the same sample twice, a moment apart
        f"{stamp + 5},10,3900,difficulty_seed42\n"
        # an earlier try of the run on the machine, before this one's `train`
        f"{stamp - 60},7,70000,difficulty_seed42\n")
    out = tmp_path / "out"
    dest = lay_out(run, out, read_apps(apps))
    write_tables(out)
    startup = pd.read_csv(out / "startup.csv", index_col=0)["difficulty_seed42"]
    assert startup["trainer workers ready"] == 1.0
    assert startup["vLLM engine ready"] == 2.0
    assert startup["step 1 starts"] == 3.5
    assert startup["train command ends"] == pytest.approx(310 / 60, abs=0.01)
    memory = pd.read_csv(out / "gpu_memory.csv", index_col=0)["difficulty_seed42"]
    assert memory["trainer (FSDP actor + reference)"] == 4.0  # pid 10, its peak
    assert memory["vLLM engine worker"] == 1.0
    # other runs and an earlier try not counted, a process's sample counted once
    assert memory["run, all processes (sum at one time)"] == 5.0
    phases = pd.read_csv(out / "phase_times.csv", index_col=0)["difficulty_seed42"]
    assert phases["whole step (log: one explore start to the next)"] == 17.0  # 16 s, 18 s
    assert phases["rollout phase"] > 0
    excerpt = (dest / "train_log_excerpt.txt").read_text()
    assert excerpt.startswith("Config configs/x.yaml\nPreflight:")
    assert "Explore step 1 started" in excerpt and "Explore step 3 started" in excerpt
    assert "react_agent" not in excerpt and "\x1b" not in excerpt
    assert json.loads((dest / "timings.json").read_text())["whole_step_s"] == {
        "step 1": 16.0, "step 2": 18.0}
    # the experience buffer's samples and tables, not the buffer itself
    assert len((dest / "samples.jsonl").read_text().splitlines()) == 6 + 2
    assert (dest / "buffer_steps.csv").read_text().splitlines()[1].startswith(
        "1,0,6,3,5,0.5,")
    assert (dest / "buffer_tasks.csv").is_file()
    assert not list(dest.rglob("*.db")) and not (dest / "buffer").exists()
    # its effective task ratio is Trinity's (pass_rate_calculator ran on its 40 steps)
    etr = pd.read_csv(out / "etr_sources.csv").iloc[0]
    assert (etr["run"], etr["source"], etr["steps_pass_rate_calculator"]) == \
        ("difficulty_seed42", "pass_rate_calculator", 40)


def _train_marks(t0: datetime, seconds: dict[str, float], monkeypatch, capsys) -> list[str]:
    """The lines ``train``'s own :func:`~mathagent.launch.commands.mark` prints, ``seconds``
    after ``t0``."""
    import time as real_time

    from mathagent.launch import commands

    class Clock:
        now = t0.timestamp()
        strftime = staticmethod(real_time.strftime)
        localtime = staticmethod(real_time.localtime)

        @classmethod
        def time(cls) -> float:
            return cls.now

    monkeypatch.setattr(commands, "time", Clock)
    capsys.readouterr()
    for what, after in seconds.items():
        Clock.now = t0.timestamp() + after
        commands.mark(what, t0.timestamp())
    return capsys.readouterr().out.splitlines()


def test_a_run_stopped_before_its_first_step_keeps_its_start_up_split(tmp_path, monkeypatch,
                                                                       capsys):
    """A run that never reached step 1 (no Trinity meta files, no steps) is laid out with
    its event files, start-up milestones and memory; `train`'s own marks split the time
    before Trinity's actors exist."""
    t0 = datetime(2026, 12, 1, 12, 0, 0)

    def at(seconds: float) -> datetime:
        return t0 + timedelta(seconds=seconds)

    lines = _train_marks(t0, {"config loaded": 9, "preflight passed": 21,
                              "Ray joined, tune() called": 27}, monkeypatch, capsys)
    config, preflight, tune = lines
    log = "\n".join([
        config, "Config configs/x.yaml", preflight, "Launching: TensorBoard logs under somewhere",
        tune,
        _log_line(at(60), "Finished initializing Explorer."),
        _log_line(at(111), "workers initialized", "(Trainer pid=2)").replace("[x.py:1]",
                                                                            "[trainer.py:436]"),
        _log_line(at(135), "The global random seed is set to 0.", "(vLLMRolloutModel pid=3)"),
        _log_line(at(180), "Initializing a V1 LLM engine (v0.23.0) with config: ...",
                  "(vLLMRolloutModel pid=3) (EngineCore pid=4)"),
        _log_line(at(207), "Starting to load model /m...", "(vLLMRolloutModel pid=3) (Worker pid=5)"),
        _log_line(at(240), "torch.compile took 27.46 s in total",
                  "(vLLMRolloutModel pid=3) (Worker pid=5)"),
        _log_line(at(243), "init engine (profile, create kv cache, warmup model) took 39.83 s",
                  "(vLLMRolloutModel pid=3) (EngineCore pid=4)"),
        _log_line(at(249), "All models are ready."),
        _log_line(at(291), "WorkflowRunner [explorer_runner_3](asynchronous) initialized:",
                  "(WorkflowRunner pid=7)"),
        _log_line(at(300), "WorkflowRunner [explorer_runner_0] is prepared and ready",
                  "(WorkflowRunner pid=6)"),
        _log_line(at(330), "Rollout coordinator is ready."),
        _log_line(at(330), "Evaluation at step 0 started."),
    ]) + "\n"
    job = tmp_path / "job"
    (job / "monitor" / "tensorboard" / "explorer").mkdir(parents=True)
    shutil.copyfile(RUN_40.parent / "random_seed0" / "params.json", job / "params.json")
    launched = tmp_path / "trinity_config.yaml"
    shutil.copyfile(RUN_40.parent / "random_seed0" / "launched_config.yaml", launched)
    (tmp_path / "train.log").write_text(log)
    stamp = t0.timestamp()
    run = Finished("random_seed0", job, launched, tmp_path / "train.log", stamp, stamp + 400)
    out = tmp_path / "out"
    dest = lay_out(run, out, NO_APPS)
    write_tables(out)
    startup = pd.read_csv(out / "startup.csv", index_col=0)["random_seed0"]
    assert startup["`train`: config loaded"] == 0.15
    assert startup["`train`: preflight passed"] == 0.35
    assert startup["`train`: Ray joined, tune() called"] == 0.45
    assert startup["Ray actors (explorer, trainer) made"] == 1.0
    assert startup["vLLM actor's first line"] == 2.25
    assert startup["vLLM engine core starts"] == 3.0
    assert startup["vLLM worker loads the model"] == 3.45
    assert startup["all rollout models ready"] == 4.15
    assert startup["first workflow runner made"] == 4.85
    assert startup["first workflow runner ready"] == 5.0
    assert startup["all workflow runners ready"] == 5.5
    assert np.isnan(startup["step 1 starts"])
    excerpt = (dest / "train_log_excerpt.txt").read_text()
    assert "torch.compile took 27.46 s" in excerpt
    assert all(line in excerpt.splitlines() for line in (config, preflight, tune))
    assert not (dest / "explorer_meta.json").exists()
    assert pd.read_csv(out / "phase_times.csv", index_col=0).empty
    assert "no buffer samples: buffer: " in capsys.readouterr().out


def test_a_run_without_its_records_is_refused_naming_the_file(tmp_path):
    run = job_from(QWEN_RUN, tmp_path, "log\n")
    (run.job / "params.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"params\.json: missing"):
        lay_out(run, tmp_path / "out", NO_APPS)
    assert not (tmp_path / "out").exists()


def test_cpu_cores_per_phase_and_role_from_the_monitors_samples_and_the_log(tmp_path):
    """The CPU monitor's cumulative seconds turned into cores busy during the evaluations
    (each from its start to the weight sync after it) and the steps between them (from step
    2's start to the last step's), per role and busiest process; another run's processes and
    samples from before `train` left out."""
    t0 = datetime(2026, 12, 1, 12, 0, 0)
    start = t0.timestamp()

    def at(seconds: float) -> datetime:
        return t0 + timedelta(seconds=seconds)

    log = "\n".join([
        _log_line(at(100), "Evaluation at step 0 started."),
        _log_line(at(130), "Explorer sync_weights at step 0 started."),
        _log_line(at(130), "Explore step 1 started."),
        _log_line(at(140), "Explore step 2 started."),
        _log_line(at(150), "Explore step 3 started."),
        _log_line(at(150), "Evaluation at step 3 started."),
        _log_line(at(170), "Explorer sync_weights at step 3 started."),
        _log_line(at(172), "Explore step 4 started."),
        _log_line(at(180), "Explore step 5 started."),
    ]) + "\n"
    # cores each process keeps busy: (during an evaluation, otherwise)
    rates = {10: ("ray::WorkflowRunner", 0.5, 0.1, "r"), 11: ("ray::WorkflowRunner", 0.5, 0.1, "r"),
             20: ("ray::WorkerDict", 0.0, 1.0, "r"), 30: ("ray::WorkerDict", 3.0, 3.0, "other"),
             0: ("machine (16 cores)", 1.5, 1.25, "*")}
    evals = [(100, 130), (150, 170)]
    rows, used = [], dict.fromkeys(rates, 0.0)
    for t in range(-20, 192, 2):   # from before `train` (t < 0) to past the last step
        for pid, (role, busy_eval, busy_else, run) in rates.items():
            inside = any(a <= t - 1 < b for a, b in evals)
            used[pid] += 2 * (busy_eval if inside else busy_else)
            if t < 0 and pid == 10:
                used[pid] += 500   # an earlier process: never counted
            rows.append(f"{start + t},{pid},{role},{used[pid]:.2f},{run}\n")
    file = tmp_path / "cpu_samples.csv"
    file.write_text("".join(rows) + "123,4")   # a last row cut short by a kill
    cores = cpu_cores(read_cpu(file), log, "r", start)
    assert cores == {
        "evaluation": {
            "machine (16 cores)": {"all": 1.5, "busiest": 1.5},
            "ray::WorkflowRunner (2 processes)": {"all": 1.0, "busiest": 0.5},
            "ray::WorkerDict": {"all": 0.0, "busiest": 0.0}},
        # steps 2-5 from 140 to 180, less the evaluation from 150 to 170
        "steps between evaluations": {
            "machine (16 cores)": {"all": 1.25, "busiest": 1.25},
            "ray::WorkerDict": {"all": 1.0, "busiest": 1.0},
            "ray::WorkflowRunner (2 processes)": {"all": 0.2, "busiest": 0.1}}}
    assert cpu_cores(read_cpu(file), log, "no such run", start) == {}
    assert read_cpu(tmp_path / "none.csv").empty


def test_a_run_laid_out_with_cpu_samples_carries_its_cores_and_the_folders_table(tmp_path):
    t0 = datetime(2026, 12, 1, 12, 0, 0)
    start = t0.timestamp()
    log = "\n".join(_log_line(t0 + timedelta(seconds=s), text) for s, text in [
        (10, "Explore step 1 started."), (20, "Explore step 2 started."),
        (30, "Evaluation at step 2 started."), (40, "Explorer sync_weights at step 2 started."),
        (40, "Explore step 3 started."), (50, "Explore step 4 started.")]) + "\n"
    run = job_from(RUN_40, tmp_path, log)
    run = Finished("difficulty_seed42", run.job, run.launched_config, run.log, start, start + 60)
    samples = tmp_path / "cpu_samples.csv"
    samples.write_text("".join(f"{start + t},7,ray::WorkflowRunner,{t * 0.5},difficulty_seed42\n"
                               f"{start + t},0,machine (2 cores),{t * 1.0},*\n"
                               for t in range(0, 60, 5)))
    out = tmp_path / "out"
    dest = lay_out(run, out, NO_APPS, buffer_seconds=1, cpu=read_cpu(samples))
    cores = json.loads((dest / "timings.json").read_text())["cpu_cores"]
    assert cores["evaluation"]["ray::WorkflowRunner"] == {"all": 0.5, "busiest": 0.5}
    assert "cpu_use.csv" in [p.name for p in write_tables(out)]
    table = pd.read_csv(out / "cpu_use.csv", index_col=[0, 1, 2])["difficulty_seed42"]
    assert table[("evaluation", "ray::WorkflowRunner", "cores, all")] == 0.5
    assert table[("steps between evaluations", "machine (2 cores)", "cores, busiest process")] \
        == 1.0
    # a folder whose runs had no CPU monitor has no such table
    bare = tmp_path / "bare"
    lay_out(run, bare, NO_APPS, buffer_seconds=1)
    assert "cpu_use.csv" not in [p.name for p in write_tables(bare)]

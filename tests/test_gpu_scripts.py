"""``scripts/gpu/trinity_h200.sh``: every call brings back what the runs have written.

A GPU machine can be lost between two commands, and everything on it with it, so
``wait`` ends with ``collect``: a finished run and runs still going are packed into ``$OUT``
each time. The script runs here for real on a made-up work folder (no GPU, no runs: a pid
file of a process that is gone stands for a finished Trinity run, a ``local/pid`` without
``local/ended`` for the train-local step still going). ``start`` runs with a stand-in for the
bundle's ``python3`` that records its calls.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
import threading
import time
from pathlib import Path

from bounds import hang_bound

from mathagent import paths

SCRIPT = paths.REPO_ROOT / "scripts" / "gpu" / "trinity_h200.sh"


def gone_pid() -> int:
    """The id of a process that has ended."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def make_work(w: Path) -> None:
    job = w / "ckpt" / "random_seed1" / "Project" / "Name"
    (job / "monitor" / "tensorboard" / "trainer").mkdir(parents=True)
    (job / "params.json").write_text("{}")
    (job / "monitor" / "tensorboard" / "trainer" / "events.out.tfevents.1").write_text("ev")
    (job / "global_step_40" / "actor").mkdir(parents=True)  # checkpoints stay behind
    (job / "global_step_40" / "actor" / "model.json").write_text("{}")
    launched = w / "runs" / "random_seed1" / "train" / "t0"
    launched.mkdir(parents=True)
    (launched / "trinity_config.yaml").write_text("mode: colocate\n")
    (w / "random_seed1.pid").write_text(f"{gone_pid()}\n")
    (w / "random_seed1.t0").write_text("1700000000\n")
    (w / "random_seed1.log").write_text(
        "\x1b[36m(Trainer pid=7)\x1b[0m INFO 12-04 07:14:55 [trainer.py:1] workers initialized\n"
        "\x1b[36m(WorkflowRunner pid=9)\x1b[0m react_agent: 94 + 85 equals \\boxed{179}.\n"
        "\x1b[36m(WorkflowRunner pid=9)\x1b[0m Next, we multiply this sum by 5:\n"
        "\x1b[36m(WorkflowRunner pid=9)\x1b[0m INFO 12-04 07:21:19 [workflow_runner.py:100] ready\n"
        "\x1b[36m(WorkflowRunner pid=9)\x1b[0m ValueError: the judge failed\n"
        '\x1b[36m(vLLMRolloutModel pid=5)\x1b[0m INFO:  1.2.3.4:5 - "GET /health HTTP/1.1" 200 OK\n'
        '\x1b[36m(vLLMRolloutModel pid=5)\x1b[0m INFO:  1.2.3.4:5 - "POST /v1/chat/completions '
        'HTTP/1.1" 500 Internal Server Error\n'
        "Training at step 40 finished\n")
    metrics = w / "local" / "work" / "random-s1" / "metrics.csv"
    metrics.parent.mkdir(parents=True)
    metrics.write_text("step,reward\n1,0.1\n2,0.2\n")
    (w / "local" / "pid").write_text(f"{os.getpid()}\n")


def test_wait_collects_finished_and_running_runs(tmp_path):
    w, out = tmp_path / "w", tmp_path / "out"
    make_work(w)
    env = {**os.environ, "W": str(w), "OUT": str(out), "B": str(tmp_path / "b")}
    done = subprocess.run(["bash", str(SCRIPT), "wait", "1"], env=env, capture_output=True,
                          text=True, timeout=hang_bound(300))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "random_seed1 ended" in done.stdout
    assert "train-local: random-s1 2 rows" in done.stdout
    assert "1 run(s) still running" in done.stdout

    with tarfile.open(out / "random_seed1.tgz") as tar:
        names = set(tar.getnames())
        log = tar.extractfile("random_seed1/train.log").read().decode()
        span = tar.extractfile("random_seed1/start_end_epoch.txt").read().decode().split()
    assert {"random_seed1/params.json", "random_seed1/launched_config.yaml",
            "random_seed1/monitor/tensorboard/trainer/events.out.tfevents.1",
            "random_seed1/start_end_epoch.txt"} <= names
    assert len(span) == 2 and span[0] == "1700000000"      # ended: its log's last write
    assert not any("global_step" in n for n in names)
    # a run without an experience buffer is packed without samples, and says so in one line
    assert "random_seed1: no buffer samples: " in done.stdout
    assert not any("/samples" in n for n in names)
    assert "step 40" in log
    # the agent's printed replies and vLLM's access lines stay behind; log lines and errors come
    assert "workers initialized" in log and "workflow_runner.py:100] ready" in log
    assert "ValueError: the judge failed" in log
    assert "boxed{179}" not in log and "multiply this sum" not in log and "/health" not in log
    assert '"POST /v1/chat/completions HTTP/1.1" 500' in log  # a failed request is kept
    with tarfile.open(out / "local.tgz") as tar:
        metrics = tar.extractfile("local/work/random-s1/metrics.csv").read().decode()
    assert metrics.splitlines()[-1] == "2,0.2"  # packed as it stands, mid-run


def test_wait_follows_runs_only_and_marks_a_run_packed_while_it_goes_on(tmp_path):
    """The GPU monitor's process file is no run's: ``wait`` neither counts nor packs it. A run
    packed while its process lives records so, for its log's last write is then no end."""
    w, out = tmp_path / "w", tmp_path / "out"
    make_work(w)
    (w / "random_seed1.pid").write_text(f"{os.getpid()}\n")     # the run goes on
    (w / "gpu_monitor.pidof").write_text(f"{os.getpid()}\n")    # and so does the monitor
    env = {**os.environ, "W": str(w), "OUT": str(out), "B": str(tmp_path / "b")}
    done = subprocess.run(["bash", str(SCRIPT), "wait", "1"], env=env, capture_output=True,
                          text=True, timeout=hang_bound(300))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 run(s) still running" in done.stdout            # random_seed1 and train-local
    assert "gpu_monitor" not in done.stdout + done.stderr
    assert sorted(p.name for p in out.glob("*.tgz")) == ["local.tgz", "random_seed1.tgz"]
    with tarfile.open(out / "random_seed1.tgz") as tar:
        span = tar.extractfile("random_seed1/start_end_epoch.txt").read().decode().split()
    assert span[0] == "1700000000" and span[2:] == ["running"]


def test_wait_stops_following_a_run_whose_explorer_failed(tmp_path):
    """A run whose explorer logged its failure goes on no more, though its process lives (a
    trainer waiting for a weight sync): ``wait`` says so with the error, stops following it
    and collects at once instead of at its limit."""
    w, out = tmp_path / "w", tmp_path / "out"
    make_work(w)
    (w / "local" / "pid").unlink()                              # no train-local runs here
    (w / "random_seed1.pid").write_text(f"{os.getpid()}\n")     # its process lives on
    with (w / "random_seed1.log").open("a") as log:
        log.write("\x1b[36m(Explorer pid=3)\x1b[0m ERROR 12-05 16:51:11 [explorer.py:308] "
                  "Error in Explorer: Traceback (most recent call last):\n"
                  "(vLLMRolloutModel pid=4) (Worker pid=5) ERROR 12-05 16:51:11 [x.py:987] "
                  "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.34 GiB.\n"
                  "(WorkflowRunner pid=9) ValueError: the judge failed\n")
    env = {**os.environ, "W": str(w), "OUT": str(out), "B": str(tmp_path / "b")}
    began = time.time()
    done = subprocess.run(["bash", str(SCRIPT), "wait", "600"], env=env, capture_output=True,
                          text=True, timeout=hang_bound(300))
    assert done.returncode == 0, done.stdout + done.stderr
    assert time.time() - began < 120                            # not its 600 s
    assert ("random_seed1 failed; what is left of it stays until `again random_seed1`"
            in done.stdout)
    # the cause, a process's error at level ERROR, not a runner's printed exception
    assert "[x.py:987] torch.OutOfMemoryError: CUDA out of memory" in done.stdout
    assert "Error in Explorer: Traceback" in done.stdout
    assert "the judge failed" not in done.stdout
    assert "no run goes on" in done.stdout and (out / "random_seed1.tgz").is_file()


def test_x8_collect_labels_gpu_samples_by_each_runs_span_even_while_one_runs(tmp_path):
    """The 8-GPU script's collect gives each GPU sample the run whose start-to-last-write span
    holds it, reading the span's first two words: a run packed while it goes on adds a third."""
    w, out = tmp_path / "w", tmp_path / "out"
    make_work(w)
    for name, t0 in (("random", 1700000000), ("difficulty", 1700000100)):
        job = w / "ckpt" / name / "P" / "N"
        job.mkdir(parents=True)
        (job / "params.json").write_text("{}")
        (w / f"{name}.pid").write_text(f"{os.getpid() if name == 'random' else gone_pid()}\n")
        (w / f"{name}.t0").write_text(f"{t0}\n")
        (w / f"{name}.log").write_text("Training at step 1 finished\n")
        os.utime(w / f"{name}.log", (t0 + 50, t0 + 50))
    (w / "gpu_apps.csv").write_text("1700000010,1,100,\n1700000120,2,200,\n1700000300,3,300,\n")
    env = {**os.environ, "W": str(w), "OUT": str(out), "B": str(tmp_path / "b")}
    done = subprocess.run(["bash", str(SCRIPT.parent / "trinity_x8.sh"), "collect"], env=env,
                          capture_output=True, text=True, timeout=hang_bound(120))
    assert done.returncode == 0, done.stdout + done.stderr
    with tarfile.open(out / "random.tgz") as tar:      # the first run goes on
        span = tar.extractfile("random/start_end_epoch.txt").read().decode().split()
    assert span == ["1700000000", "1700000050", "running"]
    labels = [line.split(",")[3] for line in (out / "gpu_apps.csv").read_text().splitlines()]
    assert labels == ["random", "difficulty", ""]


def _work_with_a_compile_cache(tmp_path):
    """A work folder with one run's vLLM compile cache (one file); its OUT folder, the cache's
    compiled-graph folder and the environment the script steps run with."""
    w, out = tmp_path / "w", tmp_path / "out"
    make_work(w)
    cache = w / "vllm_cache" / "random_seed1" / "torch_compile_cache"
    cache.mkdir(parents=True)
    (cache / "graph.py").write_text("compiled\n")
    with (w / "random_seed1.log").open("a") as log:   # the run's vLLM engine is ready
        log.write("(EngineCore pid=5) INFO 12-04 07:16:02 [core.py:306] init engine (profile, "
                  "create kv cache, warmup model) took 14.77 s (compilation: 4.30 s)\n")
    return out, cache, {**os.environ, "W": str(w), "OUT": str(out), "B": str(tmp_path / "b")}


def test_collect_brings_back_each_small_vllm_compile_cache_once_when_its_engine_is_ready(
        tmp_path):
    """``collect`` packs each run's vLLM compile cache (``vllm_cache_<run>.tgz``) once its
    run's log says vLLM is ready, when it is at most 40 MB; a cache still being compiled, one
    too large and one carried in or packed by an earlier call stay, with a line for the first
    two."""
    out, cache, env = _work_with_a_compile_cache(tmp_path)
    w = Path(env["W"])
    other = w / "vllm_cache" / "difficulty_seed1"     # a run whose vLLM is still starting
    (other / "torch_compile_cache").mkdir(parents=True)
    (w / "difficulty_seed1.log").write_text("(vLLMRolloutModel pid=6) INFO starting\n")

    def collect() -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(SCRIPT), "collect"], env=env, capture_output=True,
                              text=True, timeout=hang_bound(120))

    done = collect()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "random_seed1: 1 MB, packed as vllm_cache_random_seed1.tgz" in done.stdout
    assert f"{other}: its engine is not ready yet, not packed" in done.stdout
    with tarfile.open(out / "vllm_cache_random_seed1.tgz") as tar:
        assert tar.extractfile("./torch_compile_cache/graph.py").read() == b"compiled\n"
        assert tar.extractfile("./.packed_from").read().decode().strip() == str(cache.parent)
    assert not (out / "vllm_cache_difficulty_seed1.tgz").exists()
    # a later collect: the packed cache is home; the other's engine is ready now, too large
    with (w / "difficulty_seed1.log").open("a") as log:
        log.write("INFO init engine (profile, create kv cache, warmup model) took 40.1 s\n")
    (other / "torch_compile_cache" / "big.bin").write_bytes(os.urandom(41 * 2**20))
    done = collect()
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{other}: 42 MB, over 40 MB, not packed" in done.stdout
    assert "random_seed1" not in "".join(line for line in done.stdout.splitlines(True)
                                         if "compile cache" in line)
    # the first collect's file stays (OUT is one call's); nothing else was packed
    assert [f.name for f in out.glob("vllm_cache*.tgz")] == ["vllm_cache_random_seed1.tgz"]
    assert (out / "local.tgz").is_file()           # what follows the caches is still packed


def test_a_packed_compile_cache_is_carried_to_the_next_runs_and_a_bad_file_refused(tmp_path):
    """``cache FILE`` unpacks what ``collect`` packed (``vllm_cache_<run>.tgz``) into the folder each
    run's ``VLLM_CACHE_ROOT`` starts from; a file that is not one is refused in one line and
    the cache carried before stays."""
    out, cache, env = _work_with_a_compile_cache(tmp_path)
    done = subprocess.run(["bash", str(SCRIPT), "collect"], env=env, capture_output=True,
                          text=True, timeout=hang_bound(120))
    assert done.returncode == 0, done.stdout + done.stderr
    later = {**env, "W": str(tmp_path / "w2")}   # the next stretch's machine

    def carry(file) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(SCRIPT), "cache", str(file)], env=later,
                              capture_output=True, text=True, timeout=hang_bound(60))

    done = carry(out / "vllm_cache_random_seed1.tgz")
    assert done.returncode == 0, done.stdout + done.stderr
    seed = tmp_path / "w2" / "vllm_cache_seed"
    assert (seed / "torch_compile_cache" / "graph.py").read_text() == "compiled\n"
    assert "vLLM compile cache ready for the next runs" in done.stdout
    bad = tmp_path / "not_a_cache.tgz"
    bad.write_text("no tar here")
    done = carry(bad)
    assert done.returncode == 2
    assert done.stderr.strip() == \
        f"cache: {bad} is not a vLLM compile cache packed by collect (tar.gz)"
    assert (seed / "torch_compile_cache" / "graph.py").is_file()   # the earlier one stays
    assert not (tmp_path / "w2" / "vllm_cache_seed.tmp").exists()


def test_a_carried_compile_cache_serves_only_the_run_that_compiled_it(tmp_path):
    """vLLM's compiled artifacts name the folder they were compiled in, so a carried cache
    goes only to the run whose ``VLLM_CACHE_ROOT`` made it (``collect`` records that folder in
    it); a run of another name compiles anew, with one line saying where the cache was made."""
    out, cache, env = _work_with_a_compile_cache(tmp_path)
    done = subprocess.run(["bash", str(SCRIPT), "collect"], env=env, capture_output=True,
                          text=True, timeout=hang_bound(120))
    assert done.returncode == 0, done.stdout + done.stderr
    made_in = cache.parent   # .../w/vllm_cache/random_seed1
    # the next stretch's machine has the same work folder, as every machine does (/root/trinity)
    shutil.rmtree(tmp_path / "w")
    packed = out / "vllm_cache_random_seed1.tgz"
    done = subprocess.run(["bash", str(SCRIPT), "cache", str(packed)], env=env,
                          capture_output=True, text=True, timeout=hang_bound(60))
    assert done.returncode == 0, done.stdout + done.stderr
    run_env = re.search(r"^run_env\(\) \{.*?^\}$", SCRIPT.read_text(), re.S | re.M).group(0)
    for name, used in (("difficulty_seed1", False), ("random_seed1", True)):
        done = subprocess.run(["bash", "-c", f"source {paths.REPO_ROOT}/scripts/gpu/common.sh; "
                               f"{run_env}\nrun_env {name}; echo \"root=$VLLM_CACHE_ROOT\""],
                              env=env, capture_output=True, text=True, timeout=hang_bound(60))
        assert done.returncode == 0, done.stdout + done.stderr
        root = tmp_path / "w" / "vllm_cache" / name
        assert f"root={root}" in done.stdout
        assert (root / "torch_compile_cache" / "graph.py").is_file() == used
        line = (f"{name}: vLLM starts from the carried compile cache" if used else
                f"{name}: compiles anew; the carried compile cache was made in {made_in}")
        assert line in done.stdout, done.stdout


NOTEBOOKS_SCRIPT = paths.REPO_ROOT / "scripts" / "gpu" / "notebooks.sh"


def test_notebooks_collect_packs_executed_notebooks_and_logs_not_checkpoints(tmp_path):
    """``notebooks.sh collect``: the executed notebooks, the log and the smoke run's log and
    event files come back; the run's model weights do not (they cannot leave the machine)."""
    w, out = tmp_path / "w", tmp_path / "out"
    (w / "proj" / "notebooks").mkdir(parents=True)
    (w / "proj" / "notebooks" / "04_training_launch.ipynb").write_text('{"cells": []}')
    smoke = w / "proj" / "runs" / "tutorial" / "smoke" / "config_difficulty_arithmetic"
    events = smoke / "checkpoints" / "job" / "monitor" / "tensorboard"
    events.mkdir(parents=True)
    (events / "events.out.tfevents.1").write_text("ev")
    (smoke / "train.log").write_text("Training at step 2 finished\n")
    weights = smoke / "checkpoints" / "job" / "global_step_2" / "actor"
    weights.mkdir(parents=True)
    (weights / "model.safetensors").write_text("w")
    (w / "notebooks.log").write_text("notebooks 04-05: exit 0 after 500 s\n")
    # `start tutorial`: the tutorial command's run folder, with notebook 04's scratch folders
    tutorial = w / "tutorial"
    (tutorial / "04_training_launch" / "smoke" / "job" / "global_step_2").mkdir(parents=True)
    (tutorial / "04_training_launch" / "smoke" / "job" / "global_step_2" / "model.pt").write_text("w")
    (tutorial / "05_results.ipynb").write_text('{"cells": []}')
    env = {**os.environ, "W": str(w), "OUT": str(out), "B": str(tmp_path / "b")}
    done = subprocess.run(["bash", str(NOTEBOOKS_SCRIPT), "collect"], env=env,
                          capture_output=True, text=True, timeout=hang_bound(60))
    assert done.returncode == 0, done.stdout + done.stderr
    with tarfile.open(out / "notebooks_h200.tgz") as tar:
        names = set(tar.getnames())
    run = "proj/runs/tutorial/smoke/config_difficulty_arithmetic"
    assert {"notebooks.log", "proj/notebooks/04_training_launch.ipynb", f"{run}/train.log",
            f"{run}/checkpoints/job/monitor/tensorboard/events.out.tfevents.1",
            "tutorial/05_results.ipynb"} <= names
    assert not any("global_step" in n or n.endswith((".safetensors", ".pt")) for n in names)


def test_notebooks_start_refuses_an_unknown_mode_before_doing_anything(tmp_path):
    w = tmp_path / "w"
    env = {**os.environ, "W": str(w), "OUT": str(tmp_path / "out"), "B": str(tmp_path / "b")}
    done = subprocess.run(["bash", str(NOTEBOOKS_SCRIPT), "start", "full"], env=env,
                          capture_output=True, text=True, timeout=hang_bound(60))
    assert done.returncode == 2
    assert done.stderr.strip() == "start: unknown mode full (nbmake or tutorial)"
    assert not w.exists()   # nothing installed, copied or started


def test_every_gpu_script_parses():
    for script in sorted((paths.REPO_ROOT / "scripts" / "gpu").glob("*.sh")):
        done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert done.returncode == 0, f"{script.name}: {done.stderr}"


def test_qwen_only_keeps_the_named_runs_and_refuses_a_name_of_no_pair(tmp_path):
    """``QWEN_ONLY`` starts one run of a pair alone (a stretch too short for two), or the third
    arm (``bots_qwen_seedN``), which only it starts: the runs ``qwen`` would start are the ones
    ``settings`` prints, so it shows which stay; a name that is no run of the pairs or the arms
    is one line and exit status 2, before anything is joined or started."""
    env = {**os.environ, "W": str(tmp_path / "w"), "B": str(tmp_path / "b"),
           "Q": str(tmp_path / "q")}

    def qwen_runs(only, *step):
        done = subprocess.run(["bash", str(SCRIPT), *step], capture_output=True, text=True,
                              env={**env, "QWEN_ONLY": only}, timeout=hang_bound(60))
        return done, [line.split()[0] for line in done.stdout.splitlines()
                      if "_qwen_seed" in line.split()[0]]

    done, runs = qwen_runs("difficulty_qwen_seed0", "settings")
    assert done.returncode == 0, done.stderr
    assert runs == ["difficulty_qwen_seed0"]
    done, runs = qwen_runs("", "settings")
    assert runs == ["random_qwen_seed0", "difficulty_qwen_seed0"]
    done, runs = qwen_runs("bots_qwen_seed0 random_qwen_seed0", "settings")
    assert runs == ["bots_qwen_seed0", "random_qwen_seed0"]
    done, _ = qwen_runs("difficulty_qwen_seed1", "qwen", "0")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "QWEN_ONLY: difficulty_qwen_seed1 is not a run of qwen 0 "
        "(random_qwen_seed0 difficulty_qwen_seed0 bots_qwen_seed0)"]
    assert not (tmp_path / "w").exists()


def test_qwen_refuses_a_pair_on_a_gpu_too_small_for_two(tmp_path):
    """A pair held about 113 GiB of GPU memory: on a GPU of an H100's size ``qwen`` starts no
    pair (one line, exit status 2, nothing joined or started) and names the runs that
    ``QWEN_ONLY`` can pick. ``nvidia-smi`` is a stand-in here: this machine has no GPU."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 81559\n")
    smi.chmod(0o755)
    env = {**os.environ, "W": str(tmp_path / "w"), "B": str(tmp_path / "b"),
           "Q": str(tmp_path / "q"), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    env.pop("QWEN_ONLY", None)
    done = subprocess.run(["bash", str(SCRIPT), "qwen", "0"], capture_output=True, text=True,
                          env=env, timeout=hang_bound(60))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "qwen: a pair needs about 113 GiB of GPU memory and this GPU has 81559 MiB; set "
        "QWEN_ONLY to one of random_qwen_seed0 difficulty_qwen_seed0 bots_qwen_seed0"]
    assert not (tmp_path / "w").exists()


def test_the_run_steps_settings_load_through_trinity(tmp_path):
    """What ``trinity_h200.sh settings`` prints for each step (the extra ``train`` settings of
    the 135M experiment, the Qwen pilot's two runs and the Qwen pair) applies to its configs
    through Trinity's loader, with the values the steps promise. The Qwen pair gets only its
    seed (the random run's start-up lever is empty unless QWEN_LEVER is set): its configs hold
    the experiment's settings, held-out evaluation at steps 8 and 16 and none at step 0."""
    from mathagent import launch

    done = subprocess.run(["bash", str(SCRIPT), "settings"], capture_output=True, text=True,
                          env={**os.environ, "W": str(tmp_path / "w"), "B": str(tmp_path / "b")},
                          timeout=hang_bound(60))
    assert done.returncode == 0, done.stderr
    steps = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()}
    assert set(steps) == {"experiment", "pilot_seq32_lr1e6", "pilot_async16_lr5e6",
                          "random_qwen_seed0", "difficulty_qwen_seed0"}
    # the Qwen pair's runs: the seed's settings each and nothing else (QWEN_LEVER empty)
    lever = "explorer.runner_prepare_concurrency=16"
    seed0 = ["buffer.explorer_input.taskset.data_selector.seed=0", "explorer.rollout_model.seed=0"]
    assert steps.pop("random_qwen_seed0") == seed0
    assert steps.pop("difficulty_qwen_seed0") == seed0
    for name, prepared in (("config_random_qwen.yaml", 16), ("config_difficulty_qwen.yaml", 8)):
        extra = [lever] if prepared == 16 else []
        plan = launch.load_plan(paths.REPO_ROOT / "configs" / name, extra,
                                work_dir=tmp_path / "lever" / name)
        assert plan.config.explorer.runner_prepare_concurrency == prepared  # 8: Trinity's default
        assert plan.config.explorer.runner_per_model == 16  # one wave with the lever, two without
    seed = ["buffer.explorer_input.taskset.data_selector.seed=1", "explorer.rollout_model.seed=1"]
    configs = {"experiment": ["config_random_arithmetic.yaml", "config_difficulty_arithmetic.yaml"],
               "pilot_seq32_lr1e6": ["config_random_qwen.yaml"],
               "pilot_async16_lr5e6": ["config_random_qwen.yaml"],
               "qwen": ["config_random_qwen.yaml", "config_difficulty_qwen.yaml",
                        "config_bots_qwen.yaml"]}
    steps["qwen"] = []   # the configs as they are
    for step, names in configs.items():
        for name in names:
            plan = launch.load_plan(paths.REPO_ROOT / "configs" / name, [*steps[step], *seed],
                                    work_dir=tmp_path / step / name)
            config = plan.config
            assert config.buffer.explorer_input.taskset.data_selector.seed == 1
            assert config.explorer.rollout_model.enforce_eager is False
            steps_of = {"experiment": 40, "qwen": 16}
            assert config.buffer.total_steps == steps_of.get(step, 20)
            assert config.explorer.eval_interval == (8 if step == "qwen" else 10)
            # the Qwen experiment measures the base model once, not in every run
            assert config.explorer.eval_on_startup is (step != "qwen")
            if step == "qwen":  # what verl's FSDP engine gets, built by Trinity itself
                from trinity.trainer.verl.config import build_verl_config
                from verl.utils.config import omega_conf_to_dataclass

                verl = build_verl_config(config)
                # fixed micro-batches, no token-capped dynamic batching: 2 sequences for the
                # update, 4 for the reference's and the old policy's log-probabilities
                assert verl.actor.use_dynamic_bsz is False
                assert verl.actor.ppo_micro_batch_size_per_gpu == 2
                assert verl.ref.log_prob_use_dynamic_bsz is False
                assert verl.ref.log_prob_micro_batch_size_per_gpu == 4
                assert verl.rollout.log_prob_use_dynamic_bsz is False
                assert verl.rollout.log_prob_micro_batch_size_per_gpu == 4
                # verl's own actor config accepts it, and a step's 16 x 8 experiences (one
                # mini-batch) split into whole micro-batches
                actor = omega_conf_to_dataclass(verl.actor)
                assert (actor.use_dynamic_bsz, actor.ppo_micro_batch_size_per_gpu) == (False, 2)
                assert config.buffer.batch_size * config.algorithm.repeat_times % 4 == 0
                assert verl.actor.fsdp_config.entropy_from_logits_with_chunking is True
                assert verl.actor.fsdp_config.entropy_checkpointing is True
            if step.startswith("pilot"):
                lr = 1e-6 if "lr1e6" in step else 5e-6
                assert config.algorithm.optimizer.lr == lr
                assert plan.settings["algorithm"]["learning_rate"] == lr
                asynchronous = "async" in step
                assert config.explorer.concurrent_mode == ("asynchronous" if asynchronous
                                                           else "sequential")
                assert config.explorer.runner_per_model == (16 if asynchronous else 32)


def test_wait_stops_in_time_for_its_collect_when_the_call_has_an_end(tmp_path):
    """With CALL_END (the Unix time the calling command must end by), ``wait`` follows the
    runs only until COLLECT_S seconds before it and skips the buffer samples it has no time
    for, so what the runs wrote comes back instead of being lost with a command stopped at
    its limit."""
    w, out = tmp_path / "w", tmp_path / "out"
    make_work(w)
    env = {**os.environ, "W": str(w), "OUT": str(out), "B": str(tmp_path / "b"),
           "CALL_END": str(int(time.time()) + 10)}
    done = subprocess.run(["bash", str(SCRIPT), "wait", "600"], env=env, capture_output=True,
                          text=True, timeout=hang_bound(300))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "following for 0 s, not 600: the call ends at CALL_END" in done.stdout
    assert "1 run(s) still running" in done.stdout          # the train-local step goes on
    assert "random_seed1: no buffer samples: the call ends in" in done.stdout
    with tarfile.open(out / "random_seed1.tgz") as tar:
        assert "random_seed1/params.json" in tar.getnames()


def _stop_monitor(w: Path) -> None:
    """Stop the GPU monitor ``start`` left for the work folder ``w`` and remove the folder."""
    subprocess.run(["pkill", "-f", f"gpu_monitor.sh {w}/gpu"])
    subprocess.run(["rm", "-rf", str(w)])


STUB_PYTHON = r'''#!/usr/bin/env bash
# stands for the bundle's python3: records each call (time, the run's label, compile cache
# and runs folder, its arguments)
echo "$(date +%s.%N) ${MATHAGENT_RUN_LABEL:--} ${VLLM_CACHE_ROOT:--} ${MATHAGENT_RUNS:--} $*" >> "$CALLS"
case "$*" in
  "-m mathagent export-model"*)   # it lasts until two Ray heads have started, at most 10 s
    for _ in $(seq 100); do [ "$(grep -c "ray start" "$CALLS")" -ge 2 ] && break; sleep 0.1; done
    mkdir -p "$4"; echo "wrote $4 (1 MB)";
                                echo "$(date +%s.%N) - - - export done" >> "$CALLS" ;;
  "-m mathagent ray start"*) echo "Ray head running at 192.0.2.2:1" ;;
  "-c "*) echo "versions: stub" ;;
esac
'''


def _stand_in_machine(tmp_path: Path, python: str) -> tuple[Path, Path, dict]:
    """An installed bundle in ``tmp_path/b`` whose environment puts the stand-in ``python``
    first on PATH; returns the work folder, the file of recorded calls and the scripts'
    environment."""
    w, b, stubs = tmp_path / "w", tmp_path / "b", tmp_path / "stubs"
    (b / "site").mkdir(parents=True)
    (b / "model.gguf").write_text("gguf")
    stubs.mkdir()
    (stubs / "python3").write_text(python)
    (stubs / "python3").chmod(0o755)
    (b / "env.sh").write_text(f'export PATH="{stubs}:$PATH" PYTHONPATH=""\n')
    calls = tmp_path / "calls.txt"
    env = {**os.environ, "W": str(w), "B": str(b), "OUT": str(tmp_path / "out"),
           "CALLS": str(calls), "QW": str(tmp_path / "qwen")}
    return w, calls, env


def test_start_begins_the_ray_heads_beside_the_export_and_each_train_after_it(tmp_path):
    """``start`` exports the model in the background and starts each run's Ray head beside
    it (the export is the setup's longest step); every ``train`` starts once the model folder
    is there, with its own run's environment. The machine's programs are stand-ins here: a
    ``python3`` that records its calls (the bundle's environment puts it first on PATH)."""
    w, calls, env = _stand_in_machine(tmp_path, STUB_PYTHON)
    try:
        done = subprocess.run(["bash", str(SCRIPT), "start", "one=configs/a.yaml",
                               "two=configs/b.yaml"], env=env, capture_output=True, text=True,
                              timeout=hang_bound(120))
        assert done.returncode == 0, done.stdout + done.stderr
        deadline = time.time() + hang_bound(30)   # the detached `train` sessions record theirs
        while calls.read_text().count(" -m mathagent train ") < 2 and time.time() < deadline:
            time.sleep(0.2)
        rows = [line.split(" ", 4) for line in calls.read_text().splitlines()]
        order = [(label, args.split(" --")[0]) for _, label, _, _, args in rows]
        when = {(label, args.split(" --")[0]): float(t) for t, label, _, _, args in rows}
        export = ("-", "-m mathagent export-model " + str(w / "model"))
        assert export in order and ("-", "export done") in order
        heads = [("one", "-m mathagent ray start"), ("two", "-m mathagent ray start")]
        trains = [("one", "-m mathagent train"), ("two", "-m mathagent train")]
        # both heads were up while the export still ran; no train before it ended
        assert all(when[h] < when[("-", "export done")] for h in heads), calls.read_text()
        assert all(when[t] >= when[("-", "export done")] for t in trains)
        # each run's own environment: its label and compile cache, its config and model
        cache = {label: root for _, label, root, _, args in rows if "mathagent train" in args}
        assert cache == {"one": str(w / "vllm_cache" / "one"),
                         "two": str(w / "vllm_cache" / "two")}
        assert any(args.startswith("-m mathagent train --config configs/b.yaml --compare none")
                   for _, label, _, _, args in rows if label == "two")
        assert (w / "one.model").read_text().strip() == str(w / "model")
        assert (w / "one.t0").is_file() and (w / "two.pid").is_file()
        # the runs' process files are the only *.pid: `wait` follows each as a run
        assert sorted(p.name for p in w.glob("*.pid")) == ["one.pid", "two.pid"]
        assert (w / "gpu_monitor.pidof").is_file()
        assert "wrote " + str(w / "model") in done.stdout and "setup took" in done.stdout
    finally:
        _stop_monitor(w)


def test_again_stops_a_failed_runs_processes_and_keeps_its_try(tmp_path):
    """``again NAME`` ends run NAME's `train` session and its Ray head (through ``mathagent ray
    stop`` in the run's environment), keeps the try's files under ``tries/NAME.1`` and leaves
    the other runs, the model and the run's compile cache; a name with no run refuses in one
    line before anything is stopped."""
    w, calls, env = _stand_in_machine(tmp_path, STUB_PYTHON)
    w.mkdir()
    train = subprocess.Popen(["setsid", "bash", "-c", f"echo $$ > {w}/one.pid; exec sleep 300"])
    threading.Thread(target=train.wait, daemon=True).start()   # reaped as soon as it ends
    deadline = time.time() + hang_bound(10)
    pid_file = w / "one.pid"
    while not (pid_file.exists() and pid_file.read_text().strip()):
        assert time.time() < deadline
        time.sleep(0.05)
    for name in ("one.t0", "one.log", "one.model", "two.pid", "two.log"):
        (w / name).write_text("x\n")
    for folder in ("runs/one/ray", "ckpt/one/job", "collect/one", "runs/two", "vllm_cache/one",
                   "model"):
        (w / folder).mkdir(parents=True)
    try:
        refused = subprocess.run(["bash", str(SCRIPT), "again", "one", "three"], env=env,
                                 capture_output=True, text=True, timeout=hang_bound(60))
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1
        assert "three is no run of this machine" in refused.stderr
        time.sleep(0.2)
        assert Path(f"/proc/{train.pid}").exists()              # nothing was stopped
        assert "State:\tZ" not in Path(f"/proc/{train.pid}/status").read_text()
        done = subprocess.run(["bash", str(SCRIPT), "again", "one"], env=env,
                              capture_output=True, text=True, timeout=hang_bound(120))
        assert done.returncode == 0, done.stdout + done.stderr
        assert train.wait(timeout=hang_bound(10)) == -15        # its session got SIGTERM
        stops = [line.split(" ", 4) for line in calls.read_text().splitlines()
                 if line.endswith("-m mathagent ray stop")]
        assert [(label, runs) for _, label, _, runs, _ in stops] == [
            ("one", str(w / "runs" / "one"))]
        kept = w / "tries" / "one.1"
        assert sorted(p.name for p in kept.iterdir()) == [
            "ckpt", "collect", "one.log", "one.model", "one.pid", "one.t0", "runs"]
        assert (kept / "runs" / "ray").is_dir() and (kept / "ckpt" / "job").is_dir()
        assert not list(w.glob("one.*")) and not (w / "runs" / "one").exists()
        assert (w / "two.pid").is_file() and (w / "runs" / "two").is_dir()
        assert (w / "vllm_cache" / "one").is_dir() and (w / "model").is_dir()
        assert f"its try is kept in {kept}" in done.stdout
    finally:
        if train.poll() is None:
            os.killpg(train.pid, 15)


def test_again_leaves_a_run_whose_ray_head_outlived_its_stop(tmp_path):
    """When ``mathagent ray stop`` says processes of the run's head are still running,
    ``again`` moves none of the run's files (the head's record among them) and fails."""
    stub = STUB_PYTHON.replace(
        '  "-c "*) echo "versions: stub" ;;',
        '  "-m mathagent ray stop"*) echo "still running: [99] (the record is kept)" >&2; '
        'exit 1 ;;\n  "-c "*) echo "versions: stub" ;;')
    w, calls, env = _stand_in_machine(tmp_path, stub)
    (w / "runs" / "one" / "ray").mkdir(parents=True)
    (w / "one.pid").write_text(f"{gone_pid()}\n")
    (w / "one.log").write_text("x\n")
    done = subprocess.run(["bash", str(SCRIPT), "again", "one"], env=env, capture_output=True,
                          text=True, timeout=hang_bound(60))
    assert done.returncode == 1
    assert "its Ray head's processes outlived `ray stop`" in done.stderr
    assert (w / "one.pid").is_file() and (w / "runs" / "one" / "ray").is_dir()
    assert not (w / "tries").exists()


def test_start_keeps_the_project_copy_a_live_run_works_in(tmp_path):
    """A run made again beside another that goes on: ``start`` leaves the project copy the
    live run works in, and says so."""
    w, calls, env = _stand_in_machine(tmp_path, STUB_PYTHON)
    (w / "proj").mkdir(parents=True)
    (w / "proj" / "in_use").write_text("the live run's\n")
    (w / "two.pid").write_text(f"{os.getpid()}\n")
    (w / "model").mkdir()
    try:
        done = subprocess.run(["bash", str(SCRIPT), "start", "one=configs/a.yaml"], env=env,
                              capture_output=True, text=True, timeout=hang_bound(120))
        assert done.returncode == 0, done.stdout + done.stderr
        assert (w / "proj" / "in_use").is_file() and not (w / "proj" / "mathagent").exists()
        assert f"the project copy {w}/proj is kept: run(s) two work in it" in done.stdout
    finally:
        _stop_monitor(w)


def test_start_stops_when_the_export_fails(tmp_path):
    """A failed export ends ``start`` with one line naming its log, before any ``train``."""
    w, calls, env = _stand_in_machine(tmp_path, STUB_PYTHON.replace("for _ in",
                                                                    "exit 3; for _ in"))
    try:
        done = subprocess.run(["bash", str(SCRIPT), "start", "one=configs/a.yaml"], env=env,
                              capture_output=True, text=True, timeout=hang_bound(120))
        assert done.returncode == 1
        assert done.stderr.strip().splitlines()[-1] == \
            f"export-model failed (exit 3): {w / 'export.log'}"
        assert "mathagent train" not in calls.read_text() and not (w / "one.pid").exists()
        # the head started beside the export is stopped, through its own run's record
        assert any(line.split(" ", 4)[1:5:3] == ["one", "-m mathagent ray stop"]
                   for line in calls.read_text().splitlines())
    finally:
        _stop_monitor(w)


def test_notebooks_keep_their_runs_in_the_project_copy_for_collect(tmp_path):
    """``notebooks.sh start``: the notebooks' pytest sessions write their runs into the project
    copy's ``runs/``, which ``collect`` packs (a test session left to itself would use a
    temporary folder of its own, removed at its end)."""
    w, calls, env = _stand_in_machine(tmp_path, STUB_PYTHON)
    env.pop("MATHAGENT_RUNS", None)   # as on the GPU machine
    try:
        done = subprocess.run(["bash", str(NOTEBOOKS_SCRIPT), "start"], env=env,
                              capture_output=True, text=True, timeout=hang_bound(120))
        assert done.returncode == 0, done.stdout + done.stderr
        deadline = time.time() + hang_bound(30)
        while "all notebooks ended" not in (w / "notebooks.log").read_text() \
                and time.time() < deadline:
            time.sleep(0.2)
        sessions = [line.split(" ", 4) for line in calls.read_text().splitlines()
                    if " -m pytest " in line]
        assert len(sessions) == 2   # notebooks 01-03, then 04-05
        assert {runs for _, _, _, runs, _ in sessions} == {str(w / "proj" / "runs")}
    finally:
        _stop_monitor(w)


def test_install_bundle_writes_the_bytecode_of_its_packages(tmp_path):
    """The bundle's wheels travel without bytecode; ``install_bundle.sh`` compiles every module
    once after unpacking, names how many files do not compile, and leaves them as they are."""
    site = tmp_path / "build" / "site"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "good.py").write_text("x = 1\n")
    (site / "pkg" / "bad.py").write_text("def (\n")          # e.g. a template
    (site / "bin").mkdir()
    (site / "bin" / "ray").write_text("#!/build/python3.12\nprint('ray')\n")
    (site / "bin" / "jp.py").write_text("#!/build/python3.12\nprint('jp')\n")  # compiled too
    inner = tmp_path / "build" / "b"
    inner.mkdir()
    subprocess.run(f"tar -cf - site | xz -1 > {inner}/site.tar.xz", shell=True, check=True,
                   cwd=tmp_path / "build")
    (inner / "PINS.txt").write_text("pkg==1\n")
    parts = tmp_path / "parts"
    parts.mkdir()
    subprocess.run(["tar", "-cf", str(parts / "part00"), "."], check=True, cwd=inner)
    sums = subprocess.run(["sha256sum", "part00"], cwd=parts, capture_output=True, text=True,
                          check=True).stdout
    (parts / "SHA256SUMS").write_text(sums)
    dest = tmp_path / "dest"
    done = subprocess.run(["bash", str(SCRIPT.parent / "install_bundle.sh"), str(parts),
                           str(dest)], capture_output=True, text=True, timeout=hang_bound(60))
    assert done.returncode == 0, done.stdout + done.stderr
    assert [p.name for p in (dest / "site" / "pkg" / "__pycache__").iterdir()][0].startswith(
        "good.")                                               # one file, good.py's
    assert len(list((dest / "site" / "pkg" / "__pycache__").iterdir())) == 1
    assert (f"install_bundle.sh: 1 files of site/ do not compile (left as they are; "
            f"{dest}/compileall.log)") in done.stdout
    assert (dest / "site" / "pkg" / "bad.py").read_text() == "def (\n"
    assert (dest / "site" / "bin" / "ray").read_text().startswith("#!/usr/bin/env python3\n")
    assert (dest / "site" / "bin" / "__pycache__").is_dir()
    assert done.stderr == ""   # the scripts' shebangs rewritten, the bytecode folder left alone

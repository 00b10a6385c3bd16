"""``train-local`` killed with SIGKILL at random moments resumes to the uninterrupted run.

The CPU smoke config runs 6 steps with a checkpoint after every step; one run goes straight
through, another is killed three times (first at a random delay after the launch, which
may fall into start-up or model loading, then each time at a random delay after the run
logged a new step, which often falls into a checkpoint being written or swapped) and
resumed with ``--resume`` after each kill. The resumed run must end with the same metrics
(timings aside), the same samples (every selection and every completion, each step once),
the same selector state and the same weights. The run is deterministic: the sampler, the
evaluation and the selector are seeded, and the checkpoint holds their complete state.

A first launch that finishes before its kill (a machine faster than the first delay) is
started over with a shorter delay, so a kill lands whatever the machine's speed.

Three kill schedules run by default (seeds 0, 1, 2; ``MATHAGENT_KILL_SEEDS=0`` runs one).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from mathagent import grpo, paths

STEPS = 6
KILLS = 3
KILL_SEEDS = [int(s) for s in os.environ.get("MATHAGENT_KILL_SEEDS", "0,1,2").split(",")]
RUN_TIMEOUT_S = 300


def _config(folder: Path) -> Path:
    """The smoke config, with every completion written to samples.jsonl."""
    raw = yaml.safe_load(grpo.SMOKE_CONFIG.read_text())
    raw["trainer"]["samples_per_step"] = raw["rollout"]["batch_size"] * \
        raw["rollout"]["repeat_times"]
    path = folder / "smoke_all_samples.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _command(config: Path, out: Path, resume: bool) -> list[str]:
    cmd = [sys.executable, "-m", "mathagent", "train-local", "--config", str(config),
           "--steps", str(STEPS), "--out", str(out), "--no-progress"]
    return cmd + (["--resume"] if resume else [])


def _env(folder: Path) -> dict:
    return {**os.environ, "MATHAGENT_RUNS": str(folder / "runs"), "OMP_NUM_THREADS": "2"}


def _logged_steps(run: Path) -> int:
    try:
        return len(pd.read_csv(run / "metrics.csv"))
    except (OSError, ValueError):
        return 0


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run."""
    folder = tmp_path_factory.mktemp("reference")
    out = folder / "run"
    done = subprocess.run(_command(_config(folder), out, resume=False), cwd=paths.REPO_ROOT,
                          env=_env(folder), capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-2000:]
    yield out
    shutil.rmtree(folder)  # its checkpoint is 1.6 GB, not kept once the module is done


def _comparable(csv: Path) -> pd.DataFrame:
    """The metrics table read exactly, without timings and memory."""
    table = pd.read_csv(csv, float_precision="round_trip")
    return table[[c for c in table.columns if not c.startswith(("time_", "gpu_mem"))]]


@pytest.mark.slow
@pytest.mark.parametrize("seed", KILL_SEEDS)
def test_train_local_killed_at_random_moments_resumes_to_the_same_run(reference, tmp_path,
                                                                      seed):
    rng = np.random.default_rng(seed)
    config, out = _config(tmp_path), tmp_path / "run"
    kills, restarts, first_delay = 0, 0, 12.0
    k = 0
    while k < KILLS:
        log = open(tmp_path / f"launch{k}.log", "w")  # noqa: SIM115 (closed below)
        before = _logged_steps(out)
        proc = subprocess.Popen(_command(config, out, resume=out.exists()),
                                cwd=paths.REPO_ROOT, env=_env(tmp_path), stdout=log,
                                stderr=subprocess.STDOUT)
        try:
            if k > 0:  # wait for a new step to be logged (or the end), bounded
                limit = time.monotonic() + RUN_TIMEOUT_S
                while proc.poll() is None and _logged_steps(out) <= before and \
                        time.monotonic() < limit:
                    time.sleep(0.05)
            delay = rng.uniform(0.0, first_delay) if k == 0 else rng.uniform(0.0, 4.0)
            try:
                proc.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                kills += 1
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
        if k == 0 and kills == 0 and proc.returncode == 0:
            # The whole run finished within the first delay (a machine faster than that): it
            # was an uninterrupted run and leaves nothing to kill. Start over, killing sooner,
            # so that the first kill lands whatever the machine's speed.
            restarts += 1
            assert restarts <= 5, "five first launches finished before their kill"
            shutil.rmtree(out)
            first_delay /= 4
            continue
        k += 1
    assert kills >= 1  # the first kill lands in a run (restarted until it does)
    done = subprocess.run(_command(config, out, resume=True), cwd=paths.REPO_ROOT,
                          env=_env(tmp_path), capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S)
    history = "".join((tmp_path / f"launch{k}.log").read_text()[-600:] for k in range(KILLS))
    assert done.returncode == 0, history + done.stderr[-2000:]
    assert "Traceback" not in done.stderr

    pd.testing.assert_frame_equal(_comparable(out / "metrics.csv"),
                                  _comparable(reference / "metrics.csv"))
    # every selection and completion of every step, each step exactly once
    assert (out / "samples.jsonl").read_text() == (reference / "samples.jsonl").read_text()
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("checkpoint")) == \
        ["checkpoint"]
    assert grpo.checkpoint_step(out / "checkpoint") == STEPS
    ours = torch.load(out / "checkpoint" / "state.pt", weights_only=False)
    theirs = torch.load(reference / "checkpoint" / "state.pt", weights_only=False)
    assert ours["selector"] == theirs["selector"]
    assert torch.equal(ours["sampler_rng"], theirs["sampler_rng"])
    a = torch.load(out / "checkpoint" / "policy.pt")
    b = torch.load(reference / "checkpoint" / "policy.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)

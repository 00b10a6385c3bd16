"""``train-local`` killed with SIGKILL at chosen moments resumes to the uninterrupted run.

The CPU smoke config runs 5 steps with a checkpoint after every step; one run goes straight
through, another is killed four times and resumed with ``--resume`` after each kill, each
kill in another part of a run (:data:`PHASES`), at a random instant within it:

1. **start-up**: a random delay after the launch, up to the time the uninterrupted run took
   to install its first checkpoint on this machine: imports, model loading, the run files,
   the first step, the first save, whatever this machine's speed;
2. **logged, not saved**: at once after the run logged a new step, before that step's
   checkpoint is written (samples and metrics then run ahead of the checkpoint);
3. **saving**: while a checkpoint is being written (``checkpoint.tmp`` present), within the
   first half of the shortest time a checkpoint of the uninterrupted run stayed half-written;
4. **mid-step**: a random instant in the step after a checkpoint was installed (selection,
   generation, the update, the evaluation), within the first half of the shortest time the
   uninterrupted run took from an installed checkpoint to its next save.

Each kill must land in a running process and in its part (checked after it: the metrics
ahead of the checkpoint, a half-written ``checkpoint.tmp``, no newer checkpoint).

The resumed run must end with the same metrics (timings aside), the same samples (every
selection and every completion, each step once), the same selector state and the same
weights. The run is deterministic: the sampler, the evaluation and the selector are seeded,
and the checkpoint holds their complete state. A kill at every single file operation of a
save and of a resume is covered, with a stand-in model, by ``test_grpo_checkpoint.py``.

The model is not the bundled SmolLM2-135M, whose 1.6 GB checkpoints made a run of this
module take about 11 minutes, but the small random Llama of ``conftest.py`` (the
:func:`small_model` fixture): the bundled model's tokenizer and chat template, 27M
parameters, trained on the bundled taskset's tasks whose answer is one digit. Its
checkpoint (weights and AdamW moments) is about 320 MB and takes about 0.5 to 1 s to write
on a two-core machine, long enough to be killed half-written; a step takes about a second.
It replies like a weak model, so some groups of replies are partly right and the updates
move the weights and fill the optimiser state that the resumed run must restore (the
uninterrupted run is checked to have trained in several steps). A run on the real
model that stops after a step logged but not saved and resumes to the uninterrupted run is
``test_resumed_run_equals_the_uninterrupted_one`` in ``test_grpo.py`` (with both
feedback selectors), and ``test_cpu_smoke_trains_feeds_back_logs_and_resumes`` there
resumes the real model's checkpoint into fresh weights.

One kill schedule runs by default (seed 0); ``MATHAGENT_KILL_SEEDS=0,1,2`` runs three, each
drawing other instants within the same four parts.

No wait depends on the machine's speed: each waits for the run itself (a logged step, a
checkpoint, the process's exit) and fails only when the run stops making progress (its
folder and log unchanged) for ``STALL_S`` seconds (scaled by
``MATHAGENT_TEST_TIMEOUT_SCALE``), however long the whole run takes; the kill delays of the
saving and mid-step parts are fractions of durations measured in the uninterrupted run.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from bounds import finish, hang_bound, wait_for

from mathagent import grpo, paths

STEPS = 5
PHASES = ("start-up", "logged, not saved", "saving", "mid-step")
KILL_SEEDS = [int(s) for s in os.environ.get("MATHAGENT_KILL_SEEDS", "0").split(",")]
#: A run that changes nothing in its folder or log for this long is hung: loading the model
#: or one step takes well under a minute on a loaded two-core machine.
STALL_S = 600
#: How often the waits that time a kill or measure a save look at the run folder.
POLL_S = 0.01


@pytest.fixture(scope="module")
def config(small_model):
    """The smoke config on the small model and the one-digit tasks (``conftest.py``), every
    completion written to samples.jsonl."""
    return small_model.config


def _command(config: Path, out: Path, resume: bool) -> list[str]:
    cmd = [sys.executable, "-m", "mathagent", "train-local", "--config", str(config),
           "--steps", str(STEPS), "--out", str(out), "--no-progress"]
    return cmd + (["--resume"] if resume else [])


def _env(folder: Path) -> dict:
    # One thread: the small model gains nothing from a second one, which would wait for a
    # core at every operation whenever another process holds one.
    return {**os.environ, "MATHAGENT_RUNS": str(folder / "runs"), "OMP_NUM_THREADS": "1"}


def _logged_steps(run: Path) -> int:
    try:
        return len(pd.read_csv(run / "metrics.csv"))
    except (OSError, ValueError):
        return 0


def _saved_step(run: Path) -> int:
    """The step of the newest complete checkpoint in the run folder (0 for none)."""
    steps = [grpo.checkpoint_step(run / name)
             for name in ("checkpoint", "checkpoint.tmp", "checkpoint.old")]
    return max([s for s in steps if s is not None], default=0)


def _installed_step(run: Path) -> int:
    """The step of ``checkpoint`` once a save's renames are done (0 for none or mid-swap)."""
    if (run / "checkpoint.tmp").exists() or (run / "checkpoint.old").exists():
        return 0
    return grpo.checkpoint_step(run / "checkpoint") or 0


def _state(run: Path, log: Path) -> tuple:
    """What a working run changes as it goes: its files (and the checkpoint being written)
    with their sizes, and its log's size."""
    found = []
    for folder in (run, run / "checkpoint.tmp"):
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                found.append((entry.path, entry.stat().st_size))
            except OSError:
                continue
    try:
        size = log.stat().st_size
    except OSError:
        size = -1
    return size, tuple(sorted(found))


def _run(config: Path, out: Path, resume: bool, folder: Path, log: Path) -> subprocess.Popen:
    with open(log, "w") as f:  # the child holds its own copy of the descriptor
        return subprocess.Popen(_command(config, out, resume), cwd=paths.REPO_ROOT,
                                env=_env(folder), stdout=f, stderr=subprocess.STDOUT)


def _wait(proc: subprocess.Popen, out: Path, log: Path, what: str, condition,
          poll_s: float = 0.05) -> None:
    """Return once ``condition()`` holds or the run ended, while the run makes progress."""
    wait_for(lambda: proc.poll() is not None or condition(), f"{log.name}: {what}",
             progress=lambda: _state(out, log), stall_s=STALL_S, poll_s=poll_s)


class _SaveClock:
    """The times of a run's saves, seen by looking at its ``checkpoint.tmp`` again and again.

    ``saves`` holds ``(created, complete, installed)`` for each save: when the folder
    appeared, when it held a complete checkpoint, and when it was renamed to ``checkpoint``.
    """

    def __init__(self, run: Path):
        self.tmp = run / "checkpoint.tmp"
        self.saves: list[tuple[float, float, float]] = []
        self._created: float | None = None
        self._complete: float | None = None

    def look(self) -> None:
        now = time.monotonic()
        if self.tmp.exists():
            if self._created is None:
                self._created = now
            if self._complete is None and grpo.checkpoint_step(self.tmp) is not None:
                self._complete = now
        elif self._created is not None:
            self.saves.append((self._created, self._complete or now, now))
            self._created = self._complete = None


@dataclass
class Reference:
    run: Path
    first_save_s: float  # from the launch to its first installed checkpoint
    save_s: float  # the shortest time one of its checkpoints stayed half-written
    step_s: float  # the shortest time from an installed checkpoint to the next save


@pytest.fixture(scope="module")
def reference(config, tmp_path_factory):
    """The uninterrupted run, and how long its start-up, saves and steps took."""
    folder = tmp_path_factory.mktemp("reference")
    out, log = folder / "run", folder / "reference.log"
    clock = _SaveClock(out)

    def ended() -> bool:
        clock.look()
        return proc.poll() is not None

    start = time.monotonic()
    proc = _run(config, out, False, folder, log)
    try:
        _wait(proc, out, log, "the end of the run", ended, poll_s=POLL_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, log.read_text()[-2000:]
    assert len(clock.saves) == STEPS, f"saves seen: {clock.saves}"
    created, complete, installed = zip(*clock.saves, strict=True)
    trained = pd.read_csv(out / "metrics.csv")["trained_sequences"]
    # the weights and optimiser state that the killed run must restore are not the initial ones
    assert (trained > 0).sum() >= 2, trained.tolist()
    yield Reference(out, first_save_s=installed[0] - start,
                    save_s=min(b - a for a, b in zip(created, complete, strict=True)),
                    step_s=min(b - a for a, b in zip(installed, created[1:], strict=False)))
    shutil.rmtree(folder)  # its checkpoint is about 320 MB, not kept once the module is done


def _kill_in(phase: str, proc: subprocess.Popen, out: Path, log: Path,
             rng: np.random.Generator, reference: Reference) -> int:
    """Wait for ``phase`` of the run ``proc``, then SIGKILL it a random instant into it.

    The saving and mid-step kills land within half the shortest save and step of the
    reference run: a later run may save or step faster than it did.
    Returns the step of the run's checkpoint when the phase began."""
    if phase == "start-up":
        delay = rng.uniform(0.0, reference.first_save_s)
    elif phase == "logged, not saved":
        before = _logged_steps(out)  # rows past the checkpoint are logged again, then more
        _wait(proc, out, log, phase, lambda: _logged_steps(out) > before)
        delay = 0.0
    elif phase == "saving":
        tmp = out / "checkpoint.tmp"
        if tmp.exists():  # a half-written one of the last kill: gone once the run resumed
            _wait(proc, out, log, "the old checkpoint.tmp cleaned up", lambda: not tmp.exists())
        _wait(proc, out, log, phase, tmp.exists, poll_s=POLL_S)
        delay = rng.uniform(0.0, reference.save_s / 2)
    else:
        saved = _saved_step(out)
        _wait(proc, out, log, phase, lambda: _installed_step(out) > saved, poll_s=POLL_S)
        delay = rng.uniform(0.0, reference.step_s / 2)
    began = _saved_step(out)
    try:
        proc.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
    return began


def _comparable(csv: Path) -> pd.DataFrame:
    """The metrics table read exactly, without timings and memory."""
    table = pd.read_csv(csv, float_precision="round_trip")
    return table[[c for c in table.columns if not c.startswith(("time_", "gpu_mem"))]]


@pytest.mark.slow
@pytest.mark.parametrize("seed", KILL_SEEDS)
def test_train_local_killed_in_every_part_of_a_run_resumes_to_the_same_run(config, reference,
                                                                           tmp_path, seed):
    rng = np.random.default_rng(seed)
    out = tmp_path / "run"
    landed, in_phase = [], []
    for k, phase in enumerate(PHASES):
        log = tmp_path / f"launch{k}.log"
        proc = _run(config, out, out.exists(), tmp_path, log)
        try:
            began = _kill_in(phase, proc, out, log, rng, reference)
            proc.wait(timeout=hang_bound(120))  # a SIGKILLed process, gone once its I/O ends
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        logged, saved, tmp = _logged_steps(out), _saved_step(out), out / "checkpoint.tmp"
        half_written = tmp.exists() and grpo.checkpoint_step(tmp) is None
        landed.append(f"{phase}: exit {proc.returncode}, {logged} steps logged, checkpoint "
                      f"of step {saved}{', checkpoint.tmp half-written' if half_written else ''}")
        in_phase.append({"start-up": True,
                         "logged, not saved": logged > saved,
                         "saving": half_written,
                         "mid-step": saved == began and not tmp.exists()}[phase])
    history = (f"reference: first checkpoint after {reference.first_save_s:.2f} s, shortest "
               f"save {reference.save_s:.2f} s, shortest step {reference.step_s:.2f} s")
    history += "".join(f"\n--- launch {k} ({landed[k]}):\n"
                      + (tmp_path / f"launch{k}.log").read_text()[-600:]
                      for k in range(len(PHASES)))
    # every kill landed in a running process (none ended the run on its own), in its part
    assert all(": exit -9," in line for line in landed), history
    assert all(in_phase), history
    final = tmp_path / "final.log"
    rc = finish(_run(config, out, True, tmp_path, final), f"train-local {out}",
                progress=lambda: _state(out, final), stall_s=STALL_S)
    assert rc == 0, history + final.read_text()[-2000:]
    assert "Traceback" not in final.read_text()

    ref = reference.run
    pd.testing.assert_frame_equal(_comparable(out / "metrics.csv"),
                                  _comparable(ref / "metrics.csv"))
    # every selection and completion of every step, each step exactly once
    assert (out / "samples.jsonl").read_text() == (ref / "samples.jsonl").read_text()
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("checkpoint")) == \
        ["checkpoint"]
    assert grpo.checkpoint_step(out / "checkpoint") == STEPS
    ours = torch.load(out / "checkpoint" / "state.pt", weights_only=False)
    theirs = torch.load(ref / "checkpoint" / "state.pt", weights_only=False)
    assert ours["selector"] == theirs["selector"]
    assert torch.equal(ours["sampler_rng"], theirs["sampler_rng"])
    a = torch.load(out / "checkpoint" / "policy.pt")
    b = torch.load(ref / "checkpoint" / "policy.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)

"""Checkpoints of a GRPO run: saved by renames, so a kill at any instant leaves a complete one.

A checkpoint folder holds the policy, the optimiser, the sampler's random state and the
complete selector state. :class:`CheckpointMixin` gives the trainer its
:meth:`~CheckpointMixin.save_checkpoint` and :meth:`~CheckpointMixin.load_checkpoint`;
:func:`recover_checkpoint` cleans up after a kill.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from mathagent.grpo.files import _fsync, _fsync_dir

# A checkpoint folder holds these files; trainer_state.json is written last, so a folder
# holding all of them with a readable trainer_state.json is complete.
CHECKPOINT_FILES = ("policy.pt", "optimizer.pt", "state.pt")
CHECKPOINT_MARKER = "trainer_state.json"
CHECKPOINT_NAME = "checkpoint"  # the run's current checkpoint
CHECKPOINT_TMP = "checkpoint.tmp"  # the next one, being written
CHECKPOINT_OLD = "checkpoint.old"  # the previous one, being retired


class NoCheckpointError(FileNotFoundError):
    """A run folder holds no complete checkpoint."""


def checkpoint_step(folder: Path) -> int | None:
    """The step of the complete checkpoint in ``folder``; None if absent or incomplete."""
    try:
        meta = json.loads((Path(folder) / CHECKPOINT_MARKER).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or not isinstance(meta.get("step"), int):
        return None
    if not all((Path(folder) / name).is_file() for name in CHECKPOINT_FILES):
        return None
    return meta["step"]


def _install_checkpoint(run_dir: Path, src: Path) -> Path:
    """Make the complete checkpoint folder ``src`` the run's ``checkpoint``.

    Renames only: ``checkpoint`` -> ``checkpoint.old``, ``src`` -> ``checkpoint``, then
    ``checkpoint.old`` is removed. A kill between any two operations leaves at least one
    complete checkpoint that :func:`recover_checkpoint` finds.
    """
    ckpt, old = run_dir / CHECKPOINT_NAME, run_dir / CHECKPOINT_OLD
    if old.exists():  # left by a kill; never the newest complete one here
        shutil.rmtree(old)
    if ckpt.exists():
        os.rename(ckpt, old)
    os.rename(src, ckpt)
    _fsync_dir(run_dir)
    if old.exists():
        shutil.rmtree(old)
    return ckpt


def recover_checkpoint(run_dir: Path) -> int | None:
    """Clean up after a kill and return the step of ``run_dir/checkpoint``.

    Of ``checkpoint``, ``checkpoint.tmp`` and ``checkpoint.old`` the newest complete one
    (ties: in that order) becomes ``checkpoint``; the others are removed. Each operation
    keeps that newest complete checkpoint on disk, so a kill during recovery is recovered
    the same way. Returns None when there is no complete checkpoint (incomplete leftovers
    of ``checkpoint.tmp``/``checkpoint.old`` are removed then).

    Raises:
        ValueError: ``checkpoint`` itself is incomplete and nothing complete replaces it
            (files deleted by hand): removing it would lose data, so a person decides.
    """
    run_dir = Path(run_dir)
    names = (CHECKPOINT_NAME, CHECKPOINT_TMP, CHECKPOINT_OLD)
    found = [(step, -rank, name) for rank, name in enumerate(names)
             if (step := checkpoint_step(run_dir / name)) is not None]
    ckpt = run_dir / CHECKPOINT_NAME
    if not found:
        if ckpt.exists():
            missing = [f for f in (*CHECKPOINT_FILES, CHECKPOINT_MARKER)
                       if not (ckpt / f).is_file()]
            raise ValueError(f"checkpoint {ckpt} is incomplete (missing or unreadable: "
                             f"{', '.join(missing) or CHECKPOINT_MARKER}); remove it to start "
                             "the run again from step 0")
        for name in (CHECKPOINT_TMP, CHECKPOINT_OLD):
            if (run_dir / name).exists():
                shutil.rmtree(run_dir / name)
        return None
    step, _, best = max(found)
    tmp, old = run_dir / CHECKPOINT_TMP, run_dir / CHECKPOINT_OLD
    if best == CHECKPOINT_OLD:  # move it where the swap below expects the newcomer
        if tmp.exists():
            shutil.rmtree(tmp)
        os.rename(old, tmp)
        best = CHECKPOINT_TMP
    if best == CHECKPOINT_TMP:
        _install_checkpoint(run_dir, tmp)
    for name in (CHECKPOINT_TMP, CHECKPOINT_OLD):
        if (run_dir / name).exists():
            shutil.rmtree(run_dir / name)
    return step


class CheckpointMixin:
    """Saving and restoring a trainer's complete state (mixed into ``GRPOTrainer``).

    Uses the trainer's ``torch``, ``cfg``, ``run_dir``, ``ckpt_dir``, ``policy``,
    ``optimizer``, ``selector``, ``sampler_gen`` and ``step_count``.
    """

    def save_checkpoint(self) -> Path:
        """Save policy, optimiser, sampler state, selector state and the step count.

        The new checkpoint is written to ``checkpoint.tmp`` (``trainer_state.json`` last,
        each file flushed to disk) and swapped in by renames (:func:`_install_checkpoint`),
        so a kill at any instant leaves a complete checkpoint for ``--resume``.
        """
        torch = self.torch
        tmp = self.run_dir / CHECKPOINT_TMP
        if tmp.exists():  # a half-written one from a killed run
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)

        def save(obj, name):
            with open(tmp / name, "wb") as f:
                torch.save(obj, f)
                f.flush()
                _fsync(f.fileno())

        save(self.policy.model.state_dict(), "policy.pt")
        save(self.optimizer.state_dict(), "optimizer.pt")
        save({"selector": self.selector.state_dict(),
              "sampler_rng": self.sampler_gen.get_state()}, "state.pt")
        with open(tmp / CHECKPOINT_MARKER, "w") as f:  # last: marks the folder complete
            json.dump({"step": self.step_count, "selector": self.cfg.selector.name,
                       "seed": self.cfg.trainer.seed}, f)
            f.flush()
            _fsync(f.fileno())
        _fsync_dir(tmp)
        return _install_checkpoint(self.run_dir, tmp)

    def load_checkpoint(self) -> int:
        """Restore everything :meth:`save_checkpoint` wrote; returns the restored step.

        Leftovers of a kill are cleaned up first and the newest complete checkpoint is
        used (:func:`recover_checkpoint`).

        Raises:
            NoCheckpointError: the run folder holds no complete checkpoint.
            ValueError: the checkpoint belongs to another selector or seed, or cannot be
                read; the message names the file.
        """
        torch = self.torch
        step = recover_checkpoint(self.run_dir)
        if step is None:
            raise NoCheckpointError(f"cannot resume: no checkpoint in {self.ckpt_dir}")
        state_file = self.ckpt_dir / CHECKPOINT_MARKER
        meta = json.loads(state_file.read_text())
        if meta.get("selector") != self.cfg.selector.name:
            raise ValueError(f"checkpoint {self.ckpt_dir} was written by selector "
                             f"{meta.get('selector')!r}, not {self.cfg.selector.name!r}")
        if "seed" in meta and meta["seed"] != self.cfg.trainer.seed:
            raise ValueError(f"checkpoint {self.ckpt_dir} was written with seed "
                             f"{meta['seed']}, not {self.cfg.trainer.seed}")
        dev = self.policy.device

        def load(name, map_location=dev, **kw):
            try:
                return torch.load(self.ckpt_dir / name, map_location=map_location, **kw)
            except Exception as exc:  # a damaged file: name it, no traceback
                raise ValueError(f"checkpoint file {self.ckpt_dir / name} cannot be read: "
                                 f"{type(exc).__name__}: {exc}") from None

        policy_state = load("policy.pt")
        optimizer_state = load("optimizer.pt")
        state = load("state.pt", map_location="cpu", weights_only=False)
        try:
            self.policy.model.load_state_dict(policy_state)
            self.optimizer.load_state_dict(optimizer_state)
        except (RuntimeError, ValueError, KeyError) as exc:
            raise ValueError(f"checkpoint {self.ckpt_dir} does not fit this model: "
                             f"{str(exc).splitlines()[0]}") from None
        from mathagent.selectors import load_selector_state

        try:  # the complete state, also for Trinity's difficulty_based (its posteriors)
            complete = load_selector_state(getattr(self.selector, "selector", self.selector),
                                           state["selector"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"checkpoint file {self.ckpt_dir / 'state.pt'}: {exc}") from None
        if not complete:
            print(f"train-local: {self.ckpt_dir / 'state.pt'} holds the selector's position "
                  "only (written by an older version); its posteriors restart from the prior",
                  file=sys.stderr)
        self.sampler_gen.set_state(state["sampler_rng"])
        self.step_count = int(step)
        return self.step_count

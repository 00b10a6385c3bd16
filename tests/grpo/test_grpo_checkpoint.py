"""Checkpoints of the tutorial-scale trainer survive a kill at any instant (no model needed).

A tiny stand-in policy (one linear layer), its optimiser and a real Trinity
``difficulty_based`` selector go through :meth:`GRPOTrainer.save_checkpoint` and
:meth:`GRPOTrainer.load_checkpoint`. A "kill" is simulated at every file-system operation
of a save (and inside every ``torch.save``, leaving a half-written file): the process
stops there, and a fresh trainer must resume from a complete checkpoint, the old one or the
new one, with every piece of it from the same step, and keep saving afterwards.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import types
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch

from mathagent import grpo
from mathagent import policy as policy_mod
from mathagent import selectors as S

WEAK, STRONG = "weak", "strong"
LEFTOVERS = ("checkpoint.tmp", "checkpoint.old")


def _taskset(n: int = 24) -> datasets.Dataset:
    rng = np.random.default_rng(0)
    weak = rng.integers(0, 9, n) / 16
    return datasets.Dataset.from_dict({"question": [f"q{i}" for i in range(n)],
                                       "answer": [f"#### {i}" for i in range(n)],
                                       WEAK: weak, STRONG: weak + 0.4})


DATA = _taskset()


def _trainer(run_dir: Path):
    """A GRPOTrainer with everything a checkpoint holds, small."""
    t = grpo.GRPOTrainer.__new__(grpo.GRPOTrainer)
    t.torch = torch
    t.cfg = grpo.load_config(None, {"selector.name": "difficulty_based"})
    t.run_dir = run_dir
    t.ckpt_dir = run_dir / "checkpoint"
    model = torch.nn.Linear(3, 2)
    with torch.no_grad():  # the same start in every trainer
        for k, p in enumerate(model.parameters()):
            p.copy_(torch.linspace(-1.0, 1.0, p.numel()).reshape(p.shape) + k)
    t.policy = types.SimpleNamespace(model=model, device=torch.device("cpu"))
    t.optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    t.selector = S.make_selector("difficulty_based", DATA, [WEAK, STRONG], seed=0, m=4,
                                 tau=0, do_sample=True)
    t.sampler_gen = policy_mod.make_generator("cpu", 1)
    t.step_count = 0
    return t


def _advance(t, step: int) -> None:
    """Make every part of the state depend on the step."""
    while t.step_count < step:
        idx = t.selector.get_indices(4)
        t.selector.feedback(idx, [(i % 5) / 4 for i in idx])
        t.optimizer.zero_grad()
        t.policy.model(torch.ones(1, 3)).sum().backward()
        t.optimizer.step()
        torch.rand(3, generator=t.sampler_gen)
        t.step_count += 1


def _snapshot(t) -> dict:
    return {"step": t.step_count,
            "weights": [p.detach().clone() for p in t.policy.model.parameters()],
            "alphas": t.selector.posterior()[0].copy(),
            "index": t.selector.selector.current_index,
            "rng": t.sampler_gen.get_state().clone()}


def _assert_state(t, snap: dict) -> None:
    assert t.step_count == snap["step"]
    for p, w in zip(t.policy.model.parameters(), snap["weights"], strict=True):
        assert torch.equal(p.detach(), w)
    np.testing.assert_array_equal(t.selector.posterior()[0], snap["alphas"])
    assert t.selector.selector.current_index == snap["index"]
    assert torch.equal(t.sampler_gen.get_state(), snap["rng"])


class Killed(BaseException):
    """The simulated SIGKILL (a BaseException, so no ``except Exception`` catches it)."""


class Killer:
    """Counts file-system operations and "kills" the process at operation ``at``.

    Renames, removals, directory creation and fsyncs are counted; ``torch.save`` counts
    twice, once with half of the file written. After the kill nothing more is done.
    """

    def __init__(self, monkeypatch, at: int | None):
        self.at, self.count, self.dead = at, 0, False
        for name in ("rename", "replace", "unlink", "rmdir", "mkdir", "fsync"):
            real = getattr(os, name)
            monkeypatch.setattr(os, name, self._wrap(real))
        self.monkeypatch = monkeypatch

    def tick(self) -> None:
        if self.dead:
            raise Killed
        if self.at is not None and self.count == self.at:
            self.dead = True
            raise Killed
        self.count += 1

    def _wrap(self, real):
        def op(*args, **kwargs):
            self.tick()
            return real(*args, **kwargs)

        return op

    def save(self, obj, f) -> None:
        buf = io.BytesIO()
        torch.save(obj, buf)
        data = buf.getvalue()
        if not hasattr(f, "write"):  # a path
            with open(f, "wb") as fh:
                self._write(fh, data)
        else:
            self._write(f, data)

    def _write(self, fh, data: bytes) -> None:
        self.tick()
        fh.write(data[: len(data) // 2])
        fh.flush()
        self.tick()
        fh.write(data[len(data) // 2:])

    def torch(self):
        return types.SimpleNamespace(save=self.save, load=torch.load)


def _save_killed(monkeypatch, t, at: int | None) -> int:
    """Save ``t``'s checkpoint, killed at operation ``at``; returns the operations done."""
    with monkeypatch.context() as mp:
        killer = Killer(mp, at)
        t.torch = killer.torch()
        try:
            t.save_checkpoint()
        except Killed:
            pass
        finally:
            t.torch = torch
    return killer.count


def _load_killed(monkeypatch, run_dir: Path, at: int | None):
    """Resume ``run_dir``, killed at operation ``at``; returns whether the kill came."""
    t = _trainer(run_dir)
    with monkeypatch.context() as mp:
        Killer(mp, at)
        try:
            t.load_checkpoint()
        except Killed:
            return True
    return False


def _resume(run_dir: Path):
    t = _trainer(run_dir)
    t.load_checkpoint()
    return t


def _saved_at_1_advanced_to_2(run_dir: Path):
    """A trainer with its step-1 checkpoint saved in ``run_dir`` and its state at step 2."""
    run_dir.mkdir()
    t = _trainer(run_dir)
    _advance(t, 1)
    t.save_checkpoint()
    _advance(t, 2)
    return t


def test_a_kill_at_any_instant_of_a_save_leaves_a_complete_checkpoint(tmp_path, monkeypatch):
    ref = tmp_path / "ref"
    ref.mkdir()
    t = _trainer(ref)
    _advance(t, 1)
    t.save_checkpoint()
    one = _snapshot(t)
    _advance(t, 2)
    two = _snapshot(t)
    total = _save_killed(monkeypatch, t, None)  # how many operations a save does
    assert total >= 8
    outcomes = set()
    for at in range(total):
        run = tmp_path / f"kill{at}"
        _save_killed(monkeypatch, _saved_at_1_advanced_to_2(run), at)
        resumed = _resume(run)  # cleans up, takes the newest complete checkpoint
        snap = one if resumed.step_count == 1 else two
        _assert_state(resumed, snap)
        outcomes.add(resumed.step_count)
        assert not [n for n in LEFTOVERS if (run / n).exists()], f"kill at {at}: leftovers"
        _advance(resumed, 3)  # and the run goes on saving
        resumed.save_checkpoint()
        assert _resume(run).step_count == 3
    assert outcomes == {1, 2}  # early kills keep the old checkpoint, late ones the new


def test_a_kill_during_the_cleanup_of_a_resume_is_cleaned_up_the_same_way(tmp_path,
                                                                          monkeypatch):
    total = _save_killed(monkeypatch, _saved_at_1_advanced_to_2(tmp_path / "ref"), None)
    for at in range(total):
        state = tmp_path / f"state{at}"
        _save_killed(monkeypatch, _saved_at_1_advanced_to_2(state), at)
        clean = tmp_path / "clean"
        shutil.copytree(state, clean)
        expected = _resume(clean).step_count
        shutil.rmtree(clean)
        for at2 in range(40):
            run = tmp_path / "run"
            shutil.copytree(state, run)
            killed = _load_killed(monkeypatch, run, at2)
            assert _resume(run).step_count == expected, (at, at2)
            shutil.rmtree(run)
            if not killed:
                break  # the recovery had fewer than at2 operations: all covered


def test_a_leftover_old_checkpoint_neither_blocks_saving_nor_resuming(tmp_path):
    """What a kill during the old swap left: checkpoint.old with some files in it."""
    t = _trainer(tmp_path)
    _advance(t, 1)
    t.save_checkpoint()
    shutil.copytree(tmp_path / "checkpoint", tmp_path / "checkpoint.old")
    (tmp_path / "checkpoint.old" / "policy.pt").unlink()
    _advance(t, 2)
    t.save_checkpoint()  # was: OSError: Directory not empty
    assert not (tmp_path / "checkpoint.old").exists()
    assert _resume(tmp_path).step_count == 2


def test_a_kill_between_the_renames_resumes_from_the_new_checkpoint(tmp_path):
    """checkpoint renamed to checkpoint.old, checkpoint.tmp complete, no checkpoint."""
    t = _trainer(tmp_path)
    _advance(t, 1)
    t.save_checkpoint()
    _advance(t, 2)
    t.save_checkpoint()
    two = _snapshot(t)
    shutil.copytree(tmp_path / "checkpoint", tmp_path / "checkpoint.tmp")
    (tmp_path / "checkpoint").rename(tmp_path / "checkpoint.old")
    resumed = _resume(tmp_path)  # was: cannot resume: no checkpoint
    _assert_state(resumed, two)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]


def test_torn_or_damaged_checkpoints_are_never_taken(tmp_path):
    t = _trainer(tmp_path)
    _advance(t, 1)
    t.save_checkpoint()
    one = _snapshot(t)
    # a newer one whose marker was torn by the kill
    shutil.copytree(tmp_path / "checkpoint", tmp_path / "checkpoint.tmp")
    marker = tmp_path / "checkpoint.tmp" / "trainer_state.json"
    marker.write_text(marker.read_text().replace("1", "7")[:-3])
    _assert_state(_resume(tmp_path), one)
    assert not (tmp_path / "checkpoint.tmp").exists()
    # the only checkpoint lost a file by hand: an error naming it, nothing removed
    (tmp_path / "checkpoint" / "optimizer.pt").unlink()
    with pytest.raises(ValueError, match=r"checkpoint.*incomplete.*optimizer\.pt"):
        _resume(tmp_path)
    assert (tmp_path / "checkpoint" / "policy.pt").exists()
    # a file that does not unpickle: one line naming it
    t = _trainer(tmp_path / "b")
    (tmp_path / "b").mkdir()
    _advance(t, 1)
    t.save_checkpoint()
    (tmp_path / "b" / "checkpoint" / "state.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match=r"state\.pt cannot be read"):
        _resume(tmp_path / "b")


def test_an_older_checkpoint_without_posteriors_loads_with_a_warning(tmp_path, capsys):
    t = _trainer(tmp_path)
    _advance(t, 1)
    t.save_checkpoint()
    state_file = tmp_path / "checkpoint" / "state.pt"
    state = torch.load(state_file, weights_only=False)
    state["selector"].pop(S.FULL_STATE_KEY)  # what the previous version wrote
    torch.save(state, state_file)
    resumed = _resume(tmp_path)
    assert resumed.selector.selector.current_index == 4
    assert "posteriors restart from the prior" in capsys.readouterr().err


def test_samples_are_cut_back_to_the_checkpoint_and_a_torn_line_dropped(tmp_path):
    path = tmp_path / "samples.jsonl"
    recs = [json.dumps({"step": s, "k": k}) + "\n" for s in (1, 2, 3) for k in (0, 1)]
    path.write_text("".join(recs) + recs[0][:9])
    assert grpo.truncate_jsonl(path, 2) == 3
    assert path.read_text() == "".join(recs[:4])
    assert grpo.truncate_jsonl(path, 2) == 0
    path.write_text(recs[0] + "garbage\n" + recs[1])
    with pytest.raises(ValueError, match=r"samples\.jsonl: line 2"):
        grpo.truncate_jsonl(path, 2)

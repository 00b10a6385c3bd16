"""mathagent.step_profile: one training step's update and log-prob pass under torch.profiler.

Real parts: torch.profiler over a real (small) model's forward and backward on the CPU, and
verl 0.8.0's own ``TrainingWorker`` class, whose two entry points the lever wraps. A
``TrainingWorker`` cannot be built here (it needs an FSDP engine on a GPU), so the call
counting is checked on a stand-in class with the same two method names."""

from __future__ import annotations

import gzip
import json
import types

import pytest
import torch

from mathagent import compat, step_profile


def test_the_step_is_a_positive_whole_number_and_the_lever_is_off_without_it(monkeypatch):
    assert step_profile.profile_problem(None) is None
    assert step_profile.profile_problem(" 3 ") is None
    for bad in ("0", "-1", "two", "2.5", "²"):
        assert "is not the number of a step to profile" in step_profile.profile_problem(bad)
    monkeypatch.delenv(step_profile.PROFILE_ENV, raising=False)
    assert step_profile.profile_call() is None
    assert "applied only with MATHAGENT_PROFILE_STEP=N" in step_profile.unwanted()
    monkeypatch.setenv(step_profile.PROFILE_ENV, "2")
    assert step_profile.profile_call() == 2 and step_profile.unwanted() is None
    assert compat.lever_problem(step_profile.PROFILE_ENV, "x").startswith("MATHAGENT_PROFILE_STEP=")


def _train_step(model, opt):
    batch = torch.randn(16, 32)
    loss = model(batch).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    return float(loss.detach())


def test_a_profiled_call_returns_its_value_and_writes_a_summary_a_table_and_a_trace(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.AdamW(model.parameters())
    value = step_profile.profiled(lambda: _train_step(model, opt), "update_call2", tmp_path)
    assert isinstance(value, float)
    summary = json.loads((tmp_path / "update_call2.json").read_text())
    assert summary["label"] == "update_call2" and summary["cuda"] is False
    assert summary["wall_s"] > 0 and summary["gpu_busy_share"] is None
    assert summary["cpu_operator_s"] > 0
    names = [op["name"] for op in summary["top_operators"]]
    assert any(name in ("aten::addmm", "aten::mm") for name in names)  # the linear layers
    assert (tmp_path / "update_call2.txt").read_text().startswith("update_call2: ")
    trace = json.loads(gzip.decompress((tmp_path / "update_call2.trace.json.gz").read_bytes()))
    assert any(event.get("name") == "aten::addmm" for event in trace["traceEvents"])


def test_only_the_asked_call_of_each_entry_point_is_profiled(tmp_path, monkeypatch):
    class StandIn:  # verl's TrainingWorker needs an FSDP engine on a GPU
        def train_mini_batch(self, data):
            return ("update", data)

        def infer_batch(self, data):
            return ("log-probs", data)

    module = types.SimpleNamespace(TrainingWorker=StandIn)
    monkeypatch.setenv(step_profile.PROFILE_ENV, "2")
    monkeypatch.setenv("MATHAGENT_RUNS", str(tmp_path))
    assert step_profile.install(module) is True
    assert step_profile.install(module) is False  # already wrapped
    worker = StandIn()
    assert [worker.train_mini_batch(k) for k in range(3)] == [("update", k) for k in range(3)]
    assert worker.infer_batch("a") == ("log-probs", "a")
    written = sorted(p.name for p in (tmp_path / "profile").iterdir())
    assert written == ["train_mini_batch_call2.json", "train_mini_batch_call2.trace.json.gz",
                       "train_mini_batch_call2.txt"]


def test_installed_on_verls_training_worker_it_keeps_the_dispatch_attributes(monkeypatch):
    engine_workers = pytest.importorskip("verl.workers.engine_workers")
    from verl.single_controller.base.decorator import MAGIC_ATTR

    worker = engine_workers.TrainingWorker
    originals = {name: getattr(worker, name) for name in step_profile.ENTRY_POINTS}
    try:
        assert step_profile.install(engine_workers) is True
        for name, original in originals.items():
            wrapped = getattr(worker, name)
            assert wrapped is not original and wrapped.__wrapped__ is original
            assert getattr(wrapped, MAGIC_ATTR) == getattr(original, MAGIC_ATTR)
    finally:
        for name, original in originals.items():
            setattr(worker, name, original)


def test_the_compat_fix_is_a_lever_applied_only_when_asked(monkeypatch):
    fix = next(f for f in compat.FIXES if f.name == "verl-step-profile")
    assert fix.module == "verl.workers.engine_workers"
    assert step_profile.PROFILE_ENV in compat.LEVER_ENVS
    monkeypatch.delenv(step_profile.PROFILE_ENV, raising=False)
    result = compat._gate(fix, {"verl": "0.8.0"})
    assert result.status == "skipped" and "MATHAGENT_PROFILE_STEP=N" in result.reason
    monkeypatch.setenv(step_profile.PROFILE_ENV, "3")
    assert compat._gate(fix, {"verl": "0.8.0"}) is None
    assert compat._gate(fix, {"verl": "0.8.1"}).status == "skipped"


def test_trains_preflight_refuses_a_step_that_is_not_a_number(monkeypatch):
    from mathagent import launch

    config = types.SimpleNamespace(
        mode="both", explorer=types.SimpleNamespace(concurrent_mode="asynchronous"))
    monkeypatch.setenv(step_profile.PROFILE_ENV, "third")
    refused = launch.Preflight()
    launch.check_versions(config, refused)
    assert refused.problems == [step_profile.profile_problem("third")]
    monkeypatch.setenv(step_profile.PROFILE_ENV, "3")
    passed = launch.Preflight()
    launch.check_versions(config, passed)
    assert passed.problems == []

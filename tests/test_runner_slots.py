"""The ``trinity-runner-slots`` lever (:mod:`mathagent.runner_slots`) without Ray: its setting
(what ``train``'s preflight refuses, what the workers are given), its alias ids, and its gate
and patch in :mod:`mathagent.compat` on Trinity-RFT 0.6.0's real scheduler module.

The patch checks run in a fresh interpreter (a fix patches the module for the whole process)
with the ``vllm`` stand-in of ``fresh_python.py``, without which Trinity's scheduler module
cannot be imported on a machine without vLLM. ``test_runner_slots_ray.py`` runs the patched
scheduler on a real Ray head.
"""

from __future__ import annotations

import types

import pytest
from fresh_python import VLLM_STAND_IN, fix_named, run_python, wrong_versions

from mathagent import compat, launch, runner_slots
from mathagent.runner_slots import SLOTS_ENV

WRONG_VERSIONS = wrong_versions()
needs_tested_versions = pytest.mark.skipif(WRONG_VERSIONS is not None,
                                           reason=str(WRONG_VERSIONS))

# --------------------------------------------------------------------------------------
# the setting
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "1", "4", " 8 "])
def test_a_whole_number_of_slots_is_accepted(value):
    assert runner_slots.slots_problem(value) is None


@pytest.mark.parametrize("value", ["0", "-2", "x", "2.5", "", "²"])
def test_anything_else_is_refused_in_one_line_naming_the_setting(value):
    problem = runner_slots.slots_problem(value)
    assert problem is not None and "\n" not in problem
    assert problem.startswith(f"{SLOTS_ENV}={value!r} ")


def test_slots_default_to_one(monkeypatch):
    monkeypatch.delenv(SLOTS_ENV, raising=False)
    assert runner_slots.slots() == 1
    monkeypatch.setenv(SLOTS_ENV, "4")
    assert runner_slots.slots() == 4
    monkeypatch.setenv(SLOTS_ENV, "x")  # refused by the preflight; never more than one here
    assert runner_slots.slots() == 1


def test_alias_ids_follow_the_runner_count():
    assert runner_slots.alias_ids(1, 16, 4) == [17, 33, 49]
    assert runner_slots.alias_ids(0, 2, 3) == [2, 4]
    assert runner_slots.alias_ids(5, 16, 1) == []
    # all runners' ids together: each id once, 0 .. k * runner_num - 1
    every = [i for r in range(16) for i in [r, *runner_slots.alias_ids(r, 16, 4)]]
    assert sorted(every) == list(range(64))


def test_preflight_refuses_a_bad_setting_and_passes_a_good_one(monkeypatch):
    """check_versions reads the mode and the explorer's concurrent mode of the config."""
    config = types.SimpleNamespace(
        mode="both", explorer=types.SimpleNamespace(concurrent_mode="asynchronous"))
    monkeypatch.setenv(SLOTS_ENV, "2.5")
    refused = launch.Preflight()
    launch.check_versions(config, refused)
    assert refused.problems == [runner_slots.slots_problem("2.5")]
    for value in ("4", None):
        if value is None:
            monkeypatch.delenv(SLOTS_ENV)
        else:
            monkeypatch.setenv(SLOTS_ENV, value)
        result = launch.Preflight()
        launch.check_versions(config, result)
        assert result.problems == [], value


def test_preflight_refuses_slots_where_a_runner_reuses_one_workflow_instance(monkeypatch):
    """In sequential mode a runner resets and reuses one workflow instance per task."""
    monkeypatch.setenv(SLOTS_ENV, "4")
    for mode, refused in (("sequential", True), ("multi-threading", False)):
        config = types.SimpleNamespace(mode="both",
                                       explorer=types.SimpleNamespace(concurrent_mode=mode))
        result = launch.Preflight()
        launch.check_versions(config, result)
        assert bool(result.problems) == refused, mode
        if refused:
            assert len(result.problems) == 1 and "concurrent_mode is 'sequential'" in \
                result.problems[0]
    monkeypatch.setenv(SLOTS_ENV, "1")  # Trinity's own one task a runner: any mode
    result = launch.Preflight()
    launch.check_versions(types.SimpleNamespace(
        mode="both", explorer=types.SimpleNamespace(concurrent_mode="sequential")), result)
    assert result.problems == []


def test_the_setting_reaches_every_ray_worker(monkeypatch):
    """Trinity's scheduler lives in a Ray worker of the run, so ``train`` passes the
    variable in the run's runtime_env (the checked config's two parts it reads)."""
    config = types.SimpleNamespace(get_envs=dict,
                                   cluster=types.SimpleNamespace(ray_address="10.0.0.1:6379"))
    monkeypatch.setenv(SLOTS_ENV, "4")
    assert launch.worker_runtime_env(config)["env_vars"][SLOTS_ENV] == "4"
    monkeypatch.delenv(SLOTS_ENV)
    assert SLOTS_ENV not in launch.worker_runtime_env(config)["env_vars"]


# --------------------------------------------------------------------------------------
# the gate in mathagent.compat
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "1", "x"])
def test_the_lever_is_skipped_unless_asked_for(monkeypatch, value):
    if value is None:
        monkeypatch.delenv(SLOTS_ENV, raising=False)
    else:
        monkeypatch.setenv(SLOTS_ENV, value)
    result = compat._gate(fix_named("trinity-runner-slots"), {"trinity-rft": "0.6.0"})
    assert result.status == "skipped"
    assert result.reason == f"a speed lever, applied only with {SLOTS_ENV}=K for K of 2 or more"


def test_the_lever_is_wanted_with_two_or_more_slots_on_trinity_0_6_0_only(monkeypatch):
    lever = fix_named("trinity-runner-slots")
    monkeypatch.setenv(SLOTS_ENV, "2")
    assert compat._gate(lever, {"trinity-rft": "0.6.0"}) is None
    other = compat._gate(lever, {"trinity-rft": "0.6.1"})
    assert other.status == "skipped"
    assert "trinity-rft 0.6.1" in other.reason and "0.6.0" in other.reason
    assert compat._gate(lever, {}).reason == "trinity-rft is not installed"
    assert SLOTS_ENV in compat.LEVER_ENVS


# --------------------------------------------------------------------------------------
# the patch on Trinity's scheduler module (fresh interpreters)
# --------------------------------------------------------------------------------------

PATCH = """
    import os
    from trinity.explorer import scheduler
    from mathagent.compat import apply_all

    def functions():
        return scheduler.Scheduler._create_runner, scheduler.RunnerWrapper.restart_runner

    def results(**kwargs):
        return {r.name: [r.status, r.reason] for r in apply_all(**kwargs)}["trinity-runner-slots"]

    original = functions()
"""


@pytest.mark.slow  # a Python that imports Trinity
@needs_tested_versions
def test_four_slots_patch_the_scheduler_once():
    out, _ = run_python(VLLM_STAND_IN, PATCH, """
        os.environ["MATHAGENT_RUNNER_SLOTS"] = "4"
        first = results()
        patched = functions()
        second = results()
        emit({"first": first, "second": second,
              "marked": [getattr(f, "_mathagent_fix", False) for f in patched],
              "wraps_original": [p.__wrapped__ is o for p, o in zip(patched, original)],
              "docs": [p.__doc__ == o.__doc__ for p, o in zip(patched, original)],
              "unchanged_by_second": [a is b for a, b in zip(functions(), patched)]})
    """)
    status, reason = out["first"]
    assert status == "applied"
    assert "trinity-rft 0.6.0" in reason and fix_named("trinity-runner-slots").upstream in reason
    assert out["second"][0] == "already applied"
    assert out["marked"] == [True, True]
    assert out["wraps_original"] == [True, True]  # not wrapped twice
    assert out["docs"] == [True, True]
    assert out["unchanged_by_second"] == [True, True]


@pytest.mark.slow  # a Python that imports Trinity
@needs_tested_versions
def test_without_slots_or_on_another_trinity_the_scheduler_is_untouched():
    out, _ = run_python(VLLM_STAND_IN, PATCH, """
        os.environ.pop("MATHAGENT_RUNNER_SLOTS", None)
        unset = results()
        os.environ["MATHAGENT_RUNNER_SLOTS"] = "1"
        one = results()
        os.environ["MATHAGENT_RUNNER_SLOTS"] = "4"
        newer = results(versions={"trinity-rft": "0.6.1"})
        emit({"unset": unset, "one": one, "newer": newer,
              "untouched": [a is b for a, b in zip(functions(), original)],
              "marked": [hasattr(f, "_mathagent_fix") for f in functions()]})
    """)
    lever_off = ["skipped", f"a speed lever, applied only with {SLOTS_ENV}=K for K of 2 or more"]
    assert out["unset"] == lever_off and out["one"] == lever_off
    status, reason = out["newer"]
    assert status == "skipped" and "trinity-rft 0.6.1" in reason and "0.6.0" in reason
    assert out["untouched"] == [True, True]
    assert out["marked"] == [False, False]

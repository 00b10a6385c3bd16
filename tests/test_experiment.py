"""``python -m mathagent experiment``: the spec and its errors, the plan (a finished run
skipped, a partial one moved aside and started again), the GPU-time estimate from the
committed experiment's phase times, and the dry run of ``configs/experiment_qwen.yaml``.

The committed experiment is ``results/trinity_qwen/`` (three arms x seeds 0-2 of the Qwen
policy); its ``phase_times.csv`` and ``startup.csv`` hold the phase times the estimate uses.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from bounds import hang_bound

from mathagent import cli, paths
from mathagent.cli import main
from mathagent.experiment import plan as plans
from mathagent.experiment.estimate import estimate
from mathagent.experiment.schedule import schedule
from mathagent.results.spec import SEED_KEYS, SpecError, load_spec

SPEC = paths.CONFIGS_DIR / "experiment_qwen.yaml"
SHORT = paths.CONFIGS_DIR / "experiment_qwen_short.yaml"
COMMITTED = paths.RESULTS_DIR / "trinity_qwen"


def test_the_committed_spec_is_the_committed_experiment():
    spec = load_spec(SPEC)
    assert spec.out == COMMITTED
    assert list(spec.arms) == ["random", "difficulty", "bots"]
    # the folder's report names this spec and takes its arms (configs) and seeds from it,
    # each arm under the selector its runs report
    import yaml

    from mathagent.report import read_spec

    assert yaml.safe_load((COMMITTED / "experiment.yaml").read_text())["experiment"] == \
        "configs/experiment_qwen.yaml"
    exp = read_spec(COMMITTED)
    assert exp.arm_names == ["random", "difficulty_based", "bots"]
    assert [a.config for a in exp.arms] == [f"configs/{c.name}" for c in spec.arms.values()]
    assert exp.seeds == spec.seeds
    runs = spec.runs()
    # every run has a folder of that name in the committed experiment, with that seed
    for run in runs:
        params = json.loads((COMMITTED / run.name / "params.json").read_text())
        assert params["seed"] == run.seed
        assert Path(params["config"]).name == run.config.name
        assert [f"{key}={run.seed}" for key in SEED_KEYS] == list(run.overrides[-2:])
    assert {r.name for r in runs} == {d.name for d in COMMITTED.iterdir()
                                      if (d / "params.json").is_file()}
    assert {schedule(r).steps for r in runs} == {16}
    assert {schedule(r).eval_steps for r in runs} == {(8, 16)}


def test_overrides_set_the_steps_and_evaluations_of_every_run():
    spec = load_spec(SHORT)
    assert [r.name for r in spec.runs()] == ["random_seed0", "bots_seed0"]
    for run in spec.runs():
        assert "buffer.total_steps=3" in run.overrides
        assert schedule(run).steps == 3 and schedule(run).eval_steps == (3,)


def test_the_60_step_spec_plans_the_longer_runs_with_the_fast_settings(tmp_path):
    spec = load_spec(paths.CONFIGS_DIR / "experiment_qwen_60steps.yaml")
    assert [r.name for r in spec.runs()] == ["random_seed0", "bots_seed0"]
    for run in spec.runs():
        assert schedule(run).steps == 60
        assert schedule(run).eval_steps == (0, 10, 20, 30, 40, 50, 60)
    # what verl's engine gets, built by Trinity itself from the config and the overrides
    from trinity.trainer.verl.config import build_verl_config

    from mathagent import launch

    run = spec.runs()[0]
    plan = launch.load_plan(run.config, list(run.overrides), work_dir=tmp_path)
    verl = build_verl_config(plan.config)
    assert verl.actor.ppo_micro_batch_size_per_gpu == 8
    assert verl.ref.log_prob_micro_batch_size_per_gpu == 16
    assert verl.rollout.log_prob_micro_batch_size_per_gpu == 16
    assert verl.model.enable_gradient_checkpointing is False
    # vLLM's batch grows with the runners' slots; the configs' fixed KV cache is kept
    engine = plan.config.explorer.rollout_model.extra_engine_args
    assert engine["max_num_seqs"] == 256 and engine["kv_cache_memory_bytes"] == 4 * 2**30
    # the levers reach every run's head and `train` (so every Ray worker of the run)
    from mathagent.experiment.runner import run_env

    env = run_env(run, tmp_path, tmp_path / "model", tmp_path / "cache")
    assert env["MATHAGENT_VARLEN_ATTN"] == "1" and env["MATHAGENT_RUNNER_SLOTS"] == "4"
    assert env["VLLM_CACHE_ROOT"] == str(tmp_path / "cache")
    assert "MATHAGENT_VARLEN_ATTN" not in run_env(load_spec(SHORT).runs()[0], tmp_path,
                                                   tmp_path / "model", tmp_path / "cache")
    # and the plan says so
    from mathagent.experiment.commands import print_plan
    from mathagent.experiment.schedule import schedules

    with contextlib.redirect_stdout(io.StringIO()) as shown:
        print_plan(spec, plans.plan(spec, tmp_path), schedules(spec), tmp_path)
    assert ("Levers of every run (mathagent.compat): MATHAGENT_BATCHED_LOGPROBS=1, "
            "MATHAGENT_FAST_BOOTSTRAP=1, MATHAGENT_RUNNER_SLOTS=4, MATHAGENT_VARLEN_ATTN=1") in shown.getvalue()


def write_spec(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spec.yaml").write_text(text)
    return folder / "spec.yaml"


def test_the_tuner_interval_wins_over_the_explorers_as_tune_writes_it(tmp_path):
    # tune() writes tuner.algorithm.eval_interval_steps over explorer.eval_interval
    spec = load_spec(write_spec(tmp_path, f"""
out: {tmp_path / 'out'}
arms: {{random: configs/config_random_qwen.yaml}}
seeds: [4]
overrides: {{explorer.eval_interval: 2, buffer.total_steps: 8, explorer.eval_on_startup: true}}
"""))
    assert schedule(spec.runs()[0]).eval_steps == (0, 8)   # the config's tuner block: 8
    assert spec.runs()[0].overrides[-1] == "explorer.rollout_model.seed=4"
    assert "explorer.eval_on_startup=true" in spec.runs()[0].overrides


def test_an_arm_config_that_is_not_yaml_is_one_line(tmp_path, capsys):
    (tmp_path / "broken.yaml").write_text("mode: [colocate\n")
    spec = write_spec(tmp_path, f"out: {tmp_path / 'out'}\narms: {{random: "
                                f"{tmp_path / 'broken.yaml'}}}\nseeds: [0]\n")
    assert cli.main(["experiment", str(spec), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "broken.yaml: not a readable YAML config" in err


GOOD = """out: {out}
arms:
  random: configs/config_random_qwen.yaml
seeds: [0]
"""


@pytest.mark.parametrize("text, says", [
    ("- a list", "a spec is a mapping of out, arms, seeds, overrides, env, model"),
    ("out: x\narms: {random: configs/config_random_qwen.yaml}\nseeds: [0]\n"
     "env: {HOME: /tmp}", "env.HOME: not a lever of mathagent.compat (MATHAGENT_"),
    ("out: x\narms: {random: configs/config_random_qwen.yaml}\nseeds: [0]\n"
     "env: {MATHAGENT_FAST: 1}", "env.MATHAGENT_FAST: not a lever of mathagent.compat ("
     "MATHAGENT_EARLY_EXPLORER, "),
    ("out: x\narms: {random: configs/config_random_qwen.yaml}\nseeds: [0]\n"
     "env: {MATHAGENT_VARLEN_ATTN: [1]}", "env.MATHAGENT_VARLEN_ATTN: one value"),
    ("out: x\narms: {random: configs/config_random_qwen.yaml}\nseeds: [0]\nenv: [1]",
     "env: a mapping of lever variables"),
    ("out: x\narms: {random: configs/config_random_qwen.yaml}\nseeds: [0]\nenv: 0",
     "env: a mapping of lever variables"),
    ("out: x\narms: {random: configs/config_random_qwen.yaml}\nseeds: [0]\n"
     "env: {MATHAGENT_VARLEN_ATTN: true}",
     "env.MATHAGENT_VARLEN_ATTN: MATHAGENT_VARLEN_ATTN='true' is neither 0"),
    ("out: x\narms: {random: configs/config_random_qwen.yaml}\nseeds: [0]\n"
     "env: {MATHAGENT_PROFILE_STEP: 0}",
     "env.MATHAGENT_PROFILE_STEP: MATHAGENT_PROFILE_STEP='0' is not the number of a step"),
    ("out: x\narms: {random: configs/config_random_qwen.yaml}\nseeds: [0]\n"
     "env: {MATHAGENT_RUNNER_SLOTS: many}", "env.MATHAGENT_RUNNER_SLOTS: MATHAGENT_RUNNER_SLOTS='many'"),
    ("out: x\narms: {random: configs/config_random_qwen.yaml}\nseeds: [0]\nsteps: 3",
     "steps: unknown key"),
    ("out: x\narms: {random: configs/config_random_qwen.yaml}", "seeds: missing"),
    ("out: x\narms: [configs/config_random_qwen.yaml]\nseeds: [0]", "arms: a mapping"),
    ("out: x\narms: {Random: configs/config_random_qwen.yaml}\nseeds: [0]", "arms.Random:"),
    ("out: x\narms: {random: configs/nope.yaml}\nseeds: [0]",
     "arms.random: configs/nope.yaml: no such file"),
    ("out: x\narms: {random: configs/config_random_qwen.yaml}\nseeds: [0, -1]", "seeds: a list"),
    ("out: x\narms: {random: configs/config_random_qwen.yaml}\nseeds: [1, 1]", "seeds: a seed twice"),
    ("out: x\narms: {random: configs/config_random_qwen.yaml}\nseeds: [0]\n"
     "overrides: {explorer.rollout_model.seed: 3}", "overrides.explorer.rollout_model.seed:"),
    ("out: x\narms: {random: configs/config_random_qwen.yaml}\nseeds: [0]\n"
     "overrides: {buffer.total_steps: [3]}", "overrides.buffer.total_steps: one value"),
    ("out: x\narms: {random: configs/config_random_qwen.yaml}\nseeds: [0]\n"
     "overrides: {buffer.total_steps: 0}", "arms.random: buffer.total_steps is 0"),
    ("out: x\narms: {random: configs/config_random_qwen.yaml}\nseeds: [0]\nmodel: 3",
     "model: a model name"),
    ("out: x\nseeds: [0\n", "not valid YAML (line "),
])
def test_a_bad_spec_is_one_line_naming_the_key_and_writes_nothing(tmp_path, capsys, text, says):
    spec = write_spec(tmp_path / "spec", text)
    work = tmp_path / "work"
    code = main(["experiment", str(spec), "--dry-run", "--work", str(work)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(f"error: {spec}") and says in err, err
    assert not work.exists() and not (tmp_path / "x").exists()


def test_a_missing_spec_file_is_one_line(tmp_path, capsys):
    assert main(["experiment", str(tmp_path / "none.yaml"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot read the spec" in err


def test_the_committed_experiment_plans_every_run_done():
    spec = load_spec(SPEC)
    planned = plans.plan(spec, Path("/nonexistent/work"))
    assert [p.state for p in planned] == [plans.DONE] * 9


def copy_experiment(tmp_path: Path, runs: list[str]) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    for name in runs:
        shutil.copytree(COMMITTED / name, out / name)
    for table in ("phase_times.csv", "startup.csv"):
        shutil.copyfile(COMMITTED / table, out / table)
    return out


def test_the_plan_skips_finished_runs_and_moves_a_partial_runs_files_aside(tmp_path):
    out = copy_experiment(tmp_path, ["random_seed0", "random_seed1", "bots_seed0"])
    (out / "bots_seed0" / "timings.json").unlink()         # a folder that is not whole
    (out / ".random_seed2.tmp").mkdir()                    # a layout cut short
    work = tmp_path / "work"
    (work / "difficulty_seed0").mkdir(parents=True)        # a try killed midway
    (work / "difficulty_seed0" / "train.log").write_text("Explore step 3 started\n")
    spec = load_spec(write_spec(tmp_path, f"""out: {out}
arms: {{random: configs/config_random_qwen.yaml, difficulty: configs/config_difficulty_qwen.yaml,
        bots: configs/config_bots_qwen.yaml}}
seeds: [0, 1, 2]
"""))
    states = {p.run.name: p for p in plans.plan(spec, work)}
    assert {n: p.state for n, p in states.items()} == {
        "random_seed0": "done", "random_seed1": "done", "random_seed2": "partial",
        "difficulty_seed0": "partial", "difficulty_seed1": "to do", "difficulty_seed2": "to do",
        "bots_seed0": "partial", "bots_seed1": "to do", "bots_seed2": "to do"}
    # kept aside, each try in a folder of its own, and the plan then starts from scratch
    kept = plans.move_aside(states["difficulty_seed0"], work)
    assert kept == work / "aside" / "difficulty_seed0.1"
    assert (kept / "work" / "train.log").read_text() == "Explore step 3 started\n"
    kept = plans.move_aside(states["bots_seed0"], work)
    assert (kept / "result" / "params.json").is_file() and not (out / "bots_seed0").exists()
    assert plans.move_aside(states["random_seed2"], work) == work / "aside" / "random_seed2.1"
    assert (work / "aside" / "random_seed2.1" / "result.tmp").is_dir()
    again = {p.run.name: p.state for p in plans.plan(spec, work)}
    assert again["difficulty_seed0"] == again["bots_seed0"] == again["random_seed2"] == "to do"
    (work / "difficulty_seed0").mkdir()
    assert plans.move_aside(plans.plan(spec, work)[3], work) == \
        work / "aside" / "difficulty_seed0.2"


@contextlib.contextmanager
def _held_by_another_process(folder: Path, name: str = "lock.json"):
    """``folder/name`` recording a live process other than this one; the process is killed
    when the block ends."""
    import psutil

    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(json.dumps(
            {"pid": other.pid, "created": psutil.Process(other.pid).create_time()}))
        yield other.pid
    finally:
        other.kill()
        other.wait()


def test_one_experiment_process_works_in_a_work_folder(tmp_path):
    import psutil

    work = tmp_path / "work"
    with _held_by_another_process(work) as pid, \
            pytest.raises(plans.WorkLockError, match=f"experiment process {pid}"), \
            plans.WorkLock(work):
        pass
    # its process gone (killed), the lock is taken over and given back at the end
    with plans.WorkLock(work):
        assert json.loads((work / "lock.json").read_text())["pid"] == psutil.Process().pid
    assert not (work / "lock.json").exists()
    # the output folder too: a second process with another work folder is refused there
    out = tmp_path / "out"
    with _held_by_another_process(out, ".experiment.lock.json"), \
            pytest.raises(plans.WorkLockError, match="works in"), \
            plans.WorkLock(out, ".experiment.lock.json"):
        pass


def test_the_estimate_of_a_run_is_near_what_the_committed_runs_took():
    """From the committed phase times, the estimate of a 16-step run of each arm lies within
    10% of the median of that arm's three runs' minutes from `train` to its end."""
    spec = load_spec(SPEC)
    startup = pd.read_csv(COMMITTED / "startup.csv", index_col=0)
    took = startup.loc["train command ends"]
    for run in spec.runs()[::3]:   # one run of each arm
        guess = estimate(run, COMMITTED)
        arm = [c for c in took.index if c.startswith(f"{run.arm}_seed")]
        assert guess.based_on == tuple(arm)
        assert guess.minutes == pytest.approx(took[arm].median(), rel=0.10), run.arm
        assert took[arm].min() * 0.9 <= guess.minutes <= took[arm].max() * 1.1


def test_the_estimate_follows_the_steps_and_needs_runs_to_measure_by(tmp_path):
    short = load_spec(SHORT).runs()[0]
    full = load_spec(SPEC).runs()[0]
    assert estimate(short, COMMITTED).minutes < estimate(full, COMMITTED).minutes
    assert estimate(short, tmp_path) is None
    # an arm the folder has no run of is estimated from all its runs
    out = copy_experiment(tmp_path, [])
    phases = pd.read_csv(out / "phase_times.csv", index_col=0)
    phases[[c for c in phases.columns if not c.startswith("random")]].to_csv(
        out / "phase_times.csv")
    assert len(estimate(full, out).based_on) == 6


def test_the_dry_run_of_the_committed_experiment(tmp_path):
    """Every arm through `train`'s preflight (a real one, on this CPU machine), the plan and
    the estimate; nothing is written."""
    before = sorted(COMMITTED.rglob("*"))
    done = subprocess.run([sys.executable, "-m", "mathagent", "experiment", str(SPEC),
                           "--dry-run", "--work", str(tmp_path / "work")], capture_output=True,
                          text=True, cwd=paths.REPO_ROOT, timeout=hang_bound(900))
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "-> results/trinity_qwen: 3 arm(s) (random, difficulty, bots) x seeds 0, 1, 2, " \
           "16 steps a run" in out
    assert out.count("  done     ") == 9 and "Runs: 9 done, 0 to do" in out
    for arm in ("random", "difficulty", "bots"):
        assert f"Preflight {arm}: passed" in out
    assert "One more run would take about random " in out
    assert sorted(COMMITTED.rglob("*")) == before and not (tmp_path / "work").exists()


def test_a_dry_run_names_the_arm_whose_preflight_fails(tmp_path):
    spec = write_spec(tmp_path, GOOD.format(out=tmp_path / "out")
                      + "overrides: {buffer.no_such_key: 3}\n")
    done = subprocess.run([sys.executable, "-m", "mathagent", "experiment", str(spec),
                           "--dry-run"], capture_output=True, text=True, cwd=paths.REPO_ROOT,
                          timeout=hang_bound(600))
    assert done.returncode == 1
    assert "Preflight random: failed (config_random_qwen.yaml)" in done.stdout
    assert "buffer.no_such_key" in done.stdout


def test_spec_errors_are_value_errors_naming_the_file(tmp_path):
    with pytest.raises(SpecError, match=r"spec\.yaml: seeds: missing"):
        load_spec(write_spec(tmp_path, "out: x\narms: {random: configs/config_random_qwen.yaml}"))


def test_a_new_output_folder_is_timed_by_the_specs_own_runs(tmp_path, capsys):
    """``--out`` elsewhere: every run to do, each estimated from the committed runs of its arm
    until the new folder has finished runs of its own."""
    import dataclasses

    from mathagent.experiment.commands import print_plan, timed_by
    from mathagent.experiment.schedule import schedules

    spec = load_spec(SPEC)
    mine = dataclasses.replace(spec, out=tmp_path / "mine")
    assert timed_by(mine.out, spec.out) == COMMITTED
    print_plan(mine, plans.plan(mine, tmp_path / "work"), schedules(mine), COMMITTED)
    out = capsys.readouterr().out
    took = pd.read_csv(COMMITTED / "startup.csv", index_col=0).loc["train command ends"]
    assert out.count("  to do    ") == 9 and "Runs: 0 done, 9 to do (0 partial)" in out
    total = sum(estimate(run, COMMITTED).minutes for run in spec.runs())
    assert f"GPU time: about {total:.0f} min for 9 run(s)" in out
    assert total == pytest.approx(took.sum(), rel=0.10)   # what the nine committed runs took
    assert not (tmp_path / "mine").exists()
    # once the new folder has a run of its own, it times the rest
    (tmp_path / "two").mkdir()
    copy = copy_experiment(tmp_path / "two", ["bots_seed1"])
    assert timed_by(copy, spec.out) == copy


def test_a_new_folders_report_starts_from_the_spec(tmp_path):
    """The 60-step spec's folder has no experiment.yaml: the one started from the spec is
    one the report reads (arms named as the runs report them), and an existing one is kept."""
    from mathagent.experiment.describe import write_starting_spec
    from mathagent.report import read_spec

    spec = dataclasses.replace(load_spec(paths.CONFIGS_DIR / "experiment_qwen_60steps.yaml"),
                               out=tmp_path / "out")
    from mathagent.experiment.schedule import schedules as spec_schedules

    written = write_starting_spec(spec, spec_schedules(spec))
    import yaml

    # the arms and seeds stay in the spec: the file names it, relative to the repository root
    started = yaml.safe_load(written.read_text())
    assert started["experiment"] == "configs/experiment_qwen_60steps.yaml"
    assert "arms" not in started and "seeds" not in started
    exp = read_spec(written.parent)
    assert [(a.name, a.config) for a in exp.arms] == [
        ("random", "configs/config_random_qwen.yaml"), ("bots", "configs/config_bots_qwen.yaml")]
    assert exp.seeds == (0,) and exp.title.startswith("`random`, `bots` on qwen2.5-coder-0.5b")
    assert exp.settings["steps"] == "60" and exp.settings["batch"] == "16 tasks x 8 replies"
    assert exp.settings["evaluation"] == "held-out at steps 0, 10, 20, 30, 40, 50, 60"
    assert write_starting_spec(spec, spec_schedules(spec)) is None  # kept as it is


def test_a_done_run_made_with_other_settings_is_refused_not_mixed_in(tmp_path, capsys):
    """The committed random seed 0 ran 16 steps: a spec asking for 32 must not count it done."""
    out = tmp_path / "out"
    shutil.copytree(COMMITTED / "random_seed0", out / "random_seed0")
    text = (f"out: {out}\narms: {{random: configs/config_random_qwen.yaml}}\nseeds: [0]\n")
    same = write_spec(tmp_path / "same", text)
    assert [p.mismatch for p in plans.plan(load_spec(same), tmp_path / "w")] == [None]
    longer = write_spec(tmp_path / "longer", text + "overrides: {buffer.total_steps: 32}\n")
    assert cli.main(["experiment", str(longer), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "random_seed0 was made with buffer.total_steps=16, the spec asks for 32" in err
    other = write_spec(tmp_path / "other", text.replace("config_random_qwen", "config_bots_qwen"))
    assert "was made from config_random_qwen.yaml, the spec's arm asks for config_bots_qwen.yaml" \
        in plans.plan(load_spec(other), tmp_path / "w")[0].mismatch

"""``scripts/gpu/trinity_results.py``, which lays out the Trinity-RFT runs a GPU machine
packed as a committed results folder, and the tables it drew there.

The script runs here on a collected folder made from a committed run plus a short log written
for the test, so its timings are known. The committed folders' numbers are checked against
their event files here (the tidy tables notebooks read) and by ``tests/test_report.py`` (the
pages).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest
from bounds import hang_bound

from mathagent import metrics, paths, results
from mathagent.grpo import load_config

EXPERIMENT = paths.RESULTS_DIR / "trinity_h200"
QWEN = paths.RESULTS_DIR / "trinity_qwen"
LOCAL = paths.RESULTS_DIR / "trinity_h200_local"
SCRIPT = paths.REPO_ROOT / "scripts" / "gpu" / "trinity_results.py"
T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def run_folders(folder):
    return sorted(d for d in folder.iterdir() if (d / "params.json").is_file())


def assert_same_table(committed: pd.DataFrame, table: pd.DataFrame) -> None:
    key = list(metrics.KEYS)
    a = committed.sort_values(key).reset_index(drop=True)
    b = table.sort_values(key).reset_index(drop=True)
    assert len(a) == len(b)
    for column in ("step", *metrics.METRICS):
        np.testing.assert_allclose(a[column], b[column], rtol=1e-6, err_msg=column)


@pytest.mark.parametrize("folder, tidy", [(EXPERIMENT, "trinity_h200.csv"),
                                          (QWEN, "trinity_h200.csv"), (LOCAL, "train_local.csv")],
                         ids=["trinity_h200", "trinity_qwen", "trinity_h200_local"])
def test_committed_tidy_tables_are_what_the_run_folders_say(folder, tidy):
    folders = run_folders(folder)
    for run in folders:
        params = json.loads((run / "params.json").read_text())
        name = results.selector_label(params["selector"]).replace("_based", "")
        assert run.name == f"{name}_seed{params['seed']}"
    assert_same_table(pd.read_csv(folder / tidy), results.load_runs(folders, progress=False))


def test_local_runs_used_the_mirror_config_and_the_side_by_side_reads_from_them():
    mirror = load_config(paths.CONFIGS_DIR / "train_local_trinity.yaml")
    folders = run_folders(LOCAL)
    for folder in folders:
        params = json.loads((folder / "params.json").read_text())
        for section in ("rollout", "algorithm", "eval", "prompt"):
            want = json.loads(json.dumps(getattr(mirror, section).__dict__))
            ran = params["config"][section]
            # settings added after these runs (rollout.python_tool, ...) keep their defaults,
            # which do what the runs did
            default = json.loads(json.dumps(type(getattr(mirror, section))().__dict__))
            assert {**ran, **{k: default[k] for k in want.keys() - ran.keys()}} == want
    both = {"Trinity-RFT": results.load_runs(run_folders(EXPERIMENT), progress=False),
            "train-local": results.load_runs(folders, progress=False)}
    pd.testing.assert_frame_equal(pd.read_csv(LOCAL / "engine_vs_local.csv"),
                                  results.side_by_side_summary(both), check_dtype=False,
                                  atol=1e-3)


def _log_line(seconds: float, text: str, actor: str = "(Explorer pid=1)") -> str:
    return f"\x1b[36m{actor}\x1b[0m INFO {T0 + timedelta(seconds=seconds):%m-%d %H:%M:%S} " \
           f"[x.py:1] {text}"


def _collect(tmp_path, name: str, src, log: str, end: float = 310) -> tuple:
    """``COLLECTED/<name>.tgz`` as ``collect`` packs a run: ``src``'s event files and
    configs, ``log`` as its train.log; returns (collected folder, the staged run)."""
    run = tmp_path / "stage" / name
    if not run.exists():
        run.mkdir(parents=True)
        if (src / "monitor").is_dir():
            shutil.copytree(src / "monitor", run / "monitor")
        for file in ("params.json", "launched_config.yaml", "explorer_meta.json"):
            if (src / file).is_file():
                shutil.copyfile(src / file, run / file)
    (run / "train.log").write_text(log)
    (run / "start_end_epoch.txt").write_text(f"{T0.timestamp():.0f} {T0.timestamp() + end:.0f}")
    collected = tmp_path / "collected"
    collected.mkdir(exist_ok=True)
    with tarfile.open(collected / f"{name}.tgz", "w:gz") as tar:
        tar.add(run, arcname=name)
    return collected, run


def _script(collected, out, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(collected), str(out), *args],
                          capture_output=True, text=True, timeout=hang_bound(300),
                          cwd=paths.REPO_ROOT)


def test_results_script_builds_the_folder_from_what_collect_packed(tmp_path):
    log = "\n".join([
        "Config configs/x.yaml", "Preflight:", "  ok    all good",
        "Launching: TensorBoard logs under somewhere",
        _log_line(60, "workers initialized", "(Trainer pid=2)").replace("[x.py:1]",
                                                                       "[trainer.py:436]"),
        _log_line(120, "init engine (profile, create kv cache, warmup model) took 9 s",
                  "(vLLMRolloutModel pid=3) (EngineCore pid=4)"),
        "\x1b[36m(WorkflowRunner pid=6)\x1b[0m react_agent: a Traceback-looking model reply",
        _log_line(180, "Evaluation at step 0 started."),
        _log_line(210, "Explore step 1 started."), _log_line(226, "Explore step 2 started."),
        _log_line(244, "Explore step 3 started."),
        _log_line(300, "> Trainer finished.", "(Trainer pid=2)"),
        "\x1b[36m(WorkerDict pid=10)\x1b[0m INFO:2026 Saved", "(Worker pid=11) loading",
    ]) + "\n"
    src = EXPERIMENT / "difficulty_seed0"
    collected, run = _collect(tmp_path, "diff", src, log)
    (run / "samples").mkdir()   # what buffer_samples.py wrote from the run's experience buffer
    (run / "samples" / "buffer_steps.csv").write_text("step,experiences\n1,128\n")
    with tarfile.open(collected / "diff.tgz", "w:gz") as tar:
        tar.add(run, arcname="diff")
    stamp = int(T0.timestamp())
    (collected / "gpu_apps.csv").write_text(
        f"{stamp},10,2048,diff\n{stamp},11,1024,diff\n{stamp + 5},10,4096,diff\n"
        f"{stamp + 5},11,1024,diff\n{stamp + 5},99,9999,other\n"
        f"{stamp + 5},10,3900,diff\n"      # a second monitor: the same sample twice
        f"{stamp - 60},7,70000,diff\n")    # an earlier try of the run, before this `train`
    out = tmp_path / "out"
    done = _script(collected, out, "--runs", "diff=difficulty_seed0")
    assert done.returncode == 0, done.stderr
    startup = pd.read_csv(out / "startup.csv", index_col=0)["difficulty_seed0"]
    assert (startup["trainer workers ready"], startup["vLLM engine ready"],
            startup["step 1 starts"]) == (1.0, 2.0, 3.5)
    assert startup["train command ends"] == pytest.approx(310 / 60, abs=0.01)
    memory = pd.read_csv(out / "gpu_memory.csv", index_col=0)["difficulty_seed0"]
    assert memory["trainer (FSDP actor + reference)"] == 4.0 and memory["vLLM engine worker"] == 1
    assert memory["run, all processes (sum at one time)"] == 5.0   # each sample counted once
    phases = pd.read_csv(out / "phase_times.csv", index_col=0)["difficulty_seed0"]
    assert phases["whole step (log: one explore start to the next)"] == 17.0  # 16 s, 18 s
    excerpt = (out / "difficulty_seed0" / "train_log_excerpt.txt").read_text()
    assert excerpt.startswith("Config configs/x.yaml\nPreflight:")
    assert "Explore step 3 started" in excerpt and "react_agent" not in excerpt
    assert "\x1b" not in excerpt
    assert len(pd.read_csv(out / "trinity_h200.csv")) == 41 and (out / "training_curves.png").is_file()
    assert (out / "difficulty_seed0" / "buffer_steps.csv").read_text().endswith("1,128\n")
    # its effective task ratio is Trinity's; its buffer table predates the buffer's ratio
    assert pd.read_csv(out / "etr_sources.csv")[["source", "steps_pass_rate_calculator"]].values \
        .tolist() == [["pass_rate_calculator", 40]]
    again = _script(collected, out, "--runs", "diff=difficulty_seed0")
    assert again.returncode == 2 and "--force" in again.stderr    # kept unless --force
    # runs that evaluated step 0 themselves take no start measured elsewhere
    own = _script(collected, out, "--runs", "diff=difficulty_seed0", "--force", "--start-from",
                  str(src))
    assert own.returncode == 2 and own.stderr.count("\n") == 1
    assert "evaluated step 0 themselves" in own.stderr

    # a later call adds seed 7, packed while it went on, and train-local runs: the tables
    # beside the run folders cover both engine runs
    params = json.loads((run / "params.json").read_text())
    (run / "params.json").write_text(json.dumps({**params, "seed": 7}))
    (run / "start_end_epoch.txt").write_text(f"{T0.timestamp():.0f} {T0.timestamp() + 310:.0f}"
                                             " running")
    with tarfile.open(collected / "seven.tgz", "w:gz") as tar:
        tar.add(run, arcname="seven")
    (collected / "gpu_apps.csv").write_text(f"{stamp},10,2048,seven\n")
    local_run = tmp_path / "local" / "work" / "difficulty_based-s0"
    local_run.mkdir(parents=True)
    for name in ("metrics.csv", "params.json", "config.yaml"):
        shutil.copyfile(LOCAL / "difficulty_seed0" / name, local_run / name)
    (local_run.parent / "difficulty_based-s0.log").write_text("train-local log\n")
    with tarfile.open(collected / "local.tgz", "w:gz") as tar:
        tar.add(tmp_path / "local", arcname="local")
    mirror = tmp_path / "mirror"
    more = _script(collected, out, "--runs", "seven=difficulty_seed7", "--local", str(mirror))
    assert more.returncode == 0, more.stderr
    startup = pd.read_csv(out / "startup.csv", index_col=0)
    assert sorted(startup.columns) == ["difficulty_seed0", "difficulty_seed7"]
    assert pd.isna(startup.loc["train command ends", "difficulty_seed7"])   # still running
    assert sorted(pd.read_csv(out / "trinity_h200.csv")["seed"].unique()) == [0, 7]
    assert (mirror / "difficulty_seed0" / "train.log").read_text() == "train-local log\n"
    summary = pd.read_csv(mirror / "engine_vs_local.csv")
    assert summary[["source", "seeds"]].values.tolist() == [["Trinity-RFT", 2], ["train-local", 1]]
    # without local.tgz the side by side is drawn again from the runs already there
    (collected / "local.tgz").unlink()
    no_local = _script(collected, out, "--runs", "seven=difficulty_seed7", "--force", "--local",
                       str(mirror))
    assert no_local.returncode == 0 and "no local.tgz" in no_local.stdout
    empty = _script(collected, out, "--runs", "seven=difficulty_seed7", "--force", "--local",
                    str(tmp_path / "nothing"))
    assert empty.returncode == 2 and empty.stderr.strip().splitlines() == [
        f"error: no train-local run folders in {tmp_path / 'nothing'}"]


def test_a_run_stopped_before_its_first_step_keeps_its_start_up_split(tmp_path):
    """No meta files, no steps: the script keeps the run's start-up milestones and memory,
    says in one line why there is no figure, and removes what an earlier call drew without
    it; a run packed before `train` wrote its params.json is one line."""
    log = "\n".join([
        "Config configs/x.yaml", "Launching: TensorBoard logs under somewhere",
        _log_line(60, "Finished initializing Explorer."),
        _log_line(135, "The global random seed is set to 0.", "(vLLMRolloutModel pid=3)"),
        _log_line(207, "Starting to load model /m...", "(vLLMRolloutModel pid=3) (Worker pid=5)"),
        _log_line(249, "All models are ready."),
        _log_line(291, "WorkflowRunner [explorer_runner_3](asynchronous) initialized:",
                  "(WorkflowRunner pid=7)"),
        _log_line(330, "Rollout coordinator is ready."),
        _log_line(330, "Evaluation at step 0 started."),
    ]) + "\n"
    empty = tmp_path / "empty"
    (empty / "monitor" / "tensorboard" / "explorer").mkdir(parents=True)
    for file in ("params.json", "launched_config.yaml"):
        shutil.copyfile(EXPERIMENT / "random_seed0" / file, empty / file)
    collected, run = _collect(tmp_path, "early", empty, log, end=400)
    stamp = int(T0.timestamp())
    (collected / "gpu_apps.csv").write_text(f"{stamp},2,1024,early\n{stamp},5,2048,early\n")
    figs = tmp_path / "figs"
    figs.mkdir()
    for stale in ("trinity_h200.csv", "training_curves.png"):
        (figs / stale).write_text("drawn before\n")
    done = _script(collected, figs, "--runs", "early=random_seed0")
    assert done.returncode == 0, done.stderr
    startup = pd.read_csv(figs / "startup.csv", index_col=0)["random_seed0"]
    assert (startup["Ray actors (explorer, trainer) made"], startup["vLLM actor's first line"],
            startup["vLLM worker loads the model"], startup["all rollout models ready"],
            startup["first workflow runner made"], startup["all workflow runners ready"]) == (
        1.0, 2.25, 3.45, 4.15, 4.85, 5.5)
    assert np.isnan(startup["step 1 starts"])
    assert pd.read_csv(figs / "phase_times.csv", index_col=0).empty
    assert "random_seed0 logged no step" in done.stdout
    for stale in ("trinity_h200.csv", "training_curves.png"):
        assert not (figs / stale).exists()
        assert f"removed {figs / stale}: drawn without the runs added now" in done.stdout
    (run / "params.json").unlink()
    with tarfile.open(collected / "early.tgz", "w:gz") as tar:
        tar.add(run, arcname="early")
    lost = _script(collected, tmp_path / "lost", "--runs", "early=random_seed0")
    assert lost.returncode == 2 and lost.stderr.strip().splitlines() == [
        f"error: {collected / 'early'}.tgz holds no early/params.json (the run stopped before "
        "`train` wrote it?)"]


def _step0_run(folder, accuracy: float, taskset: str = "eval-arithmetic-qwen"):
    """A run folder whose only held-out evaluation is at step 0."""
    folder.mkdir(parents=True)
    (folder / "params.json").write_text(json.dumps({"selector": "random", "seed": 0,
                                                    "eval_taskset": taskset}))
    pd.DataFrame({"selector": "random", "seed": 0, "step": [0, 1],
                  "rollout_accuracy": [np.nan, 0.2], "eval_accuracy": [accuracy, np.nan]}
                 ).to_csv(folder / "metrics.csv", index=False)
    return folder


def test_results_script_draws_the_start_of_runs_that_evaluate_no_step_0(tmp_path):
    """``--start-from``: other runs' step-0 evaluations on the same taskset, drawn at step 0
    and written as ``start_point.csv``; a start that cannot hold is refused in one line; what
    no longer holds (the start, summaries without a baseline) is removed, saying why."""
    src = QWEN / "random_seed0"     # evaluated at steps 8 and 16
    collected, run = _collect(tmp_path, "qwen", src, (src / "train_log_excerpt.txt").read_text())
    (collected / "gpu_apps.csv").write_text(f"{int(T0.timestamp())},10,2048,qwen\n")
    base = [_step0_run(tmp_path / "a", 0.16), _step0_run(tmp_path / "b", 0.17)]
    out = tmp_path / "out"

    def script(*extra: str) -> subprocess.CompletedProcess:
        return _script(collected, out, "--runs", "qwen=random_seed0", "--force", *extra)

    done = script("--start-from", *map(str, base))
    assert done.returncode == 0, done.stderr
    drawn = pd.read_csv(out / "start_point.csv")
    assert drawn["eval_accuracy"].tolist() == [0.16, 0.17] and set(drawn["step"]) == {0}
    for extra, says in ((["--start-from", str(EXPERIMENT / "random_seed0")],
                         "evaluated 'eval-arithmetic' at step 0"),
                        (["--start-from", str(src)], "no held-out evaluation at step 0"),
                        (["--start-from", str(base[0]), "--no-figures"],
                         "which --no-figures leaves out")):
        refused = script(*extra)
        assert refused.returncode == 2 and says in refused.stderr, refused.stderr
        assert refused.stderr.count("\n") == 1
    undrawn = script("--no-figures")   # its tidy table would leave the new run out
    assert undrawn.returncode == 2 and "is the tidy table of the runs already drawn" in \
        undrawn.stderr
    again = script()
    assert again.returncode == 0 and not (out / "start_point.csv").exists()
    assert "the figure was drawn without --start-from" in again.stdout
    params = json.loads((run / "params.json").read_text())
    (run / "params.json").write_text(json.dumps({**params, "selector": "difficulty_based"}))
    with tarfile.open(collected / "qwen.tgz", "w:gz") as tar:
        tar.add(run, arcname="qwen")
    alone = script()
    assert alone.returncode == 0 and not (out / "summary.csv").exists()
    assert f"removed {out / 'summary.csv'}: baseline selector 'random' is not in the table" \
        in alone.stdout

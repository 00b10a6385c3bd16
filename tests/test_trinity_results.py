"""The committed Trinity-RFT runs and the script that builds their results folder.

``results/trinity_h200/`` holds two real runs of ``python -m mathagent train`` on one H200;
the reader must find in their event files what the committed tidy table says.
``scripts/gpu/trinity_results.py`` is run here on a collected folder made from one of those
runs plus a short log written for the test, so its timings are known.
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

from mathagent import metrics, paths, results

TRINITY = paths.RESULTS_DIR / "trinity_h200"
RUNS = {"random": TRINITY / "random_seed42", "difficulty_based": TRINITY / "difficulty_seed42"}
SCRIPT = paths.REPO_ROOT / "scripts" / "gpu" / "trinity_results.py"


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return results.load_runs(list(RUNS.values()), progress=False)


def test_committed_runs_have_the_steps_evals_and_signal_asked_for(table):
    for selector, folder in RUNS.items():
        params = json.loads((folder / "params.json").read_text())
        assert (params["selector"], params["seed"]) == (selector, 42)
        run = table[table["selector"] == selector]
        assert run["step"].max() >= 20
        evals = run.dropna(subset=["eval_accuracy"])["step"].tolist()
        assert evals == [0, 5, 10, 15, 20]
        assert (run["rollout_accuracy"] > 0).sum() >= 15  # the lenient judge gives signal
    difficulty = table[(table["selector"] == "difficulty_based") & (table["step"] > 0)]
    assert difficulty["effective_task_ratio"].notna().all()
    assert table[table["selector"] == "random"]["effective_task_ratio"].isna().all()


def test_committed_tidy_table_is_what_the_event_files_say(table):
    committed = pd.read_csv(TRINITY / "trinity_h200.csv")
    key = list(metrics.KEYS)
    a = committed.sort_values(key).reset_index(drop=True)
    b = table.sort_values(key).reset_index(drop=True)
    for column in ("step", *metrics.METRICS):
        np.testing.assert_allclose(a[column], b[column], rtol=1e-6, err_msg=column)
    # the folder as a whole reads as its tidy table
    assert results.find_runs(TRINITY) == [TRINITY]


def _log_line(t: datetime, text: str, actor: str = "(Explorer pid=1)") -> str:
    return f"\x1b[36m{actor}\x1b[0m INFO {t:%m-%d %H:%M:%S} [x.py:1] {text}"


def test_results_script_builds_the_folder_from_what_collect_packed(tmp_path):
    t0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
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
    run = tmp_path / "stage" / "diff"
    run.mkdir(parents=True)
    src = RUNS["difficulty_based"]
    shutil.copytree(src / "monitor", run / "monitor")
    for name in ("params.json", "launched_config.yaml", "explorer_meta.json", "trainer_meta.json"):
        shutil.copyfile(src / name, run / name)
    (run / "train.log").write_text(log)
    (run / "start_end_epoch.txt").write_text(f"{t0.timestamp():.0f} {t0.timestamp() + 310:.0f}")
    collected = tmp_path / "collected"
    collected.mkdir()
    with tarfile.open(collected / "diff.tgz", "w:gz") as tar:
        tar.add(run, arcname="diff")
    stamp = int(t0.timestamp())
    (collected / "gpu_apps.csv").write_text(
        f"{stamp},10,2048,diff\n{stamp},11,1024,diff\n{stamp + 5},10,4096,diff\n"
        f"{stamp + 5},11,1024,diff\n{stamp + 5},99,9999,other\n")
    out = tmp_path / "out"

    def script(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(SCRIPT), str(collected), str(out), "--runs",
                               "diff=difficulty_seed42", *extra], capture_output=True,
                              text=True, timeout=300, cwd=paths.REPO_ROOT)

    done = script()
    assert done.returncode == 0, done.stderr
    startup = pd.read_csv(out / "startup.csv", index_col=0)["difficulty_seed42"]
    assert startup["trainer workers ready"] == 1.0
    assert startup["vLLM engine ready"] == 2.0
    assert startup["step 1 starts"] == 3.5
    assert startup["train command ends"] == pytest.approx(310 / 60, abs=0.01)
    memory = pd.read_csv(out / "gpu_memory.csv", index_col=0)["difficulty_seed42"]
    assert memory["trainer (FSDP actor + reference)"] == 4.0  # pid 10, its peak
    assert memory["vLLM engine worker"] == 1.0
    assert memory["run, all processes (sum at one time)"] == 5.0  # other runs not counted
    phases = pd.read_csv(out / "phase_times.csv", index_col=0)["difficulty_seed42"]
    assert phases["whole step (log: one explore start to the next)"] == 17.0  # 16 s, 18 s
    assert phases["rollout phase"] > 0
    excerpt = (out / "difficulty_seed42" / "train_log_excerpt.txt").read_text()
    assert excerpt.startswith("Config configs/x.yaml\nPreflight:")
    assert "Explore step 1 started" in excerpt and "Explore step 3" not in excerpt
    assert "react_agent" not in excerpt and "\x1b" not in excerpt
    assert (out / "training_curves.png").is_file()
    assert len(pd.read_csv(out / "trinity_h200.csv")) == 23  # steps 0-22
    # an existing run folder is kept unless --force
    again = script()
    assert again.returncode == 2 and "--force" in again.stderr
    assert script("--force").returncode == 0

"""``scripts/gpu/bf16_start_results.py``: the bfloat16-start runs beside the engine's and the
float32-start ones.

The collected files are the committed runs' own (``results/trinity_h200_local_bf16/``),
put back the way the GPU command left them; the script runs as a user runs it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pandas as pd
from bounds import hang_bound

from mathagent import paths

SCRIPT = paths.REPO_ROOT / "scripts" / "gpu" / "bf16_start_results.py"
COMMITTED = paths.REPO_ROOT / "results" / "trinity_h200_local_bf16"


def collected(tmp_path):
    folder = tmp_path / "collected"
    folder.mkdir()
    for sel, name in (("random", "random"), ("difficulty_based", "difficulty")):
        run = COMMITTED / f"{name}_seed0"
        shutil.copy(run / "metrics.csv", folder / f"{sel}.metrics.csv")
        shutil.copy(run / "params.json", folder / f"{sel}.params.json")
        shutil.copy(run / "train.log", folder / f"{sel}.log")
    shutil.copy(COMMITTED / "export_grid.txt", folder / "grid.txt")
    return folder


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], cwd=paths.REPO_ROOT,
                          capture_output=True, text=True, timeout=hang_bound(300))


def test_builds_run_folders_table_and_figure(tmp_path):
    out = tmp_path / "out"
    done = run(collected(tmp_path), out)
    assert done.returncode == 0, done.stderr
    for name in ("random_seed0", "difficulty_seed0"):
        assert {p.name for p in (out / name).iterdir()} == {"metrics.csv", "params.json",
                                                           "train.log"}
    assert (out / "bf16_start.png").stat().st_size > 10_000
    by_step = pd.read_csv(out / "by_step.csv")
    assert set(by_step["selector"]) == {"random", "difficulty_based"}
    assert by_step.groupby("selector")["step"].max().tolist() == [20, 20]
    sources = ("Trinity-RFT", "train-local, float32 start", "train-local, bfloat16 start")
    for src in sources:
        assert by_step[f"kl_loss ({src})"].notna().all(), src
    # the table is the runs' own numbers: step 20 of the bfloat16-start difficulty run
    own = pd.read_csv(COMMITTED / "difficulty_seed0" / "metrics.csv").set_index("step")
    row = by_step[(by_step["selector"] == "difficulty_based") & (by_step["step"] == 20)]
    assert row["kl_loss (train-local, bfloat16 start)"].item() == \
        round(own.loc[20, "kl_loss"], 5)
    # by default the engine's runs are the bfloat16-start pair: the committed comparison again
    pd.testing.assert_frame_equal(by_step, pd.read_csv(COMMITTED / "by_step.csv"))


def test_refuses_to_replace_without_force(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    done = run(collected(tmp_path), out)
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: {out} exists; pass --force to replace it"


def test_names_a_missing_run_file(tmp_path):
    folder = collected(tmp_path)
    (folder / "random.metrics.csv").unlink()
    done = run(folder, tmp_path / "out")
    assert done.returncode != 0
    assert done.stderr.strip() == f"error: {folder / 'random.metrics.csv'}: missing"

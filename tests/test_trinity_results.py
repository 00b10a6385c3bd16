"""The tidy tables of the committed Trinity-RFT results folders, read back from their run
folders' event files (the tables notebooks read); the pages are ``tests/test_report.py``'s, and
laying out a run's folder is ``tests/test_experiment_layout.py``'s.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from mathagent import metrics, paths, results
from mathagent.grpo import load_config

EXPERIMENT = paths.RESULTS_DIR / "trinity_h200"
QWEN = paths.RESULTS_DIR / "trinity_qwen"
LOCAL = paths.RESULTS_DIR / "trinity_h200_local"


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



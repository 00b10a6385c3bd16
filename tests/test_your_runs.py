"""Notebook 05's "your own runs": the training runs made in this checkout (``runs/``), read
beside the committed ones (``run_facts.runs_made_here``, ``runs_overview``, ``your_runs``)."""

from __future__ import annotations

import json
import shutil

import pandas as pd

from mathagent import paths, run_facts

RESULTS = paths.RESULTS_DIR


def _runs_dir(tmp_path):
    """A ``runs/`` as notebook 04 leaves it on a GPU: two train-local runs, the smoke run's
    Trinity-RFT job folder, one that stopped before its first step, and a simulated sweep."""
    root = tmp_path / "runs"
    for stamp, src in (("20261204-105957", "random_seed1"), ("20261204-110011", "difficulty_seed0")):
        shutil.copytree(RESULTS / "trinity_h200_local" / src, root / "train_local" / stamp)
    job = root / "notebooks" / "04_training_launch" / "smoke" / "config_difficulty_arithmetic" \
        / "checkpoints" / "Data-Augmentation" / "Difficulty-Based-Selector-Arithmetic"
    shutil.copytree(RESULTS / "trinity_h200" / "difficulty_seed2", job)
    early = root / "smoke" / "config_random_qwen" / "checkpoints" / "P" / "Random"
    shutil.copytree(RESULTS / "trinity_h200_qwen_startup" / "random_seed0", early)
    killed = root / "train_local" / "20261204-120000-random-s0"   # killed before step 1
    killed.mkdir(parents=True)
    shutil.copyfile(RESULTS / "trinity_h200_local" / "random_seed0" / "params.json",
                    killed / "params.json")
    (root / "simulate" / "20261204-105149").mkdir(parents=True)
    shutil.copyfile(RESULTS / "trinity_h200" / "trinity_h200.csv",
                    root / "simulate" / "20261204-105149" / "steps.csv")
    return root, job, early


def test_runs_made_here_are_the_training_runs_under_runs(tmp_path):
    root, job, early = _runs_dir(tmp_path)
    found = run_facts.runs_made_here(root)
    assert found == [root / "train_local" / "20261204-105957",
                     root / "train_local" / "20261204-110011",
                     root / "train_local" / "20261204-120000-random-s0", job, early]
    assert run_facts.runs_made_here(tmp_path / "nothing") == []


def test_the_tutorials_run_folder_is_searched_for_smoke_runs_too(tmp_path, monkeypatch):
    """Under ``python -m mathagent tutorial --out DIR`` notebook 04's scratch folders (and so
    its Trinity-RFT smoke run) are in DIR, which may lie outside ``runs/``: notebook 05 lists
    that run as well, once, whether DIR is outside ``runs/`` or inside it."""
    root, job, early = _runs_dir(tmp_path)
    out = tmp_path / "tutorial"
    elsewhere = out / "04_training_launch" / "smoke" / "config_random_arithmetic" \
        / "checkpoints" / "Data-Augmentation" / "Random-Selector-Arithmetic"
    shutil.copytree(RESULTS / "trinity_h200" / "random_seed0", elsewhere)
    assert elsewhere not in run_facts.runs_made_here(root)
    monkeypatch.setenv(paths.RUN_DIR_ENV, str(out))
    found = run_facts.runs_made_here(root)
    assert found[-1] == elsewhere and found.count(elsewhere) == 1
    table = run_facts.runs_overview(found, "made here", root)
    assert table.iloc[-1]["run"] == str(elsewhere)   # outside runs/: named in full
    assert table.iloc[-1]["held-out, last eval"] == "0.080 (step 40)"
    inside = root / "tutorial" / "20261204-140000"   # the default --out, under runs/
    shutil.move(out, inside)
    moved = inside / elsewhere.relative_to(out)
    monkeypatch.setenv(paths.RUN_DIR_ENV, str(inside))
    found = run_facts.runs_made_here(root)
    assert found.count(moved) == 1 and len(found) == 6


def test_the_overview_reads_each_run_and_says_which_logged_nothing(tmp_path):
    root, job, early = _runs_dir(tmp_path)
    table = run_facts.runs_overview(run_facts.runs_made_here(root), "made here", root)
    assert table["made by"].tolist() == ["train-local"] * 3 + ["Trinity-RFT"] * 2
    local = table.iloc[1]
    assert (local["run"], local["selector"], local["seed"], local["steps"]) == (
        "train_local/20261204-110011", "difficulty_based", 0, 40)
    assert local["held-out, first eval"] == "0.025 (step 0)"
    assert local["held-out, last eval"] == "0.105 (step 40)"
    killed = table.iloc[2]
    assert killed["steps"] == 0 and "train_local/20261204-120000-random-s0" in killed["note"]
    trinity = table.iloc[3]
    assert trinity["run"] == str(job.relative_to(root))
    assert trinity["held-out, last eval"] == "0.115 (step 40)"
    assert trinity["rollout accuracy, last step"] == "0.828"
    stopped = table.iloc[4]
    assert stopped["steps"] == 0 and "no scalars" in stopped["note"]
    assert str(early) in stopped["note"]   # the note names the folder at fault


def test_your_runs_puts_the_runs_made_here_above_the_committed_ones(tmp_path):
    root, _, _ = _runs_dir(tmp_path)
    line, table = run_facts.your_runs([RESULTS / "trinity_h200", RESULTS / "trinity_h200_local"],
                                      root)
    assert line == f"5 training run(s) made here under {root}"
    assert table["source"].tolist() == ["made here"] * 5 + ["committed"] * 12
    assert table["run"].iloc[5] == "trinity_h200/difficulty_seed0"
    line, nothing = run_facts.your_runs([RESULTS / "trinity_h200"], tmp_path / "empty")
    assert line.startswith("0 training run(s) made here") and "notebook 04 makes them" in line
    assert set(nothing["source"]) == {"committed"} and len(nothing) == 6


def test_the_overview_reads_runs_with_no_evaluation_an_empty_table_or_a_gap(tmp_path):
    """A run without evaluations has no held-out cells; a ``metrics.csv`` with a header only is
    a row naming it; a last step without rollout accuracy gives the last one that has it; a
    folder outside ``relative_to`` is named in full."""
    import pandas as pd

    src = RESULTS / "trinity_h200_local" / "random_seed0"
    metrics = pd.read_csv(src / "metrics.csv")
    cases = {"no_eval": metrics.assign(eval_accuracy=float("nan")),
             "empty": metrics.iloc[:0],
             "gap": pd.concat([metrics, metrics.tail(1).assign(
                 step=metrics["step"].max() + 1, rollout_accuracy=float("nan"))])}
    for name, table in cases.items():
        (tmp_path / name).mkdir()
        shutil.copyfile(src / "params.json", tmp_path / name / "params.json")
        table.to_csv(tmp_path / name / "metrics.csv", index=False)
    overview = run_facts.runs_overview([tmp_path / n for n in cases], "here", tmp_path / "x")
    no_eval, empty, gap = (overview.iloc[i] for i in range(3))
    assert no_eval["held-out, first eval"] == "-" and no_eval["steps"] == 40
    assert empty["steps"] == 0 and str(tmp_path / "empty") in empty["note"]
    last = metrics[metrics["step"] == metrics["step"].max()]["rollout_accuracy"].mean()
    assert gap["steps"] == 41 and gap["rollout accuracy, last step"] == f"{last:.3f}"
    assert gap["run"] == str(tmp_path / "gap")


H200 = RESULTS / "notebooks_h200"


def _check_runs_table(text: str, folder) -> pd.DataFrame:
    """Each run under ``folder`` has a row in ``text`` (the first one naming it) whose steps,
    held-out accuracies and rollout accuracy are what ``runs_overview`` reads from it."""
    table = run_facts.runs_overview(sorted(folder.iterdir()), "H200", folder)
    for _, run in table.iterrows():
        row = next(line for line in text.splitlines() if line.startswith(f"| `{run['run']}`"))
        cells = [c.strip() for c in row.split("|")[1:-1]]
        assert cells[2] == str(run["steps"])
        assert cells[3] == f"{run['held-out, first eval']} / {run['held-out, last eval']}"
        assert cells[4] == run["rollout accuracy, last step"]
    return table


def _check_executed(folder, numbers) -> dict[str, str]:
    """The executed copies in ``folder`` kept their outputs: every code cell ran. Returns each
    notebook's text by number."""
    texts = {}
    for number in numbers:
        notebook = json.loads(next(folder.glob(f"{number}_*.ipynb")).read_text())
        code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
        assert code and all(c["execution_count"] for c in code), number
        texts[number] = json.dumps(notebook)
    return texts


def test_the_h200_notebook_readme_states_what_its_runs_and_log_hold():
    """The executed notebooks' README: every wall time is pytest's own duration in
    ``nbmake_run.log``, and every row of its runs table is what ``runs_overview`` reads from the
    runs notebook 04 made on the H200."""
    import re

    readme = (H200 / "README.md").read_text()
    log = (H200 / "nbmake_run.log").read_text()
    durations = {number: seconds
                 for seconds, number in re.findall(r"([\d.]+)s call\s+notebooks/(\d\d)_", log)}
    assert sorted(durations) == ["01", "02", "03", "04", "05"]
    assert log.count(" PASSED") == 5 and "FAILED" not in log
    for number, seconds in durations.items():
        row = next(line for line in readme.splitlines() if line.startswith(f"| `{number}_"))
        assert f"| passed | {seconds} s |" in row
    sessions = re.findall(r"passed in ([\d.]+)s", log)
    for session in sessions:
        assert f"{session} s" in readme
    minutes = f"{sum(map(float, sessions)) / 60:.1f} minutes"
    assert minutes in readme and minutes in (paths.REPO_ROOT / "README.md").read_text()
    assert len(_check_runs_table(readme, H200 / "notebook04_runs")) == 3
    _check_executed(H200, durations)


def test_the_h200_tutorial_run_is_what_its_readme_says():
    """The tutorial command's run on the H200 (``tutorial/``): every wall time in the README is
    the command's own summary in ``tutorial.log``, its total too; every row of the runs table is
    what ``runs_overview`` reads from the runs it made; every code cell of the executed copies
    ran, notebook 04's knob and notebook 05's table of the runs made here included."""
    import re

    readme = (H200 / "README.md").read_text()
    section = readme[readme.index("## `python -m mathagent tutorial` on the H200"):
                     readme.index("## What did not run on the GPU")]
    log = (H200 / "tutorial" / "tutorial.log").read_text()
    summary = dict(re.findall(r"^  (\d\d)_\w+\.ipynb\s+ok\s+([\d.]+) s$", log, re.M))
    assert sorted(summary) == ["01", "02", "03", "04", "05"] and "FAILED" not in log
    for number, seconds in summary.items():
        row = next(line for line in section.splitlines() if line.startswith(f"| `{number}_"))
        assert f"| ok | {seconds} s |" in row
    total = re.search(r"exit 0 after (\d+) s", log).group(1)
    assert f"**{total} s ({int(total) / 60:.1f} minutes)**" in section
    assert f"{int(total) / 60:.1f} minutes through `python -m mathagent tutorial --smoke`" in \
        (paths.REPO_ROOT / "README.md").read_text().replace("\n", " ")
    assert len(_check_runs_table(section, H200 / "tutorial" / "notebook04_runs")) == 5
    executed = _check_executed(H200 / "tutorial", summary)
    assert "startup_s 333 s, train_s 416 s" in executed["04"]
    assert "t0.5-s0" in executed["04"] and "t0.8-s0" in executed["04"]   # the knob's two runs
    assert "4 training run(s) made here" in executed["05"]

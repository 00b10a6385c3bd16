"""The committed Trinity-RFT runs and the script that builds their results folders.

``results/trinity_h200/`` holds the 40-step experiment's runs of ``python -m mathagent train``
on one H200, ``results/trinity_h200_bf16/`` its first pair (started from the bfloat16 export),
``results/trinity_h200_22steps/`` the first two 22-step runs, and
``results/trinity_h200_local/`` the ``train-local`` runs with the experiment's settings; the
reader must find in their event files and tables what the committed summaries say.
(Laying out a run's folder and its timings: tests/test_experiment_layout.py.)
"""

from __future__ import annotations

import dataclasses
import json
import re
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mathagent import metrics, paths, results, run_facts, tasks, verdict
from mathagent.grpo import load_config

TRINITY_22 = paths.RESULTS_DIR / "trinity_h200_22steps"
RUNS = {"random": TRINITY_22 / "random_seed42",
        "difficulty_based": TRINITY_22 / "difficulty_seed42"}
EXPERIMENT = paths.RESULTS_DIR / "trinity_h200"
BF16_START = paths.RESULTS_DIR / "trinity_h200_bf16"
LOCAL = paths.RESULTS_DIR / "trinity_h200_local"


def run_folders(folder):
    return sorted(d for d in folder.iterdir() if (d / "params.json").is_file())


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


def assert_same_table(committed: pd.DataFrame, table: pd.DataFrame) -> None:
    key = list(metrics.KEYS)
    a = committed.sort_values(key).reset_index(drop=True)
    b = table.sort_values(key).reset_index(drop=True)
    assert len(a) == len(b)
    for column in ("step", *metrics.METRICS):
        np.testing.assert_allclose(a[column], b[column], rtol=1e-6, err_msg=column)


def test_committed_tidy_table_is_what_the_event_files_say(table):
    assert_same_table(pd.read_csv(TRINITY_22 / "trinity_h200.csv"), table)
    # the folder as a whole reads as its tidy table
    assert results.find_runs(TRINITY_22) == [TRINITY_22]


@pytest.mark.parametrize("experiment", [EXPERIMENT, BF16_START], ids=lambda f: f.name)
def test_experiment_runs_have_40_steps_and_evals_every_10(experiment):
    folders = run_folders(experiment)
    assert folders
    table = results.load_runs(folders, progress=False)
    pairs = set()
    for folder in folders:
        params = json.loads((folder / "params.json").read_text())
        pairs.add((params["selector"], params["seed"]))
        assert folder.name == f"{params['selector'].replace('_based', '')}_seed{params['seed']}"
        run = table[(table["selector"] == params["selector"]) & (table["seed"] == params["seed"])]
        assert run["step"].max() == 40
        assert run.dropna(subset=["eval_accuracy"])["step"].tolist() == [0, 10, 20, 30, 40]
        timings = json.loads((folder / "timings.json").read_text())
        assert len(timings["whole_step_s"]) >= 39 and timings["startup_min"]["step 1 starts"] > 0
    # every seed has both selectors: the pairs ran side by side, one pair per stretch
    seeds = {seed for _, seed in pairs}
    assert pairs == {(sel, seed) for sel in ("random", "difficulty_based") for seed in seeds}
    assert_same_table(pd.read_csv(experiment / "trinity_h200.csv"), table)
    assert set(pd.read_csv(experiment / "trinity_h200.csv")["run"]) == {
        str(f.relative_to(paths.REPO_ROOT)) for f in folders}
    phases = pd.read_csv(experiment / "phase_times.csv", index_col=0)
    assert sorted(phases.columns) == [f.name for f in folders]


def test_local_runs_used_the_mirror_config_and_the_summary_reads_from_them():
    mirror = load_config(paths.CONFIGS_DIR / "train_local_trinity.yaml")
    folders = run_folders(LOCAL)
    assert folders
    for folder in folders:
        params = json.loads((folder / "params.json").read_text())
        for section in ("rollout", "algorithm", "eval", "prompt"):
            want = json.loads(json.dumps(getattr(mirror, section).__dict__))
            ran = params["config"][section]
            # settings added after these runs (rollout.python_tool, ...): the mirror keeps
            # their defaults, which do what the runs did
            default = json.loads(json.dumps(type(getattr(mirror, section))().__dict__))
            added = {key: default[key] for key in want.keys() - ran.keys()}
            assert {**ran, **added} == want, (folder.name, section)
    local = results.load_runs(folders, progress=False)
    assert_same_table(pd.read_csv(LOCAL / "train_local.csv"), local)
    engine = results.load_runs(run_folders(EXPERIMENT), progress=False)
    summary = results.side_by_side_summary({"Trinity-RFT": engine, "train-local": local})
    committed = pd.read_csv(LOCAL / "engine_vs_local.csv")
    pd.testing.assert_frame_equal(committed, summary, check_dtype=False, atol=1e-3)


PILOT = paths.RESULTS_DIR / "trinity_h200_qwen_pilot"


def test_the_qwen_pilots_readme_states_what_its_event_files_and_tables_hold():
    """The pilot's held-out accuracies, start-up minutes and memory peaks in its README are
    the ones its event files and timing tables hold (both runs: random, seed 0)."""
    readme = (PILOT / "README.md").read_text()
    learned = results.read_run(PILOT / "async16_lr5e6").dropna(subset=["eval_accuracy"])
    assert learned["step"].tolist() == [0, 10, 20]
    for acc in learned["eval_accuracy"]:
        assert f"{acc:.3f}" in readme
    stopped = results.read_run(PILOT / "seq32_lr1e6").dropna(subset=["eval_accuracy"])
    assert stopped["step"].tolist() == [0] and f"{stopped['eval_accuracy'].iloc[0]:.3f}" in readme
    startup = pd.read_csv(PILOT / "startup.csv", index_col=0)
    for run in ("seq32_lr1e6", "async16_lr5e6"):
        assert f"{startup.loc['step 1 starts', run]:.2f}" in readme
        assert f"{startup.loc['vLLM engine ready', run]:.2f}" in readme
    memory = pd.read_csv(PILOT / "gpu_memory.csv", index_col=0)
    assert f"{memory.loc['trainer (FSDP actor + reference)', 'async16_lr5e6']:.1f} GiB" in readme
    # the project README's opening quotes the first and last evaluation
    opening = (paths.REPO_ROOT / "README.md").read_text().split("\n## ")[0]
    first, last = learned["eval_accuracy"].iloc[[0, -1]]
    assert f"from {first:.3f} to {last:.3f}" in " ".join(opening.split())


QWEN_STARTUP = paths.RESULTS_DIR / "trinity_h200_qwen_startup"


def _assert_vllm_account(folder, cells_by_run) -> None:
    """Each run's log excerpt in ``folder`` keeps vLLM's own account of its engine: seconds to
    load the weights, for torch.compile, and to initialise the engine (warm-up included)."""
    for run, (weights, compiled, engine) in cells_by_run.items():
        excerpt = (folder / run / "train_log_excerpt.txt").read_text()
        assert f"Loading weights took {weights} seconds" in excerpt
        assert f"torch.compile took {compiled} s" in excerpt
        assert f"warmup model) took {engine} s" in excerpt


def test_the_qwen_start_up_readme_states_what_its_tables_hold():
    """Every start-up minute and memory peak the README's table gives for the Qwen pair is
    the one ``startup.csv`` and ``gpu_memory.csv`` hold, and neither run reached step 1."""
    readme = (QWEN_STARTUP / "README.md").read_text()
    startup = pd.read_csv(QWEN_STARTUP / "startup.csv", index_col=0)
    assert sorted(startup.columns) == ["difficulty_seed0", "random_seed0"]
    rows = {line.split("|")[1].strip(): line for line in readme.splitlines()
            if line.startswith("| ") and line.count("|") == 5}
    assert startup.loc[["step 1 starts", "last step trained"]].isna().all().all()
    for milestone in startup.index.drop(["step 1 starts", "last step trained",
                                         "train command ends"]):
        cells = [c.strip() for c in rows[milestone].split("|")[2:4]]
        assert cells == [f"{startup.loc[milestone, run]:.2f}"
                         for run in ("random_seed0", "difficulty_seed0")], milestone
    memory = pd.read_csv(QWEN_STARTUP / "gpu_memory.csv", index_col=0)
    for role, said in (("trainer (FSDP actor + reference)", "GiB a trainer"),
                       ("vLLM engine worker", "GiB a\nvLLM worker"),
                       ("run, all processes (sum at one time)", "GiB a run")):
        assert memory.loc[role].nunique() == 1, role   # both runs, one figure
        assert f"{memory.loc[role].iloc[0]:.1f} {said}" in readme, role
    # vLLM's own account of its engine, as the excerpts keep it, for both runs
    _assert_vllm_account(QWEN_STARTUP, {"random_seed0": ("0.82", "27.46", "39.83"),
                                        "difficulty_seed0": ("0.94", "21.37", "33.16")})
    assert "weights 0.82 / 0.94 s, torch.compile 27.46 / 21.37 s" in readme
    assert "`init engine ... took` 39.83 / 33.16 s" in readme
    for run in ("random_seed0", "difficulty_seed0"):   # no step, no evaluation logged
        with pytest.raises(results.RunError, match="no scalars"):
            results.read_run(QWEN_STARTUP / run)


QWEN_MEMORY = paths.RESULTS_DIR / "trinity_h200_qwen_memory"


def _table_rows(readme: str, columns: int) -> dict[str, list[str]]:
    """The README's table rows of ``columns`` cells, by their first cell (backticks dropped)."""
    rows = {}
    for line in readme.splitlines():
        if line.startswith("| ") and line.count("|") == columns + 1:
            cells = [c.strip() for c in line.split("|")[1:-1]]
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_the_qwen_memory_readme_states_what_its_tables_hold():
    """The second stretch of the Qwen pair: the README's accuracies and their standard errors,
    who held the GPU at the out-of-memory failure, the memory peaks, the padded micro-batches,
    the step split, the start-up minutes against stretch 1 and the quoted reply are what its
    event files, tables, log excerpts, GPU timeline and samples hold."""
    readme = (QWEN_MEMORY / "README.md").read_text()
    flat = " ".join(readme.split())
    random_run, difficulty = QWEN_MEMORY / "random_seed0", QWEN_MEMORY / "difficulty_seed0"
    assert "**These runs are not part of the experiment.**" in readme
    # 11 explore steps, the last on model version 10; no update of the difficulty-based run
    steps = pd.read_csv(random_run / "buffer_steps.csv").set_index("step")
    assert steps.index.max() == 11 and steps.loc[11, "model_version"] == 10
    assert "11 of its 16 steps explored and 10 updates applied" in flat
    assert not any(t.startswith("actor/") for t in results.read_scalars(difficulty)["tag"])

    # held-out accuracy, its binomial standard error and the step-8 policy's version
    n = 660 * 4
    acc = results.read_run(random_run).dropna(subset=["eval_accuracy"])
    assert acc["step"].tolist() == [0, 8]
    first, last = acc["eval_accuracy"]
    other = results.read_run(difficulty).dropna(subset=["eval_accuracy"])
    assert other["step"].tolist() == [0]
    accuracy = _table_rows(readme, 3)
    for run, values in (("random_seed0", [first, last]),
                        ("difficulty_seed0", [other["eval_accuracy"].iloc[0]])):
        for cell, value in zip(accuracy[run], values, strict=False):
            assert f"{value:.3f}" in cell and f"({round(value * n)} of 2,640" in cell, run
    se = [np.sqrt(p * (1 - p) / n) for p in (first, last)]
    diff_se = np.hypot(*se)
    assert f"is {se[0]:.3f} at step 0 and {se[1]:.3f} at step 8" in flat
    assert f"the gain of {last - first:.3f} is {(last - first) / diff_se:.0f} standard " \
           f"errors of the difference ({diff_se:.3f})" in flat
    assert f"which still leaves {(last - first) / diff_se / 2:.0f}." in flat
    assert steps.loc[8, "model_version"] == 7 and "ran on model version 7" in flat
    rewards = steps["mean_reward"]
    assert f"went {rewards.loc[1]:.3f} at step 1" in flat
    assert f"{rewards.loc[2:7].min():.3f}-{rewards.loc[2:7].max():.3f} at steps 2-7" in flat
    assert f"{rewards.loc[8:10].min():.3f}-{rewards.loc[8:10].max():.3f} at steps 8-10" in flat
    assert f"and {rewards.loc[11]:.3f} at step 11" in flat

    # no tool offered, none called; the quoted reply with its invented output
    params = json.loads((random_run / "params.json").read_text())
    assert not params["settings"]["agent"]["python_tool"]
    assert not params["settings"]["agent"]["meta_tool"]
    scalars = results.read_scalars(random_run)
    tools = scalars[scalars["tag"] == "eval/eval-arithmetic-qwen/tool_calls/mean@4"]
    assert tools["step"].tolist() == [0, 8] and (tools["value"] == 0).all()
    for run in (random_run, difficulty):
        assert (pd.read_csv(run / "buffer_steps.csv")["tool_call_rate"] == 0).all()
    replies = [json.loads(line) for line in
               (random_run / "samples.jsonl").read_text().splitlines()]
    early = [r for r in replies if r["step"] == 1]
    late = [r for r in replies if r["step"] == 11]
    assert len(early) == len(late) == 16
    python = sum("```python" in r["response"] for r in early)
    output = sum("```output" in r["response"] for r in early)
    assert f"{python} hold a" in flat and f"and {output} follow it" in flat
    quoted = readme.split("````text\n")[1].split("\n````")[0]
    lena = next(r for r in early if quoted in r["response"])
    assert lena["reward"] == 0 and lena["question"] in flat.replace('"', "")
    assert {r["model_version"] for r in late} == {10}
    assert not any(f"```{block}" in r["response"] for r in late for block in ("python", "output"))
    assert all("step by step using Python" in r["response"] for r in late)
    assert f"{sum(r['reward'] for r in late):.0f} of them were rewarded" in flat

    # the failure: the log line, the table of who held what, the GPU timeline
    excerpt = (difficulty / "train_log_excerpt.txt").read_text()
    message = readme.split("in the actor's backward pass:\n\n```text\n")[1].split("\n```")[0]
    assert " ".join(message.split()) in excerpt
    for line in ("Trainer finished", "RuntimeError: Experience pipeline is not initialized."):
        assert line in excerpt
    held = {cells[0]: cells[1] for cells in _table_rows(readme, 3).values()
            if cells[0].isdigit()}
    assert held == {"14866": "93.38", "15169": "32.63", "16559": "6.72", "16742": "6.72"}
    for pid, gib in held.items():
        said = "this process has" if pid == "15169" else f"Process {pid} has"
        assert f"{said} {gib} GiB memory in use" in " ".join(excerpt.split())
    def logged(path, text):   # the log's UTC time of the first excerpt line holding text
        line = next(x for x in (path / "train_log_excerpt.txt").read_text().splitlines()
                    if text in x)
        when = datetime.strptime("2026-" + line.split()[3] + " " + line.split()[4],
                                 "%Y-%m-%d %H:%M:%S")
        return when.replace(tzinfo=UTC).timestamp()

    failed = logged(difficulty, "torch.OutOfMemoryError")
    start, end = (logged(random_run, f"Training at step 1 {x}") for x in ("started", "finished"))
    assert (start, end, failed) == tuple(
        datetime(2026, 12, 4, 14, m, s, tzinfo=UTC).timestamp() for m, s in
        ((26, 51), (27, 11), (27, 16)))
    apps = pd.read_csv(QWEN_MEMORY / "gpu_apps.csv", names=["t", "pid", "mib", "run"])
    before = apps[apps["t"] < failed]
    at_failure = before[before["t"] == before["t"].max()].set_index("pid")["mib"] / 1024
    assert f"{at_failure[14866]:.2f}" == held["14866"]
    trainer = apps[apps["pid"] == 14866].set_index("t")["mib"] / 1024
    update = trainer[(trainer.index > start) & (trainer.index <= end)]
    assert f"from {trainer[trainer.index <= start].iloc[-1]:.1f} GiB to {update.iloc[-1]:.1f} " \
           "GiB" in flat
    times = ", ".join(datetime.fromtimestamp(x, UTC).strftime("%H:%M:%S") for x in update.index)
    assert f"`gpu_apps.csv`: {', '.join(f'{x:.1f}' for x in update)} GiB at {times})" in flat
    assert f"{trainer[trainer.index > failed + 40].min():.1f} GiB and rose again to " \
           f"{trainer.iloc[-1]:.1f} GiB by the end" in flat

    # memory: the monitor's peaks, the trainer's own account, the pilot's
    memory = pd.read_csv(QWEN_MEMORY / "gpu_memory.csv", index_col=0)
    assert f"reached {memory.loc['trainer (FSDP actor + reference)', 'random_seed0']:.1f} GiB" \
           in flat
    assert f"{memory.loc['run, all processes (sum at one time)', 'random_seed0']:.1f} GiB " \
           "with its vLLM worker" in flat
    def perf(folder, name):
        s = results.read_scalars(folder)
        return s[s["tag"] == f"actor/perf/{name}_gb"].set_index("step")["value"]
    live, kept = perf(random_run, "max_memory_allocated"), perf(random_run, "max_memory_reserved")
    assert f"at most {live[1]:.1f} GiB of live tensors in step 1 and {live.max():.1f} GiB by " \
           f"step {live.idxmax()}" in flat
    assert f"{kept[1]:.1f} GiB reserved" in flat
    assert f"{kept.max():.1f} GiB from step {kept.idxmax()} on" in flat
    pilot_live = perf(PILOT / "async16_lr5e6", "max_memory_allocated").max()
    pilot_kept = perf(PILOT / "async16_lr5e6", "max_memory_reserved").max()
    assert f"peaked at {pilot_live:.1f} GiB of live tensors and {pilot_kept:.1f} GiB reserved" \
           in flat
    assert f"by {pilot_live - live.max():.0f} GiB" in flat

    # the padded micro-batches, from the trainer's scalars
    def per_step(tag):
        return scalars[scalars["tag"] == tag].set_index("step")["value"]
    tokens = per_step("global_seqlen/mean")
    prompts, replies_max = per_step("prompt_length/max"), per_step("response_length/max")
    assert f"{tokens.min():,.0f}-{tokens.max():,.0f} real tokens" in flat
    chunks = [int(np.ceil(tokens.min() / 4096)), int(np.ceil(tokens.max() / 4096))]
    assert f"{chunks[0]}-{chunks[1]} micro-batches of {128 / chunks[1]:.0f}-" \
           f"{128 / chunks[0]:.0f} sequences" in flat
    assert f"prompts up to {prompts.min():.0f}-{prompts.max():.0f} tokens and replies up to " \
           f"{replies_max.min():.0f}-{replies_max.max():.0f}" in flat
    longest = prompts.max() + replies_max.max()
    positions = 128 / chunks[0] * longest
    logits = positions * 151936
    assert f"about 16 x {longest:.0f} = {positions:,.0f} positions: {logits / 1e9:.2f} billion " \
           f"logits a copy, {logits * 2 / 2**30:.1f} GiB in bfloat16 and " \
           f"{logits * 4 / 2**30:.1f} GiB in float32" in flat

    # the step split and the evaluations
    phases = pd.read_csv(QWEN_MEMORY / "phase_times.csv", index_col=0)["random_seed0"]
    assert f"rollout phase {phases['rollout phase']:.2f} (one agent run " \
           f"{phases['one agent run (mean)']:.2f}), training step {phases['training step']:.2f}, " \
           f"weight sync {phases['weight sync']:.2f}" in flat
    assert f"whole step {phases['whole step (log: one explore start to the next)']:.1f}" in flat
    whole = json.loads((random_run / "timings.json").read_text())["whole_step_s"]
    alone = [whole[f"step {k}"] for k in range(2, 11) if k != 8]
    assert f"steps 2-10 took {min(alone):.0f}-{max(alone):.0f} s, step 8 " \
           f"({whole['step 8']:.0f} s) aside" in flat
    assert f"Step 1 took {whole['step 1']:.0f} s, its update " \
           f"{per_step('time/train_step')[1]:.2f} s" in flat
    for tag, said in (("time/ref", "log-probabilities took a median"),
                      ("time/update_actor", "the actor's update")):
        assert f"{said} {per_step(tag).median():.2f} s" in flat, tag
    evaluation = results.phase_times(random_run).loc["evaluation"].dropna()
    other_eval = results.phase_times(difficulty).loc["evaluation"].dropna()
    assert f"{phases['evaluation']:.2f}" == f"{evaluation['step 8']:.2f}"
    assert f"The evaluation alone (step 8) took {evaluation['step 8']:.2f} s; at step 0, " \
           f"beside the other run's, {evaluation['step 0']:.2f} s" in flat
    assert f"evaluations of {evaluation['step 0']:.2f} s and {other_eval['step 0']:.2f} s" \
           in flat

    # start-up against stretch 1, and vLLM's account of its engine
    startup = pd.read_csv(QWEN_MEMORY / "startup.csv", index_col=0)
    before = pd.read_csv(QWEN_STARTUP / "startup.csv", index_col=0)
    rows = _table_rows(readme, 5)
    runs = ("random_seed0", "difficulty_seed0")
    for milestone in before.index.drop(["step 1 starts", "last step trained",
                                        "train command ends"]):
        assert rows[milestone] == [f"{startup.loc[milestone, r]:.2f}" for r in runs] + \
            [f"{before.loc[milestone, r]:.2f}" for r in runs], milestone
    assert rows["step 1 starts"][:2] == [f"{startup.loc['step 1 starts', r]:.2f}" for r in runs]
    gained = (before - startup).drop(["step 1 starts", "last step trained",
                                      "train command ends"])
    assert f"by up to {gained.max().max():.2f} minutes" in flat
    assert (gained >= 0).all().all() and (gained == 0).sum().sum() == 1
    zero = gained.loc["step-0 evaluation starts"]
    assert f"the step-0 evaluation by {zero['random_seed0']:.2f} and " \
           f"{zero['difficulty_seed0']:.2f} minutes" in flat
    assert f"{startup.loc['train command ends', 'random_seed0']:.2f} minutes after its `train`" \
           in flat
    assert f"`difficulty_seed0`'s \"last step trained\" " \
           f"({startup.loc['last step trained', 'difficulty_seed0']:.2f})" in flat
    _assert_vllm_account(QWEN_MEMORY, {"random_seed0": ("0.72", "20.05", "33.30"),
                                       "difficulty_seed0": ("0.82", "21.65", "33.19")})
    assert "weights 0.72 / 0.82 s, torch.compile 20.05 / 21.65 s" in flat
    assert "`init engine ... took` 33.30 / 33.19 s" in flat


QWEN_CACHE = paths.RESULTS_DIR / "trinity_h200_qwen_cache"


def test_the_qwen_cache_readme_states_what_its_tables_hold():
    """The third stretch of the Qwen pair: the steps each run reached, the trainer's memory in
    its own account and the GPU monitor's, the step-1 times, the start-up minutes against the
    second stretch and vLLM's account of the carried compile cache are what its event files,
    tables, log excerpts and GPU timeline hold."""
    readme = (QWEN_CACHE / "README.md").read_text()
    flat = " ".join(readme.split())
    random_run, difficulty = QWEN_CACHE / "random_seed0", QWEN_CACHE / "difficulty_seed0"
    assert "**These runs are not part of the experiment**" in readme
    explored = {run.name: pd.read_csv(run / "buffer_steps.csv")["step"].tolist()
                for run in (random_run, difficulty)}
    assert explored == {"random_seed0": [1, 2], "difficulty_seed0": [1]}
    assert "The random run had explored 2 steps, the difficulty-based run 1" in flat
    for run in (random_run, difficulty):   # both trained step 1 (the excerpts say so)
        assert "Training at step 1 finished." in (run / "train_log_excerpt.txt").read_text()
    assert not any(t.startswith("actor/") for t in results.read_scalars(difficulty)["tag"])

    # the trainer's own account of step 1, and the time table
    scalars = results.read_scalars(random_run)
    at_1 = scalars[scalars["step"] == 1].set_index("tag")["value"]
    assert f"**{at_1['actor/perf/max_memory_allocated_gb']:.2f} GiB of live tensors**" in flat
    assert f"**{at_1['actor/perf/max_memory_reserved_gb']:.1f} GiB reserved**" in flat
    times = _table_rows(readme, 3)
    for tag in ("time/train_step", "time/ref", "time/update_actor", "time/sync_weight"):
        row = next(cells for name, cells in times.items() if f"(`{tag}`)" in name)
        assert row[0] == f"{at_1[tag]:.2f}", tag
    phases = pd.read_csv(QWEN_CACHE / "phase_times.csv", index_col=0)
    whole = phases.loc["whole step (log: one explore start to the next)", "random_seed0"]
    assert times["whole step, random run"][0] == f"{whole:.1f}"

    # the GPU monitor: per-role peaks, the four processes' highest sum, the whole GPU
    memory = pd.read_csv(QWEN_CACHE / "gpu_memory.csv", index_col=0)
    trainers = memory.loc["trainer (FSDP actor + reference)"]
    assert f"the trainers {trainers['random_seed0']:.1f} and {trainers['difficulty_seed0']:.1f}" \
           f" GiB, each vLLM worker {memory.loc['vLLM engine worker'].max():.1f} GiB" in flat
    assert memory.loc["vLLM engine worker"].nunique() == 1
    apps = pd.read_csv(QWEN_CACHE / "gpu_apps.csv", names=["t", "pid", "mib", "run"])
    per_time = apps.groupby("t")["mib"].sum()
    assert per_time.groupby(per_time.index).size().max() == 1
    when = datetime.fromtimestamp(per_time.idxmax(), UTC).strftime("%H:%M:%S")
    assert apps[apps["t"] == per_time.idxmax()]["pid"].nunique() == 4
    assert f"reached {per_time.max() / 1024:.1f} GiB (`gpu_apps.csv`, {when})" in flat
    gpu = pd.read_csv(QWEN_CACHE / "gpu.csv", header=None)
    used = gpu[1].astype(str).str.extract(r"(\d+)")[0].dropna().astype(int)
    assert f"the whole GPU {used.max():,} of 143,771 MiB" in flat

    # start-up: this stretch's minutes and the second stretch's, side by side
    here = pd.read_csv(QWEN_CACHE / "startup.csv", index_col=0)
    before = pd.read_csv(QWEN_MEMORY / "startup.csv", index_col=0)
    rows = _table_rows(readme, 5)
    order = ("random_seed0", "difficulty_seed0")
    for milestone in here.index.drop(["last step trained", "train command ends"]):
        assert rows[milestone] == [f"{t.loc[milestone, r]:.2f}" for t in (here, before)
                                   for r in order], milestone
    def span(table, run):
        return table.loc["vLLM engine ready", run] - table.loc["vLLM actor's first line", run]
    assert f"took {span(here, order[0]):.2f} and {span(here, order[1]):.2f} minutes " \
           f"({span(before, order[0]):.2f} both in the second stretch)" in flat
    assert span(before, order[0]) == pytest.approx(span(before, order[1]))
    gain = [before.loc["step 1 starts", r] - here.loc["step 1 starts", r] for r in order]
    assert f"**{gain[0]:.2f} and {gain[1]:.2f} minutes earlier**, " \
           f"{here.loc['step 1 starts', order[0]]:.2f} and " \
           f"{here.loc['step 1 starts', order[1]]:.2f} minutes after `train`" in flat
    _assert_vllm_account(QWEN_CACHE, {"random_seed0": ("0.78", "3.72", "13.12"),
                                      "difficulty_seed0": ("0.69", "2.73", "5.98")})
    _assert_vllm_account(QWEN_MEMORY, {"random_seed0": ("0.72", "20.05", "33.30"),
                                       "difficulty_seed0": ("0.82", "21.65", "33.19")})
    assert "torch.compile **3.72 / 2.73 s** against 20.05 / 21.65 s" in flat
    assert "`init engine ... took` 13.12 / 5.98 s against 33.30 / 33.19 s" in flat

    # the step-0 evaluation of both runs, here and in the second stretch
    said = []
    for folder in (QWEN_CACHE, QWEN_MEMORY):
        for run in order:
            acc = results.read_run(folder / run).dropna(subset=["eval_accuracy"])
            said.append(f"{acc.set_index('step').loc[0, 'eval_accuracy']:.3f}")
    assert f"{said[0]} (random) and {said[1]} (difficulty-based) here, {said[2]} and " \
           f"{said[3]} there" in flat


QWEN_MB4 = paths.RESULTS_DIR / "trinity_h200_qwen_mb4"


def _followed(log: str) -> dict[tuple[str, str], datetime]:
    """When the follow log ``log`` first printed each (run, event), runs named as in the
    results folder (``random_seed0``): ``started``, or the event's words (``Explore step 1``)."""
    seen = {}
    for line in log.splitlines():
        started = re.match(r"\[(\d\d:\d\d:\d\d)\] started (\w+)_qwen_(seed\d) ", line)
        event = re.match(r"\[(\d\d:\d\d:\d\d)\] (\w+)_qwen_(seed\d): (.*)", line)
        if started or event:
            when, selector, seed = (started or event).groups()[:3]
            what = "started" if started else event.group(4)
            seen.setdefault((f"{selector}_{seed}", what), datetime.strptime(when, "%H:%M:%S"))
    return seen


def test_the_qwen_mb4_readme_states_what_its_logs_and_tables_hold():
    """The fourth stretch: the start-up minutes of both machines, the pair's step time with
    micro-batches of 4, the GPU memory and the set-up times are what the first machine's
    tables and the two follow logs hold."""
    readme = (QWEN_MB4 / "README.md").read_text()
    flat = " ".join(readme.split())
    log1 = (QWEN_MB4 / "follow_machine1.log").read_text()
    log2 = (QWEN_MB4 / "follow_machine2.log").read_text()
    assert "**These runs are not part of the experiment.**" in readme
    startup = pd.read_csv(QWEN_MB4 / "startup.csv", index_col=0)
    assert startup.loc["step 1 starts"].isna().all()   # packed during the step-0 evaluation
    seen = _followed(log2)
    order = ("random_seed0", "difficulty_seed0")

    def minutes(run: str, event: str) -> str:
        return f"{(seen[(run, event)] - seen[(run, 'started')]).total_seconds() / 60:.2f}"

    rows = _table_rows(readme, 5)
    eval0 = "Evaluation on eval-arithmetic-qwen at step 0"
    assert rows["step-0 evaluation starts"] == (
        [f"{startup.loc['step-0 evaluation starts', r]:.2f}" for r in order]
        + [minutes(r, eval0) for r in order])
    assert rows["step 1 starts"] == ["", ""] + [minutes(r, "Explore step 1") for r in order]
    step1 = {r: seen[(r, "Explore step 1")] for r in order}
    assert step1[order[0]] == step1[order[1]]
    assert f"({step1[order[0]]:%H:%M:%S} for both)" in flat
    eval8 = {r: (seen[(r, "Evaluation on eval-arithmetic-qwen at step 8")] - step1[r]).seconds
             for r in order}
    assert f"the difficulty-based run took {eval8[order[1]]} s and the random run " \
           f"{eval8[order[0]]} s: **{eval8[order[1]] / 7:.1f} and {eval8[order[0]] / 7:.1f} s a " \
           f"step**" in flat
    assert ("difficulty_seed0", "Training at step 8 finished") in seen
    used = [int(m) for m in re.findall(r", (\d+) MiB, \d+ %", log2)]
    assert f"the GPU held {max(used):,} MiB of 143,771" in flat
    took = [re.search(r"setup took (\d+) s", log).group(1) for log in (log2, log1)]
    assert f"set-up took {took[0]} s ({took[1]} on the first machine)" in flat


def _assert_lone_step_and_memory(flat: str, folder: Path, run: str) -> None:
    """A lone run's README (``flat``: its words joined by single spaces) states the median
    step and its split, the run's memory peaks and the H100's, as ``folder``'s tables and GPU
    lines hold them."""
    phases = pd.read_csv(folder / "phase_times.csv", index_col=0)[run]
    assert f"**{phases['whole step (log: one explore start to the next)']:.1f} s**" in flat
    assert (f"training {phases['training step']:.1f} s, weight sync "
            f"{phases['weight sync']:.1f} s, rollout phase {phases['rollout phase']:.1f} s") in flat
    memory = pd.read_csv(folder / "gpu_memory.csv", index_col=0)[run]
    assert f"**{memory['run, all processes (sum at one time)']:.1f} GiB**" in flat
    assert (f"the trainer {memory['trainer (FSDP actor + reference)']:.1f}, the vLLM worker "
            f"{memory['vLLM engine worker']:.1f}") in flat
    gpu = pd.read_csv(folder / "gpu.csv", header=None)
    peak = gpu[1].str.replace(" MiB", "").astype(int).max()
    assert f"at most {peak:,} MiB of 81,559" in flat


QWEN_LONE = paths.RESULTS_DIR / "trinity_h100_qwen_lone"


def test_the_qwen_lone_run_readme_states_what_its_tables_and_log_hold():
    """The lone run on an H100 with the early-explorer lever: its start-up minutes against the
    fourth stretch's, the order of vLLM's start and the trainer's, the step-0 accuracy, the
    step split, the memory peaks and the step rewards are what its tables, event files, log
    and GPU lines hold."""
    readme = (QWEN_LONE / "README.md").read_text()
    flat = " ".join(readme.split())
    run = QWEN_LONE / "difficulty_seed0"
    assert "**This run is not part of the experiment.**" in readme
    assert "trinity-early-explorer: applied" in (run / "train_log_excerpt.txt").read_text()
    lone = pd.read_csv(QWEN_LONE / "startup.csv", index_col=0)["difficulty_seed0"]
    mb4 = pd.read_csv(QWEN_MB4 / "startup.csv", index_col=0)
    rows = _table_rows(readme, 3)
    for milestone, (here, there) in rows.items():
        if milestone in lone.index:
            assert here == ("" if pd.isna(lone[milestone]) else f"{lone[milestone]:.2f}")
            assert there == ("" if pd.isna(mb4.loc[milestone, "difficulty_seed0"])
                             else f"{mb4.loc[milestone, 'difficulty_seed0']:.2f}")
    assert len([m for m in rows if m in lone.index]) == 7
    ahead = lone["trainer workers ready"] - lone["vLLM actor's first line"]
    assert ahead > 0 and f"{ahead:.2f} minutes **before**" in flat
    behind = mb4.loc["vLLM actor's first line"] - mb4.loc["trainer workers ready"]
    assert f"{behind.min():.2f}-{behind.max():.2f} minutes after them" in flat
    sooner = (mb4.loc["step-0 evaluation starts", "difficulty_seed0"]
              - lone["step-0 evaluation starts"])
    assert f"the {sooner:.2f} minutes by which the step-0 evaluation came sooner" in flat
    # the step-0 evaluation: the log's times and the held-out accuracy
    log = (QWEN_LONE / "follow.log").read_text()
    assert "[13:30:25] difficulty_qwen_seed0: Evaluation on eval-arithmetic-qwen at step 0" in log
    acc = results.read_run(run).dropna(subset=["eval_accuracy"])
    assert acc["step"].tolist() == [0]
    assert f"held-out accuracy was {acc['eval_accuracy'].iloc[0]:.3f}" in flat
    _assert_lone_step_and_memory(flat, QWEN_LONE, "difficulty_seed0")
    steps = pd.read_csv(run / "buffer_steps.csv").set_index("step")
    assert f"step 1's 128 agent runs was {steps.loc[1, 'mean_reward']:.3f}" in flat
    assert f"step 2's {steps.loc[2, 'mean_reward']:.3f}" in flat
    assert (steps["tool_call_rate"] == 0).all()


QWEN_STEP5 = paths.RESULTS_DIR / "trinity_h100_qwen_step5"


def test_the_qwen_run_without_step0_evaluation_readme_states_what_its_tables_hold():
    """The run without the step-0 evaluation: its start-up minutes against the lone run's, the
    minutes it saved, the step times and split, the memory peaks, the step rewards and the
    first try's failure are what its tables, event files, logs and GPU lines hold."""
    readme = (QWEN_STEP5 / "README.md").read_text()
    flat = " ".join(readme.split())
    run = QWEN_STEP5 / "random_seed0"
    assert "**This run is not part of the experiment**" in readme
    assert "trinity-early-explorer: applied" in (run / "train_log_excerpt.txt").read_text()
    config = (run / "launched_config.yaml").read_text()
    assert re.search(r"^  eval_on_startup: false$", config, re.M)
    here = pd.read_csv(QWEN_STEP5 / "startup.csv", index_col=0)["random_seed0"]
    lone = pd.read_csv(QWEN_LONE / "startup.csv", index_col=0)["difficulty_seed0"]
    rows = _table_rows(readme, 3)
    assert len([m for m in rows if m in here.index]) == 6
    for milestone, (this, that) in rows.items():
        if milestone in here.index:
            assert (this, that) == (f"{here[milestone]:.2f}", f"{lone[milestone]:.2f}")
    assert pd.isna(here["step-0 evaluation starts"])
    assert here["step 1 starts"] == here["all workflow runners ready"]
    saved = lone["step 1 starts"] - here["step 1 starts"]
    assert f"**{saved:.2f} minutes sooner**" in flat
    slower = here["all workflow runners ready"] - lone["all workflow runners ready"]
    assert f"about {slower:.2f} minutes slower" in flat
    runners = here["all workflow runners ready"] - here["all rollout models ready"]
    assert f"the workflow runners {runners:.2f} more" in flat
    # the held-out accuracy: none came back, and none at step 0
    assert results.read_run(run)["eval_accuracy"].isna().all()
    steps_s = json.loads((run / "timings.json").read_text())["whole_step_s"]
    assert f"Steps 1-4 took {', '.join(f'{s:.0f}' for s in list(steps_s.values())[:-1])} and " \
           f"{list(steps_s.values())[-1]:.0f} s" in flat
    _assert_lone_step_and_memory(flat, QWEN_STEP5, "random_seed0")
    steps = pd.read_csv(run / "buffer_steps.csv").set_index("step")
    assert ", ".join(f"{r:.3f}" for r in steps["mean_reward"]) + " (steps 1-5)" in flat
    assert (steps["tool_call_rate"] == 0).all()
    first = (QWEN_STEP5 / "follow_first_try.log").read_text()
    assert "vLLM starts from the carried compile cache" in first
    assert "FileNotFoundError" in first and "vllm_cache/difficulty_qwen_seed0/" in first
    assert "setup took 28 s" in (QWEN_STEP5 / "follow.log").read_text()


QWEN_MB2 = paths.RESULTS_DIR / "trinity_h100_qwen_mb2"


def _memory_peaks(run: Path) -> tuple[float, float]:
    """The trainer's own peaks of a run, GiB: reserved by its caching allocator, in use."""
    scalars = results.read_scalars(run)
    peak = scalars.groupby("tag")["value"].max()
    return (peak["actor/perf/max_memory_reserved_gb"],
            peak["actor/perf/max_memory_allocated_gb"])


def test_the_qwen_micro_batch_readme_states_what_its_runs_and_logs_hold():
    """The two H100 runs that set the update's micro-batches: the first try's failure and who
    held the GPU, the trainer's own memory peaks in these and the earlier lone runs, the
    start-up against the run without a carried cache, the step times and split, the memory
    peaks, the held-out accuracy and its bound, and the step rewards are what the runs' event
    files, tables, logs and GPU lines hold; the configs cite the same figures."""
    readme = (QWEN_MB2 / "README.md").read_text()
    flat = " ".join(readme.split())
    run, mb4 = QWEN_MB2 / "random_seed0", QWEN_MB2 / "random_seed0_mb4"
    assert "**These runs are not part of the experiment**" in readme
    for folder, micro in ((run, 2), (mb4, 4)):
        assert "trinity-early-explorer: applied" in (folder / "train_log_excerpt.txt").read_text()
        config = (folder / "launched_config.yaml").read_text()
        assert re.search(rf"^      ppo_micro_batch_size_per_gpu: {micro}$", config, re.M)
        assert re.search(r"^  eval_on_startup: false$", config, re.M)
    # the first try: vLLM's weight update ran out of memory beside the trainer's cache
    failed = (mb4 / "train_log_excerpt.txt").read_text()
    assert "16:50:56 [trainer.py:189] Training at step 1 finished." in failed
    oom = re.search(r"ERROR 12-05 (\S+) .*OutOfMemoryError: CUDA out of memory. Tried to "
                    r"allocate ([\d.]+ GiB). .* of which ([\d.]+ MiB) is free", failed)
    assert oom and "sync_model_weights" in failed
    assert f"At {oom[1]} vLLM's worker" in flat
    assert f"asked for {oom[2]} and the GPU had {oom[3]} free" in flat
    memory = pd.read_csv(QWEN_MB2 / "gpu_memory.csv", index_col=0)
    held = memory.loc["trainer (FSDP actor + reference)", "random_seed0_mb4"]
    assert f"The trainer held **{held:.1f} GiB**" in flat
    reserved, used = _memory_peaks(mb4)
    assert (f"`actor/perf/max_memory_reserved_gb` was {reserved:.1f}) while at most {used:.1f} "
            "GiB") in flat
    first = pd.read_csv(QWEN_MB2 / "gpu_mb4_try.csv", header=None)
    assert f"The GPU held {first[1].str.replace(' MiB', '').astype(int).max():,} MiB of 81,559" \
        in flat
    earlier = [_memory_peaks(QWEN_LONE / "difficulty_seed0"),
               _memory_peaks(QWEN_STEP5 / "random_seed0")]
    assert (f"{earlier[0][0]:.1f} GiB reserved in `results/trinity_h100_qwen_lone/` and "
            f"{earlier[1][0]:.1f} in `results/trinity_h100_qwen_step5/` (at most "
            f"{earlier[0][1]:.1f} and {earlier[1][1]:.1f} in use)") in flat
    for folder in (QWEN_LONE / "difficulty_seed0", QWEN_STEP5 / "random_seed0"):
        assert 2 in pd.read_csv(folder / "buffer_steps.csv")["step"].values  # past step 1's sync
    step5_gpu = (QWEN_STEP5 / "gpu.csv").read_text()
    assert re.search(r"2026/12/05 15:34:58\.\d+, 47191 MiB", step5_gpu)
    assert re.search(r"2026/12/05 15:35:03\.\d+, 24245 MiB", step5_gpu)
    assert "70.9 GiB" in " ".join((QWEN_STEP5 / "README.md").read_text().split())
    reserved2, used2 = _memory_peaks(run)
    assert f"held **{reserved2:.1f} GiB** at most ({used2:.1f} in use) through 9 updates" in flat
    assert len(results.read_scalars(run).query("tag == 'time/update_actor'")) == 9
    # start-up: both runs against the run without a carried cache
    here = pd.read_csv(QWEN_MB2 / "startup.csv", index_col=0)
    step5 = pd.read_csv(QWEN_STEP5 / "startup.csv", index_col=0)["random_seed0"]
    rows = _table_rows(readme, 4)
    assert len([m for m in rows if m in here.index]) == 5
    for milestone, cells in rows.items():
        if milestone in here.index:
            assert cells == [f"{here.loc[milestone, 'random_seed0']:.2f}",
                             f"{here.loc[milestone, 'random_seed0_mb4']:.2f}",
                             f"{step5[milestone]:.2f}"]
    assert here.loc["train command ends"].isna().all()   # packed while they went on
    load = "vLLM worker loads the model"
    spans = [here.loc["vLLM engine ready", c] - here.loc[load, c] for c in here.columns]
    assert (f"took {spans[0]:.2f} minutes (micro-batches of 2) and {spans[1]:.2f} (the first "
            f"try), against {step5['vLLM engine ready'] - step5[load]:.2f} when it compiled") \
        in flat
    sooner = step5["step 1 starts"] - here.loc["step 1 starts"]
    assert f"{sooner.min():.2f}-{sooner.max():.2f} minutes sooner" in flat
    logs = [(QWEN_MB2 / f).read_text() for f in ("follow_mb4_try.log", "follow.log")]
    assert all("random_qwen_seed0: vLLM starts from the carried compile cache" in log
               for log in logs)
    took = [re.search(r"setup took (\d+) s", log)[1] for log in logs]
    assert (f"Set-up took {took[0]} s (the first try) and {took[1]} s (micro-batches of 2)"
            in flat)
    # step time, its split and the memory peaks
    steps_s = list(json.loads((run / "timings.json").read_text())["whole_step_s"].values())
    assert ("Steps 1-9 took " + ", ".join(f"{s:.0f}" for s in steps_s[:-1])
            + f" and {steps_s[-1]:.0f} s") in flat
    _assert_lone_step_and_memory(flat, QWEN_MB2, "random_seed0")
    before = pd.read_csv(QWEN_STEP5 / "phase_times.csv", index_col=0)["random_seed0"]
    assert (f"against {before['whole step (log: one explore start to the next)']:.1f} s with "
            f"micro-batches of 4 (`results/trinity_h100_qwen_step5/`: training "
            f"{before['training step']:.1f} s)") in flat
    # the held-out accuracy at step 8, its bound and the rewards
    table = results.read_run(run).dropna(subset=["eval_accuracy"])
    assert table["step"].tolist() == [8]
    finished = results.read_scalars(run).query(
        "tag == 'eval/eval-arithmetic-qwen/finished_task_count'")
    assert finished["value"].tolist() == [660]
    acc = table["eval_accuracy"].iloc[0]
    evaluation = pd.read_csv(QWEN_MB2 / "phase_times.csv", index_col=0).loc["evaluation"]
    assert f"evaluated in {evaluation['random_seed0']:.0f} s): **{acc:.3f}**" in flat
    bound = 0.5 / np.sqrt(660)
    assert f"at most {bound:.4f} (0.5/sqrt(660)" in flat
    # the step-8 evaluation comes before step 8's weight sync: the policy after 7 updates
    versions = results.read_scalars(run).query("tag == 'rollout/model_version'")
    assert versions.set_index("step")["value"][8] == 7 and "the rise after 7 updates" in flat
    assert (acc - 0.168) / bound > 8 and "more than eight times that" in flat
    steps = pd.read_csv(run / "buffer_steps.csv").set_index("step")
    assert ", ".join(f"{r:.3f}" for r in steps["mean_reward"]) + " (steps 1-10" in flat
    assert (steps["tool_call_rate"] == 0).all()
    # the project's README and the configs cite these figures
    readme_top = " ".join((paths.REPO_ROOT / "README.md").read_text().split())
    median = pd.read_csv(QWEN_MB2 / "phase_times.csv", index_col=0).loc[
        "whole step (log: one explore start to the next)", "random_seed0"]
    assert steps.index.max() == 10
    assert (f"with 2 a run explored 10 steps and trained 9 at {median:.0f} s a step, the "
            f"held-out accuracy {acc:.3f} at step 8") in readme_top
    peaks = [reserved, *(r for r, _ in earlier)]
    in_use = [used, *(u for _, u in earlier)]
    for name in ("config_random_qwen.yaml", "config_difficulty_qwen.yaml"):
        text = " ".join(line.lstrip("# ") for line in
                        (paths.REPO_ROOT / "configs" / name).read_text().splitlines())
        assert (f"held {min(peaks):.1f}-{max(peaks):.1f} GiB (at most "
                f"{min(in_use):.1f}-{max(in_use):.1f} GiB in use)") in text
        step = pd.read_csv(QWEN_MB2 / "phase_times.csv", index_col=0).iloc[-1, 0]
        assert f"with 2 it held {reserved2:.1f} GiB through 9 updates at {step:.0f} s a step" \
            in text


def test_a_start_point_is_other_runs_step0_evaluations_on_one_taskset(tmp_path):
    """``start_point`` gathers step-0 held-out accuracies; it refuses, in one line naming the
    folder, a folder that does not exist, one without a step-0 evaluation and a mix of eval
    tasksets; one measurement is a point without a range."""
    qwen = [paths.RESULTS_DIR / "trinity_h200_qwen_cache" / "random_seed0",
            QWEN_LONE / "difficulty_seed0"]
    start = results.start_point(qwen)
    at0 = [results.read_run(r).query("step == 0")["eval_accuracy"].iloc[0] for r in qwen]
    assert start.eval_taskset == "eval-arithmetic-qwen"
    assert (start.lo, start.hi) == (min(at0), max(at0))
    assert start.mean == pytest.approx(np.mean(at0))
    assert start.table()["eval_accuracy"].tolist() == at0
    one = results.start_point(qwen[:1])
    assert one.lo == one.mean == one.hi == at0[0]
    with pytest.raises(results.RunError, match="different eval tasksets"):
        results.start_point([*qwen, RUNS["difficulty_based"]])
    with pytest.raises(results.RunError, match="no such run folder"):
        results.start_point([tmp_path / "nowhere"])
    with pytest.raises(results.RunError, match="no held-out evaluation at step 0"):
        results.start_point([QWEN_MB2 / "random_seed0"])
    with pytest.raises(results.RunError, match="at least one"):
        results.StartPoint({})


def test_a_start_point_reads_back_from_the_file_draw_wrote(tmp_path):
    """``StartPoint.read`` gives back the start :func:`draw` wrote, taskset included, so a
    results folder's figure can be drawn again from its ``start_point.csv``; a file that is
    not one is refused in one line naming it."""
    start = results.start_point([paths.RESULTS_DIR / "trinity_h200_qwen_cache" / "random_seed0",
                                 QWEN_LONE / "difficulty_seed0"])
    start.table().to_csv(tmp_path / "start_point.csv", index=False)
    again = results.StartPoint.read(tmp_path / "start_point.csv")
    assert again == start
    committed = results.StartPoint.read(paths.RESULTS_DIR / "trinity_qwen" / "start_point.csv")
    assert committed.eval_taskset == "eval-arithmetic-qwen" and len(committed.sources) == 3
    committed.check(results.load_runs([paths.RESULTS_DIR / "trinity_qwen"]))
    for text in ("run,step\nx,0\n", "run,step,eval_accuracy\nx,0,\n",
                 "run,step,eval_accuracy,eval_taskset\nx,0,0.1,a\ny,0,0.2,b\n",
                 "run,step,eval_accuracy\n", "run,step,eval_accuracy\nx,3,0.1\n",
                 "run,step,eval_accuracy\nx,0,0.1\nx,0,0.2\n", "run,step,eval_accuracy\nx,0,a\n"):
        (tmp_path / "bad.csv").write_text(text)
        with pytest.raises(results.RunError, match="bad.csv: not a start point written by draw"):
            results.StartPoint.read(tmp_path / "bad.csv")
    with pytest.raises(results.RunError, match="nowhere.csv: no such file$"):
        results.StartPoint.read(tmp_path / "nowhere.csv")


def test_the_base_model_accuracy_the_qwen_configs_cite_is_what_three_runs_measured():
    """The Qwen configs evaluate no run at step 0; the base model's held-out accuracy they and
    the README cite is the range of the three step-0 evaluations with the same settings."""
    runs = [paths.RESULTS_DIR / "trinity_h200_qwen_cache" / "random_seed0",
            paths.RESULTS_DIR / "trinity_h200_qwen_cache" / "difficulty_seed0",
            QWEN_LONE / "difficulty_seed0"]
    step0 = []
    for run in runs:
        table = results.read_run(run).dropna(subset=["eval_accuracy"])
        assert table["step"].tolist() == [0]
        assert "repeat_times: 4" in (run / "launched_config.yaml").read_text()
        step0.append(table["eval_accuracy"].iloc[0])
    span = f"{min(step0):.3f}-{max(step0):.3f}"
    assert span == "0.156-0.168"
    for name in ("config_random_qwen.yaml", "config_difficulty_qwen.yaml"):
        assert f"({span} in three runs" in (paths.REPO_ROOT / "configs" / name).read_text()
    readme = " ".join((paths.REPO_ROOT / "README.md").read_text().split())
    assert f"these evaluation settings measured at {span}" in readme


QWEN_EXPERIMENT = paths.RESULTS_DIR / "trinity_qwen"
QWEN_COMPILE = paths.RESULTS_DIR / "trinity_h100_qwen_compile"


def _flat(folder: Path) -> str:
    return " ".join((folder / "README.md").read_text().split())


def _assert_startup_table(readme: str, columns: list[pd.Series], rows: int) -> None:
    """The README's start-up table has ``rows`` milestones, each row's cells the minutes of
    ``columns`` (``startup.csv`` columns), in order, to two decimals."""
    table = _table_rows(readme, len(columns) + 1)
    milestones = [m for m in table if m in columns[0].index]
    assert len(milestones) == rows
    for milestone in milestones:
        assert table[milestone] == [f"{c[milestone]:.2f}" for c in columns], milestone


def _startup_table_of(readme: str, rows: int, *runs: tuple[Path, str]) -> list[pd.Series]:
    """The ``startup.csv`` column of each (folder, run) in ``runs``, once the README's start-up
    table of ``rows`` milestones is checked to hold them in that order."""
    columns = [pd.read_csv(folder / "startup.csv", index_col=0)[run] for folder, run in runs]
    _assert_startup_table(readme, columns, rows)
    return columns


def _split(phases: pd.Series) -> str:
    """A step's split as the Qwen READMEs write it, from a run's column of ``phase_times.csv``."""
    return (f"training {phases['training step']:.2f} s, weight sync {phases['weight sync']:.2f} s,"
            f" rollout phase {phases['rollout phase']:.2f} s")


def _assert_experiment_memory(flat: str, run: Path, stretch: int) -> None:
    """The experiment README's memory paragraph of ``run``: its processes' peaks, the
    trainer's own, and the GPU's in the stretch's monitor lines."""
    memory = pd.read_csv(QWEN_EXPERIMENT / "gpu_memory.csv", index_col=0)[run.name]
    assert (f"at most **{memory['run, all processes (sum at one time)']:.1f} GiB** at one time "
            f"(the trainer {memory['trainer (FSDP actor + reference)']:.1f}, the vLLM worker "
            f"{memory['vLLM engine worker']:.1f}") in flat
    reserved, used = _memory_peaks(run)
    assert f"`max_memory_reserved_gb` {reserved:.1f}, at most {used:.1f} in use" in flat
    gpu = pd.read_csv(QWEN_EXPERIMENT / f"gpu_stretch{stretch}.csv", header=None)
    assert f"at most {gpu[1].str.replace(' MiB', '').astype(int).max():,} MiB of 81,559" in flat


def test_the_experiment_readme_states_what_its_runs_tables_and_logs_hold():
    """The experiment's README: how many of the planned runs exist, the shared start, the
    stretch's device time, the held-out accuracies and their bound, the batches' rewards, the
    replies, the step split, the memory and the start-up are what the folder's files hold."""
    readme = (QWEN_EXPERIMENT / "README.md").read_text()
    flat = _flat(QWEN_EXPERIMENT)
    # the two selectors' configs, whose comments cite the first run's figures (checked below)
    citing = {"random": paths.CONFIGS_DIR / "config_random_qwen.yaml",
              "difficulty_based": paths.CONFIGS_DIR / "config_difficulty_qwen.yaml"}
    progress = run_facts.experiment_progress(QWEN_EXPERIMENT, paths.QWEN_EXPERIMENT_CONFIGS,
                                             paths.QWEN_EXPERIMENT_SEEDS)
    made = progress[~progress["last step explored"].str.startswith("not run yet")]
    assert len(made) >= 1 and (made["last step explored"] == "16 of 16").all()
    assert readme.splitlines()[0].endswith(f"({len(made)} of {len(progress)} runs)")
    run = QWEN_EXPERIMENT / "random_seed0"
    assert "trinity-early-explorer: applied" in (run / "train_log_excerpt.txt").read_text()
    # the start every run shares
    start = results.StartPoint.read(QWEN_EXPERIMENT / "start_point.csv")
    at0 = [f"{a:.3f}" for a in start.sources.values()]
    assert f"{at0[0]}, {at0[1]} and {at0[2]}" in flat
    assert f"the base model's {start.lo:.3f}-{start.hi:.3f}" in flat
    # device time: the stretch's calls
    calls = pd.read_csv(QWEN_EXPERIMENT / "device_time.csv").query("stretch == 1")
    mine = calls[calls["for"] == "random_seed0"]
    assert f"got an H100 after {mine['device_s_after'].iloc[0]:.1f} s" in flat
    assert (f"the {mine['calls'].iloc[1]} part calls took the total to "
            f"{mine['device_s_after'].iloc[1]:.1f} s") in flat
    end = mine["device_s_after"].iloc[-1]
    assert f"at **{end:.1f} s: {end / 60:.1f} minutes** for the run" in flat
    total = calls["device_s_after"].iloc[-1]
    assert (f"{(total - end) / 60:.1f} of the stretch's remaining {(1800 - end) / 60:.1f} minutes"
            in flat and f"{total:.1f} s in all" in flat)
    follow = (QWEN_EXPERIMENT / "follow_stretch1.log").read_text()
    took = re.search(r"setup took (\d+) s", follow)[1]
    assert f"Set-up took {took} s" in flat
    startup = pd.read_csv(QWEN_EXPERIMENT / "startup.csv", index_col=0)["random_seed0"]
    assert (f"from `train` to its end took {startup['train command ends']:.2f} minutes (step 1 "
            f"at {startup['step 1 starts']:.2f})") in flat
    # held-out accuracy: after 7 and 15 updates, the rise in bounds, the earlier run's step 8
    table = results.read_run(run).dropna(subset=["eval_accuracy"])
    assert table["step"].tolist() == [8, 16]
    acc = table.set_index("step")["eval_accuracy"]
    assert f"**{acc[8]:.3f} at step 8** and **{acc[16]:.3f} at step 16**" in flat
    versions = results.read_scalars(run).query("tag == 'rollout/model_version'")
    assert versions.set_index("step")["value"][[8, 16]].tolist() == [7, 15]
    assert "the policy after 7 and 15 updates" in flat
    bound = 0.5 / np.sqrt(660)
    assert f"at most {bound:.4f} (0.5/sqrt(660)" in flat
    assert 11 < (acc[16] - start.hi) / bound < 12 and 8 < (acc[16] - start.hi) / (
        np.sqrt(2) * bound) < 9
    assert ("more than eleven times one evaluation's standard error, and eight times that of the "
            "difference of two") in flat
    finished = results.read_scalars(run).query(
        "tag == 'eval/eval-arithmetic-qwen/finished_task_count'")
    assert finished["value"].tolist() == [660, 660]
    earlier = results.read_run(QWEN_MB2 / "random_seed0").dropna(subset=["eval_accuracy"])
    before = earlier["eval_accuracy"].iloc[0]
    assert f"gave {before:.3f} at step 8: {abs(acc[8] - before):.3f} apart" in flat
    assert abs(acc[8] - before) < np.sqrt(2) * bound
    # where the runs' effective task ratios come from: the table is what the run folders say
    etr = pd.read_csv(QWEN_EXPERIMENT / "etr_sources.csv")
    pd.testing.assert_frame_equal(etr, results.etr_sources(run_facts.run_folders(
        [QWEN_EXPERIMENT])), check_dtype=False)
    assert etr.set_index("run").at["random_seed0", "source"] == "none"
    assert "`random_seed0` has none" in flat
    # the training batches and the replies
    steps = pd.read_csv(run / "buffer_steps.csv").set_index("step")
    assert ", ".join(f"{r:.3f}" for r in steps["mean_reward"]) + " (steps 1-16)" in flat
    assert (steps["tool_call_rate"] == 0).all() and "Tool-call rate 0 at every step" in flat
    first_last = run_facts.first_last(results.read_run(run), window=4).iloc[0]
    assert (f"rollout accuracy {first_last['rollout accuracy, first 4']} over the first four "
            f"steps, {first_last['rollout accuracy, last 4']} over the last four") in flat
    assert (f"from {first_last['reply tokens, first 4']} to {first_last['reply tokens, last 4']}"
            " tokens") in flat
    count = _reply_counter(run)
    assert (f"at step 1, {count(1, '```python')} of the 16 write a Python code block and "
            f"{count(1, BOXED)} box an answer") in flat
    assert (f"at step 16 all 16 mention Python, {count(16, '```python')} writes a code block and "
            "all 16 box an answer") in flat
    assert count(16, "python") == 16 and count(16, BOXED) == 16
    # step time, its split, the memory
    phases = pd.read_csv(QWEN_EXPERIMENT / "phase_times.csv", index_col=0)["random_seed0"]
    assert (f"median **{phases['whole step (log: one explore start to the next)']:.1f} s** "
            f"({_split(phases)})") in flat
    evals = results.read_scalars(run).query("tag == 'time/eval'").set_index("step")["value"]
    assert f"The evaluations took {evals[8]:.0f} and {evals[16]:.0f} s (Trinity's `time/eval`)" \
        in flat
    whole = json.loads((run / "timings.json").read_text())["whole_step_s"]
    assert (f"steps 8 and 16 took {whole['step 8']:.0f} and {whole['step 16']:.0f} s from one "
            "explore start to the next") in flat
    other = pd.read_csv(QWEN_MB2 / "phase_times.csv", index_col=0)["random_seed0"]
    assert f"took {other['whole step (log: one explore start to the next)']:.1f} s a step" in flat
    _assert_experiment_memory(flat, run, 1)
    # start-up against the run compiling anew on the same machine and the earlier H100's run
    compiling = pd.read_csv(QWEN_COMPILE / "startup.csv", index_col=0)["difficulty_seed0"]
    other_start = pd.read_csv(QWEN_MB2 / "startup.csv", index_col=0)["random_seed0"]
    seed1 = pd.read_csv(QWEN_EXPERIMENT / "startup.csv", index_col=0)["random_seed1"]
    _assert_startup_table(readme, [startup, compiling, other_start, seed1], 5)
    assert (f"**{startup['step 1 starts']:.2f} minutes** with the run's own compile cache, "
            f"{compiling['step 1 starts']:.2f} compiling anew") in flat
    assert (f"ready at {startup['trainer workers ready']:.2f}, vLLM at "
            f"{startup['vLLM engine ready']:.2f}, and the workflow runners take "
            f"{startup['all workflow runners ready'] - startup['vLLM engine ready']:.2f} "
            "minutes more") in flat
    # where the runners' minute goes: the excerpt's times of the models, first runner, last
    excerpt = (run / "train_log_excerpt.txt").read_text()
    times = [re.search(rf"(\d\d:\d\d:\d\d) \[[\w.]+:\d+\] {what}", excerpt)[1]
             for what in ("All models are ready", r"WorkflowRunner \[\w+\]\(asynchronous\) "
                          "initialized", "Rollout coordinator is ready")]
    assert (f"all models ready at {times[0]}, the first runner made at {times[1]}, the rollout "
            f"coordinator ready at {times[2]}") in flat
    earliest = pd.read_csv(paths.RESULTS_DIR / "trinity_h200" / "startup.csv",
                           index_col=0).loc["step 1 starts"]
    assert f"step 1 {earliest.min():.1f}-{earliest.max():.1f} minutes after `train`" in flat
    pilot = pd.read_csv(paths.RESULTS_DIR / "trinity_h200_qwen_pilot" / "startup.csv",
                        index_col=0).loc["step 1 starts"]
    assert f"the Qwen pilot's pair {pilot.min():.2f} and {pilot.max():.2f}" in flat
    # the configs and the project's README cite the same figures
    for name in citing.values():
        text = " ".join(line.lstrip("# ") for line in name.read_text().splitlines())
        assert f"first run took {end / 60:.1f} minutes of one on an H100" in text
        assert (f"step 1 came {startup['step 1 starts']:.1f} minutes after `train` with the run's"
                f" own vLLM compile cache ({compiling['step 1 starts']:.1f} compiling)") in text
    median = phases["whole step (log: one explore start to the next)"]
    compiled_steps = set(json.loads((QWEN_COMPILE / "difficulty_seed0" / "timings.json")
                                    .read_text())["whole_step_s"].values())
    assert len(compiled_steps) == 1
    said = {"random": f"took {median:.0f} s (the median of results/trinity_qwen/random_seed0)",
            "difficulty_based": f"took {compiled_steps.pop():.0f} s (the two steps of "
                                f"results/trinity_h100_qwen_compile/; random's median: "
                                f"{median:.0f} s)"}
    for selector, name in citing.items():
        text = " ".join(line.lstrip("# ") for line in name.read_text().splitlines())
        assert said[selector] in text
    top = " ".join((paths.REPO_ROOT / "README.md").read_text().split())
    final = [results.read_run(QWEN_EXPERIMENT / f"random_seed{s}").set_index("step")[
        "eval_accuracy"][16] for s in (0, 1, 2)]
    assert len(made) == len(JOINED)    # every whole run the folder holds
    assert (f"has all six runs of the two selectors: random, seeds 0, 1 and 2, from {start.lo:.3f}-{start.hi:.3f} to "
            f"{final[0]:.3f}, {final[1]:.3f} and {final[2]:.3f} held out") in top
    assert (f"took {end / 60:.1f} minutes of device time (step 1 at {startup['step 1 starts']:.2f}"
            f" minutes after `train` with its own vLLM compile cache, "
            f"{phases['whole step (log: one explore start to the next)']:.0f} s a step) and "
            f"reached a held-out accuracy of {acc[8]:.3f} at step 8 and {acc[16]:.3f} at step "
            "16") in top


def test_the_experiments_second_stretch_is_what_its_calls_run_and_tables_hold():
    """Stretch 2 of the experiment: the device time of its calls, the run it made
    (``random_seed1``): held-out accuracy against seed 0's, the batches, the effective task
    ratio from the buffer, the replies, the step split, the memory and the start-up lever."""
    flat = _flat(QWEN_EXPERIMENT)
    top = " ".join((paths.REPO_ROOT / "README.md").read_text().split())
    calls = pd.read_csv(QWEN_EXPERIMENT / "device_time.csv").query("stretch == 2")
    after = calls["device_s_after"].tolist()
    assert calls["calls"].sum() == 37 and calls.iloc[-1]["what"] == "given back"
    for said in (f"no machine ({after[0]:.1f} s of device time)", f"none of its kind ({after[1]:.1f} s)",
                 f"An H200 came at {after[2]:.1f} s", f"14 part calls ({after[3]:.1f} s)",
                 f"before the call returned, at {after[4]:.1f} s", f"no machine ({after[6]:.1f} s)",
                 f"an H100 came at {after[7]:.1f} s", f"the total to {after[8]:.1f} s",
                 f"back whole at {after[10]:.1f} s", f"Given back at {after[11]:.1f} s"):
        assert said in flat, said
    assert f"**{(after[10] - after[6]) / 60:.1f} minutes** from the last call without a machine" \
        in flat
    assert f"With {(1800 - after[6]) / 60:.1f} minutes left" in flat
    assert set(calls["card"]) == {"-", "NVIDIA H200", "NVIDIA H100 80GB HBM3"}
    follow = (QWEN_EXPERIMENT / "follow_stretch2.log").read_text()
    took = re.search(r"setup took (\d+) s", follow)[1]
    assert f"(set-up {took} s;" in flat
    run = QWEN_EXPERIMENT / "random_seed1"
    startup = pd.read_csv(QWEN_EXPERIMENT / "startup.csv", index_col=0)
    one, zero = startup["random_seed1"], startup["random_seed0"]
    assert (f"end {one['train command ends']:.2f} minutes, step 1 at {one['step 1 starts']:.2f})"
            in flat)
    config = (run / "launched_config.yaml").read_text() + (
        run / "trinity_config_runtime.txt").read_text()
    assert "runner_prepare_concurrency=16" in config
    assert "runner_prepare_concurrency=16" not in (
        QWEN_EXPERIMENT / "random_seed0" / "trinity_config_runtime.txt").read_text()
    # held-out accuracy, seed 1 against seed 0, and the bound of a difference
    acc = {r: results.read_run(QWEN_EXPERIMENT / r).dropna(subset=["eval_accuracy"])
           .set_index("step")["eval_accuracy"] for r in ("random_seed0", "random_seed1")}
    one_acc, zero_acc = acc["random_seed1"], acc["random_seed0"]
    assert (f"**{one_acc[8]:.3f} at step 8** and **{one_acc[16]:.3f} at step 16** (seed 0: "
            f"{zero_acc[8]:.3f} and {zero_acc[16]:.3f})") in flat
    gaps = [abs(one_acc[k] - zero_acc[k]) for k in (8, 16)]
    bound = np.sqrt(2) * 0.5 / np.sqrt(660)
    assert f"{gaps[0]:.3f} and {gaps[1]:.3f} apart" in flat and max(gaps) < bound
    assert f"({bound:.4f}, sqrt(2) x 0.0195)" in flat
    assert (f"and {one_acc[16]:.3f} (step 1 at {one['step 1 starts']:.2f} minutes, compiling, "
            "its 16 workflow runners made at once") in top
    # the batches, the effective task ratio from the buffer, the replies
    steps = _assert_batch_rewards(flat, run)
    table = results.read_run(run)
    fl = run_facts.first_last(table, window=4).iloc[0]
    assert (f"rollout accuracy {fl['rollout accuracy, first 4']} over the first four steps, "
            f"{fl['rollout accuracy, last 4']} over the last four; replies from "
            f"{fl['reply tokens, first 4']} to {fl['reply tokens, last 4']} tokens") in flat
    etr = table.set_index("step")["effective_task_ratio"]
    assert etr.tolist() == steps["effective_task_ratio"].tolist()   # read from the buffer
    assert (f"{etr[:4].mean():.2f} over the first four steps, {etr[-4:].mean():.2f} over the "
            f"last four, {etr[16]:.2f} at step 16 (one task of 16") in flat
    assert etr[16] == 1 / 16
    assert (f"KL to the start {fl['KL, first 4']} over the first four steps, {fl['KL, last 4']} "
            "over the last four") in flat
    sources = pd.read_csv(QWEN_EXPERIMENT / "etr_sources.csv").set_index("run")
    assert sources.at["random_seed1", "source"] == "experience buffer"
    _assert_replies(flat, run)
    # step time, memory
    _assert_step_time(flat, run)
    p0 = pd.read_csv(QWEN_EXPERIMENT / "phase_times.csv", index_col=0)["random_seed0"]
    assert f"({p0['whole step (log: one explore start to the next)']:.1f} s a step there)" in flat
    _assert_experiment_memory(flat, run, 2)
    # the start-up lever alone: one wave of runners, against seed 0's two
    compile_s = re.search(r"torch.compile took ([\d.]+) s",
                          (run / "train_log_excerpt.txt").read_text())[1]
    assert f"(torch.compile {float(compile_s):.1f} s)" in flat
    assert f"began step 1 at **{one['step 1 starts']:.2f} minutes**: " \
        f"{one['step 1 starts'] - 2:.2f} short of the goal" in flat
    models = "all rollout models ready"
    assert one["first workflow runner made"] == one["all workflow runners ready"]
    assert (f"ready {one['all workflow runners ready'] - one[models]:.2f} minutes after the models"
            f" (the first of them and the last together), against "
            f"{zero['all workflow runners ready'] - zero[models]:.2f} in `random_seed0` (the first "
            f"{zero['first workflow runner made'] - zero[models]:.2f}, the last "
            f"{zero['all workflow runners ready'] - zero['first workflow runner made']:.2f} later)"
            ) in flat
    assert (f"were ready {zero['trainer workers ready'] - one['trainer workers ready']:.2f} "
            "minutes sooner") in flat



QWEN_CUT = paths.RESULTS_DIR / "trinity_h100_qwen_cut"


def _cut_start_and_pace(name: str) -> str:
    """A cut run's start-up and pace as the experiment README gives them: the minutes to
    step 1 and the median step."""
    here = pd.read_csv(QWEN_CUT / "startup.csv", index_col=0)[name]
    phases = pd.read_csv(QWEN_CUT / "phase_times.csv", index_col=0)[name]
    return (f"{here['step 1 starts']:.2f} minutes, "
            f"{phases['whole step (log: one explore start to the next)']:.1f} s a step")


def _assert_cut_steps_and_memory(flat: str, run: Path, steps: int) -> int:
    """A cut run's paragraph on step time and memory: the seconds of its ``steps`` whole
    steps, the median split, its processes' memory peaks and the GPU's in its monitor lines
    (``gpu_<run>.csv``), which this returns in MiB."""
    timed = json.loads((run / "timings.json").read_text())["whole_step_s"]
    values = [f"{s:.0f}" for s in timed.values()]
    assert len(values) == steps
    assert f"Steps 1-{steps} took {', '.join(values[:-1])} and {values[-1]} s" in flat
    phases = pd.read_csv(QWEN_CUT / "phase_times.csv", index_col=0)[run.name]
    assert (f"**{phases['whole step (log: one explore start to the next)']:.1f} s** the median "
            f"(`phase_times.csv`: {_split(phases)}); the evaluation took "
            f"{phases['evaluation']:.1f} s") in flat
    memory = pd.read_csv(QWEN_CUT / "gpu_memory.csv", index_col=0)[run.name]
    assert (f"**{memory['run, all processes (sum at one time)']:.1f} GiB** at one time (the "
            f"trainer {memory['trainer (FSDP actor + reference)']:.1f}, the vLLM worker "
            f"{memory['vLLM engine worker']:.1f})") in flat
    gpu = pd.read_csv(QWEN_CUT / f"gpu_{run.name}.csv", header=None)
    most = int(gpu[1].str.replace(" MiB", "").astype(int).max())
    assert f"the GPU at most {most:,} MiB of 81,559" in flat
    return most


def test_the_cut_difficulty_run_readme_states_what_its_files_hold():
    """The first ``difficulty_based`` run of the experiment, cut at step 9: its step-8
    evaluation beside ``random`` seed 0's, the batches its selector picked, its effective task
    ratio from the buffer against Trinity's, the replies, the start-up against ``random_seed1``,
    the step times and the memory are what its files hold."""
    readme = (QWEN_CUT / "README.md").read_text()
    flat = _flat(QWEN_CUT)
    run = QWEN_CUT / "difficulty_seed0"
    assert "**This run is not part of the experiment** (it did not reach step 16)" in flat
    table = results.read_run(run)
    assert table["selector"].iloc[0] == "difficulty_based" and table["seed"].iloc[0] == 0
    assert table["step"].max() == 9
    config = (run / "launched_config.yaml").read_text()
    assert "runner_prepare_concurrency: 16" in config and "target_reward: 0.8" in config
    follow = (QWEN_CUT / "follow_difficulty_seed0.log").read_text()
    assert "vLLM starts from the carried compile cache" in follow
    # step 8's evaluation beside random seed 0's: the table is what paired_evaluations gives
    with tempfile.TemporaryDirectory() as tmp:
        for source in (run, QWEN_EXPERIMENT / "random_seed0"):
            (Path(tmp) / source.name).symlink_to(source.resolve())
        pair = run_facts.paired_evaluations(tmp)
    assert len(pair) == 1
    row = pair.iloc[0]
    assert _table_rows(readme, 7)["0"] == [
        str(row["step"]), row["random"], row["difficulty_based"], row["difference"],
        row["evaluation SE, at most"], row["z (size at least)"]]
    assert f"{float(row['z (size at least)']):.1f} bounds on the evaluations' error apart" in flat
    seeds = {r: results.read_run(QWEN_EXPERIMENT / r).set_index("step")["eval_accuracy"][8]
             for r in ("random_seed0", "random_seed1")}
    assert f"were {abs(seeds['random_seed1'] - seeds['random_seed0']):.3f} apart at step 8" in flat
    # the batches: rollout accuracy per step, random seed 0's range, ETR, reply lengths
    steps = pd.read_csv(run / "buffer_steps.csv").set_index("step")
    acc = table.set_index("step")["rollout_accuracy"]
    assert np.allclose(acc.to_numpy(), steps["mean_reward"].to_numpy(), atol=5e-5)
    assert ", ".join(f"{a:.3f}" for a in acc) + " (steps 1-9)" in flat
    first9 = results.read_run(QWEN_EXPERIMENT / "random_seed0").query("step <= 9")
    assert (f"against {first9['rollout_accuracy'].min():.3f}-"
            f"{first9['rollout_accuracy'].max():.3f} in `random_seed0`'s first nine steps") in flat
    fl = run_facts.first_last(table, window=4).iloc[0]
    assert (f"{fl['reply tokens, first 4']} tokens over the first four steps, "
            f"{fl['reply tokens, last 4']} over the last four") in flat
    etr = table.set_index("step")["effective_task_ratio"]
    top = etr.max()
    assert (f"from {etr[1]} at step 1 to {top} at steps "
            f"{' and '.join(str(k) for k in etr.index[etr == top])}") in flat
    assert f"was {etr[8]} at steps 8 and 9" in flat and etr[9] == etr[8]
    sources = pd.read_csv(QWEN_CUT / "etr_sources.csv").set_index("run").loc["difficulty_seed0"]
    assert sources["source"] == "pass_rate_calculator"
    assert sources["steps_experience_buffer"] == sources["steps_pass_rate_calculator"] == 9
    assert sources["largest_difference"] == 0
    assert f"largest difference {sources['largest_difference']}" in flat
    assert (steps["effective_task_ratio"].to_numpy() == etr.to_numpy()).all()
    samples = pd.read_json(run / "samples.jsonl", lines=True)
    by_step = {k: g["response"] for k, g in samples.groupby("step")}
    code = {k: int(v.str.contains("```python", regex=False).sum()) for k, v in by_step.items()}
    boxed = {k: int(v.str.contains(r"\\boxed", regex=True).sum()) for k, v in by_step.items()}
    assert (f"at step 1, {code[1]} of the 16 write a Python code block and {boxed[1]} box an "
            f"answer; at step 9, {code[9]} writes a code block and all 16 box") in flat
    assert boxed[9] == 16 and (steps["tool_call_rate"] == 0).all()
    # start-up against random_seed1, step times, memory
    here, seed1 = _startup_table_of(readme, 6, (QWEN_CUT, "difficulty_seed0"),
                                    (QWEN_EXPERIMENT, "random_seed1"))
    load, ready = "vLLM worker loads the model", "vLLM engine ready"
    assert (f"ready {here[ready] - here[load]:.2f} minutes after it began loading the model, "
            f"against {seed1[ready] - seed1[load]:.2f} compiling anew") in flat
    models, runners = "all rollout models ready", "all workflow runners ready"
    assert (f"{here[runners] - here[models]:.2f} minutes after the models "
            f"({seed1[runners] - seed1[models]:.2f} in `random_seed1`), all 16 within "
            f"{here[runners] - here['first workflow runner ready']:.2f} of the first") in flat
    assert f"Step 1 at **{here['step 1 starts']:.2f} minutes**" in flat
    took = re.search(r"setup took (\d+) s", follow)[1]
    assert f"the set-up before `train` {took} s" in flat
    _assert_cut_steps_and_memory(flat, run, steps=8)


def test_the_experiments_third_stretch_is_what_its_calls_and_the_cut_run_hold():
    """Stretch 3 of the experiment: the device time of its calls, and what the cut
    ``difficulty_based`` run reached, as the calls' table and the run's files hold them; the
    top README and the experiment README say it is not one of the six."""
    flat = _flat(QWEN_EXPERIMENT)
    top = " ".join((paths.REPO_ROOT / "README.md").read_text().split())
    calls = pd.read_csv(QWEN_EXPERIMENT / "device_time.csv").query("stretch == 3")
    after = calls["device_s_after"].tolist()
    assert calls["calls"].sum() == 23
    assert f"({after[0]:.1f}, {after[1]:.1f} and {after[2]:.1f} s of device time)" in flat
    assert f"H100 came at {after[3]:.1f} s" in flat
    parts = calls.iloc[4]
    assert f"the {parts['calls']} part calls" in flat and f"total to {after[4]:.1f} s" in flat
    assert f"returned at {after[5]:.1f} s with the run at step 9" in flat
    assert calls.iloc[5]["for"] == "results/trinity_h100_qwen_cut"
    assert f"no other could be started ({after[6]:.1f} s). The {(1800 - after[6]) / 60:.1f} " \
        "minutes left could not hold a run" in flat
    run = QWEN_CUT / "difficulty_seed0"
    table = results.read_run(run).set_index("step")
    baseline = results.read_run(QWEN_EXPERIMENT / "random_seed0").set_index("step")
    ours, theirs = table["eval_accuracy"][8], baseline["eval_accuracy"][8]
    assert f"held-out **{ours:.3f} at step 8**, against {theirs:.3f} for `random` seed 0" in flat
    acc = table["rollout_accuracy"]
    assert f"rollout accuracy {acc[1]:.3f} at step 1, {acc[9]:.3f} at step 9" in flat
    assert f"step 1 at {_cut_start_and_pace('difficulty_seed0')}" in flat
    assert (QWEN_EXPERIMENT / "difficulty_seed0" / "params.json").is_file()
    assert "It is not one of the six runs: `difficulty_qwen_seed0` was made whole in stretch 5" \
        in flat
    whole0 = results.read_run(QWEN_EXPERIMENT / "difficulty_seed0").set_index("step")[
        "eval_accuracy"][8]
    assert (f"a first `difficulty_based` run of seed 0, cut at step 9, was at {ours:.3f} at step 8 "
            f"where the whole one held {whole0:.3f}") in top
    assert f"at step 8 it held {ours:.3f} against random's {theirs:.3f}" in top


def test_the_cut_random_run_readme_states_what_its_files_hold():
    """The third seed of ``random``, cut at step 11: the step-8 evaluations of every run so far,
    the spread of ``random``'s seeds and what it allows the experiment to show, the batches, the
    replies, the start-up against the other ``random`` runs, the step times and the memory are
    what its files hold."""
    readme = (QWEN_CUT / "README.md").read_text()
    flat = _flat(QWEN_CUT)
    run = QWEN_CUT / "random_seed2"
    assert flat.count("**This run is not part of the experiment** (it did not reach step 16)") == 2
    table = results.read_run(run).set_index("step")
    assert table["selector"].iloc[0] == "random" and table["seed"].iloc[0] == 2
    assert table.index.max() == 11
    config = (run / "launched_config.yaml").read_text()
    assert "runner_prepare_concurrency: 16" in config and "seed: 2" in config
    log = (QWEN_CUT / "follow_random_seed2.log").read_text()
    assert "vllm_cache_seed" not in log and "carried compile cache" not in log
    assert "Explore step 11" in log and "no buffer samples: stopped after 10 s" in log
    # step 8 of every run so far: random's three seeds and the cut difficulty-based run
    step8 = {f"random_seed{s}": results.read_run(QWEN_EXPERIMENT / f"random_seed{s}")
             .set_index("step")["eval_accuracy"][8] for s in (0, 1)}
    step8["random_seed2"] = table["eval_accuracy"][8]
    difficulty = results.read_run(QWEN_CUT / "difficulty_seed0").set_index("step")
    rows = _table_rows(readme, 3)
    assert rows["0"] == [f"{step8['random_seed0']:.3f}",
                         f"{difficulty['eval_accuracy'][8]:.3f} (the cut run above)"]
    assert rows["1"] == [f"{step8['random_seed1']:.3f}", "-"]
    assert rows["2"] == [f"{step8['random_seed2']:.3f} (this run)", "-"]
    values = np.array(list(step8.values()))
    sd = values.std(ddof=1)
    assert (f"span **{values.max() - values.min():.3f}** at step 8 (mean {values.mean():.3f}, "
            f"standard deviation {sd:.3f} over seeds)") in flat
    se = sd * np.sqrt(2 / 3)
    assert f"standard error near {se:.3f} from this spread alone" in flat
    assert f"a difference of about {2 * se:.2f} or more at step 8" in flat
    assert values.min() < difficulty["eval_accuracy"][8] < values.max()
    # the batches and the replies
    acc = table["rollout_accuracy"]
    assert ", ".join(f"{a:.3f}" for a in acc) + " (steps 1-11)" in flat
    for name in ("random_seed0", "random_seed1"):
        other = results.read_run(QWEN_EXPERIMENT / name).query("step <= 11")["rollout_accuracy"]
        assert f"`{name}`'s {other.min():.3f}-{other.max():.3f}" in flat
    assert f"by up to {acc.diff().abs().max():.2f} from one step to the next" in flat
    steps = pd.read_csv(run / "buffer_steps.csv").set_index("step")
    assert list(steps.index) == list(range(1, 11))
    assert np.allclose(acc[:10].to_numpy(), steps["mean_reward"].to_numpy(), atol=5e-5)
    etr = ", ".join(f"{e:.3f}".rstrip("0") for e in steps["effective_task_ratio"])
    assert f"buffer was {etr} (steps 1-10)" in flat
    fl = run_facts.first_last(results.read_run(run), window=4).iloc[0]
    assert (f"from {fl['reply tokens, first 4']} tokens over the first four steps to "
            f"{fl['reply tokens, last 4']} over the last four") in flat
    samples = pd.read_json(run / "samples.jsonl", lines=True)
    by_step = {k: g["response"] for k, g in samples.groupby("step")}
    assert sorted(by_step) == [1, 10] and all(len(v) == 16 for v in by_step.values())
    code = {k: int(v.str.contains("```python", regex=False).sum()) for k, v in by_step.items()}
    boxed = {k: int(v.str.contains(r"\\boxed", regex=True).sum()) for k, v in by_step.items()}
    assert (f"At step 1, {code[1]} of the 16 write a Python code block and {boxed[1]} box an "
            "answer; at step 10, none writes a code block and all 16 box one") in flat
    assert code[10] == 0 and boxed[10] == 16 and (steps["tool_call_rate"] == 0).all()
    # start-up against the other random runs
    here, seed1, seed0 = _startup_table_of(readme, 6, (QWEN_CUT, "random_seed2"),
                                           (QWEN_EXPERIMENT, "random_seed1"),
                                           (QWEN_EXPERIMENT, "random_seed0"))
    load, ready = "vLLM worker loads the model", "vLLM engine ready"
    models, runners = "all rollout models ready", "all workflow runners ready"
    assert (f"took {here['step 1 starts'] - seed1['step 1 starts']:.2f} minutes longer to step 1 "
            f"on this machine: vLLM began loading the model {here[load] - seed1[load]:.2f} "
            f"minutes later and was ready {here[ready] - here[load]:.2f} minutes after it "
            f"({seed1[ready] - seed1[load]:.2f} for `random_seed1`), and the runners took "
            f"{here[runners] - here[models]:.2f} minutes after the models "
            f"({seed1[runners] - seed1[models]:.2f})") in flat
    took = re.search(r"setup took (\d+) s", log)[1]
    assert f"`train` took {took} s (`follow_random_seed2.log`)" in flat
    # step times and memory
    most = _assert_cut_steps_and_memory(flat, run, steps=10)
    assert f"the H100 kept {(81_559 - most) / 1024:.0f} GiB free" in flat
    scalars = results.read_scalars(run)
    reserve = scalars.query("tag == 'actor/perf/max_memory_reserved_gb'").set_index("step")["value"]
    grew = [int(s) for s in reserve.index if s == reserve.index.min()
            or reserve[s] > reserve[s - 1]]
    assert (f"reserved more with each of steps {', '.join(map(str, grew[:-1]))} and {grew[-1]} "
            f"({reserve.iloc[0]:.1f} to {reserve.max():.1f}") in flat
    _, used = _memory_peaks(run)
    others = [_memory_peaks(r)[0] for r in (QWEN_CUT / "difficulty_seed0",
                                             QWEN_EXPERIMENT / "random_seed0",
                                             QWEN_EXPERIMENT / "random_seed1")]
    assert f"never had more than {used:.1f} GiB in use" in flat
    assert f"whose reserve stopped at {min(others):.1f}-{max(others):.1f} GiB" in flat


def test_the_experiments_fourth_stretch_is_what_its_calls_and_the_cut_run_hold():
    """Stretch 4 of the experiment: the device time of its calls (eleven without a machine, a
    machine with too little left for a whole run), and what the cut ``random`` run reached, as
    the calls' table and the run's files hold them; the top README says what the spread of
    ``random``'s seeds allows."""
    flat = _flat(QWEN_EXPERIMENT)
    top = " ".join((paths.REPO_ROOT / "README.md").read_text().split())
    calls = pd.read_csv(QWEN_EXPERIMENT / "device_time.csv").query("stretch == 4")
    after = calls["device_s_after"].tolist()
    none = calls[calls["card"] == "-"]
    assert len(none) == 11 and none["calls"].sum() == 11
    waited = np.diff([0.0, *none["device_s_after"]])
    assert waited[0] == 181.0 and sorted(set(waited[1:])) == [15.0, 90.0]
    assert (waited[1:] == 90.0).sum() == 9 and (waited == 15.0).sum() == 1
    assert (f"ten that waited for one ({waited[0]:.1f} s of device time the first, 90 s each "
            f"after it) and one that asked for none") in flat
    assert f"{after[10]:.1f} s in all. An H100 came at {after[11]:.1f} s with " \
        f"{(1800 - after[11]) / 60:.1f} minutes left" in flat
    assert calls.iloc[12]["calls"] == 17 and f"took the total to {after[12]:.1f} s" in flat
    assert f"returned at {after[13]:.1f} s with the run at step 7" in flat
    assert (f"({after[14]:.1f}, {after[15]:.1f} and {after[16]:.1f} s), and the machine was "
            f"given back at {after[17]:.1f} s") in flat
    assert (calls["for"].iloc[13:17] == "results/trinity_h100_qwen_cut").all()
    # a whole run needs more: random_seed1's stretch from its machine's start to its end
    two = pd.read_csv(QWEN_EXPERIMENT / "device_time.csv").query("stretch == 2")
    seed1 = two[two["for"] == "random_seed1"]
    start = seed1[seed1["card"] == "-"]["device_s_after"].max()
    whole = (seed1["device_s_after"].max() - start) / 60
    assert f"more from a machine's start ({whole:.1f} minutes for `random_seed1`" in flat
    assert (1800 - after[11]) / 60 < whole
    table = results.read_run(QWEN_CUT / "random_seed2").set_index("step")
    ours = table["eval_accuracy"][8]
    assert f"held-out **{ours:.3f} at step 8**" in flat
    assert f"Step 1 at {_cut_start_and_pace('random_seed2')}" in flat
    seeds = [ours] + [results.read_run(QWEN_EXPERIMENT / f"random_seed{s}")
                      .set_index("step")["eval_accuracy"][8] for s in (0, 1)]
    assert (f"so `random`'s three seeds span {max(seeds) - min(seeds):.3f} there "
            f"({min(seeds):.3f}-{max(seeds):.3f}; standard deviation {np.std(seeds, ddof=1):.3f})"
            ) in flat
    assert (f"about {2 * np.std(seeds, ddof=1) * np.sqrt(2 / 3):.2f} or more at step 8") in flat
    # a reckoning of its day: the whole run of this seed (stretch 8) came in lower
    whole2 = results.read_run(QWEN_EXPERIMENT / "random_seed2").set_index("step")[
        "eval_accuracy"][8]
    assert whole2 < min(seeds)
    assert f"That reckoning held until stretch 8: the whole run of this seed held {whole2:.3f}" \
        in flat
    assert "That reckoning held until the whole run of seed 2" in _flat(QWEN_CUT)
    assert f"reached step 11: {ours:.3f} at step 8" in top


def test_the_compile_readme_states_what_its_run_and_the_experiments_hold():
    """The run that compiled anew on the experiment's machine: its start-up against the run
    with its own cache, the spans, the minutes saved, its steps, memory and rewards."""
    readme = (QWEN_COMPILE / "README.md").read_text()
    flat = _flat(QWEN_COMPILE)
    run = QWEN_COMPILE / "difficulty_seed0"
    assert "**This run is not part of the experiment** (2 of 16 steps)" in flat
    log = (QWEN_COMPILE / "follow.log").read_text()
    assert ("difficulty_qwen_seed0: compiles anew; the carried compile cache was made in "
            "/root/trinity/vllm_cache/random_qwen_seed0") in log
    assert "[18:51:17] started difficulty_qwen_seed0" in log
    assert "[18:50:06] random_qwen_seed0 ended" in (
        QWEN_EXPERIMENT / "follow_stretch1.log").read_text()
    assert "started at 18:51:17" in flat and "had ended at 18:50:06" in flat
    here, cached = _startup_table_of(readme, 6, (QWEN_COMPILE, "difficulty_seed0"),
                                     (QWEN_EXPERIMENT, "random_seed0"))
    load, ready = "vLLM worker loads the model", "vLLM engine ready"
    assert (f"took {here[ready] - here[load]:.2f} minutes here against "
            f"{cached[ready] - cached[load]:.2f} with the cache") in flat
    runners = "all workflow runners ready"
    assert (f"the workflow runners {here[runners] - here[ready]:.2f} minutes after vLLM was "
            f"ready against {cached[runners] - cached[ready]:.2f}") in flat
    assert f"**{here['step 1 starts'] - cached['step 1 starts']:.2f} minutes sooner**" in flat
    assert pd.isna(here["train command ends"])
    # steps, memory, rewards
    whole = json.loads((run / "timings.json").read_text())["whole_step_s"]
    assert set(whole.values()) == {60.0} and "Its two steps took 60 s each" in flat
    phases = pd.read_csv(QWEN_COMPILE / "phase_times.csv", index_col=0)["difficulty_seed0"]
    assert (f"(step 1: training {phases['training step']:.1f} s, weight sync "
            f"{phases['weight sync']:.1f} s)") in flat
    assert len(results.read_scalars(run).query("tag == 'time/train_step'")) == 1
    median = pd.read_csv(QWEN_EXPERIMENT / "phase_times.csv", index_col=0).loc[
        "whole step (log: one explore start to the next)", "random_seed0"]
    lone = pd.read_csv(QWEN_LONE / "phase_times.csv", index_col=0).loc[
        "whole step (log: one explore start to the next)", "difficulty_seed0"]
    assert f"against a median of {median:.1f} s" in flat and f"took {lone:.0f} s a step" in flat
    memory = pd.read_csv(QWEN_COMPILE / "gpu_memory.csv", index_col=0)["difficulty_seed0"]
    assert (f"held at most {memory['run, all processes (sum at one time)']:.1f} GiB (the "
            f"trainer {memory['trainer (FSDP actor + reference)']:.1f}, the vLLM worker "
            f"{memory['vLLM engine worker']:.1f})") in flat
    steps = pd.read_csv(run / "buffer_steps.csv").set_index("step")
    assert (f"reward {steps.loc[1, 'mean_reward']:.3f} at step 1 and "
            f"{steps.loc[2, 'mean_reward']:.3f} at step 2") in flat
    etr = results.read_run(run)["effective_task_ratio"].tolist()
    assert f"effective task ratio {etr[0]:.3f} and {etr[1]:.3f}" in flat
    assert (steps["tool_call_rate"] == 0).all()


def _assert_unfinished_run_start(flat: str, stretch: int, run: Path) -> tuple[str, pd.Series]:
    """The experiment README's set-up and start-up figures of a run whose log ends before the
    trainer's "Trainer finished" line (so ``startup.csv`` has no last step trained); returns
    the stretch's follow log and the run's column of ``startup.csv``."""
    follow = (QWEN_EXPERIMENT / f"follow_stretch{stretch}.log").read_text()
    took = re.search(r"setup took (\d+) s", follow)[1]
    ours = pd.read_csv(QWEN_EXPERIMENT / "startup.csv", index_col=0)[run.name]
    assert (f"(set-up {took} s; from `train` to its end {ours['train command ends']:.2f} minutes,"
            f" step 1 at {ours['step 1 starts']:.2f})") in flat
    assert "Trainer finished" not in (run / "train_log_excerpt.txt").read_text()
    assert np.isnan(ours["last step trained"])
    assert f"{run.name.replace('_seed', '_qwen_seed')}: Training at step 16 finished" in follow
    return follow, ours


def _assert_batch_rewards(flat: str, run: Path) -> pd.DataFrame:
    """The experiment README lists ``run``'s mean reward per step (its ``buffer_steps.csv``,
    returned by step), whose agent called no tool."""
    steps = pd.read_csv(run / "buffer_steps.csv").set_index("step")
    assert ", ".join(f"{r:.3f}" for r in steps["mean_reward"]) + " (steps 1-16)" in flat
    assert (steps["tool_call_rate"] == 0).all()
    return steps


def _experiment_levels() -> pd.DataFrame:
    """``run_facts.batch_levels`` of the experiment's runs, indexed by (run, step)."""
    train = tasks.read_split(paths.ARITHMETIC_QWEN_DIR, "train")
    return run_facts.batch_levels(run_facts.run_folders([QWEN_EXPERIMENT]), train) \
        .set_index(["run", "step"])


def _pct(row: pd.Series) -> str:
    """A batch's mean base pass rate (a row of ``run_facts.batch_levels``) as the README's
    percentage."""
    return f"{row['mean qwen_bare_pass_rate'] * 100:.0f} %"


def _trinity_etr(run: Path) -> pd.Series:
    """A ``difficulty_based`` run's effective task ratio per step, once ``etr_sources.csv``
    says it is Trinity's own and the experience buffer's agrees at all 16 steps."""
    sources = pd.read_csv(QWEN_EXPERIMENT / "etr_sources.csv").set_index("run")
    assert sources.at[run.name, "source"] == "pass_rate_calculator"
    assert sources.at[run.name, "largest_difference"] == 0.0
    assert sources.at[run.name, "steps_experience_buffer"] == 16
    return results.read_run(run).set_index("step")["effective_task_ratio"]


def _reply_counter(run: Path):
    """``count(step, pattern)``: how many of the replies ``run``'s ``samples.jsonl`` saved at
    ``step`` match ``pattern`` (a regular expression, any case)."""
    replies = pd.read_json(run / "samples.jsonl", lines=True)
    by_step = {k: g["response"] for k, g in replies.groupby("step")}
    assert sorted(by_step) == [1, 16] and all(len(r) == 16 for r in by_step.values())

    def count(step: int, pattern: str) -> int:
        return int(by_step[step].str.contains(pattern, regex=True, case=False).sum())

    return count


BOXED = r"\\boxed"


def _assert_replies(flat: str, run: Path) -> None:
    """The experiment README's paragraph on a run's replies at steps 1 and 16: code blocks,
    boxed answers and talk of Python."""
    count = _reply_counter(run)

    def many(n: int, verb: str) -> str:   # "none writes", "1 boxes", "all 16 box", "3 box"
        one = verb + ("es" if verb.endswith("x") else "s")
        return ("none " + one if n == 0 else f"1 {one}" if n == 1
                else f"all 16 {verb}" if n == 16 else f"{n} {verb}")

    assert (f"at step 1, {count(1, '```python')} of the 16 write a Python code block and "
            f"{count(1, BOXED)} box an answer; at step 16, {many(count(16, '```python'), 'write')}"
            f" a code block, {many(count(16, 'python'), 'mention')} Python and "
            f"{many(count(16, BOXED), 'box')} an answer") in flat


def _assert_step_time(flat: str, run: Path) -> pd.Series:
    """The experiment README's step-time paragraph of ``run``: the median step and its split,
    the evaluations; returns the run's column of ``phase_times.csv``."""
    phases = pd.read_csv(QWEN_EXPERIMENT / "phase_times.csv", index_col=0)[run.name]
    assert (f"median **{phases['whole step (log: one explore start to the next)']:.1f} s** "
            f"({_split(phases)})") in flat
    evals = results.read_scalars(run).query("tag == 'time/eval'").set_index("step")["value"]
    timed = json.loads((run / "timings.json").read_text())["whole_step_s"]
    assert (f"the evaluations took {evals[8]:.0f} and {evals[16]:.0f} s, steps 8 and 16 "
            f"{timed['step 8']:.0f} and {timed['step 16']:.0f} s") in flat
    return phases


#: The third arm's runs (stretch 9 on): the stretches before it speak of the two selectors.
THIRD_ARM = "bots"

#: The stretch in which each whole run joined the experiment's folder: a stretch's README section
#: states the ranges of its day, over the runs that existed then.
JOINED = {"random_seed0": 1, "random_seed1": 2, "difficulty_seed0": 5, "difficulty_seed1": 6,
          "difficulty_seed2": 7, "random_seed2": 8, "bots_seed0": 9, "bots_seed1": 10,
          "bots_seed2": 10}


def _of_their_day(ev: verdict.Evidence, stretch: int) -> verdict.Evidence:
    """The experiment's evidence over the runs that existed after ``stretch``."""
    names = ev.table["selector"].str.replace("_based", "") + "_seed" + ev.table["seed"].astype(str)
    return dataclasses.replace(ev, table=ev.table[~names.isin(_later(stretch))])


def _later(stretch: int) -> list[str]:
    """The runs that joined the experiment's folder after ``stretch``."""
    return [name for name, joined in JOINED.items() if joined > stretch]


def test_the_runs_a_stretch_brought_are_the_folders_runs():
    """``JOINED`` names every run folder of the experiment once, each with the stretch whose
    ``device_time.csv`` rows name it."""
    assert sorted(JOINED) == [p.name for p in run_facts.run_folders([QWEN_EXPERIMENT])]
    calls = pd.read_csv(QWEN_EXPERIMENT / "device_time.csv")
    for name, stretch in JOINED.items():
        assert calls.query("`for` == @name")["stretch"].max() == stretch, name


def _compile_seconds(names) -> dict[str, float]:
    """Seconds of vLLM's torch.compile in each experiment run of ``names``, from its log."""
    return {name: float(re.search(r"torch\.compile took ([\d.]+) s", (
        QWEN_EXPERIMENT / name / "train_log_excerpt.txt").read_text())[1]) for name in names}


def _runners_after_models(ours: pd.Series) -> float:
    """Minutes from all rollout models ready to all workflow runners ready (a run's
    ``startup.csv`` column)."""
    return ours["all workflow runners ready"] - ours["all rollout models ready"]


def _assert_compiled_start(flat: str, run: Path, ours: pd.Series, compiled: str) -> None:
    """The experiment README's start-up sentence of a run that compiled anew with its 16
    workflow runners made at once; ``compiled``: what the brackets after "compiling anew" say."""
    assert "runner_prepare_concurrency: 16" in (run / "launched_config.yaml").read_text()
    assert (f"step 1 at {ours['step 1 starts']:.2f} minutes after `train`, compiling anew "
            f"({compiled}) with its 16 workflow runners made at once: the trainer's workers ready "
            f"at {ours['trainer workers ready']:.2f}, vLLM at {ours['vLLM engine ready']:.2f}, the "
            f"runners {_runners_after_models(ours):.2f} minutes after the models") in flat


def _open_stretch(stretch: int, steps: tuple[int, int], name: str, *logged: str):
    """What every stretch test from the eighth on checks first, for a stretch whose H100 came at
    once (the calls back at ``steps``) and whose run ``name`` has a log that ends before
    "Trainer finished"; ``logged``: lines its follow log holds. Returns the experiment README
    and the top README flattened, the run's minutes from the machine's start, its folder, the
    follow log and its ``startup.csv`` column."""
    flat = _flat(QWEN_EXPERIMENT)
    top = " ".join((paths.REPO_ROOT / "README.md").read_text().split())
    whole = _assert_stretch_at_once(flat, stretch, *steps)
    run = QWEN_EXPERIMENT / name
    follow, ours = _assert_unfinished_run_start(flat, stretch, run)
    for line in logged:
        assert line in follow, line
    return flat, top, whole, run, follow, ours


def _assert_stretch_at_once(flat: str, stretch: int, first: int, second: int) -> float:
    """The experiment README's device time of a stretch whose H100 came at once: the 17 part
    calls, the long call back at step ``first``, a ``wait`` at step ``second``, a second with
    the run whole, the machine given back; returns the run's minutes from the machine's start."""
    calls = pd.read_csv(QWEN_EXPERIMENT / "device_time.csv").query(f"stretch == {stretch}")
    after = calls["device_s_after"].tolist()
    assert calls["calls"].sum() == 21 and calls.iloc[-1]["what"] == "given back"
    assert after == sorted(after) and (calls["card"] == "NVIDIA H100 80GB HBM3").all()
    assert calls.iloc[1]["calls"] == 17
    for said in (f"An H100 came at once ({after[0]:.1f} s of device time)",
                 f"the 17 part calls took the total to {after[1]:.1f} s",
                 f"returned at {after[2]:.1f} s at step {first}, a `wait` call at "
                 f"{after[3]:.1f} s at step {second}", f"back whole at {after[4]:.1f} s: "
                 f"**{after[4] / 60:.1f} minutes** from the machine's start",
                 f"Given back at {after[5]:.1f} s, with {(1800 - after[5]) / 60:.1f} minutes left"):
        assert said in flat, said
    return after[4] / 60


def test_the_experiments_fifth_stretch_is_what_its_calls_run_and_tables_hold():
    """Stretch 5 of the experiment: the device time of its calls (a machine lost, a second one
    that made the run whole), and what ``difficulty_seed0`` holds: held-out accuracy beside
    ``random`` seed 0's and the cut run of its seed, the batches and the levels of their tasks,
    the effective task ratio, the replies, the step split, the memory and the start-up; the
    top README says the same."""
    flat = _flat(QWEN_EXPERIMENT)
    top = " ".join((paths.REPO_ROOT / "README.md").read_text().split())
    calls = pd.read_csv(QWEN_EXPERIMENT / "device_time.csv").query("stretch == 5")
    after = calls["device_s_after"].tolist()
    assert calls["calls"].sum() == 42 and calls.iloc[-1]["what"] == "given back"
    assert after == sorted(after) and calls.iloc[3]["calls"] == 10
    assert (np.diff(after[2:4]) == 15.0 * 10).all() and np.diff(after[3:6]).tolist() == [90.0] * 2
    for said in (f"An H100 came at once ({after[0]:.1f} s of device time)",
                 f"took six part calls ({after[1]:.1f} s)", f"({after[2]:.1f} s for the two)",
                 f"none of the kind came ({after[3]:.1f} s)",
                 f"found no machine ({after[4]:.1f} and {after[5]:.1f} s)",
                 f"A second H100 came at {after[6]:.1f} s with {(1800 - after[6]) / 60:.1f} "
                 "minutes left", f"the 17 part calls took the total to {after[7]:.1f} s",
                 f"said so in one line ({after[8]:.1f} s)", f"returned at {after[9]:.1f} s past",
                 f"back whole at {after[10]:.1f} s", f"Given back at {after[11]:.1f} s"):
        assert said in flat, said
    whole = (after[10] - after[5]) / 60
    assert f"**{whole:.1f} minutes** from the last call without a machine" in flat
    assert calls.iloc[7]["calls"] == 17 and calls.iloc[1]["calls"] == 6
    run = QWEN_EXPERIMENT / "difficulty_seed0"
    follow, ours = _assert_unfinished_run_start(flat, 5, run)
    assert "QWEN_ONLY: difficulty is not a run of qwen 0" in follow
    seed1 = pd.read_csv(QWEN_EXPERIMENT / "startup.csv", index_col=0)["random_seed1"]
    # held-out accuracy: the pair of seed 0, the cut run of the same seed
    mine, theirs, cut = (results.read_run(folder / name).dropna(subset=["eval_accuracy"])
                         .set_index("step")["eval_accuracy"]
                         for folder, name in ((QWEN_EXPERIMENT, "difficulty_seed0"),
                                              (QWEN_EXPERIMENT, "random_seed0"),
                                              (QWEN_CUT, "difficulty_seed0")))
    assert (f"**{mine[8]:.3f} at step 8** and **{mine[16]:.3f} at step 16**, against `random` "
            f"seed 0's {theirs[8]:.3f} and {theirs[16]:.3f}") in flat
    pairs = run_facts.paired_evaluations(QWEN_EXPERIMENT)
    pair = pairs[pairs["seed"] == 0].set_index("step")
    assert pair.index.tolist() == [8, 16]
    z8, z16 = float(pair.at[8, "z (size at least)"]), float(pair.at[16, "z (size at least)"])
    assert (f"**{pair.at[8, 'difference']} at step 8**, at least {abs(z8):.1f} times a bound on "
            f"the evaluations' standard error ({pair.at[8, 'evaluation SE, at most']})") in flat
    assert (f"**{pair.at[16, 'difference']} at step 16** ({abs(z16):.1f} times "
            f"{pair.at[16, 'evaluation SE, at most']})") in flat
    assert z8 <= -2 and abs(z16) < 1
    bound = np.sqrt(2) * 0.5 / np.sqrt(660)
    gap = abs(cut[8] - mine[8])
    assert (f"had {cut[8]:.3f} at step 8, {gap:.3f} from this run, {gap / bound:.1f} times the "
            f"bound on the difference of two evaluations ({bound:.4f})") in flat
    again = results.read_run(QWEN_MB2 / "random_seed0").dropna(subset=["eval_accuracy"])
    assert f"were {abs(again['eval_accuracy'].iloc[0] - theirs[8]):.3f} apart" in flat
    # the same first tasks, different replies
    replies = {w: pd.read_json(f / "samples.jsonl", lines=True)
               for w, f in (("whole", run), ("cut", QWEN_CUT / "difficulty_seed0"))}
    firsts = {w: r[r["step"] == 1] for w, r in replies.items()}
    assert set(firsts["whole"]["question"]) == set(firsts["cut"]["question"])
    rewards = {w: pd.read_csv(f / "buffer_steps.csv").set_index("step")["mean_reward"]
               for w, f in (("whole", run), ("cut", QWEN_CUT / "difficulty_seed0"))}
    assert (f"(mean reward {rewards['whole'][1]:.3f} here, {rewards['cut'][1]:.3f} there") in flat
    # the batches and the levels of their tasks
    _assert_batch_rewards(flat, run)
    table = results.read_run(run)
    fl = {name: run_facts.first_last(results.read_run(QWEN_EXPERIMENT / name), window=4).iloc[0]
          for name in ("difficulty_seed0", "random_seed0", "random_seed1")}
    first, last = "rollout accuracy, first 4", "rollout accuracy, last 4"
    assert (f"rollout accuracy {fl['difficulty_seed0'][first]} over the first four steps, "
            f"{fl['difficulty_seed0'][last]} over the last four (`random`: "
            f"{fl['random_seed0'][first]} and {fl['random_seed0'][last]}, "
            f"{fl['random_seed1'][first]} and {fl['random_seed1'][last]})") in flat
    levels = _experiment_levels()
    ones, last16 = levels.loc[("difficulty_seed0", 1)], levels.loc[("difficulty_seed0", 16)]
    assert (f"step 1's 16 tasks have a mean level of {ones['mean difficulty']:.2f} (levels "
            f"{ones['difficulty range']}), step 16's {last16['mean difficulty']:.2f} (levels "
            f"{last16['difficulty range']})") in flat
    assert (f"solved {last16['mean qwen_bare_pass_rate'] * 100:.0f} % of the time before "
            f"training") in flat
    assert f"against {ones['mean qwen_bare_pass_rate'] * 100:.0f} % for step 1's" in flat
    assert (f"`random`'s step-16 batches have {levels.loc[('random_seed0', 16), 'mean difficulty']:.2f}"
            f" and {levels.loc[('random_seed1', 16), 'mean difficulty']:.2f}") in flat
    assert (levels["tasks"] == 16).all()
    ours_fl = fl["difficulty_seed0"]
    assert (f"Replies from {ours_fl['reply tokens, first 4']} to {ours_fl['reply tokens, last 4']}"
            f" tokens; KL to the start {ours_fl['KL, first 4']} over the first four steps, "
            f"{ours_fl['KL, last 4']} over the last four; tool-call rate 0") in flat
    etr = _trinity_etr(run)
    per_seed = pd.read_csv(QWEN_EXPERIMENT / "per_seed.csv").set_index(["selector", "seed"])
    assert (f"{etr[:4].mean():.2f} over the first four steps, {etr[-4:].mean():.2f} over the last "
            f"four, {etr.mean():.3f} over all 16 (`random_seed1`: "
            f"{per_seed.at[('random', 1), 'etr']:.3f})") in flat
    assert "agree at all 16 steps (largest difference 0.0)" in flat
    # the replies, step time, memory, start-up
    _assert_replies(flat, run)
    phases = _assert_step_time(flat, run)
    whole_step = "whole step (log: one explore start to the next)"
    _assert_experiment_memory(flat, run, 5)
    peaks = {name: _memory_peaks(QWEN_EXPERIMENT / name) for name in ("random_seed0",
                                                                      "random_seed1")}
    assert {round(used, 1) for _, used in peaks.values()} == {15.0}
    assert (f"({peaks['random_seed0'][0]:.1f} and {peaks['random_seed1'][0]:.1f} reserved "
            "there)") in flat
    config = (run / "launched_config.yaml").read_text() + (
        run / "trinity_config_runtime.txt").read_text()
    assert "runner_prepare_concurrency=16" in config
    assert (f"step 1 at {ours['step 1 starts']:.2f} minutes after `train`, from the run's own "
            f"compile cache with its 16 workflow runners made at once: the trainer's workers "
            f"ready at {ours['trainer workers ready']:.2f}, vLLM at "
            f"{ours['vLLM engine ready']:.2f}, the runners "
            f"{ours['all workflow runners ready'] - ours['all rollout models ready']:.2f} minutes"
            " after the models") in flat
    assert f"`random_seed1` (compiling anew, a faster H100) began at " \
        f"{seed1['step 1 starts']:.2f}" in flat
    # what remains counts this run's minutes; the top README says what the pair showed
    assert f", {whole:.1f} (`difficulty_seed0`), " in flat
    assert (f"was behind at step 8 in two of the three pairs, by "
            f"{abs(float(pair.at[8, 'difference'])):.3f} (at least {abs(z8):.1f} standard errors "
            "of the evaluations)") in top
    assert (f"({whole:.1f} minutes of device time from the machine's start, step 1 at "
            f"{ours['step 1 starts']:.2f} minutes, {phases[whole_step]:.0f} s a step), it held "
            f"{mine[8]:.3f} at step 8 and {mine[16]:.3f} at step 16, against random's "
            f"{theirs[8]:.3f} and {theirs[16]:.3f}: its batches went from tasks of mean level "
            f"{ones['mean difficulty']:.1f} to {last16['mean difficulty']:.1f}, and its rollout "
            f"accuracy to {table.set_index('step')['rollout_accuracy'][16]:.2f} at step 16") \
        in top


def test_the_experiments_sixth_stretch_is_what_its_calls_run_and_tables_hold():
    """Stretch 6 of the experiment: the device time of its calls, and what
    ``difficulty_seed1`` holds: its pair with ``random`` seed 1, the verdict over both seeds of
    each selector, the batches and the levels of their tasks, the effective task ratio, the
    replies, the step split, the memory and the start-up; the top README says the same."""
    flat = _flat(QWEN_EXPERIMENT)
    top = " ".join((paths.REPO_ROOT / "README.md").read_text().split())
    calls = pd.read_csv(QWEN_EXPERIMENT / "device_time.csv").query("stretch == 6")
    after = calls["device_s_after"].tolist()
    assert calls["calls"].sum() == 25 and calls.iloc[-1]["what"] == "given back"
    assert after == sorted(after) and (calls.iloc[:5]["card"] == "-").all()
    assert calls.iloc[6]["calls"] == 17 and np.diff(after[1:3]).tolist() == [15.0]
    for said in (f"two that waited for one ({after[0]:.1f} and {after[1]:.1f} s",
                 f"was refused ({after[2]:.1f} s)", f"two more that waited ({after[3]:.1f} and "
                 f"{after[4]:.1f} s)", f"An H100 came at {after[5]:.1f} s with "
                 f"{(1800 - after[5]) / 60:.1f} minutes left",
                 f"the 17 part calls took the total to {after[6]:.1f} s",
                 f"returned at {after[7]:.1f} s past step 7", f"back whole at {after[8]:.1f} s",
                 f"Given back at {after[9]:.1f} s"):
        assert said in flat, said
    whole = (after[8] - after[4]) / 60
    assert f"**{whole:.1f} minutes** from the last call without a machine" in flat
    assert f", {whole:.1f} (`difficulty_seed1`, compiling anew), " in flat
    run = QWEN_EXPERIMENT / "difficulty_seed1"
    follow, ours = _assert_unfinished_run_start(flat, 6, run)
    assert "difficulty_qwen_seed1: Training at step 7 finished\n[04:19:34] 1 run(s)" in follow
    seed0 = pd.read_csv(QWEN_EXPERIMENT / "startup.csv", index_col=0)["difficulty_seed0"]
    # held-out accuracy: the pair of seed 1, then the verdict over both seeds
    accuracy = {name: results.read_run(QWEN_EXPERIMENT / name).dropna(subset=["eval_accuracy"])
                .set_index("step")["eval_accuracy"]
                for name in ("difficulty_seed0", "difficulty_seed1", "random_seed0",
                             "random_seed1")}
    mine, theirs = accuracy["difficulty_seed1"], accuracy["random_seed1"]
    assert (f"**{mine[8]:.3f} at step 8** and **{mine[16]:.3f} at step 16**, against `random` "
            f"seed 1's {theirs[8]:.3f} and {theirs[16]:.3f}") in flat
    pairs = run_facts.paired_evaluations(QWEN_EXPERIMENT)
    pair = pairs[pairs["seed"] == 1].set_index("step")
    z8, z16 = float(pair.at[8, "z (size at least)"]), float(pair.at[16, "z (size at least)"])
    assert (f"**{pair.at[8, 'difference']} at step 8** ({abs(z8):.1f} times a bound on the "
            f"evaluations' standard error, {pair.at[8, 'evaluation SE, at most']}) and "
            f"**{pair.at[16, 'difference']} at step 16** ({abs(z16):.1f} times "
            f"{pair.at[16, 'evaluation SE, at most']})") in flat
    # the verdict as it stood with seeds 0 and 1 of each selector
    both = _of_their_day(verdict.gather({"qwen": QWEN_EXPERIMENT})[0], 6)
    table = verdict.evidence_table([both]).set_index("selector")
    assert table["seeds"].tolist() == [2, 2] and (table["eval_step"] == 16).all()
    ours_v, base = table.loc["difficulty_based"], table.loc["random"]
    assert abs(ours_v["z"]) < 1
    assert (f"{ours_v['eval_final']:.3f} for `difficulty_based`, {base['eval_final']:.3f} for "
            f"`random`, a difference of {ours_v['vs_random']:+.3f} with a standard error of "
            f"{ours_v['se']:.3f} from the spread over seeds: **{ours_v['z']:.1f} standard "
            "errors, not told apart**") in flat
    assert f"(with two seeds each, {ours_v['z']:.1f}, stretch 6;" in flat
    at8 = {sel: np.mean([accuracy[f"{sel}_seed{s}"][8] for s in (0, 1)])
           for sel in ("difficulty", "random")}
    assert (f"At step 8 the means are {at8['difficulty']:.3f} and {at8['random']:.3f} "
            f"({at8['difficulty'] - at8['random']:+.3f}), `difficulty_based` behind in both") in flat
    step8 = pairs[(pairs["step"] == 8) & pairs["seed"].isin([0, 1])]
    assert (step8["difference"].astype(float) < 0).all() and len(step8) == 2
    sizes = [abs(float(z)) for z in step8["z (size at least)"]]
    assert (f"`difficulty_based` behind in both pairs, by {sizes[0]:.1f} and {sizes[1]:.1f} "
            "bounds on the evaluations' error") in flat
    assert (f"behind at step 8 in two of the three pairs, by "
            f"{abs(float(step8.iloc[0]['difference'])):.3f}"
            f" (at least {abs(float(step8.iloc[0]['z (size at least)'])):.1f} standard errors of "
            f"the evaluations) and {abs(float(step8.iloc[1]['difference'])):.3f}") in top
    assert (f"({whole:.1f} minutes of device time, compiling anew, step 1 at "
            f"{ours['step 1 starts']:.2f} minutes) held {mine[8]:.3f} at step 8 and "
            f"{mine[16]:.3f} at step 16, against random's {theirs[8]:.3f} and "
            f"{theirs[16]:.3f}") in top
    # the batches and the levels of their tasks
    _assert_batch_rewards(flat, run)
    fl = {name: run_facts.first_last(results.read_run(QWEN_EXPERIMENT / name), window=4).iloc[0]
          for name in ("difficulty_seed1", "random_seed1")}
    ours_fl = fl["difficulty_seed1"]
    assert (f"rollout accuracy {ours_fl['rollout accuracy, first 4']} over the first four steps,"
            f" {ours_fl['rollout accuracy, last 4']} over the last four. The seed's") in flat
    levels = _experiment_levels()
    one, last16 = levels.loc[("difficulty_seed1", 1)], levels.loc[("difficulty_seed1", 16)]
    other0, rand1 = levels.loc[("difficulty_seed0", 1)], levels.loc[("random_seed1", 1)]
    assert one["mean qwen_bare_pass_rate"] > other0["mean qwen_bare_pass_rate"]

    assert (f"step 1's 16 tasks have a mean level of {one['mean difficulty']:.2f} (levels "
            f"{one['difficulty range']}), tasks the base policy solved {_pct(one)} of the time "
            f"(seed 0's step 1: {other0['mean difficulty']:.2f}, {_pct(other0)}; `random` seed "
            f"1's: {rand1['mean difficulty']:.2f}, {_pct(rand1)}); by step 16, "
            f"{last16['mean difficulty']:.2f} (levels {last16['difficulty range']}), "
            f"{_pct(last16)}") in flat
    etr = _trinity_etr(run)
    assert etr.idxmin() == 14 and etr[14] == 0.0
    assert (f"{etr[:4].mean():.2f} over the first four steps, {etr[-4:].mean():.2f} over the "
            f"last four, {etr.mean():.3f} over all 16, 0.0 at step 14") in flat
    etr1 = results.read_run(QWEN_EXPERIMENT / "random_seed1").set_index("step")[
        "effective_task_ratio"]
    assert (f"as few mixed groups over its last four steps ({etr1.iloc[-4:].mean():.2f}), from "
            f"tasks whose runs mostly all came back wrong (rollout accuracy "
            f"{fl['random_seed1']['rollout accuracy, last 4']})") in flat
    assert (f"Replies from {ours_fl['reply tokens, first 4']} to {ours_fl['reply tokens, last 4']}"
            f" tokens; KL to the start {ours_fl['KL, first 4']} over the first four steps, "
            f"{ours_fl['KL, last 4']} over the last four; tool-call rate 0") in flat
    # the replies, step time, memory, start-up
    _assert_replies(flat, run)
    _assert_step_time(flat, run)
    _assert_experiment_memory(flat, run, 6)
    peaks = {name: _memory_peaks(QWEN_EXPERIMENT / name) for name in accuracy}
    reserved = sorted(r for r, _ in peaks.values())
    used = sorted(u for _, u in peaks.values())
    assert (f"({used[0]:.1f}-{used[-1]:.1f} GiB in use); what its allocator kept in reserve "
            f"went from {reserved[0]:.1f} to {reserved[-1]:.1f} GiB across the four") in flat
    assert peaks["difficulty_seed1"][0] == reserved[-1]
    compiled = _compile_seconds([run.name])[run.name]
    _assert_compiled_start(flat, run, ours, f"torch.compile {compiled:.1f} s")
    assert (f"the runners {_runners_after_models(ours):.2f} minutes after the models. "
            f"`difficulty_seed0`, from its own compile cache on another H100, had vLLM ready at "
            f"{seed0['vLLM engine ready']:.2f} and began at {seed0['step 1 starts']:.2f}") in flat


def test_the_experiments_seventh_stretch_is_what_its_calls_run_and_tables_hold():
    """Stretch 7 of the experiment: the device time of its calls, and what
    ``difficulty_seed2`` holds: its held-out accuracy beside the cut ``random`` seed-2 run, the
    verdict over every seed each selector has, the batches and the levels of their tasks, the
    effective task ratio, the replies, the step split of a slower machine, the memory and the
    start-up; the top README says the same."""
    flat = _flat(QWEN_EXPERIMENT)
    top = " ".join((paths.REPO_ROOT / "README.md").read_text().split())
    whole = _assert_stretch_at_once(flat, 7, 4, 14)
    assert f", {whole:.1f} (`difficulty_seed2`, compiling anew on a slower H100) and" in flat
    run = QWEN_EXPERIMENT / "difficulty_seed2"
    follow = (QWEN_EXPERIMENT / "follow_stretch7.log").read_text()
    took = re.search(r"setup took (\d+) s", follow)[1]
    start = pd.read_csv(QWEN_EXPERIMENT / "startup.csv", index_col=0)
    ours = start[run.name]
    assert (f"(set-up {took} s; from `train` to its end {ours['train command ends']:.2f} minutes,"
            f" step 1 at {ours['step 1 starts']:.2f})") in flat
    assert "Trainer finished" in (run / "train_log_excerpt.txt").read_text()
    assert f"last step trained at {ours['last step trained']:.2f}" in flat
    assert "difficulty_qwen_seed2: Explore step 4\n[05:15:25] 1 run(s)" in follow
    assert "difficulty_qwen_seed2: Explore step 14\n[05:23:02] 1 run(s)" in follow
    # held-out accuracy beside the cut random seed-2 run, then the verdict over every seed
    # that existed then (random's seed 2 came in stretch 8)
    accuracy = {name: results.read_run(QWEN_EXPERIMENT / name).dropna(subset=["eval_accuracy"])
                .set_index("step")["eval_accuracy"]
                for name in ("difficulty_seed0", "difficulty_seed1", "difficulty_seed2",
                             "random_seed0", "random_seed1")}
    mine = accuracy["difficulty_seed2"]
    assert f"**{mine[8]:.3f} at step 8** and **{mine[16]:.3f} at step 16**" in flat
    cut = results.read_run(QWEN_CUT / "random_seed2").dropna(subset=["eval_accuracy"]) \
        .set_index("step")["eval_accuracy"]
    bound = np.sqrt(2) * 0.5 / np.sqrt(660)
    gap = mine[8] - cut[8]
    assert (f"held {cut[8]:.3f} at step 8, {gap:.3f} below this run, {gap / bound:.1f} times the "
            f"bound on the difference of two evaluations ({bound:.4f})") in flat
    then = _of_their_day(verdict.gather({"qwen": QWEN_EXPERIMENT})[0], 7)
    table = verdict.evidence_table([then]).set_index("selector")
    assert table.loc["difficulty_based", "seeds"] == 3 and table.loc["random", "seeds"] == 2
    ours_v, base = table.loc["difficulty_based"], table.loc["random"]
    assert abs(ours_v["z"]) < 1 and (table["eval_step"] == 16).all()
    assert (f"{ours_v['eval_final']:.3f} for `difficulty_based` over three seeds, "
            f"{base['eval_final']:.3f} for `random` over two, a difference of "
            f"{ours_v['vs_random']:+.3f} with a standard error of {ours_v['se']:.3f}: "
            f"**{ours_v['z']:.1f} standard errors, not told apart**") in flat
    assert f"with three and two, {ours_v['z']:.1f}, stretch 7;" in flat
    at8 = {sel: np.mean([accuracy[f"{sel}_seed{s}"][8] for s in seeds])
           for sel, seeds in (("difficulty", (0, 1, 2)), ("random", (0, 1)))}
    assert (f"At step 8 the means are {at8['difficulty']:.3f} (three seeds) and "
            f"{at8['random']:.3f} (two)") in flat
    # the batches and the levels of their tasks
    _assert_batch_rewards(flat, run)
    fl = run_facts.first_last(results.read_run(run), window=4).iloc[0]
    assert (f"rollout accuracy {fl['rollout accuracy, first 4']} over the first four steps, "
            f"{fl['rollout accuracy, last 4']} over the last four. The seed's") in flat
    assert (f"Replies from {fl['reply tokens, first 4']} to {fl['reply tokens, last 4']} tokens;"
            f" KL to the start {fl['KL, first 4']} over the first four steps, "
            f"{fl['KL, last 4']} over the last four; tool-call rate 0") in flat
    levels = _experiment_levels()
    one, last16 = levels.loc[("difficulty_seed2", 1)], levels.loc[("difficulty_seed2", 16)]
    seed0, seed1 = levels.loc[("difficulty_seed0", 1)], levels.loc[("difficulty_seed1", 1)]
    assert _pct(one) == _pct(seed0)
    assert (f"step 1's 16 tasks have a mean level of {one['mean difficulty']:.2f} (levels "
            f"{one['difficulty range']}), tasks the base policy solved {_pct(one)} of the time "
            f"(seed 0's: {seed0['mean difficulty']:.2f}, {_pct(seed0)}; seed 1's: "
            f"{seed1['mean difficulty']:.2f}, {_pct(seed1)}); by step 16, "
            f"{last16['mean difficulty']:.2f} (levels {last16['difficulty range']}), "
            f"{_pct(last16)}") in flat
    etr = _trinity_etr(run)
    assert (f"{etr[:4].mean():.2f} over the first four steps, {etr[-4:].mean():.2f} over the "
            f"last four, {etr.mean():.3f} over all 16, lowest at step {etr.idxmin()} "
            f"({etr.min():.3f})") in flat
    # the replies: two still write a code block at step 16
    _assert_replies(flat, run)
    # step time on a slower machine: every phase and the CPU-side start
    phases = _assert_step_time(flat, run)
    # beside the four runs that existed then (random's seed 2, slower still, came in stretch 8)
    others = pd.read_csv(QWEN_EXPERIMENT / "phase_times.csv", index_col=0).drop(
        columns=[run.name, *_later(7)])
    same = others[["difficulty_seed0", "difficulty_seed1"]]
    assert (phases > same.max(axis=1)).all()
    step = same.loc["whole step (log: one explore start to the next)"]
    assert f"(median steps {step.min():.1f}-{step.max():.1f} s)" in flat
    machine = ["training step", "weight sync", "evaluation"]
    assert (phases[machine] > others.loc[machine].max(axis=1)).all()
    spans = [f"{others.loc[m].min():.2f}-{others.loc[m].max():.2f} s" for m in machine]
    assert ("the training step, the weight sync and the evaluation slower than in any of the four "
            f"({spans[0]}, {spans[1]} and {spans[2]} there)") in flat
    # the run's settings are seed 1's: beside the names of its folders, the seed and Ray head
    configs = [(QWEN_EXPERIMENT / name / "launched_config.yaml").read_text()
               .replace(f"_seed{seed}", "_seed").splitlines()
               for seed, name in ((1, "difficulty_seed1"), (2, run.name))]
    differ = [(a.strip(), b.strip()) for a, b in zip(*configs, strict=True) if a != b]
    assert sorted(a.split(":")[0] for a, _ in differ) == ["ray_address", "seed", "seed"]
    assert all(b == "seed: 2" or b.startswith("ray_address") for _, b in differ)
    assert ("Its `launched_config.yaml` differs from `difficulty_seed1`'s in the seed and the Ray "
            "address only") in flat
    rest = start.drop(columns=[run.name, *_later(7)])
    loaded, passed = "`train`: config loaded", "`train`: preflight passed"
    assert rest.loc[loaded].nunique() == 1 and ours[loaded] > rest.loc[loaded].max()
    assert (f"config loaded at {ours[loaded]:.2f} minutes ({rest.loc[loaded].max():.2f} in the "
            f"others) and passed its preflight at {ours[passed]:.2f} "
            f"({rest.loc[passed].min():.2f}-{rest.loc[passed].max():.2f})") in flat
    # memory and start-up
    _assert_experiment_memory(flat, run, 7)
    compiled = _compile_seconds(("difficulty_seed1", "difficulty_seed2"))
    _assert_compiled_start(flat, run, ours, f"torch.compile {compiled['difficulty_seed2']:.1f} "
                                            f"s; {compiled['difficulty_seed1']:.1f} in "
                                            "`difficulty_seed1`")
    # the top README
    assert (f"Seed 2's ({whole:.1f} minutes of device time, compiling anew on a slower H100, "
            f"{phases['whole step (log: one explore start to the next)']:.1f} s a step) held "
            f"{mine[8]:.3f} at step 8 and {mine[16]:.3f} at step 16") in top


def test_the_experiments_eighth_stretch_is_what_its_calls_run_and_tables_hold():
    """Stretch 8 of the experiment: the device time of its calls, and what ``random_seed2``
    holds: its pair with ``difficulty_seed2`` and the cut run of its seed, the verdict over all
    six runs, the batches and the levels of their tasks, the effective task ratio from the
    buffer, the replies, the step split of a slower machine, the memory and the start-up from a
    carried compile cache; the opening paragraph, what the experiment did not do, the cut runs'
    README and the top README say the same."""
    flat, top, whole, run, follow, ours = _open_stretch(
        8, (3, 10), "random_seed2", "random_qwen_seed2: vLLM starts from the carried compile cache",
        "random_qwen_seed2: Explore step 3\n[06:35:19] 1 run(s)",
        "random_qwen_seed2: Training at step 10 finished\n[06:43:02] 1 run(s)")
    assert f"and {whole:.1f} (`random_seed2`, from a compile cache on a slower H100)" in flat
    # the six runs of its day (the third arm's first came in stretch 9)
    start = pd.read_csv(QWEN_EXPERIMENT / "startup.csv", index_col=0).drop(columns=_later(8))
    ends = start.loc["train command ends"]
    assert ends.idxmax() == run.name and ends.drop(run.name).max() < ends[run.name]
    # held-out accuracy: the pair of seed 2 and the cut run of this seed
    accuracy = {f"{sel}_seed{s}": results.read_run(QWEN_EXPERIMENT / f"{sel}_seed{s}")
                .dropna(subset=["eval_accuracy"]).set_index("step")["eval_accuracy"]
                for sel in ("difficulty", "random") for s in (0, 1, 2)}
    mine, theirs = accuracy["random_seed2"], accuracy["difficulty_seed2"]
    pairs = run_facts.paired_evaluations(QWEN_EXPERIMENT)
    pair = pairs[pairs["seed"] == 2].set_index("step")
    z8, z16 = (float(pair.at[k, "z (size at least)"]) for k in (8, 16))
    assert (f"**{mine[8]:.3f} at step 8** and **{mine[16]:.3f} at step 16**, against "
            f"`difficulty_based` seed 2's {theirs[8]:.3f} and {theirs[16]:.3f}: "
            f"**{pair.at[8, 'difference']} at step 8** ({z8:.1f} times a bound on the evaluations'"
            f" standard error, {pair.at[8, 'evaluation SE, at most']}) and "
            f"**{pair.at[16, 'difference']} at step 16** ({z16:.1f} times "
            f"{pair.at[16, 'evaluation SE, at most']}), the widest pair of the three and the "
            "lowest run of the six at both evaluations") in flat
    gaps = pairs.assign(size=pairs["difference"].astype(float).abs()) \
        .pivot(index="seed", columns="step", values="size")
    assert (gaps.idxmax() == 2).all()
    assert all(mine[k] == min(a[k] for a in accuracy.values()) for k in (8, 16))
    cut_run = QWEN_CUT / "random_seed2"
    cut = results.read_run(cut_run).set_index("step")
    bound = np.sqrt(2) * 0.5 / np.sqrt(660)
    gap = cut["eval_accuracy"][8] - mine[8]
    firsts = [set(pd.read_json(r / "samples.jsonl", lines=True).query("step == 1")["question"])
              for r in (run, cut_run)]
    assert firsts[0] == firsts[1] and len(firsts[0]) == 16
    rewards = [pd.read_csv(r / "buffer_steps.csv").set_index("step")["mean_reward"][1]
               for r in (run, cut_run)]
    kl8 = results.read_run(run).set_index("step")["kl_loss"][8]
    assert (f"the same 16 tasks at step 1, held {cut['eval_accuracy'][8]:.3f} at step 8, "
            f"{gap:.3f} above this run, {gap / bound:.1f} times the bound on the difference of two "
            f"evaluations ({bound:.4f}): the replies to those first tasks already differed (mean "
            f"reward {rewards[0]:.3f} here, {rewards[1]:.3f} there: vLLM's sampling is not "
            f"bit-reproducible), and by step 8 this run had moved further from the start (KL to "
            f"the start {kl8:.3f} here, {cut['kl_loss'][8]:.3f} there)") in flat
    assert kl8 > cut["kl_loss"][8]
    # the verdict over all six runs
    table = verdict.evidence_table([_of_their_day(verdict.gather(
        {"qwen": QWEN_EXPERIMENT})[0], 8)]).set_index("selector")
    assert (table["seeds"] == 3).all() and (table["eval_step"] == 16).all()
    ours_v, base = table.loc["difficulty_based"], table.loc["random"]
    assert abs(ours_v["z"]) < 2
    assert (f"reads {ours_v['eval_final']:.3f} for `difficulty_based`, {base['eval_final']:.3f} "
            f"for `random`, a difference of {ours_v['vs_random']:+.3f} with a standard error of "
            f"{ours_v['se']:.3f}: **{ours_v['z']:.1f} standard errors, not told apart**") in flat
    assert f"with three each, {ours_v['z']:.1f}, stretch 8;" in flat
    at8 = [np.mean([accuracy[f"{sel}_seed{s}"][8] for s in (0, 1, 2)])
           for sel in ("difficulty", "random")]
    assert f"At step 8 the means are {at8[0]:.3f} and {at8[1]:.3f}." in flat
    per_seed = pd.read_csv(QWEN_EXPERIMENT / "per_seed.csv").set_index(["selector", "seed"])
    assert per_seed[["ttb", "bsf"]].drop(("difficulty_based", 0)).notna().all().all()
    # the opening paragraph
    assert "**All six runs of the two selectors exist:" in flat
    assert (f"held-out accuracy {ours_v['eval_final']:.3f} for `difficulty_based` and "
            f"{base['eval_final']:.3f} for `random` (means over three seeds), "
            f"{ours_v['vs_random']:+.3f}, {ours_v['z']:.1f} standard errors over seeds") in flat
    rest = [accuracy[name][16] for name in accuracy if name != run.name]
    diffs = {k: pairs[pairs["step"] == k]["difference"].tolist() for k in (8, 16)}
    assert (f"`random` seed 2 ended at {mine[16]:.3f}, where the other five ended at "
            f"{min(rest):.3f}-{max(rest):.3f}; seed by seed `difficulty_based` was "
            f"{diffs[16][0]}, {diffs[16][1]} and {diffs[16][2]} ahead at step 16 ({diffs[8][0]}, "
            f"{diffs[8][1]} and {diffs[8][2]} at step 8)") in flat
    without = np.mean([accuracy[f"random_seed{s}"][16] for s in (0, 1)])
    assert f"{without:.3f}" == f"{ours_v['eval_final']:.3f}"
    assert (f"leaving that run out (after the fact, and on one side only) puts `random`'s other "
            f"two level with `difficulty_based`'s three ({ours_v['eval_final']:.3f} and "
            f"{without:.3f})") in flat
    finals = {sel: [accuracy[f"{sel}_seed{s}"][16] for s in (0, 1, 2)]
              for sel in ("difficulty", "random")}
    assert (f"`random`'s seeds span {np.ptp(finals['random']):.3f} at step 16, "
            f"`difficulty_based`'s {np.ptp(finals['difficulty']):.3f}") in flat
    rollout, etr_seed = per_seed["rollout_accuracy"], per_seed["etr"]
    at16 = {s: results.read_run(QWEN_EXPERIMENT / f"difficulty_seed{s}").set_index("step")[
        "rollout_accuracy"][16] for s in (0, 1, 2)}
    d = [("difficulty_based", s) for s in (0, 1, 2)]
    r = [("random", s) for s in (0, 1, 2)]
    assert (f"(rollout accuracy {rollout[d[0]]:.2f}, {rollout[d[1]]:.2f} and {rollout[d[2]]:.2f}"
            f" over its 16 steps, {at16[0]:.2f}, {at16[1]:.2f} and {at16[2]:.2f} at step 16, "
            f"against {rollout[r[0]]:.2f}, {rollout[r[1]]:.2f} and {rollout[r[2]]:.2f} over "
            f"random's) with no fewer mixed groups (effective task ratio {etr_seed[d[0]]:.3f}, "
            f"{etr_seed[d[1]]:.3f} and {etr_seed[d[2]]:.3f} against {etr_seed[r[1]]:.3f} and "
            f"{etr_seed[r[2]]:.3f})") in flat
    cut_d = results.read_run(QWEN_CUT / "difficulty_seed0").set_index("step")["eval_accuracy"][8]
    parts = [(cut_d, accuracy["difficulty_seed0"][8]), (cut["eval_accuracy"][8], mine[8])]
    assert (f"`difficulty_based` seed 0 ({parts[0][0]:.3f} against the whole run's "
            f"{parts[0][1]:.3f}) and `random` seed 2 ({parts[1][0]:.3f} against "
            f"{parts[1][1]:.3f}), so two runs of one seed can part by "
            f"{parts[0][0] - parts[0][1]:.3f} and {parts[1][0] - parts[1][1]:.3f} at step 8, "
            f"{(parts[0][0] - parts[0][1]) / bound:.1f} and "
            f"{(parts[1][0] - parts[1][1]) / bound:.1f} times the bound") in flat
    cut_flat = _flat(QWEN_CUT)
    assert (f"at step 8, {parts[0][0] - parts[0][1]:.3f} for `difficulty_based` seed 0 and "
            f"{parts[1][0] - parts[1][1]:.3f} for `random` seed 2") in cut_flat
    # the batches: as far from the start as the other random runs, no nearer right answers
    steps = _assert_batch_rewards(flat, run)
    fl = {s: run_facts.first_last(results.read_run(QWEN_EXPERIMENT / f"random_seed{s}"),
                                  window=4).iloc[0] for s in (0, 1, 2)}
    me = fl[2]
    assert (f"rollout accuracy {me['rollout accuracy, first 4']} over the first four steps, "
            f"{me['rollout accuracy, last 4']} over the last four (seeds 0 and 1: "
            f"{fl[0]['rollout accuracy, first 4']} to {fl[0]['rollout accuracy, last 4']}, "
            f"{fl[1]['rollout accuracy, first 4']} to {fl[1]['rollout accuracy, last 4']})") in flat
    assert (f"(KL to the start {me['KL, first 4']} over the first four steps, {me['KL, last 4']} "
            f"over the last four; {fl[0]['KL, last 4']} and {fl[1]['KL, last 4']} over the last "
            "four in seeds 0 and 1)") in flat
    kl_last = sorted(float(fl[s]["KL, last 4"]) for s in (0, 1))
    assert kl_last[0] < float(me["KL, last 4"]) < kl_last[1]   # "about as far"
    assert (f"its replies did not shorten ({me['reply tokens, first 4']} to "
            f"{me['reply tokens, last 4']} tokens; {fl[0]['reply tokens, first 4']} to "
            f"{fl[0]['reply tokens, last 4']} and {fl[1]['reply tokens, first 4']} to "
            f"{fl[1]['reply tokens, last 4']} in seeds 0 and 1)") in flat
    assert fl[0]["truncated, last 4"] == fl[1]["truncated, last 4"]
    assert (f"(truncated {me['truncated, first 4']} over the first four steps, "
            f"{me['truncated, last 4']} over the last four; {fl[0]['truncated, last 4']} over the "
            "last four in seeds 0 and 1)") in flat
    levels = _experiment_levels()
    one, last16 = levels.loc[(run.name, 1)], levels.loc[(run.name, 16)]
    s0, s1 = levels.loc[("random_seed0", 16)], levels.loc[("random_seed1", 16)]
    assert (f"step 1's 16 tasks have a mean level of {one['mean difficulty']:.2f} (levels "
            f"{one['difficulty range']}), tasks the base policy solved {_pct(one)} of the time, "
            f"step 16's {last16['mean difficulty']:.2f} (levels {last16['difficulty range']}), "
            f"{_pct(last16)} (seed 0's step 16: {s0['mean difficulty']:.2f}, {_pct(s0)}; seed "
            f"1's: {s1['mean difficulty']:.2f}, {_pct(s1)})") in flat
    table_run = results.read_run(run).set_index("step")
    etr = table_run["effective_task_ratio"]
    assert etr.tolist() == steps["effective_task_ratio"].tolist()   # read from the buffer
    sources = pd.read_csv(QWEN_EXPERIMENT / "etr_sources.csv").set_index("run")
    assert sources.at[run.name, "source"] == "experience buffer"
    assert etr.idxmin() == 15 and etr[15] == 0.0 and (etr.drop(15) > 0).all()
    norms = table_run["grad_norm"]
    assert norms.idxmin() == 15
    assert (f"{etr[:4].mean():.2f} over the first four steps, {etr[-4:].mean():.2f} over the "
            f"last four, {etr.mean():.3f} over all 16, 0.0 at step 15, where no task had a mixed "
            f"group and the update's gradient norm was {norms[15]:.2f} "
            f"({norms.drop(15).min():.0f}-{norms.drop(15).max():.0f} at the other steps)") in flat
    # the replies: one at step 16 loops on a sentence until the token limit cuts it
    _assert_replies(flat, run)
    replies = pd.read_json(run / "samples.jsonl", lines=True).query("step == 16")
    unboxed = replies[~replies["response"].str.contains(BOXED, regex=True)]["response"]
    loop = ("The problem states that the number of stamps became twice the number of stamps "
            "after forming a quadrilateral")
    assert len(unboxed) == 1 and unboxed.iloc[0].count(loop) >= 5
    assert f'that boxes no answer repeats one sentence ("{loop}, ...") until the token limit cuts ' \
        'it' in flat
    # step time on a slower machine: every phase, and the start on its CPUs
    phases = _assert_step_time(flat, run)
    others = pd.read_csv(QWEN_EXPERIMENT / "phase_times.csv", index_col=0).drop(
        columns=[run.name, *_later(8)])
    assert (phases > others.max(axis=1)).all()
    step = others.loc["whole step (log: one explore start to the next)"]
    assert f"(median steps {step.min():.1f}-{step.max():.1f} s)" in flat
    passed = start.loc["`train`: preflight passed"]
    assert passed.idxmax() == run.name
    assert (f"passed its preflight at {passed[run.name]:.2f} minutes "
            f"({passed.drop(run.name).min():.2f}-{passed.drop(run.name).max():.2f} in those "
            "five)") in flat
    configs = [(QWEN_EXPERIMENT / name / "launched_config.yaml").read_text()
               .replace(f"_seed{seed}", "_seed").splitlines()
               for seed, name in ((1, "random_seed1"), (2, run.name))]
    differ = [(a.strip(), b.strip()) for a, b in zip(*configs, strict=True) if a != b]
    assert sorted(a.split(":")[0] for a, _ in differ) == ["ray_address", "seed", "seed"]
    assert ("Its `launched_config.yaml` differs from `random_seed1`'s in the seed and the Ray "
            "address only") in flat
    # memory and start-up from the carried compile cache
    _assert_experiment_memory(flat, run, 8)
    compiled = _compile_seconds(start.columns)
    anew = [compiled[n] for n in ("random_seed1", "difficulty_seed1", "difficulty_seed2")]
    cached = [compiled[n] for n in ("random_seed0", "difficulty_seed0", run.name)]
    assert max(cached) < 5 and min(anew) > 10
    models = ours["all workflow runners ready"] - ours["all rollout models ready"]
    ready = start.loc["trainer workers ready"].drop(run.name)
    assert (f"step 1 at {ours['step 1 starts']:.2f} minutes after `train`, from the compile cache "
            f"of this seed's cut run (torch.compile {compiled[run.name]:.1f} s, against "
            f"{min(anew):.1f}-{max(anew):.1f} s in the runs that compiled anew) with its 16 "
            f"workflow runners made at once: the trainer's workers ready at "
            f"{ours['trainer workers ready']:.2f} ({ready.min():.2f}-{ready.max():.2f} in those "
            f"five), vLLM at {ours['vLLM engine ready']:.2f}, the runners {models:.2f} minutes "
            "after the models") in flat
    assert "runner_prepare_concurrency: 16" in (run / "launched_config.yaml").read_text()
    # what the experiment did not do
    assert (f"took {ends.min():.2f}-{ends.max():.2f} minutes from `train` to its end on one "
            "H100") in flat
    fastest = pd.read_csv(QWEN_EXPERIMENT / "phase_times.csv", index_col=0).loc[
        "whole step (log: one explore start to the next)"].min()
    assert (f"60 steps at the fastest median step ({fastest:.1f} s) are {60 * fastest / 60:.0f} "
            "minutes of steps alone") in flat
    for name in start.columns:
        assert (pd.read_csv(QWEN_EXPERIMENT / name / "buffer_steps.csv")["tool_call_rate"]
                == 0).all()
    assert "tool-call rate 0 at every step of every run" in flat
    spread = {sel: np.std(finals[sel], ddof=1) for sel in finals}
    assert (f"({min(finals['random']):.3f}-{max(finals['random']):.3f} at step 16, standard "
            f"deviation {spread['random']:.3f}; `difficulty_based`'s {spread['difficulty']:.3f},"
            ) in flat
    assert (f"three seeds a selector can tell a difference of about {2 * ours_v['se']:.2f} from "
            "the seeds' noise at two standard errors") in flat
    # GPU time per stretch: the README's table is run_facts.device_time's
    per_stretch = run_facts.device_time(QWEN_EXPERIMENT)
    rows = _table_rows((QWEN_EXPERIMENT / "README.md").read_text(), len(per_stretch.columns))
    for _, row in per_stretch.iterrows():
        said = rows[row["stretch"]]
        assert said[:4] == [str(row["date"]), str(row["calls"]), str(row["without a machine"]),
                            row["machines"]]
        assert said[4] == f"{row['device minutes']:.1f}"
        assert said[5].replace("`", "") == row["for"]
    total = per_stretch.iloc[-1]
    assert (f"took {total['device minutes']:.1f} device minutes in {total['calls']} calls; "
            f"{total['without a machine']} of the calls found no machine") in flat
    # the top README
    assert (f"At step 16 `difficulty_based` is ahead by {ours_v['vs_random']:.3f}, "
            f"{ours_v['z']:.1f} standard errors over seeds: the selectors cannot be told apart, "
            "and the lead rests on the one random run that ended far below the other five") in top
    assert f"and ahead by {float(pair.at[8, 'difference']):.3f} in the third" in top
    assert (f"a first random run of seed 2, cut at step 11, at {cut['eval_accuracy'][8]:.3f} "
            f"where the whole one held {mine[8]:.3f}") in top
    assert (f"Made whole on another slow H100 ({whole:.1f} minutes of device time, starting from "
            f"that run's compile cache, "
            f"{phases['whole step (log: one explore start to the next)']:.1f} s a step), it held {mine[8]:.3f} at step 8 and {mine[16]:.3f} at step 16, the "
            "lowest of the six") in top
    assert (f"Random's seeds span {np.ptp(finals['random']):.3f} at step 16, so three seeds a "
            f"selector can show a difference of about {2 * ours_v['se']:.2f} there") in top


def test_every_runs_first_batch_is_its_selectors_own_draw():
    """Each experiment run's selector, rebuilt from its launched config on a CPU, draws first
    the 16 tasks the run trained on at step 1; a random selector's 16th draw is the run's
    step 16 (difficulty-aware selectors' later draws depend on the feedback, not kept)."""
    train = tasks.read_split(paths.ARITHMETIC_QWEN_DIR, "train")
    assert train["question"].is_unique

    def rows(run: Path, step: int) -> list[int]:
        found = sorted(run_facts.kept_batches(run, train)[step])
        assert len(found) == 16
        return found

    runs = run_facts.run_folders([QWEN_EXPERIMENT])
    assert len(runs) == 9
    firsts = []
    for run in runs:
        driver = run_facts.run_selector(run, paths.ARITHMETIC_QWEN_DIR)
        firsts.append(sorted(driver.get_indices(16)))
        assert firsts[-1] == rows(run, 1), run.name
        if driver.name == "random":
            for _ in range(14):
                driver.get_indices(16)
            assert sorted(driver.get_indices(16)) == rows(run, 16), run.name
    assert len({tuple(f) for f in firsts}) == 9    # nine seeds and selectors, nine batches
    flat = _flat(QWEN_EXPERIMENT)
    assert ("the selector of each of the nine runs draws first the 16 tasks its run trained on at "
            "step 1 (`samples.jsonl`), and each `random` selector's sixteenth draw is the 16 of "
            "its step 16") in flat


def test_runs_that_kept_their_pass_rates_replay_every_batch_and_the_saved_state():
    """For each run whose ``buffer_tasks.csv`` came back, the selector rebuilt from its launched
    config and fed those pass rates step by step draws all 16 of the run's batches, and ends in
    the very state the run saved: Trinity feeds a step back before the next draw."""
    kept = [run for run in run_facts.run_folders([QWEN_EXPERIMENT])
            if (run / run_facts.BUFFER_TASKS).is_file()]
    assert [run.name for run in kept] == ["bots_seed1", "bots_seed2"]
    train = tasks.read_split(paths.ARITHMETIC_QWEN_DIR, "train")
    for run in kept:
        replay, driver = run_facts.replay_selector(run, paths.ARITHMETIC_QWEN_DIR)
        assert replay["step"].tolist() == list(range(1, 17)), run.name
        assert (replay["same tasks"] == replay["tasks"]).all() and (replay["tasks"] == 16).all()
        fed = pd.read_csv(run / run_facts.BUFFER_TASKS)
        batches = run_facts.kept_batches(run, train)
        for step in (1, 16):   # the table's tasks are the ones samples.jsonl saved replies to
            assert sorted(fed.query("step == @step")["task_index"]) == sorted(batches[step])
        saved = run_facts.saved_selector(run, paths.ARITHMETIC_QWEN_DIR).state_dict()
        replayed = driver.state_dict()
        assert sorted(replayed) == sorted(saved)
        for key, value in saved.items():
            assert np.array_equal(np.asarray(replayed[key]), np.asarray(value)), (run.name, key)
    # fed one step late, the replay loses the run's batches from step 2 on
    late = [run_facts.replay_selector(run, paths.ARITHMETIC_QWEN_DIR, lag=1)[0]
            .set_index("step")["same tasks"] for run in kept]
    assert all(t[1] == 16 for t in late)
    later = pd.concat([t.drop(1) for t in late])
    assert later.max() <= 5
    flat = _flat(QWEN_EXPERIMENT)
    assert ("for both runs it draws the 16 tasks the run trained on at every one of the 16 steps, "
            "and ends in the state the run saved in `explorer_meta.json`") in flat
    assert (f"Fed one step late instead (`replay_selector(..., lag=1)`), the replay draws only "
            f"{later.min()}-{later.max()} of the 16 tasks of each later batch") in flat
    assert "(fed one step late, it draws almost none of them)" in flat
    top = " ".join((paths.REPO_ROOT / "README.md").read_text().split())
    assert ("their selector, replayed on a CPU with the pass rates the runs fed it, draws every "
            "batch they trained on and ends in the state they saved") in top


def test_the_experiments_ninth_stretch_is_the_third_arms_first_run():
    """Stretch 9: the device time of its calls, and what ``bots_seed0`` holds: the package's
    selector in Trinity's run and the beliefs it saved, the levels its batches drew, its
    held-out accuracy beside its seed's two other runs and the cut run, the verdict's one-seed
    row, the batches, the effective task ratio, the replies, the step split, the memory and the
    start-up, each over the seven runs of its day; the top README says the same (the opening
    paragraph of its day gave way to the arm's three seeds, stretch 10)."""
    flat, top, whole, run, follow, ours = _open_stretch(
        9, (4, 12), "bots_seed0", "bots_qwen_seed0: Explore step 4\n[07:44:17] 1 run(s)",
        "bots_qwen_seed0: Explore step 12\n[07:52:00] 1 run(s)", "vllm_cache_bots_qwen_seed0.tgz")
    assert f"the third arm's first, {whole:.1f} (`bots_seed0`, compiling anew)" in flat
    assert "carried compile cache" not in follow
    # the selector: the package's, loaded by Trinity, fed by pass_rate_calculator every step
    params = json.loads((run / "params.json").read_text())
    assert params["selector"] == "mathagent.selectors.BOTSSelector"
    configs = [(QWEN_EXPERIMENT / name / "launched_config.yaml").read_text()
               .replace("_seed0", "_seed").splitlines()
               for name in ("difficulty_seed0", run.name)]
    differ = [(a.strip(), b.strip()) for a, b in zip(*configs, strict=True) if a != b]
    assert sorted(b.split(":")[0] for _, b in differ) == [
        "checkpoint_root_dir", "name", "ray_address", "selector_type", "target_reward"]
    assert ("selector_type: mathagent.selectors.BOTSSelector" in dict(differ).values()
            and "target_reward: 0.5" in dict(differ).values())
    assert ("differs from `difficulty_seed0`'s in those two, the run's name and checkpoint folder "
            "and the Ray address only") in flat
    etr = _trinity_etr(run)
    # its saved beliefs, loaded into the selector again (Trinity's own selector saves none)
    driver = run_facts.saved_selector(run, paths.ARITHMETIC_QWEN_DIR)
    table = driver.posterior_table()
    unsolved = (table[driver.feature_keys] == 0).all(axis=1)
    no_success = table["alpha"] == 1.0
    assert unsolved[no_success].all()
    by_level = run_facts.beliefs_by_level(driver).set_index("level")
    nxt = driver.dataset.select(run_facts.saved_selector(
        run, paths.ARITHMETIC_QWEN_DIR).get_indices(16))["difficulty"]
    assert (by_level["belief"] > by_level["reference"]).all()
    assert (by_level.loc[[9, 10], "no success"] == by_level.loc[[9, 10], "tasks"]).all()
    assert by_level.loc[9, "belief"].round(3) == by_level.loc[10, "belief"].round(3)
    assert by_level.loc[[9, 10], "reference"].max() == 0
    said = {k: f"{by_level.loc[k, 'belief']:.3f} against {by_level.loc[k, 'reference']:.3f}"
            for k in (0, 4, 9)}
    assert (f"beliefs about all {driver.n_tasks:,} tasks after 16 steps, which notebook 05 "
            f"(section 2) loads into the selector again with `run_facts.saved_selector`: a "
            f"capability coefficient of {driver.capability():.2f}, which places the trained "
            f"policy far above its own starting pass rates (the strong reference, at 1); no "
            f"success held for {no_success.sum():,} tasks, every one a task neither reference "
            f"solves, and a success held for {(unsolved & ~no_success).sum()} of the "
            f"{unsolved.sum():,} such tasks") in flat
    assert (f"({said[0]} at level 0, {said[4]} at level 4, {said[9]} at levels 9 and 10, where it "
            f"holds no success), and the batch it would draw at step 17 has a mean level of "
            f"{np.mean(nxt):.2f}") in flat
    assert driver.capability() > 1
    # the levels of its batches: a random draw at step 1, between the other two by step 16
    levels = _experiment_levels()
    one, last = levels.loc[(run.name, 1)], levels.loc[(run.name, 16)]
    firsts = [levels.loc[(f"random_seed{s}", 1), "mean qwen_bare_pass_rate"] for s in (0, 1, 2)]
    lasts = {sel: [levels.loc[(f"{sel}_seed{s}", 16)] for s in (0, 1, 2)]
             for sel in ("difficulty", "random")}

    def spans(rows, col, fmt):
        return f"{fmt(min(r[col] for r in rows))}-{fmt(max(r[col] for r in rows))}"

    level = "mean difficulty"
    rate = "mean qwen_bare_pass_rate"
    pct = lambda v: f"{v * 100:.0f}"   # noqa: E731
    assert (f"its 16 tasks have a mean level of {one[level]:.2f} (levels "
            f"{one['difficulty range']}), tasks the base policy solved {_pct(one)} of the time "
            f"(the `random` runs' step 1: {pct(min(firsts))}-{pct(max(firsts))} %). By step 16 "
            f"the selector served tasks of mean level {last[level]:.2f} (levels "
            f"{last['difficulty range']}), {_pct(last)}: harder than `difficulty_based`'s step "
            f"16 at `target_reward` 0.8 ({spans(lasts['difficulty'], level, '{:.2f}'.format)}, "
            f"{spans(lasts['difficulty'], rate, pct)} %), easier than `random`'s "
            f"({spans(lasts['random'], level, '{:.2f}'.format)}, "
            f"{spans(lasts['random'], rate, pct)} %)") in flat
    assert max(r[level] for r in lasts["difficulty"]) < last[level] < min(
        r[level] for r in lasts["random"])
    # held-out accuracy: the highest of the seven, beside its seed's two other runs
    # the seven runs of its day (the arm's seeds 1 and 2 came in stretch 10)
    start_runs = [p.name for p in run_facts.run_folders([QWEN_EXPERIMENT])
                  if p.name not in _later(9)]
    accuracy = {name: results.read_run(QWEN_EXPERIMENT / name).dropna(subset=["eval_accuracy"])
                .set_index("step")["eval_accuracy"] for name in start_runs}
    assert len(accuracy) == 7
    mine = accuracy.pop(run.name)
    best = {k: max(a[k] for a in accuracy.values()) for k in (8, 16)}
    assert mine[8] > best[8] and mine[16] > best[16]
    bound = np.sqrt(2) * 0.5 / np.sqrt(660)
    margin = {k: mine[k] - best[k] for k in (8, 16)}
    assert max(margin.values()) < bound
    assert (f"**{mine[8]:.3f} at step 8** and **{mine[16]:.3f} at step 16**, the highest of the "
            f"seven runs at both (the other six at most {best[8]:.3f} and {best[16]:.3f}: "
            f"{margin[8]:.3f} and {margin[16]:.3f} below, inside the bound on the difference of "
            f"two evaluations, {bound:.4f})") in flat
    for baseline, name, said in (("random", "random_seed0", "`random` seed 0's"),
                                 ("difficulty_based", "difficulty_seed0",
                                  "`difficulty_based` seed 0's")):
        pair = run_facts.paired_evaluations(QWEN_EXPERIMENT, studied="bots",
                                            baseline=baseline).query("seed == 0").set_index("step")
        z = {k: float(pair.at[k, "z (size at least)"]) for k in (8, 16)}
        se = {k: pair.at[k, "evaluation SE, at most"] for k in (8, 16)}
        theirs = accuracy[name]
        assert (f"{said} {theirs[8]:.3f} and {theirs[16]:.3f}, {pair.at[8, 'difference']} at step "
                f"8 ({z[8]:.1f} times") in flat
        assert (f"{pair.at[16, 'difference']} at step 16 ({z[16]:.1f} times {se[16]})") in flat
    cut = results.read_run(QWEN_CUT / "difficulty_seed0").set_index("step")["eval_accuracy"][8]
    assert (f"the cut run of `difficulty_based` seed 0 held {cut:.3f} at step 8 (stretch 3), "
            f"{mine[8] - cut:.3f} below this one") in flat
    assert mine[8] - cut < (mine[8] - accuracy["difficulty_seed0"][8]) / 2   # "mostly that run's"
    # the verdict: one seed, no standard error; named best on that one seed
    evidence = [_of_their_day(verdict.gather({"qwen": QWEN_EXPERIMENT})[0], 9)]
    row = verdict.evidence_table(evidence).set_index("selector").loc["bots"]
    assert row["seeds"] == 1 and np.isnan(row["se"]) and np.isnan(row["z"])
    assert (f"reads `bots` at {row['eval_final']:.3f}, {row['vs_random']:+.3f} over `random`'s "
            "mean of three, with no standard error") in flat
    won = verdict.who_won(evidence).iloc[0]
    assert (won["best"], won["best_seeds"]) == ("bots", 1) and np.isnan(
        won["best_vs_runner_up_z"])
    # the batches
    steps = _assert_batch_rewards(flat, run)
    fl = run_facts.first_last(results.read_run(run), window=4).iloc[0]
    per_seed = pd.read_csv(QWEN_EXPERIMENT / "per_seed.csv").set_index(["selector", "seed"])
    rollout = per_seed.at[("bots", 0), "rollout_accuracy"]
    assert (f"rollout accuracy {fl['rollout accuracy, first 4']} over the first four steps, "
            f"{fl['rollout accuracy, last 4']} over the last four, {rollout:.3f} over all "
            "16") in flat
    others = per_seed.drop(index="bots", level="selector")
    d, r = others.loc["difficulty_based"], others.loc["random"]
    # nearer the target than the others, but not plainly more often mixed
    assert abs(rollout - 0.5) < min(abs(others["rollout_accuracy"] - 0.5))
    assert d["etr"].min() < etr.mean() < d["etr"].max() == d.at[0, "etr"]
    last4 = {name: results.read_run(QWEN_EXPERIMENT / name).set_index("step")[
        "effective_task_ratio"].iloc[-4:].mean() for name in start_runs if name != run.name}
    last4 = {name: value for name, value in last4.items() if not np.isnan(value)}
    assert etr[-4:].mean() > max(last4.values())
    by = {sel: [v for n, v in last4.items() if n.startswith(sel)]
          for sel in ("difficulty", "random")}
    assert (f"Over the last four steps the other runs had {min(by['difficulty']):.2f}-"
            f"{max(by['difficulty']):.2f} (`difficulty_based`) and {min(by['random']):.2f}-"
            f"{max(by['random']):.2f} (`random`)") in flat
    ends = [results.read_run(QWEN_EXPERIMENT / f"difficulty_seed{s}").set_index("step")[
        "rollout_accuracy"][16] for s in (0, 1, 2)]
    assert min(ends) > 0.8 and (f"as `difficulty_based` ended above its 0.8 ({min(ends):.2f}-"
                                f"{max(ends):.2f} at step 16)") in flat
    assert etr.tolist() == steps["effective_task_ratio"].tolist()
    assert (f"{etr[:4].mean():.2f} over the first four steps, {etr[-4:].mean():.2f} over the last "
            f"four, {etr.mean():.3f} over all 16 (`difficulty_based`'s three "
            f"{d['etr'].min():.3f}-{d['etr'].max():.3f}, `random`'s {r['etr'].min():.3f} and "
            f"{r['etr'].max():.3f}), lowest at step {etr.idxmin()} ({etr.min():.3f})") in flat
    assert (f"Replies from {fl['reply tokens, first 4']} to {fl['reply tokens, last 4']} tokens; "
            f"KL to the start {fl['KL, first 4']} over the first four steps, {fl['KL, last 4']} "
            f"over the last four; truncated {fl['truncated, first 4']} to "
            f"{fl['truncated, last 4']}; tool-call rate 0") in flat
    # the replies
    _assert_replies(flat, run)
    saved = pd.read_json(run / "samples.jsonl", lines=True).groupby("step")["reward"].mean()
    assert (f"(mean reward {saved[16]:.3f} at step 16 in these 16 replies, {saved[1]:.3f} at "
            "step 1)") in flat
    # step time, between the two runs on slower machines; the start on the CPUs
    _assert_step_time(flat, run)
    step = pd.read_csv(QWEN_EXPERIMENT / "phase_times.csv", index_col=0).loc[
        "whole step (log: one explore start to the next)", start_runs]
    assert step["difficulty_seed2"] < step[run.name] < step["random_seed2"]
    assert (f"between `difficulty_seed2` ({step['difficulty_seed2']:.1f} s) and `random_seed2` "
            f"({step['random_seed2']:.1f} s)") in flat
    assert step.drop(run.name).nlargest(2).index.tolist() == ["random_seed2", "difficulty_seed2"]
    start = pd.read_csv(QWEN_EXPERIMENT / "startup.csv", index_col=0)[start_runs]
    passed = start.loc["`train`: preflight passed"]
    assert (f"passed its preflight at {passed[run.name]:.2f} minutes "
            f"({passed.drop(run.name).min():.2f}-{passed.drop(run.name).max():.2f} in the "
            "others)") in flat
    # memory: the most of the seven, the same in use
    _assert_experiment_memory(flat, run, 9)
    memory = pd.read_csv(QWEN_EXPERIMENT / "gpu_memory.csv", index_col=0).loc[
        "run, all processes (sum at one time)", start_runs]
    assert memory.idxmax() == run.name
    assert (f"the most of the seven ({memory.drop(run.name).min():.1f}-"
            f"{memory.drop(run.name).max():.1f} in the others)") in flat
    peaks = {name: _memory_peaks(QWEN_EXPERIMENT / name) for name in start.columns}
    in_use = [used for name, (_, used) in peaks.items() if name != run.name]
    assert min(in_use) <= peaks[run.name][1] <= max(in_use)
    assert f"with as much in use as the others ({min(in_use):.1f}-{max(in_use):.1f})" in flat
    reserved = [kept for kept, _ in peaks.values()]
    assert max(reserved) == peaks[run.name][0]
    assert (f"the reserve now goes from {min(reserved):.1f} to {max(reserved):.1f} GiB across the "
            "seven") in flat
    # start-up, compiling anew
    compiled = _compile_seconds(start.columns)
    anew = [compiled[n] for n in ("random_seed1", "difficulty_seed1", "difficulty_seed2")]
    assert min(anew) < compiled[run.name] < max(anew)
    _assert_compiled_start(flat, run, ours, f"torch.compile {compiled[run.name]:.1f} s; "
                                            f"{min(anew):.1f}-{max(anew):.1f} s in the other "
                                            "runs that compiled anew")
    # what the experiment did not do, the top README
    progress = run_facts.experiment_progress(QWEN_EXPERIMENT, paths.QWEN_EXPERIMENT_CONFIGS,
                                             paths.QWEN_EXPERIMENT_SEEDS)
    arm = progress[progress["selector"] == THIRD_ARM].set_index("seed")["last step explored"]
    assert arm[0] == "16 of 16"
    assert "stretch 8; the third arm, one seed, none, stretch 9;" in flat
    median = pd.read_csv(QWEN_EXPERIMENT / "phase_times.csv", index_col=0).at[
        "whole step (log: one explore start to the next)", run.name]
    assert (f"The third arm's seed 0 ({whole:.1f} minutes of device time, compiling anew, "
            f"{median:.1f} s a step) held {mine[8]:.3f} at step 8 and {mine[16]:.3f} at step 16; "
            f"by step 16 its batches drew tasks the base policy solved {_pct(last)} of the time "
            f"({spans(lasts['difficulty'], rate, pct)} % under `difficulty_based`, "
            f"{spans(lasts['random'], rate, pct)} % under random)") in top


def test_the_experiments_tenth_stretch_is_the_third_arms_two_last_runs():
    """Stretch 10: two runs one after the other on one machine, the device time of its calls,
    and what ``bots_seed1`` and ``bots_seed2`` hold: held-out accuracy beside their seeds'
    other runs, the verdict over three seeds of each arm, the batches and the levels of their
    tasks, the effective task ratio, the replies, the saved beliefs, the step split, the memory
    and the start-up; the opening paragraph, what the experiment did not do and the top README
    say the same."""
    flat = _flat(QWEN_EXPERIMENT)
    top = " ".join((paths.REPO_ROOT / "README.md").read_text().split())
    names = ("bots_seed1", "bots_seed2")
    runs = [QWEN_EXPERIMENT / name for name in names]
    # device time: an H100 at once, the parts, two runs of two calls each, given back
    calls = pd.read_csv(QWEN_EXPERIMENT / "device_time.csv").query("stretch == 10")
    after = calls["device_s_after"].tolist()
    assert after == sorted(after) and (calls["card"] == "NVIDIA H100 80GB HBM3").all()
    assert calls["calls"].tolist() == [1, 18, 1, 1, 1, 1, 0]
    assert calls["for"].tolist()[2:6] == ["bots_seed1", "bots_seed1", "bots_seed2", "bots_seed2"]
    first, second = (after[3]) / 60, (after[5] - after[3]) / 60
    for said in (f"An H100 came at once ({after[0]:.1f} s of device time), and the 18 part calls "
                 f"took the total to {after[1]:.1f} s", f"returned at {after[2]:.1f} s at step 8, "
                 f"and a `wait` call brought `bots_qwen_seed1` back whole at {after[3]:.1f} s: "
                 f"**{first:.1f} minutes** from the machine's start",
                 f"With {(1800 - after[3]) / 60:.1f} minutes left and the machine warm",
                 f"that call returned at {after[4]:.1f} s at step 8, and a `wait` call at "
                 f"{after[5]:.1f} s with step 16 trained and its checkpoint saved: "
                 f"**{second:.1f} minutes** after the first run's end",
                 f"Given back at {after[6]:.1f} s, with {(1800 - after[6]) / 60:.1f} minutes left"):
        assert said in flat, said
    follow, ours = _assert_unfinished_run_start(flat, 10, runs[0])
    took = re.findall(r"setup took (\d+) s", follow)
    assert len(took) == 2 and int(took[1]) < int(took[0])    # the second set-up had less to do
    assert "bots_qwen_seed1: Evaluation on eval-arithmetic-qwen at step 8\n[09:16:51] 1 run(s)" \
        in follow
    assert "bots_qwen_seed2: Training at step 8 finished\n[09:30:32] 1 run(s)" in follow
    start = pd.read_csv(QWEN_EXPERIMENT / "startup.csv", index_col=0)
    theirs = start[names[1]]
    assert "Trainer finished" in (runs[1] / "train_log_excerpt.txt").read_text()
    assert theirs["last step trained"] == theirs["train command ends"]
    assert (f"(set-up {took[1]} s: the packages and the model were in place, and its Ray head "
            "was its own)") in flat
    assert (f"(from `train` to its end {theirs['train command ends']:.2f} minutes, step 1 at "
            f"{theirs['step 1 starts']:.2f})") in flat
    assert (f"its second {first:.1f} (`bots_seed1`, compiling anew) and its third {second:.1f} "
            "more on the same machine") in flat
    # held-out accuracy, beside each seed's two other runs
    accuracy = {name: results.read_run(QWEN_EXPERIMENT / name).dropna(subset=["eval_accuracy"])
                .set_index("step")["eval_accuracy"] for name in JOINED}
    one, two = accuracy["bots_seed1"], accuracy["bots_seed2"]
    assert (f"`bots_seed1` **{one[8]:.3f} at step 8** and **{one[16]:.3f} at step 16**, "
            f"`bots_seed2` **{two[8]:.3f}** and **{two[16]:.3f}**") in flat
    pairs = {b: run_facts.paired_evaluations(QWEN_EXPERIMENT, studied="bots", baseline=b)
             .set_index(["seed", "step"]) for b in ("random", "difficulty_based")}
    for seed in (1, 2):
        for b, name in (("random", "random"), ("difficulty_based", "difficulty")):
            pair = pairs[b].loc[seed]
            acc = accuracy[f"{name}_seed{seed}"]
            z = {k: float(pair.at[k, "z (size at least)"]) for k in (8, 16)}
            named = (b, seed) == ("random", 1)    # the first pair names its steps
            assert (f"`{b}` run ({acc[8]:.3f} and {acc[16]:.3f}) {pair.at[8, 'difference']}"
                    f"{' at step 8' if named else ''} ({z[8]:.1f}") in flat, (seed, b)
            assert (f"{pair.at[16, 'difference']}{' at step 16' if named else ''} "
                    f"({z[16]:.1f})") in flat, (seed, b)
    at16 = {b: pairs[b].xs(16, level="step")["difference"].astype(float) for b in pairs}
    assert all((d > 0).all() for d in at16.values())    # ahead of both, in every seed
    assert (f"by {at16['random'].min():.3f}-{at16['random'].max():.3f} and "
            f"{at16['difficulty_based'].min():.3f}-{at16['difficulty_based'].max():.3f}") in flat
    # the verdict: three seeds each
    evidence = verdict.gather({"qwen": QWEN_EXPERIMENT})
    table = verdict.evidence_table(evidence).set_index("selector")
    assert (table["seeds"] == 3).all()
    b, d, r = (table.loc[s] for s in ("bots", "difficulty_based", "random"))
    finals = [accuracy[f"bots_seed{s}"][16] for s in (0, 1, 2)]
    won = verdict.who_won(evidence).iloc[0]
    assert (won["best"], won["best_seeds"], won["runner_up"]) == ("bots", 3, "difficulty_based")
    assert max(b["z"], d["z"], won["best_vs_runner_up_z"]) < 2
    assert (f"`bots` **{b['eval_final']:.3f}** ({min(finals):.3f}-{max(finals):.3f}), "
            f"`difficulty_based` {d['eval_final']:.3f}, `random` {r['eval_final']:.3f} at step "
            f"16. `bots` is {b['vs_random']:+.3f} over `random`, {b['z']:.1f} standard errors over "
            f"seeds, and the best of the three, {won['best_vs_runner_up_z']:.1f} standard errors "
            f"over `difficulty_based`; `difficulty_based` over `random` is unchanged "
            f"({d['vs_random']:+.3f}, {d['z']:.1f})") in flat
    assert (f"the third arm with three, {b['z']:.1f} over `random` and "
            f"{won['best_vs_runner_up_z']:.1f} over `difficulty_based`, stretch 10)") in flat
    # the batches: near the target, as no other run was
    per_seed = pd.read_csv(QWEN_EXPERIMENT / "per_seed.csv").set_index(["selector", "seed"])
    arm, rest = per_seed.loc["bots"], per_seed.drop(index="bots", level="selector")
    assert abs(arm["rollout_accuracy"] - 0.5).max() < abs(rest["rollout_accuracy"] - 0.5).min()
    fl = {run.name: run_facts.first_last(results.read_run(run), window=4).iloc[0] for run in runs}
    f1, f2 = fl.values()
    for run in runs:
        steps = _assert_batch_rewards(flat, run)
        etr = _trinity_etr(run)
        assert etr.tolist() == steps["effective_task_ratio"].tolist()
    assert (f"Rollout accuracy {f1['rollout accuracy, first 4']} and "
            f"{f2['rollout accuracy, first 4']} over the first four steps, "
            f"{f1['rollout accuracy, last 4']} and {f2['rollout accuracy, last 4']} over the last "
            f"four, {arm.at[1, 'rollout_accuracy']:.3f} and {arm.at[2, 'rollout_accuracy']:.3f} "
            f"over all 16 (seed 0: {arm.at[0, 'rollout_accuracy']:.3f})") in flat
    levels = _experiment_levels()
    l1 = [levels.loc[(name, 1)] for name in names]
    l16 = [levels.loc[(name, 16)] for name in names]
    s0 = levels.loc[("bots_seed0", 16)]
    lv = "mean difficulty"
    assert (f"(its 16 tasks of mean level {l1[0][lv]:.2f} and {l1[1][lv]:.2f}, base pass rate "
            f"{_pct(l1[0])} and {_pct(l1[1])}); at step 16 it served tasks of mean level "
            f"{l16[0][lv]:.2f} and {l16[1][lv]:.2f}, {_pct(l16[0])} and {_pct(l16[1])} (seed 0: "
            f"{s0[lv]:.2f}, {_pct(s0)})") in flat
    summary = pd.read_csv(QWEN_EXPERIMENT / "summary.csv").set_index("selector")["etr_mean"]
    etr_last4 = [_trinity_etr(run).iloc[-4:].mean() for run in QWEN_EXPERIMENT.glob("bots_seed*")]
    assert (f"{arm.at[1, 'etr']:.3f} and {arm.at[2, 'etr']:.3f} over the 16 steps, so the arm's "
            f"mean ({summary['bots']:.3f}) is level with `difficulty_based`'s "
            f"({summary['difficulty_based']:.3f}), above `random`'s ({summary['random']:.3f}); "
            f"over the last four steps {_trinity_etr(runs[0]).iloc[-4:].mean():.2f} and "
            f"{_trinity_etr(runs[1]).iloc[-4:].mean():.2f}, so seed 0's "
            f"{_trinity_etr(QWEN_EXPERIMENT / 'bots_seed0').iloc[-4:].mean():.2f} is not the "
            "arm's") in flat
    assert max(etr_last4) == _trinity_etr(QWEN_EXPERIMENT / "bots_seed0").iloc[-4:].mean()
    assert (f"Replies from {f1['reply tokens, first 4']} to {f1['reply tokens, last 4']} tokens "
            f"and from {f2['reply tokens, first 4']} to {f2['reply tokens, last 4']}; KL to the "
            f"start {f1['KL, last 4']} and {f2['KL, last 4']} over the last four steps") in flat
    # the replies
    for run in runs:
        _assert_replies(flat, run)
    # the saved beliefs
    drivers = [run_facts.saved_selector(run, paths.ARITHMETIC_QWEN_DIR) for run in runs]
    nxt = [np.mean(dr.dataset.select(run_facts.saved_selector(
        run, paths.ARITHMETIC_QWEN_DIR).get_indices(16))["difficulty"]) for dr, run in
        zip(drivers, runs, strict=True)]
    seed0 = run_facts.saved_selector(QWEN_EXPERIMENT / "bots_seed0", paths.ARITHMETIC_QWEN_DIR)
    assert (f"capability coefficients {drivers[0].capability():.2f} and "
            f"{drivers[1].capability():.2f} (seed 0: {seed0.capability():.2f}); the batch each "
            f"would draw at step 17 has a mean level of {nxt[0]:.2f} and {nxt[1]:.2f}") in flat
    # step time: two of the four fastest; seed 0's machine slower in every part
    phases = pd.read_csv(QWEN_EXPERIMENT / "phase_times.csv", index_col=0)
    whole = "whole step (log: one explore start to the next)"
    p1, p2 = phases[names[0]], phases[names[1]]
    assert (f"median **{p1[whole]:.1f} s** and **{p2[whole]:.1f} s** (training "
            f"{p1['training step']:.2f} and {p2['training step']:.2f} s, weight sync "
            f"{p1['weight sync']:.2f} and {p2['weight sync']:.2f} s, rollout phase "
            f"{p1['rollout phase']:.2f} and {p2['rollout phase']:.2f} s)") in flat
    evals = [results.read_scalars(run).query("tag == 'time/eval'").set_index("step")["value"]
             for run in runs]
    assert (f"the evaluations took {evals[0][8]:.0f} and {evals[0][16]:.0f} s, and "
            f"{evals[1][8]:.0f} and {evals[1][16]:.0f} s") in flat
    parts = ["training step", "weight sync", "rollout phase", "evaluation"]
    ratios = phases.loc[parts, "bots_seed0"] / phases.loc[parts, list(names)].max(axis=1)
    assert (f"every part of its step took {ratios.min():.1f}-{ratios.max():.1f} times as long") \
        in flat
    fastest = phases.loc[whole].nsmallest(4)
    assert set(names) <= set(fastest.index)
    assert (f"These two are of the four fastest of the nine, with `random_seed1` "
            f"({fastest['random_seed1']:.1f} s) and `difficulty_seed1` "
            f"({fastest['difficulty_seed1']:.1f} s)") in flat
    # memory: each run's processes, the trainer's own, the GPU's in each run's window
    memory = pd.read_csv(QWEN_EXPERIMENT / "gpu_memory.csv", index_col=0)
    m1, m2 = memory[names[0]], memory[names[1]]
    peaks = [_memory_peaks(run) for run in runs]
    assert (f"at most **{m1['run, all processes (sum at one time)']:.1f} GiB** and "
            f"**{m2['run, all processes (sum at one time)']:.1f} GiB** at one time (the trainer "
            f"{m1['trainer (FSDP actor + reference)']:.1f} and "
            f"{m2['trainer (FSDP actor + reference)']:.1f}, the vLLM worker "
            f"{m1['vLLM engine worker']:.1f} each; the trainer's own `max_memory_reserved_gb` "
            f"{peaks[0][0]:.1f} and {peaks[1][0]:.1f}, at most {peaks[0][1]:.1f} and "
            f"{peaks[1][1]:.1f} in use)") in flat
    assert m1["vLLM engine worker"] == m2["vLLM engine worker"]
    gpu = pd.read_csv(QWEN_EXPERIMENT / "gpu_stretch10.csv", header=None)
    used = gpu[1].str.replace(" MiB", "").astype(int)
    second_start = pd.Timestamp("2026-12-06 09:22:41")   # the second call's first line
    assert "[09:22:41] PYTHONDONTWRITEBYTECODE=1" in follow
    when = pd.to_datetime(gpu[0])
    assert (f"the GPU at most {used[when < second_start].max():,} and "
            f"{used[when >= second_start].max():,} MiB of 81,559") in flat
    # start-up: compiling anew, the runners made at once
    compiled = _compile_seconds(names)
    for run in runs:
        assert "runner_prepare_concurrency: 16" in (run / "launched_config.yaml").read_text()
    s1, s2 = start[names[0]], start[names[1]]
    assert s1["step 1 starts"] == s2["step 1 starts"] == ours["step 1 starts"]
    assert s1["vLLM engine ready"] == s2["vLLM engine ready"]
    assert _runners_after_models(s1) == pytest.approx(_runners_after_models(s2))
    assert (f"step 1 at {s1['step 1 starts']:.2f} minutes after `train` in both, compiling anew "
            f"(torch.compile {compiled[names[0]]:.1f} and {compiled[names[1]]:.1f} s) with the 16 "
            f"workflow runners made at once: the trainer's workers ready at "
            f"{s1['trainer workers ready']:.2f} and {s2['trainer workers ready']:.2f}, vLLM at "
            f"{s1['vLLM engine ready']:.2f}, the runners {_runners_after_models(s1):.2f} minutes "
            "after the models") in flat
    # the opening paragraph
    rolls = per_seed.loc["bots", "rollout_accuracy"]
    dr, rr = per_seed.loc["difficulty_based", "rollout_accuracy"], per_seed.loc[
        "random", "rollout_accuracy"]
    zs = pd.concat([pairs[k].xs(16, level="step")["z (size at least)"].astype(float)
                    for k in pairs])
    assert zs.nlargest(2).iloc[1] <= 1.6 < zs.max()
    assert pairs["random"].loc[(2, 16), "z (size at least)"] == f"{zs.max():+.1f}"
    assert (f"At step 16 `bots` held {finals[0]:.3f}, {finals[1]:.3f} and {finals[2]:.3f} (mean "
            f"{b['eval_final']:.3f}), against `difficulty_based`'s {d['eval_final']:.3f} and "
            f"`random`'s {r['eval_final']:.3f}: {b['vs_random']:+.3f} over `random` ({b['z']:.1f} "
            f"standard errors over seeds) and {b['eval_final'] - d['eval_final']:+.3f} over "
            f"`difficulty_based` ({won['best_vs_runner_up_z']:.1f})") in flat
    assert (f"Its batches averaged near its target (rollout accuracy {rolls.min():.3f}-"
            f"{rolls.max():.3f} over the 16 steps, rising through it; `difficulty_based` "
            f"{dr.min():.2f}-{dr.max():.2f}, `random` {rr.min():.2f}-{rr.max():.2f})") in flat
    for name in JOINED:   # "rising through it": below the target early, above it late
        if name.startswith(THIRD_ARM):
            rising = run_facts.first_last(results.read_run(QWEN_EXPERIMENT / name), window=4)
            assert float(rising.iloc[0]["rollout accuracy, first 4"]) < 0.5 < float(
                rising.iloc[0]["rollout accuracy, last 4"]), name
    # what the experiment did not do: every planned run exists; the power
    progress = run_facts.experiment_progress(QWEN_EXPERIMENT, paths.QWEN_EXPERIMENT_CONFIGS,
                                             paths.QWEN_EXPERIMENT_SEEDS)
    assert (progress["last step explored"] == "16 of 16").all() and len(progress) == 9
    assert (f"`bots`' {np.std(finals, ddof=1):.3f}), three seeds a selector can tell a "
            f"difference of about") in flat
    assert (f"the largest difference measured, `bots` over `random`, is {b['vs_random']:.3f}"
            ) in flat
    assert b["vs_random"] == table["vs_random"].max()
    # the top README
    assert (f"has its three seeds too: {finals[0]:.3f}, {finals[1]:.3f} and {finals[2]:.3f} at "
            f"step 16, {b['eval_final']:.3f} on average, ahead of random by {b['vs_random']:.3f} "
            f"and of `difficulty_based` by {b['eval_final'] - d['eval_final']:.3f}, "
            f"{b['z']:.1f} standard errors over seeds each") in top
    assert round(b["z"], 1) == round(won["best_vs_runner_up_z"], 1)
    assert (f"Its seeds 1 and 2 ran one after the other on one machine ({first:.1f} minutes of "
            f"device time from its start and {second:.1f} more, compiling anew, {p1[whole]:.1f} "
            f"and {p2[whole]:.1f} s a step) and held {one[16]:.3f} and {two[16]:.3f} at step 16"
            ) in top

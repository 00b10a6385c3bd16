"""benchmarks/bench_engine_step.py: the committed table is what the committed runs give, the
same-learning bound is two standard errors of a difference, and bad input gets one line."""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
import statistics

import pytest
from bench_scripts import load_script

from mathagent import paths

BENCH = paths.REPO_ROOT / "benchmarks"
STEP = BENCH / "engine_step"
ARGS = [str(STEP / "base" / "random_seed0"), str(STEP / "fast" / "random_seed0"),
        "--anchor", str(STEP / "anchor.json"), "--labels", "before", "after",
        "--same-learning", str(STEP / "fast" / "random_seed0"),
        str(paths.REPO_ROOT / "results" / "trinity_qwen" / "random_seed0")]


@pytest.fixture(scope="module")
def bench():
    return load_script(BENCH / "bench_engine_step.py")


def _tables(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("|")]


def test_the_committed_table_is_what_the_committed_runs_give(bench, tmp_path, capsys):
    out = tmp_path / "bench.md"
    assert bench.main([*ARGS, "--out", str(out), "--figure", str(tmp_path / "f.png")]) == 0
    committed = (BENCH / "bench_engine_step.md").read_text()
    assert _tables(out.read_text()) == _tables(committed)
    assert (tmp_path / "f.png").stat().st_size > 10_000
    rows = {line.split("|")[1].strip(): line for line in _tables(committed)}
    assert "weight sync" in rows and "held-out evaluation (660 x 4)" in rows


def test_the_same_learning_bound_is_two_standard_errors_of_a_difference(bench):
    text = bench.same_learning(STEP / "fast" / "random_seed0",
                               paths.REPO_ROOT / "results" / "trinity_qwen" / "random_seed0",
                               660)
    row = next(line for line in text.splitlines() if line.startswith("| 16 "))
    _, step, fast, ref, diff, bound, inside, spread, within, _ = (c.strip() for c in row.split("|"))
    # worked by hand from the event files: 0.3667 and 0.3894 held out at step 16, 660 x 4
    assert (fast, ref, diff) == ("0.367", "0.389", "-0.023")
    assert bound == "0.027" and inside == "yes"
    # the committed random seeds ended 0.389, 0.394 and 0.267 (their reports' per-seed table)
    assert spread == "0.267-0.394" and within == "yes"


def test_a_bad_anchor_or_run_folder_gets_one_line(bench, tmp_path, capsys):
    bad = tmp_path / "anchor.json"
    bad.write_text(json.dumps({"gpu": "x"}))
    args = [str(STEP / "base" / "random_seed0"), "--anchor", str(bad)]
    assert bench.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not an engine_anchor.py result" in err[0]
    assert bench.main([str(tmp_path), "--anchor", str(STEP / "anchor.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no timings.json" in err[0]


def test_the_levers_name_their_switch_and_read_their_rows(bench, tmp_path):
    """``--levers levers`` (benchmarks/engine_step_levers.sh): each lever row names its switch
    and carries the first and last runs' figures of the row it acts on (the committed runs
    stand in for the runs without and with the levers)."""
    out = tmp_path / "bench.md"
    args = [*ARGS[:7], "--levers", "levers", "--out", str(out)]
    assert bench.main(args) == 0
    rows: dict[str, list[str]] = {}  # a phase's row of the first table (the goals repeat some)
    for line in _tables(out.read_text()):
        cells = [c.strip() for c in line.split("|")[1:-1]]
        rows.setdefault(cells[0], cells)
    levers = [cells for cells in rows.values() if cells[1].startswith("`MATHAGENT_")]
    assert [(cells[1], cells[2]) for cells in levers] == [
        ("`MATHAGENT_VARLEN_ATTN=1 MATHAGENT_BATCHED_LOGPROBS=1`", "trainer: reference log-probs"),
        ("`MATHAGENT_VARLEN_ATTN=1 MATHAGENT_BATCHED_LOGPROBS=1`", "trainer: actor update"),
        ("`MATHAGENT_RUNNER_SLOTS=4`", "held-out evaluation (660 x 4)")]
    for cells in levers:
        assert cells[3:] == rows[cells[2]][1:3]  # the phase's before and after
    assert not any("IPC" in name for name in rows)


def test_a_before_run_that_ran_with_the_levers_is_refused_in_one_line(bench, tmp_path, capsys):
    """``params.json`` records a run's levers; a "before" with them set (exported in the shell
    that started it) is no before."""
    before, after = tmp_path / "before", tmp_path / "after"
    for folder, levers in ((before, {"MATHAGENT_VARLEN_ATTN": "1"}),
                           (after, {"MATHAGENT_VARLEN_ATTN": "1", "MATHAGENT_RUNNER_SLOTS": "4",
                                    "MATHAGENT_BATCHED_LOGPROBS": "1"})):
        shutil.copytree(STEP / "fast" / "random_seed0", folder,
                        ignore=shutil.ignore_patterns("monitor"))
        params = json.loads((folder / "params.json").read_text())
        (folder / "params.json").write_text(json.dumps({**params, "levers": levers}))
    args = [str(before), str(after), "--anchor", str(STEP / "anchor.json"), "--levers", "levers"]
    assert bench.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {before / 'params.json'}: ran with MATHAGENT_VARLEN_ATTN=1, but "
                   "--levers levers compares runs without MATHAGENT_VARLEN_ATTN=1"]
    params = json.loads((before / "params.json").read_text())
    (before / "params.json").write_text(json.dumps({**params, "levers": {}}))
    assert bench.lever_mismatch(before, after, "levers") is None
    (after / "params.json").write_text(json.dumps({**params, "levers": {}}))
    assert "ran with no MATHAGENT_VARLEN_ATTN" in bench.lever_mismatch(before, after, "levers")


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_the_anchor_without_a_gpu_says_so_in_one_line(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is here: the anchor would measure it")
    anchor = load_script(BENCH / "engine_anchor.py")
    assert anchor.main(["--out", str(tmp_path / "a.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: engine_anchor.py measures a CUDA GPU; torch sees none here"]
    assert not (tmp_path / "a.json").exists()


def test_the_committed_levers_table_is_what_the_committed_levers_runs_give(bench, tmp_path):
    """bench_engine_step_levers.md (benchmarks/engine_step_levers.sh, one sitting): its tables
    are what the two committed runs and their anchor give, the step-3 profile of the run with
    the levers is named, and the run with the levers is set against the committed run of its
    arm and seed and against the run without them (one seed: no range of seeds)."""
    out = tmp_path / "levers.md"
    args = [str(STEP / "fast8" / "random_seed0"), str(STEP / "levers" / "random_seed0"),
            "--anchor", str(STEP / "anchor_levers.json"), "--labels", "no levers", "levers",
            "--levers", "levers", "--same-learning", str(STEP / "levers" / "random_seed0"),
            str(paths.REPO_ROOT / "results" / "trinity_qwen" / "random_seed0"),
            str(STEP / "fast8" / "random_seed0"), "--figure", str(tmp_path / "f.png"),
            "--out", str(out)]
    assert bench.main(args) == 0
    text = out.read_text()
    assert _tables(text) == _tables((BENCH / "bench_engine_step_levers.md").read_text())
    assert "step 3 of levers" in text
    heads = [line for line in _tables(text) if line.startswith("| step | fast |")]
    assert len(heads) == 2 and "seeds" in heads[0] and "seeds" not in heads[1]


def test_a_profiled_step_is_named_only_when_it_is_a_step(bench, tmp_path, capsys):
    """params.json's MATHAGENT_PROFILE_STEP names the profiled step (whether the medians, from
    step 2, hold it); a value step_profile would not take names nothing; --same-learning
    without a reference run is refused in one line."""
    def levers(value):
        folder = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        (folder / "params.json").write_text(json.dumps({"levers": value}))
        return folder
    named = bench.profiled_steps([levers({"MATHAGENT_PROFILE_STEP": "3"}),
                                  levers({"MATHAGENT_PROFILE_STEP": "1"})], ["a", "b"])
    assert "step 3 of a (in its medians)" in named and "step 1 of b (not in its medians)" in named
    for value in ({"MATHAGENT_PROFILE_STEP": "0"}, {"MATHAGENT_PROFILE_STEP": "x"}, None, {}):
        assert bench.profiled_steps([levers(value)], ["c"]) == ""
    assert bench.main([*ARGS[:7], "--same-learning", ARGS[8]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --same-learning takes the fast run and at least one reference run"]


def _rows(text: str, head: str) -> dict[str, list[str]]:
    """The cells of the table under the line ``head``, by first cell (header row included)."""
    lines = text.splitlines()
    start = lines.index(head) + 2
    rows = {}
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if cells[0] != "---":
            rows[cells[0]] = cells[1:]
    return rows


def test_runs_of_the_same_settings_get_goals_each_and_each_against_the_first(bench, tmp_path,
                                                                              capsys):
    """``--levers none`` (benchmarks/engine_step_share.sh): no lever table and no lever check
    (the first run here ran with the levers, which ``--levers levers`` refuses in a "before"),
    each run's goals, and each later run's step, training step, rollout and evaluation over the
    first run's."""
    runs = [STEP / name / "random_seed0" for name in ("levers", "fast8", "fast")]
    args = [*map(str, runs), "--anchor", str(STEP / "anchor_levers.json"),
            "--labels", "alone", "pair, seed 0", "pair, seed 1"]
    assert bench.main([*args, "--levers", "levers"]) == 2
    capsys.readouterr()
    out = tmp_path / "pair.md"
    assert bench.main([*args, "--levers", "none", "--out", str(out)]) == 0
    text = out.read_text()
    assert not any(line.startswith("| lever |") for line in text.splitlines())
    assert "CPU cores busy" not in text  # no run has cpu_cores
    goals = _rows(text, "### The goals")
    assert goals["goal"] == ["at most", "alone", "met", "pair, seed 0", "met", "pair, seed 1",
                             "met"]
    # the whole steps' medians over steps 2+ (timings.json): 9, 18 and 20 s, against 10 at most
    whole = "whole step (log: one explore start to the next)"
    medians = []
    for run in runs:
        steps = json.loads((run / "timings.json").read_text())["whole_step_s"]
        medians.append(statistics.median(s for k, s in steps.items() if int(k.split()[1]) >= 2))
    assert medians == [9, 18, 20]
    assert goals[whole] == ["10", "9", "yes", "18", "no", "20", "no"]
    assert goals["weight sync"] == ["1", "0.08", "yes", "0.07", "yes", "0.09", "yes"]
    ratios = _rows(text, "### Each run against the first")
    assert ratios["measure"] == ["pair, seed 0 / alone", "pair, seed 1 / alone"]
    assert ratios[whole] == ["2.00x", "2.22x"]  # 18 / 9 and 20 / 9
    columns = [bench.run_column(run) for run in runs]
    for row in ("trainer: whole training step", "rollout (16 x 8 agent runs)",
                "held-out evaluation (660 x 4)"):
        assert ratios[row] == [f"{c[row] / columns[0][row]:.2f}x" for c in columns[1:]]
    # worked by hand from the committed tables: training steps of 13.94 s and 4.85 s
    assert ratios["trainer: whole training step"][0] == "2.87x"
    assert list(ratios) == ["measure", whole, "trainer: whole training step",
                            "rollout (16 x 8 agent runs)", "held-out evaluation (660 x 4)"]


CORES = {"evaluation": {"machine (16 cores)": {"all": 9.87, "busiest": 9.87},
                        "ray::WorkflowRunner (16 processes)": {"all": 6.5, "busiest": 0.614},
                        "VLLM::EngineCore": {"all": 1.0, "busiest": 1.0}},
         "steps between evaluations": {"machine (16 cores)": {"all": 4.2, "busiest": 4.2},
                                       "ray::WorkerDict": {"all": 1.234, "busiest": 1.1}}}


def test_the_cpu_table_is_the_runs_timings(bench, tmp_path):
    """A run's ``cpu_cores`` (timings.json) gives the CPU table, phase by phase and role by role
    in the run's order, to 2 decimals, blank for a run without the row."""
    run = tmp_path / "alone"
    shutil.copytree(STEP / "fast" / "random_seed0", run)
    timings = json.loads((run / "timings.json").read_text())
    (run / "timings.json").write_text(json.dumps({**timings, "cpu_cores": CORES}))
    out = tmp_path / "pair.md"
    args = [str(run), str(STEP / "base" / "random_seed0"), "--anchor", str(STEP / "anchor.json"),
            "--labels", "alone", "old", "--levers", "none", "--out", str(out)]
    assert bench.main(args) == 0
    text = out.read_text()
    lines = text.splitlines()
    at = lines.index("### CPU cores busy, by phase and role")
    assert "mean CPU cores" in lines[at + 2] and "machine row" in lines[at + 2]
    table = [[c.strip() for c in line.split("|")[1:-1]] for line in lines[at + 4:]
             if line.startswith("|")][:12]
    assert table[0] == ["phase", "role", "processes", "alone", "old"]
    assert table[2:] == [
        ["evaluation", "machine (16 cores)", "all processes", "9.87", ""],
        ["evaluation", "machine (16 cores)", "busiest process", "9.87", ""],
        ["evaluation", "ray::WorkflowRunner (16 processes)", "all processes", "6.50", ""],
        ["evaluation", "ray::WorkflowRunner (16 processes)", "busiest process", "0.61", ""],
        ["evaluation", "VLLM::EngineCore", "all processes", "1.00", ""],
        ["evaluation", "VLLM::EngineCore", "busiest process", "1.00", ""],
        ["steps between evaluations", "machine (16 cores)", "all processes", "4.20", ""],
        ["steps between evaluations", "machine (16 cores)", "busiest process", "4.20", ""],
        ["steps between evaluations", "ray::WorkerDict", "all processes", "1.23", ""],
        ["steps between evaluations", "ray::WorkerDict", "busiest process", "1.10", ""]]
    # a second run with a role of its own: its row after the first run's, blank in the first
    other = tmp_path / "other"
    other.mkdir()
    (other / "timings.json").write_text(json.dumps({"cpu_cores": {"evaluation": {
        "machine (16 cores)": {"all": 12.0, "busiest": 12.0},
        "ray::Trainer": {"all": 0.5, "busiest": 0.5}}}}))
    rows = [line for line in bench.cpu_lines([run, other], ["a", "b"]).splitlines()
            if line.startswith("| evaluation |")]
    assert rows[0] == "| evaluation | machine (16 cores) | all processes | 9.87 | 12.00 |"
    assert rows[2] == "| evaluation | ray::WorkflowRunner (16 processes) | all processes | 6.50 |  |"
    assert rows[-1] == "| evaluation | ray::Trainer | busiest process |  | 0.50 |"
    assert bench.cpu_lines([STEP / "base" / "random_seed0"], ["old"]) == ""


def test_the_committed_16_step_levers_page_is_what_its_run_gives(bench, tmp_path):
    """bench_engine_step_levers16.md: its tables (phases, goals, CPU cores, the same-learning
    check at steps 8 and 16) are what the committed 16-step run and its anchor give."""
    out = tmp_path / "levers16.md"
    run = str(STEP / "levers16" / "random_seed0")
    args = [run, "--anchor", str(STEP / "anchor_levers16.json"), "--labels", "levers, 16 steps",
            "--levers", "none", "--same-learning", run,
            str(paths.REPO_ROOT / "results" / "trinity_qwen" / "random_seed0"),
            "--figure", str(tmp_path / "f.png"), "--out", str(out)]
    assert bench.main(args) == 0
    text = out.read_text()
    assert _tables(text) == _tables((BENCH / "bench_engine_step_levers16.md").read_text())
    held_out = [line.split("|")[1].strip() for line in _tables(text)
                if line.startswith(("| 8 |", "| 16 |")) and "| yes |" in line]  # not the anchor's
    assert held_out == ["8", "16"]
    assert "| evaluation | ray::RolloutCoordinator | busiest process |" in text


def test_the_bootstrap_lever_compares_a_run_with_it_turned_off_against_one_with_it_set(bench,
                                                                                      tmp_path):
    before, after = tmp_path / "before", tmp_path / "after"
    for folder, value in ((before, "0"), (after, "1")):
        shutil.copytree(STEP / "fast" / "random_seed0", folder,
                        ignore=shutil.ignore_patterns("monitor"))
        params = json.loads((folder / "params.json").read_text())
        (folder / "params.json").write_text(
            json.dumps({**params, "levers": {"MATHAGENT_FAST_BOOTSTRAP": value}}))
    assert bench.lever_mismatch(before, after, "bootstrap") is None
    assert "but --levers bootstrap compares runs without" in \
        bench.lever_mismatch(after, after, "bootstrap")
    rows = bench.LEVER_SETS["bootstrap"]
    assert [row for _, _, row in rows] == [bench.EVAL_STEP0]


def test_the_allocator_setting_is_checked_where_a_run_recorded_it(bench, tmp_path):
    """``--levers expandable``: a run that recorded ``torch_allocator`` must have run with
    expandable segments if it is the after and without them if it is the before; runs laid out
    before the setting was recorded (the committed ones) pass."""
    before, after = tmp_path / "before", tmp_path / "after"
    for folder, value in ((before, None), (after, "expandable_segments:True")):
        shutil.copytree(STEP / "memory_before" / "random_seed0", folder,
                        ignore=shutil.ignore_patterns("monitor"))
        params = json.loads((folder / "params.json").read_text())
        (folder / "params.json").write_text(json.dumps({**params, "torch_allocator": value}))
    assert bench.lever_mismatch(before, after, "expandable") is None
    assert bench.lever_mismatch(after, before, "expandable") == (
        f"{after / 'params.json'}: ran with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, "
        "but --levers expandable compares runs without "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    assert bench.lever_mismatch(after, after, "expandable").endswith(
        "compares runs without PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    assert bench.lever_mismatch(before, before, "expandable") == (
        f"{before / 'params.json'}: ran with no PYTORCH_CUDA_ALLOC_CONF, but --levers "
        "expandable compares runs with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    committed = [STEP / name / "random_seed0" for name in ("memory_before", "memory_expandable")]
    assert "torch_allocator" not in json.loads((committed[1] / "params.json").read_text())
    assert bench.lever_mismatch(*committed, "expandable") is None


def test_the_committed_bootstrap_page_is_what_its_runs_give(bench, tmp_path):
    """bench_engine_step_bootstrap.md: the run with the lever off (4 steps) against the 60-step
    run with it on, as engine_step_bootstrap.sh writes it; both evaluated the starting weights
    at step 0, and that row is the lever's like-for-like effect."""
    out = tmp_path / "bootstrap.md"
    on = paths.REPO_ROOT / "results" / "qwen_60steps" / "random_seed0"
    args = [str(STEP / "bootstrap_off" / "random_seed0"), str(on), "--anchor",
            str(STEP / "anchor_bootstrap.json"), "--labels", "lever off",
            "lever on (60-step run)", "--levers", "bootstrap", "--out", str(out)]
    assert bench.main(args) == 0
    text = out.read_text()
    assert _tables(text) == _tables((BENCH / "bench_engine_step_bootstrap.md").read_text())
    step0 = [line for line in _tables(text)
             if line.startswith(f"| {bench.EVAL_STEP0} |")][0].split("|")
    off, lever_on = float(step0[2]), float(step0[3])
    assert lever_on < off / 1.5  # the same weights evaluated: the lever's effect stands out
    script = (BENCH / "engine_step_bootstrap.sh").read_text()
    assert "results/qwen_60steps/random_seed0" in script and '"lever on (60-step run)"' in script


def test_a_run_without_an_evaluation_at_step_0_has_no_such_row(bench):
    column = bench.run_column(STEP / "levers16" / "random_seed0")
    assert bench.EVAL_STEP0 not in column.index
    assert bench.EVAL_STEP0 in bench.run_column(STEP / "bootstrap_off" / "random_seed0").index


def _changed(a, b) -> set[str]:
    return {k for k in a.overrides.keys() | b.overrides.keys()
            if a.overrides.get(k) != b.overrides.get(k)}


EVAL_KEYS = {"buffer.total_steps", "explorer.eval_interval",
             "tuner.algorithm.eval_interval_steps"}


def test_each_sitting_spec_is_the_60_step_random_run_shortened_with_only_its_levers_changed():
    """The lever-off run of the evaluation-metrics sitting and the memory sitting's before are
    the 60-step spec's `random` run, shorter, with the spec's levers (the lever-off run without
    its one); the memory run differs from its before in the three settings its lever rows name
    and nothing else."""
    from mathagent.experiment.schedule import schedule
    from mathagent.results.spec import load_spec

    long = load_spec(paths.CONFIGS_DIR / "experiment_qwen_60steps.yaml")
    off, before, memory = (load_spec(STEP / f"spec_{name}.yaml")
                           for name in ("bootstrap_off", "memory_before", "memory"))
    for spec in (off, before, memory):
        assert [r.name for r in spec.runs()] == ["random_seed0"]
        assert spec.arms["random"] == long.arms["random"]
    assert _changed(off, long) == EVAL_KEYS == _changed(before, long)
    assert off.env == {**long.env, "MATHAGENT_FAST_BOOTSTRAP": "0"} and before.env == long.env
    assert _changed(memory, before) == {
        "trainer.trainer_config.actor.ppo_micro_batch_size_per_gpu",
        "trainer.trainer_config.ref.log_prob_micro_batch_size_per_gpu",
        "trainer.trainer_config.rollout.log_prob_micro_batch_size_per_gpu",
        "explorer.rollout_model.extra_engine_args.kv_cache_memory_bytes"}
    assert memory.env == before.env
    assert schedule(off.runs()[0]).eval_steps == (0, 4)
    for spec in (before, memory):
        assert schedule(spec.runs()[0]).steps == 4
        assert schedule(spec.runs()[0]).eval_steps == (0,)
    # the values (test_experiment checks that these keys reach verl's and vLLM's configs)
    assert [memory.overrides[k] for k in sorted(_changed(memory, before))] == [
        2**31, 4, 8, 8]


def test_the_expandable_run_and_the_runs_sharing_the_gpu_differ_from_the_before_only_as_named():
    """spec_memory_expandable.yaml is the memory sitting's before with the 2 GiB KV cache alone
    (the allocator's variable comes from the script, not the spec); the sharing sitting's run
    alone, pair and triple are that run for one, two and three seeds, 5 steps, no evaluation."""
    from mathagent.experiment.schedule import schedule
    from mathagent.results.spec import load_spec

    before, expandable, alone, pair, triple = (
        load_spec(STEP / f"spec_{name}.yaml")
        for name in ("memory_before", "memory_expandable", "alone", "pair", "triple"))
    kv = "explorer.rollout_model.extra_engine_args.kv_cache_memory_bytes"
    assert _changed(expandable, before) == {kv} and expandable.overrides[kv] == 2**31
    assert expandable.env == before.env == alone.env == pair.env == triple.env
    for shared, seeds in ((alone, (0,)), (pair, (0, 1)), (triple, (0, 1, 2))):
        assert shared.seeds == seeds and shared.arms == expandable.arms
        assert _changed(shared, expandable) == {"buffer.total_steps",
                                                "explorer.eval_on_startup"}
        assert schedule(shared.runs()[0]).steps == 5
        assert schedule(shared.runs()[0]).eval_steps == ()
    fused = load_spec(STEP / "spec_fused.yaml")
    fused_keys = {"trainer.trainer_config.model.use_fused_kernels": True,
                  "trainer.trainer_config.model.fused_kernel_options.impl_backend": "torch"}
    assert fused.seeds == (0,) and fused.env == alone.env
    assert {k: fused.overrides[k] for k in _changed(fused, alone)} == fused_keys
    for shared in (pair, triple):  # the fused kernels' pair and triple: the same but those keys
        side = load_spec(STEP / f"spec_{shared.out.name}_fused.yaml")
        assert side.seeds == shared.seeds and side.env == shared.env
        assert side.out.name == f"{shared.out.name}_fused"
        assert {k: side.overrides[k] for k in _changed(side, shared)} == fused_keys
    for script in ("engine_step_memory.sh", "engine_step_share.sh"):
        text = (BENCH / script).read_text()
        assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in text


def test_the_committed_memory_pages_are_what_their_runs_give(bench, tmp_path):
    """bench_engine_step_memory.md and bench_engine_step_memory_expandable.md, as
    engine_step_memory.sh writes them from the sitting's three runs. The smaller
    micro-batches cut the trainer's tensors but left its allocator holding far more beyond
    them; the allocator growing its segments in place held less beyond them than the before."""
    pages = {"bench_engine_step_memory.md": ("memory", "memory levers", "memory"),
             "bench_engine_step_memory_expandable.md": ("memory_expandable",
                                                         "expandable segments", "expandable")}
    for page, (folder, label, levers) in pages.items():
        out = tmp_path / page
        args = [str(STEP / "memory_before" / "random_seed0"), str(STEP / folder / "random_seed0"),
                "--anchor", str(STEP / "anchor_memory.json"), "--labels", "before", label,
                "--levers", levers, "--out", str(out)]
        assert bench.main(args) == 0
        assert _tables(out.read_text()) == _tables((BENCH / page).read_text())
    before, memory, expandable = (bench.run_column(STEP / name / "random_seed0")
                                  for name in ("memory_before", "memory", "memory_expandable"))
    tensors, beyond = "trainer tensors, GiB (max allocated)", bench.HELD_BEYOND
    assert memory[tensors] < before[tensors] and memory[beyond] > before[beyond]
    assert expandable[beyond] < before[beyond]


def test_what_the_allocator_held_beyond_its_tensors_is_the_two_running_peaks_apart(bench):
    """verl logs torch's running peaks, so the row is the most reserved less the most allocated
    of the run (here step 2's reserved against step 3's allocated); NaN where a run logged
    either tag not at all. The committed runs' tags never fall."""
    import pandas as pd

    (_, reserved), (_, allocated) = bench.MEMORY_TAGS
    scalars = pd.DataFrame({"tag": [reserved, allocated] * 3, "step": [1, 1, 2, 2, 3, 3],
                            "value": [10.0, 4.0, 12.0, 5.0, 12.0, 9.0]})
    assert bench.held_beyond_tensors(scalars) == 3.0
    assert math.isnan(bench.held_beyond_tensors(scalars[scalars["tag"] == reserved]))
    assert math.isnan(bench.held_beyond_tensors(scalars.iloc[0:0]))
    from mathagent import results

    for name in ("memory_before", "memory", "memory_expandable"):
        tags = results.read_scalars(STEP / name / "random_seed0")
        for tag in (reserved, allocated):
            values = tags[tags["tag"] == tag].sort_values("step")["value"]
            assert len(values) == 4 and values.is_monotonic_increasing


def test_each_memory_lever_row_is_a_row_of_the_table_and_an_unmeasured_goal_says_so(bench):
    column = bench.run_column(STEP / "levers16" / "random_seed0")
    step0 = bench.run_column(STEP / "bootstrap_off" / "random_seed0").index
    for levers in ("memory", "expandable", "fused"):
        assert [row for _, _, row in bench.LEVER_SETS[levers]
                if row not in column.index and row not in step0] == []
    import pandas as pd

    frame = pd.DataFrame({"run": column.drop("held-out evaluation (660 x 4)")})
    goals = bench.goal_table(frame.reindex(list(column.index)), ["run"])
    assert "| held-out evaluation (660 x 4) | 30 |  | not measured |" in goals
    assert "| weight sync | 1 | 0.05 | yes |" in goals


def test_the_bootstrap_sitting_without_its_60_step_run_stops_in_one_line(tmp_path):
    """Before any run: a Python that would start one exits 99 here, the check comes first."""
    import os
    import subprocess
    import sys

    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\n[ "$1" = -c ] && exec {sys.executable} "$@"\nexit 99\n')
    python.chmod(0o755)
    missing = tmp_path / "no_run"
    done = subprocess.run(["bash", str(BENCH / "engine_step_bootstrap.sh")], capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "PYTHON": str(python), "ON": str(missing)})
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == (f"engine_step_bootstrap.sh: {missing}: no laid-out run (run "
                           "configs/experiment_qwen_60steps.yaml first, or set ON)\n")


def _share_sitting(tmp_path, gpu_mib: str = "", alone_peak: float | None = None,
                   failing: str = "never-fails", fused_peak: float | None = None):
    """engine_step_share.sh and sitting.sh copied into a bare tree, run with a Python that
    records each command instead of running it (and fails the one naming ``failing``) and an
    nvidia-smi that reports ``gpu_mib`` (nothing: no GPU figure). Returns (the finished
    process, each recorded call as (allocator setting, lever, command))."""
    import os
    import subprocess
    import sys

    root = tmp_path / "repo"
    (root / "benchmarks" / "engine_step").mkdir(parents=True)
    shutil.copy(BENCH / "engine_step_share.sh", root / "benchmarks")
    shutil.copy(STEP / "sitting.sh", root / "benchmarks" / "engine_step")
    for name, peak in (("alone", alone_peak), ("fused", fused_peak)):
        if peak is not None:
            (root / "benchmarks" / "engine_step" / name).mkdir()
            (root / "benchmarks" / "engine_step" / name / "gpu_memory.csv").write_text(
                f'"peak GPU memory, GiB",random_seed0\n"run, all processes (sum at one time)",'
                f"{peak}\n")
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.txt"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\necho {gpu_mib}\n")
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\ncase "$1" in -c|-) exec {sys.executable} "$@";; esac\n'
                      f'echo "$PYTORCH_CUDA_ALLOC_CONF|${{MATHAGENT_VARLEN_ATTN:-}}|$*" >> {log}\n'
                      f'case "$*" in *{failing}*) exit 1;; esac\n')
    for tool in (python, bin_dir / "nvidia-smi"):
        tool.chmod(0o755)
    done = subprocess.run(
        ["bash", str(root / "benchmarks" / "engine_step_share.sh")], capture_output=True,
        text=True, timeout=120,
        env={**os.environ, "PYTHON": str(python), "PATH": f"{bin_dir}:{os.environ['PATH']}",
             "PYTHONPATH": str(paths.REPO_ROOT), "MATHAGENT_VARLEN_ATTN": "0",
             "PYTORCH_CUDA_ALLOC_CONF": ""})
    return done, [tuple(line.split("|", 2)) for line in log.read_text().splitlines()]


SHARE_STEP = "benchmarks/engine_step"


def _bench_call(runs: list[str], anchor: str, levers: str) -> str:
    return f"benchmarks/bench_engine_step.py {' '.join(runs)} --anchor {anchor} --levers {levers}"


def test_the_sharing_sitting_runs_alone_fused_then_three_then_two_with_the_allocator_setting(
        tmp_path):
    """The anchor, the run alone, the fused kernels' run and its page, the triple and the pair
    (no GPU figure: the memory check cannot refuse, and says so), every run with the
    allocator's variable and no lever from the calling shell, and the page of the six runs."""
    done, calls = _share_sitting(tmp_path)
    assert done.returncode == 0, done.stderr
    step, anchor = SHARE_STEP, f"{SHARE_STEP}/anchor_share.json"
    experiments = [f"-m mathagent experiment {step}/spec_{name}" for name in
                   ("alone.yaml", "fused.yaml", "triple.yaml --parallel 3",
                    "pair.yaml --parallel 2")]
    assert [cmd for _, _, cmd in calls] == [
        f"benchmarks/engine_anchor.py --out {anchor}", *experiments[:2],
        f"benchmarks/bench_engine_step.py {step}/alone/random_seed0 {step}/fused/random_seed0 "
        f"--anchor {anchor} --labels alone fused kernels --levers fused "
        "--out benchmarks/bench_engine_step_fused.md",
        *experiments[2:], calls[6][2]]
    assert [(alloc, lever) for alloc, lever, cmd in calls if "experiment" in cmd] == [
        ("expandable_segments:True", "")] * 4
    runs = [f"{step}/alone/random_seed0"] + [f"{step}/{side}/random_seed{seed}"
                                             for side, n in (("triple", 3), ("pair", 2))
                                             for seed in range(n)]
    assert calls[6][2].startswith(_bench_call(runs, anchor, "none") + " --labels alone")
    assert calls[6][2].endswith("--out benchmarks/bench_engine_step_share.md")
    assert done.stderr.count("no GPU memory figure") == 2


def test_the_sharing_sitting_refuses_what_the_gpu_cannot_hold_and_goes_on_past_a_failure(
        tmp_path):
    """A GPU of 100,000 MiB and a run alone that peaked at 40.5 GiB: three at once are refused
    in one line, two run; the fused kernels' run fails and is named; the page holds the run
    alone and the pair, and the sitting ends in failure."""
    done, calls = _share_sitting(tmp_path, gpu_mib="100000", alone_peak=40.5,
                                 failing="spec_fused.yaml")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "engine_step_share.sh: the run with the fused kernels failed (its log is named above)",
        "engine_step_share.sh: 3 runs at once: the folder's runs peaked at 40.5 GiB each and "
        "this GPU has 97.7 GiB: 3 at once would not fit (the fused kernels' run did not finish)"]
    step = SHARE_STEP
    assert [cmd.split()[-1] for _, _, cmd in calls[1:4]] == [
        f"{step}/spec_alone.yaml", f"{step}/spec_fused.yaml", "2"]
    runs = [f"{step}/alone/random_seed0", f"{step}/pair/random_seed0", f"{step}/pair/random_seed1"]
    assert calls[4][2].startswith(_bench_call(runs, f"{step}/anchor_share.json", "none"))
    assert len(calls) == 5


def test_where_the_run_alone_does_not_fit_twice_the_fused_kernels_settings_run_as_the_pair(
        tmp_path):
    """An 80 GiB GPU (81,559 MiB), the run alone at 40.5 GiB and the fused kernels' run at
    35.0: three at once are refused with both peaks named; the pair runs the fused settings
    (spec_pair_fused.yaml), and the page holds the run alone, the fused run and the pair."""
    done, calls = _share_sitting(tmp_path, gpu_mib="81559", alone_peak=40.5, fused_peak=35.0)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "engine_step_share.sh: 3 runs at once: the folder's runs peaked at 40.5 GiB each and "
        "this GPU has 79.6 GiB: 3 at once would not fit (the fused kernels' run: the folder's "
        "runs peaked at 35.0 GiB each and this GPU has 79.6 GiB: 3 at once would not fit)"]
    assert done.stdout.splitlines() == [
        "engine_step_share.sh: 2 runs at once of the run alone's settings: the folder's runs "
        "peaked at 40.5 GiB each and this GPU has 79.6 GiB: 2 at once would not fit; the fused "
        "kernels' settings run instead"]
    step = SHARE_STEP
    assert [cmd for _, _, cmd in calls[4:5]] == [
        f"-m mathagent experiment {step}/spec_pair_fused.yaml --parallel 2"]
    runs = [f"{step}/alone/random_seed0", f"{step}/fused/random_seed0",
            f"{step}/pair_fused/random_seed0", f"{step}/pair_fused/random_seed1"]
    assert calls[5][2] == (_bench_call(runs, f"{step}/anchor_share.json", "none")
                           + " --labels alone fused kernels pair, fused kernels, seed 0 "
                           "pair, fused kernels, seed 1 --out benchmarks/bench_engine_step_share.md")
    assert len(calls) == 6


def test_where_both_sides_run_the_fused_settings_the_fused_run_is_listed_once(tmp_path):
    """An 80 GiB GPU, the run alone at 40.5 GiB and the fused run at 25.0: the triple and the
    pair both run the fused settings, and the page lists the fused run once, before them."""
    done, calls = _share_sitting(tmp_path, gpu_mib="81559", alone_peak=40.5, fused_peak=25.0)
    assert done.returncode == 0, done.stderr
    step = SHARE_STEP
    assert [cmd.split(" ", 3)[-1] for _, _, cmd in calls[4:6]] == [
        f"{step}/spec_triple_fused.yaml --parallel 3", f"{step}/spec_pair_fused.yaml --parallel 2"]
    runs = ([f"{step}/alone/random_seed0", f"{step}/fused/random_seed0"]
            + [f"{step}/triple_fused/random_seed{seed}" for seed in range(3)]
            + [f"{step}/pair_fused/random_seed{seed}" for seed in range(2)])
    assert calls[6][2].startswith(_bench_call(runs, f"{step}/anchor_share.json", "none")
                                  + " --labels alone fused kernels triple, fused kernels, seed 0")
    assert len(calls) == 7


def test_a_fused_run_without_a_peak_figure_runs_no_side_unchecked(tmp_path):
    """The run alone at 40.5 GiB on an 80 GiB GPU and a fused run that finished without a
    gpu_memory.csv: neither side runs, each refused in one line that says why."""
    done, calls = _share_sitting(tmp_path, gpu_mib="81559", alone_peak=40.5)
    assert done.returncode == 1
    assert [line.split(": ")[-1] for line in done.stderr.splitlines()] == [
        "3 at once would not fit (the fused kernels' run has no peak memory figure)",
        "2 at once would not fit (the fused kernels' run has no peak memory figure)"]
    assert not any("experiment" in cmd and "--parallel" in cmd for _, _, cmd in calls)


def test_the_fused_kernels_settings_reach_the_verl_config_trinity_builds(tmp_path):
    """spec_fused.yaml's two keys, through Trinity's own config builder: the model config the
    actor and the reference share asks for the fused head with the torch backend (verl skips
    the fused forward, with a warning only, where no backend is named)."""
    from trinity.trainer.verl.config import build_verl_config

    from mathagent import launch
    from mathagent.results.spec import load_spec

    for name, fused in (("fused", True), ("alone", False)):
        run = load_spec(STEP / f"spec_{name}.yaml").runs()[0]
        plan = launch.load_plan(run.config, list(run.overrides), work_dir=tmp_path / name)
        model = build_verl_config(plan.config).model
        assert model.use_fused_kernels is fused
        assert (model.fused_kernel_options or {}).get("impl_backend") == ("torch" if fused
                                                                          else None)


def test_vllms_compile_rows_come_from_the_runs_that_read_it(bench, tmp_path):
    """A run laid out with ``vllm_compile`` in its timings (seconds, loaded from the cache or
    compiled) gets the two rows; a run laid out before has blank cells there, and a table of
    such runs alone has no such rows (the committed pages)."""
    runs = []
    for name, compiled in (("cold", {"seconds": 17.72, "from cache": False}),
                           ("warm", {"seconds": 2.48, "from cache": True}), ("old", None)):
        run = tmp_path / name / "random_seed0"
        shutil.copytree(STEP / "levers" / "random_seed0", run)
        timings = json.loads((run / "timings.json").read_text())
        timings.pop("vllm_compile", None)
        if compiled:
            timings["vllm_compile"] = compiled
        (run / "timings.json").write_text(json.dumps(timings))
        runs.append(run)
    anchor = json.loads((STEP / "anchor_levers.json").read_text())
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:5]]
            for line in bench.table(runs, ["cold", "warm", "old"], anchor, "none").splitlines()
            if line.startswith("| start-up: vLLM")}
    assert rows == {bench.COMPILE_ROW: ["17.72", "2.48", ""], bench.CACHE_ROW: ["0.00", "1.00", ""]}
    assert bench.COMPILE_ROW not in bench.table(runs[2:], ["old"], anchor, "none")


def test_the_start_up_specs_are_the_60_step_random_run_shortened_and_differ_only_in_the_levers():
    """The cold and warm runs are one spec's run twice (3 steps, held out at step 0 only), the
    third run the same with its two levers' variables and nothing else."""
    from mathagent.experiment.schedule import schedule
    from mathagent.results.spec import load_spec

    long = load_spec(paths.CONFIGS_DIR / "experiment_qwen_60steps.yaml")
    cold, warm, levers = (load_spec(STEP / f"spec_startup_{name}.yaml")
                          for name in ("cold", "warm", "levers"))
    for spec, name in ((cold, "cold"), (warm, "warm"), (levers, "levers")):
        assert [r.name for r in spec.runs()] == ["random_seed0"]
        assert spec.arms["random"] == long.arms["random"]
        assert spec.out.name == f"startup_{name}"
        assert _changed(spec, long) == EVAL_KEYS
        assert schedule(spec.runs()[0]).steps == 3 and schedule(spec.runs()[0]).eval_steps == (0,)
    assert cold.overrides == warm.overrides == levers.overrides
    assert cold.env == warm.env == long.env
    assert levers.env == {**long.env, "MATHAGENT_EARLY_RUNNERS": "1",
                          "MATHAGENT_EVAL_NO_LOGPROBS": "1"}


def _startup_sitting(tmp_path, slot_files: tuple[str, ...] = (), cold_done: bool = False):
    """engine_step_startup.sh and sitting.sh copied into a bare tree, run with a Python that
    records each command (with the early-runners variable it sees) instead of running it;
    MATHAGENT_RUNS points at a folder whose cache slot 0 holds ``slot_files``."""
    import os
    import subprocess
    import sys

    root = tmp_path / "repo"
    (root / "benchmarks" / "engine_step").mkdir(parents=True)
    shutil.copy(BENCH / "engine_step_startup.sh", root / "benchmarks")
    shutil.copy(STEP / "sitting.sh", root / "benchmarks" / "engine_step")
    if cold_done:
        (root / "benchmarks" / "engine_step" / "startup_cold" / "random_seed0").mkdir(parents=True)
    slot0 = tmp_path / "runs" / "vllm_cache" / "slot0"
    slot0.mkdir(parents=True)
    for name in slot_files:
        (slot0 / name).write_text("")
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.txt"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\ncase "$1" in -c|-) exec {sys.executable} "$@";; esac\n'
                      f'echo "${{MATHAGENT_EARLY_RUNNERS:-}}|$*" >> {log}\n')
    python.chmod(0o755)
    done = subprocess.run(
        ["bash", str(root / "benchmarks" / "engine_step_startup.sh")], capture_output=True,
        text=True, timeout=120,
        env={**os.environ, "PYTHON": str(python), "PYTHONPATH": str(paths.REPO_ROOT),
             "MATHAGENT_RUNS": str(tmp_path / "runs"), "MATHAGENT_EARLY_RUNNERS": "1"})
    calls = [tuple(line.split("|", 1)) for line in log.read_text().splitlines()] \
        if log.is_file() else []
    return done, calls, slot0


def test_the_start_up_sitting_runs_the_anchor_then_cold_warm_and_levers_then_the_page(tmp_path):
    """An empty cache (a slot holding only its lock file): the anchor, the three runs in order
    with no lever from the calling shell, and the page of the three."""
    done, calls, _ = _startup_sitting(tmp_path, slot_files=(".lock",))
    assert done.returncode == 0, done.stderr
    step, anchor = SHARE_STEP, f"{SHARE_STEP}/anchor_startup.json"
    runs = [f"{step}/startup_{name}/random_seed0" for name in ("cold", "warm", "levers")]
    assert [cmd for _, cmd in calls] == [
        f"benchmarks/engine_anchor.py --out {anchor}",
        *[f"-m mathagent experiment {step}/spec_startup_{name}.yaml"
          for name in ("cold", "warm", "levers")],
        _bench_call(runs, anchor, "startup") + " --labels compiled graphs from the cache "
        "the cache and both levers --out benchmarks/bench_engine_step_startup.md"]
    # the levers come from the third run's spec alone (the shell's is unset for every run)
    assert [lever for lever, cmd in calls if "experiment" in cmd] == ["", "", ""]


def test_the_start_up_sitting_refuses_a_cache_that_would_make_the_first_run_warm(tmp_path):
    """A slot 0 holding a compile cache and no cold run laid out: one line, nothing run; once
    the cold run is laid out, the cache is the one it left and the sitting goes on."""
    done, calls, slot0 = _startup_sitting(tmp_path, slot_files=(".lock", "torch_compile_cache"))
    assert done.returncode == 1 and calls == []
    assert done.stderr == (f"engine_step_startup.sh: {slot0} holds a vLLM compile cache "
                           "already, so the first run would not compile (move its files aside "
                           "to measure a start from nothing)\n")
    done, calls, _ = _startup_sitting(tmp_path / "resumed", slot_files=("torch_compile_cache",),
                                      cold_done=True)
    assert done.returncode == 0 and len(calls) == 5


def test_the_start_up_levers_read_their_rows_and_need_the_levers_on_in_the_last_run_only(
        bench, tmp_path, capsys):
    """Three copies of a committed run with a step-0 evaluation as the cold, warm and levers
    runs (their compile lines and recorded levers set as such runs would have them): the lever
    table's rows, first run against last; a first run recorded with the levers is refused in
    one line."""
    runs = []
    for name, compiled, early in (("cold", 17.72, False), ("warm", 2.48, False),
                                  ("levers", 2.51, True)):
        run = tmp_path / name / "random_seed0"
        shutil.copytree(STEP / "bootstrap_off" / "random_seed0", run)
        timings = json.loads((run / "timings.json").read_text())
        timings["vllm_compile"] = {"seconds": compiled, "from cache": name != "cold"}
        (run / "timings.json").write_text(json.dumps(timings))
        params = json.loads((run / "params.json").read_text())
        params["levers"] = {**params.get("levers", {}),
                            **({"MATHAGENT_EARLY_RUNNERS": "1", "MATHAGENT_EVAL_NO_LOGPROBS": "1"}
                               if early else {})}
        (run / "params.json").write_text(json.dumps(params))
        runs.append(run)
    anchor = STEP / "anchor_bootstrap.json"
    out = tmp_path / "startup.md"
    assert bench.main([*map(str, runs), "--anchor", str(anchor), "--levers", "startup",
                       "--labels", "cold", "warm", "levers", "--out", str(out)]) == 0
    levers = _rows(out.read_text(), "### The levers and the goals")
    compile_row = next(v for k, v in levers.items() if k.startswith("vLLM's graphs loaded"))
    assert compile_row[1:] == [bench.COMPILE_ROW, "17.72", "2.51"]
    runners = next(v for k, v in levers.items() if k.startswith("that, and the rollout"))
    assert runners[0] == "`MATHAGENT_EARLY_RUNNERS=1`"
    evaluation = next(v for k, v in levers.items() if k.startswith("evaluation requests"))
    assert evaluation[:2] == ["`MATHAGENT_EVAL_NO_LOGPROBS=1`", bench.EVAL_STEP0]
    assert evaluation[2] == evaluation[3] != ""   # copies of one run: the same evaluation
    capsys.readouterr()
    assert bench.main([str(runs[2]), str(runs[1]), "--anchor", str(anchor),
                       "--levers", "startup"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ran with MATHAGENT_EARLY_RUNNERS=1" in err

"""benchmarks/bench_engine_step.py: the committed table is what the committed runs give, the
same-learning bound is two standard errors of a difference, and bad input gets one line."""

from __future__ import annotations

import importlib.util
import json
import shutil

import pytest

from mathagent import paths

BENCH = paths.REPO_ROOT / "benchmarks"
STEP = BENCH / "engine_step"
ARGS = [str(STEP / "base" / "random_seed0"), str(STEP / "fast" / "random_seed0"),
        "--anchor", str(STEP / "anchor.json"), "--labels", "before", "after",
        "--same-learning", str(STEP / "fast" / "random_seed0"),
        str(paths.REPO_ROOT / "results" / "trinity_qwen" / "random_seed0")]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_engine_step",
                                                  BENCH / "bench_engine_step.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    spec = importlib.util.spec_from_file_location("engine_anchor", BENCH / "engine_anchor.py")
    anchor = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(anchor)
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

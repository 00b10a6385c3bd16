"""benchmarks/bench_policy_head.py on the CPU, with a small head: both paths of verl's head
(every token's logits, and FusedLinearForPPO) run, agree, and land in the JSON and the page."""

from __future__ import annotations

import json

import pytest
from bench_scripts import load_script

from mathagent import paths

BENCH = paths.REPO_ROOT / "benchmarks"


@pytest.fixture(scope="module")
def head():
    return load_script(BENCH / "bench_policy_head.py")


def test_both_paths_run_agree_and_fill_one_row_a_pass(head, tmp_path, capsys):
    out, page = tmp_path / "head.json", tmp_path / "head.md"
    assert head.main(["--device", "cpu", "--vocabulary", "700", "--hidden", "32",
                      "--sequence-tokens", "200", "--micro-batches", "2", "3",
                      "--out", str(out), "--page", str(page)]) == 0
    results = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == results
    rows = results["rows"]
    assert [(r["micro_batch"], r["tokens"], r["pass"].split()[0]) for r in rows] == [
        (2, 400, "log-prob"), (2, 400, "update"), (3, 600, "log-prob"), (3, 600, "update")]
    for row in rows:
        assert row["logits_seconds"] > 0 and row["fused_seconds"] > 0
        # no memory figure off the GPU
        assert row["logits_peak_gib"] is None and row["fused_peak_gib"] is None
        diff = row["max_abs_difference"]
        # bfloat16 against float32 log-probabilities of a 700-word vocabulary (about 6.6 nats)
        assert diff["logprobs"] < 0.1 and diff["entropy"] < 0.1
        assert set(diff) == ({"logprobs", "entropy", "grad_hidden", "grad_weights"}
                             if row["pass"].startswith("update") else {"logprobs", "entropy"})
        if row["pass"].startswith("update"):
            assert diff["grad_hidden"] < 0.01 and diff["grad_weights"] < 0.1
    text = page.read_text()
    assert text.count("\n| 2 | 400 |") == 2 and text.count("\n| 3 | 600 |") == 2
    assert "hidden size 32 and vocabulary 700" in text


def test_a_bad_size_is_refused_in_one_line(head, capsys):
    with pytest.raises(SystemExit) as stop:
        head.main(["--device", "cpu", "--micro-batches", "0"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "--micro-batches must be positive")


def test_without_a_gpu_cuda_is_refused_in_one_line(head):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is here: the refusal cannot be shown")
    with pytest.raises(SystemExit) as stop:
        head.main([])
    assert str(stop.value) == ("bench_policy_head.py: no CUDA GPU here (--device cpu runs it on "
                               "the CPU)")


def test_the_committed_page_is_what_the_committed_measurement_gives(head):
    """bench_policy_head.md, as bench_policy_head.py --page wrote it from the JSON it wrote
    beside it (engine_step/policy_head.json); both paths measured at each size on the GPU."""
    results = json.loads((BENCH / "engine_step" / "policy_head.json").read_text())
    assert head.page(results) == (BENCH / "bench_policy_head.md").read_text()
    assert results["vocabulary"] == 151936 and results["hidden"] == 896
    assert [(r["micro_batch"], r["pass"].split()[0]) for r in results["rows"]] == [
        (8, "log-prob"), (8, "update"), (16, "log-prob"), (16, "update")]
    for row in results["rows"]:
        assert row["logits_peak_gib"] > 0 and row["fused_peak_gib"] > 0

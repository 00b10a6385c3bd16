"""Batch runner and pass-rate measurement against the real local llama.cpp server.

The measurement tests compare whole side tables: an uninterrupted run is the reference,
and a run stopped after a few tasks, a run killed with SIGKILL and a Ray fan-out over two
servers must each end with exactly the same rollouts. That works because the server
evaluates every prompt from scratch (``prompt_reuse`` off) and every rollout carries its
own seed derived from ``(seed, row, rollout)``. Replies are kept to 8 tokens.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from bounds import hang_bound

from mathagent import rollouts, tasks
from mathagent.cli import main as cli_main
from mathagent.policy import HFBackend
from mathagent.rollouts import EndpointBackend, MeasureError, measure_pass_rates
from mathagent.serving import LocalServer, ModelSettings, free_port

REPO = Path(__file__).resolve().parents[2]
COLUMN = "toy_pass_rate"
N = 2
SEED = 3
DECODING = {"temperature": 1.0, "max_tokens": 8}
COMPARED = ["row", "rollout", "reward", "accuracy", "response", "extracted", "tokens", "error"]

QUESTIONS = [("What is 3 + 4?", "7"), ("What is 10 - 2?", "8"), ("What is 6 + 1?", "7"),
             ("Sam has 2 pens and buys 2 more. How many pens does he have?", "4")]


def make_taskset(folder: Path) -> Path:
    frame = pd.DataFrame({"task_id": [f"toy-{i}" for i in range(len(QUESTIONS))],
                          "question": [q for q, _ in QUESTIONS],
                          "answer": [f"#### {a}" for _, a in QUESTIONS],
                          "difficulty": [1, 1, 1, 2]})
    tasks.save_taskset({"train": frame}, folder, {"kind": "toy", "source": "tests"})
    return folder


def backend(settings: ModelSettings, **kwargs) -> EndpointBackend:
    return EndpointBackend(settings, lenient=True, concurrency=2, timeout=120, **kwargs)


def same_rollouts(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a[COMPARED].reset_index(drop=True),
                                  b[COMPARED].reset_index(drop=True), check_dtype=False)


@pytest.fixture(scope="module")
def server():
    with LocalServer(n_ctx=512) as srv:
        yield srv


@pytest.fixture(scope="module")
def settings(server):
    return server.settings(**DECODING)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, settings):
    """One uninterrupted measurement: (taskset dir, side table, result)."""
    root = tmp_path_factory.mktemp("reference")
    taskset = make_taskset(root / "toy")
    result = measure_pass_rates(taskset, COLUMN, backend(settings), n=N, seed=SEED,
                                chunk_size=2, rollouts_dir=root / "side", progress=False)
    return taskset, rollouts.read_side_table(root / "side"), result


# -- pieces ---------------------------------------------------------------------------------


def test_rollout_seeds_are_stable_and_distinct():
    seeds = {rollouts.rollout_seed(0, t, r) for t in range(50) for r in range(16)}
    assert len(seeds) == 800
    assert rollouts.rollout_seed(5, 1, 2) == rollouts.rollout_seed(5, 1, 2)
    assert rollouts.rollout_seed(5, 1, 2) != rollouts.rollout_seed(6, 1, 2)
    assert all(0 <= s < 2**31 for s in seeds)


def test_task_dicts_are_validated():
    out = rollouts.as_task_dicts(pd.DataFrame({"question": ["a", "b"], "answer": ["#### 1"] * 2}))
    assert [t["row"] for t in out] == [0, 1]
    with pytest.raises(ValueError, match="row 1: 'question'"):
        rollouts.as_task_dicts([{"question": "a", "answer": "1"}, {"question": "", "answer": "2"}])
    with pytest.raises(ValueError, match="row 0: no 'answer'"):
        rollouts.as_task_dicts([{"question": "a"}])


def test_accuracy_table_rescores_replies():
    table = pd.DataFrame({"response": ["so \\boxed{7}", "the answer is 8", None],
                          "truth": ["7", "8", "9"], "reward": [1.0, 0.0, 0.0]})
    acc = rollouts.accuracy_table(table).set_index("judge")
    assert acc.loc["run's judge (reward)", "accuracy"] == pytest.approx(1 / 3)
    assert acc.loc["strict: box or ####"].tolist() == pytest.approx([1 / 3, 1 / 3])
    assert acc.loc["lenient: + last number"].tolist() == pytest.approx([2 / 3, 2 / 3])


def test_driver_imports_without_agentscope_ray_or_datasets():
    """The GPU machine has torch, transformers, pandas, pyarrow and numpy only."""
    code = ("import sys\n"
            "for name in ('agentscope', 'ray', 'datasets', 'openai'):\n"
            "    sys.modules[name] = None\n"
            "import mathagent.rollouts as r\n"
            "from mathagent.cli import build_parser\n"
            "args = build_parser('measure-pass-rates').parse_args("
            "['measure-pass-rates', '--column', 'x', '--backend', 'hf'])\n"
            "print(args.backend, r.ROLLOUT_KEYS[0])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=hang_bound(300), cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["hf", "rollout"]


# -- the batch runner -------------------------------------------------------------------------


@pytest.mark.slow
def test_runner_table(settings):
    frame = pd.DataFrame({"task_id": ["t0", "t1", "t2"],
                          "question": [q for q, _ in QUESTIONS[:3]],
                          "answer": [f"#### {a}" for _, a in QUESTIONS[:3]]})
    table = rollouts.run_tasks(frame, settings, seed=1, concurrency=2, progress=False)
    assert list(table["row"]) == [0, 1, 2] and set(table["rollout"]) == {0}
    assert list(table["task_id"]) == ["t0", "t1", "t2"]          # the taskset's own ids
    for col in ("question", "truth", "response", "extracted", "reward", "accuracy", "latency_s",
                "tokens", "input_tokens", "calls", "model_s", "error", "tool_calls",
                "tool_errors"):
        assert col in table.columns
    assert table["error"].isna().all()
    assert table["response"].map(lambda t: isinstance(t, str) and len(t) > 0).all()
    assert table["tokens"].between(1, DECODING["max_tokens"]).all()
    assert (table["calls"] == 1).all()
    # the reference agent offered no tool call (one model call, a text reply)
    assert (table["tool_calls"] == 0).all() and (table["tool_errors"] == 0).all()
    assert (table["latency_s"] >= table["model_s"]).all()
    assert set(table["reward"]) <= {0.0, 1.0}
    summary = rollouts.summarize(table)
    assert summary["rollouts"] == 3 and summary["errors"] == 0


@contextlib.contextmanager
def stalled_endpoint():
    """An endpoint that accepts connections and never answers; yields its base URL.

    A timeout against it fires on any machine, however fast its model server would be."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)  # the kernel completes the connections; nobody reads them
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"


def test_runner_survives_timeouts():
    with stalled_endpoint() as url:
        table = rollouts.run_tasks([{"question": "What is 1 + 1?", "answer": "#### 2"}] * 2,
                                   ModelSettings(base_url=url, **DECODING), n=2, timeout=1.0,
                                   progress=False)
    assert len(table) == 4
    assert table["error"].str.startswith("timeout after").all()
    assert table["tool_calls"].isna().all() and table["tool_errors"].isna().all()  # unknown
    # failed, not wrong: no reward at all, and the summary counts them as failed
    assert table["reward"].isna().all() and table["response"].isna().all()
    summary = rollouts.summarize(table)
    assert summary["failed"] == 4 and summary["failures"] == {"timeout": 4}


def test_runner_records_the_agents_tool_calls():
    """A rollout's record carries the workflow's tool calls and tool errors (a scripted chat
    model calls the sandboxed tool twice, once with code that fails, then answers)."""
    import asyncio

    from agentscope.message import TextBlock, ToolUseBlock
    from agentscope.model import ChatModelBase, ChatResponse

    from mathagent.agent import AgentOptions, make_workflow
    from mathagent.judge import get_judge

    class Scripted(ChatModelBase):
        def __init__(self):
            super().__init__("scripted", stream=False)
            self.replies = [[ToolUseBlock(type="tool_use", id=str(i), name="execute_python_code",
                                          input={"code": code})]
                            for i, code in enumerate(["print(3 + 4)", "print(x)"])]
            self.replies.append([TextBlock(type="text", text="The answer is \\boxed{7}.")])

        async def __call__(self, messages, tools=None, tool_choice=None, **kwargs):
            return ChatResponse(content=self.replies.pop(0))

    workflow = make_workflow(AgentOptions(python_tool=True, console_output=False))
    record = asyncio.run(rollouts._one_rollout(
        {"question": "What is 3 + 4?", "answer": "#### 7"}, 0, Scripted(), workflow,
        get_judge(False), timeout=60.0, lenient=False, keep_response=True))
    assert record["error"] is None and record["reward"] == 1.0
    assert (record["tool_calls"], record["tool_errors"]) == (2, 1)
    assert set(rollouts.ROLLOUT_KEYS) | set(rollouts.RUNNER_KEYS) == set(record)


def test_runner_survives_a_dead_endpoint():
    dead = ModelSettings(base_url=f"http://127.0.0.1:{free_port()}/v1", max_retries=0,
                         max_tokens=4)
    table = rollouts.run_tasks([{"question": "What is 1 + 1?", "answer": "#### 2"}], dead,
                               n=3, progress=False)
    assert len(table) == 3
    assert table["error"].str.contains("APIConnectionError").all()
    assert table["error"].str.startswith("endpoint error: ").all()
    assert table["reward"].isna().all() and table["accuracy"].isna().all()


@pytest.mark.slow
def test_run_agent_command(tmp_path, server):
    taskset = make_taskset(tmp_path / "toy")
    out = tmp_path / "run" / "results.csv"
    code = cli_main(["run-agent", "--taskset", str(taskset), "--split", "train", "--limit", "2",
                     "--base-url", server.base_url, "--max-tokens", "8", "--out", str(out)])
    assert code == 0
    table = pd.read_csv(out)
    assert len(table) == 2 and table["error"].isna().all()
    params = json.loads((out.parent / "params.json").read_text())
    assert params["summary"]["rollouts"] == 2
    assert params["model"]["temperature"] == 0.0 and params["agent"]["prompt_variant"] == "reference"


# -- pass-rate measurement ----------------------------------------------------------------------


@pytest.mark.slow
def test_measurement_writes_the_column_and_provenance(reference):
    taskset, side, result = reference
    assert result.complete and result.failed_rollouts == 0
    frame = pd.read_parquet(taskset / "train.parquet")
    assert len(frame) == len(QUESTIONS)                                 # row count unchanged
    assert list(frame["question"]) == [q for q, _ in QUESTIONS]        # rows untouched
    values = frame[COLUMN].to_numpy()
    assert ((values >= 0) & (values <= 1)).all()
    np.testing.assert_allclose(values, result.values)
    # the column is the per-task mean of the side table's accuracies
    assert len(side) == len(QUESTIONS) * N
    np.testing.assert_allclose(values, side.groupby("row")["accuracy"].mean().to_numpy())
    assert side["response"].map(lambda t: isinstance(t, str)).all()
    tasks.load_taskset(taskset, feature_keys=[COLUMN])                   # still a valid taskset
    prov = json.loads((taskset / "provenance.json").read_text())
    record = prov["measurements"][COLUMN]["train"]
    assert prov["kind"] == "toy"                                         # earlier keys kept
    assert (record["n"], record["seed"], record["tasks"]) == (N, SEED, len(QUESTIONS))
    decoding = record["settings"]
    assert decoding["temperature"] == 1.0 and decoding["max_tokens"] == 8
    assert decoding["prompt_variant"] == "reference" and decoding["python_tool"] is False
    assert decoding["judge"] == "lenient_judge"


@pytest.mark.slow
def test_resume_after_a_partial_run(tmp_path, settings, reference):
    _, ref_side, ref = reference
    taskset = make_taskset(tmp_path / "toy")
    first = measure_pass_rates(taskset, COLUMN, backend(settings), n=N, seed=SEED, chunk_size=3,
                               rollouts_dir=tmp_path / "side", max_tasks=1, progress=False)
    assert not first.complete and first.measured_this_run == 1
    assert np.isnan(first.values[1:]).all()
    assert COLUMN not in pq.read_schema(taskset / "train.parquet").names   # not written yet
    second = measure_pass_rates(taskset, COLUMN, backend(settings), n=N, seed=SEED,
                                chunk_size=3, rollouts_dir=tmp_path / "side", progress=False)
    assert second.complete and second.resumed == 1 and second.measured_this_run == 3
    same_rollouts(rollouts.read_side_table(tmp_path / "side"), ref_side)
    np.testing.assert_array_equal(second.values, ref.values)


@pytest.mark.slow
def test_resume_after_sigkill(tmp_path, server, reference):
    _, ref_side, ref = reference
    taskset = make_taskset(tmp_path / "toy")
    side_dir = tmp_path / "side"
    command = [sys.executable, "-m", "mathagent", "measure-pass-rates", "--taskset", str(taskset),
               "--column", COLUMN, "--n", str(N), "--seed", str(SEED), "--lenient",
               "--base-url", server.base_url, "--temperature", "1.0", "--max-tokens", "8",
               "--concurrency", "2", "--chunk-size", "1", "--rollouts-dir", str(side_dir)]
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + hang_bound(600)
        while not list(side_dir.glob("part-*.parquet")) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=hang_bound(60))
    finally:
        if proc.poll() is None:
            proc.kill()
    done = rollouts.read_side_table(side_dir)["row"].nunique()
    assert 1 <= done < len(QUESTIONS)                   # killed mid-run, chunks kept
    assert COLUMN not in pq.read_schema(taskset / "train.parquet").names
    result = measure_pass_rates(taskset, COLUMN, backend(ModelSettings(
        base_url=server.base_url, **DECODING)), n=N, seed=SEED, chunk_size=2,
        rollouts_dir=side_dir, progress=False)
    assert result.complete and result.resumed == done
    same_rollouts(rollouts.read_side_table(side_dir), ref_side)
    np.testing.assert_array_equal(pd.read_parquet(taskset / "train.parquet")[COLUMN], ref.values)


@pytest.mark.slow
def test_ray_fanout_over_two_servers_matches_one(tmp_path, server, settings, reference):
    import ray

    _, ref_side, ref = reference
    taskset = make_taskset(tmp_path / "toy")
    with LocalServer(n_ctx=512) as second:
        fanout = rollouts.RayFanout(
            [functools.partial(EndpointBackend, s.settings(**DECODING), lenient=True,
                               concurrency=2, timeout=120) for s in (server, second)],
            address="local")
        try:
            assert fanout.settings()["endpoints"] == [server.base_url, second.base_url]
            result = measure_pass_rates(taskset, COLUMN, fanout, n=N, seed=SEED, chunk_size=1,
                                        rollouts_dir=tmp_path / "side", progress=False)
        finally:
            fanout.shutdown()
            ray.shutdown()
        second_log = second.log_path.read_text()
    assert result.complete
    same_rollouts(rollouts.read_side_table(tmp_path / "side"), ref_side)
    np.testing.assert_array_equal(result.values, ref.values)
    # the second server answered rollouts, not just its own warm-up request
    assert second_log.count("POST /v1/chat/completions") > 1


@pytest.mark.slow
def test_changed_settings_refuse_to_resume(reference, settings, tmp_path):
    taskset, _, _ = reference
    side_dir = tmp_path / "side"
    shutil.copytree(Path(reference[2].side_table), side_dir)
    with pytest.raises(MeasureError, match="different n"):
        measure_pass_rates(taskset, COLUMN, backend(settings), n=N + 1, seed=SEED,
                           rollouts_dir=side_dir, progress=False)
    hotter = backend(ModelSettings(base_url=settings.base_url, temperature=0.5, max_tokens=8))
    with pytest.raises(MeasureError, match="different backend settings"):
        measure_pass_rates(taskset, COLUMN, hotter, n=N, seed=SEED, rollouts_dir=side_dir,
                           progress=False)


def test_existing_column_needs_overwrite(tmp_path):
    taskset = make_taskset(tmp_path / "toy")
    frame = pd.read_parquet(taskset / "train.parquet")
    frame[COLUMN] = 0.5
    tasks.save_taskset({"train": frame}, taskset, {"kind": "toy"})
    dead = ModelSettings(base_url="http://127.0.0.1:9/v1")
    with pytest.raises(MeasureError, match="exists already; pass --overwrite"):
        measure_pass_rates(taskset, COLUMN, EndpointBackend(dead), rollouts_dir=tmp_path / "s",
                           progress=False)


def test_unreachable_endpoint_is_a_clear_error(tmp_path, capsys):
    taskset = make_taskset(tmp_path / "toy")
    url = f"http://127.0.0.1:{free_port()}/v1"
    code = cli_main(["measure-pass-rates", "--taskset", str(taskset), "--column", COLUMN,
                     "--base-url", url, "--rollouts-dir", str(tmp_path / "side")])
    assert code == 2
    err = capsys.readouterr().err
    assert url in err and "cannot reach" in err
    assert COLUMN not in pq.read_schema(taskset / "train.parquet").names


def test_bad_taskset_is_a_clear_error(tmp_path, capsys):
    folder = tmp_path / "bad"
    folder.mkdir()
    pd.DataFrame({"question": ["ok", ""], "answer": ["#### 1", "#### 2"]}).to_parquet(
        folder / "train.parquet")
    code = cli_main(["measure-pass-rates", "--taskset", str(folder), "--column", COLUMN,
                     "--base-url", "http://127.0.0.1:9/v1"])
    assert code == 2
    err = capsys.readouterr().err
    assert "train.parquet" in err and "row 1" in err and "question" in err


@pytest.mark.slow
def test_hf_backend_plugs_into_the_driver(tmp_path):
    """The GPU backend (transformers sampling of the same bundled model) on a CPU, tiny."""
    taskset = make_taskset(tmp_path / "toy")
    hf = HFBackend(device="cpu", max_new_tokens=8, temperature=1.0)
    result = measure_pass_rates(taskset, "hf_pass_rate", hf, n=2, seed=0, chunk_size=4,
                                rollouts_dir=tmp_path / "side", progress=False)
    assert result.complete
    side = rollouts.read_side_table(tmp_path / "side")
    assert len(side) == len(QUESTIONS) * 2 and side["error"].isna().all()
    values = pd.read_parquet(taskset / "train.parquet")["hf_pass_rate"]
    assert values.between(0, 1).all()
    record = json.loads((taskset / "provenance.json").read_text())["measurements"]["hf_pass_rate"]
    assert record["train"]["settings"]["backend"] == "hf"


def test_endpoint_flags_keep_their_names_and_defaults():
    """The endpoint, agent and batching flags are derived from one declaration per setting;
    each command keeps its own defaults (temperature 0 for run-agent, 1 for measuring)."""
    from mathagent.cli import build_parser
    from mathagent.rollouts.options import MeasureSettings, RunAgentSettings
    from mathagent.settings import from_flags

    agent = from_flags(RunAgentSettings, build_parser("run-agent").parse_args(["run-agent"]))
    assert (agent.temperature, agent.max_tokens, agent.n_ctx, agent.base_url) == (0.0, 512,
                                                                                  2048, None)
    assert (agent.lenient, agent.python_tool, agent.responses, agent.concurrency) == (
        False, False, True, None)
    args = build_parser("measure-pass-rates").parse_args([
        "measure-pass-rates", "--column", "c", "--base-url", "http://a/v1", "http://b/v1",
        "--lenient", "--python-tool", "--no-responses", "--seed", "4", "--timeout", "9",
        "--prompt-variant", "single_braces", "--concurrency", "3"])
    measure = from_flags(MeasureSettings, args)
    assert measure.temperature == 1.0 and measure.base_url == ["http://a/v1", "http://b/v1"]
    assert (measure.lenient, measure.python_tool, measure.responses) == (True, True, False)
    assert (measure.seed, measure.timeout, measure.concurrency) == (4, 9.0, 3)
    assert measure.prompt_variant == "single_braces" and args.column == "c"


def test_measure_help_lists_backends():
    out = subprocess.run([sys.executable, "-m", "mathagent", "measure-pass-rates", "--help"],
                         capture_output=True, text=True, timeout=hang_bound(300), cwd=REPO,
                         env={**os.environ, "COLUMNS": "120"})
    assert out.returncode == 0
    assert "{endpoint,hf}" in out.stdout and "--max-tasks" in out.stdout

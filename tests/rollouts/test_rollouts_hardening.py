"""Hardening of the batch runner and of pass-rate measurement: failures, signals, races.

Most failure cases run against :class:`StandIn`, a small OpenAI-compatible stand-in
server on 127.0.0.1 started inside the test process. It is a stand-in, not the bundled
llama.cpp server, because these tests must make the endpoint fail *on cue* (stop
answering after exactly k replies, hold a request until the test has sent a signal),
which a real server cannot be made to do deterministically, and because the failure
paths then cost milliseconds instead of model time. Its replies are a pure function of
the request (question and per-rollout seed), so a resumed run must reproduce an
uninterrupted one exactly.

The wrong-model checks and the random-SIGKILL test use the real bundled llama.cpp server
(greedy-free but seeded sampling, prompt reuse off, replies of at most 8 tokens), as
tests/rollouts/test_rollouts.py does.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from bounds import hang_bound

from mathagent import rollouts, tasks
from mathagent.cli import main as cli_main
from mathagent.rollouts import EndpointBackend, MeasureError, measure_pass_rates
from mathagent.serving import LocalServer, ModelSettings

REPO = Path(__file__).resolve().parents[2]
COLUMN = "toy_pass_rate"
QUESTIONS = [("What is 3 + 4?", "7"), ("What is 10 - 2?", "8"), ("What is 6 + 1?", "7"),
             ("Sam has 2 pens and buys 2 more. How many pens does he have?", "4")]
COMPARED = ["row", "rollout", "reward", "accuracy", "response", "extracted", "error"]
STAND_IN_MODEL = "stand-in-math-model"


def make_taskset(folder: Path, questions=QUESTIONS) -> Path:
    frame = pd.DataFrame({"task_id": [f"toy-{i}" for i in range(len(questions))],
                          "question": [q for q, _ in questions],
                          "answer": [f"#### {a}" for _, a in questions],
                          "difficulty": [1] * len(questions)})
    tasks.save_taskset({"train": frame}, folder, {"kind": "toy", "source": "tests"})
    return folder


def has_column(taskset: Path, column: str = COLUMN) -> bool:
    return column in pq.read_schema(taskset / "train.parquet").names


def same_rollouts(a: pd.DataFrame, b: pd.DataFrame, columns=COMPARED) -> None:
    pd.testing.assert_frame_equal(a[columns].reset_index(drop=True),
                                  b[columns].reset_index(drop=True), check_dtype=False)


# -- the stand-in endpoint ------------------------------------------------------------------


class StandIn:
    """Stand-in OpenAI-compatible endpoint (see the module docstring for why a stand-in).

    ``GET /v1/models`` lists :data:`STAND_IN_MODEL`; ``POST /v1/chat/completions`` answers
    the last user message with ``\\boxed{truth}`` when the request's seed is not a multiple
    of 3, else with a wrong box. ``die_after = k`` makes it hang up without a reply on
    every request after its k-th reply (a dead endpoint, as the client sees it);
    ``hold_after = k`` makes requests after the k-th wait until :attr:`release` is set,
    with :attr:`holding` set while one waits.
    """

    def __init__(self, answers: dict[str, str] | None = None, model: str = STAND_IN_MODEL):
        self.answers = answers or dict(QUESTIONS)
        self.model = model
        self.die_after: int | None = None
        self.hold_after: int | None = None
        self.replies = 0
        self.requests = 0
        self.refused = 0
        self.lock = threading.Lock()
        self.holding = threading.Event()
        self.release = threading.Event()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep pytest's output clean
                pass

            def _json(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True   # the client was killed mid-request

            def do_GET(self):
                if self.path.rstrip("/").endswith("/models"):
                    self._json(200, {"object": "list", "data": [
                        {"id": stand_in.model, "object": "model", "owned_by": "tests"}]})
                else:
                    self._json(404, {"error": {"message": "not found"}})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with stand_in.lock:
                    stand_in.requests += 1
                    count = stand_in.requests
                    dead = stand_in.die_after is not None and stand_in.replies >= stand_in.die_after
                    if dead:
                        stand_in.refused += 1
                    else:
                        stand_in.replies += 1
                if dead:  # hang up without a reply: the client sees a dropped connection
                    self.close_connection = True
                    return
                if stand_in.hold_after is not None and count > stand_in.hold_after:
                    stand_in.holding.set()
                    stand_in.release.wait(timeout=hang_bound(600))
                self._json(200, stand_in.completion(body))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)

    def completion(self, body: dict) -> dict:
        question = next((m.get("content") for m in reversed(body.get("messages", []))
                         if m.get("role") == "user"), "")
        if isinstance(question, list):
            question = " ".join(str(p.get("text", "")) for p in question)
        truth = self.answers.get(str(question).strip(), "0")
        seed = int(body.get("seed") or 0)
        answer = truth if seed % 3 else f"{truth}1"
        return {"id": f"chatcmpl-{seed}", "object": "chat.completion", "created": 0,
                "model": self.model,
                "choices": [{"index": 0, "finish_reason": "stop", "message": {
                    "role": "assistant", "content": f"The answer is \\boxed{{{answer}}}."}}],
                "usage": {"prompt_tokens": 20, "completion_tokens": 6, "total_tokens": 26}}

    def settings(self, **overrides) -> ModelSettings:
        return ModelSettings(base_url=self.base_url, model=self.model, temperature=1.0,
                             max_tokens=8, **overrides)

    def __enter__(self) -> StandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stand_in():
    with StandIn() as srv:
        yield srv


def measure_args(taskset: Path, side: Path, base_url: str, *extra: str,
                 model: str = STAND_IN_MODEL) -> list[str]:
    return ["measure-pass-rates", "--taskset", str(taskset), "--column", COLUMN,
            "--n", "2", "--seed", "3", "--lenient", "--base-url", base_url, "--model", model,
            "--temperature", "1.0", "--max-tokens", "8", "--concurrency", "2",
            "--chunk-size", "1", "--rollouts-dir", str(side), *extra]


def agent_args(taskset: Path, out: Path, base_url: str, *extra: str,
               model: str = STAND_IN_MODEL) -> list[str]:
    return ["run-agent", "--taskset", str(taskset), "--split", "train", "--base-url", base_url,
            "--model", model, "--max-tokens", "8", "--concurrency", "2", "--out", str(out),
            *extra]


def error_lines(err: str) -> list[str]:
    """stderr without tqdm's progress bars."""
    lines = [line.rsplit("\r", 1)[-1].strip() for line in err.splitlines()]
    return [line for line in lines if line and "rollout/s" not in line
            and "it/s" not in line and "s/rollout" not in line and "|" not in line]


# -- 1. failed rollouts are failed, not reward 0 ---------------------------------------------


def test_an_agent_exception_is_a_failed_rollout_not_reward_0():
    async def broken_workflow(task, model):
        raise RuntimeError("the agent fell over")

    async def never_called_judge(task, response):  # pragma: no cover - must not run
        raise AssertionError("the judge ran on a failed rollout")

    import asyncio
    record = asyncio.run(rollouts._one_rollout({"question": "q", "answer": "#### 1", "row": 0},
                                               0, None, broken_workflow, never_called_judge,
                                               timeout=30, lenient=True, keep_response=True))
    assert record["error"] == "RuntimeError: the agent fell over"
    assert np.isnan(record["reward"]) and np.isnan(record["accuracy"])
    assert rollouts.failure_kind(record["error"]) == "exception"


class FlakyBackend:
    """In-process backend: rollouts listed in ``fail`` come back failed the first time,
    the way backends (and this package before the fix) report failures: reward 0 plus an
    error text. Rewards are a pure function of (row, rollout)."""

    seeds_per_task = True

    def __init__(self, fail: set[tuple[int, int]]):
        self.fail = set(fail)
        self.calls = 0

    def settings(self) -> dict:
        return {"backend": "flaky"}

    def run_batch(self, tasks, n, seed):
        self.calls += 1
        out = []
        for task in tasks:
            recs = []
            for r in range(n):
                key = (task["row"], r)
                ok = key not in self.fail
                self.fail.discard(key)
                reward = float((task["row"] + r) % 2) if ok else 0.0
                recs.append({"rollout": r, "reward": reward, "accuracy": reward,
                             "response": "x", "extracted": None, "latency_s": 0.0,
                             "tokens": 1, "error": None if ok else
                             "endpoint error: APIConnectionError: Connection error."})
            out.append(recs)
        return out


def test_failed_rollouts_block_the_column_and_are_retried_on_resume(tmp_path):
    reference = measure_pass_rates(make_taskset(tmp_path / "ref"), COLUMN, FlakyBackend(set()),
                                   n=2, chunk_size=2, rollouts_dir=tmp_path / "ref_side",
                                   progress=False)
    taskset = make_taskset(tmp_path / "toy")
    backend = FlakyBackend({(1, 0), (2, 1), (3, 0), (3, 1)})
    first = measure_pass_rates(taskset, COLUMN, backend, n=2, chunk_size=2,
                               rollouts_dir=tmp_path / "side", progress=False)
    assert not first.complete
    assert first.failed_rollouts == 4 and first.total_rollouts == 8
    assert first.failures == {"endpoint error": 4}
    assert first.failure_message().startswith(
        "4 of 8 rollouts failed (4 endpoint errors); the column 'toy_pass_rate' was not "
        "written; rerun to retry them")
    assert not has_column(taskset)                        # not written as if complete
    assert np.isnan(first.values[1:]).all() and not np.isnan(first.values[0])
    side = rollouts.read_side_table(tmp_path / "side")
    failed = side[side["error"].notna()]
    assert len(failed) == 4 and failed["reward"].isna().all()   # recorded as failed
    second = measure_pass_rates(taskset, COLUMN, backend, n=2, chunk_size=2,
                                rollouts_dir=tmp_path / "side", progress=False)
    assert second.complete and second.failed_rollouts == 0
    assert second.resumed == 1 and second.measured_this_run == 3   # only unfinished tasks
    np.testing.assert_array_equal(second.values, reference.values)
    np.testing.assert_array_equal(pd.read_parquet(taskset / "train.parquet")[COLUMN],
                                  reference.values)
    side = rollouts.read_side_table(tmp_path / "side")
    assert len(side) == 8 and side["error"].isna().all()         # retries won over failures


def test_endpoint_dying_mid_run_exits_nonzero_and_a_rerun_retries(tmp_path, stand_in, capsys):
    reference = make_taskset(tmp_path / "ref")
    assert cli_main(measure_args(reference, tmp_path / "ref_side", stand_in.base_url)) == 0
    expected = pd.read_parquet(reference / "train.parquet")[COLUMN].to_numpy()
    assert 0 < expected.mean() < 1                                   # a non-trivial column
    capsys.readouterr()

    taskset = make_taskset(tmp_path / "toy")
    side = tmp_path / "side"
    stand_in.die_after = stand_in.replies + 3         # answers 3 more requests, then dies
    code = cli_main(measure_args(taskset, side, stand_in.base_url))
    err = capsys.readouterr().err
    assert code == 1, err
    assert ("error: 5 of 8 rollouts failed (5 endpoint errors); the column 'toy_pass_rate' "
            "was not written; rerun to retry them") in err
    assert "Traceback" not in err
    assert not has_column(taskset)
    assert COLUMN not in json.loads((taskset / "provenance.json").read_text()).get(
        "measurements", {})

    stand_in.die_after = None                          # the server is back
    code = cli_main(measure_args(taskset, side, stand_in.base_url))
    out, err = capsys.readouterr()
    assert code == 0, err
    np.testing.assert_array_equal(pd.read_parquet(taskset / "train.parquet")[COLUMN], expected)
    same_rollouts(rollouts.read_side_table(side), rollouts.read_side_table(tmp_path / "ref_side"))


def test_run_agent_with_failed_rollouts_exits_nonzero(tmp_path, stand_in, capsys):
    taskset = make_taskset(tmp_path / "toy")
    out = tmp_path / "run" / "results.csv"
    stand_in.die_after = 1
    code = cli_main(agent_args(taskset, out, stand_in.base_url))
    err = capsys.readouterr().err
    assert code == 1, err
    assert "error: 3 of 4 rollouts failed (3 endpoint errors)" in err
    table = pd.read_csv(out)                           # nothing lost: the rows are there
    assert len(table) == 4 and table["error"].notna().sum() == 3
    assert table.loc[table["error"].notna(), "reward"].isna().all()
    summary = json.loads((out.parent / "params.json").read_text())["summary"]
    assert summary["failed"] == 3 and summary["rollouts"] == 4


# -- the served model is checked before any rollout --------------------------------------------


@pytest.fixture(scope="module")
def server():
    with LocalServer(n_ctx=512) as srv:
        yield srv


def completions(server: LocalServer) -> int:
    return server.log_path.read_text(errors="replace").count("POST /v1/chat/completions")


@pytest.mark.slow
def test_measure_with_a_model_the_server_does_not_serve(tmp_path, server, capsys):
    taskset = make_taskset(tmp_path / "toy")
    before = completions(server)
    code = cli_main(measure_args(taskset, tmp_path / "side", server.base_url, "--n", "1",
                                 model="no-such-model"))
    err = capsys.readouterr().err
    assert code == 2, err
    lines = error_lines(err)
    assert len(lines) == 1, lines
    assert "--model 'no-such-model'" in lines[0] and "smollm2-135m-instruct" in lines[0]
    assert server.base_url in lines[0]
    assert completions(server) == before               # no rollout was attempted
    assert not has_column(taskset)


@pytest.mark.slow
def test_run_agent_with_a_model_the_server_does_not_serve(tmp_path, server, capsys):
    taskset = make_taskset(tmp_path / "toy")
    out = tmp_path / "run" / "results.csv"
    before = completions(server)
    code = cli_main(agent_args(taskset, out, server.base_url, "--limit", "1",
                               model="no-such-model"))
    err = capsys.readouterr().err
    assert code == 2, err
    lines = error_lines(err)
    assert len(lines) == 1 and "no-such-model" in lines[0], lines
    assert "it serves: smollm2-135m-instruct" in lines[0]
    assert completions(server) == before
    assert not out.exists()


# -- 2. smaller cases --------------------------------------------------------------------------


def test_negative_limit_is_a_one_line_error(tmp_path, stand_in, capsys):
    taskset = make_taskset(tmp_path / "toy")
    out = tmp_path / "run" / "results.csv"
    code = cli_main(agent_args(taskset, out, stand_in.base_url, "--limit", "-5"))
    err = capsys.readouterr().err
    assert code == 2
    assert error_lines(err) == ["error: --limit -5: must be >= 0 (N runs the first N tasks "
                                "of the split, 0 runs all of them)"]
    assert stand_in.requests == 0 and not out.exists()


@pytest.mark.parametrize("value", ["nan", "inf", "1e9", "0"])
def test_an_unbounded_tool_timeout_is_a_one_line_error(tmp_path, stand_in, capsys, value):
    taskset = make_taskset(tmp_path / "toy")
    out = tmp_path / "run" / "results.csv"
    code = cli_main(agent_args(taskset, out, stand_in.base_url, "--python-tool",
                               "--tool-timeout", value))
    assert code == 2
    assert error_lines(capsys.readouterr().err) == [
        "error: --tool-timeout must be a number of seconds above 0 and at most 3600, got "
        f"{float(value)!r}"]
    assert stand_in.requests == 0 and not out.exists()


def test_limit_0_runs_every_task(tmp_path, stand_in):
    """(Documents the meaning of 0; this behaviour is unchanged.)"""
    taskset = make_taskset(tmp_path / "toy")
    out = tmp_path / "run" / "results.csv"
    assert cli_main(agent_args(taskset, out, stand_in.base_url, "--limit", "0")) == 0
    assert len(pd.read_csv(out)) == len(QUESTIONS)


def test_run_agent_refuses_to_overwrite_without_force(tmp_path, stand_in, capsys, monkeypatch):
    taskset = make_taskset(tmp_path / "toy")
    out = tmp_path / "run" / "results.csv"
    assert cli_main(agent_args(taskset, out, stand_in.base_url, "--limit", "1")) == 0
    old_csv, old_params = out.read_text(), (out.parent / "params.json").read_text()
    requests = stand_in.requests
    capsys.readouterr()

    code = cli_main(agent_args(taskset, out, stand_in.base_url, "--limit", "2"))
    err = capsys.readouterr().err
    assert code == 2
    assert error_lines(err) == [f"error: {out} exists already (an earlier run's output); "
                                "pass --force to replace it or choose another --out"]
    assert stand_in.requests == requests              # refused before any model time
    assert out.read_text() == old_csv

    # a failure while the new output is written leaves the old one whole
    real_write_text = Path.write_text

    def failing_write_text(self, data, *args, **kwargs):
        if self.name == "params.json":
            raise OSError(28, "No space left on device")
        return real_write_text(self, data, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", failing_write_text)
    code = cli_main(agent_args(taskset, out, stand_in.base_url, "--limit", "2", "--force"))
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert code == 2
    lines = error_lines(err)
    assert len(lines) == 1 and "No space left on device" in lines[0], lines
    assert out.read_text() == old_csv
    assert (out.parent / "params.json").read_text() == old_params
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "toy"]   # no temp folders

    assert cli_main(agent_args(taskset, out, stand_in.base_url, "--limit", "2", "--force")) == 0
    assert len(pd.read_csv(out)) == 2
    assert json.loads((out.parent / "params.json").read_text())["limit"] == 2
    assert sorted(p.name for p in out.parent.iterdir()) == ["params.json", "results.csv"]


def _ctrl_c_reaches_it() -> None:
    """A child's Ctrl-C as in a terminal: a test run started in the background of a shell
    ignores SIGINT, and its children would inherit that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def ctrl_c_when_held(args: list[str], stand_in, never: str) -> tuple[int, str]:
    """Run ``python -m mathagent ARGS``, press Ctrl-C (SIGINT) once the stand-in server holds
    a request, and return the exit code and stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "mathagent", *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_ctrl_c_reaches_it)
    try:
        assert stand_in.holding.wait(timeout=hang_bound(600)), never
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=hang_bound(300))
    finally:
        stand_in.release.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err


def test_ctrl_c_saves_progress_and_exits_130(tmp_path, stand_in):
    taskset = make_taskset(tmp_path / "toy")
    side = tmp_path / "side"
    stand_in.hold_after = 2             # the first task (2 rollouts) finishes, then it waits
    returncode, err = ctrl_c_when_held(measure_args(taskset, side, stand_in.base_url), stand_in,
                                       "the measurement never reached task 2")
    assert returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert error_lines(err)[-1] == (f"interrupted: progress saved in {side} (1 of 4 tasks "
                                    "done); rerun the same command to resume")
    assert rollouts.read_side_table(side)["row"].tolist() == [0, 0]
    stand_in.hold_after = None
    result = measure_pass_rates(taskset, COLUMN, EndpointBackend(
        stand_in.settings(), lenient=True, concurrency=2), n=2, seed=3, chunk_size=1,
        rollouts_dir=side, progress=False)
    assert result.complete and result.resumed == 1


def test_ctrl_c_of_run_agent_keeps_the_old_output(tmp_path, stand_in):
    taskset = make_taskset(tmp_path / "toy")
    out = tmp_path / "run" / "results.csv"
    assert cli_main(agent_args(taskset, out, stand_in.base_url, "--limit", "1")) == 0
    old = {p.name: p.read_text() for p in out.parent.iterdir()}
    stand_in.hold_after = stand_in.requests          # the next run's requests wait
    returncode, err = ctrl_c_when_held(agent_args(taskset, out, stand_in.base_url, "--force"),
                                       stand_in, "run-agent never sent a request")
    assert returncode == 130, err
    assert "Traceback" not in err
    assert error_lines(err)[-1] == (f"interrupted: nothing was written to {out.parent}; "
                                    "rerun to start over")
    assert {p.name: p.read_text() for p in out.parent.iterdir()} == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "toy"]


_HOLD_LOCK = textwrap.dedent("""
    import sys
    from filelock import FileLock
    lock = FileLock(sys.argv[1])
    lock.acquire()
    print("held", flush=True)
    sys.stdin.read()
""")


def test_a_second_measurement_of_one_side_table_is_refused(tmp_path):
    taskset = make_taskset(tmp_path / "toy")
    side = tmp_path / "side"
    side.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(side / ".lock")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(MeasureError, match="another measurement is writing this side table"):
            measure_pass_rates(taskset, COLUMN, FlakyBackend(set()), n=2, rollouts_dir=side,
                               progress=False)
    finally:
        holder.stdin.close()
        holder.wait(timeout=hang_bound(60))
    # once the holder is gone (however it ended) the lock is free again
    assert measure_pass_rates(taskset, COLUMN, FlakyBackend(set()), n=2, rollouts_dir=side,
                              progress=False).complete


_WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    import numpy as np
    from mathagent import rollouts
    taskset, prefix, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    values = np.linspace(0, 1, 4)
    print("ready", flush=True)
    sys.stdin.readline()                      # both writers start together
    errors = 0
    for i in range(count):
        column = f"{prefix}_{i}"
        try:   # go on after an error, so that lost columns show as well as crashes
            rollouts._write_column(taskset / "train.parquet", column, values)
            rollouts._update_provenance(taskset, column, "train", {"i": i})
        except Exception as exc:
            errors += 1
            print(f"{column}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    print(f"done, {errors} errors", flush=True)
""")


def test_two_measurements_writing_different_columns_keep_both(tmp_path):
    """Two processes each write 25 columns (and their provenance records) into one split
    file at the same time, through the driver's read-modify-write."""
    taskset = make_taskset(tmp_path / "toy")
    count = 25
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(taskset), prefix,
                                 str(count)], cwd=REPO, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for prefix in ("weak", "strong")]
    try:
        for w in writers:
            assert w.stdout.readline().strip() == "ready", w.stderr.read()
        for w in writers:
            w.stdin.write("go\n")
            w.stdin.flush()
        results = [w.communicate(timeout=hang_bound(600)) for w in writers]
    finally:
        for w in writers:
            if w.poll() is None:
                w.kill()
                w.wait()
    wanted = {f"{p}_{i}" for p in ("weak", "strong") for i in range(count)}
    try:
        names = set(pq.read_schema(taskset / "train.parquet").names)
        measured = json.loads((taskset / "provenance.json").read_text()).get("measurements", {})
    except Exception as exc:
        pytest.fail(f"the writers left a damaged split or provenance file: {exc}")
    assert wanted <= names, f"lost columns: {sorted(wanted - names)}"
    assert wanted <= set(measured), f"lost records: {sorted(wanted - set(measured))}"
    for w, (out, err) in zip(writers, results, strict=True):
        assert w.returncode == 0 and out.strip() == "done, 0 errors", err
    tasks.load_taskset(taskset, feature_keys=sorted(wanted))          # still a valid taskset


# -- 3. SIGKILL at random moments ------------------------------------------------------------

KILL_N = 2
KILL_SEED = 5
KILL_QUESTIONS = QUESTIONS[:3]
KILLS = 3


@pytest.fixture(scope="module")
def kill_reference(tmp_path_factory, server):
    """One uninterrupted measurement of the 3-task taskset on the real server."""
    root = tmp_path_factory.mktemp("kill_reference")
    taskset = make_taskset(root / "toy", KILL_QUESTIONS)
    backend = EndpointBackend(server.settings(temperature=1.0, max_tokens=8), lenient=True,
                              concurrency=2, timeout=120)
    result = measure_pass_rates(taskset, COLUMN, backend, n=KILL_N, seed=KILL_SEED,
                                chunk_size=1, rollouts_dir=root / "side", progress=False)
    assert result.complete
    return rollouts.read_side_table(root / "side"), result.values


@pytest.mark.slow
@pytest.mark.parametrize("seed", [11, 12])
def test_random_sigkills_resume_to_the_uninterrupted_result(tmp_path, server, kill_reference,
                                                           seed):
    """Kill ``measure-pass-rates`` with SIGKILL three times at random moments (a random
    delay after a random one of the run's first model replies), then let a last run
    finish; the side table and the column must equal an uninterrupted run's. The random
    choices only decide *where* the kills land (during start-up, mid-request, mid-chunk,
    between chunks, after the column write); any landing point must give the same
    result, and a column that exists must never differ from the uninterrupted one. A first
    run that ends before its kill lands (a fast machine) starts the schedule over on a fresh
    taskset with a shorter delay, so at least one kill lands whatever the machine's speed."""
    ref_side, ref_values = kill_reference
    rng = random.Random(seed)
    finished_early, killed, restarts = 0, 0, 0
    first_delay = 0.2
    while finished_early + killed < KILLS:
        taskset = make_taskset(tmp_path / f"toy{restarts}", KILL_QUESTIONS)
        side = tmp_path / f"side{restarts}"
        command = [sys.executable, "-m", "mathagent", *measure_args(
            taskset, side, server.base_url, "--n", str(KILL_N), "--seed", str(KILL_SEED),
            model=server.model_alias)]
        while finished_early + killed < KILLS:
            before = completions(server)
            proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE)
            try:
                deadline = time.monotonic() + hang_bound(600)
                # wait for this run's k-th model reply (or for it to end on its own) ...
                k = rng.randint(1, 3 if killed == 0 else 4)
                while (completions(server) < before + k and proc.poll() is None
                       and time.monotonic() < deadline):
                    time.sleep(0.02)
                # ... then kill it a random moment later
                try:
                    proc.wait(timeout=rng.uniform(0.0, first_delay if killed == 0 else 0.6))
                except subprocess.TimeoutExpired:
                    proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=hang_bound(60))
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            if proc.returncode != 0:
                assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()
            proc.stderr.close()
            if has_column(taskset):                    # only ever the finished column
                np.testing.assert_array_equal(
                    pd.read_parquet(taskset / "train.parquet")[COLUMN], ref_values)
            if proc.returncode != 0:
                killed += 1
            elif killed == 0:
                # The first run finished before its kill landed (a machine faster than the
                # random delay): it was an uninterrupted run, and a finished measurement
                # leaves nothing for later kills. Start over on a fresh taskset, killing
                # sooner, so that at least one kill lands in a run whatever the speed.
                restarts += 1
                assert restarts <= 5, "five first runs finished before any kill landed"
                first_delay /= 4
                break
            else:
                finished_early += 1
    assert killed >= 1                                 # at least one run really was killed
    # the last, uninterrupted run (in-process: the same requests, one interpreter start less)
    final = measure_pass_rates(taskset, COLUMN, EndpointBackend(
        server.settings(temperature=1.0, max_tokens=8), lenient=True, concurrency=2,
        timeout=120), n=KILL_N, seed=KILL_SEED, chunk_size=1, rollouts_dir=side, progress=False)
    assert final.complete and final.failed_rollouts == 0
    same_rollouts(rollouts.read_side_table(side), ref_side, COMPARED + ["tokens"])
    np.testing.assert_array_equal(pd.read_parquet(taskset / "train.parquet")[COLUMN], ref_values)
    assert not list(side.glob(".tmp-*")) and not list(taskset.glob(".tmp-*"))


_FANOUT_DRIVER = r"""
import functools, json, time
from mathagent import rollouts
from mathagent.reaper import children_of_this_process
from mathagent.serving import ModelSettings

# No endpoint is called: building the fan-out starts the private Ray and its actors.
fanout = rollouts.RayFanout([functools.partial(
    rollouts.EndpointBackend, ModelSettings(base_url="http://127.0.0.1:9/v1"))], address="local")
print("PROCS:" + json.dumps(children_of_this_process()), flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_sigkilled_ray_fanout_leaves_no_ray_processes(tmp_path):
    """`measure-pass-rates --ray-address local` starts a private Ray inside the command; a
    SIGKILL of the command used to leave its GCS, raylet and workers running for about 100 s.
    The reaper stops every one of them within seconds."""
    import psutil

    proc = subprocess.Popen([sys.executable, "-c", _FANOUT_DRIVER], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, cwd=REPO)
    try:
        line = ""
        deadline = time.monotonic() + hang_bound(600)
        while not line.startswith("PROCS:") and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
        assert line.startswith("PROCS:"), "the fan-out did not start"
        recorded = json.loads(line[len("PROCS:"):])
        names = set()
        for pid, _ in recorded:
            with contextlib.suppress(psutil.Error):
                names.add(psutil.Process(pid).name())
        assert {"gcs_server", "raylet"} <= names
    finally:
        proc.kill()
        proc.wait()

    def alive():
        out = []
        for pid, created in recorded:
            try:
                p = psutil.Process(pid)
                if abs(p.create_time() - created) < 0.01 and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(pid)
            except psutil.Error:
                continue
        return out

    # the reaper needs well under 10 s, Ray alone took ~100 s: 60 s tells them apart and is
    # generous for a busy machine (part of what is proven, so not scaled)
    deadline = time.monotonic() + 60
    while alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive() == []

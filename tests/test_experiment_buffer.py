"""``mathagent.experiment.buffer``: replies and per-step numbers from a run's experience buffer.

The buffer is written by Trinity-RFT's own code, the way a run's experience pipeline writes
its input: an SQL buffer writer named ``pipeline_input`` on ``<job>/buffer/explorer_output.db``
(``trinity.buffer.pipelines.experience_pipeline``), without Ray. It holds three explore steps
of made-up experiences with known texts, rewards and tool calls; the module runs as a
subprocess, as the ``experiment`` command runs it.
"""

from __future__ import annotations

import asyncio
import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from bounds import hang_bound

from mathagent import paths

MODULE = "mathagent.experiment.buffer"
# Trinity's SQL writer declares a table's classes anew each time it opens it
pytestmark = pytest.mark.filterwarnings("ignore:This declarative base already contains")
SYSTEM = {"role": "system", "content": "Solve the task."}


def chatml(question: str) -> str:
    return (f"<|im_start|>system\nSolve the task.<|im_end|>\n<|im_start|>user\n{question}"
            f"<|im_end|>\n<|im_start|>assistant\n")


def experience(step: int, task: str, run: int, reward: float | None, *, response_tokens: int = 3,
               version: int | None = None, prompt_text: str | None = None,
               response_text: str | None = None, messages: list | None = None,
               tokens: list[int] | None = None, prompt_length: int | None = None):
    from trinity.common.experience import EID, Experience

    if tokens is None:
        prompt_length = 5
        tokens = list(range(prompt_length + response_tokens))
    return Experience(
        eid=EID(batch=step, task=task, run=run), tokens=tokens, prompt_length=prompt_length,
        reward=reward, prompt_text=prompt_text, response_text=response_text, messages=messages,
        info={"model_version": step - 1 if version is None else version})


def write_buffer(job: Path, experiences: list) -> Path:
    """Write ``experiences`` as the experience pipeline saves its input."""
    from trinity.buffer.buffer import get_buffer_writer
    from trinity.common.config import StorageConfig

    db = job / "buffer" / "explorer_output.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    writer = get_buffer_writer(StorageConfig(
        name="pipeline_input", storage_type="sql", path=f"sqlite:///{db}",
        schema_type="experience", wrap_in_ray=False))

    async def write() -> None:
        for exp in experiences:   # one write per experience, as runs finish
            await writer.write([exp])
        engine = (await writer._get_async_storage()).engine
        await engine.dispose()

    asyncio.run(write())
    return db


CALL = '<tool_call>{"name": "calc", "arguments": {"expr": "7*6"}}</tool_call>'
LONG = "x" * 3000 + "THE END"


def three_steps() -> list:
    q7 = [SYSTEM, {"role": "user", "content": "What is 7*6?"}]
    return [
        # step 1, in write order: task 10 before task 2, and run 0 of task 0 calls the model
        # twice (a tool call, then the answer)
        experience(1, "10", 0, 1.0, prompt_text=chatml("What is 10+10?"),
                   response_text="\\boxed{20}", response_tokens=2),
        experience(1, "0", 0, 0.0, messages=q7, response_text=f"Let me compute.\n{CALL}",
                   response_tokens=6),
        experience(1, "0", 0, 0.0, messages=q7 + [
            {"role": "assistant", "content": "", "tool_calls": [{"id": "a"}]},
            {"role": "tool", "content": "42"}], response_text="\\boxed{41}", response_tokens=4),
        experience(1, "2", 0, 1.0, prompt_text=chatml("What is 2+2?"),
                   response_text="\\boxed{4}", response_tokens=2),
        experience(1, "0", 1, 1.0, messages=q7, response_text="\\boxed{42}", response_tokens=2),
        experience(1, "2", 1, 0.0, prompt_text=chatml("What is 2+2?"),
                   response_text="\\boxed{5}", response_tokens=2),
        # step 2: not sampled, but a row of the table
        experience(2, "5", 0, 0.5, prompt_text=chatml("Middle?"), response_text=CALL,
                   response_tokens=10),
        experience(2, "5", 1, 1.0, prompt_text=chatml("Middle?"), response_text="\\boxed{1}",
                   response_tokens=20),
        # step 3: a reply of two tool calls kept as messages, and a long reply
        experience(3, "1", 0, 0.0, messages=[
            SYSTEM, {"role": "user", "content": [{"type": "text", "text": "Last question?"}]},
            {"role": "assistant", "content": "Two calls.",
             "tool_calls": [{"id": "a"}, {"id": "b"}]}], response_tokens=8),
        experience(3, "1", 1, 1.0, version=1, prompt_text=chatml("Last question?"),
                   response_text=LONG, response_tokens=1000),
    ]


def run_module(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", MODULE, *map(str, args)], capture_output=True,
                          text=True, timeout=hang_bound(300), cwd=paths.REPO_ROOT)


def read_outputs(out: Path) -> tuple[list[dict], list[dict]]:
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    with open(out / "buffer_steps.csv") as f:
        steps = list(csv.DictReader(f))
    return samples, steps


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """The module's outputs for a checkpoint root above a job folder with three steps."""
    root = tmp_path_factory.mktemp("ckpt")
    write_buffer(root / "Project" / "Name", three_steps())
    out = root.parent / "samples"
    done = run_module(root, out, "--per-step", "3")
    assert done.returncode == 0, done.stderr
    assert "10 experiences of steps 1-3" in done.stdout
    return read_outputs(out)


def test_samples_are_the_first_and_last_step_by_run_then_task(written):
    samples, _ = written
    # step 1: run 0 of task 0 (both calls), then task 2 (task ids in number order, not as
    # text and not in write order); step 2 is skipped; step 3 has two experiences
    assert [(s["step"], s["task_id"], s["run_id"]) for s in samples] == [
        (1, "0", 0), (1, "0", 0), (1, "2", 0), (3, "1", 0), (3, "1", 1)]
    first, second, third, fourth, fifth = samples
    assert first["question"] == second["question"] == "What is 7*6?"   # the last user message
    assert third["question"] == "What is 2+2?"                          # from the ChatML prompt
    assert fourth["question"] == "Last question?"                       # a list of parts
    assert first["response"] == f"Let me compute.\n{CALL}" and first["tool_calls"] == 1
    assert second["response"] == "\\boxed{41}" and second["tool_calls"] == 0
    assert fourth["response"] == "Two calls." and fourth["tool_calls"] == 2
    assert (first["reward"], third["reward"], fifth["reward"]) == (0.0, 1.0, 1.0)
    assert (first["model_version"], fifth["model_version"]) == (0, 1)
    assert (first["response_tokens"], fifth["response_tokens"]) == (6, 1000)
    assert set(first) == {"step", "model_version", "task_id", "run_id", "reward", "question",
                          "response", "truth", "tool_calls", "response_tokens"}


def test_long_texts_keep_their_start_and_end_around_a_marker(written):
    samples, _ = written
    reply = samples[-1]["response"]
    assert reply.startswith("x" * 1000) and reply.endswith("x" * 993 + "THE END")
    assert "[... 1007 characters cut ...]" in reply
    assert len(reply) < 2100


def test_step_table_counts_experiences_runs_rewards_lengths_and_tool_calls(written):
    _, steps = written
    assert [row["step"] for row in steps] == ["1", "2", "3"]
    one, two, three = steps
    assert one == {"step": "1", "model_version": "0", "experiences": "6", "tasks": "3",
                   "agent_runs": "5", "mean_reward": "0.5", "mean_response_tokens": "3.0",
                   "tool_call_rate": "0.1667", "multi_call_run_share": "0.2",
                   "effective_task_ratio": "0.6667"}
    assert (two["mean_reward"], two["mean_response_tokens"], two["tool_call_rate"]) == \
        ("0.75", "15.0", "0.5")
    assert (three["model_version"], three["tool_call_rate"], three["multi_call_run_share"]) == \
        ("1-2", "0.5", "0.0")


def test_the_effective_task_ratio_is_the_share_of_tasks_with_a_pass_rate_strictly_inside(written):
    # experiences without a task_index are told apart by their id's task. Step 1: task 10
    # passes its one run (1.0), task 0 one of three experiences (1/3), task 2 one of two (0.5):
    # two of three tasks; step 2: task 5's rewards 0.5 and 1.0 (0.75); step 3: 0.0 and 1.0
    _, steps = written
    assert [row["effective_task_ratio"] for row in steps] == ["0.6667", "1.0", "1.0"]


def test_the_effective_task_ratio_groups_tasks_as_trinitys_pass_rate_calculator(tmp_path):
    """Tasks are told apart by their taskset and index (``info["task_index"]``), not by their
    place in the batch: ids 0 and 1 are one task (pass rate 0.5), and index 1 of taskset 0
    (all pass) is not index 1 of taskset 1 (all fail). Grouped by id it would be 0 of 4 tasks,
    by index alone 2 of 2; Trinity's operator, given the same experiences, says 1 of 3."""
    from trinity.buffer.operators.mappers.pass_rate_calculator import PassRateCalculator

    exps = [experience(1, "0", 0, 1.0), experience(1, "1", 0, 0.0),
            experience(1, "2", 0, 1.0), experience(1, "2", 1, 1.0),
            experience(1, "3", 0, 0.0), experience(1, "3", 1, 0.0)]
    for e, (taskset, index) in zip(exps, [(0, 7), (0, 7), (0, 1), (0, 1), (1, 1), (1, 1)],
                                   strict=True):
        e.info["task_index"] = {"taskset_id": taskset, "index": index}
    _, metric = PassRateCalculator().process(exps)
    assert metric["selection/valid_ratio"] == pytest.approx(1 / 3)
    write_buffer(tmp_path / "job", exps)
    done = run_module(tmp_path / "job", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    _, steps = read_outputs(tmp_path / "out")
    assert [(row["tasks"], row["effective_task_ratio"]) for row in steps] == [("4", "0.3333")]
    # per task: what the operator feeds the selector, in its order, to the last bit
    from trinity.common.constants import SELECTOR_METRIC

    with open(tmp_path / "out" / "buffer_tasks.csv") as f:
        rows = list(csv.DictReader(f))
    fed = metric[SELECTOR_METRIC]
    assert [(r["taskset"], int(r["task_index"]), float(r["pass_rate"])) for r in rows] == [
        (str(taskset), index, value) for taskset, given in fed.items()
        for index, value in zip(given["indices"], given["values"], strict=True)]
    assert [r["experiences"] for r in rows] == ["2", "2", "2"]


def test_a_step_where_every_task_passes_or_fails_has_an_effective_task_ratio_of_0(tmp_path):
    # an experience without a reward counts for no task's pass rate (task 0's stays 1, where
    # counting it as 0 would make it 2/3)
    write_buffer(tmp_path / "job", [experience(1, "0", 0, 1.0), experience(1, "0", 1, 1.0),
                                    experience(1, "0", 2, None),
                                    experience(1, "1", 0, 0.0), experience(1, "1", 1, 0.0)])
    done = run_module(tmp_path / "job", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    _, steps = read_outputs(tmp_path / "out")
    assert [(row["agent_runs"], row["effective_task_ratio"]) for row in steps] == [("5", "0.0")]


def test_a_folder_without_a_buffer_or_with_an_empty_one_is_one_line_and_status_2(tmp_path):
    job = tmp_path / "job"
    (job / "monitor").mkdir(parents=True)
    done = run_module(job, tmp_path / "out")
    assert done.returncode == 2
    assert done.stderr == f"buffer: {job}: no experience database (*.db) under it\n"
    assert not (tmp_path / "out").exists()

    db = write_buffer(job, [])
    done = run_module(job, tmp_path / "out")
    assert done.returncode == 2
    assert done.stderr == \
        f"buffer: {db}: the experience buffer (pipeline_input) is empty\n"

    done = run_module(tmp_path / "missing", tmp_path / "out")
    assert (done.returncode, done.stderr.count("\n")) == (2, 1)
    assert "missing: no such folder" in done.stderr


def test_with_a_tokenizer_question_and_reply_come_from_the_token_ids(tmp_path):
    """A recorded chat completion keeps token ids and the reply's content only; vLLM's tool
    parser took the tool call out of that content."""
    tokenizers = pytest.importorskip("tokenizers")
    specials = ["<|im_start|>", "<|im_end|>"]
    alphabet = tokenizers.pre_tokenizers.ByteLevel.alphabet()
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(
        vocab={c: i for i, c in enumerate(sorted(alphabet))}, merges=[]))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    tok.add_special_tokens(specials)
    tok.add_tokens(["<tool_call>", "</tool_call>"])
    folder = tmp_path / "model"
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>"}))

    prompt = tok.encode(chatml("What is 6*7?")).ids
    answer = tok.encode(f"{CALL}<|im_end|>").ids
    exp = experience(1, "0", 0, 1.0, tokens=prompt + answer, prompt_length=len(prompt),
                     response_text="")
    write_buffer(tmp_path / "job", [exp])
    done = run_module(tmp_path / "job", tmp_path / "out", "--tokenizer", folder)
    assert done.returncode == 0, done.stderr
    samples, steps = read_outputs(tmp_path / "out")
    assert samples[0]["question"] == "What is 6*7?"
    assert samples[0]["response"] == CALL and samples[0]["tool_calls"] == 1
    assert steps[0]["tool_call_rate"] == "1.0"

    done = run_module(tmp_path / "job", tmp_path / "out2")   # without: content only
    samples, _ = read_outputs(tmp_path / "out2")
    assert (samples[0]["question"], samples[0]["response"], samples[0]["tool_calls"]) == \
        (None, "", 0)

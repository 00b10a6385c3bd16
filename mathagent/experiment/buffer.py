"""Replies of the first and last explore step, and per-step numbers, from a run's experience
buffer (``python -m mathagent.experiment.buffer JOB OUT``; the ``experiment`` command runs it
for every finished run, in a process of its own with a time limit).

Where a Trinity-RFT run keeps its experiences (all under ``<job folder>/buffer/``):

* ``explorer_output.db``, table ``pipeline_input``: every experience the explorer made, as
  the experience pipeline received it (``data_processor.experience_pipeline.save_input``, on
  by default; the path is Trinity's ``default_input_save_path``);
* the trainer's experience buffer: this project's configs leave it a queue, which Trinity
  copies to ``experience_buffer.jsonl`` (not read here); with ``storage_type: sql`` it would
  be ``<name>.db``, table ``<name>`` (``experience_buffer``).

An experience table in Trinity's SQL schema is a pair: ``<table>`` holds one row per
experience (task_id, run_id, msg_id, model_version, reward) and ``<table>_blob`` the
serialized ``Experience`` under the same id. Both are read with Trinity's own table classes
(``sql_schema._create_table_classes``) and each row is turned back into an ``Experience`` by
the schema's ``to_experience``, the same way Trinity's experience viewer reads them. The
database is opened read-only, so a run still writing it is read as it stands. ``pipeline_input``
is taken where a folder has it; ``--table`` names another.

A sample's step is the explore step that made it (the batch of its id, the N of the log's
"Explore step N"); ``model_version`` is the version of the weights that made it (one behind
the step when the weights are synchronised after every step).

Writes into OUT:

* ``samples.jsonl``: the replies of the first and last explore step, ``--per-step`` of each,
  the first in the order (run, task, write order): run 0 of every task first, so the samples
  span the step's questions and keep an agent run's model calls together. Each record: step,
  model_version, task_id, run_id, reward, question (the last user message of the prompt),
  reply, tool_calls (the calls the reply makes: the reply message's ``tool_calls`` where
  the experience keeps its messages, else the ``<tool_call>`` tags in its text) and
  response_tokens. Texts longer than ``--max-chars`` keep their start and end around a marker.
* ``buffer_steps.csv``: one row per explore step: experiences, distinct tasks, agent runs,
  mean reward, mean response length in tokens, the share of experiences whose reply makes a
  tool call, the share of agent runs with more than one model call (under
  ``multi_step_grpo`` each model call of an agent run is one experience of its task and run),
  and the effective task ratio: the share of the step's tasks whose pass rate (the mean reward
  of the task's experiences; tasks told apart by their ``info["task_index"]``, as Trinity's
  ``pass_rate_calculator`` computes it) lies strictly between 0 and 1, rounded to 4 places.
  Trinity logs that ratio (``selection/valid_ratio``) only where a pass-rate operator runs (the
  ``difficulty_based`` and BOTS configs); from the buffer it exists for every run. Trinity 0.6.0
  hands the operator a step's experiences in one call, the same list it saves to
  ``pipeline_input``, so the two agree; experiences without a reward are left out (the
  operator would fail on them), and a step made twice (a run resumed from a checkpoint before
  it) pools both tries where Trinity logs the last.
* ``buffer_tasks.csv``: one row per explore step and task: the taskset and the task's index in
  it (``info["task_index"]``; empty for an experience without one, whose task is its id's),
  the experiences and the pass rate, unrounded: what ``pass_rate_calculator`` feeds a
  difficulty-aware selector after the step, so that its decisions can be replayed
  (``mathagent.run_facts.replay_selector``).

Chat completions recorded by Trinity keep token ids and the reply's ``content`` but no prompt
text or messages, and vLLM's tool parser moves a parsed tool call out of ``content``: with
``--tokenizer`` (the run's model folder) the question and the reply are decoded from the token
ids instead, as the model saw and wrote them.

Bad input (no folder, no experience database, an empty buffer, a database that cannot be
read) ends with one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sqlite3
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

PIPELINE_TABLE = "pipeline_input"
META_COLUMNS = {"id", "task_id", "run_id", "msg_id", "model_version", "reward"}
TOOL_CALL_TAG = "<tool_call>"
# the last user turn of a ChatML prompt (Qwen's chat template)
CHATML_USER = re.compile(r"<\|im_start\|>user\n(.*?)(?:<\|im_end\|>|\Z)", re.S)
STEP_COLUMNS = ["step", "model_version", "experiences", "tasks", "agent_runs", "mean_reward",
                "mean_response_tokens", "tool_call_rate", "multi_call_run_share",
                "effective_task_ratio"]
TASK_COLUMNS = ["step", "taskset", "task_index", "experiences", "pass_rate"]


class BadInput(Exception):
    """Input this module cannot use; its message is the one line printed."""


@dataclass
class Summary:
    """What the per-step table needs of one experience (kept for all of them)."""

    row_id: int
    step: int
    model_version: int | None
    task_id: str
    run_id: int
    reward: float | None
    # the task as the pass-rate operators group experiences: (taskset, index in it)
    task_key: tuple
    response_tokens: int
    tool_calls: int


# --- finding the buffer -------------------------------------------------------------------

def experience_tables(db: Path) -> list[str]:
    """Tables of ``db`` in Trinity's experience schema (metadata table plus ``_blob`` table)."""
    from sqlalchemy import inspect

    engine = read_only_engine(db)
    try:
        inspector = inspect(engine)
        names = set(inspector.get_table_names())
        return sorted(name for name in names if f"{name}_blob" in names
                      and META_COLUMNS.issubset(c["name"] for c in inspector.get_columns(name)))
    finally:
        engine.dispose()


def read_only_engine(db: Path):
    from sqlalchemy import create_engine

    # sqlite's URI form with mode=ro never creates or changes the file; the timeout waits out
    # a writer's lock
    uri = f"file:{quote(str(db.resolve()))}?mode=ro"
    return create_engine("sqlite://", creator=lambda: sqlite3.connect(uri, uri=True, timeout=30))


def find_buffer(folder: Path, table: str | None) -> tuple[Path, str]:
    """The database and table to read under ``folder``: ``table`` if given, else
    ``pipeline_input``, else the only experience table there is."""
    if not folder.is_dir():
        raise BadInput(f"{folder}: no such folder")
    databases = sorted(folder.rglob("*.db"))
    if not databases:
        raise BadInput(f"{folder}: no experience database (*.db) under it")
    from sqlalchemy.exc import SQLAlchemyError

    found, unreadable = [], []
    for db in databases:
        try:
            found += [(db, name) for name in experience_tables(db)]
        except SQLAlchemyError as exc:
            unreadable.append(f"{db} cannot be read: {str(exc).splitlines()[0]}")
    if table:
        chosen = [(db, name) for db, name in found if name == table]
    else:
        chosen = [(db, name) for db, name in found if name == PIPELINE_TABLE] or found
    if not chosen:
        wanted = f"table {table}" if table else "experience table"
        why = f" ({'; '.join(unreadable)})" if unreadable else ""
        raise BadInput(f"{folder}: no {wanted} in {', '.join(map(str, databases))}{why}")
    if len(chosen) > 1:
        raise BadInput(f"{folder}: several experience tables ("
                       + ", ".join(f"{db}:{name}" for db, name in chosen)
                       + "); name one folder or --table")
    return chosen[0]


# --- reading experiences ------------------------------------------------------------------

class Buffer:
    """One experience table of a database, read with Trinity's table classes."""

    def __init__(self, db: Path, table: str) -> None:
        from sqlalchemy.orm import Session
        from trinity.buffer.schema.sql_schema import _create_table_classes

        self.meta, self.blob = _create_table_classes(table, "experience")
        self.engine = read_only_engine(db)
        self.session = Session(self.engine)

    def experiences(self, ids: list[int] | None = None, chunk: int = 256):
        """``(row id, Experience)`` in write order (only ``ids`` if given), ``chunk`` rows
        at a time."""
        from sqlalchemy import select

        query = (select(self.meta, self.blob.experience_bytes)
                 .join(self.blob, self.blob.id == self.meta.id).order_by(self.meta.id))
        if ids is not None:
            query = query.where(self.meta.id.in_(ids))
        for row, blob in self.session.execute(query.execution_options(yield_per=chunk)):
            try:
                experience = row.to_experience(blob)
            except Exception as exc:  # a buffer written by another Trinity version's schema
                raise BadInput(f"experience {row.id} of the buffer cannot be read with this "
                               f"Trinity ({type(exc).__name__}: {exc})") from None
            yield row.id, experience

    def close(self) -> None:
        self.session.close()
        self.engine.dispose()


def explore_step(exp) -> int | None:
    """The explore step of an experience: its id's batch (an evaluation batch, "N/name",
    is none); the model version where the batch is missing."""
    batch = exp.eid.batch
    if isinstance(batch, int):
        return batch
    if isinstance(batch, str) and batch.isdigit():
        return int(batch)
    if batch in ("", None):
        return exp.info.get("model_version")
    return None


def task_key(exp) -> tuple:
    """The task an experience belongs to as ``pass_rate_calculator`` groups them: its
    ``info["task_index"]`` (taskset and index in it), else its id's task."""
    index = exp.info.get("task_index")
    if isinstance(index, dict) and {"taskset_id", "index"} <= set(index):
        return ("taskset", str(index["taskset_id"]), str(index["index"]))
    return ("task", str(exp.eid.task))


def response_tokens(exp) -> int:
    # as Experience.to_dict counts it
    return 0 if exp.tokens is None else len(exp.tokens) - exp.prompt_length


def text_of(content) -> str:
    """A message's content as text (a list of parts: their text parts joined)."""
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def last_user_message(exp) -> dict | None:
    for message in reversed(exp.messages or []):
        if isinstance(message, dict) and message.get("role") == "user":
            return message
    return None


def reply_message(exp) -> dict | None:
    """The reply as a message: the last of the messages when the assistant wrote it (an
    earlier assistant message belongs to the prompt)."""
    last = exp.messages[-1] if exp.messages else None
    return last if isinstance(last, dict) and last.get("role") == "assistant" else None


def last_user_turn(prompt: str) -> str:
    """The last user turn of a ChatML prompt; the prompt itself in another format."""
    turns = CHATML_USER.findall(prompt)
    return turns[-1].strip() if turns else prompt


def question(exp, tokenizer) -> str | None:
    """The last user message of the experience's prompt."""
    user = last_user_message(exp)
    if user is not None:
        return text_of(user.get("content"))
    if exp.prompt_text:
        return last_user_turn(exp.prompt_text)
    if tokenizer is not None and exp.tokens is not None:
        prompt = tokenizer.decode(exp.tokens[:exp.prompt_length].tolist(),
                                  skip_special_tokens=False)
        return last_user_turn(prompt)
    return None


def reply(exp, tokenizer) -> str:
    """The model's reply: decoded from the response's token ids with a tokenizer (a tool call
    that vLLM's parser took out of the text stays in), else the recorded response text, else
    the reply's message."""
    if tokenizer is not None and exp.tokens is not None:
        return tokenizer.decode(exp.tokens[exp.prompt_length:].tolist(),
                                skip_special_tokens=True)
    if exp.response_text is not None:
        return exp.response_text
    message = reply_message(exp)
    return "" if message is None else text_of(message.get("content"))


def tool_calls(exp, text: str) -> int:
    """The tool calls the reply writes, whichever tool they name (also one the agent was not
    offered): the reply message's ``tool_calls`` where the experience keeps its messages
    (vLLM's parser moves them there), else the ``<tool_call>`` tags in the reply's text. Not
    ``train-local``'s ``rollout_tool_calls``, which counts the calls of the offered tool that
    ran."""
    message = reply_message(exp)
    if message is not None and message.get("tool_calls"):
        return len(message["tool_calls"])
    return text.count(TOOL_CALL_TAG)


def clip(text: str | None, limit: int) -> str | None:
    """``text`` with at most ``limit`` characters of its own: its start and end around a
    marker saying how many were cut."""
    if text is None or len(text) <= limit:
        return text
    head, tail = limit // 2, limit - limit // 2
    return f"{text[:head]}\n[... {len(text) - limit} characters cut ...]\n{text[-tail:]}"


# --- the two outputs ----------------------------------------------------------------------

def step_table(summaries: list[Summary]) -> list[dict]:
    by_step: dict[int, list[Summary]] = defaultdict(list)
    for s in summaries:
        by_step[s.step].append(s)
    rows = []
    for step in sorted(by_step):
        items = by_step[step]
        runs: dict[tuple[str, int], int] = defaultdict(int)
        for s in items:
            runs[(s.task_id, s.run_id)] += 1
        rewards = [s.reward for s in items if s.reward is not None]
        by_task: dict[tuple, list[float]] = defaultdict(list)
        for s in items:
            if s.reward is not None:
                by_task[s.task_key].append(s.reward)
        pass_rates = [sum(r) / len(r) for r in by_task.values()]
        versions = sorted({s.model_version for s in items if s.model_version is not None})
        rows.append({
            "step": step,
            "model_version": "-".join(str(v) for v in sorted({versions[0], versions[-1]}))
            if versions else "",
            "experiences": len(items),
            "tasks": len({s.task_id for s in items}),
            "agent_runs": len(runs),
            "mean_reward": round(sum(rewards) / len(rewards), 4) if rewards else "",
            "mean_response_tokens": round(sum(s.response_tokens for s in items) / len(items), 1),
            "tool_call_rate": round(sum(s.tool_calls > 0 for s in items) / len(items), 4),
            "multi_call_run_share": round(sum(n > 1 for n in runs.values()) / len(runs), 4),
            "effective_task_ratio": round(sum(0 < p < 1 for p in pass_rates) / len(pass_rates), 4)
            if pass_rates else "",
        })
    return rows


def task_table(summaries: list[Summary]) -> list[dict]:
    """One row per (step, task), tasks grouped as :func:`task_key` groups them, in the order
    of their first experience; the pass rate is the mean reward of the task's experiences
    that have one (a task with none has no row), computed as ``pass_rate_calculator`` does."""
    import numpy as np

    by_task: dict[tuple[int, tuple], list[float]] = defaultdict(list)
    for s in summaries:
        if s.reward is not None:
            by_task[(s.step, s.task_key)].append(s.reward)
    rows = []
    for (step, key), rewards in sorted(by_task.items(), key=lambda item: item[0][0]):
        taskset, index = (key[1], int(key[2])) if key[0] == "taskset" else ("", "")
        rows.append({"step": step, "taskset": taskset, "task_index": index,
                     "experiences": len(rewards), "pass_rate": repr(float(np.mean(rewards)))})
    return rows


def natural(task_id: str):
    """Task ids in number order where they are numbers ("2" before "10")."""
    return (0, int(task_id), "") if task_id.isdigit() else (1, 0, task_id)


def pick(summaries: list[Summary], per_step: int) -> list[Summary]:
    """``per_step`` experiences of the first and of the last step, by run, task, write order."""
    steps = sorted({s.step for s in summaries})
    picked = []
    for step in dict.fromkeys([steps[0], steps[-1]]):
        items = sorted((s for s in summaries if s.step == step),
                       key=lambda s: (s.run_id, natural(s.task_id), s.row_id))
        picked += items[:per_step]
    return picked


def load_tokenizer(path: str | None):
    if path is None:
        return None
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise BadInput(f"{path}: no tokenizer there ({str(exc).splitlines()[0]})") from exc


def write_outputs(db: Path, table: str, out: Path, per_step: int, max_chars: int,
                  tokenizer) -> str:
    buffer = Buffer(db, table)
    try:
        summaries, skipped = [], 0
        for row_id, exp in buffer.experiences():
            step = explore_step(exp)
            if step is None:
                skipped += 1
                continue
            summaries.append(Summary(
                row_id=row_id, step=step, model_version=exp.info.get("model_version"),
                task_id=str(exp.eid.task), run_id=exp.eid.run, reward=exp.reward,
                task_key=task_key(exp),
                response_tokens=response_tokens(exp),
                tool_calls=tool_calls(exp, reply(exp, tokenizer))))
        if not summaries:
            raise BadInput(f"{db}: table {table} holds no experience of an explore step"
                           if skipped else f"{db}: the experience buffer ({table}) is empty")
        picked = pick(summaries, per_step)
        full = dict(buffer.experiences([s.row_id for s in picked]))
    finally:
        buffer.close()

    records = []
    for s in picked:
        exp = full[s.row_id]
        records.append({
            # the keys of train-local's samples.jsonl (mathagent.run_facts.saved_replies reads
            # both); the buffer keeps no reference answer: truth is null
            "step": s.step, "model_version": s.model_version, "task_id": s.task_id,
            "run_id": s.run_id, "reward": s.reward, "truth": None,
            "question": clip(question(exp, tokenizer), max_chars),
            "response": clip(reply(exp, tokenizer), max_chars),
            "tool_calls": s.tool_calls, "response_tokens": s.response_tokens,
        })
    rows = step_table(summaries)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "samples.jsonl", "w") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    with open(out / "buffer_steps.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=STEP_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    with open(out / "buffer_tasks.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=TASK_COLUMNS)
        writer.writeheader()
        writer.writerows(task_table(summaries))
    return (f"{db} ({table}): {len(summaries)} experiences of steps {rows[0]['step']}-"
            f"{rows[-1]['step']}; {len(records)} samples and {len(rows)} step rows in {out}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Write samples.jsonl (replies of the first and last explore step), "
                    "buffer_steps.csv (one row per explore step) and buffer_tasks.csv (one row "
                    "per step and task) from a Trinity-RFT run's SQLite experience buffer.")
    parser.add_argument("folder", type=Path,
                        help="the run's checkpoint job folder, or any folder above it")
    parser.add_argument("out", type=Path, help="folder to write the three files into")
    parser.add_argument("--per-step", type=int, default=16, metavar="N",
                        help="samples from each of the two steps (default 16)")
    parser.add_argument("--max-chars", type=int, default=2000, metavar="N",
                        help="longest question or reply kept whole (default 2000)")
    parser.add_argument("--table", help=f"the experience table to read (default "
                                        f"{PIPELINE_TABLE}, else the only one)")
    parser.add_argument("--tokenizer", metavar="PATH",
                        help="the run's model folder: decode questions and replies from the "
                             "token ids")
    args = parser.parse_args(argv)
    try:
        db, table = find_buffer(args.folder, args.table)   # no heavy import before this
        from sqlalchemy.exc import SQLAlchemyError

        try:
            tokenizer = load_tokenizer(args.tokenizer)
            print(write_outputs(db, table, args.out, args.per_step, args.max_chars, tokenizer))
        except SQLAlchemyError as exc:
            raise BadInput(f"{db}: cannot be read ({str(exc).splitlines()[0]})") from exc
    except (BadInput, ImportError) as exc:
        print(f"buffer: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

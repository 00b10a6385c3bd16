"""Rollouts at scale: the batch runner and pass-rate measurement.

**Batch runner** (:func:`run_tasks`, ``python -m mathagent run-agent``). Runs the workflow
(:mod:`mathagent.agent`) and the judge (:mod:`mathagent.judge`) over many tasks against
one OpenAI-compatible endpoint, at most ``concurrency`` rollouts at a time, each bounded
by ``timeout`` seconds, with a progress bar. A rollout that fails (an endpoint error, a
timeout, an exception in the agent or the judge) is recorded as *failed*: ``error`` says
why and ``reward``/``accuracy`` are NaN, not 0, so a dead endpoint never passes for a model
that answers wrong; the batch never aborts. The result is a
tidy table with one row per (task, rollout): ``row, task_id, rollout, question, truth,
response, extracted, reward, accuracy, latency_s, tokens, input_tokens, calls, model_s,
error``: ``row`` is the task's position in its split, ``task_id`` the taskset's own id
column (else the row), ``tokens`` the completion tokens (None when the server does not
report usage) and ``model_s`` the seconds spent inside model calls, so ``latency_s -
model_s`` is the runner's own overhead.

**Pass-rate measurement** (:func:`measure_pass_rates`, ``python -m mathagent
measure-pass-rates``). Answers every task of a split ``n`` times (16 by default, as the
guru pass rates were measured) and writes the pass rate, the mean accuracy of the ``n``
rollouts (the mean reward: both judges' ``format_score`` is 0), into a named feature
column of the taskset, with the settings in its ``provenance.json``. Every rollout's reward (and optionally its reply) goes to a *side
table* of parquet chunks first, so

* a rerun resumes: finished tasks are read back and skipped; a run killed at any moment
  loses only the chunk in flight (chunks are renamed into place atomically);
* failed rollouts are kept as failed records and retried by the next run; the column is
  written only once every rollout of every task has succeeded;
* the numbers can be audited: the column is recomputed from the side table.

One measurement writes a side table at a time (a ``filelock`` on ``<side table>/.lock``),
and every read-modify-write of a split file or ``provenance.json`` holds the taskset's
lock (``<taskset>/.write.lock``), so measurements of different columns of one taskset can
run side by side without losing a column.

The driver works in chunks of tasks through a *backend* with
``run_batch(tasks, n, seed) -> list[list[dict]]`` (for each task, ``n`` records with keys
:data:`ROLLOUT_KEYS`). :class:`EndpointBackend` runs a chunk concurrently with asyncio
against one endpoint; ``mathagent.policy.HFBackend`` samples a whole chunk in one
transformers batch on a GPU; :class:`RayFanout` spreads chunks over several endpoints (one
vLLM server per GPU) with Ray actors. Every task dict carries its row number as
``row`` (its position in the split file; a taskset's own ``task_id`` column, if any,
is passed along untouched); backends with ``seeds_per_task = True`` derive each
rollout's sampling seed from ``(seed, row, rollout)``, so results do not depend on
chunking, resumption or which endpoint ran a chunk. Other backends get a per-chunk seed mixed from ``seed`` and
the chunk's first ``row``.

This module imports only numpy, pandas and pyarrow at top level (AgentScope and Ray are
imported when used), so the driver runs on a GPU machine that has no AgentScope.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from mathagent import paths
from mathagent.run_sync import run_sync
from mathagent.serving import ModelSettings

# Keys of one rollout record, the backend contract.
ROLLOUT_KEYS = ("rollout", "reward", "accuracy", "response", "extracted", "latency_s",
                "tokens", "error")

# The side table's schema: the rollout keys plus the task's row number.
SIDE_SCHEMA = pa.schema([
    ("row", pa.int64()), ("rollout", pa.int32()), ("reward", pa.float64()),
    ("accuracy", pa.float64()), ("response", pa.string()), ("extracted", pa.string()),
    ("latency_s", pa.float64()), ("tokens", pa.int64()), ("error", pa.string()),
])

# Backend settings that may change between a run and its resumption (they do not change
# what is measured): where the endpoint lives and how hard it is pushed.
_RESUMABLE_SETTING_KEYS = {"base_url", "endpoints", "concurrency", "timeout", "request_timeout",
                           "max_retries", "device", "chunk_size", "fanout"}

MAX_ERROR_CHARS = 500


def rollout_seed(seed: int, row: int, rollout: int) -> int:
    """The sampling seed of one rollout: a 31-bit hash of ``(seed, row, rollout)``.

    Independent of chunking and order, so a resumed or fanned-out run sends exactly the
    requests an uninterrupted single-endpoint run sends.
    """
    state = np.random.SeedSequence([int(seed), int(row), int(rollout)]).generate_state(1)
    return int(state[0]) & 0x7FFFFFFF


def chunk_seed(seed: int, rows: Sequence[int]) -> int:
    """Seed handed to backends that seed per batch (``seeds_per_task`` false)."""
    return rollout_seed(seed, int(rows[0]) if len(rows) else 0, 1 << 20)


def _error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + "..."


def _failed_record(rollout: int, error: str | None, latency: float = math.nan) -> dict:
    """A record that has no reward (yet): NaN, never 0, so it cannot pass for a wrong reply."""
    return {"rollout": rollout, "reward": math.nan, "accuracy": math.nan, "response": None,
            "extracted": None, "latency_s": latency, "tokens": None, "error": error,
            "input_tokens": None, "calls": 0, "model_s": 0.0}


ENDPOINT_ERROR_PREFIX = "endpoint error: "
TIMEOUT_PREFIX = "timeout after"

# What a failed rollout's ``error`` says, grouped for the summary lines of the commands.
FAILURE_KINDS = ("endpoint error", "timeout", "exception")


def _is_endpoint_error(exc: BaseException) -> bool:
    """True for errors of the HTTP client (openai / httpx), also when wrapped by the agent."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        module = type(exc).__module__ or ""
        if module.split(".")[0] in ("openai", "httpx", "httpcore"):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def is_failed(error: Any, reward: Any = 0.0) -> bool:
    """Whether a rollout record failed: an ``error`` text, or no finite reward."""
    if isinstance(error, str) and error:
        return True
    try:
        return not math.isfinite(float(reward))
    except (TypeError, ValueError):
        return True


def failure_kind(error: Any) -> str:
    """One of :data:`FAILURE_KINDS` for a failed record's ``error`` text."""
    text = error if isinstance(error, str) else ""
    if text.startswith(ENDPOINT_ERROR_PREFIX):
        return "endpoint error"
    if text.startswith(TIMEOUT_PREFIX):
        return "timeout"
    return "exception"


def failure_counts(errors: Sequence[Any]) -> dict[str, int]:
    """``{kind: count}`` over the ``error`` texts of failed records (kinds that occur)."""
    counts = dict.fromkeys(FAILURE_KINDS, 0)
    for e in errors:
        counts[failure_kind(e)] += 1
    return {k: v for k, v in counts.items() if v}


def describe_failures(counts: dict[str, int]) -> str:
    """``"10 endpoint errors, 2 timeouts"``."""
    parts = []
    for kind, count in counts.items():
        plural = {"endpoint error": "endpoint errors", "timeout": "timeouts",
                  "exception": "exceptions in the agent or judge"}[kind]
        parts.append(f"{count} {plural if count != 1 else kind}")
    return ", ".join(parts) if parts else "none"


# --------------------------------------------------------------------------------------
# The async core: one rollout, a batch of rollouts
# --------------------------------------------------------------------------------------


async def _one_rollout(task: dict, rollout: int, model: Any, workflow: Callable,
                       judge: Callable, timeout: float, lenient: bool,
                       keep_response: bool) -> dict:
    """Workflow + judge for one rollout; every failure becomes a failed record (NaN reward)."""
    from mathagent.agent import metered
    from mathagent.judge import extract_answer, response_text

    record = _failed_record(rollout, error=None)
    start = time.perf_counter()
    with metered() as meter:
        text = None
        try:
            output = await asyncio.wait_for(workflow(task=task, model=model), timeout)
            text = response_text(getattr(output, "response", None))
            verdict = await judge(task=task, response=getattr(output, "response", None))
            reward = float(verdict.reward)
            if not math.isfinite(reward):
                raise ValueError(f"the judge returned a non-finite reward {reward!r}")
            metrics = verdict.metrics or {}
            record["reward"] = reward
            record["accuracy"] = float(metrics.get("accuracy", reward))
        except TimeoutError:
            record["error"] = f"{TIMEOUT_PREFIX} {timeout:g} s"
        except Exception as exc:  # the batch must survive anything one rollout does
            prefix = ENDPOINT_ERROR_PREFIX if _is_endpoint_error(exc) else ""
            record["error"] = prefix + _error_text(exc)
        if record["error"]:
            record["reward"] = record["accuracy"] = math.nan
        if text is not None:
            record["extracted"] = extract_answer(text, lenient=lenient)
            record["response"] = text if keep_response else None
        record.update(latency_s=time.perf_counter() - start, tokens=meter.output_tokens,
                      input_tokens=meter.input_tokens, calls=meter.calls,
                      model_s=meter.model_s)
    return record


async def arun_rollouts(tasks: Sequence[dict], settings: ModelSettings, *, n: int = 1,
                        seed: int = 0, options: Any = None, lenient: bool = False,
                        concurrency: int = 4, timeout: float = 300.0,
                        keep_response: bool = True,
                        on_rollout: Callable[[dict], None] | None = None) -> list[list[dict]]:
    """Run ``n`` rollouts of every task (workflow + judge), at most ``concurrency`` at once.

    ``tasks`` are dicts with ``question``, ``answer`` and an integer ``row``.
    ``options`` is an :class:`mathagent.agent.AgentOptions` (default: the reference agent,
    console output off). Returns, for each task in order, its ``n`` records (keys
    :data:`ROLLOUT_KEYS` plus ``input_tokens, calls, model_s``). ``on_rollout`` is called
    with each record as it finishes (progress bars).
    """
    from mathagent.agent import AgentOptions, build_model, make_workflow
    from mathagent.judge import get_judge, preload_reward_module

    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, got {timeout}")
    options = options or AgentOptions(console_output=False)
    workflow = make_workflow(options)
    judge = get_judge(lenient)
    preload_reward_module()  # its first import would otherwise land inside a timed rollout
    base_model = build_model(settings)
    limit = asyncio.Semaphore(concurrency)

    async def run(task: dict, r: int) -> dict:
        async with limit:
            model = base_model.with_seed(rollout_seed(seed, task["row"], r))
            record = await _one_rollout(task, r, model, workflow, judge, timeout, lenient,
                                        keep_response)
        if on_rollout is not None:
            on_rollout(record)
        return record

    try:
        flat = await asyncio.gather(*(run(t, r) for t in tasks for r in range(n)))
    finally:
        with contextlib.suppress(Exception):
            await base_model.client.close()
    return [list(flat[i * n:(i + 1) * n]) for i in range(len(tasks))]


def as_task_dicts(tasks: Any) -> list[dict]:
    """Tasks as a list of dicts with an integer ``row`` (position unless already present).

    Accepts a ``datasets.Dataset``, a ``pandas.DataFrame`` or a sequence of dicts. A task
    without a non-empty ``question`` or an ``answer`` raises naming its row.
    """
    if isinstance(tasks, pd.DataFrame):
        rows = tasks.to_dict("records")
    elif hasattr(tasks, "to_pandas") and hasattr(tasks, "column_names"):
        rows = tasks.to_pandas().to_dict("records")
    else:
        rows = [dict(t) for t in tasks]
    out = []
    for i, row in enumerate(rows):
        q = row.get("question")
        if not isinstance(q, str) or not q.strip():
            raise ValueError(f"task row {i}: 'question' must be a non-empty string, got {q!r:.80}")
        if "answer" not in row or row["answer"] is None:
            raise ValueError(f"task row {i}: no 'answer'")
        row["row"] = int(row.get("row", i))
        out.append(row)
    return out


def run_tasks(tasks: Any, settings: ModelSettings, *, n: int = 1, seed: int = 0,
              options: Any = None, lenient: bool = False, concurrency: int = 4,
              timeout: float = 300.0, keep_response: bool = True,
              progress: bool = True) -> pd.DataFrame:
    """The batch runner: workflow + judge over ``tasks``; a tidy table, one row per rollout.

    See the module docstring for the columns. ``extracted`` is what
    :func:`mathagent.judge.extract_answer` reads (lenient or strict, as the judge), so with
    the upstream judge it may show a ``#### x`` answer that earned no reward. Works from scripts and from notebooks (it
    runs its own event loop in a worker thread when one is already running).
    """
    from tqdm import tqdm

    from mathagent.judge import truth_from_answer

    dicts = as_task_dicts(tasks)
    with tqdm(total=len(dicts) * n, desc="rollouts", unit="rollout", disable=not progress,
              dynamic_ncols=True) as bar:
        def tick(record: dict) -> None:
            bar.update()
            if record["error"]:
                bar.set_postfix_str("last error: " + record["error"][:40])

        results = run_sync(arun_rollouts(dicts, settings, n=n, seed=seed, options=options,
                                          lenient=lenient, concurrency=concurrency,
                                          timeout=timeout, keep_response=keep_response,
                                          on_rollout=tick))
    rows = []
    for task, records in zip(dicts, results, strict=True):
        for rec in records:
            rows.append({"row": task["row"], "task_id": task.get("task_id", task["row"]),
                         "rollout": rec["rollout"],
                         "question": task["question"], "truth": truth_from_answer(task["answer"]),
                         **{k: rec.get(k) for k in ROLLOUT_KEYS if k != "rollout"},
                         "input_tokens": rec.get("input_tokens"), "calls": rec.get("calls"),
                         "model_s": rec.get("model_s")})
    frame = pd.DataFrame(rows)
    for col in ("tokens", "input_tokens", "calls"):
        frame[col] = frame[col].astype("Int64")
    return frame


def summarize(frame: pd.DataFrame) -> dict[str, Any]:
    """Headline numbers of a runner table: accuracy, failures, latency, tokens.

    ``accuracy`` and ``mean_reward`` are over the rollouts that ran (failed ones have no
    reward); ``failed`` counts the others and ``failures`` splits them by kind.
    """
    errors = frame["error"].fillna("")
    timeouts = errors.str.startswith(TIMEOUT_PREFIX)
    failed = [is_failed(e, r) for e, r in zip(frame["error"], frame["reward"], strict=True)]
    ok = ~np.asarray(failed, dtype=bool)
    return {
        "rollouts": int(len(frame)),
        "tasks": int(frame["row"].nunique()),
        "accuracy": float(frame["accuracy"][ok].mean()) if ok.any() else math.nan,
        "mean_reward": float(frame["reward"][ok].mean()) if ok.any() else math.nan,
        "answered": float(frame["extracted"].notna().mean()) if len(frame) else math.nan,
        "failed": int((~ok).sum()),
        "failures": failure_counts(frame["error"][~ok].tolist()),
        "errors": int((errors != "").sum()),
        "timeouts": int(timeouts.sum()),
        "mean_latency_s": float(frame["latency_s"].mean()),
        "mean_completion_tokens": float(frame["tokens"].astype("Float64").mean())
        if frame["tokens"].notna().any() else math.nan,
    }


def accuracy_table(table: pd.DataFrame) -> pd.DataFrame:
    """How the same replies fare under each reading of the judge (one row per reading).

    Re-scores the ``response`` column of a runner table with :func:`mathagent.judge.score`
    in strict mode (last box or ``#### x``) and lenient mode (also the last number), next
    to the reward the run's own judge gave. Columns: ``judge, answered, accuracy``
    (``answered`` = share of replies in which that reading finds an answer).
    """
    from mathagent.judge import extract_answer, score

    texts = table["response"].fillna("").astype(str)
    rows = [{"judge": "run's judge (reward)", "answered": math.nan,
             "accuracy": float(table["reward"].mean())}]
    for name, lenient in (("strict: box or ####", False), ("lenient: + last number", True)):
        found = [extract_answer(t, lenient=lenient) is not None for t in texts]
        acc = [score(t, y, lenient=lenient)["accuracy"] for t, y in zip(texts, table["truth"],
                                                                           strict=True)]
        rows.append({"judge": name, "answered": float(np.mean(found)) if found else math.nan,
                     "accuracy": float(np.mean(acc)) if acc else math.nan})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------
# Backends
# --------------------------------------------------------------------------------------


class EndpointBackend:
    """The workflow + judge against one OpenAI-compatible endpoint, a chunk at a time.

    ``run_batch`` runs every rollout of the chunk concurrently (``concurrency`` at most),
    each bounded by ``timeout`` seconds; failures come back as failed records (``error``
    set, NaN reward). Seeds: one per rollout from ``(seed, row, rollout)``.
    """

    name = "endpoint"
    seeds_per_task = True

    def __init__(self, settings: ModelSettings, options: Any = None, lenient: bool = False,
                 concurrency: int = 8, timeout: float = 300.0, keep_response: bool = True):
        from mathagent.agent import AgentOptions

        if not settings.base_url:
            raise ValueError("EndpointBackend needs settings.base_url")
        self.model_settings = settings
        self.options = options or AgentOptions(console_output=False)
        self.lenient = lenient
        self.concurrency = int(concurrency)
        self.timeout = float(timeout)
        self.keep_response = keep_response
        self.on_rollout: Callable[[dict], None] | None = None

    def settings(self) -> dict:
        """What was measured and how (for provenance and resume checks)."""
        return {"backend": "endpoint", **self.model_settings.describe(),
                **self.options.describe(), "lenient": self.lenient,
                "judge": "lenient_judge" if self.lenient else "gsm8k_judge",
                "concurrency": self.concurrency, "timeout": self.timeout}

    def run_batch(self, tasks: list[dict], n: int, seed: int) -> list[list[dict]]:
        return run_sync(arun_rollouts(tasks, self.model_settings, n=n, seed=seed,
                                       options=self.options, lenient=self.lenient,
                                       concurrency=self.concurrency, timeout=self.timeout,
                                       keep_response=self.keep_response,
                                       on_rollout=self.on_rollout))


class _BackendActor:
    """Holds one backend inside a Ray worker process."""

    def __init__(self, factory: Callable[[], Any]):
        self.backend = factory()

    def settings(self) -> dict:
        return self.backend.settings()

    def seeds_per_task(self) -> bool:
        return bool(getattr(self.backend, "seeds_per_task", False))

    def run_batch(self, tasks: list[dict], n: int, seed: int) -> list[list[dict]]:
        return self.backend.run_batch(tasks, n, seed)


class RayFanout:
    """Spread chunks over several backends (one per endpoint or GPU) with Ray actors.

    ``factories`` are picklable zero-argument callables that build a backend inside its
    actor, e.g. ``functools.partial(EndpointBackend, settings_for_gpu_k)``; what they
    reference must be importable by the Ray workers (a package module, not a script). Each actor
    holds one chunk at a time; chunks are handed out as actors free up, so a slow endpoint
    simply takes fewer chunks. ``address`` is passed to ``ray.init`` when Ray is not yet
    initialised: ``"local"`` starts a private single-machine Ray, ``"auto"`` joins a
    running cluster (``ray start --head`` on a multi-node GPU cluster).
    """

    name = "ray"

    def __init__(self, factories: Sequence[Callable[[], Any]], address: str = "local",
                 num_cpus: int | None = None):
        import ray

        if not factories:
            raise ValueError("RayFanout needs at least one backend factory")
        if not ray.is_initialized():
            init = {"address": address, "include_dashboard": False, "log_to_driver": False,
                    "logging_level": "ERROR"}
            if address == "local":
                # Workers must import mathagent even when it is not pip-installed.
                init["runtime_env"] = {"env_vars": {"PYTHONPATH": os.pathsep.join(
                    p for p in (str(paths.REPO_ROOT), os.environ.get("PYTHONPATH")) if p)}}
                init["num_cpus"] = num_cpus or max(2, len(factories))
            ray.init(**init)
            if address == "local":
                # the private Ray's daemons go with this process, also when it is SIGKILLed
                from mathagent.reaper import children_of_this_process, reap_when_gone

                reap_when_gone(children_of_this_process())
        # Actors wait on HTTP, not CPU: num_cpus=0 lets any number share a small machine.
        actor_cls = ray.remote(num_cpus=0)(_BackendActor)
        self._ray = ray
        self.actors = [actor_cls.remote(f) for f in factories]
        self._settings = ray.get([a.settings.remote() for a in self.actors])
        self.seeds_per_task = all(ray.get([a.seeds_per_task.remote() for a in self.actors]))

    def settings(self) -> dict:
        first = dict(self._settings[0])
        first["fanout"] = "ray"
        first["endpoints"] = [s.get("base_url") for s in self._settings]
        return first

    def map_unordered(self, jobs: Sequence[tuple[list[dict], int, int]]
                      ) -> Iterator[tuple[int, list[list[dict]]]]:
        """Run ``(tasks, n, seed)`` jobs; yield ``(job index, results)`` as they finish."""
        ray = self._ray
        pending = list(enumerate(jobs))[::-1]
        running: dict[Any, tuple[int, Any]] = {}
        idle = list(self.actors)
        while pending or running:
            while idle and pending:
                actor = idle.pop()
                index, (tasks, n, seed) = pending.pop()
                running[actor.run_batch.remote(tasks, n, seed)] = (index, actor)
            done, _ = ray.wait(list(running), num_returns=1)
            index, actor = running.pop(done[0])
            idle.append(actor)
            yield index, ray.get(done[0])

    def shutdown(self) -> None:
        for actor in self.actors:
            with contextlib.suppress(Exception):
                self._ray.kill(actor)
        self.actors = []


class _LocalDispatch:
    """Run jobs one after the other on a single in-process backend."""

    def __init__(self, backend: Any):
        self.backend = backend
        self.seeds_per_task = bool(getattr(backend, "seeds_per_task", False))

    def settings(self) -> dict:
        get = getattr(self.backend, "settings", None)
        return dict(get()) if callable(get) else {"backend": type(self.backend).__name__}

    def map_unordered(self, jobs):
        for index, (tasks, n, seed) in enumerate(jobs):
            yield index, self.backend.run_batch(tasks, n, seed)


# --------------------------------------------------------------------------------------
# Pass-rate measurement
# --------------------------------------------------------------------------------------


class MeasureError(RuntimeError):
    """The measurement cannot start or resume; the message names the file or setting."""


@dataclass
class MeasureResult:
    """Outcome of :func:`measure_pass_rates`.

    ``values`` (shape ``(tasks,)``) is the pass rate per task in row order, NaN for tasks
    not measured yet; ``complete`` says whether every task is done and the column written.
    ``failed_rollouts`` counts the rollouts whose latest attempt failed (the next run
    retries them; the column is not written while any remain) and ``failures`` splits
    them by kind (:data:`FAILURE_KINDS`); ``total_rollouts`` is ``tasks * n``.
    """

    column: str
    split: str
    values: np.ndarray
    complete: bool
    side_table: Path
    taskset_file: Path
    tasks: int
    measured_this_run: int
    resumed: int
    rollouts: int
    failed_rollouts: int
    seconds: float
    failures: dict = None
    total_rollouts: int = 0

    def failure_message(self) -> str:
        """The one line the command prints when rollouts failed."""
        return (f"{self.failed_rollouts} of {self.total_rollouts} rollouts failed "
                f"({describe_failures(self.failures or {})}); the column {self.column!r} was "
                f"not written; rerun to retry them (side table {self.side_table})")


def _fingerprint(frame: pd.DataFrame) -> str:
    """sha256 over the questions and answers, in order: resuming needs the same rows."""
    h = hashlib.sha256()
    for q, a in zip(frame["question"], frame["answer"], strict=True):
        h.update(str(q).encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
        h.update(str(a).encode("utf-8", "surrogatepass"))
        h.update(b"\x01")
    return h.hexdigest()


def default_rollouts_dir(taskset: Path, split: str, column: str) -> Path:
    """``runs/pass_rates/<taskset folder name>/<split>/<column>``: the side table's home."""
    return paths.runs_dir() / "pass_rates" / Path(taskset).resolve().name / split / column


def read_side_table(rollouts_dir: str | os.PathLike) -> pd.DataFrame:
    """All rollout records written so far (one row per task and rollout, sorted).

    Where a rollout was written more than once (a failed attempt, then a retry), the first
    successful record wins; a rollout that never succeeded shows its latest failure.
    """
    folder = Path(rollouts_dir)
    parts = sorted(folder.glob("part-*.parquet"))
    if not parts:
        return SIDE_SCHEMA.empty_table().to_pandas()
    tables = [pq.read_table(p, schema=SIDE_SCHEMA) for p in parts]
    frame = pa.concat_tables(tables).to_pandas()
    order = np.concatenate([np.full(len(t), i) for i, t in enumerate(tables)])
    failed = np.array([is_failed(e, r) for e, r in zip(frame["error"], frame["reward"],
                                                       strict=True)], dtype=bool)
    frame["_key"] = np.where(failed, len(tables) - order, -len(tables) + order - 1)
    frame = frame.sort_values(["row", "rollout", "_key"], kind="stable")
    frame = frame.drop_duplicates(["row", "rollout"], keep="first").drop(columns="_key")
    return frame.reset_index(drop=True)


def failed_mask(side: pd.DataFrame) -> np.ndarray:
    """Which records of a side table failed (see :func:`is_failed`)."""
    return np.array([is_failed(e, r) for e, r in zip(side["error"], side["reward"],
                                                      strict=True)], dtype=bool)


def _write_part(folder: Path, rows: list[dict]) -> Path:
    """Write one chunk of records atomically (a temporary name, then a rename)."""
    table = pa.Table.from_pylist(rows, schema=SIDE_SCHEMA)
    name = f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet"
    tmp = folder / f".tmp-{name}"
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, folder / name)
    return folder / name


@contextlib.contextmanager
def _held(path: Path, timeout: float, busy: str):
    """Hold a ``filelock`` on ``path`` (waiting up to ``timeout`` s; 0: not at all), else
    raise :class:`MeasureError` with ``busy``. The operating system drops the lock when its
    process dies (also on SIGKILL), so a killed run leaves nothing to clean up."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(path), timeout=timeout)
    try:
        lock.acquire()
    except Timeout:
        raise MeasureError(busy) from None
    try:
        yield
    finally:
        lock.release()


def _lock(folder: Path):
    """One writer per side table: its lock is never waited for."""
    return _held(folder / ".lock", 0, f"{folder}: another measurement is writing this side "
                 f"table (it holds {folder / '.lock'}); wait for it to finish or pass another "
                 "--rollouts-dir")


TASKSET_LOCK_NAME = ".write.lock"
TASKSET_LOCK_TIMEOUT = 600.0


def _taskset_lock(taskset: Path):
    """Serialise read-modify-writes of a taskset's files (split parquet, provenance.json),
    waiting up to :data:`TASKSET_LOCK_TIMEOUT` seconds for another measurement's write."""
    path = Path(taskset) / TASKSET_LOCK_NAME
    return _held(path, TASKSET_LOCK_TIMEOUT, f"{path}: another process has held this "
                 f"taskset's write lock for {TASKSET_LOCK_TIMEOUT:.0f} s; is a measurement "
                 "stuck?")


def _comparable(settings: dict) -> dict:
    return {k: v for k, v in settings.items() if k not in _RESUMABLE_SETTING_KEYS}


def _prepare_side_table(folder: Path, state: dict, restart: bool) -> None:
    """Create the side table folder or check that it holds the same measurement."""
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob(".tmp-part-*.parquet"):  # a chunk that a killed run never renamed
        stale.unlink()
    run_file = folder / "run.json"
    if run_file.exists() and restart:
        for p in folder.glob("part-*.parquet"):
            p.unlink()
        run_file.unlink()
    if run_file.exists():
        old = json.loads(run_file.read_text())
        checks = [("taskset file", old.get("taskset_file"), state["taskset_file"]),
                  ("taskset rows (fingerprint)", old.get("fingerprint"), state["fingerprint"]),
                  ("n", old.get("n"), state["n"]), ("seed", old.get("seed"), state["seed"]),
                  ("backend settings", _comparable(old.get("backend", {})),
                   _comparable(state["backend"]))]
        for what, was, now in checks:
            if was != now:
                raise MeasureError(
                    f"{run_file}: this side table belongs to a measurement with different "
                    f"{what} ({was!r} there, {now!r} now). Resume with the same settings, "
                    "pass --restart to discard it, or --rollouts-dir for a separate one.")
    else:
        run_file.write_text(json.dumps(state, indent=2, default=str) + "\n")


def _pass_rates(side: pd.DataFrame, num_tasks: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-task mean accuracy over rollouts ``0..n-1`` and a mask of complete tasks.

    Only successful records count: a task with a failed rollout is not done (it is rerun).
    Returns ``values`` (shape ``(num_tasks,)``, NaN where incomplete) and ``done`` (bool).
    """
    values = np.full(num_tasks, np.nan)
    done = np.zeros(num_tasks, dtype=bool)
    if len(side):
        rows = side[(side["rollout"] >= 0) & (side["rollout"] < n) & ~failed_mask(side)]
        grouped = rows.groupby("row")["accuracy"].agg(["mean", "count"])
        grouped = grouped[(grouped.index >= 0) & (grouped.index < num_tasks)]
        full = grouped[grouped["count"] == n]
        done[full.index.to_numpy()] = True
        values[full.index.to_numpy()] = full["mean"].to_numpy()
    return values, done


def _write_column(file: Path, column: str, values: np.ndarray) -> None:
    """Put ``values`` into ``column`` of the split file (replaced atomically), validated.

    The read-modify-write holds the taskset's lock, so two measurements writing different
    columns of one split both keep their column.
    """
    from mathagent.tasks import validate_taskset

    file = Path(file)
    with _taskset_lock(file.parent):
        table = pq.read_table(file)
        array = pa.array(values.astype(np.float64), type=pa.float64())
        if column in table.column_names:
            table = table.set_column(table.column_names.index(column), column, array)
        else:
            table = table.append_column(column, array)
        validate_taskset(table, [column], source=file)
        tmp = file.with_name(f".tmp-{uuid.uuid4().hex[:8]}-{file.name}")
        try:
            pq.write_table(table.replace_schema_metadata(None), tmp, compression="zstd")
            os.replace(tmp, file)
        finally:
            tmp.unlink(missing_ok=True)


def _update_provenance(taskset: Path, column: str, split: str, record: dict) -> None:
    """Record the measurement under ``measurements[column][split]`` in provenance.json."""
    taskset = Path(taskset)
    file = taskset / "provenance.json"
    with _taskset_lock(taskset):
        prov = json.loads(file.read_text()) if file.exists() else {}
        prov.setdefault("measurements", {}).setdefault(column, {})[split] = record
        tmp = file.with_name(f".tmp-{uuid.uuid4().hex[:8]}-provenance.json")
        try:
            tmp.write_text(json.dumps(prov, indent=2, default=str) + "\n")
            os.replace(tmp, file)
        finally:
            tmp.unlink(missing_ok=True)


def check_measurement(taskset: Path, column: str, split: str, rollouts_dir: Path,
                      overwrite: bool) -> pd.DataFrame:
    """Validate the split and the column name before any model time is spent; the split."""
    from mathagent.tasks import read_split

    if not column or column in ("question", "answer"):
        raise MeasureError(f"column {column!r}: choose a new feature column name, e.g. "
                           "'mymodel_pass_rate'")
    file = Path(taskset) / f"{split}.parquet"
    frame = read_split(taskset, split)  # validates; errors name file, row and column
    if column in frame.columns and not overwrite and not (rollouts_dir / "run.json").exists():
        raise MeasureError(f"{file}: column {column!r} exists already; pass --overwrite to "
                           "measure it again or choose another --column")
    return frame


def measure_pass_rates(taskset: str | os.PathLike, column: str, backend: Any, *,
                       split: str = "train", n: int = 16, seed: int = 0,
                       chunk_size: int = 8, rollouts_dir: str | os.PathLike | None = None,
                       keep_responses: bool = True, overwrite: bool = False,
                       restart: bool = False, max_tasks: int | None = None,
                       progress: bool = True) -> MeasureResult:
    """Measure every task's pass rate over ``n`` rollouts into ``column`` of the split file.

    ``backend`` is a backend (``run_batch``) or a :class:`RayFanout`. Tasks are handed out in
    chunks of ``chunk_size``; each finished chunk is appended to the side table in
    ``rollouts_dir`` (default :func:`default_rollouts_dir`), so a rerun with the same
    settings resumes where the last run stopped. ``max_tasks`` stops after that many new
    tasks (a partial run; the column is written only once every task is done).
    ``overwrite`` allows replacing a column that exists without a matching side table;
    ``restart`` discards the side table.
    """
    from tqdm import tqdm

    started = time.perf_counter()
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    taskset = Path(taskset)
    file = taskset / f"{split}.parquet"
    folder = Path(rollouts_dir) if rollouts_dir else default_rollouts_dir(taskset, split, column)
    frame = check_measurement(taskset, column, split, folder, overwrite)
    dispatch = backend if hasattr(backend, "map_unordered") else _LocalDispatch(backend)
    state = {"taskset_file": str(file.resolve()), "split": split, "column": column,
             "fingerprint": _fingerprint(frame), "n": int(n), "seed": int(seed),
             "backend": dispatch.settings(),
             "created": datetime.now(UTC).isoformat(timespec="seconds")}

    folder.mkdir(parents=True, exist_ok=True)
    with _lock(folder):
        _prepare_side_table(folder, state, restart)
        side = read_side_table(folder)
        values, done = _pass_rates(side, len(frame), n)
        resumed = int(done.sum())
        todo = np.flatnonzero(~done)
        if max_tasks is not None:
            todo = todo[:max(0, int(max_tasks))]
        records = frame.to_dict("records")
        jobs, job_ids = [], []
        for start in range(0, len(todo), chunk_size):
            ids = [int(i) for i in todo[start:start + chunk_size]]
            tasks = [{**records[i], "row": i} for i in ids]
            job_seed = seed if dispatch.seeds_per_task else chunk_seed(seed, ids)
            jobs.append((tasks, n, job_seed))
            job_ids.append(ids)

        failed = 0
        bar = tqdm(total=len(todo) * n, desc=f"measure {column}", unit="rollout",
                   disable=not progress, dynamic_ncols=True)
        inner = getattr(dispatch, "backend", None)
        per_rollout = inner is not None and hasattr(inner, "on_rollout")
        if per_rollout:
            inner.on_rollout = lambda record: bar.update()
        try:
            for index, results in dispatch.map_unordered(jobs):
                ids = job_ids[index]
                if len(results) != len(ids) or any(len(r) != n for r in results):
                    raise MeasureError(f"backend {state['backend'].get('backend')} returned "
                                       f"{[len(r) for r in results]} records for {len(ids)} "
                                       f"tasks x n={n}")
                rows = []
                for row_number, recs in zip(ids, results, strict=True):
                    for rec in recs:
                        row = {k: rec.get(k) for k in ROLLOUT_KEYS}
                        for key in ("response", "extracted", "error"):  # any backend's types
                            if row[key] is not None and not isinstance(row[key], str):
                                row[key] = str(row[key])
                        row["row"] = row_number
                        if not keep_responses:
                            row["response"] = None
                        if is_failed(row["error"], row["reward"]):
                            failed += 1
                            row["reward"] = row["accuracy"] = math.nan
                            row["error"] = row["error"] or "the backend returned no reward"
                        rows.append(row)
                _write_part(folder, rows)
                if not per_rollout:
                    bar.update(len(rows))
                bar.set_postfix(failed=failed)
        finally:
            bar.close()
            if per_rollout:
                inner.on_rollout = None

        side = read_side_table(folder)
        values, done = _pass_rates(side, len(frame), n)
        complete = bool(done.all())
        in_range = ((side["rollout"] >= 0) & (side["rollout"] < n) & (side["row"] >= 0)
                    & (side["row"] < len(frame))).to_numpy()
        failed_errors = side.loc[in_range & failed_mask(side), "error"].tolist()
        failed_total = len(failed_errors)
        if complete:
            _write_column(file, column, values)
            _update_provenance(taskset, column, split, {
                "statistic": f"mean accuracy over n={n} rollouts per task (workflow + judge)",
                "n": int(n), "seed": int(seed), "settings": state["backend"],
                "tasks": int(len(frame)), "rollouts": int(len(frame) * n),
                "failed_rollouts": failed_total,
                "timeouts": sum(failure_kind(e) == "timeout" for e in failed_errors),
                "mean_pass_rate": float(np.mean(values)),
                "side_table": str(folder.resolve()),
                "finished": datetime.now(UTC).isoformat(timespec="seconds"),
                "command": " ".join(sys.argv) if sys.argv else "",
            })
    return MeasureResult(column=column, split=split, values=values, complete=complete,
                         side_table=folder, taskset_file=file, tasks=int(len(frame)),
                         measured_this_run=int(len(todo)), resumed=resumed,
                         rollouts=int(len(side)), failed_rollouts=failed_total,
                         seconds=time.perf_counter() - started,
                         failures=failure_counts(failed_errors),
                         total_rollouts=int(len(frame) * n))


# --------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------


def _add_endpoint_args(parser: argparse.ArgumentParser, temperature: float,
                       several: bool) -> None:
    group = parser.add_argument_group("model endpoint (default: start the bundled model)")
    if several:
        group.add_argument("--base-url", nargs="+", default=None, metavar="URL",
                           help="OpenAI-compatible base URL(s) ending in /v1 (default: "
                                "$MATHAGENT_BASE_URL, else a local llama.cpp server); "
                                "several URLs (one vLLM server per GPU) are used in "
                                "parallel through Ray")
    else:
        group.add_argument("--base-url", default=None, metavar="URL",
                           help="OpenAI-compatible base URL ending in /v1 (default: "
                                "$MATHAGENT_BASE_URL, else a local llama.cpp server)")
    group.add_argument("--api-key", default=None, help="API key (default: $MATHAGENT_API_KEY)")
    group.add_argument("--model", default=None,
                       help="served model name (default: $MATHAGENT_MODEL or the bundled model)")
    group.add_argument("--temperature", type=float, default=temperature,
                       help="sampling temperature (default: %(default)s)")
    group.add_argument("--max-tokens", type=int, default=512,
                       help="reply length limit per model call (default: %(default)s; the "
                            "upstream Qwen3 runs use 16384)")
    group.add_argument("--n-ctx", type=int, default=2048,
                       help="context length of the local server (default: %(default)s)")
    group = parser.add_argument_group("agent and judge (endpoint backend)")
    group.add_argument("--prompt-variant", default="reference",
                       choices=["reference", "single_braces"],
                       help="system prompt: the upstream one with its doubled braces "
                            "(default) or with single braces")
    group.add_argument("--python-tool", action="store_true",
                       help="give the agent AgentScope's execute_python_code (runs model code)")
    group.add_argument("--tool-timeout", type=float, default=30.0,
                       help="seconds per code execution (default: %(default)s)")
    group.add_argument("--lenient", action="store_true",
                       help="also accept the last number of a reply (default: the upstream "
                            "boxed-answer judge)")
    group = parser.add_argument_group("batching")
    group.add_argument("--concurrency", type=int, default=None,
                       help="rollouts in flight per endpoint (default: 4 for the local "
                            "server, 32 for a given endpoint, meant for vLLM; a llama.cpp "
                            "server answers one request at a time and time spent in its "
                            "queue counts against --timeout)")
    group.add_argument("--timeout", type=float, default=300.0,
                       help="seconds per rollout before it counts as failed (default: "
                            "%(default)s)")
    group.add_argument("--seed", type=int, default=0, help="base seed (default: %(default)s)")
    group.add_argument("--no-responses", action="store_true",
                       help="do not store reply texts (rewards and answers only)")


def _settings_from_args(args: argparse.Namespace, base_url: str | None) -> ModelSettings:
    return ModelSettings.from_env(base_url=base_url, api_key=args.api_key, model=args.model,
                                  temperature=args.temperature, max_tokens=args.max_tokens)


def _agent_options(args: argparse.Namespace):
    from mathagent.agent import AgentOptions

    return AgentOptions(prompt_variant=args.prompt_variant, python_tool=args.python_tool,
                        tool_timeout=args.tool_timeout, console_output=False)


def _base_urls(args: argparse.Namespace) -> list[str]:
    if args.base_url:
        return [args.base_url] if isinstance(args.base_url, str) else list(args.base_url)
    env = os.environ.get("MATHAGENT_BASE_URL")
    return [env] if env else []


@contextlib.contextmanager
def _endpoints(args: argparse.Namespace) -> Iterator[list[ModelSettings]]:
    """The endpoints of a command: those given, else one local server
    (:func:`mathagent.serving.connect` checks each one)."""
    from mathagent.serving import ENV_MODEL, connect, endpoint

    setting = ("--model" if args.model else ENV_MODEL if os.environ.get(ENV_MODEL)
               else "--model (default)")
    urls = _base_urls(args)
    if urls:
        yield [connect(_settings_from_args(args, url), setting)[0] for url in urls]
        return
    with endpoint(_settings_from_args(args, None), setting, n_ctx=args.n_ctx) as settings:
        print(f"started the bundled model at {settings.base_url}", file=sys.stderr)
        yield [settings]


def _default_concurrency(args: argparse.Namespace) -> int:
    if args.concurrency:
        return int(args.concurrency)
    return 32 if _base_urls(args) else 4


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def run_agent_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--taskset", type=Path, default=paths.ARITHMETIC_DIR, metavar="DIR",
                        help="taskset directory (default: %(default)s)")
    parser.add_argument("--split", default="test", help="split to run (default: %(default)s)")
    parser.add_argument("--limit", type=int, default=20,
                        help="first N tasks of the split, 0 for all (default: %(default)s)")
    parser.add_argument("--n", type=int, default=1,
                        help="rollouts per task (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=None,
                        help="results CSV; params.json goes beside it (default: "
                             "runs/agent/<timestamp>/results.csv)")
    parser.add_argument("--force", action="store_true",
                        help="replace the results of an earlier run in the --out folder")
    _add_endpoint_args(parser, temperature=0.0, several=False)


def _default_out() -> Path:
    """``runs/agent/<timestamp>/results.csv`` in a folder no other run has used."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = paths.runs_dir() / "agent"
    folder, k = base / stamp, 1
    while folder.exists() and any(folder.iterdir()):
        folder, k = base / f"{stamp}-{k}", k + 1
    return folder / "results.csv"


def _existing_outputs(out: Path) -> list[Path]:
    return [p for p in (out, out.parent / "params.json") if p.exists()]


def write_outputs(out: Path, files: dict[str, str]) -> None:
    """Write ``files`` (name -> text) into ``out.parent`` as one swap.

    Everything is written into a temporary folder beside it first. When ``out.parent``
    holds nothing but these files (a run folder), the folder is swapped in whole: the old
    one is renamed aside, the new one renamed into place, the old one deleted; a failure
    before the swap leaves the old output as it was. In a folder holding other files too
    (``--out results.csv`` in a project folder), each file is renamed over its old version.
    """
    from mathagent.outputs import swap_in

    folder = out.parent
    folder.parent.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    tmp = folder.parent / f".{folder.name}.tmp-{tag}"
    tmp.mkdir()
    try:
        for name, text in files.items():
            (tmp / name).write_text(text)
        own = folder.is_dir() and {p.name for p in folder.iterdir()} <= set(files)
        if not folder.exists() or own:
            swap_in(tmp, folder)
        else:
            for name in files:
                os.replace(tmp / name, folder / name)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def run_agent_command(args: argparse.Namespace) -> int:
    """Run the agent and judge over tasks; write results.csv + params.json; print a summary.

    Exit codes: 0 when every rollout ran, 1 when some failed (they are in results.csv with
    their error and no reward), 2 for a usage error, 130 on Ctrl-C (nothing written).
    """
    from mathagent.serving import EndpointError, ServerStartError
    from mathagent.tasks import TasksetError, read_split

    if args.limit < 0:
        return _fail(f"--limit {args.limit}: must be >= 0 (N runs the first N tasks of the "
                     "split, 0 runs all of them)")
    if args.n < 1:
        return _fail(f"--n {args.n}: must be >= 1 (rollouts per task)")
    out = args.out or _default_out()
    existing = _existing_outputs(out)
    if existing and not args.force:
        return _fail(f"{existing[0]} exists already (an earlier run's output); pass --force "
                     "to replace it or choose another --out")
    try:
        frame = read_split(args.taskset, args.split)
    except TasksetError as exc:
        return _fail(str(exc))
    if args.limit:
        frame = frame.iloc[:args.limit]
    try:
        options = _agent_options(args)
        with _endpoints(args) as endpoints:
            settings = endpoints[0]
            table = run_tasks(frame, settings, n=args.n, seed=args.seed, options=options,
                              lenient=args.lenient, concurrency=_default_concurrency(args),
                              timeout=args.timeout, keep_response=not args.no_responses)
    except (EndpointError, ServerStartError, ValueError) as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        print(f"interrupted: nothing was written to {out.parent}; rerun to start over",
              file=sys.stderr)
        return 130
    summary = summarize(table)
    params = {"taskset": str(args.taskset), "split": args.split, "limit": args.limit,
              "n": args.n, "seed": args.seed, "model": settings.describe(),
              "agent": options.describe(), "lenient": args.lenient,
              "concurrency": _default_concurrency(args), "timeout": args.timeout,
              "summary": summary}
    try:
        write_outputs(out, {out.name: table.to_csv(index=False),
                            "params.json": json.dumps(params, indent=2, default=str) + "\n"})
    except OSError as exc:
        return _fail(f"cannot write the results to {out.parent}: {exc}; an earlier output "
                     "there is unchanged")
    print(f"accuracy {summary['accuracy']:.3f} over {summary['rollouts'] - summary['failed']} "
          f"rollouts that ran ({summary['tasks']} tasks); answered {summary['answered']:.0%}; "
          f"failed {summary['failed']} (timeouts {summary['timeouts']}); "
          f"mean latency {summary['mean_latency_s']:.2f} s")
    print(f"results: {out}")
    if summary["failed"]:
        print(f"error: {summary['failed']} of {summary['rollouts']} rollouts failed "
              f"({describe_failures(summary['failures'])}); their rows in {out} have the "
              "error and no reward, and the accuracy above leaves them out", file=sys.stderr)
        return 1
    return 0


def measure_pass_rates_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--taskset", type=Path, default=paths.ARITHMETIC_DIR, metavar="DIR",
                        help="taskset directory (default: %(default)s)")
    parser.add_argument("--split", default="train", help="split to measure (default: %(default)s)")
    parser.add_argument("--column", required=True,
                        help="feature column to write, e.g. smollm2_weak_pass_rate")
    parser.add_argument("--n", type=int, default=16,
                        help="rollouts per task (default: %(default)s, as for guru's pass rates)")
    parser.add_argument("--backend", choices=["endpoint", "hf"], default="endpoint",
                        help="endpoint: workflow + judge against OpenAI-compatible server(s); "
                             "hf: batched transformers sampling on a GPU with the trainer's "
                             "prompt and the lenient judge (mathagent.policy.HFBackend)")
    parser.add_argument("--chunk-size", type=int, default=None,
                        help="tasks per chunk, the unit written to the side table "
                             "(default: 8 for endpoints, 64 for hf)")
    parser.add_argument("--rollouts-dir", type=Path, default=None,
                        help="side table folder (default: runs/pass_rates/<taskset>/<split>/"
                             "<column>)")
    parser.add_argument("--max-tasks", type=int, default=None,
                        help="stop after this many new tasks (continue later by rerunning)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing column of that name")
    parser.add_argument("--restart", action="store_true",
                        help="discard the side table of an earlier run and start over")
    parser.add_argument("--ray-address", default="local",
                        help="ray.init address for several endpoints (default: %(default)s; "
                             "'auto' joins a running cluster)")
    _add_endpoint_args(parser, temperature=1.0, several=True)
    group = parser.add_argument_group("hf backend")
    group.add_argument("--hf-model", default=None,
                       help="model folder, GGUF file or hub id (default: the bundled model)")
    group.add_argument("--device", default=None, help="torch device (default: cuda if present)")


def _hf_backend(args: argparse.Namespace):
    from mathagent.policy import HFBackend

    return HFBackend(model=args.hf_model, device=args.device, temperature=args.temperature,
                     max_new_tokens=args.max_tokens, lenient=True)


def _progress_line(folder: Path, args: argparse.Namespace) -> str:
    """Where an interrupted measurement left its progress, and how to go on."""
    from mathagent.tasks import read_split

    try:
        total = len(read_split(args.taskset, args.split))
        _, done = _pass_rates(read_side_table(folder), total, args.n)
        progress = f"{int(done.sum())} of {total} tasks done"
    except Exception:  # reporting must not fail the exit; the side table is intact anyway
        progress = "finished chunks are kept"
    return (f"interrupted: progress saved in {folder} ({progress}); rerun the same command "
            "to resume")


def measure_pass_rates_command(args: argparse.Namespace) -> int:
    """Measure pass rates into a feature column; resumable; see :func:`measure_pass_rates`.

    Exit codes: 0 when the column was written (or a ``--max-tasks`` run ended cleanly),
    1 when rollouts failed (the column is not written; a rerun retries them), 2 for a
    usage error, 130 on Ctrl-C (progress is kept; a rerun resumes).
    """
    import functools

    from mathagent.serving import EndpointError, ServerStartError
    from mathagent.tasks import TasksetError

    if args.n < 1:
        return _fail(f"--n {args.n}: must be >= 1 (rollouts per task)")
    if args.chunk_size is not None and args.chunk_size < 1:
        return _fail(f"--chunk-size {args.chunk_size}: must be >= 1")
    if args.max_tasks is not None and args.max_tasks < 1:
        return _fail(f"--max-tasks {args.max_tasks}: must be >= 1 (leave it out for all tasks)")
    common = {"split": args.split, "n": args.n, "seed": args.seed,
              "rollouts_dir": args.rollouts_dir, "keep_responses": not args.no_responses,
              "overwrite": args.overwrite, "restart": args.restart, "max_tasks": args.max_tasks}
    fanout = None
    folder = args.rollouts_dir or default_rollouts_dir(args.taskset, args.split, args.column)
    try:
        check_measurement(args.taskset, args.column, args.split, folder, args.overwrite)
        if args.backend == "hf":
            result = measure_pass_rates(args.taskset, args.column, _hf_backend(args),
                                        chunk_size=args.chunk_size or 64, **common)
        else:
            options = _agent_options(args)
            with _endpoints(args) as endpoints:
                kwargs = {"options": options, "lenient": args.lenient,
                          "concurrency": _default_concurrency(args), "timeout": args.timeout,
                          "keep_response": not args.no_responses}
                if len(endpoints) == 1:
                    backend = EndpointBackend(endpoints[0], **kwargs)
                else:
                    fanout = backend = RayFanout(
                        [functools.partial(EndpointBackend, s, **kwargs) for s in endpoints],
                        address=args.ray_address)
                result = measure_pass_rates(args.taskset, args.column, backend,
                                            chunk_size=args.chunk_size or 8, **common)
    except (EndpointError, ServerStartError, TasksetError, MeasureError, ValueError) as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        print(_progress_line(Path(folder), args), file=sys.stderr)
        return 130
    finally:
        if fanout is not None:
            with contextlib.suppress(Exception):
                fanout.shutdown()
    state = "written to" if result.complete else "not yet written to"
    print(f"{result.column}: {int(np.isfinite(result.values).sum())}/{result.tasks} tasks "
          f"measured ({result.resumed} resumed, {result.measured_this_run} this run), "
          f"{result.failed_rollouts} failed rollouts; column {state} {result.taskset_file}")
    if result.failed_rollouts:
        print(f"error: {result.failure_message()}", file=sys.stderr)
        return 1
    if result.complete:
        print(f"mean pass rate {np.mean(result.values):.3f}; side table {result.side_table}")
    return 0

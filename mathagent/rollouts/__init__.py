"""Rollouts at scale: the batch runner and pass-rate measurement.

**Batch runner** (:func:`run_tasks`, ``python -m mathagent run-agent``). Runs the workflow
(:mod:`mathagent.agent`) and the judge (:mod:`mathagent.judge`) over many tasks against
one OpenAI-compatible endpoint, at most ``concurrency`` rollouts at a time, each bounded
by ``timeout`` seconds, with a progress bar. A rollout that fails (an endpoint error, a
timeout, an exception in the agent or the judge) is recorded as *failed*: ``error`` says
why and ``reward``/``accuracy`` are NaN, not 0, so a dead endpoint never passes for a model
that answers wrong; the batch never aborts. The result is a
tidy table with one row per (task, rollout): ``row, task_id, rollout, question, truth,
response, extracted, reward, accuracy, latency_s, tokens, error, input_tokens, calls,
model_s, tool_calls, tool_errors``: ``row`` is the task's position in its split, ``task_id``
the taskset's own id column (else the row), ``tokens`` the completion tokens (None when the
server does not report usage), ``model_s`` the seconds spent inside model calls, so
``latency_s - model_s`` is the runner's own overhead, and ``tool_calls`` / ``tool_errors``
the agent's tool calls and the failed ones among them (None for a rollout that failed).

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

This package imports only numpy, pandas and pyarrow at top level (AgentScope and Ray are
imported when used), so the driver runs on a GPU machine that has no AgentScope.

Modules:

* :mod:`~mathagent.rollouts.records`: a rollout record's keys and seed; failures told and counted.
* :mod:`~mathagent.rollouts.runner`: the async runner of workflow + judge, its table and summary.
* :mod:`~mathagent.rollouts.backends`: one endpoint, a Ray fan-out over several, local dispatch.
* :mod:`~mathagent.rollouts.store`: the side table, its locks, the column and provenance writes.
* :mod:`~mathagent.rollouts.measure`: the pass-rate driver, chunk by chunk, resumable.
* :mod:`~mathagent.rollouts.options`: the commands' endpoint, agent and batching settings.
* :mod:`~mathagent.rollouts.commands`: the ``run-agent`` and ``measure-pass-rates`` commands.
"""

from mathagent.rollouts.backends import EndpointBackend, RayFanout
from mathagent.rollouts.commands import (
    measure_pass_rates_command,
    measure_pass_rates_parser,
    run_agent_command,
    run_agent_parser,
    write_outputs,
)
from mathagent.rollouts.measure import MeasureResult, check_measurement, measure_pass_rates
from mathagent.rollouts.records import (
    ENDPOINT_ERROR_PREFIX,
    FAILURE_KINDS,
    MAX_ERROR_CHARS,
    ROLLOUT_KEYS,
    RUNNER_KEYS,
    TIMEOUT_PREFIX,
    chunk_seed,
    describe_failures,
    failure_counts,
    failure_kind,
    is_failed,
    rollout_seed,
)
from mathagent.rollouts.runner import (
    _one_rollout,
    accuracy_table,
    arun_rollouts,
    as_task_dicts,
    run_tasks,
    summarize,
)
from mathagent.rollouts.store import (
    SIDE_SCHEMA,
    TASKSET_LOCK_NAME,
    TASKSET_LOCK_TIMEOUT,
    MeasureError,
    _update_provenance,
    _write_column,
    default_rollouts_dir,
    failed_mask,
    read_side_table,
)

__all__ = [
    "ENDPOINT_ERROR_PREFIX", "FAILURE_KINDS", "MAX_ERROR_CHARS", "ROLLOUT_KEYS", "RUNNER_KEYS",
    "SIDE_SCHEMA", "TASKSET_LOCK_NAME", "TASKSET_LOCK_TIMEOUT", "TIMEOUT_PREFIX",
    "EndpointBackend", "MeasureError", "MeasureResult", "RayFanout",
    "_one_rollout", "_update_provenance", "_write_column",
    "accuracy_table", "arun_rollouts", "as_task_dicts", "check_measurement", "chunk_seed",
    "default_rollouts_dir", "describe_failures", "failed_mask", "failure_counts",
    "failure_kind", "is_failed", "measure_pass_rates", "measure_pass_rates_command",
    "measure_pass_rates_parser", "read_side_table", "rollout_seed", "run_agent_command",
    "run_agent_parser", "run_tasks", "summarize", "write_outputs",
]

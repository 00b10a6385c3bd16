"""The async runner: workflow + judge for one rollout, many at a time, into a tidy table.

:func:`arun_rollouts` runs ``n`` rollouts of every task against one endpoint, at most
``concurrency`` at once, each bounded by ``timeout`` seconds; :func:`run_tasks` wraps it
for scripts and notebooks (one row per rollout) and :func:`summarize` and
:func:`accuracy_table` give its headline numbers.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from mathagent.rollouts.records import (
    ENDPOINT_ERROR_PREFIX,
    ROLLOUT_KEYS,
    RUNNER_KEYS,
    TIMEOUT_PREFIX,
    _error_text,
    _failed_record,
    _is_endpoint_error,
    failure_counts,
    is_failed,
    rollout_seed,
)
from mathagent.run_sync import run_sync
from mathagent.serving import ModelSettings

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
            for key in ("tool_calls", "tool_errors"):
                value = (getattr(output, "metrics", None) or {}).get(key)
                record[key] = None if value is None else int(value)
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
    :data:`ROLLOUT_KEYS` plus :data:`RUNNER_KEYS`). ``on_rollout`` is called
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
                         **{k: rec.get(k) for k in RUNNER_KEYS}})
    frame = pd.DataFrame(rows)
    for col in ("tokens", "input_tokens", "calls", "tool_calls", "tool_errors"):
        frame[col] = frame[col].astype("Int64")
    return frame


def summarize(frame: pd.DataFrame) -> dict[str, Any]:
    """Headline numbers of a runner table: accuracy, failures, latency, tokens, tool use.

    ``accuracy`` and ``mean_reward`` are over the rollouts that ran (failed ones have no
    reward); ``failed`` counts the others and ``failures`` splits them by kind;
    ``tool_calls`` and ``tool_errors`` are totals over the rollouts that report them.
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
        **{col: int(frame[col].sum()) if col in frame else 0
           for col in ("tool_calls", "tool_errors")},
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

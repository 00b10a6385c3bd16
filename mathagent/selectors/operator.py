"""RolloutPassRateCalculator: per-task pass rates for the selector, one value per rollout.

The feedback operator Trinity's experience pipeline runs (``data_processor.experience_pipeline
.operators: [{name: mathagent.selectors.RolloutPassRateCalculator}]``). Trinity's
``pass_rate_calculator`` averages ``exp.reward`` over every experience of a task; under
``multi_step_grpo`` each model call of an agent run is its own experience carrying the run's
reward, so a run that made five calls counts five times. This operator first reduces each run
(rollout) to one value, then averages the runs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from trinity.buffer.operators.experience_operator import ExperienceOperatorV1
from trinity.common.constants import SELECTOR_METRIC


class RolloutPassRateCalculator(ExperienceOperatorV1):
    """Per-task pass rates with one value per rollout, for the selector's ``feedback``.

    Experiences are grouped by task (``exp.info["task_index"]``: ``taskset_id`` and
    ``index``, set by Trinity's workflow runner) and, within a task, by rollout: Trinity
    names a run by its experience id ``eid.rid`` = ``batch/task/run`` (``eid.run`` is the
    repeat number, offset by ``run_id_base`` when a task's repeats are split across
    runners). A run's value is the mean reward of its experiences (under ``multi_step_grpo``
    they all carry the run's reward), and a task's pass rate is the mean over its runs, so
    a run that made many model calls weighs no more than one that made a single call.

    Returns the metric dict Trinity's task scheduler reads (``selector_metric``) and the
    same ``selection/*`` ratios as Trinity's ``pass_rate_calculator``, plus
    ``selection/runs_per_task`` and ``selection/experiences_per_run``.
    """

    # Trinity loads the class by its public dotted path (OPERATOR_PATH) and reports it there.
    __module__ = "mathagent.selectors"

    def __init__(self, **kwargs: Any):
        if kwargs:
            raise TypeError(f"RolloutPassRateCalculator takes no arguments, got {sorted(kwargs)}")

    async def process(self, exps: list) -> tuple[list, dict]:
        return exps, self.compute(exps)

    @staticmethod
    def run_rewards(exps: Iterable) -> dict[Any, dict[int, list[float]]]:
        """``{taskset_id: {task index: [one value per rollout]}}`` in first-seen order."""
        runs: dict[Any, dict[int, dict[str, list[float]]]] = defaultdict(
            lambda: defaultdict(lambda: defaultdict(list)))
        for k, exp in enumerate(exps):
            info = getattr(exp, "info", None) or {}
            task = info.get("task_index")
            if not isinstance(task, Mapping) or "taskset_id" not in task or "index" not in task:
                raise ValueError(
                    f"RolloutPassRateCalculator: experience {k} (eid {exp.eid}) has no "
                    f"info['task_index'] with 'taskset_id' and 'index'; got {task!r}")
            if exp.reward is None:
                raise ValueError(f"RolloutPassRateCalculator: experience {k} (eid {exp.eid}) "
                                 f"has no reward")
            runs[task["taskset_id"]][int(task["index"])][exp.eid.rid].append(float(exp.reward))
        return {ts: {i: [float(np.mean(r)) for r in per_run.values()]
                     for i, per_run in tasks.items()} for ts, tasks in runs.items()}

    def compute(self, exps: Sequence) -> dict:
        """The metric dict for one explore step's experiences."""
        per_task = self.run_rewards(exps)
        metric, rates, n_runs = {}, [], []
        for taskset_id, tasks in per_task.items():
            indices = list(tasks)
            values = [float(np.mean(v)) for v in tasks.values()]
            metric[taskset_id] = {"indices": indices, "values": values}
            rates += values
            n_runs += [len(v) for v in tasks.values()]
        out: dict[str, Any] = {SELECTOR_METRIC: metric}
        if not rates:
            return out
        pr = np.asarray(rates)
        lo, hi = 1 / 16 + 1e-3, 15 / 16 - 1e-3
        out.update({
            "selection/valid_ratio": float(np.mean((pr > 0) & (pr < 1))),
            "selection/strict_valid_ratio": float(np.mean((pr > lo) & (pr < hi))),
            "selection/<1_ratio": float(np.mean(pr < 1)),
            "selection/>0_ratio": float(np.mean(pr > 0)),
            "selection/<15_16_ratio": float(np.mean(pr < hi)),
            "selection/>1_16_ratio": float(np.mean(pr > lo)),
            "selection/runs_per_task": float(np.mean(n_runs)),
            "selection/experiences_per_run": len(exps) / float(np.sum(n_runs)),
        })
        return out

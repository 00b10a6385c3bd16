"""Trinity's best-of and worst-of evaluation metrics in a few NumPy calls: a lever for evaluation.

When every reply of a held-out task is back, Trinity-RFT 0.6.0's scheduler (in its
RolloutCoordinator actor, the process that also hands the tasks to the workflow runners) calls
``calculate_task_level_metrics`` (``trinity/utils/metrics.py``). For each metric averaged
over the replies, and each n of 2, 4, ... up to the number of replies, it estimates best@n
and worst@n with ``bootstrap_metric``: 1,000 resamples, each drawn by its own
``np.random.choice`` call and reduced by ``max`` and ``min`` over a Python list. With 4
replies and the agent's four metrics (accuracy, format score, tool calls, tool errors) that is
8,000 resamples a task, and an evaluation has 660 tasks: about a minute of one core in a
process that is needed to hand out the next task. The CPU table of
``benchmarks/bench_engine_step_levers16.md`` found that process at a full core through the
evaluations; ``benchmarks/bench_eval_bootstrap.py`` times one evaluation's metrics both ways.

:func:`bootstrap_metric` draws the same resamples in one call, as one ``(n_bootstrap,
subset_size)`` array (NumPy's legacy generator yields the same numbers either way, and is
left in the same state), then reduces them with NumPy where that gives the same numbers: the
reducers are the built-in ``max`` and ``min`` and the values are Python numbers without NaN.
Anything else is reduced one resample at a time as Trinity does, from the same draws. The
results are Trinity's to the bit (``tests/test_eval_bootstrap.py``), so the lever is on
unless ``MATHAGENT_FAST_BOOTSTRAP=0``.

Only :func:`install` touches Trinity; it is applied through :mod:`mathagent.compat`
(``trinity-fast-bootstrap``) in the worker that imports ``trinity.utils.metrics``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

#: Set to 0 to leave ``trinity-fast-bootstrap`` out (in ``train`` and every Ray worker of the run).
FAST_BOOTSTRAP_ENV = "MATHAGENT_FAST_BOOTSTRAP"

_REDUCERS = {max: np.max, min: np.min}


def unwanted() -> str | None:
    if os.environ.get(FAST_BOOTSTRAP_ENV, "1") == "0":
        return f"a speed lever, turned off with {FAST_BOOTSTRAP_ENV}=0"
    return None


def _plain_numbers(data: Sequence[Any]) -> bool:
    """Whether every value is a Python bool, int (within float64's exact range) or float
    (NumPy's float64 is one), and none is NaN: where NumPy's max and min over float64 give the
    numbers Python's give, and their mean and deviation are computed in float64 either way."""
    for value in data:
        if isinstance(value, float):
            if math.isnan(value):
                return False
        elif not isinstance(value, int) or abs(value) > 2 ** 53:  # bool is an int
            return False
    return True


def bootstrap_metric(data: list[Any], subset_size: int,
                     reduce_fns: list[Callable[[list[Any]], float]], n_bootstrap: int = 1000,
                     seed: int = 42) -> list[tuple[float, float]]:
    """Trinity-RFT 0.6.0's ``bootstrap_metric``: the mean and standard deviation, over
    ``n_bootstrap`` resamples of ``subset_size`` values of ``data`` (with replacement, from the
    global NumPy generator seeded with ``seed``), of each of ``reduce_fns``."""
    np.random.seed(seed)
    idx = np.random.choice(len(data), size=(n_bootstrap, subset_size), replace=True)
    fast = _plain_numbers(data) and all(fn in _REDUCERS for fn in reduce_fns)
    values = np.asarray(data, dtype=np.float64)[idx] if fast else None
    results = []
    for fn in reduce_fns:
        if fast:
            reduced = _REDUCERS[fn](values, axis=1)
        else:
            reduced = [fn([data[i] for i in row]) for row in idx.tolist()]
        results.append((float(np.mean(reduced)), float(np.std(reduced))))
    return results


def install(metrics_module) -> bool:
    """Replace ``bootstrap_metric`` in Trinity's ``trinity.utils.metrics`` (its
    ``calculate_task_level_metrics`` looks it up there at each call); False when already
    replaced."""
    from mathagent.compat import _replace

    return _replace(metrics_module, "bootstrap_metric", bootstrap_metric)

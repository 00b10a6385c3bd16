"""The evaluation-metrics lever (mathagent.eval_bootstrap): Trinity-RFT 0.6.0's numbers to the
bit, from Trinity's own ``bootstrap_metric`` and ``calculate_task_level_metrics`` run beside it,
and the compat fix that installs it (on unless turned off) in a fresh interpreter."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from fresh_python import VLLM_STAND_IN, fix_named, run_python, wrong_versions
from trinity.utils import metrics as trinity_metrics

from mathagent import compat, eval_bootstrap
from mathagent.eval_bootstrap import FAST_BOOTSTRAP_ENV

#: Trinity's own function, even where a test of this session installed the lever in-process.
TRINITY_BOOTSTRAP = getattr(trinity_metrics.bootstrap_metric, "__wrapped__",
                            trinity_metrics.bootstrap_metric)
WRONG_VERSIONS = wrong_versions()


def _data(kind: str, n: int, rnd: random.Random) -> list:
    return {"floats": lambda: [rnd.random() for _ in range(n)],
            "scores": lambda: [float(rnd.randint(0, 1)) for _ in range(n)],
            "ints": lambda: [rnd.randint(0, 6) for _ in range(n)],
            "bools": lambda: [rnd.random() < 0.5 for _ in range(n)],
            "numpy": lambda: list(np.float32(rnd.random()) for _ in range(n))}[kind]()


def _both(data, subset_size, reduce_fns, **kw):
    """Each way's result and the global generator's next draw after it."""
    out = []
    for fn in (TRINITY_BOOTSTRAP, eval_bootstrap.bootstrap_metric):
        result = fn(data, subset_size, reduce_fns, **kw)
        out.append((result, np.random.random()))
    return out


@pytest.mark.parametrize("kind", ["floats", "scores", "ints", "bools", "numpy"])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 8, 16])
def test_the_same_numbers_and_generator_state_as_trinitys(kind, n):
    rnd = random.Random(n)
    for _ in range(5):
        data = _data(kind, n, rnd)
        for subset_size in sorted({1, 2, 4, n}):
            trinity, lever = _both(data, subset_size, [max, min])
            assert lever == trinity, (data, subset_size)


def test_other_seeds_and_resample_counts_too():
    data = [0.0, 1.0, 1.0, 0.0, 1.0]
    for seed, n_bootstrap in [(0, 1), (7, 10), (123, 2500)]:
        trinity, lever = _both(data, 3, [max, min], n_bootstrap=n_bootstrap, seed=seed)
        assert lever == trinity


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def test_nan_mixed_numbers_and_other_reducers_give_trinitys_numbers_too():
    def spread(values):
        return max(values) - min(values)

    for data, fns in [([1.0, float("nan"), 0.0, 1.0], [max, min]),  # Trinity's way
                      ([0.5, 0.25, 1.0, 0.0], [spread, sum]),  # Trinity's way
                      ([2, 0.5, True, np.int64(3)], [max, min])]:  # NumPy's
        (trinity, t_next), (lever, l_next) = _both(data, 2, fns)
        assert t_next == l_next
        assert len(lever) == len(trinity)
        for pair in zip(trinity, lever, strict=True):
            assert all(_same(t, v) for t, v in zip(*pair, strict=True))


def _eval_task_metrics(rnd: random.Random, replies: int = 4) -> list[dict]:
    """One evaluation task's per-reply metrics as the agent's workflow reports them."""
    return [{"accuracy": float(rnd.random() < 0.4), "format_score": float(rnd.random() < 0.8),
             "tool_calls": rnd.randint(0, 3), "tool_errors": rnd.randint(0, 1),
             "time/run_execution": rnd.uniform(1, 9)} for _ in range(replies)]


def test_trinitys_task_level_metrics_are_unchanged_with_the_lever_in_place(monkeypatch):
    """``calculate_task_level_metrics`` (what Trinity's scheduler calls for each finished
    evaluation task) gives the same dict, key for key and bit for bit, either way."""
    rnd = random.Random(3)
    tasks = [_eval_task_metrics(rnd, replies) for replies in (1, 2, 4, 4, 5, 8)]
    monkeypatch.setattr(trinity_metrics, "bootstrap_metric", TRINITY_BOOTSTRAP)
    trinity = [trinity_metrics.calculate_task_level_metrics(m, True) for m in tasks]
    monkeypatch.setattr(trinity_metrics, "bootstrap_metric", eval_bootstrap.bootstrap_metric)
    lever = [trinity_metrics.calculate_task_level_metrics(m, True) for m in tasks]
    assert lever == trinity
    assert "accuracy/best@4" in trinity[2] and "tool_calls/worst@2" in trinity[2]


def test_the_lever_is_on_unless_turned_off(monkeypatch):
    fix = fix_named("trinity-fast-bootstrap")
    assert FAST_BOOTSTRAP_ENV in compat.LEVER_ENVS
    monkeypatch.delenv(FAST_BOOTSTRAP_ENV, raising=False)
    assert compat._gate(fix, {"trinity-rft": "0.6.0"}) is None
    monkeypatch.setenv(FAST_BOOTSTRAP_ENV, "0")
    skipped = compat._gate(fix, {"trinity-rft": "0.6.0"})
    assert skipped.status == "skipped"
    assert skipped.reason == "a speed lever, turned off with MATHAGENT_FAST_BOOTSTRAP=0"
    monkeypatch.setenv(FAST_BOOTSTRAP_ENV, "1")
    assert compat._gate(fix, {"trinity-rft": "0.6.1"}).status == "skipped"
    assert compat.lever_problem(FAST_BOOTSTRAP_ENV, "fast") is not None


@pytest.mark.skipif(WRONG_VERSIONS is not None, reason=str(WRONG_VERSIONS))
def test_a_worker_importing_trinitys_scheduler_gets_the_lever_and_the_same_metrics():
    """In a fresh interpreter (vLLM stood in for: it needs a GPU), as in a Ray worker: the fixes wait for their modules
    (``apply_on_import``, what the worker hook runs), Trinity's scheduler is imported, and
    its ``calculate_task_level_metrics`` then runs the lever; turned off, Trinity's own."""
    code = """
        import os, time
        {env}
        from mathagent import compat, eval_bootstrap
        waiting = compat.apply_on_import()
        from trinity.explorer import scheduler
        from trinity.utils import metrics
        task = [{{"accuracy": float(i % 2), "tool_calls": i}} for i in range(4)]
        emit({{"waiting": "trinity-fast-bootstrap" in waiting,
              "lever": metrics.bootstrap_metric is eval_bootstrap.bootstrap_metric,
              "metrics": scheduler.calculate_task_level_metrics(task, True)}})
    """
    on, _ = run_python(VLLM_STAND_IN,
                       code.format(env='os.environ.pop("MATHAGENT_FAST_BOOTSTRAP", None)'))
    off, _ = run_python(VLLM_STAND_IN,
                        code.format(env='os.environ["MATHAGENT_FAST_BOOTSTRAP"] = "0"'))
    assert on["waiting"] and on["lever"]
    assert not off["waiting"] and not off["lever"]
    assert on["metrics"] == off["metrics"]
    assert on["metrics"]["accuracy/best@2"] > on["metrics"]["accuracy/worst@2"]


def test_install_replaces_once_and_keeps_trinitys(monkeypatch):
    monkeypatch.setattr(trinity_metrics, "bootstrap_metric", TRINITY_BOOTSTRAP)
    assert eval_bootstrap.install(trinity_metrics) is True
    assert trinity_metrics.bootstrap_metric is eval_bootstrap.bootstrap_metric
    assert eval_bootstrap.bootstrap_metric.__wrapped__ is TRINITY_BOOTSTRAP
    assert eval_bootstrap.install(trinity_metrics) is False

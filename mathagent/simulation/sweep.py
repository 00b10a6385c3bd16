"""Running a sweep: one simulated learner per seed and selector, on shared random streams."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from mathagent.simulation.config import SimConfig
from mathagent.simulation.signal import learning_signal
from mathagent.simulation.specs import SelectorSpec, check_specs, default_specs, specs_table
from mathagent.simulation.world import FEATURE_KEYS, World, make_world, sigmoid

# Columns of the posterior-trace table (posteriors.csv).
POSTERIOR_COLUMNS = ("selector", "seed", "step", "task", "alpha", "beta", "mean", "sd",
                     "true_pass_rate", "selected")


def run_selector(spec: SelectorSpec, world: World,
                 progress: Callable[[int], None] | None = None,
                 ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Train one simulated learner per seed with ``spec``'s selector.

    Returns:
        ``(steps, posteriors)``. ``steps`` is tidy, one row per (seed, step) for steps
        ``0..T`` (step 0: the starting eval only; ``seed`` is ``config.seed`` plus the index
        of the seed's spawned stream): ``selector, seed, step,
        rollout_accuracy, eval_accuracy`` (NaN between evals), ``effective_task_ratio``
        (share of the batch with ``0 < k < n``), ``signal`` (mean learning signal),
        ``ability``, ``selected_true_pass_rate`` (mean true ``p`` of the batch before the
        update). ``posteriors`` (adaptive selectors only; seed index 0) has one row per
        (step, tracked task): ``alpha, beta, mean, sd, true_pass_rate, selected``.
    """
    from mathagent.selectors import make_selector

    c = world.config
    S, B, n = world.n_seeds, c.batch_size, c.n_rollouts
    keys = list(FEATURE_KEYS) if spec.needs_features() else None
    if spec.factory is None:
        drivers = [make_selector(spec.name, ds, keys, seed=world.selector_seeds[s],
                                 repeat_times=n, **spec.kwargs)
                   for s, ds in enumerate(world.datasets())]
    else:
        drivers = [_CustomDriver(spec, ds, world.selector_seeds[s], n)
                   for s, ds in enumerate(world.datasets())]
    # Fresh generators on the shared sequences: every selector replays the same draws.
    rngs = [np.random.default_rng(seq) for seq in world.rollout_seeds]
    seeds_col = np.arange(c.seed, c.seed + S)  # reported seed ids
    rows_s = np.arange(S)[:, None]
    theta = np.full(S, c.ability0)
    T = c.steps
    roll_acc = np.full((T + 1, S), np.nan)
    etr = np.full((T + 1, S), np.nan)
    signal = np.full((T + 1, S), np.nan)
    sel_p = np.full((T + 1, S), np.nan)
    ability = np.empty((T + 1, S))
    eval_acc = np.full((T + 1, S), np.nan)
    ability[0] = theta
    eval_acc[0] = _evaluate(theta, world, rngs)
    tracked = world.tracked
    post_rows: list[dict] = []
    adaptive = drivers[0].adaptive

    def record_posterior(step: int, chosen: np.ndarray) -> None:
        a, b = drivers[0].posterior()
        a, b = a[tracked], b[tracked]
        mean = a / (a + b)
        sd = np.sqrt(a * b / ((a + b) ** 2 * (a + b + 1)))
        true_p = sigmoid(theta[0] - world.difficulty[0, tracked])
        sel = np.isin(tracked, chosen)
        for j, task in enumerate(tracked):
            post_rows.append({"selector": spec.label, "seed": int(seeds_col[0]), "step": step,
                              "task": int(task), "alpha": a[j], "beta": b[j], "mean": mean[j],
                              "sd": sd[j], "true_pass_rate": true_p[j],
                              "selected": bool(sel[j])})

    if adaptive and len(tracked):
        record_posterior(0, np.empty(0, dtype=int))
    for t in range(1, T + 1):
        idx = np.array([d.get_indices(B) for d in drivers])  # (S, B)
        p = sigmoid(theta[:, None] - world.difficulty[rows_s, idx])  # (S, B)
        u = np.stack([rng.random((B, n)) for rng in rngs])  # (S, B, n) common numbers
        k = (u < p[..., None]).sum(axis=-1)  # successes, (S, B)
        rate = k / n
        for s, d in enumerate(drivers):
            d.feedback(idx[s], rate[s])
        g = learning_signal(k, n)  # zero for uniform groups, E[g] = p (1 - p)
        roll_acc[t] = rate.mean(axis=1)
        etr[t] = ((k > 0) & (k < n)).mean(axis=1)
        signal[t] = g.mean(axis=1)
        sel_p[t] = p.mean(axis=1)
        theta = theta + c.learning_rate * signal[t]
        ability[t] = theta
        if t % c.eval_every == 0 or t == T:
            eval_acc[t] = _evaluate(theta, world, rngs)
        if adaptive and len(tracked):
            record_posterior(t, idx[0])
        if progress is not None:
            progress(1)
    steps = np.repeat(np.arange(T + 1), S)
    table = pd.DataFrame({
        "selector": spec.label,
        "seed": np.tile(seeds_col, T + 1),
        "step": steps,
        "rollout_accuracy": roll_acc.reshape(-1),
        "eval_accuracy": eval_acc.reshape(-1),
        "effective_task_ratio": etr.reshape(-1),
        "signal": signal.reshape(-1),
        "ability": ability.reshape(-1),
        "selected_true_pass_rate": sel_p.reshape(-1),
    }).sort_values(["seed", "step"], kind="stable").reset_index(drop=True)
    return table, pd.DataFrame(post_rows, columns=list(POSTERIOR_COLUMNS))


class _CustomDriver:
    """A selector of one's own (``SelectorSpec.factory``) behind the driver calls a sweep
    makes; its batches are checked, so a faulty selector fails with one line naming it."""

    adaptive = False

    def __init__(self, spec: SelectorSpec, dataset, seed: int, n_rollouts: int):
        self.label = spec.label
        self.n_tasks = len(dataset)
        self.selector = spec.factory(dataset, seed=seed, n_rollouts=n_rollouts, **spec.kwargs)
        for method in ("get_indices", "feedback"):
            if not callable(getattr(self.selector, method, None)):
                raise ValueError(f"sweep entry {self.label!r}: its selector has no "
                                 f"{method}() method")

    def get_indices(self, batch_size: int) -> list[int]:
        idx = np.asarray(self.selector.get_indices(batch_size)).reshape(-1)
        if (len(idx) != batch_size or not np.issubdtype(idx.dtype, np.integer)
                or len(np.unique(idx)) != batch_size or idx.min() < 0
                or idx.max() >= self.n_tasks):
            raise ValueError(f"sweep entry {self.label!r}: get_indices({batch_size}) must "
                             f"return {batch_size} distinct task indices in [0, "
                             f"{self.n_tasks}), got {idx[:8].tolist()}"
                             f"{'...' if len(idx) > 8 else ''}")
        return idx.tolist()

    def feedback(self, indices: Sequence[int], values: Sequence[float]) -> None:
        self.selector.feedback(list(indices), list(values))


def _evaluate(theta: np.ndarray, world: World, rngs: list[np.random.Generator]) -> np.ndarray:
    """Eval accuracy per seed, shape ``(seeds,)``: expected, or sampled when asked."""
    p = sigmoid(theta[:, None] - world.eval_difficulty)  # (S, n_eval)
    k = world.config.eval_samples
    if k == 0:
        return p.mean(axis=1)
    hits = np.stack([rng.binomial(k, p[s]) for s, rng in enumerate(rngs)])
    return hits.mean(axis=1) / k


@dataclass
class SweepResult:
    """Tables of a sweep: ``steps`` (tidy per selector/seed/step), ``posteriors``,
    ``selectors`` (the specs), ``config`` and wall time."""

    steps: pd.DataFrame
    posteriors: pd.DataFrame
    selectors: pd.DataFrame
    config: SimConfig
    seconds: float

    def params(self) -> dict:
        return {"kind": "simulate", "config": asdict(self.config),
                "feature_keys": list(FEATURE_KEYS), "seconds": round(self.seconds, 2),
                "selectors": self.selectors.to_dict(orient="records")}


_FORK_WORLD: World | None = None


def _run_in_fork(spec: SelectorSpec) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Worker of :func:`run_sweep`: one selector over every seed of the inherited world."""
    assert _FORK_WORLD is not None, "run_sweep sets the world before forking"
    return run_selector(spec, _FORK_WORLD)


def run_sweep(config: SimConfig | None = None, specs: Sequence[SelectorSpec] | None = None,
              workers: int | None = None, progress: bool = True,
              world: World | None = None) -> SweepResult:
    """Run every spec over every seed of one world.

    Args:
        config: the world and run parameters (default :class:`SimConfig`).
        specs: the selectors (default :func:`default_specs`); all are validated first.
        workers: processes running selectors side by side (forked, so they share the
            world read-only). Default: the usable CPU count; 1 runs in this process.
        progress: show a tqdm bar over selector steps.
        world: a world made earlier from ``config`` (made here when omitted).

    Returns:
        A :class:`SweepResult`.
    """
    config = config or SimConfig()
    specs = list(specs) if specs is not None else default_specs(config.n_rollouts)
    if not specs:
        raise ValueError("run_sweep: no selectors to run")
    check_specs(specs, config)
    start = time.perf_counter()
    world = world or make_world(config)
    check_specs(specs, config, world)
    world.datasets()
    if workers is None:
        workers = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                   else os.cpu_count() or 1)
    from tqdm import tqdm

    bar = tqdm(total=len(specs) * config.steps, desc="simulate", unit="step",
               disable=not progress)
    workers = min(workers, len(specs))
    if workers > 1 and "fork" in mp.get_all_start_methods():
        # numpy's Beta draws hold the GIL, so threads do not help: run selectors in forked
        # processes that inherit the world (no pickling, no re-import), one spec per task.
        global _FORK_WORLD
        _FORK_WORLD = world
        try:
            with ProcessPoolExecutor(max_workers=workers,
                                     mp_context=mp.get_context("fork")) as pool:
                futures = [pool.submit(_run_in_fork, spec) for spec in specs]
                for fut in as_completed(futures):
                    fut.result()
                    bar.update(config.steps)
                results = [fut.result() for fut in futures]
        finally:
            _FORK_WORLD = None
    else:
        results = [run_selector(spec, world, bar.update) for spec in specs]
    bar.close()
    steps = pd.concat([r[0] for r in results], ignore_index=True)
    posts = [r[1] for r in results if len(r[1])]
    posteriors = (pd.concat(posts, ignore_index=True) if posts
                  else pd.DataFrame(columns=POSTERIOR_COLUMNS))
    return SweepResult(steps, posteriors, specs_table(specs), config,
                       time.perf_counter() - start)


def identical_runs(steps: pd.DataFrame, a: str, b: str) -> bool:
    """True when selectors ``a`` and ``b`` produced the same numbers on every seed and step
    (e.g. Trinity's ``difficulty_based`` and ``bots`` with the same settings)."""
    def rows(name: str) -> pd.DataFrame:
        t = steps[steps["selector"] == name]
        if t.empty:
            raise ValueError(f"selector {name!r} is not in the table")
        return t.drop(columns="selector").sort_values(["seed", "step"]).reset_index(drop=True)

    return rows(a).equals(rows(b))

"""RL fine-tuning as a bandit: a cheap world in which to compare task selectors.

Real GRPO runs cost GPU hours per curve; this simulation costs seconds, so every selector and
ablation can be run over several seeds on the same random streams. It keeps the three facts
that make task selection matter and nothing else:

1. **A learner with one ability.** Task ``i`` has a difficulty ``d_i`` (a logit); a learner of
   ability ``theta`` solves it with probability ``p_i = sigmoid(theta - d_i)`` (the Rasch /
   one-parameter logistic model of item response theory).
2. **GRPO learns only from mixed groups.** Each selected task is rolled out ``n`` times. GRPO
   normalises rewards within the group, so a group whose ``n`` rewards agree (all right or
   all wrong) has zero advantage and teaches nothing; otherwise the update grows with the
   spread of outcomes. The learning signal of task ``i`` is the unbiased outcome variance
   ``g_i = k_i (n - k_i) / (n (n - 1))`` (``k_i`` successes), zero for uniform groups,
   largest (``~ 1/4``) at ``k = n/2``; its expectation is exactly ``p (1 - p)``.
   Each step ``theta += learning_rate * mean_i g_i`` over the batch.
3. **Selectors see only what a Trinity selector sees**: reference pass-rate columns and
   the observed pass rates ``k_i / n`` fed back after each step. The selectors are the real
   objects of :mod:`mathagent.selectors` (Trinity's five and :class:`BOTSSelector`), driven
   through the same :class:`~mathagent.selectors.SelectorDriver` a training loop uses.

The world (one per seed, parameters in :class:`SimConfig`):

* training difficulties ``d ~ Normal(difficulty_mean, difficulty_sd)``: most tasks are hard
  for the starting learner (``ability0``), as guru math is for a 0.6B model;
* a held-out eval set of ``n_eval`` tasks drawn harder, ``Normal(eval_difficulty_mean,
  eval_difficulty_sd)`` (AIME-like); the eval accuracy reported is the learner's expected
  accuracy on it, ``mean_j sigmoid(theta - d_j)`` (``eval_samples > 0`` instead scores that
  many sampled answers per eval task, adding a real eval's noise);
* two reference columns measured like guru's: a *weak* and a *strong* model of abilities
  ``weak_ability`` < ``strong_ability``, each with its own per-task quirks
  (``reference_noise``, logit sd), measured with ``reference_samples = 16`` samples per task:
  ``binomial(16, sigmoid(a_ref - d_i + eps_i)) / 16``. The columns therefore correlate with
  the truth the way measured pass rates do: quantised, noisy, and partly about the reference
  model rather than the learner.

Randomness: ``SeedSequence(seed).spawn(n_seeds)`` gives every seed its own world; each seed's
sequence spawns the streams for tasks, references, rollouts and the selector's seed. Every
selector of a sweep replays the same streams: the same tasks, the same references and the same
uniform draws for its rollouts (common random numbers), so differences between selectors are
differences of selection, not of luck. Arrays have shape ``(seeds, tasks)``; the only Python
loops are over seeds and selectors (each seed's selector is its own object).

What it does not model: transfer that depends on which skills a task exercises, forgetting in
the learner, response length, and the cost of rollouts. It shows when and why selection
helps under its assumptions; it does not predict the size of the gain on a real model.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mathagent import paths
from mathagent.tasks import informative_probability

WEAK_KEY = "weak_pass_rate"
STRONG_KEY = "strong_pass_rate"
FEATURE_KEYS = (WEAK_KEY, STRONG_KEY)


@dataclass(frozen=True)
class SimConfig:
    """Parameters of the simulated world and run (defaults: the full sweep).

    Scale follows the reference experiment: the guru math set's 54,404 tasks, batches of 16
    tasks with 8 rollouts each, evaluation on a small hard set.
    """

    n_tasks: int = 54_404
    n_eval: int = 30  # AIME-24 has 30 problems
    batch_size: int = 16
    n_rollouts: int = 8
    steps: int = 300
    eval_every: int = 10
    n_seeds: int = 5
    seed: int = 0
    # learner and tasks (logits)
    ability0: float = 0.0
    difficulty_mean: float = 3.0
    difficulty_sd: float = 2.0
    eval_difficulty_mean: float = 4.0
    eval_difficulty_sd: float = 1.5
    learning_rate: float = 0.03
    eval_samples: int = 0  # 0: expected eval accuracy; k > 0: k sampled answers per eval task
    # reference models
    weak_ability: float = -0.5
    strong_ability: float = 2.0
    reference_noise: float = 0.7
    reference_samples: int = 16
    # posterior traces: this many tasks of seed index 0, for the posterior figure
    n_tracked: int = 6

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first setting that cannot work."""
        positive = ("n_tasks", "n_eval", "batch_size", "steps", "eval_every", "n_seeds",
                    "reference_samples")
        for key in positive:
            v = getattr(self, key)
            if not isinstance(v, int | np.integer) or v < 1:
                raise ValueError(f"SimConfig.{key}={v!r} must be a positive integer")
        if self.n_rollouts < 2:
            raise ValueError(f"SimConfig.n_rollouts={self.n_rollouts} must be at least 2 "
                             f"(a group of one has no spread to learn from)")
        if self.batch_size > self.n_tasks:
            raise ValueError(f"SimConfig.batch_size={self.batch_size} exceeds "
                             f"n_tasks={self.n_tasks}")
        if self.eval_samples < 0:
            raise ValueError(f"SimConfig.eval_samples={self.eval_samples} must be >= 0")
        for key in ("difficulty_sd", "eval_difficulty_sd", "reference_noise", "learning_rate"):
            if getattr(self, key) < 0:
                raise ValueError(f"SimConfig.{key}={getattr(self, key)} must be >= 0")
        if not self.weak_ability < self.strong_ability:
            raise ValueError(f"SimConfig: weak_ability={self.weak_ability} must be below "
                             f"strong_ability={self.strong_ability}")
        if not 0 <= self.n_tracked <= self.n_tasks:
            raise ValueError(f"SimConfig.n_tracked={self.n_tracked} must lie in "
                             f"[0, n_tasks]")


def replace_config(config: SimConfig, **changes: Any) -> SimConfig:
    """A copy of ``config`` with ``changes`` applied (validated when used)."""
    return replace(config, **changes)


def smoke_config(**overrides: Any) -> SimConfig:
    """A small world that runs the whole sweep in seconds (tests, smoke notebooks)."""
    base = dict(n_tasks=3000, steps=60, n_seeds=3, eval_every=5, learning_rate=0.1)
    return SimConfig(**{**base, **overrides})


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Logistic function, elementwise, any shape."""
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(x, dtype=np.float64)))


# --------------------------------------------------------------------------------------
# The world
# --------------------------------------------------------------------------------------


@dataclass
class World:
    """Everything fixed before training, for every seed.

    Attributes:
        config: the parameters.
        difficulty: training-task difficulties, shape ``(seeds, n_tasks)``.
        eval_difficulty: eval-task difficulties, shape ``(seeds, n_eval)``.
        weak, strong: measured reference pass rates, shape ``(seeds, n_tasks)``, multiples
            of ``1 / reference_samples``.
        rollout_seeds: per seed, the ``SeedSequence`` of its rollout and eval draws.
        selector_seeds: per seed, the integer seed handed to the selectors.
        tracked: task indices whose posteriors are recorded (seed index 0), shape ``(k,)``.
    """

    config: SimConfig
    difficulty: np.ndarray
    eval_difficulty: np.ndarray
    weak: np.ndarray
    strong: np.ndarray
    rollout_seeds: list[np.random.SeedSequence]
    selector_seeds: list[int]
    tracked: np.ndarray
    _datasets: list | None = field(default=None, repr=False)

    @property
    def n_seeds(self) -> int:
        return self.difficulty.shape[0]

    def initial_pass_rates(self) -> np.ndarray:
        """The starting learner's true pass rate per task, shape ``(seeds, n_tasks)``."""
        return sigmoid(self.config.ability0 - self.difficulty)

    def datasets(self) -> list:
        """One ``datasets.Dataset`` per seed: ``task``, ``difficulty`` and the two reference
        columns, the only things a selector may read."""
        if self._datasets is None:
            import datasets

            self._datasets = [
                datasets.Dataset.from_dict({
                    "task": np.arange(self.config.n_tasks),
                    "difficulty": self.difficulty[s],
                    WEAK_KEY: self.weak[s],
                    STRONG_KEY: self.strong[s],
                }) for s in range(self.n_seeds)]
        return self._datasets


def make_world(config: SimConfig) -> World:
    """Draw every seed's tasks, eval set and reference measurements (see module docstring)."""
    config.validate()
    c = config
    seqs = np.random.SeedSequence(c.seed).spawn(c.n_seeds)
    diff, ev, weak, strong, roll, sel = [], [], [], [], [], []
    for seq in seqs:  # a handful of seeds; each draw below is a vector over tasks
        task_seq, ref_seq, roll_seq, sel_seq = seq.spawn(4)
        rng = np.random.default_rng(task_seq)
        d = rng.normal(c.difficulty_mean, c.difficulty_sd, c.n_tasks)
        ev.append(rng.normal(c.eval_difficulty_mean, c.eval_difficulty_sd, c.n_eval))
        ref = np.random.default_rng(ref_seq)
        measured = []
        for ability in (c.weak_ability, c.strong_ability):
            quirk = ref.normal(0.0, c.reference_noise, c.n_tasks)
            hits = ref.binomial(c.reference_samples, sigmoid(ability - d + quirk))
            measured.append(hits / c.reference_samples)
        diff.append(d)
        weak.append(measured[0])
        strong.append(measured[1])
        roll.append(roll_seq)
        sel.append(int(sel_seq.generate_state(1)[0] % (2**31 - 1)))
    difficulty = np.stack(diff)
    # Tracked tasks: spread over the starting learner's pass rates, seed index 0.
    p0 = sigmoid(c.ability0 - difficulty[0])
    targets = np.linspace(0.05, 0.85, c.n_tracked)
    order = np.argsort(p0)
    tracked = order[np.searchsorted(p0[order], targets).clip(0, c.n_tasks - 1)]
    return World(c, difficulty, np.stack(ev), np.stack(weak), np.stack(strong), roll, sel,
                 np.unique(tracked))


def toy_taskset(n_tasks: int = 12, seed: int = 0, config: SimConfig | None = None):
    """A world of ``n_tasks`` tasks small enough to read, as one ``datasets.Dataset``.

    Columns: ``task``, ``true_pass_rate`` (the starting learner's, which no selector reads)
    and the two measured reference columns. Drawn like seed 0 of :func:`make_world`.
    """
    import datasets

    base = config or SimConfig()
    cfg = replace(base, n_tasks=n_tasks, n_seeds=1, seed=seed,
                  batch_size=min(base.batch_size, n_tasks), n_tracked=0)
    w = make_world(cfg)
    return datasets.Dataset.from_dict({
        "task": np.arange(n_tasks),
        "true_pass_rate": np.round(w.initial_pass_rates()[0], 3),
        WEAK_KEY: w.weak[0],
        STRONG_KEY: w.strong[0],
    })


def observer(true_pass_rates: Sequence[float], n_rollouts: int = 8):
    """``observe(indices, rng)``: observed pass rates ``Binomial(n, p_i) / n`` of the given
    tasks, for :func:`mathagent.selectors.trace_selectors` and hand-stepped selectors."""
    p = np.asarray(true_pass_rates, dtype=np.float64)

    def observe(indices: Sequence[int], rng: np.random.Generator) -> np.ndarray:
        return rng.binomial(n_rollouts, p[np.asarray(indices, dtype=int)]) / n_rollouts

    return observe


# --------------------------------------------------------------------------------------
# Selectors of a sweep
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SelectorSpec:
    """One line of a sweep: a label, the selector name for ``make_selector`` and kwargs."""

    label: str
    name: str
    kwargs: dict = field(default_factory=dict)
    group: str = "trinity"  # trinity | bots | ablation | grid
    note: str = ""

    def needs_features(self) -> bool:
        from mathagent.selectors import reads_features

        return reads_features(self.name)


# The reference experiment's difficulty_based settings (its m equals the group size).
UPSTREAM_BOTS = {"lamb": 0.1, "rho": 0.1, "target_reward": 0.8, "tau": 0, "do_sample": True}
LAMB_GRID = (0.0, 0.1, 0.3)
RHO_GRID = (0.0, 0.1)
TARGET_SWEEP = (0.5, 0.95)


def _fmt(x: float) -> str:
    return f"{x:g}"


def default_specs(n_rollouts: int = 8, lamb_grid: Sequence[float] = LAMB_GRID,
                  rho_grid: Sequence[float] = RHO_GRID,
                  targets: Sequence[float] = TARGET_SWEEP) -> list[SelectorSpec]:
    """Trinity's five selectors, BOTSSelector, and the ablations of the default sweep.

    * ``difficulty_based`` and ``bots`` use the reference experiment's settings
      (:data:`UPSTREAM_BOTS`, ``m = n_rollouts``); their results must coincide.
    * ``bots rho=0``: explicit evidence only (no reference interpolation, MoPPS-like);
    * ``bots implicit``: implicit evidence only (the posterior never sees a pass rate
      directly, only through the capability estimate);
    * ``bots lamb=...``, ``bots target=...``: forgetting rate and target sweeps;
    * the ``lamb x rho`` grid for the TTB heatmap (cells already above are not repeated).
    """
    base = {**UPSTREAM_BOTS, "m": n_rollouts}
    specs = [SelectorSpec(n, n) for n in ("sequential", "shuffle", "random")]
    specs.append(SelectorSpec("offline_easy2hard", "offline_easy2hard",
                              note="easiest first by (weak, strong) reference pass rate"))
    specs.append(SelectorSpec("difficulty_based", "difficulty_based", base,
                              note="Trinity's BOTS, reference settings"))
    specs.append(SelectorSpec("bots", "bots", base, "bots",
                              note="BOTSSelector, same settings: must match difficulty_based"))
    specs.append(SelectorSpec("bots rho=0", "bots", {**base, "rho": 0.0}, "ablation",
                              note="explicit evidence only"))
    specs.append(SelectorSpec("bots implicit", "bots", {**base, "implicit_only": True},
                              "ablation", note="implicit evidence only"))
    specs.append(SelectorSpec("bots gap>=0.05", "bots", {**base, "min_anchor_gap": 0.05},
                              "ablation", note="capability update skipped when the batch's "
                              "references barely differ"))
    seen = {(base["lamb"], base["rho"]), (base["lamb"], 0.0)}
    for lamb in lamb_grid:
        if (lamb, base["rho"]) not in seen:
            specs.append(SelectorSpec(f"bots lamb={_fmt(lamb)}", "bots", {**base, "lamb": lamb},
                                      "ablation", note="forgetting-rate sweep"))
            seen.add((lamb, base["rho"]))
    for t in targets:
        specs.append(SelectorSpec(f"bots target={_fmt(t)}", "bots",
                                  {**base, "target_reward": t}, "ablation",
                                  note="target pass-rate sweep"))
    for lamb in lamb_grid:
        for rho in rho_grid:
            if (lamb, rho) not in seen:
                specs.append(SelectorSpec(f"bots lamb={_fmt(lamb)} rho={_fmt(rho)}", "bots",
                                          {**base, "lamb": lamb, "rho": rho}, "grid",
                                          note="lamb x rho grid"))
                seen.add((lamb, rho))
    return specs


def specs_table(specs: Sequence[SelectorSpec]) -> pd.DataFrame:
    """One row per selector label with its name, group and kwargs spread into columns."""
    rows = []
    for s in specs:
        row = {"selector": s.label, "name": s.name, "group": s.group, "note": s.note}
        row.update({k: v for k, v in s.kwargs.items()})
        rows.append(row)
    return pd.DataFrame(rows)


def check_specs(specs: Sequence[SelectorSpec], config: SimConfig, world: World | None = None,
                ) -> None:
    """Validate every spec (name, features, kwargs, ``m`` vs rollouts) before running any."""
    from mathagent.selectors import check_selector_settings

    labels = [s.label for s in specs]
    dupes = sorted({lab for lab in labels if labels.count(lab) > 1})
    if dupes:
        raise ValueError(f"duplicate selector labels in the sweep: {dupes}")
    if world is not None and world.config != config:
        raise ValueError("the world was made with a different SimConfig")
    probe = world.datasets()[0] if world is not None else None
    for s in specs:
        keys = list(FEATURE_KEYS) if s.needs_features() else None
        try:
            check_selector_settings(s.name, probe, keys, repeat_times=config.n_rollouts,
                                    **s.kwargs)
        except ValueError as exc:
            raise ValueError(f"sweep entry {s.label!r}: {exc}") from exc


# --------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------


def learning_signal(k: np.ndarray, n: int) -> np.ndarray:
    """Learning signal of groups with ``k`` successes out of ``n`` rollouts, shape of ``k``.

    The unbiased variance of the group's 0/1 rewards, ``k (n - k) / (n (n - 1))``: zero when
    all ``n`` rewards agree (GRPO's advantages are then all zero), largest at ``k = n / 2``.
    """
    k = np.asarray(k, dtype=np.float64)
    return k * (n - k) / (n * (n - 1))


def expected_signal(p: np.ndarray, n: int) -> np.ndarray:
    """Expected learning signal of a task with pass rate ``p`` rolled out ``n`` times.

    ``E[k (n - k) / (n (n - 1))] = p (1 - p)`` for ``k ~ Binomial(n, p)``: the quantity this
    simulation's learner gains per task. Shape of ``p``.
    """
    p = np.asarray(p, dtype=np.float64)
    return p * (1 - p)


def signal_curve(group_sizes: Iterable[int] = (4, 8, 16), points: int = 101) -> pd.DataFrame:
    """Tidy table ``p, n, signal, p_mixed`` for the signal-curve figure."""
    p = np.linspace(0, 1, points)
    return pd.concat([pd.DataFrame({"p": p, "n": n, "signal": expected_signal(p, n),
                                    "p_mixed": informative_probability(p, n)})
                      for n in group_sizes], ignore_index=True)


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
    drivers = [make_selector(spec.name, ds, keys, seed=world.selector_seeds[s],
                             repeat_times=n, **spec.kwargs)
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


def heatmap_table(summary: pd.DataFrame, selectors: pd.DataFrame,
                  lamb_grid: Sequence[float] = LAMB_GRID,
                  rho_grid: Sequence[float] = RHO_GRID) -> pd.DataFrame:
    """Summary rows of the ``lamb x rho`` grid (BOTSSelector at the default target), with
    ``lamb`` and ``rho`` columns, for :func:`mathagent.plots.plot_ttb_heatmap`."""
    if not {"lamb", "rho", "target_reward"} <= set(selectors.columns):
        return summary.iloc[0:0].assign(lamb=[], rho=[])
    sel = selectors[(selectors["name"] == "bots")
                    & ~selectors.get("implicit_only", pd.Series(False, index=selectors.index))
                    .fillna(False).astype(bool)
                    & np.isclose(selectors["target_reward"].astype(float),
                                 UPSTREAM_BOTS["target_reward"])]
    sel = sel[sel["lamb"].isin(lamb_grid) & sel["rho"].isin(rho_grid)]
    return summary.merge(sel[["selector", "lamb", "rho"]], on="selector")


def runs_or_stand_in(runs: str | Path, work: str | Path, n_tasks: int, steps: int,
                     n_seeds: int, seed: int = 0) -> tuple[str, Path]:
    """``(what they are, folder)``: the real runs under ``runs`` when there are any, else a
    simulated stand-in of ``random`` vs ``difficulty_based`` written to ``work/simulated``.

    The label says plainly which of the two a figure shows (notebook 05 titles with it).
    """
    from mathagent import results

    runs = Path(runs)
    if results.has_runs(runs):
        where = runs.relative_to(paths.REPO_ROOT) if runs.is_relative_to(paths.REPO_ROOT) \
            else runs
        return f"tutorial-scale GRPO runs ({where})", runs
    config = smoke_config(n_tasks=n_tasks, steps=steps, n_seeds=n_seeds, seed=seed)
    specs = [s for s in default_specs(config.n_rollouts)
             if s.label in ("random", "difficulty_based")]
    out = Path(work) / "simulated"
    write_sweep(run_sweep(config, specs), out, figures=False)
    return "SIMULATED runs (mathagent.simulation, not model training)", out


def write_sweep(result: SweepResult, out_dir: str | Path, figures: bool = True,
                baseline: str = "random", force: bool = True) -> dict[str, Path]:
    """Write tables (CSV), the metrics summary, ``params.json`` and figures to ``out_dir``.

    Everything is written into a temporary folder beside ``out_dir`` and swapped in at the
    end, so a failure midway leaves an existing ``out_dir`` as it was
    (:class:`~mathagent.outputs.OutputError`). ``force=False`` keeps a non-empty ``out_dir``
    (``OutputError`` before anything is written); the library default replaces it, the
    ``simulate`` command passes its ``--force``.
    """
    from mathagent.outputs import check_output, rebase, staged_output

    out = Path(out_dir)
    check_output(out, force)
    with staged_output(out) as tmp:
        files = _write_sweep_files(result, tmp, figures, baseline)
    return rebase(files, tmp, out)


def _write_sweep_files(result: SweepResult, out: Path, figures: bool,
                       baseline: str) -> dict[str, Path]:
    from mathagent import metrics

    files = {
        "steps": out / "steps.csv",
        "posteriors": out / "posteriors.csv",
        "selectors": out / "selectors.csv",
        "signal_curve": out / "signal_curve.csv",
    }
    result.steps.to_csv(files["steps"], index=False)
    result.posteriors.to_csv(files["posteriors"], index=False)
    result.selectors.to_csv(files["selectors"], index=False)
    signal_curve(sorted({4, result.config.n_rollouts, 16})).to_csv(files["signal_curve"],
                                                                   index=False)
    params = result.params()
    with open(out / "params.json", "w") as f:
        json.dump(params, f, indent=2, default=str)
    files["params"] = out / "params.json"
    written = metrics.write_metrics(result.steps, out, params=params, baseline=baseline)
    files.update(written)
    summary = pd.read_csv(written["summary"])
    heat = heatmap_table(summary, result.selectors)
    heat.to_csv(out / "heatmap.csv", index=False)
    files["heatmap"] = out / "heatmap.csv"
    if figures:
        files.update(draw_figures(result, summary, heat, out / "figures"))
    return files


MAIN_SELECTORS = ("sequential", "shuffle", "random", "offline_easy2hard", "difficulty_based",
                  "bots")


def draw_figures(result: SweepResult, summary: pd.DataFrame, heat: pd.DataFrame,
                 folder: str | Path) -> dict[str, Path]:
    """The sweep's figures, drawn from its tables only; returns ``figure:<name>`` -> PNG."""
    import matplotlib.pyplot as plt

    from mathagent import plots

    present = set(result.steps["selector"])
    main = [s for s in MAIN_SELECTORS if s in present]
    groups = result.selectors.set_index("selector")["group"]
    ablations = [s for s in groups.index
                 if s in present and (s == "random" or groups[s] in ("bots", "ablation"))]
    figs = {
        "training_curves": plots.plot_training_curves(result.steps, selectors=main),
        "training_curves_ablations": plots.plot_training_curves(result.steps,
                                                                selectors=ablations),
        "effective_task_ratio": plots.plot_etr(result.steps, selectors=main),
        "signal_curve": plots.plot_signal_curve(
            signal_curve(sorted({4, result.config.n_rollouts, 16}))),
        "summary": plots.plot_summary(summary),
    }
    if len(result.posteriors) and "bots" in set(result.posteriors["selector"]):
        figs["posteriors"] = plots.plot_posteriors(result.posteriors, selector="bots")
    if len(heat):
        figs["ttb_heatmap"] = plots.plot_ttb_heatmap(heat)
    written = {}
    for name, fig in figs.items():
        written[f"figure:{name}"] = plots.save_figure(fig, name, folder)
        plt.close(fig)
    return written


# --------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------


def simulate_parser(parser: argparse.ArgumentParser) -> None:
    d = SimConfig()
    parser.add_argument("--smoke", action="store_true",
                        help="small world (3,000 tasks, 60 steps, 3 seeds) for a quick look")
    parser.add_argument("--seeds", type=int, default=None, help=f"seeds (default {d.n_seeds})")
    parser.add_argument("--seed", type=int, default=d.seed, help="base seed of the streams")
    parser.add_argument("--steps", type=int, default=None, help=f"steps (default {d.steps})")
    parser.add_argument("--tasks", type=int, default=None,
                        help=f"training tasks (default {d.n_tasks})")
    parser.add_argument("--batch-size", type=int, default=d.batch_size)
    parser.add_argument("--rollouts", type=int, default=d.n_rollouts,
                        help="rollouts per task (GRPO group size; BOTS m follows it)")
    parser.add_argument("--eval-every", type=int, default=None)
    parser.add_argument("--learning-rate", type=float, default=None)
    parser.add_argument("--selectors", nargs="+", metavar="LABEL",
                        help="run only these sweep entries (default: all; see --list)")
    parser.add_argument("--list", action="store_true", help="list the sweep entries and exit")
    parser.add_argument("--workers", type=int, default=None,
                        help="processes running selectors side by side (default: CPU count)")
    parser.add_argument("--out", type=Path, help="run folder (default runs/simulate/<time>)")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing, non-empty --out folder")
    parser.add_argument("--no-figures", action="store_true", help="write tables only")


def simulate_command(args: argparse.Namespace) -> int:
    from mathagent.outputs import OutputError, check_output, fresh_run_dir, has_content

    overrides = {k: v for k, v in {
        "n_seeds": args.seeds, "steps": args.steps, "n_tasks": args.tasks,
        "eval_every": args.eval_every, "learning_rate": args.learning_rate}.items()
        if v is not None}
    overrides.update(seed=args.seed, batch_size=args.batch_size, n_rollouts=args.rollouts)
    try:
        config = smoke_config(**overrides) if args.smoke else SimConfig(**overrides)
        config.validate()
        specs = default_specs(config.n_rollouts)
        if args.list:
            print(specs_table(specs).to_string(index=False))
            return 0
        if args.selectors:
            known = {s.label: s for s in specs}
            unknown = [lab for lab in args.selectors if lab not in known]
            if unknown:
                raise ValueError(f"unknown sweep entries {unknown}; choose from {list(known)}")
            specs = [known[lab] for lab in args.selectors]
        check_specs(specs, config)
        if args.out is not None:  # before the sweep: an existing run is kept unless --force
            check_output(args.out, args.force)
    except ValueError as exc:  # OutputError is a ValueError
        print(f"simulate: {exc}", file=sys.stderr)
        return 2
    out = args.out or fresh_run_dir("simulate")
    replaced = args.out is not None and has_content(out)
    result = run_sweep(config, specs, workers=args.workers)
    try:
        files = write_sweep(result, out, figures=not args.no_figures,
                            baseline="random" if "random" in {s.label for s in specs}
                            else specs[0].label, force=args.force or args.out is None)
    except OutputError as exc:
        print(f"simulate: {exc}", file=sys.stderr)
        return 2
    summary = pd.read_csv(files["summary"])
    cols = [c for c in ("selector", "etr_mean", "rollout_accuracy_mean", "eval_final_mean",
                        "ttb_mean", "ttb_reached", "bsf_mean") if c in summary]
    print(summary[cols].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(f"\n{len(specs)} selectors x {config.n_seeds} seeds x {config.steps} steps in "
          f"{result.seconds:.1f} s; tables and figures in {out}"
          + (" (replaced its previous contents: --force)" if replaced else ""))
    return 0

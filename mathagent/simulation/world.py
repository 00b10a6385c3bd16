"""The simulated world: every seed's tasks, eval set and reference columns; toy tasksets.

The world and its random streams are described in the package docstring
(:mod:`mathagent.simulation`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from mathagent.simulation.config import SimConfig

WEAK_KEY = "weak_pass_rate"
STRONG_KEY = "strong_pass_rate"
FEATURE_KEYS = (WEAK_KEY, STRONG_KEY)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Logistic function, elementwise, any shape."""
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(x, dtype=np.float64)))


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

"""SimConfig: the parameters of the simulated world and run, each declared once as a setting.

The ``simulate`` command's flags (``--tasks``, ``--steps``, ``--seeds``, ...) are derived from
these fields (:func:`mathagent.settings.add_flags`); :func:`smoke_config` is the small world of
``--smoke``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from mathagent.settings import setting


@dataclass(frozen=True)
class SimConfig:
    """Parameters of the simulated world and run (defaults: the full sweep).

    Scale follows the reference experiment: the guru math set's 54,404 tasks, batches of 16
    tasks with 8 rollouts each, evaluation on a small hard set.
    """

    n_tasks: int = setting(54_404, help="training tasks", flag="--tasks", metavar="TASKS")
    n_eval: int = setting(30, help="held-out eval tasks")  # AIME-24 has 30 problems
    batch_size: int = setting(16, help="tasks per step", flag="--batch-size",
                              metavar="BATCH_SIZE")
    n_rollouts: int = setting(8, help="rollouts per task (GRPO group size; BOTS m follows it)",
                              flag="--rollouts", metavar="ROLLOUTS")
    steps: int = setting(300, help="steps", flag="--steps", metavar="STEPS")
    eval_every: int = setting(10, help="steps between evaluations", flag="--eval-every",
                              metavar="EVAL_EVERY")
    n_seeds: int = setting(5, help="seeds", flag="--seeds", metavar="SEEDS")
    seed: int = setting(0, help="base seed of the streams", flag="--seed", metavar="SEED")
    # learner and tasks (logits)
    ability0: float = setting(0.0, help="the starting learner's ability")
    difficulty_mean: float = setting(3.0, help="mean difficulty of the training tasks")
    difficulty_sd: float = setting(2.0, help="sd of the training tasks' difficulty")
    eval_difficulty_mean: float = setting(4.0, help="mean difficulty of the eval tasks")
    eval_difficulty_sd: float = setting(1.5, help="sd of the eval tasks' difficulty")
    learning_rate: float = setting(0.03, help="ability gained per unit of mean learning signal",
                                   flag="--learning-rate", metavar="LEARNING_RATE")
    # 0: expected eval accuracy; k > 0: k sampled answers per eval task
    eval_samples: int = setting(0, help="sampled answers per eval task (0: expected accuracy)")
    # reference models
    weak_ability: float = setting(-0.5, help="ability of the weak reference model")
    strong_ability: float = setting(2.0, help="ability of the strong reference model")
    reference_noise: float = setting(0.7, help="sd of each reference model's per-task quirks")
    reference_samples: int = setting(16, help="samples measuring each reference pass rate")
    # posterior traces: this many tasks of seed index 0, for the posterior figure
    n_tracked: int = setting(6, help="tasks whose posteriors are traced (seed index 0)")

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

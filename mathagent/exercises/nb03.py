"""Reference solutions to the exercises of notebook 03 (selectors and BOTS).

Exercise 1 (a ten-line selector): write a selector of your own, an object with
``get_indices(batch_size)`` and ``feedback(indices, pass_rates)``, and run it in the simulated
sweep beside ``random`` and ``difficulty_based`` through ``SelectorSpec(..., factory=...)``.

Exercise 2 (turn the knob): in the small world of ``simulation.smoke_config()``, predict which
``target_reward`` of 0.3, 0.5 and 0.8 gives the highest effective task ratio and which the
best final eval accuracy, then check with ``simulation.compare_targets``.
"""

from __future__ import annotations

import numpy as np

from mathagent import simulation

#: Exercise 2: the targets compared and the predictions.
KNOB_TARGETS = (0.3, 0.5, 0.8)
KNOB_PREDICTIONS = {"highest_etr": 0.5, "best_eval": 0.5}


class ClosestToHalf:
    """Exercise 1: the tasks whose estimated pass rate is closest to ``target``. The estimate
    starts at the weak reference and becomes the last observed pass rate once a task is tried
    (no posterior, no forgetting, no interpolation)."""

    def __init__(self, dataset, seed, n_rollouts, target=0.5):
        self.estimate = np.asarray(dataset[simulation.WEAK_KEY], dtype=np.float64).copy()
        self.target, self.rng = target, np.random.default_rng(seed)

    def get_indices(self, batch_size):
        jitter = 1e-3 * self.rng.random(len(self.estimate))  # random among equals
        return np.argsort(np.abs(self.estimate - self.target) + jitter)[:batch_size].tolist()

    def feedback(self, indices, values):
        self.estimate[np.asarray(indices)] = values


def sweep_with_own_selector(config: simulation.SimConfig, workers: int | None = 1):
    """Exercise 1: ``random``, ``difficulty_based`` and :class:`ClosestToHalf` on one world."""
    keep = ("random", "difficulty_based")
    specs = [s for s in simulation.default_specs(config.n_rollouts) if s.label in keep]
    specs.append(simulation.SelectorSpec("closest to 0.5", "custom", group="custom",
                                         factory=ClosestToHalf,
                                         note="ten lines: weak reference, then last observed"))
    return simulation.run_sweep(config, specs, workers=workers, progress=False)


def knob_answers(config: simulation.SimConfig | None = None, targets=KNOB_TARGETS,
                 workers: int | None = 1) -> dict[str, float]:
    """Exercise 2: the target with the highest ETR and the one with the best final eval."""
    config = config or simulation.smoke_config()
    table = simulation.compare_targets(config, targets, workers=workers).table
    table = table.dropna(subset=["target_reward"]).set_index("target_reward")
    return {"highest_etr": float(table["etr_mean"].idxmax()),
            "best_eval": float(table["eval_final_mean"].idxmax())}

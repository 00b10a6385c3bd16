"""Reference solutions to the exercises of notebook 03 (selectors and BOTS).

Exercise 1 (a ten-line selector): write a selector of your own, an object with
``get_indices(batch_size)`` and ``feedback(indices, pass_rates)``, and run it in the simulated
sweep beside ``random`` and ``difficulty_based`` through ``SelectorSpec(..., factory=...)``.

Exercise 2 (turn the knob): in the small world of ``simulation.smoke_config()``, predict which
``target_reward`` of 0.3, 0.5 and 0.8 gives the highest effective task ratio and which the
best final eval accuracy, then check with ``simulation.compare_targets``.

Exercise 3 (how much a task remembers): with forgetting ``lamb``, implicit weight ``rho`` and
``m`` pseudo-observations (:data:`FORGET`), the ``alpha + beta`` a never-observed task settles at.
"""

from __future__ import annotations

import numpy as np

from mathagent import simulation
from mathagent.exercises import checking

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


#: Exercise 3: the forgetting and implicit-evidence settings of the question.
FORGET = {"lamb": 0.05, "rho": 0.2, "m": 8}


def steady_pseudo_counts(lamb: float = FORGET["lamb"], rho: float = FORGET["rho"],
                         m: int = FORGET["m"], p_tilde: float = 0.3, steps: int = 5000) -> float:
    """Exercise 3: ``alpha + beta`` of a task never observed, after ``steps`` updates of
    section 5's rule from the uniform prior (it settles; ``p_tilde`` does not matter)."""
    alpha = beta = 1.0
    for _ in range(steps):
        alpha = (1 - lamb) * alpha + lamb + rho * m * p_tilde
        beta = (1 - lamb) * beta + lamb + rho * m * (1 - p_tilde)
    return alpha + beta


# -- self-checks (mathagent.exercises.checking) ------------------------------------------
def check_exercise1(selector_class) -> bool:
    """Your selector class: built on a toy taskset of 12 tasks, it must return distinct task
    indices in range, of the batch size asked, and take feedback."""
    toy = simulation.toy_taskset(12, seed=0)
    try:
        sel = selector_class(toy, seed=0, n_rollouts=8)
        batch = [int(i) for i in sel.get_indices(3)]
        sel.feedback(batch, [0.0] * len(batch))
        again = [int(i) for i in sel.get_indices(3)]
        right = all(len(b) == 3 == len(set(b)) and all(0 <= i < 12 for i in b)
                    for b in (batch, again))
    except Exception as exc:   # a learner's class may fail in any way: say how, as a hint
        return checking.verdict(False, f"Building or calling your selector failed: "
                                f"{type(exc).__name__}: {exc}")
    return checking.verdict(right, "get_indices(batch_size) must return batch_size distinct "
                            "indices in range(len(dataset)), before and after feedback.")


def check_exercise2(highest_etr: float, best_eval: float) -> bool:
    """Your predictions: the ``target_reward`` (0.3, 0.5 or 0.8) with the highest ETR and the
    one with the best final eval accuracy in ``simulation.smoke_config()``'s world."""
    answers = knob_answers()
    right = (checking.close(highest_etr, answers["highest_etr"], 1e-9)
             and checking.close(best_eval, answers["best_eval"], 1e-9))
    return checking.verdict(right, "A group of n is likeliest to be mixed at p = 0.5, and "
                            "learning in this world follows the mixed groups.")


def check_exercise3(total: float) -> bool:
    """Your ``alpha + beta`` at which a never-observed task settles with :data:`FORGET`."""
    return checking.verdict(checking.close(total, steady_pseudo_counts(), 0.05),
                            "At the fixed point nothing changes: set alpha + beta = "
                            "(1 - lamb)(alpha + beta) + 2 lamb + rho m and solve.")

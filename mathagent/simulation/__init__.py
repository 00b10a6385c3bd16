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

* ``config``: :class:`SimConfig`, the world's and run's parameters, declared once as settings;
* ``world``: every seed's tasks, eval set and reference columns; toy tasksets, observers;
* ``specs``: the selectors of a sweep (:class:`SelectorSpec`, the default sweep), checked;
* ``signal``: the learning signal of a rollout group and its expectation;
* ``sweep``: one simulated learner per seed and selector, on shared streams (:func:`run_sweep`);
* ``knob``: the ``target_reward`` knob, several targets side by side (:func:`compare_targets`);
* ``report``: a sweep's tables, metrics and figures written out; the stand-in runs;
* ``commands``: the ``simulate`` command.
"""

from mathagent.simulation.commands import simulate_command, simulate_parser
from mathagent.simulation.config import SimConfig, replace_config, smoke_config
from mathagent.simulation.knob import (
    KNOB_COLUMNS,
    TUTORIAL_TARGETS,
    TargetComparison,
    compare_targets,
    evidence_specs,
    plot_target_comparison,
)
from mathagent.simulation.report import (
    MAIN_SELECTORS,
    draw_figures,
    heatmap_table,
    runs_or_stand_in,
    write_sweep,
)
from mathagent.simulation.signal import expected_signal, learning_signal, signal_curve
from mathagent.simulation.specs import (
    LAMB_GRID,
    RHO_GRID,
    TARGET_SWEEP,
    UPSTREAM_BOTS,
    SelectorSpec,
    check_specs,
    default_specs,
    specs_table,
    target_specs,
)
from mathagent.simulation.sweep import (
    POSTERIOR_COLUMNS,
    SweepResult,
    identical_runs,
    run_selector,
    run_sweep,
)
from mathagent.simulation.world import (
    FEATURE_KEYS,
    STRONG_KEY,
    WEAK_KEY,
    World,
    make_world,
    observer,
    sigmoid,
    toy_taskset,
)

__all__ = [
    "FEATURE_KEYS",
    "KNOB_COLUMNS",
    "LAMB_GRID",
    "MAIN_SELECTORS",
    "POSTERIOR_COLUMNS",
    "RHO_GRID",
    "STRONG_KEY",
    "SelectorSpec",
    "SimConfig",
    "SweepResult",
    "TARGET_SWEEP",
    "TUTORIAL_TARGETS",
    "TargetComparison",
    "UPSTREAM_BOTS",
    "WEAK_KEY",
    "World",
    "check_specs",
    "default_specs",
    "draw_figures",
    "evidence_specs",
    "expected_signal",
    "compare_targets",
    "heatmap_table",
    "identical_runs",
    "learning_signal",
    "make_world",
    "observer",
    "plot_target_comparison",
    "replace_config",
    "run_selector",
    "run_sweep",
    "runs_or_stand_in",
    "sigmoid",
    "signal_curve",
    "simulate_command",
    "simulate_parser",
    "smoke_config",
    "specs_table",
    "target_specs",
    "toy_taskset",
    "write_sweep",
]

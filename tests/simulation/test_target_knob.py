"""The target_reward knob puts the batches where it says, side by side on one world; a
selector of one's own runs in the sweep, and a faulty one fails with one line naming it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mathagent import simulation as sim

SMALL = sim.smoke_config(n_tasks=1500, steps=30, n_seeds=2, eval_every=5)


@pytest.fixture(scope="module")
def knob():
    return sim.compare_targets(SMALL, (0.5, 0.8), workers=1)


def test_each_target_moves_the_batches_towards_it(knob):
    t = knob.table.set_index("selector")
    assert list(knob.table.columns) == list(sim.KNOB_COLUMNS)
    assert list(t.index) == ["random", "difficulty_based target=0.5",
                             "difficulty_based target=0.8"]
    assert np.isnan(t.loc["random", "target_reward"])
    low, high = t.loc["difficulty_based target=0.5"], t.loc["difficulty_based target=0.8"]
    assert (low["target_reward"], high["target_reward"]) == (0.5, 0.8)
    # the hard world: random serves tasks far below either target
    assert t.loc["random", "selected_pass_rate"] < low["selected_pass_rate"] - 0.1
    assert low["selected_pass_rate"] < high["selected_pass_rate"] - 0.15
    # both targets keep more learnable tasks than random, and the baseline's ratios are 1
    assert min(low["etr_mean"], high["etr_mean"]) > t.loc["random", "etr_mean"] + 0.1
    assert t.loc["random", "bsf_mean"] == pytest.approx(1.0)


def test_the_targets_share_the_world_and_the_random_streams(knob):
    steps = knob.result.steps
    start = steps[steps["step"] == 0].groupby("selector")["eval_accuracy"].apply(tuple)
    assert start.nunique() == 1  # same world, same starting learner
    alone = sim.compare_targets(SMALL, (0.8,), workers=1).result.steps
    ours = steps[steps["selector"] == "difficulty_based target=0.8"].reset_index(drop=True)
    theirs = alone[alone["selector"] == "difficulty_based target=0.8"].reset_index(drop=True)
    pd.testing.assert_frame_equal(ours, theirs)  # a target's run does not depend on the others


def test_the_comparison_figure_has_one_panel_per_metric(knob):
    import matplotlib.pyplot as plt

    fig = sim.plot_target_comparison(knob)
    try:
        axes = [ax for ax in fig.axes if ax.get_title()]
        assert [ax.get_title() for ax in axes] == [p[1] for p in sim.knob.KNOB_PANELS]
        assert len(axes[0].get_lines()) == 3
    finally:
        plt.close(fig)


@pytest.mark.parametrize("targets, message", [
    ((), "at least one"),
    ((0.5, 1.5), "1.5 is not a pass rate"),
    ((0.5, 0.5), "repeated"),
])
def test_bad_targets_are_one_clear_error(targets, message):
    with pytest.raises(ValueError, match=message):
        sim.target_specs(targets)


class _Easiest:
    """Always the tasks with the highest weak reference pass rate (the easiest-looking)."""

    def __init__(self, dataset, seed, n_rollouts):
        self.order = np.argsort(-np.asarray(dataset[sim.WEAK_KEY]), kind="stable")
        self.seen = []

    def get_indices(self, batch_size):
        return self.order[:batch_size].tolist()

    def feedback(self, indices, values):
        self.seen.append(len(indices))


def _bad(dataset, seed, n_rollouts):
    class Repeats:
        def get_indices(self, batch_size):
            return [0] * batch_size

        def feedback(self, indices, values):
            pass

    return Repeats()


def test_a_selector_of_ones_own_runs_in_the_sweep():
    specs = [sim.SelectorSpec("random", "random"),
             sim.SelectorSpec("easiest", "custom", group="custom", factory=_Easiest)]
    result = sim.run_sweep(SMALL, specs, workers=1, progress=False)
    easy = result.steps[(result.steps["selector"] == "easiest") & (result.steps["step"] > 0)]
    rand = result.steps[(result.steps["selector"] == "random") & (result.steps["step"] > 0)]
    assert easy["selected_true_pass_rate"].mean() > rand["selected_true_pass_rate"].mean() + 0.2
    assert "factory" in result.selectors.columns


def test_a_faulty_selector_of_ones_own_is_named():
    specs = [sim.SelectorSpec("repeats", "custom", factory=_bad)]
    with pytest.raises(ValueError, match="'repeats'.*distinct task indices"):
        sim.run_sweep(SMALL, specs, workers=1, progress=False)
    with pytest.raises(ValueError, match="'oops'.*not callable"):
        sim.check_specs([sim.SelectorSpec("oops", "custom", factory=42)], SMALL)

"""Figures read only tables: check what they draw (lines, bands, annotations), not pixels."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from mathagent import plots  # noqa: E402


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def steps_table(selectors=("random", "bots"), seeds=(0, 1, 2), steps=20, every=5):
    rng = np.random.default_rng(0)
    rows = []
    for k, sel in enumerate(selectors):
        for seed in seeds:
            for step in range(steps + 1):
                rows.append({
                    "selector": sel, "seed": seed, "step": step,
                    "rollout_accuracy": np.nan if step == 0 else 0.1 * (k + 1) + rng.normal(0, .01),
                    "eval_accuracy": 0.05 + 0.01 * step * (k + 1) + 0.001 * seed
                    if step % every == 0 else np.nan,
                    "effective_task_ratio": np.nan if step == 0 else 0.3 + 0.4 * k + 0.01 * seed,
                })
    return pd.DataFrame(rows)


def test_training_curves_draw_a_mean_line_and_band_per_selector():
    t = steps_table()
    fig = plots.plot_training_curves(t, smooth=1)
    left, right = fig.axes
    assert [ln.get_label() for ln in right.lines] == ["random", "bots"]
    assert len(right.collections) == 2 and len(left.collections) == 2  # one band each
    # each evaluation marked (they come every few steps), the training batches not
    assert {ln.get_marker() for ln in right.lines} == {"o"}
    assert {ln.get_marker() for ln in left.lines} == {"None"}
    # the eval line is the mean over seeds at the eval steps
    x, y = right.lines[1].get_data()
    want = t[t["selector"] == "bots"].dropna(subset=["eval_accuracy"]).groupby("step")[
        "eval_accuracy"].mean()
    np.testing.assert_array_equal(x, want.index.to_numpy())
    np.testing.assert_allclose(y, want.to_numpy())
    assert "3 seed(s)" in fig._suptitle.get_text()
    only = plots.plot_training_curves(t, selectors=["bots"])
    assert [ln.get_label() for ln in only.axes[1].lines] == ["bots"]


def test_training_curves_draw_a_start_measured_once_at_step_0():
    """Runs that evaluate no step 0 start from weights measured once elsewhere: the eval panel
    shows that point at step 0 with the measurements' range, and a dotted line from it to each
    selector's first evaluation; the legend names it."""
    from mathagent.results import StartPoint

    t = steps_table()
    t.loc[t["step"] == 0, "eval_accuracy"] = np.nan       # no run evaluated step 0
    start = StartPoint({"a": 0.04, "b": 0.05, "c": 0.06})
    fig = plots.plot_training_curves(t, smooth=1, start=start)
    right = fig.axes[1]
    dotted = [ln for ln in right.lines if ln.get_linestyle() == ":"]
    assert len(dotted) == 2
    for line, sel in zip(dotted, ("random", "bots"), strict=True):
        first = t[(t["selector"] == sel) & (t["step"] == 5)]["eval_accuracy"].mean()
        np.testing.assert_allclose(line.get_ydata(), [0.05, first])
        np.testing.assert_array_equal(line.get_xdata(), [0, 5])
    point = [ln for ln in right.lines if list(ln.get_xdata()) == [0] and ln.get_marker() == "o"]
    assert len(point) == 1
    assert point[0].get_ydata()[0] == pytest.approx(0.05)
    bars = right.containers[0]                                # the error bar: the range
    segment = bars.lines[2][0].get_segments()[0]
    np.testing.assert_allclose(segment[:, 1], [0.04, 0.06])
    labels = [text.get_text() for text in fig.legends[0].get_texts()]
    assert labels == ["random", "bots", "start: step-0 evaluation (3 other runs, range)"]
    # runs that evaluated step 0 themselves need none
    with pytest.raises(ValueError, match="evaluated step 0 themselves"):
        plots.plot_training_curves(steps_table(), start=start)
    # without it, nothing at step 0
    plain = plots.plot_training_curves(t, smooth=1)
    assert not [ln for ln in plain.axes[1].lines if ln.get_linestyle() == ":"]


def test_seed_band_minmax_and_std():
    t = steps_table()
    mm = plots.seed_band(t, "eval_accuracy", "minmax")
    row = mm[(mm["selector"] == "bots") & (mm["step"] == 10)].iloc[0]
    assert row["lo"] == pytest.approx(0.05 + 0.2) and row["hi"] == pytest.approx(0.252)
    sd = plots.seed_band(t, "eval_accuracy", "std")
    row = sd[(sd["selector"] == "bots") & (sd["step"] == 10)].iloc[0]
    assert row["hi"] - row["mean"] == pytest.approx(0.001)
    with pytest.raises(ValueError, match="band"):
        plots.seed_band(t, "eval_accuracy", "iqr")


def test_one_seed_draws_no_band():
    fig = plots.plot_training_curves(steps_table(seeds=(0,)))
    assert len(fig.axes[1].collections) == 0


def test_etr_plot_and_errors():
    t = steps_table()
    fig = plots.plot_etr(t, smooth=1)
    y = fig.axes[0].lines[1].get_data()[1]
    np.testing.assert_allclose(y, 0.7 + 0.01)  # mean over seeds 0, 1, 2
    with pytest.raises(ValueError, match="effective_task_ratio"):
        plots.plot_etr(t.drop(columns="effective_task_ratio"))
    with pytest.raises(ValueError, match=r"\['greedy'\] not in the table"):
        plots.plot_etr(t, selectors=["greedy"])


def test_signal_curve_peaks_at_one_half():
    from mathagent.simulation import signal_curve

    fig = plots.plot_signal_curve(signal_curve((4, 8)))
    x, y = fig.axes[0].lines[0].get_data()
    assert x[np.argmax(y)] == pytest.approx(0.5)
    assert len(fig.axes[1].lines) == 2


def test_posteriors_plot_marks_selected_steps():
    rows = []
    for step in range(10):
        for task in (3, 8):
            rows.append({"selector": "bots", "seed": 0, "step": step, "task": task,
                         "mean": 0.5, "sd": 0.1, "true_pass_rate": 0.4,
                         "selected": step % 3 == 0 and task == 3})
    fig = plots.plot_posteriors(pd.DataFrame(rows))
    ax = fig.axes[0]
    solid = [ln for ln in ax.lines if ln.get_linestyle() == "-"]
    assert len(solid) == 2
    dots = [c for c in ax.collections if c.get_offsets().shape[1] == 2
            and len(c.get_offsets()) in (0, 4)]
    assert sorted(len(c.get_offsets()) for c in dots) == [0, 4]
    with pytest.raises(ValueError, match="no rows for selector 'x'"):
        plots.plot_posteriors(pd.DataFrame(rows), selector="x")


#: numpy 2 names it trapezoid (np.trapz is deprecated there); numpy 1.26 (the CPU lock) has
#: only trapz.
trapezoid = getattr(np, "trapezoid", None) or np.trapz


def test_beta_densities_integrate_to_one():
    fig = plots.plot_beta_densities(pd.DataFrame({"task": [1, 2], "alpha": [2.0, 9.0],
                                                  "beta": [5.0, 3.0]}))
    for line in fig.axes[0].lines:
        x, y = line.get_data()
        assert trapezoid(y, x) == pytest.approx(1, abs=1e-3)


def test_ttb_heatmap_annotates_every_cell():
    grid = pd.DataFrame([{"lamb": lam, "rho": rho, "ttb_mean": lam + rho,
                          "ttb_reached": 0.5 if (lam, rho) == (0.3, 0.0) else 1.0}
                         for lam in (0.0, 0.1, 0.3) for rho in (0.0, 0.1)])
    fig = plots.plot_ttb_heatmap(grid)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert len(texts) == 6 and "0.40" in texts
    assert "0.30\n(50% reached)" in texts


def test_summary_bars_and_save(tmp_path):
    from mathagent import metrics

    summary = metrics.summarize(steps_table())
    fig = plots.plot_summary(summary)
    assert len(fig.axes) == 3
    path = plots.save_figure(fig, "summary", tmp_path / "figs")
    assert path.exists() and path.stat().st_size > 1000


def test_panels_share_one_legend_and_take_line_styles():
    t = steps_table()
    fig = plots.plot_panels(t, [("rollout_accuracy", "rollout", 1),
                                ("effective_task_ratio", "ETR", 1),
                                ("eval_accuracy", "held-out", 1)],
                            styles={"bots": ":"})
    assert [ax.get_title() for ax in fig.axes] == ["rollout", "ETR", "held-out"]
    assert len(fig.legends) == 1
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["random", "bots"]
    for ax in fig.axes:
        assert [ln.get_linestyle() for ln in ax.lines] == ["-", ":"]
    # a selector with fewer seeds than another: each legend entry says how many
    fewer = t[(t["selector"] == "random") | (t["seed"] == t["seed"].min())]
    assert fewer.groupby("selector")["seed"].nunique().to_dict() == {"bots": 1, "random": 3}
    for fig in (plots.plot_panels(fewer, [("rollout_accuracy", "rollout", 1)]),
                plots.plot_training_curves(fewer, smooth=1)):
        assert [t.get_text() for t in fig.legends[0].get_texts()] == ["random (3 seeds)",
                                                                       "bots (1 seed)"]
    assert plots.plot_training_curves(fewer, smooth=1).texts[0].get_text() == (
        "mean over 1-3 seeds a selector, band: min-max")
    # a seed without the metric (a run that logged no ETR) is not counted for that metric
    no_etr = fewer.copy()
    no_etr.loc[(no_etr["selector"] == "random") & (no_etr["seed"] == 0),
               "effective_task_ratio"] = np.nan
    etr = plots.plot_etr(no_etr, smooth=1)
    assert [t.get_text() for t in etr.axes[0].get_legend().get_texts()] == [
        "random (2 seeds)", "bots (1 seed)"]
    # with the start point beside them, its label stays as it is
    from mathagent.results import StartPoint
    started = fewer.assign(eval_accuracy=fewer["eval_accuracy"].where(fewer["step"] > 0))
    fig = plots.plot_training_curves(started, smooth=1,
                                     start=StartPoint({"a": 0.04, "b": 0.05, "c": 0.06}))
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "random (3 seeds)", "bots (1 seed)", "start: step-0 evaluation (3 other runs, range)"]
    # as many seeds each: plain names
    same = plots.plot_etr(t, smooth=1)
    assert [t.get_text() for t in same.axes[0].get_legend().get_texts()] == ["random", "bots"]

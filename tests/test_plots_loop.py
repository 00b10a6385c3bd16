"""The loop picture of notebook 01 draws the cycle the tutorial is about, every box and arrow."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from mathagent import plots  # noqa: E402


def test_the_loop_closes_through_the_pass_rate_calculator():
    nxt = {}
    for src, dst, _ in plots.LOOP_EDGES:
        nxt.setdefault(src, []).append(dst)
    walk, node = ["selector"], "selector"
    for hop in ("agent", "judge", "pass_rate_calculator", "selector"):
        assert hop in nxt[node], f"{node} -> {hop} missing"
        node = hop
        walk.append(node)
    assert walk == ["selector", "agent", "judge", "pass_rate_calculator", "selector"]
    assert {s for s, _, _ in plots.LOOP_EDGES} | {d for _, d, _ in plots.LOOP_EDGES} \
        == set(plots.LOOP_NODES)


def test_the_figure_shows_every_box_and_arrow(tmp_path):
    import matplotlib.pyplot as plt

    fig = plots.plot_loop()
    try:
        ax = fig.axes[0]
        texts = [t.get_text() for t in ax.texts]
        for _, _, body in plots.LOOP_NODES.values():
            assert body in texts
        for _, _, label in plots.LOOP_EDGES:
            assert label in texts
        arrows = [c for c in ax.get_children() if type(c).__name__ == "Annotation"]
        assert len(arrows) == len(plots.LOOP_EDGES)
        assert plots.save_figure(fig, "loop", tmp_path).stat().st_size > 10_000
    finally:
        plt.close(fig)

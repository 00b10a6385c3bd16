"""Every exercise's self-check: a right answer passes, a wrong one gets the hint, and
neither prints the reference solution."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mathagent import paths, results, tasks
from mathagent.exercises import checking, nb01, nb02, nb03, nb04, nb05

TRINITY = paths.RESULTS_DIR / "trinity_h200"


def assert_right(capsys, ok: bool) -> None:
    assert ok is True
    assert capsys.readouterr().out.strip() == checking.RIGHT


def assert_hint(capsys, ok: bool, *secrets: object) -> None:
    assert ok is False
    out = capsys.readouterr().out.strip()
    assert out.startswith("Not yet. ") and len(out) > len("Not yet. ") + 20
    for secret in secrets:
        assert str(secret) not in out, f"the hint gives away {secret!r}"


def test_nb01_checks(capsys, tmp_path):
    right = {p: tasks.informative_probability(p, 8) for p in (0.05, 0.5, 0.9)}
    assert_right(capsys, nb01.check_exercise1(right))
    assert_hint(capsys, nb01.check_exercise1({**right, 0.9: 0.9}), round(right[0.9], 2))
    assert_right(capsys, nb01.check_exercise2(nb01.broken_pass_rate(tmp_path)))
    other = nb01.broken_pass_rate(tmp_path / "other", row=5, column="qwen3_30b_pass_rate",
                                  value=-0.25)
    assert_hint(capsys, nb01.check_exercise2(other))
    n = nb01.smallest_group()
    assert tasks.informative_probability(0.05, n) >= 0.5 > tasks.informative_probability(0.05, n - 1)
    assert_right(capsys, nb01.check_exercise3(n))
    assert_hint(capsys, nb01.check_exercise3(n - 1), n)


def test_nb02_checks(capsys):
    right = [row[2:] for row in nb02.PREDICTIONS]
    assert_right(capsys, nb02.check_exercise1(right))
    wrong = [*right[:3], (1, 1, 1), *right[4:]]
    assert_hint(capsys, nb02.check_exercise1(wrong))
    table = pd.DataFrame({"row": [0] * 4 + [1] * 4,
                          "reward": [1, 0, 0, 1, 1, np.nan, 0, 0],
                          "error": [None] * 5 + ["timeout"] + [None] * 2})
    assert_right(capsys, nb02.check_exercise2(table, nb02.pass_rates(table)))
    counted_as_zero = table.fillna({"reward": 0}).groupby("row")[["reward"]].mean()
    assert_hint(capsys, nb02.check_exercise2(table, counted_as_zero.rename(
        columns={"reward": "pass_rate"})))
    from mathagent.grpo.loss import group_advantages

    adv = group_advantages(np.array([nb02.GROUP]))[0]
    assert_right(capsys, nb02.check_exercise3(adv))
    assert_hint(capsys, nb02.check_exercise3(np.array(nb02.GROUP) - np.mean(nb02.GROUP)),
                f"{adv[0]:.2f}")


def test_nb03_checks(capsys):
    assert_right(capsys, nb03.check_exercise1(nb03.ClosestToHalf))

    class Repeats(nb03.ClosestToHalf):
        def get_indices(self, batch_size):
            return [0] * batch_size

    assert_hint(capsys, nb03.check_exercise1(Repeats))
    assert_hint(capsys, nb03.check_exercise1(int))   # not a selector at all: a hint, no traceback
    assert_right(capsys, nb03.check_exercise2(**nb03.KNOB_PREDICTIONS))
    assert_hint(capsys, nb03.check_exercise2(highest_etr=0.8, best_eval=0.8))
    total = 2 + nb03.FORGET["rho"] * nb03.FORGET["m"] / nb03.FORGET["lamb"]
    assert_right(capsys, nb03.check_exercise3(total))
    assert_hint(capsys, nb03.check_exercise3(10.0), f"{total:.0f}")


def test_nb04_checks(capsys, tmp_path):
    setting = nb04.preflight_without_operator(tmp_path)[0].split(":", 1)[0]
    assert_right(capsys, nb04.check_exercise1(setting))
    assert_hint(capsys, nb04.check_exercise1("algorithm.repeat_times"), setting)
    mean = float(nb04.etr_from_events(paths.RESULTS_DIR / "trinity_h200_local"
                                      / "difficulty_seed0").mean())
    assert_right(capsys, nb04.check_exercise2(mean))
    assert_hint(capsys, nb04.check_exercise2(mean + 0.1), f"{mean:.3f}")
    assert nb04.replies_per_step() == 16 * 8   # the config's own comment: 16 tasks x 8 rollouts
    assert_right(capsys, nb04.check_exercise3(nb04.replies_per_step()))
    assert_hint(capsys, nb04.check_exercise3(16), nb04.replies_per_step())


def test_nb05_checks(capsys):
    table = results.load_runs([TRINITY], progress=False)
    m = nb05.margin_by_hand(table)
    assert_right(capsys, nb05.check_exercise1(table, m["z"], m["seeds_for_2se"]))
    assert_hint(capsys, nb05.check_exercise1(table, m["z"] + 1, m["seeds_for_2se"]),
                f"{m['z']:.2f}")
    runs = nb05.shortcut_runs(table)
    assert_right(capsys, nb05.check_exercise2(table, runs))
    assert_hint(capsys, nb05.check_exercise2(table, runs[:-1] or [("random", 0)]))
    seeds = nb05.headline_seeds()
    assert_right(capsys, nb05.check_exercise3(seeds))
    assert_hint(capsys, nb05.check_exercise3(3), seeds)


def test_headline_seeds_reach_two_standard_errors_and_one_fewer_does_not():
    from mathagent.report import stats

    arms = stats.arm_table(nb05.HEADLINE)
    a, b = nb05.HEADLINE_ARMS
    diff = arms.at[a, "mean"] - arms.at[b, "mean"]
    # the per-arm standard errors at n seeds give each arm's variance: se**2 * n
    var_sum = sum(arms.at[x, "se"] ** 2 * arms.at[x, "seeds"] for x in (a, b))
    n = nb05.headline_seeds()

    def z(k):
        return diff / np.sqrt(var_sum / k)

    assert z(n) >= 2 > z(n - 1)


@pytest.mark.parametrize("answer", [None, "0.5", float("nan"), True])
def test_close_refuses_what_is_not_a_number(answer):
    assert not checking.close(answer, 0.5, 0.1)

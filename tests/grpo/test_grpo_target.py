"""``train-local --target-reward``: the knob of the feedback selectors (the simulation of
notebook 03 uses 0.5, the runs the reference 0.8), set from the command line and checked
before anything loads."""

from __future__ import annotations

import argparse

import pytest

from mathagent import cli, grpo, paths, tasks
from mathagent.grpo.config import selector_kwargs
from mathagent.selectors import make_selector
from mathagent.settings import flag_overrides


def _cfg(*flags: str):
    parser = argparse.ArgumentParser()
    grpo.train_local_parser(parser)
    return grpo.load_config(grpo.DEFAULT_CONFIG,
                            flag_overrides(parser.parse_args(list(flags)), grpo.TrainConfig))


@pytest.mark.parametrize("name", ["difficulty_based", "bots"])
def test_the_flag_sets_the_pass_rate_the_selector_aims_for(name):
    cfg = _cfg("--selector", name, "--target-reward", "0.5")
    kwargs = selector_kwargs(cfg)
    assert kwargs["target_reward"] == 0.5
    # the rest of the config's entry stays, and m is the group size
    assert (kwargs["lamb"], kwargs["m"]) == (0.1, cfg.rollout.repeat_times)
    keys = tuple(cfg.taskset.feature_keys)
    train = tasks.load_taskset(paths.ARITHMETIC_DIR, split="train", feature_keys=keys)
    selector = make_selector(name, train, feature_keys=list(keys), seed=0,
                             repeat_times=cfg.rollout.repeat_times, **kwargs)
    assert selector.selector.target_reward == 0.5   # the Trinity (or BOTS) selector itself
    # without the flag, the config's value
    assert selector_kwargs(_cfg("--selector", name))["target_reward"] == 0.8


def test_a_target_for_a_selector_without_one_or_out_of_range_is_one_line(capsys):
    assert cli.main(["train-local", "--selector", "random", "--target-reward", "0.5",
                     "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"train-local: {grpo.DEFAULT_CONFIG}: selector.target_reward applies to a "
                   "selector that aims at a pass rate (difficulty_based, bots), not 'random'"]
    with pytest.raises(ValueError, match=r"selector\.target_reward=1\.5 is not a pass rate"):
        _cfg("--selector", "bots", "--target-reward", "1.5")


@pytest.mark.slow
def test_target_reward_runs_trains_one_run_per_target(small_model, tmp_path, monkeypatch):
    """What notebook 04 runs on a GPU, here on the CPU with one step of the smoke config on the
    small model of the resume tests (conftest.py): a real ``train-local`` run per target, each
    in its own folder with the target it used."""
    import yaml

    from mathagent import run_facts

    monkeypatch.setenv("MATHAGENT_RUNS", str(tmp_path / "runs"))
    runs = grpo.target_reward_runs((0.5,), selector="difficulty_based", seed=0, steps=1,
                                   device="cpu", config=small_model.config)
    assert [r.parent for r in runs] == [tmp_path / "runs" / "train_local"]
    assert runs[0].name.endswith("-difficulty_based-t0.5-s0")
    config = yaml.safe_load((runs[0] / "config.yaml").read_text())
    assert config["selector"]["target_reward"] == 0.5
    table = run_facts.runs_overview(runs, "CPU", tmp_path / "runs")
    assert table["steps"].tolist() == [1] and table["made by"].tolist() == ["train-local"]
    with pytest.raises(RuntimeError, match="target_reward 1.5 failed"):
        grpo.target_reward_runs((1.5,), selector="bots", seed=0, steps=1, device="cpu",
                                config=small_model.config)
    assert run_facts.runs_made_here(tmp_path / "runs") == runs   # no empty folder left

"""configs/train_local_trinity.yaml holds the one-GPU Trinity-RFT experiment's settings.

The local trainer's curves are laid beside the engine's only while both read the same
settings: these tests fail as soon as one side changes without the other.
"""

from __future__ import annotations

import pytest
import yaml

from mathagent import paths
from mathagent.agent import REFERENCE_PROMPT
from mathagent.grpo import load_config

MIRROR = paths.CONFIGS_DIR / "train_local_trinity.yaml"
ENGINE = {sel: yaml.safe_load((paths.CONFIGS_DIR / f"config_{sel}_arithmetic.yaml").read_text())
          for sel in ("random", "difficulty", "bots")}
SPEC = paths.CONFIGS_DIR / "experiment_arithmetic.yaml"


def experiment_args() -> dict[str, str]:
    """The overrides every run of the 40-step experiment gets (its spec's)."""
    from mathagent.results.spec import load_spec

    return {k: str(v) for k, v in load_spec(SPEC).overrides.items()}


@pytest.fixture(scope="module")
def mirror():
    return load_config(MIRROR)


def test_rollout_and_prompt_match_the_engine(mirror):
    engine = ENGINE["difficulty"]
    assert mirror.rollout.batch_size == engine["buffer"]["batch_size"]
    assert mirror.rollout.repeat_times == engine["algorithm"]["repeat_times"]
    assert mirror.rollout.max_new_tokens == engine["model"]["max_response_tokens"]
    assert mirror.rollout.temperature == engine["model"]["temperature"]
    assert mirror.rollout.lenient and engine["tuner"]["judge"] == "lenient_judge"
    assert mirror.prompt.system == REFERENCE_PROMPT
    assert mirror.prompt.few_shot == 0


def test_optimiser_matches_the_engine(mirror):
    assert mirror.algorithm.lr == ENGINE["difficulty"]["algorithm"]["optimizer"]["lr"]
    assert mirror.algorithm.lr == ENGINE["difficulty"]["tuner"]["algorithm"]["learning_rate"]
    # Trinity 0.6.0's defaults, read from the runtime Config of results/trinity_h200/*/
    assert (mirror.algorithm.weight_decay, mirror.algorithm.clip_eps, mirror.algorithm.kl_coef,
            mirror.algorithm.max_grad_norm) == (0.01, 0.2, 0.001, 1.0)


def test_taskset_and_selectors_match_the_engine(mirror):
    taskset = ENGINE["difficulty"]["buffer"]["explorer_input"]["taskset"]
    assert paths.REPO_ROOT / mirror.taskset.path == paths.REPO_ROOT / taskset["path"]
    assert mirror.taskset.split == taskset["split"]
    assert mirror.taskset.feature_keys == taskset["data_selector"]["feature_keys"]
    eval_set = ENGINE["difficulty"]["buffer"]["explorer_input"]["eval_tasksets"][0]
    assert mirror.taskset.eval_split == eval_set["split"]
    for name, sel in (("difficulty_based", "difficulty"), ("bots", "bots")):
        kwargs = ENGINE[sel]["buffer"]["explorer_input"]["taskset"]["data_selector"]["kwargs"]
        assert mirror.selector.params[name] == kwargs, name


def test_steps_and_evaluation_match_the_experiment(mirror):
    args = experiment_args()
    assert mirror.trainer.steps == int(args["buffer.total_steps"])
    assert mirror.eval.interval == int(args["tuner.algorithm.eval_interval_steps"])
    assert mirror.eval.on_start and mirror.eval.repeat_times == 1


def test_no_tool_as_in_the_experiment(mirror):
    # the experiment's agent runs without the Python tool (no tuner.agent.python_tool)
    for config in ENGINE.values():
        agent = config["tuner"].get("agent", {})
        assert agent.get("python_tool", False) is mirror.rollout.python_tool is False

"""The settings of a ``train-local`` run: its dataclasses, the shipped files, and reading them.

The sections mirror the YAML file. Fields with a command-line flag declare it here, once,
with :func:`mathagent.settings.setting`; ``train-local`` derives its options from them.
:func:`load_config` reads a file through :func:`mathagent.settings.load` (types checked,
errors one line naming the file and key), then checks the values' ranges.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from mathagent import paths, settings
from mathagent.policy import MODEL_PATH_ENV, PromptConfig
from mathagent.sandbox import SandboxLimits, timeout_problem
from mathagent.settings import setting

DEFAULT_CONFIG = paths.CONFIGS_DIR / "train_local.yaml"
SMOKE_CONFIG = paths.CONFIGS_DIR / "train_local_smoke.yaml"


def _minutes_to_seconds(minutes: float) -> float:
    return 60.0 * minutes


@dataclass
class TasksetConfig:
    # relative paths are taken from the repository root
    path: str = setting("data/arithmetic", help="taskset folder (default: config's)",
                        flag="--taskset", metavar="TASKSET")
    split: str = "train"
    eval_split: str = "test"
    feature_keys: list[str] = field(default_factory=lambda: [
        "smollm2_weak_pass_rate", "smollm2_strong_pass_rate"])
    max_tasks: int | None = None  # keep only the first N training tasks (smoke runs)
    eval_max_tasks: int | None = None  # evaluate on the first N held-out tasks only


@dataclass
class ModelConfig:
    # a model name (mathagent.models), GGUF file, checkpoint folder or hub id; None: the
    # bundled GGUF
    path: str | None = setting(None, help=f"a model name (python -m mathagent models), GGUF "
                                          f"file, checkpoint folder or hub id (default: "
                                          f"${MODEL_PATH_ENV} or smollm2-135m-instruct)",
                               flag="--model", metavar="MODEL")


@dataclass
class RolloutConfig:
    batch_size: int = 32  # tasks per step (Trinity buffer.batch_size)
    repeat_times: int = 8  # completions per task (GRPO group size)
    max_new_tokens: int = 128
    temperature: float = 1.0
    chunk_size: int = 1024  # sequences sampled together
    lenient: bool = True  # judge accepts the last number when no boxed/#### answer
    # Offer the sandboxed execute_python_code: a rollout becomes reply, tool output, reply,
    # ... (mathagent.grpo.tool_rollout). Off by default, as the upstream agent has no tool.
    python_tool: bool = setting(False, help="give the rollouts the sandboxed Python tool "
                                            "execute_python_code (default: the config's)",
                                flag="--python-tool")
    max_turns: int = 10  # with the tool: replies per rollout at most (the agent's max_iters)
    tool_timeout: float = SandboxLimits().timeout  # with the tool: wall-clock s of one run


@dataclass
class AlgorithmConfig:
    lr: float = 1e-5
    weight_decay: float = 0.0
    clip_eps: float = 0.2
    kl_coef: float = 0.0  # >0 keeps a frozen copy of the initial model for a KL penalty
    micro_batch_size: int = 64  # sequences per forward/backward pass
    update_epochs: int = 1  # passes over each batch (>1 makes the clipping bite)
    max_grad_norm: float = 1.0
    adv_eps: float = 1e-6


@dataclass
class SelectorSettings:
    name: str = setting("random", help="random, shuffle, sequential, offline_easy2hard, "
                                       "difficulty_based or bots (default: the config's)",
                        flag="--selector", metavar="SELECTOR")
    # Keyword arguments per selector name, passed to make_selector for the chosen one.
    params: dict[str, dict] = field(default_factory=dict)
    # The knob of the feedback selectors: replaces params[<name>].target_reward when set.
    target_reward: float | None = setting(
        None, help="pass rate difficulty_based or bots aims for (default: the config's, "
                   "0.8 in train_local.yaml)", flag="--target-reward", metavar="R")


@dataclass
class EvalConfig:
    interval: int = 5  # evaluate every N steps (0: never)
    repeat_times: int = 4
    temperature: float = 1.0
    on_start: bool = True  # evaluate the initial model as step 0


@dataclass
class TrainerConfig:
    steps: int = setting(60, help="total training steps", flag="--steps", metavar="STEPS")
    save_interval: int = 10  # checkpoint every N steps (the last step is always saved)
    seed: int = setting(0, help="seed of the sampler, the evaluation and the selector",
                        flag="--seed", metavar="SEED")
    device: str = setting("cpu", help="where the policy runs and trains: cpu, cuda or cuda:N",
                          flag="--device", metavar="DEVICE")
    samples_per_step: int = 2  # completions written to samples.jsonl per step
    # stop (after a checkpoint) once a run has taken this long
    time_limit_s: float = setting(0.0, help="stop after this many minutes, with a checkpoint "
                                            "(resumable)",
                                  flag="--time-limit", metavar="MIN",
                                  to_value=_minutes_to_seconds)
    # >0: cap this process's share of GPU memory
    gpu_memory_fraction: float = setting(0.0, help="cap this run's share of GPU memory (runs "
                                                   "sharing one GPU)",
                                         flag="--gpu-memory-fraction", metavar="F")


@dataclass
class TrainConfig:
    """Everything a ``train-local`` run needs; mirrors the sections of the YAML file."""

    taskset: TasksetConfig = field(default_factory=TasksetConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    selector: SelectorSettings = field(default_factory=SelectorSettings)
    eval: EvalConfig = field(default_factory=EvalConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)

    def to_dict(self) -> dict:
        return asdict(self)


def load_config(path: str | os.PathLike | None = None,
                overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Read a ``train-local`` YAML file into a :class:`TrainConfig`, then apply overrides.

    ``overrides`` maps dotted keys (``"trainer.steps"``) to values. Unknown keys, values of
    the wrong type and values out of range raise ``ValueError`` (a
    :class:`~mathagent.settings.SettingsError` for the first two), one line naming the file
    and the key.
    """
    where = "defaults" if path is None else str(path)
    cfg = settings.load(TrainConfig, path, overrides or {}, where=where)
    _validate(cfg, where)
    return cfg


def _validate(cfg: TrainConfig, where: str) -> None:
    checks = [
        (cfg.rollout.batch_size >= 1, "rollout.batch_size must be >= 1"),
        (cfg.rollout.repeat_times >= 2, "rollout.repeat_times must be >= 2 (GRPO compares "
                                        "completions within a group)"),
        (cfg.rollout.max_new_tokens >= 1, "rollout.max_new_tokens must be >= 1"),
        (cfg.rollout.temperature > 0, "rollout.temperature must be > 0 for exploration"),
        (cfg.rollout.max_turns >= 1, "rollout.max_turns must be >= 1 (replies per rollout "
                                     "with the Python tool)"),
        (timeout_problem(cfg.rollout.tool_timeout) is None,
         f"rollout.tool_timeout (seconds one run of the Python tool may take) "
         f"{timeout_problem(cfg.rollout.tool_timeout)}"),
        (cfg.algorithm.micro_batch_size >= 1, "algorithm.micro_batch_size must be >= 1"),
        (cfg.algorithm.update_epochs >= 1, "algorithm.update_epochs must be >= 1"),
        (cfg.algorithm.lr > 0, "algorithm.lr must be > 0"),
        (cfg.trainer.steps >= 0, "trainer.steps must be >= 0"),
        (cfg.trainer.save_interval >= 1, "trainer.save_interval must be >= 1"),
        (cfg.trainer.device in ("cpu", "cuda") or cfg.trainer.device.startswith("cuda:"),
         "trainer.device must be 'cpu', 'cuda' or 'cuda:N'"),
        (cfg.eval.interval >= 0, "eval.interval must be >= 0"),
        (cfg.eval.repeat_times >= 1, "eval.repeat_times must be >= 1"),
    ]
    for ok, msg in checks:
        if not ok:
            raise ValueError(f"{where}: {msg}")
    target = cfg.selector.target_reward
    if target is not None and not 0 <= target <= 1:
        raise ValueError(f"{where}: selector.target_reward={target} is not a pass rate in [0, 1]")
    if target is not None and "target_reward" not in selector_kwargs(cfg):
        raise ValueError(f"{where}: selector.target_reward applies to a selector that aims at "
                         f"a pass rate (difficulty_based, bots), not {cfg.selector.name!r}")


def selector_kwargs(cfg: TrainConfig) -> dict:
    """The keyword arguments of the chosen selector: its ``selector.params`` entry, with
    ``selector.target_reward`` over it when set, and ``m`` (the pseudo-count of one feedback
    value) defaulting to the group size for a selector that takes feedback."""
    from mathagent.selectors import uses_feedback

    sel = cfg.selector
    kwargs = dict(sel.params.get(sel.name, {}) or {})
    if sel.target_reward is not None and uses_feedback(sel.name):
        kwargs["target_reward"] = sel.target_reward
    if uses_feedback(sel.name):
        kwargs.setdefault("m", cfg.rollout.repeat_times)
    return kwargs

"""Tutorial-scale GRPO: a compact, readable mirror of Trinity-RFT's explore/train loop.

Trinity-RFT splits reinforcement fine-tuning into an *explorer* (vLLM engines run the
workflow on a batch of tasks and the judge scores each run), a *buffer* (the
``pass_rate_calculator`` operator turns rewards into per-task pass rates that the task
selector receives through ``feedback``) and a *trainer* (verl computes GRPO advantages and
updates the policy). That needs vLLM and several GPUs. This package runs the same loop in
one process on one GPU, or on a CPU with tiny settings, with the bundled SmolLM2-135M:

1. **select**  ``B`` task indices from the selector (Trinity's own selector classes or
   :class:`mathagent.selectors.BOTSSelector`, built by ``make_selector``);
2. **explore** ``n`` completions per task with batched sampling (:meth:`Policy.sample`);
3. **judge**   every completion with :func:`mathagent.judge.score` in lenient mode (the
   small model rarely writes ``\\boxed{}``, so the last number in its reply counts);
4. **feedback** the per-task mean reward to the selector, exactly as Trinity's scheduler
   does with the ``pass_rate_calculator`` output (``feedback(indices, values)``);
5. **advantage** per group: ``A_ij = (r_ij - mean_j r_ij) / (std_j r_ij + eps)``; a group
   whose ``n`` rewards all agree carries no signal and gets ``A = 0``;
6. **train**   one clipped policy-gradient step over the batch in micro-batches
   (token-mean loss, optional k3 KL penalty to the initial model).

By default a completion is one reply, as the upstream agent (which has no tool) gives.
``rollout.python_tool: true`` (``--python-tool``) offers the policy the agent's sandboxed
``execute_python_code``: a completion becomes a short exchange (reply, the code's output as a
tool message, next reply, up to ``rollout.max_turns`` replies), still sampled in batches;
the judge reads the last reply, and the loss and the KL penalty cover only the tokens the
policy wrote, never the tool's output (:mod:`~mathagent.grpo.tool_rollout`). The evaluation
then rolls out with the tool too.

Every step appends one row to the tidy table ``metrics.csv`` (``selector, seed, step,
rollout_accuracy, eval_accuracy, effective_task_ratio`` plus timings, and the tool calls
and failed tool runs per rollout, ``rollout_tool_calls`` and ``rollout_tool_errors``), logs
Trinity's own metric names to TensorBoard, and every ``save_interval`` steps checkpoints the
policy, the optimizer, the sampler's random state and the complete selector state (also the
posteriors of Trinity's ``difficulty_based``, which its own ``state_dict`` leaves out) so a
run resumes where it stopped and continues exactly as an uninterrupted one. Checkpoints and
tables are swapped in by renames, so a run killed at any instant resumes with ``--resume``.
The policy itself (the bundled model, its chat prompt, batched sampling) is
:mod:`mathagent.policy`, which the pass-rate measurement samples from too.

Heavy libraries (torch, transformers, datasets, the selectors) are imported inside the
functions that need them, so the package imports quickly and runs on a GPU machine that
lacks the agent stack (the Python tool, when on, takes its schema from AgentScope).

Modules:

* :mod:`~mathagent.grpo.loss`: judge rewards, group advantages and the clipped loss;
* :mod:`~mathagent.grpo.config`: the run's settings dataclasses and :func:`load_config`;
* :mod:`~mathagent.grpo.files`: atomic writes and cutting a run's logs back to a step;
* :mod:`~mathagent.grpo.logger`: the tidy table, Trinity's metric names, TensorBoard;
* :mod:`~mathagent.grpo.tool_rollout`: rollouts with the Python tool (multi-turn);
* :mod:`~mathagent.grpo.checkpoint`: kill-safe checkpoints, their saving and recovery;
* :mod:`~mathagent.grpo.trainer`: :class:`GRPOTrainer`, the explore/train loop;
* :mod:`~mathagent.grpo.commands`: the ``train-local`` command.
"""

from mathagent.grpo.checkpoint import (
    CHECKPOINT_FILES,
    CHECKPOINT_MARKER,
    CHECKPOINT_NAME,
    CHECKPOINT_OLD,
    CHECKPOINT_TMP,
    CheckpointMixin,
    NoCheckpointError,
    checkpoint_step,
    recover_checkpoint,
)
from mathagent.grpo.commands import target_reward_runs, train_local_command, train_local_parser
from mathagent.grpo.config import (
    DEFAULT_CONFIG,
    SMOKE_CONFIG,
    AlgorithmConfig,
    EvalConfig,
    ModelConfig,
    RolloutConfig,
    SelectorSettings,
    TasksetConfig,
    TrainConfig,
    TrainerConfig,
    load_config,
)
from mathagent.grpo.files import atomic_write_text, last_logged_step, truncate_jsonl
from mathagent.grpo.logger import TIDY_COLUMNS, RunLogger
from mathagent.grpo.loss import clipped_pg_loss, group_advantages, score_completions
from mathagent.grpo.tool_rollout import PythonTool, ToolRollout
from mathagent.grpo.trainer import GRPOTrainer, StepResult
from mathagent.policy import locate_model

__all__ = [
    "CHECKPOINT_FILES",
    "CHECKPOINT_MARKER",
    "CHECKPOINT_NAME",
    "CHECKPOINT_OLD",
    "CHECKPOINT_TMP",
    "DEFAULT_CONFIG",
    "SMOKE_CONFIG",
    "TIDY_COLUMNS",
    "AlgorithmConfig",
    "CheckpointMixin",
    "EvalConfig",
    "GRPOTrainer",
    "ModelConfig",
    "NoCheckpointError",
    "PythonTool",
    "RolloutConfig",
    "RunLogger",
    "SelectorSettings",
    "StepResult",
    "TasksetConfig",
    "ToolRollout",
    "TrainConfig",
    "TrainerConfig",
    "atomic_write_text",
    "checkpoint_step",
    "clipped_pg_loss",
    "group_advantages",
    "last_logged_step",
    "load_config",
    "locate_model",
    "recover_checkpoint",
    "score_completions",
    "train_local_command",
    "train_local_parser",
    "truncate_jsonl",
    "target_reward_runs",
]

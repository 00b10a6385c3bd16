"""Trinity-RFT's names for the numbers a run reports: the one map of tidy column -> tag.

The local trainer (:mod:`mathagent.grpo`) writes its TensorBoard scalars under these tags and
its tidy ``metrics.csv`` under these column names; the reader (:mod:`mathagent.results`)
turns the tags of either kind of run back into the same columns. Trinity-RFT 0.6.0 (with
verl 0.8.0) logs them as follows:

* rollout metrics are the judge's metrics averaged per task, then over the batch
  (``trinity.utils.metrics.aggregate_metrics``, prefix ``rollout``);
* the experience pipeline prefixes operator metrics with ``experience_pipeline/``;
  ``pass_rate_calculator``'s ``selection/valid_ratio`` (share of the step's tasks with
  0 < pass rate < 1) is the effective task ratio;
* eval metrics are ``eval/<taskset name>/<metric>/mean@<repeats>`` (task-level mean@k, then
  the mean over tasks), with ``/mean`` appended when the monitor's ``detailed_stats`` is on;
* ``critic/*``, ``actor/*`` and ``response_length/*`` come from verl's trainer metrics and
  Trinity's PPO policy loss and KL loss.
"""

from __future__ import annotations

import re

#: Tidy column -> the scalar tag of the same quantity.
TAGS: dict[str, str] = {
    # mean over the step's tasks of each task's mean accuracy over its rollouts
    "rollout_accuracy": "rollout/accuracy/mean",
    "effective_task_ratio": "experience_pipeline/selection/valid_ratio",
    "rollout_format_score": "rollout/format_score/mean",
    "finished_task_count": "rollout/finished_task_count",
    # the workflow's own metrics (mathagent.agent.count_tool_use): tool calls and tool errors
    # per agent run, averaged per task, then over the step's tasks
    "rollout_tool_calls": "rollout/tool_calls/mean",
    "rollout_tool_errors": "rollout/tool_errors/mean",
    # trainer side: mean sequence reward of the batch, policy loss and its statistics
    "trainer_reward": "critic/rewards/mean",
    "pg_loss": "actor/pg_loss",
    "kl_loss": "actor/kl_loss",
    "pg_clipfrac": "actor/pg_clipfrac",
    "grad_norm": "actor/grad_norm",
    "entropy": "actor/entropy",
    "response_length": "response_length/mean",
    "truncated_ratio": "response_length/clip_ratio",
    # the local trainer's phase timings, under verl's ``timing_s/`` prefix (Trinity's own
    # phase times are PHASE_TAGS)
    "time_generate_s": "timing_s/generate",
    "time_score_s": "timing_s/judge",
    "time_update_s": "timing_s/update_actor",
    "time_eval_s": "timing_s/eval",
    "time_step_s": "timing_s/step",
}

#: The eval-accuracy tag for one eval taskset and its number of rollouts per task.
EVAL_TAG_FORMAT = "eval/{taskset}/accuracy/mean@{k}"
#: Any eval-accuracy tag (``@k`` and the ``detailed_stats`` suffix optional).
EVAL_TAG = re.compile(r"^eval/(?P<taskset>.+)/accuracy/mean(?:@(?P<k>\d+))?(?P<detail>/mean)?$")

#: Seconds a Trinity-RFT 0.6.0 step spent in each phase: the step-0/eval evaluation, the
#: rollout phase (the explorer's whole step), one agent run on average, the trainer's step
#: (reference log-probs and actor update) and the trainer's side of the weight sync.
PHASE_TAGS: dict[str, str] = {
    "evaluation": "time/eval",
    "rollout phase": "explore/time/sync_interval",
    "one agent run (mean)": "rollout/time/run_execution/mean",
    "training step": "time/train_step",
    "weight sync": "time/sync_weight",
}

#: Column names that tidy tables of earlier versions used, read as today's.
FORMER_COLUMNS: dict[str, str] = {
    "loss": "pg_loss",
    "kl": "kl_loss",
    "clipfrac": "pg_clipfrac",
    "rollout_reward": "trainer_reward",
}


def eval_tag(taskset: str, repeats: int) -> str:
    """The tag under which a run logs its eval accuracy on ``taskset``."""
    return EVAL_TAG_FORMAT.format(taskset=taskset, k=repeats)


def run_tags(columns: list[str], eval_taskset: str, eval_repeats: int) -> dict[str, str]:
    """The tag of each of ``columns`` that has one; the eval accuracy's names its taskset."""
    tags = {column: TAGS[column] for column in columns if column in TAGS}
    if "eval_accuracy" in columns:
        tags["eval_accuracy"] = eval_tag(eval_taskset, eval_repeats)
    return tags


def with_current_names(table):
    """``table`` (a DataFrame) with the columns of :data:`FORMER_COLUMNS` renamed."""
    return table.rename(columns={old: new for old, new in FORMER_COLUMNS.items()
                                 if old in table and new not in table})

"""What ``train`` and the notebook print: the resolved config, changes and settings tables."""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Any

from mathagent.launch.config import ABSENT, EVAL_KEY, TASKSET_KEY, _flat, _selector_config
from mathagent.launch.plan import LaunchPlan


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if callable(value):
        return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', value)}"
    return value


def agent_options(workflow_func: Any) -> dict[str, Any] | None:
    """What the workflow's agent is (``AgentOptions.describe()``: prompt, the sandboxed
    Python tool and its limits, ReAct rounds), or None for a workflow without options."""
    options = getattr(workflow_func, "options", None)
    return options.describe() if options is not None else None


def summarize_config(config: Any) -> dict[str, Any]:
    """The settings of a (checked) Trinity config that matter for this tutorial, as plain data."""
    bi = config.buffer.explorer_input
    tasksets = bi.tasksets or ([bi.taskset] if bi.taskset else [])
    rm = config.explorer.rollout_model

    def taskset(t: Any) -> dict[str, Any]:
        sel = _selector_config(t)
        out = {"name": t.name, "path": t.path, "split": t.split, "repeat_times": t.repeat_times,
               "workflow": t.default_workflow_type,
               "workflow_func": _plain(t.workflow_args.get("workflow_func")),
               "agent": agent_options(t.workflow_args.get("workflow_func")),
               "judge_func": _plain(t.workflow_args.get("judge_func"))}
        if not t.is_eval:
            out["data_selector"] = {"selector_type": sel.selector_type, "seed": sel.seed,
                                    "feature_keys": list(sel.feature_keys),
                                    "kwargs": dict(sel.kwargs)}
        return out

    return {
        "mode": config.mode, "project": config.project, "name": config.name,
        "checkpoint_job_dir": config.checkpoint_job_dir or config.get_checkpoint_job_dir(),
        "model": {k: getattr(config.model, k) for k in (
            "model_path", "max_model_len", "max_prompt_tokens", "max_response_tokens",
            "temperature")},
        "algorithm": {"algorithm_type": config.algorithm.algorithm_type,
                      "repeat_times": config.algorithm.repeat_times,
                      "lr": config.algorithm.optimizer.lr,
                      "advantage_fn": config.algorithm.advantage_fn,
                      "policy_loss_fn": config.algorithm.policy_loss_fn},
        "cluster": {k: getattr(config.cluster, k) for k in (
            "ray_address", "node_num", "gpu_per_node", "explorer_gpu_num", "trainer_gpu_num")},
        "buffer": {"batch_size": config.buffer.batch_size,
                   "train_batch_size": config.buffer.train_batch_size,
                   "total_epochs": config.buffer.total_epochs,
                   "tasksets": [taskset(t) for t in tasksets],
                   "eval_tasksets": [taskset(t) for t in bi.eval_tasksets]},
        "data_processor.experience_pipeline.operators": [
            op.name for op in config.data_processor.experience_pipeline.operators],
        "explorer": {"eval_interval": config.explorer.eval_interval,
                     "runner_per_model": config.explorer.runner_per_model,
                     "max_repeat_times_per_runner": config.explorer.max_repeat_times_per_runner,
                     "max_timeout": config.explorer.max_timeout,
                     "rollout_model": {k: getattr(rm, k) for k in (
                         "model_path", "engine_num", "tensor_parallel_size",
                         "gpu_memory_utilization", "enable_openai_api", "enable_history",
                         "enable_auto_tool_choice", "tool_call_parser", "reasoning_parser",
                         "max_model_len", "max_response_tokens", "enforce_eager",
                         "extra_engine_args")}},
        "synchronizer": {k: _plain(getattr(config.synchronizer, k)) for k in (
            "sync_style", "sync_method", "sync_interval", "sync_timeout")},
        "trainer": {k: getattr(config.trainer, k) for k in (
            "save_interval", "use_dynamic_bsz", "ulysses_sequence_parallel_size",
            "max_token_len_per_gpu")},
        "monitor": {"monitor_type": config.monitor.monitor_type,
                    "cache_dir": config.monitor.cache_dir},
    }


def format_yaml(data: Any) -> str:
    import yaml

    def clean(x: Any) -> Any:
        if isinstance(x, dict):
            return {str(k): clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        return _plain(x)

    return yaml.safe_dump(clean(data), sort_keys=False, width=100)


def format_changes(rows: list[tuple[str, Any, Any]], left: str, right: str) -> str:
    """Aligned ``key: left -> right`` lines."""
    if not rows:
        return "  (none)"
    width = max(len(k) for k, _, _ in rows)
    out = [f"  {'setting':<{width}}  {left} -> {right}"]
    out += [f"  {k:<{width}}  {_plain(a)!r} -> {_plain(b)!r}" for k, a, b in rows]
    return "\n".join(out)


#: What the settings of the two reference configs mean (``settings_table`` rows).
SETTING_NOTES: dict[str, str] = {
    "mode": "both: explorer and trainer on their own GPUs; colocate: one GPU, taking turns",
    "name": "run name; logs and checkpoints go to <checkpoint_root_dir>/<project>/<name>",
    "algorithm.algorithm_type": "multi_step_grpo: every model call of an agent run is one "
                                "experience carrying the run's reward",
    "algorithm.repeat_times": "GRPO group size n: rollouts per task per step",
    "algorithm.optimizer.lr": "learning rate of the policy",
    "model.model_path": "policy to fine-tune (local folder or hub id)",
    "model.max_model_len": "prompt + response tokens the engines accept",
    "model.max_response_tokens": "longest generation per model call",
    "model.temperature": "sampling temperature of rollouts",
    "cluster.node_num": "machines in the Ray cluster",
    "cluster.gpu_per_node": "GPUs per machine",
    "buffer.batch_size": "tasks per explore step (x repeat_times rollouts)",
    "buffer.total_epochs": "passes over the taskset",
    f"{TASKSET_KEY}.path": "training taskset folder (parquet per split)",
    f"{TASKSET_KEY}.data_selector.selector_type": "which tasks each step trains on",
    f"{TASKSET_KEY}.data_selector.feature_keys": "reference pass-rate columns (weak, strong)",
    f"{TASKSET_KEY}.data_selector.kwargs.m": "pseudo-count of one feedback value (= n)",
    f"{TASKSET_KEY}.data_selector.kwargs.lamb": "forgetting rate of the Beta posterior",
    f"{TASKSET_KEY}.data_selector.kwargs.rho": "weight of the reference-interpolated evidence",
    f"{TASKSET_KEY}.data_selector.kwargs.target_reward": "pass rate the selector aims for",
    f"{TASKSET_KEY}.data_selector.kwargs.tau": "0: top-B by score; > 0: softmax sampling",
    f"{TASKSET_KEY}.data_selector.kwargs.do_sample": "Thompson sampling from the posterior",
    f"{EVAL_KEY}.0.path": "held-out eval set (AIME-24 in the reference)",
    "data_processor.experience_pipeline.operators.0.name": "operator computing per-task pass "
                                                           "rates for the selector's feedback",
    "explorer.eval_interval": "evaluate every this many steps (and at step 0)",
    "explorer.runner_per_model": "agent runs in flight per inference engine",
    "explorer.max_timeout": "seconds an agent run may take",
    "explorer.rollout_model.engine_num": "vLLM engines serving rollouts",
    "explorer.rollout_model.tensor_parallel_size": "GPUs per engine",
    "explorer.rollout_model.enable_openai_api": "serve an OpenAI-compatible API (the agent "
                                                "calls the model through it)",
    "explorer.rollout_model.enable_history": "record every call so it becomes an experience",
    "explorer.rollout_model.tool_call_parser": "how vLLM parses tool calls (hermes for Qwen)",
    "explorer.rollout_model.reasoning_parser": "how vLLM splits <think> blocks off",
    "synchronizer.sync_style": "who decides when weights move from trainer to explorer",
    "synchronizer.sync_method": "nccl: GPU-to-GPU broadcast of the new weights",
    "synchronizer.sync_interval": "steps between weight syncs (explorer may run ahead)",
    "trainer.save_interval": "steps between checkpoints",
    "trainer.use_dynamic_bsz": "pack micro-batches by token count",
    "monitor.monitor_type": "where metrics go (TensorBoard event files)",
}


def settings_table(plans: dict[str, LaunchPlan], keys: Sequence[str] | None = None):
    """The plans' values side by side with what each setting means (a DataFrame).

    Columns: ``setting``, ``meaning``, then one per plan label. ``keys`` defaults to
    :data:`SETTING_NOTES`; values are the ones Trinity receives (after tune()'s settings).
    """
    import pandas as pd

    flats = {label: _flat(plan.config) for label, plan in plans.items()}
    rows = []
    for key in keys or SETTING_NOTES:
        values = {label: flat.get(key, ABSENT) for label, flat in flats.items()}
        cells = {label: "" if v is ABSENT else _plain(v) for label, v in values.items()}
        rows.append({"setting": key, "meaning": SETTING_NOTES.get(key, ""), **cells})
    return pd.DataFrame(rows)


def changes_table(rows: list[tuple[str, Any, Any]], left: str, right: str):
    """``(key, a, b)`` rows as a DataFrame with columns ``setting, <left>, <right>``."""
    import pandas as pd

    return pd.DataFrame([{"setting": k, left: "" if a is ABSENT else _plain(a),
                          right: "" if b is ABSENT else _plain(b)} for k, a, b in rows],
                        columns=["setting", left, right])

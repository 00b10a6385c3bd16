"""Trinity-RFT training: configs, preflight, a local Ray head and ``agentscope.tuner.tune()``.

``python -m mathagent train --config configs/config_difficulty.yaml`` does what the reference
launcher (``main.py`` of the AgentScope "data augment" example) does, with checks around it:

1. **Load** the YAML through Trinity-RFT's own loader (``trinity.common.config.load_config``,
   an OmegaConf structured merge), after applying ``KEY=VALUE`` overrides from the command
   line and resolving relative dataset paths against the repository root. An unknown key or
   a value of the wrong type fails here with one line naming the key.
2. **Python-side settings.** The reference builds a ``TunerModelConfig`` and an
   ``AlgorithmConfig`` in Python and ``tune()`` writes them over the YAML. Here they default
   to the reference's values (:data:`REFERENCE_MODEL`, :data:`REFERENCE_ALGORITHM`); a config
   may carry its own in a top-level ``tuner:`` block (removed before Trinity reads the file).
   They are applied with the very function ``tune()`` uses (agentscope 1.0.21:
   ``agentscope.tuner._config._to_trinity_config``), so the overridden values printed are
   exactly the ones training would see.
3. **Preflight**: every problem gets one message naming the setting at fault (GPU count,
   vllm, Ray, model path, tasksets and their feature columns, NaN features, the BOTS ``m``
   against the group size, selector and operator names), then Trinity's full
   ``Config.check_and_update()``.
4. **Launch**: print the resolved config and the difference from the sibling run (random
   vs difficulty-based), apply :mod:`mathagent.compat`'s fixes (here, and through Ray's
   worker setup hook in every worker), then call ``agentscope.tuner.tune()`` with
   :func:`mathagent.agent.run_react_agent` (or, when the config's ``tuner.agent`` block
   turns on the sandboxed Python tool or changes ``max_iters``, the same workflow made by
   ``make_workflow(AgentOptions(...))``) and the run's judge (``tuner.judge`` or
   ``--judge``; :func:`mathagent.judge.gsm8k_judge` by default), carrying the YAML's
   ``explorer.rollout_model`` settings that ``tune()`` would drop.

``--dry-run`` stops before step 4's ``tune()``. It checks everything that does not need the
launch machine's GPUs (``check_and_update()`` included, with a Ray head it starts and stops
itself when none is reachable) and lists what it could not check as requirements of the
launch machine. ``tune()`` itself imports vllm (through Trinity's explorer), which is why
real training cannot start on a CPU machine.

``python -m mathagent ray {start,stop,status}`` and :func:`local_ray_head` manage a local Ray
head. Processes are stopped only by the ids and start times recorded at start (and their
descendants), never by name or folder, so other Ray clusters on the same machine are left alone.

The package, one job per module:

- :mod:`~mathagent.launch.config`: loading a Trinity config, ``KEY=VALUE`` overrides, dotted
  keys, flattening and the difference from the sibling config.
- :mod:`~mathagent.launch.tuner`: the Python-side tuner settings and judge, and the rollout
  settings ``tune()`` would drop, carried into the run.
- :mod:`~mathagent.launch.attention`: verl's attention settings, filled and checked.
- :mod:`~mathagent.launch.plan`: :class:`LaunchPlan` and :func:`load_plan`.
- :mod:`~mathagent.launch.ray_head`: the local Ray head (:class:`RayHead`) and the workers'
  runtime environment.
- :mod:`~mathagent.launch.machine_checks`: preflight checks of GPUs, vllm, versions, the model
  and the Ray cluster's resources.
- :mod:`~mathagent.launch.data_checks`: preflight checks of tasksets, selector and operators.
- :mod:`~mathagent.launch.preflight`: :class:`Preflight`, the verdict every check appends to.
- :mod:`~mathagent.launch.checks`: :func:`preflight` and Trinity's ``check_and_update()``.
- :mod:`~mathagent.launch.report`: what is printed (resolved config, changes, settings tables).
- :mod:`~mathagent.launch.commands`: the ``ray`` and ``train`` commands and the launch itself.
- :mod:`~mathagent.launch.smoke`: the short real run of a one-GPU config (its command,
  environment and run) that notebook 04 shows and, on a GPU machine, starts.
"""

from __future__ import annotations

from mathagent.launch.attention import (
    ATTN_KEY,
    REMOVE_PADDING_KEY,
    check_attention,
    choose_attention,
    flash_attn_available,
)
from mathagent.launch.checks import (
    check_and_update,
    launch_blockers,
    preflight,
    trinity_logs,
)
from mathagent.launch.commands import (
    launch,
    ray_command,
    ray_parser,
    train_command,
    train_parser,
    train_subprocess,
)
from mathagent.launch.config import (
    ABSENT,
    EVAL_KEY,
    TASKSET_KEY,
    ConfigError,
    _flat,
    _get_dotted,
    config_diff,
    counterpart_path,
    load_trinity_config,
    parse_override,
    resolve_relative_paths,
)
from mathagent.launch.data_checks import (
    TRINITY_DEFAULT_M,
    check_selector_and_operators,
    check_tasksets,
)
from mathagent.launch.machine_checks import (
    ENGINE_CPUS,
    HUB_ID,
    TESTED_VERSIONS,
    TRAINER_CPUS_PER_GPU,
    check_colocate_switch,
    check_machine,
    check_model,
    check_ray_resources,
    check_versions,
    hub_status,
    trinity_reservation,
    visible_gpus,
    vllm_importable,
)
from mathagent.launch.plan import (
    LaunchPlan,
    load_plan,
)
from mathagent.launch.preflight import Preflight
from mathagent.launch.ray_head import (
    RayHead,
    _ray_env,
    cluster_resources,
    find_ray,
    local_ray_head,
    ray_for,
    ray_state_file,
    start_ray_head,
    worker_runtime_env,
)
from mathagent.launch.report import (
    SETTING_NOTES,
    agent_options,
    changes_table,
    format_changes,
    format_yaml,
    settings_table,
    summarize_config,
)
from mathagent.launch.smoke import (
    SmokePlan,
    SmokeResult,
    one_gpu_smoke,
    run_smoke,
    smoke_blocker,
)
from mathagent.launch.tuner import (
    AGENT_SETTINGS,
    MODEL_PATH_ENV,
    REFERENCE_ALGORITHM,
    REFERENCE_MODEL,
    TUNER_BLOCK,
    TUNER_ROLLOUT_FIELDS,
    WORKFLOW,
    agent_settings,
    carrying_rollout_settings,
    lost_rollout_settings,
    reference_settings,
    restore_rollout_settings,
    workflow_for,
)

__all__ = [
    # config
    "TASKSET_KEY", "EVAL_KEY", "ConfigError", "parse_override", "resolve_relative_paths",
    "load_trinity_config", "ABSENT", "counterpart_path", "config_diff", "_get_dotted", "_flat",
    # tuner
    "REFERENCE_MODEL", "REFERENCE_ALGORITHM", "MODEL_PATH_ENV", "TUNER_BLOCK", "WORKFLOW",
    "reference_settings", "TUNER_ROLLOUT_FIELDS", "lost_rollout_settings",
    "restore_rollout_settings", "carrying_rollout_settings", "AGENT_SETTINGS", "agent_settings",
    "workflow_for",
    # attention
    "ATTN_KEY", "REMOVE_PADDING_KEY", "flash_attn_available", "choose_attention",
    "check_attention",
    # plan
    "LaunchPlan", "load_plan",
    # ray_head
    "find_ray", "RayHead", "cluster_resources", "start_ray_head", "local_ray_head", "ray_for",
    "ray_state_file", "worker_runtime_env", "_ray_env",
    # machine_checks
    "visible_gpus", "vllm_importable", "HUB_ID", "hub_status", "check_model", "check_machine",
    "TESTED_VERSIONS", "check_versions", "check_colocate_switch", "TRAINER_CPUS_PER_GPU",
    "ENGINE_CPUS", "trinity_reservation", "check_ray_resources",
    # data_checks
    "TRINITY_DEFAULT_M", "check_selector_and_operators", "check_tasksets",
    # preflight
    "Preflight",
    # checks
    "trinity_logs", "check_and_update", "preflight", "launch_blockers",
    # report
    "summarize_config", "format_yaml", "format_changes", "SETTING_NOTES", "settings_table",
    "changes_table", "agent_options",
    # commands
    "ray_parser", "ray_command", "train_subprocess", "train_parser", "train_command", "launch",
    # smoke
    "SmokePlan", "SmokeResult", "one_gpu_smoke", "run_smoke", "smoke_blocker",
]

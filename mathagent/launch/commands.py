"""The ``ray`` and ``train`` commands: parsers, handlers and the launch through ``tune()``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mathagent import paths
from mathagent.launch.checks import preflight
from mathagent.launch.config import ConfigError, _selector_config, config_diff, counterpart_path
from mathagent.launch.plan import LaunchPlan, load_plan
from mathagent.launch.preflight import Preflight
from mathagent.launch.ray_head import RayHead, ray_state_file, start_ray_head, worker_runtime_env
from mathagent.launch.report import _plain, format_changes, format_yaml, summarize_config
from mathagent.launch.tuner import TUNER_BLOCK, carrying_rollout_settings


def ray_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["start", "stop", "status"],
                        help="start a local head, stop the head started here, or report it")
    parser.add_argument("--num-cpus", type=int, default=None,
                        help="CPUs the head offers to tasks (default: all of this machine's; "
                             "Trinity reserves 3 per trainer GPU and 1 per vLLM engine)")
    parser.add_argument("--num-gpus", type=int, default=None,
                        help="GPUs the head offers (default: all it detects)")
    parser.add_argument("--port", type=int, default=None, help="GCS port (default: a free port)")
    parser.add_argument("--temp-dir", default=None,
                        help="Ray session root, a folder for this head alone (default: a "
                             "private folder under /tmp, removed on stop); not /tmp/ray, "
                             "which every other Ray cluster on the machine uses. Pass "
                             "cluster.ray_address=<the printed address> to `train`")
    parser.add_argument("--object-store-memory", type=int, default=None,
                        help="object store size in bytes (default: Ray's choice)")
    parser.add_argument("--state-file", type=Path, default=None,
                        help="where the head's address and the ids and start times of its "
                             "processes are recorded; `stop` signals only those processes "
                             "and their descendants (default runs/ray/head.json)")


def ray_command(args: argparse.Namespace) -> int:
    """``ray start|stop|status`` for the head recorded in the state file.

    A record whose processes have all exited, or whose pids now belong to other processes
    (different start time), is stale: it is reported and removed and nothing is signalled.
    """
    state = args.state_file or ray_state_file()
    recorded = None
    if state.is_file():
        try:
            recorded = RayHead(**json.loads(state.read_text()))
        except (ValueError, TypeError) as exc:
            print(f"error: {state}: not a head record written by `python -m mathagent ray "
                  f"start` ({type(exc).__name__}: {exc}); remove the file if no head started "
                  "here is running", file=sys.stderr)
            return 2
        if not recorded.processes():
            recorded.remove_temp_dir()
            state.unlink(missing_ok=True)
            print(f"{state}: the head recorded there ({recorded.address or 'no address'}) is "
                  "not running (its processes have exited or their ids now belong to other "
                  "processes); removed the stale record, stopped nothing", file=sys.stderr)
            if args.action == "stop":
                return 0
            if args.action == "status":
                return 1
            recorded = None
    if args.action == "start":
        if recorded is not None:
            print(f"a head started here is already running at {recorded.address} "
                  f"(stop it with `python -m mathagent ray stop --state-file {state}`)",
                  file=sys.stderr)
            return 1
        from tqdm.auto import tqdm

        try:
            with tqdm(total=1, desc="starting Ray head", file=sys.stderr) as bar:
                head = start_ray_head(num_cpus=args.num_cpus, num_gpus=args.num_gpus,
                                      port=args.port, temp_dir=args.temp_dir,
                                      object_store_memory=args.object_store_memory)
                bar.update()
        except RuntimeError as exc:  # the processes of the failed start are stopped already
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            print("error: " + (lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"),
                  file=sys.stderr)
            return 1
        state.parent.mkdir(parents=True, exist_ok=True)
        state.write_text(json.dumps(head.to_json(), indent=2) + "\n")
        print(f"Ray head running at {head.address} ({len(head.started)} processes recorded "
              f"in {state}, session root {head.temp_dir})")
        print(f"use it with: python -m mathagent train --config ... "
              f"cluster.ray_address={head.address}")
        return 0
    if recorded is None:
        print(f"no head recorded in {state}: nothing started with `python -m mathagent ray "
              "start` is running", file=sys.stderr)
        return 1
    if args.action == "stop":
        stopped = recorded.stop()
        left = recorded.processes()
        print(f"stopped the Ray head at {recorded.address}: {len(stopped)} processes "
              f"({', '.join(map(str, stopped)) or 'none were running'})")
        if left:
            print(f"still running: {left} (the record {state} is kept; run `ray stop` again)",
                  file=sys.stderr)
            return 1
        state.unlink(missing_ok=True)
        return 0
    pids = recorded.processes()
    try:
        resources = recorded.resources()
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"error: the head recorded in {state} runs ({len(pids)} processes) but does "
              f"not answer: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    print(f"Ray head at {recorded.address}: {len(pids)} processes started by `ray start` "
          f"(session root {recorded.temp_dir})")
    for key in sorted(resources):
        if not key.startswith("node:"):
            print(f"  {key}: {resources[key]:g}")
    return 0


def train_subprocess(config: str | Path, overrides: Sequence[str] = (),
                     log: str | Path | None = None, dry_run: bool = False) -> int:
    """Run ``python -m mathagent train`` in its own process (GPU training stays out of a
    notebook kernel); output goes to ``log`` (default: this process's stdout)."""
    cmd = [sys.executable, "-m", "mathagent", "train", "--config", str(config), *overrides]
    if dry_run:
        cmd.append("--dry-run")
    if log is None:
        return subprocess.run(cmd, cwd=paths.REPO_ROOT).returncode
    with open(log, "w") as fh:
        return subprocess.run(cmd, cwd=paths.REPO_ROOT, stdout=fh,
                              stderr=subprocess.STDOUT).returncode


#: The first word of the lines that mark ``train``'s own start-up (after it, the time in the
#: format of Trinity-RFT's log lines: local time, month-day), so that a run's log splits the
#: time before Trinity's actors exist (``mathagent.experiment.layout`` reads them).
LAUNCH_MARK = "launch"


def mark(what: str, started: float) -> None:
    """Print one start-up mark of ``train``: the time, ``what`` and the seconds since
    ``started`` (when ``train`` had its arguments; the interpreter's start and the command
    line's imports come before)."""
    now = time.time()
    print(f"{LAUNCH_MARK} {time.strftime('%m-%d %H:%M:%S', time.localtime(now))} {what} "
          f"({now - started:.1f} s after `train` read its arguments)", flush=True)


def train_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=paths.CONFIGS_DIR / "config_difficulty.yaml",
                        help="Trinity-RFT YAML (default configs/config_difficulty.yaml)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="override settings, e.g. buffer.batch_size=8, "
                             "buffer.explorer_input.eval_tasksets.0.path=/data/aime24, "
                             "tuner.model.model_path=/models/qwen3")
    parser.add_argument("--dry-run", action="store_true",
                        help="check config, data and Trinity's check_and_update() without GPUs; "
                             "list what the launch machine must provide; do not train")
    parser.add_argument("--ray-address", default=None,
                        help="Ray cluster to use (default: cluster.ray_address, else the head "
                             "recorded by `python -m mathagent ray start`)")
    parser.add_argument("--compare", default=None,
                        help="config to diff against (default: the sibling random/difficulty "
                             "config; 'none' to skip)")
    parser.add_argument("--full", action="store_true",
                        help="print every resolved setting instead of the summary")
    parser.add_argument("--judge", default=None,
                        help="training judge: gsm8k_judge (upstream, strict \\boxed{}), "
                             "lenient_judge (also the last number; gives the bundled 135M "
                             "model a signal) or a dotted path (default: the config's "
                             "tuner.judge, else gsm8k_judge)")


def _default_ray_address(args: argparse.Namespace) -> str | None:
    if args.ray_address:
        return args.ray_address
    state = ray_state_file()
    if state.is_file():
        with contextlib.suppress(Exception):
            return json.loads(state.read_text())["address"]
    return None


def train_command(args: argparse.Namespace) -> int:
    """Load, preflight and (without ``--dry-run``) launch one Trinity-RFT run.

    A ``train-local`` config (top-level ``taskset`` with ``rollout`` or ``selector`` and no
    Trinity-RFT key) is refused first with one line naming the right command: Trinity's
    loader would otherwise report its first unknown key, which does not say what is wrong.
    """
    started = time.time()
    import yaml

    trinity_keys = {"mode", "project", "group", "name", "checkpoint_root_dir",
                    "checkpoint_job_dir", "ray_namespace", "continue_from_checkpoint",
                    "ignore_validator_suggestions", "data_processor", "cluster", "buffer",
                    "explorer", "monitor", "synchronizer", "service", "log", "stages",
                    TUNER_BLOCK}
    top: Any = None
    with contextlib.suppress(OSError, yaml.YAMLError):  # load_plan reports those
        top = yaml.safe_load(Path(args.config).read_text())
    if isinstance(top, dict) and "taskset" in top and {"rollout", "selector"} & set(top) \
            and not trinity_keys & set(top):
        sections = ", ".join(f"`{k}`" for k in ("taskset", "rollout", "selector") if k in top)
        print(f"error: {args.config}: a `train-local` config (top-level {sections}), not a "
              f"Trinity-RFT one; run it with `python -m mathagent train-local --config "
              f"{args.config}`", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="mathagent-train-") as work:
        try:
            plan = load_plan(args.config, args.overrides, work_dir=Path(work) / "run",
                             judge=args.judge)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if not args.dry_run:
            mark("config loaded", started)
        print(f"Config {plan.config_path} (Trinity project {plan.config.project!r}, "
              f"run {plan.config.name!r})")
        print("\nPython-side settings (tune() writes them over the YAML):")
        print(format_yaml(plan.settings).rstrip())
        print("\nValues they change:")
        print(format_changes(plan.overridden, "YAML", "used"))
        print(f"\nJudge: {plan.judge} ({plan.judge_func.__module__}.{plan.judge_func.__name__})")
        if plan.carried:
            print("\nRollout settings of the YAML that tune() would drop, carried into the run:")
            for key, value in plan.carried.items():
                print(f"  explorer.rollout_model.{key}: {value!r}")

        print("\nPreflight" + (" (dry run)" if args.dry_run else "") + ":")
        result = preflight(plan, dry_run=args.dry_run,
                           ray_address=_default_ray_address(args))
        print(result.report())
        if not result.ok:
            print(f"\n{len(result.problems)} problem(s): fix them and run again.", file=sys.stderr)
            return 1
        if not args.dry_run:
            mark("preflight passed", started)

        print("\nResolved config (after Trinity's check_and_update()):")
        if args.full:
            for key, value in result.checked_config.flatten().items():
                print(f"  {key}: {_plain(value)!r}")
        else:
            print(format_yaml(summarize_config(result.checked_config)).rstrip())

        other = None if args.compare == "none" else (
            Path(args.compare) if args.compare else counterpart_path(plan.config_path))
        if other is not None:
            try:
                plan_b = load_plan(other, args.overrides, work_dir=Path(work) / "compare",
                                   judge=args.judge)
            except ConfigError as exc:
                print(f"\n(cannot compare with {other}: {exc})")
            else:
                print(f"\nDifference from {other.name}:")
                print(format_changes(config_diff(plan, plan_b), plan.config_path.name,
                                     other.name))

        if args.dry_run:
            print("\nDry run: config and data are sound; training not started.")
            return 0
        return launch(plan, result, started)


def run_record(plan: LaunchPlan, checked: Preflight, trinity_yaml: Path, fixes) -> dict:
    """What ``params.json`` records of a launched run: its config and the YAML handed to
    Trinity, selector and seed, judge, held-out taskset, job folder, settings, the rollout
    settings carried, each compatibility fix's status, the levers set
    (:func:`mathagent.compat.levers_set`) and torch's allocator setting
    (``PYTORCH_CUDA_ALLOC_CONF``, which every process of the run inherits; None where unset)."""
    from mathagent.compat import levers_set

    selector = _selector_config(plan.config.buffer.explorer_input.taskset)
    evals = plan.config.buffer.explorer_input.eval_tasksets
    return {"kind": "train", "config": str(plan.config_path),
            "trinity_config": str(trinity_yaml),
            "selector": selector.selector_type, "seed": selector.seed,
            "judge": plan.judge,
            "eval_taskset": evals[0].name if evals else None,
            "checkpoint_job_dir": str(checked.checked_config.checkpoint_job_dir),
            "settings": plan.settings, "carried_rollout_settings": plan.carried,
            "compat_fixes": {f.name: f.status for f in fixes}, "levers": levers_set(),
            "torch_allocator": os.environ.get("PYTORCH_CUDA_ALLOC_CONF")}


def launch(plan: LaunchPlan, checked: Preflight, started: float) -> int:
    """Call ``agentscope.tuner.tune()`` (GPU machine); record the run for the results reader.

    Before ``tune()``: the compatibility fixes are applied here, and Ray is joined with a
    ``runtime_env`` that applies them in every worker (:func:`worker_runtime_env`); Trinity's
    own ``ray.init`` then finds Ray initialised and keeps it. During ``tune()`` the YAML's
    rollout settings that it would drop are carried (:func:`carrying_rollout_settings`).
    """
    import ray
    import yaml
    from agentscope.tuner import tune

    from mathagent.compat import IPC_SYNC_ENV, apply_all, ipc_sync_misfit

    misfit = ipc_sync_misfit(checked.checked_config)
    if misfit and os.environ.get(IPC_SYNC_ENV) != "0":
        # the driver decides for every worker: the variable travels in the runtime_env
        os.environ[IPC_SYNC_ENV] = "0"
        print(f"\ntrinity-ipc-sync left out for this run: {misfit}")
    fixes = apply_all()
    print("\nCompatibility fixes:")
    for fix in fixes:
        print(f"  {fix.line()}")
    failed = [f for f in fixes if f.status == "failed"]
    if failed:
        print(f"\n{len(failed)} compatibility fix(es) could not be applied; the run would stop "
              "or hang without them: " + "; ".join(f.line() for f in failed), file=sys.stderr)
        return 1
    run_dir = paths.new_run_dir("train")
    trinity_yaml = run_dir / "trinity_config.yaml"
    raw = yaml.safe_load(plan.trinity_yaml.read_text())
    # the cluster the preflight found (it may differ from the YAML's "auto")
    raw.setdefault("cluster", {})["ray_address"] = checked.checked_config.cluster.ray_address
    trinity_yaml.write_text(yaml.safe_dump(raw, sort_keys=False))
    job_dir = Path(checked.checked_config.checkpoint_job_dir)
    params = run_record(plan, checked, trinity_yaml, fixes)
    for folder in (run_dir, job_dir):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "params.json").write_text(json.dumps(params, indent=2, default=str) + "\n")
    print(f"\nLaunching: TensorBoard logs under {job_dir / 'monitor' / 'tensorboard'}; "
          f"read them with `python -m mathagent plot {job_dir}`")
    ray.init(address=checked.checked_config.cluster.ray_address,
             namespace=checked.checked_config.ray_namespace,
             runtime_env=worker_runtime_env(checked.checked_config), ignore_reinit_error=True)
    mark("Ray joined, tune() called", started)
    with carrying_rollout_settings(plan.carried):
        tune(workflow_func=plan.workflow_func, judge_func=plan.judge_func,
             config_path=str(trinity_yaml), model=plan.model, algorithm=plan.algorithm)
    return 0

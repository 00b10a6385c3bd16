"""The ``train-local`` command: read the config file and the flags, then run the trainer; and
the runs notebook 04 makes with it on a GPU (:func:`gpu_runs`).

Every flag that sets a value of the config (``--selector``, ``--steps``, ``--device``, ...)
is derived from its field in :mod:`mathagent.grpo.config`; a flag left out keeps the file's
value.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from mathagent import paths
from mathagent.grpo.config import DEFAULT_CONFIG, SMOKE_CONFIG, TrainConfig, load_config
from mathagent.grpo.trainer import GRPOTrainer
from mathagent.settings import add_flags, flag_overrides


def train_local_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=None,
                        help=f"YAML config (default {DEFAULT_CONFIG.name}; "
                             f"{SMOKE_CONFIG.name} with --smoke)")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny CPU settings that finish in about a minute")
    parser.add_argument("--out", type=Path, default=None,
                        help="run folder (default runs/train_local/<time>-<selector>-s<seed>)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --out from its last checkpoint")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_flags(parser.add_argument_group("settings", "each replaces the config file's value"),
              TrainConfig, show_defaults=False)


def train_local_command(args: argparse.Namespace) -> int:
    config = args.config or (SMOKE_CONFIG if args.smoke else DEFAULT_CONFIG)
    overrides = flag_overrides(args, TrainConfig)
    try:
        cfg = load_config(config, overrides)
    except (OSError, ValueError) as exc:
        print(f"train-local: {exc}", file=sys.stderr)
        return 2
    if cfg.trainer.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print("train-local: --device cuda asked for, but torch sees no GPU",
                  file=sys.stderr)
            return 2
    if args.resume and args.out is None:
        print("train-local: --resume needs --out RUN_DIR", file=sys.stderr)
        return 2
    if not args.resume and args.out is not None and (args.out / "metrics.csv").exists():
        print(f"train-local: {args.out} already holds a run; pass --resume to continue it "
              "or choose another --out", file=sys.stderr)
        return 2
    target = "" if cfg.selector.target_reward is None else f"-t{cfg.selector.target_reward:g}"
    run_dir = args.out or paths.new_run_dir(
        paths.TRAIN_LOCAL_RUNS, f"{time.strftime('%Y%m%d-%H%M%S')}-{cfg.selector.name}"
                                f"{target}-s{cfg.trainer.seed}")
    try:
        trainer = GRPOTrainer(cfg, run_dir, resume=args.resume)
    except (OSError, ValueError) as exc:  # taskset, selector, model or checkpoint problems
        print(f"train-local: {exc}", file=sys.stderr)
        return 2
    try:
        rows = trainer.train(progress=not args.no_progress)
    # OSError: e.g. the disk filled up while writing a checkpoint; ValueError: e.g. a chat
    # template that rewrites a reply once a tool message follows it
    except (OSError, ValueError) as exc:
        print(f"train-local: {exc}; the last complete checkpoint stays in {run_dir}, "
              "resume with --resume", file=sys.stderr)
        return 1
    last = rows[-1] if rows else {}
    print(f"run folder: {run_dir}")
    if last:
        print(f"step {last['step']}: rollout_accuracy {last.get('rollout_accuracy')}, "
              f"effective_task_ratio {last.get('effective_task_ratio')}")
    return 0


def _one_run(selector: str, seed: int, steps: int, device: str, config: str | Path | None,
             progress: bool, stamp: str, target: float | None = None) -> Path:
    """One ``train-local`` run in its own folder under ``runs/train_local``; a run that fails
    raises ``RuntimeError`` (``train-local`` has printed why) and leaves no empty folder."""
    aim = "" if target is None else f"-t{target:g}"
    out = paths.new_run_dir(paths.TRAIN_LOCAL_RUNS, f"{stamp}-{selector}{aim}-s{seed}")
    parser = argparse.ArgumentParser()
    train_local_parser(parser)
    argv = ["--selector", selector, "--seed", str(seed), "--steps", str(steps),
            "--device", device, "--out", str(out)]
    argv += [] if target is None else ["--target-reward", str(target)]
    argv += ["--config", str(config)] if config is not None else []
    argv += [] if progress else ["--no-progress"]
    if train_local_command(parser.parse_args(argv)) != 0:
        if not any(out.iterdir()):   # refused before it began: no empty run folder left
            out.rmdir()
        what = "" if target is None else f" with target_reward {target:g}"
        raise RuntimeError(f"train-local{what} failed")
    return out


def target_reward_runs(targets: tuple[float, ...] | list[float], *, selector: str, seed: int,
                       steps: int, device: str, config: str | Path | None = None,
                       progress: bool = False) -> list[Path]:
    """One ``train-local`` run per value of the knob ``selector.target_reward`` (the pass rate
    ``difficulty_based`` or ``bots`` aims for), the rest of the settings shared: the
    comparison notebook 04 makes on a GPU. Each run gets its own folder
    ``runs/train_local/<time>-<selector>-t<target>-s<seed>``; a run that fails raises
    ``RuntimeError`` naming its target (``train-local`` has printed why)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return [_one_run(selector, seed, steps, device, config, progress, stamp, target)
            for target in targets]


@dataclass
class GpuRuns:
    """The ``train-local`` runs notebook 04 makes on a GPU, read side by side (``overview``),
    or, where nothing ran, why (``skipped``)."""

    runs: list[Path]
    overview: pd.DataFrame | None = None
    skipped: str | None = None


def gpu_runs(selector: str, targets: tuple[float, ...] | list[float], *, seed: int,
             steps: int, device: str | None = None, config: str | Path | None = None,
             progress: bool = False) -> GpuRuns:
    """Notebook 04's runs on one GPU: ``selector`` trained once per pass rate in ``targets``
    when it aims at one (``difficulty_based``, ``bots``: :func:`target_reward_runs`), else once
    with the config's settings; the runs read side by side by
    :func:`mathagent.run_facts.runs_overview`. ``device`` None takes the GPU when torch sees
    one; without one nothing runs and ``skipped`` gives the command to run on a GPU."""
    from mathagent.run_facts import runs_overview
    from mathagent.selectors import uses_feedback

    if device is None:
        import torch

        if not torch.cuda.is_available():
            return GpuRuns([], skipped=(
                "no CUDA device here; on one GPU run `python -m mathagent train-local "
                f"--selector {selector} --device cuda --steps {steps}` (results/grpo_h200/ "
                "holds such runs, with their step times)"))
        device = "cuda"
    if uses_feedback(selector):
        runs = target_reward_runs(targets, selector=selector, seed=seed, steps=steps,
                                  device=device, config=config, progress=progress)
    else:
        runs = [_one_run(selector, seed, steps, device, config, progress,
                         time.strftime("%Y%m%d-%H%M%S"))]
    return GpuRuns(runs, runs_overview(runs, device, paths.runs_dir()))

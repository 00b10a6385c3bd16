"""The ``train-local`` command: read the config file and the flags, then run the trainer.

Every flag that sets a value of the config (``--selector``, ``--steps``, ``--device``, ...)
is derived from its field in :mod:`mathagent.grpo.config`; a flag left out keeps the file's
value.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

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


def target_reward_runs(targets: tuple[float, ...] | list[float], *, selector: str, seed: int,
                       steps: int, device: str, config: str | Path | None = None,
                       progress: bool = False) -> list[Path]:
    """One ``train-local`` run per value of the knob ``selector.target_reward`` (the pass rate
    ``difficulty_based`` or ``bots`` aims for), the rest of the settings shared: the
    comparison notebook 04 makes on a GPU. Each run gets its own folder
    ``runs/train_local/<time>-<selector>-t<target>-s<seed>``; a run that fails raises
    ``RuntimeError`` naming its target (``train-local`` has printed why)."""
    runs = []
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for target in targets:
        out = paths.new_run_dir(paths.TRAIN_LOCAL_RUNS, f"{stamp}-{selector}-t{target:g}-s{seed}")
        parser = argparse.ArgumentParser()
        train_local_parser(parser)
        argv = ["--selector", selector, "--target-reward", str(target), "--seed", str(seed),
                "--steps", str(steps), "--device", device, "--out", str(out)]
        argv += ["--config", str(config)] if config is not None else []
        argv += [] if progress else ["--no-progress"]
        if train_local_command(parser.parse_args(argv)) != 0:
            if not any(out.iterdir()):   # refused before it began: no empty run folder left
                out.rmdir()
            raise RuntimeError(f"train-local with target_reward {target:g} failed")
        runs.append(out)
    return runs

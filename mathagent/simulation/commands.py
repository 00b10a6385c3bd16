"""The ``simulate`` command: its flags (settings derived from SimConfig) and the run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from mathagent.settings import add_flags, flag_overrides
from mathagent.simulation.config import SimConfig, smoke_config
from mathagent.simulation.report import write_sweep
from mathagent.simulation.specs import check_specs, default_specs, specs_table
from mathagent.simulation.sweep import run_sweep


def simulate_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--smoke", action="store_true",
                        help="small world (3,000 tasks, 60 steps, 3 seeds) for a quick look")
    add_flags(parser, SimConfig)  # --seeds, --seed, --steps, --tasks, --batch-size, ...
    parser.add_argument("--selectors", nargs="+", metavar="LABEL",
                        help="run only these sweep entries (default: all; see --list)")
    parser.add_argument("--list", action="store_true", help="list the sweep entries and exit")
    parser.add_argument("--workers", type=int, default=None,
                        help="processes running selectors side by side (default: CPU count)")
    parser.add_argument("--out", type=Path, help="run folder (default runs/simulate/<time>)")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing, non-empty --out folder")
    parser.add_argument("--no-figures", action="store_true", help="write tables only")


def simulate_command(args: argparse.Namespace) -> int:
    from mathagent.outputs import OutputError, check_output, fresh_run_dir, has_content

    # Flags given on the command line; the rest keep SimConfig's (or the smoke world's) values.
    overrides = flag_overrides(args, SimConfig)
    try:
        config = smoke_config(**overrides) if args.smoke else SimConfig(**overrides)
        config.validate()
        specs = default_specs(config.n_rollouts)
        if args.list:
            print(specs_table(specs).to_string(index=False))
            return 0
        if args.selectors:
            known = {s.label: s for s in specs}
            unknown = [lab for lab in args.selectors if lab not in known]
            if unknown:
                raise ValueError(f"unknown sweep entries {unknown}; choose from {list(known)}")
            specs = [known[lab] for lab in args.selectors]
        check_specs(specs, config)
        if args.out is not None:  # before the sweep: an existing run is kept unless --force
            check_output(args.out, args.force)
    except ValueError as exc:  # OutputError is a ValueError
        print(f"simulate: {exc}", file=sys.stderr)
        return 2
    out = args.out or fresh_run_dir("simulate")
    replaced = args.out is not None and has_content(out)
    result = run_sweep(config, specs, workers=args.workers)
    try:
        files = write_sweep(result, out, figures=not args.no_figures,
                            baseline="random" if "random" in {s.label for s in specs}
                            else specs[0].label, force=args.force or args.out is None)
    except OutputError as exc:
        print(f"simulate: {exc}", file=sys.stderr)
        return 2
    summary = pd.read_csv(files["summary"])
    cols = [c for c in ("selector", "etr_mean", "rollout_accuracy_mean", "eval_final_mean",
                        "ttb_mean", "ttb_reached", "bsf_mean") if c in summary]
    print(summary[cols].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(f"\n{len(specs)} selectors x {config.n_seeds} seeds x {config.steps} steps in "
          f"{result.seconds:.1f} s; tables and figures in {out}"
          + (" (replaced its previous contents: --force)" if replaced else ""))
    return 0

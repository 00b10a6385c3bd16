"""``python -m mathagent plot RUN_DIR...``: read runs and draw the results figures."""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from mathagent import paths
from mathagent.results.figures import draw
from mathagent.results.runs import CutShortWarning, RunError, eval_label, load_runs


def plot_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR",
                        help="run folders (Trinity checkpoint job dirs, train-local or "
                             "simulate outputs), folders of runs, or tidy CSV files")
    parser.add_argument("--out", type=Path, default=None,
                        help="where to write results.csv, figures and metrics "
                             f"(default {paths.runs_dir() / 'plots'}/<timestamp>)")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing, non-empty --out folder")
    parser.add_argument("--eval-taskset", default=None,
                        help="eval taskset to plot when a run logged several")
    parser.add_argument("--baseline", default="random",
                        help="selector TTB and BSF are measured against (default random)")
    parser.add_argument("--smooth", type=int, default=5,
                        help="moving-average window of the rollout curves (default 5)")


def _inside(path: Path, folder: Path) -> bool:
    path, folder = path.resolve(), folder.resolve()
    return path == folder or folder in path.parents


def plot_command(args: argparse.Namespace) -> int:
    import matplotlib

    from mathagent.outputs import OutputError, check_output, fresh_run_dir, has_content

    matplotlib.use("Agg")
    try:
        if args.out is not None:
            inputs = [r for r in args.runs if _inside(r, args.out)]
            if inputs:  # replacing --out would delete the runs being read
                raise OutputError(f"{args.out}: holds the input {inputs[0]}; choose an --out "
                                  "outside the run folders")
            check_output(args.out, args.force)  # before reading: fail fast
        with warnings.catch_warnings(record=True) as cut:
            warnings.simplefilter("always", CutShortWarning)
            table = load_runs(args.runs, eval_taskset=args.eval_taskset)
        for w in cut:
            if issubclass(w.category, CutShortWarning):
                print(f"warning: {w.message}", file=sys.stderr)
            else:
                warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    except (RunError, OutputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out_dir = args.out or fresh_run_dir("plots")
    replaced = args.out is not None and has_content(out_dir)
    try:
        drawn = draw(table, out_dir, baseline=args.baseline, eval_name=eval_label(table),
                     smooth=args.smooth, force=args.force or args.out is None)
    except OutputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    counts = table.groupby("selector")["seed"].nunique()
    print(f"read {table['run'].nunique()} run(s): "
          + ", ".join(f"{s} ({n} seed{'s' if n > 1 else ''})" for s, n in counts.items()))
    if drawn["summary"] is not None:
        cols = ["selector", "n_seeds", "etr_mean", "rollout_accuracy_mean", "eval_best_mean",
                "ttb_mean", "bsf_mean"]
        print(drawn["summary"][cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    else:
        print(f"no TTB/BSF: {drawn.get('summary_error')}")
    for name, file in drawn["files"].items():
        print(f"{name}: {file}")
    if replaced:
        print(f"replaced the previous contents of {out_dir} (--force)")
    return 0

"""``python -m mathagent report RESULTS_DIR [--check]``: write a results folder's README.md."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mathagent.report.page import StaleReport, write_report
from mathagent.report.spec import ReportError


def report_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results_dir", type=Path, metavar="RESULTS_DIR",
                        help="a results folder with an experiment.yaml and its run folders")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if the committed README.md (or the project "
                             "README's answer block of this folder) differs")
    parser.add_argument("--force", action="store_true",
                        help="replace a README.md that `report` did not write")


def report_command(args: argparse.Namespace) -> int:
    import matplotlib

    matplotlib.use("Agg")
    try:
        page = write_report(args.results_dir, check=args.check, force=args.force)
    except StaleReport as exc:
        print(exc, file=sys.stderr)
        return 1
    except (ReportError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{page} is up to date" if args.check else f"wrote {page}")
    return 0

"""The ``prepare-data``, ``prepare-aime`` and ``generate-arithmetic`` commands.

Each command's settings are its options dataclass (:class:`GuruOptions`,
:class:`AimeOptions`, :class:`ArithmeticOptions`); their flags are derived from the fields.
A failure is one ``error:`` line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from mathagent import paths
from mathagent.outputs import OutputError, one_line
from mathagent.settings import SettingsError, add_flags, from_flags
from mathagent.tasks.aime import AIME_REPO, AimeOptions, prepare_aime
from mathagent.tasks.arithmetic import ArithmeticOptions, level_set, write_arithmetic
from mathagent.tasks.guru import GuruOptions, prepare_guru
from mathagent.tasks.hub import HubUnavailable
from mathagent.tasks.report import format_report
from mathagent.tasks.schema import TasksetError


def _source_flags(parser: argparse.ArgumentParser, local_file: str) -> None:
    """``--input`` (a local file, described by ``local_file``), else the hub: ``--hub-timeout``."""
    parser.add_argument("--input", type=Path, metavar="PATH",
                        help=f"{local_file}; default: download from the hub")
    parser.add_argument("--hub-timeout", type=float, default=10.0, metavar="S",
                        help="seconds to wait for the hub (default: %(default)s)")


def prepare_data_parser(parser: argparse.ArgumentParser) -> None:
    _source_flags(parser, "local copy of guru's train/math__combined_54.4k.parquet (or a jsonl "
                          "in the same raw schema)")
    parser.add_argument("--out", type=Path, default=paths.GURU_DIR, metavar="DIR",
                        help="taskset directory to write (default: %(default)s)")
    add_flags(parser, GuruOptions)
    parser.add_argument("--force", action="store_true",
                        help="replace the train/validation splits of an existing taskset in "
                             "--out (a test split there is kept)")


def _fail(exc: Exception | str) -> int:
    print("error: " + " ".join(str(exc).splitlines()), file=sys.stderr)
    return 2


def _arrow_failure(input_path: Any, exc: Exception) -> str:
    """One line for an Arrow error the checks above did not foresee (never a traceback)."""
    where = input_path if input_path is not None else "the downloaded input"
    return f"{where}: cannot convert ({type(exc).__name__}: {one_line(exc)})"


def _prepare(args: argparse.Namespace, options_type: type, convert: Callable[[Any], Any],
             written: Path) -> int:
    """A prepare command: ``convert`` the input with the options read from the flags, then
    print its report and what it wrote; or one error line."""
    try:
        report = convert(from_flags(options_type, args))
    except (TasksetError, HubUnavailable, OutputError, SettingsError) as exc:
        return _fail(exc)
    except pa.ArrowException as exc:
        return _fail(_arrow_failure(args.input, exc))
    print(format_report(report))
    print(f"wrote {written}")
    return 0


def prepare_data_command(args: argparse.Namespace) -> int:
    return _prepare(args, GuruOptions, lambda options: prepare_guru(
        args.input, args.out, options, hub_timeout=args.hub_timeout, progress=True,
        force=args.force), written=args.out)


def prepare_aime_parser(parser: argparse.ArgumentParser) -> None:
    _source_flags(parser, "local jsonl/parquet/csv with problem and answer columns")
    parser.add_argument("--out", type=Path, default=paths.AIME24_DIR, metavar="DIR",
                        help="taskset directory; the split is test (default: %(default)s)")
    # the column settings' help says what their unset default does
    add_flags(parser, AimeOptions, show_defaults=False)
    parser.add_argument("--hub-repo", default=AIME_REPO,
                        help="hub dataset repo to download (default: %(default)s)")
    parser.add_argument("--force", action="store_true",
                        help="replace the test split of an existing taskset in --out (other "
                             "splits there are kept)")


def prepare_aime_command(args: argparse.Namespace) -> int:
    return _prepare(args, AimeOptions, lambda options: prepare_aime(
        args.input, args.out, options, hub_repo=args.hub_repo, hub_timeout=args.hub_timeout,
        force=args.force), written=args.out / "test.parquet")


def generate_arithmetic_parser(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Generate a bundled arithmetic taskset: --levels smollm2 "
                          "(data/arithmetic, the default) or qwen (data/arithmetic_qwen).")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help=f"taskset directory (default: the level set's: "
                             f"{paths.ARITHMETIC_DIR} for smollm2, {paths.ARITHMETIC_QWEN_DIR} "
                             "for qwen)")
    # each setting's help names its default (the level set's)
    add_flags(parser, ArithmeticOptions, show_defaults=False)
    parser.add_argument("--force", action="store_true",
                        help="overwrite a taskset that already has measured columns or holds "
                             "another level set")


def generate_arithmetic_command(args: argparse.Namespace) -> int:
    try:
        options = from_flags(ArithmeticOptions, args)
        out = args.out if args.out is not None else level_set(options.levels).out_dir
        splits = write_arithmetic(out, options.n_train, options.n_test, options.seed,
                                  force=args.force, progress=True, levels=options.levels)
    except ValueError as exc:  # TasksetError, OutputError, SettingsError, generator limits
        return _fail(exc)
    for split, frame in splits.items():
        levels = frame["difficulty"].value_counts().sort_index()
        print(f"{split}: {len(frame)} tasks; by difficulty "
              + ", ".join(f"{k}: {v}" for k, v in levels.items()))
    print(f"wrote {out}")
    return 0

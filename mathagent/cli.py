"""``python -m mathagent <command>``: a thin front end over the package's modules.

Each command lives beside the logic it runs (a package's ``commands`` module, or the module
itself for the small ones), as two functions named after the command (dashes become
underscores):

    def prepare_data_parser(parser: argparse.ArgumentParser) -> None: ...
    def prepare_data_command(args: argparse.Namespace) -> int: ...

Modules are imported only when their command runs, so ``--help`` stays fast even though
the stack behind some commands (Trinity-RFT, Ray, torch) takes seconds to import.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# command -> (owning module, one-line help). Keep in the order a user meets them.
COMMANDS: dict[str, tuple[str, str]] = {
    "tutorial": ("mathagent.tutorial", "Run the notebooks in order and summarise what ran."),
    "site": ("mathagent.site", "Build the executed notebooks into a static site to read."),
    "prepare-data": ("mathagent.tasks.commands", "Convert guru-RL-92k math rows into a taskset."),
    "prepare-aime": ("mathagent.tasks.commands", "Build the AIME-24 eval set from a local file or the hub."),
    "generate-arithmetic": ("mathagent.tasks.commands", "Generate the bundled arithmetic taskset."),
    "models": ("mathagent.models", "List the policies known by name; check or assemble one's file."),
    "serve": ("mathagent.serving.commands", "Serve a model behind an OpenAI-compatible API."),
    "run-agent": ("mathagent.rollouts.commands", "Run the ReAct agent and judge over tasks."),
    "measure-pass-rates": ("mathagent.rollouts.commands", "Measure per-task pass rates into a feature column."),
    "simulate": ("mathagent.simulation.commands", "Run the simulated selector sweep."),
    "ray": ("mathagent.launch.commands", "Start, stop or inspect a local Ray head."),
    "export-model": ("mathagent.hf_export", "Write a model as a Hugging Face folder (vLLM, verl)."),
    "train": ("mathagent.launch.commands", "Preflight and launch Trinity-RFT training (GPU)."),
    "experiment": ("mathagent.experiment.commands", "Run every arm and seed of an experiment spec, then its report (GPU)."),
    "train-local": ("mathagent.grpo.commands", "Tutorial-scale GRPO on a small model (CPU or one GPU)."),
    "plot": ("mathagent.results", "Read run folders and draw the results figures."),
    "report": ("mathagent.report", "Write a results folder's README.md from its runs."),
}


def _entry(name: str):
    module = importlib.import_module(COMMANDS[name][0])
    stem = name.replace("-", "_")
    return getattr(module, f"{stem}_parser"), getattr(module, f"{stem}_command")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser; only ``command``'s module is imported to fill its options."""
    parser = argparse.ArgumentParser(
        prog="python -m mathagent",
        description="Data-centric RL fine-tuning of a math ReAct agent: tutorial commands.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            _entry(name)[0](p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    if command is not None and command not in COMMANDS:
        build_parser().parse_args(argv)  # argparse reports the unknown command and exits 2
    args = build_parser(command).parse_args(argv)
    if args.command is None:
        build_parser().print_help()
        return 0
    return int(_entry(args.command)[1](args) or 0)

"""The ``run-agent`` and ``measure-pass-rates`` commands: parsers, endpoints, outputs, exits.

``run-agent`` runs the workflow and the judge over the first tasks of a split and writes
``results.csv`` and ``params.json`` as one swap; ``measure-pass-rates`` measures a feature
column through :func:`mathagent.rollouts.measure.measure_pass_rates`. Both print one
``error:`` line and exit 2 on a usage error, exit 1 when rollouts failed and 130 on Ctrl-C.
Their endpoint, agent and batching flags come from :mod:`mathagent.rollouts.options`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import numpy as np

from mathagent import paths
from mathagent.rollouts.backends import EndpointBackend, RayFanout
from mathagent.rollouts.measure import (
    _pass_rates,
    check_measurement,
    measure_pass_rates,
)
from mathagent.rollouts.options import (
    MeasureSettings,
    RunAgentSettings,
    add_rollout_flags,
)
from mathagent.rollouts.records import describe_failures
from mathagent.rollouts.runner import run_tasks, summarize
from mathagent.rollouts.store import MeasureError, default_rollouts_dir, read_side_table
from mathagent.serving import ModelSettings
from mathagent.settings import SettingsError, from_flags

# The settings of a command (its endpoint, agent and batching flags, read back).
Options = RunAgentSettings | MeasureSettings


def _settings_from_args(opts: Options, base_url: str | None) -> ModelSettings:
    return ModelSettings.from_env(base_url=base_url, api_key=opts.api_key, model=opts.model,
                                  temperature=opts.temperature, max_tokens=opts.max_tokens)


def _agent_options(opts: Options):
    """The agent's options; ValueError (one line) for a bad --tool-timeout, or for
    --python-tool where the sandbox would refuse to run code."""
    from mathagent.agent import AgentOptions
    from mathagent.sandbox import timeout_problem
    from mathagent.sandbox_layer import require_isolation

    problem = timeout_problem(opts.tool_timeout)
    if problem:
        raise ValueError(f"--tool-timeout {problem}")
    options = AgentOptions(prompt_variant=opts.prompt_variant, python_tool=opts.python_tool,
                           tool_timeout=opts.tool_timeout, text_tool_calls=opts.text_tool_calls,
                           meta_tool=opts.meta_tool, console_output=False)
    if options.python_tool:
        require_isolation()
    return options


def _base_urls(opts: Options) -> list[str]:
    if opts.base_url:
        return [opts.base_url] if isinstance(opts.base_url, str) else list(opts.base_url)
    env = os.environ.get("MATHAGENT_BASE_URL")
    return [env] if env else []


@contextlib.contextmanager
def _endpoints(opts: Options) -> Iterator[list[ModelSettings]]:
    """The endpoints of a command: those given, else one local server
    (:func:`mathagent.serving.connect` checks each one)."""
    from mathagent.serving import ENV_MODEL, connect, endpoint

    setting = ("--model" if opts.model else ENV_MODEL if os.environ.get(ENV_MODEL)
               else "--model (default)")
    urls = _base_urls(opts)
    if urls:
        yield [connect(_settings_from_args(opts, url), setting)[0] for url in urls]
        return
    with endpoint(_settings_from_args(opts, None), setting, n_ctx=opts.n_ctx) as settings:
        print(f"started {settings.model} at {settings.base_url}", file=sys.stderr)
        yield [settings]


def _default_concurrency(opts: Options) -> int:
    if opts.concurrency:
        return int(opts.concurrency)
    return 32 if _base_urls(opts) else 4


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def run_agent_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--taskset", type=Path, default=paths.ARITHMETIC_DIR, metavar="DIR",
                        help="taskset directory (default: %(default)s)")
    parser.add_argument("--split", default="test", help="split to run (default: %(default)s)")
    parser.add_argument("--limit", type=int, default=20,
                        help="first N tasks of the split, 0 for all (default: %(default)s)")
    parser.add_argument("--n", type=int, default=1,
                        help="rollouts per task (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=None,
                        help="results CSV; params.json goes beside it (default: "
                             "runs/agent/<timestamp>/results.csv)")
    parser.add_argument("--force", action="store_true",
                        help="replace the results of an earlier run in the --out folder")
    add_rollout_flags(parser, RunAgentSettings)


def _default_out() -> Path:
    """``runs/agent/<timestamp>/results.csv`` in a folder no other run has used."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = paths.runs_dir() / "agent"
    folder, k = base / stamp, 1
    while folder.exists() and any(folder.iterdir()):
        folder, k = base / f"{stamp}-{k}", k + 1
    return folder / "results.csv"


def _existing_outputs(out: Path) -> list[Path]:
    return [p for p in (out, out.parent / "params.json") if p.exists()]


def write_outputs(out: Path, files: dict[str, str]) -> None:
    """Write ``files`` (name -> text) into ``out.parent`` as one swap.

    Everything is written into a temporary folder beside it first. When ``out.parent``
    holds nothing but these files (a run folder), the folder is swapped in whole: the old
    one is renamed aside, the new one renamed into place, the old one deleted; a failure
    before the swap leaves the old output as it was. In a folder holding other files too
    (``--out results.csv`` in a project folder), each file is renamed over its old version.
    """
    from mathagent.outputs import swap_in

    folder = out.parent
    folder.parent.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    tmp = folder.parent / f".{folder.name}.tmp-{tag}"
    tmp.mkdir()
    try:
        for name, text in files.items():
            (tmp / name).write_text(text)
        own = folder.is_dir() and {p.name for p in folder.iterdir()} <= set(files)
        if not folder.exists() or own:
            swap_in(tmp, folder)
        else:
            for name in files:
                os.replace(tmp / name, folder / name)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def run_agent_command(args: argparse.Namespace) -> int:
    """Run the agent and judge over tasks; write results.csv + params.json; print a summary.

    Exit codes: 0 when every rollout ran, 1 when some failed (they are in results.csv with
    their error and no reward), 2 for a usage error, 130 on Ctrl-C (nothing written).
    """
    from mathagent.serving import EndpointError, ServerStartError
    from mathagent.tasks import TasksetError, read_split

    if args.limit < 0:
        return _fail(f"--limit {args.limit}: must be >= 0 (N runs the first N tasks of the "
                     "split, 0 runs all of them)")
    if args.n < 1:
        return _fail(f"--n {args.n}: must be >= 1 (rollouts per task)")
    try:
        opts = from_flags(RunAgentSettings, args)
    except SettingsError as exc:
        return _fail(str(exc))
    out = args.out or _default_out()
    existing = _existing_outputs(out)
    if existing and not args.force:
        return _fail(f"{existing[0]} exists already (an earlier run's output); pass --force "
                     "to replace it or choose another --out")
    try:
        frame = read_split(args.taskset, args.split)
    except TasksetError as exc:
        return _fail(str(exc))
    if args.limit:
        frame = frame.iloc[:args.limit]
    try:
        options = _agent_options(opts)
        with _endpoints(opts) as endpoints:
            settings = endpoints[0]
            table = run_tasks(frame, settings, n=args.n, seed=opts.seed, options=options,
                              lenient=opts.lenient, concurrency=_default_concurrency(opts),
                              timeout=opts.timeout, keep_response=opts.responses)
    except (EndpointError, ServerStartError, ValueError) as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        print(f"interrupted: nothing was written to {out.parent}; rerun to start over",
              file=sys.stderr)
        return 130
    summary = summarize(table)
    params = {"taskset": str(args.taskset), "split": args.split, "limit": args.limit,
              "n": args.n, "seed": opts.seed, "model": settings.describe(),
              "agent": options.describe(), "lenient": opts.lenient,
              "concurrency": _default_concurrency(opts), "timeout": opts.timeout,
              "summary": summary}
    try:
        write_outputs(out, {out.name: table.to_csv(index=False),
                            "params.json": json.dumps(params, indent=2, default=str) + "\n"})
    except OSError as exc:
        return _fail(f"cannot write the results to {out.parent}: {exc}; an earlier output "
                     "there is unchanged")
    print(f"accuracy {summary['accuracy']:.3f} over {summary['rollouts'] - summary['failed']} "
          f"rollouts that ran ({summary['tasks']} tasks); answered {summary['answered']:.0%}; "
          f"failed {summary['failed']} (timeouts {summary['timeouts']}); "
          f"mean latency {summary['mean_latency_s']:.2f} s")
    print(f"results: {out}")
    if summary["failed"]:
        print(f"error: {summary['failed']} of {summary['rollouts']} rollouts failed "
              f"({describe_failures(summary['failures'])}); their rows in {out} have the "
              "error and no reward, and the accuracy above leaves them out", file=sys.stderr)
        return 1
    return 0


def measure_pass_rates_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--taskset", type=Path, default=paths.ARITHMETIC_DIR, metavar="DIR",
                        help="taskset directory (default: %(default)s)")
    parser.add_argument("--split", default="train", help="split to measure (default: %(default)s)")
    parser.add_argument("--column", required=True,
                        help="feature column to write, e.g. smollm2_weak_pass_rate")
    parser.add_argument("--n", type=int, default=16,
                        help="rollouts per task (default: %(default)s, as for guru's pass rates)")
    parser.add_argument("--backend", choices=["endpoint", "hf"], default="endpoint",
                        help="endpoint: workflow + judge against OpenAI-compatible server(s); "
                             "hf: batched transformers sampling on a GPU with the trainer's "
                             "prompt and the lenient judge (mathagent.policy.HFBackend)")
    parser.add_argument("--chunk-size", type=int, default=None,
                        help="tasks per chunk, the unit written to the side table "
                             "(default: 8 for endpoints, 64 for hf)")
    parser.add_argument("--rollouts-dir", type=Path, default=None,
                        help="side table folder (default: runs/pass_rates/<taskset>/<split>/"
                             "<column>)")
    parser.add_argument("--max-tasks", type=int, default=None,
                        help="stop after this many new tasks (continue later by rerunning)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing column of that name")
    parser.add_argument("--restart", action="store_true",
                        help="discard the side table of an earlier run and start over")
    parser.add_argument("--ray-address", default="local",
                        help="ray.init address for several endpoints (default: %(default)s; "
                             "'auto' joins a running cluster)")
    add_rollout_flags(parser, MeasureSettings)
    group = parser.add_argument_group("hf backend")
    group.add_argument("--hf-model", default=None,
                       help="model folder, GGUF file or hub id (default: the bundled model)")
    group.add_argument("--device", default=None, help="torch device (default: cuda if present)")


def _hf_backend(args: argparse.Namespace, opts: MeasureSettings):
    from mathagent.policy import HFBackend

    return HFBackend(model=args.hf_model, device=args.device, temperature=opts.temperature,
                     max_new_tokens=opts.max_tokens, lenient=True)


def _progress_line(folder: Path, args: argparse.Namespace) -> str:
    """Where an interrupted measurement left its progress, and how to go on."""
    from mathagent.tasks import read_split

    try:
        total = len(read_split(args.taskset, args.split))
        _, done = _pass_rates(read_side_table(folder), total, args.n)
        progress = f"{int(done.sum())} of {total} tasks done"
    except Exception:  # reporting must not fail the exit; the side table is intact anyway
        progress = "finished chunks are kept"
    return (f"interrupted: progress saved in {folder} ({progress}); rerun the same command "
            "to resume")


def measure_pass_rates_command(args: argparse.Namespace) -> int:
    """Measure pass rates into a feature column; resumable; see :func:`measure_pass_rates`.

    Exit codes: 0 when the column was written (or a ``--max-tasks`` run ended cleanly),
    1 when rollouts failed (the column is not written; a rerun retries them), 2 for a
    usage error, 130 on Ctrl-C (progress is kept; a rerun resumes).
    """
    import functools

    from mathagent.serving import EndpointError, ServerStartError
    from mathagent.tasks import TasksetError

    if args.n < 1:
        return _fail(f"--n {args.n}: must be >= 1 (rollouts per task)")
    if args.chunk_size is not None and args.chunk_size < 1:
        return _fail(f"--chunk-size {args.chunk_size}: must be >= 1")
    if args.max_tasks is not None and args.max_tasks < 1:
        return _fail(f"--max-tasks {args.max_tasks}: must be >= 1 (leave it out for all tasks)")
    try:
        opts = from_flags(MeasureSettings, args)
    except SettingsError as exc:
        return _fail(str(exc))
    common = {"split": args.split, "n": args.n, "seed": opts.seed,
              "rollouts_dir": args.rollouts_dir, "keep_responses": opts.responses,
              "overwrite": args.overwrite, "restart": args.restart, "max_tasks": args.max_tasks}
    fanout = None
    folder = args.rollouts_dir or default_rollouts_dir(args.taskset, args.split, args.column)
    try:
        check_measurement(args.taskset, args.column, args.split, folder, args.overwrite)
        if args.backend == "hf":
            result = measure_pass_rates(args.taskset, args.column, _hf_backend(args, opts),
                                        chunk_size=args.chunk_size or 64, **common)
        else:
            options = _agent_options(opts)
            with _endpoints(opts) as endpoints:
                kwargs = {"options": options, "lenient": opts.lenient,
                          "concurrency": _default_concurrency(opts), "timeout": opts.timeout,
                          "keep_response": opts.responses}
                if len(endpoints) == 1:
                    backend = EndpointBackend(endpoints[0], **kwargs)
                else:
                    fanout = backend = RayFanout(
                        [functools.partial(EndpointBackend, s, **kwargs) for s in endpoints],
                        address=args.ray_address)
                result = measure_pass_rates(args.taskset, args.column, backend,
                                            chunk_size=args.chunk_size or 8, **common)
    except (EndpointError, ServerStartError, TasksetError, MeasureError, ValueError) as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        print(_progress_line(Path(folder), args), file=sys.stderr)
        return 130
    finally:
        if fanout is not None:
            with contextlib.suppress(Exception):
                fanout.shutdown()
    state = "written to" if result.complete else "not yet written to"
    print(f"{result.column}: {int(np.isfinite(result.values).sum())}/{result.tasks} tasks "
          f"measured ({result.resumed} resumed, {result.measured_this_run} this run), "
          f"{result.failed_rollouts} failed rollouts; column {state} {result.taskset_file}")
    if result.failed_rollouts:
        print(f"error: {result.failure_message()}", file=sys.stderr)
        return 1
    if result.complete:
        print(f"mean pass rate {np.mean(result.values):.3f}; side table {result.side_table}")
    return 0

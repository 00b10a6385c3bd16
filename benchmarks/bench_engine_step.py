"""The Trinity-RFT engine step of the Qwen policy, phase by phase, against the plain-PyTorch
anchor, for runs with and without the speed levers, or runs of the same settings side by side.

    python benchmarks/bench_engine_step.py RUN_FOLDER... --anchor ANCHOR.json
        [--labels NAME...] [--out benchmarks/bench_engine_step.md]
        [--levers fast|levers|bootstrap|memory|expandable|fused|none]
        [--same-learning FAST_RUN REFERENCE_RUN [REFERENCE_RUN...]]

Each RUN_FOLDER is a Trinity-RFT run laid out as the results folders are (event files under
``monitor/``, ``timings.json`` with the start-up milestones, peak GPU memory per role and the
seconds of every whole step read from the run's log). ANCHOR.json is what
``benchmarks/engine_anchor.py`` printed on the same GPU in the same sitting. The runs compared
should be the same (arm, seed) (same tasks in the same order) on the same machine, one after the
other, alone on the GPU.

The table: for each phase the median over explore steps 2 and later (step 1 carries one-off
costs: CUDA graphs of new shapes, allocator growth), in seconds, and its ratio to the anchor's
matching figure: training phases to the anchor's update of 128 sequences in micro-batches of 8,
the reference log-prob pass to half its two passes, the weight sync to its device-to-device
copy of every weight. Start-up in minutes from ``train``; peak GPU memory per role in GiB.

``--levers`` names what the runs differ in (:data:`LEVER_SETS`). ``fast``, ``levers``,
``bootstrap``, ``memory``, ``expandable`` and ``fused``: the last run turned on those levers
against the first; a table sets each lever's row before against after, and the goals are the
last run's. ``none``: the runs share their settings (the run alone on the GPU against runs
sharing it, ``benchmarks/engine_step_share.sh``); the goals are each run's, and a table gives
each later run's step, training step, rollout and evaluation against the first's. Where a run's ``timings.json`` has ``cpu_cores`` (the
experiment command's CPU monitor), a table gives the CPU cores busy by phase and role
(:func:`cpu_lines`).

``--same-learning FAST_RUN REFERENCE_RUN...`` adds whether the fast settings change what is
learned: for each reference run, the held-out accuracy of both runs at every step both
evaluated, their difference against the replies' noise and the fast run against the range of
the reference arm's seeds beside it (:func:`same_learning`), and a figure overlaying their
policy loss, KL, entropy and rollout reward, step by step (``--figure``, default
``same_learning.png`` beside ``--out``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled

from mathagent import results  # noqa: E402
from mathagent.settings import positive_int  # noqa: E402
from mathagent.trinity_tags import EVAL_TAG  # noqa: E402

#: Trinity-RFT's tags of the phases of a step: (row name, tag, which anchor figure it compares to)
PHASES: tuple[tuple[str, str, str | None], ...] = (
    ("rollout (16 x 8 agent runs)", "explore/time/sync_interval", None),
    ("trainer: read experiences", "time/read_experience", None),
    ("trainer: reference log-probs", "time/ref", "logprob_pass_s"),
    ("trainer: actor update", "time/update_actor", "update_s"),
    ("trainer: whole training step", "time/train_step", "total_s"),
    ("weight sync", "time/sync_weight", "weight_copy_s"),
    ("held-out evaluation (660 x 4)", "time/eval", None),
)
#: The evaluation at step 0, where a run has one (every run starts from the same weights)
EVAL_STEP0 = "held-out evaluation at step 0 (660 x 4)"
MEMORY_TAGS = (("trainer allocator, GiB (max reserved)", "actor/perf/max_memory_reserved_gb"),
               ("trainer tensors, GiB (max allocated)", "actor/perf/max_memory_allocated_gb"))
#: torch's allocator setting, which a run records in ``params.json`` as ``torch_allocator``
ALLOC_ENV = "PYTORCH_CUDA_ALLOC_CONF"
#: The trainer's allocator beyond its tensors' peak: memory it held that no tensor used at once
HELD_BEYOND = "trainer allocator beyond its tensors' peak, GiB (max reserved less max allocated)"
STARTUP = ("all workflow runners ready", "step 1 starts")
#: vLLM's torch.compile at start, and whether it loaded its graphs from its compile cache (kept
#: between the runs of a machine: mathagent.experiment.vllm_cache) rather than compiling them
COMPILE_ROW = "start-up: vLLM's torch.compile, s"
CACHE_ROW = "start-up: vLLM's graphs loaded from its compile cache (1 yes, 0 compiled)"
#: The start-up the goal is set on: to step 1, or to the step-0 evaluation where a run has one
#: (that evaluation comes before step 1 and is no part of the start-up)
START_GOAL = "start-up: step 1, or the step-0 evaluation where there is one, min"
#: The levers the "after" run turned on, by comparison (``--levers``): (lever, its setting, the
#: row it acts on). Each acts on one phase, so its effect is read from that row, before against
#: after; levers turned on together have one effect. ``fast``: the committed before and after
#: (``base`` and ``fast``); ``levers``: ``spec_fast8.yaml``'s run against ``spec_levers.yaml``'s,
#: padding removed with log-probabilities in blocks (on together, so one effect on each pass),
#: and several tasks a workflow runner (``benchmarks/engine_step_levers.sh``); ``none``: runs
#: of the same settings, set side by side (``benchmarks/engine_step_share.sh``); ``memory``:
#: ``spec_memory_before.yaml``'s run against ``spec_memory.yaml``'s (``engine_step_memory.sh``);
#: ``expandable``: the same before against ``spec_memory_expandable.yaml``'s; ``fused``:
#: ``spec_alone.yaml``'s run against ``spec_fused.yaml``'s (``engine_step_share.sh``);
#: ``startup``: ``spec_startup_cold.yaml``'s run against ``spec_startup_levers.yaml``'s, with
#: ``spec_startup_warm.yaml``'s (the cache alone) between them (``engine_step_startup.sh``).
LEVER_SETS = {
    "fast": (
        ("micro-batches of 8 for the update (2 before) and no gradient checkpointing (the "
         "forward recomputed in the backward before), together",
         "trainer.trainer_config.actor.ppo_micro_batch_size_per_gpu=8 "
         "trainer.trainer_config.model.enable_gradient_checkpointing=false",
         "trainer: actor update"),
        ("micro-batches of 16 for the log-prob passes (4 before)",
         "trainer.trainer_config.{ref,rollout}.log_prob_micro_batch_size_per_gpu=16",
         "trainer: reference log-probs"),
        ("weight sync through CUDA IPC handles (mathagent.compat trinity-ipc-sync; now on unless "
         "MATHAGENT_IPC_SYNC=0)", "MATHAGENT_IPC_SYNC=1", "weight sync"),
    ),
    "levers": (
        ("padding removed (mathagent's variable-length attention, mathagent.compat "
         "transformers-varlen-attention) and log-probabilities in blocks of tokens, not one "
         "token at a time (mathagent.compat verl-batched-logprobs), together: the reference "
         "log-prob pass", "MATHAGENT_VARLEN_ATTN=1 MATHAGENT_BATCHED_LOGPROBS=1",
         "trainer: reference log-probs"),
        ("the same two, together: the actor's update",
         "MATHAGENT_VARLEN_ATTN=1 MATHAGENT_BATCHED_LOGPROBS=1", "trainer: actor update"),
        ("4 tasks at once on each workflow runner (mathagent.compat trinity-runner-slots; vLLM "
         "takes up to 256 sequences at once in both runs); the row also moves with the agent "
         "runs' own length, one evaluation a run", "MATHAGENT_RUNNER_SLOTS=4",
         "held-out evaluation (660 x 4)"),
    ),
    "bootstrap": (
        ("each evaluation task's best-of and worst-of metrics in a few NumPy calls (mathagent."
         "compat trinity-fast-bootstrap; on unless MATHAGENT_FAST_BOOTSTRAP=0): the evaluation "
         "of the starting weights, the same in both runs (an evaluation's seconds fall as "
         "training shortens the replies, so the medians over runs of other lengths differ "
         "by more than the lever)", "MATHAGENT_FAST_BOOTSTRAP=1", EVAL_STEP0),
    ),
    "memory": (
        ("micro-batches of 4 for the update (8 before)",
         "trainer.trainer_config.actor.ppo_micro_batch_size_per_gpu=4", "trainer: actor update"),
        ("micro-batches of 8 for the log-prob passes (16 before)",
         "trainer.trainer_config.{ref,rollout}.log_prob_micro_batch_size_per_gpu=8",
         "trainer: reference log-probs"),
        ("the two together: the trainer's tensors at their peak",
         "(both micro-batch settings)", "trainer tensors, GiB (max allocated)"),
        ("the two together: what the trainer's allocator holds beyond its tensors",
         "(both micro-batch settings)", HELD_BEYOND),
        ("the two together: the trainer's GPU memory",
         "(both micro-batch settings)", "peak GPU memory: trainer (FSDP actor + reference), GiB"),
        ("a KV cache of 2 GiB for vLLM (4 before)",
         "explorer.rollout_model.extra_engine_args.kv_cache_memory_bytes=2147483648",
         "peak GPU memory: vLLM engine worker, GiB"),
        ("all three: the run", "(all three settings)",
         "peak GPU memory: run, all processes (sum at one time), GiB"),
        ("the 2 GiB KV cache: the evaluation of the starting weights, the same in both runs",
         "explorer.rollout_model.extra_engine_args.kv_cache_memory_bytes=2147483648",
         EVAL_STEP0),
    ),
    "expandable": (
        ("a KV cache of 2 GiB for vLLM (4 before), and torch's allocator growing its segments "
         "in place, together: vLLM's memory",
         "explorer.rollout_model.extra_engine_args.kv_cache_memory_bytes=2147483648 "
         "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
         "peak GPU memory: vLLM engine worker, GiB"),
        ("the allocator: what the trainer's allocator holds beyond its tensors",
         "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", HELD_BEYOND),
        ("the allocator: the trainer's GPU memory",
         "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
         "peak GPU memory: trainer (FSDP actor + reference), GiB"),
        ("the allocator: what it costs the training step",
         "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "trainer: whole training step"),
        ("both: the run", "(both settings)",
         "peak GPU memory: run, all processes (sum at one time), GiB"),
        ("both: the evaluation of the starting weights, the same in both runs",
         "(both settings)", EVAL_STEP0),
    ),
    "fused": (
        ("verl's fused kernels for the policy's head (log-probabilities 512 tokens at a time): "
         "the trainer's tensors at their peak",
         "trainer.trainer_config.model.use_fused_kernels=true "
         "trainer.trainer_config.model.fused_kernel_options.impl_backend=torch",
         "trainer tensors, GiB (max allocated)"),
        ("the same: the trainer's GPU memory", "(the same)",
         "peak GPU memory: trainer (FSDP actor + reference), GiB"),
        ("the same: the run", "(the same)",
         "peak GPU memory: run, all processes (sum at one time), GiB"),
        ("the same: the reference log-prob pass", "(the same)", "trainer: reference log-probs"),
        ("the same: the actor's update", "(the same)", "trainer: actor update"),
    ),
    "startup": (
        ("vLLM's graphs loaded from the compile cache the first run left (kept between runs: "
         "mathagent.experiment.vllm_cache); the second and third runs", "(no setting)",
         COMPILE_ROW),
        ("that, and the rollout coordinator and its workflow runners made beside vLLM's start "
         "(mathagent.compat trinity-early-runners), the third run: the runners ready",
         "MATHAGENT_EARLY_RUNNERS=1", "start-up: all workflow runners ready, min"),
        ("the two: the start-up the goal is set on", "(both)", START_GOAL),
        ("evaluation requests without log-probabilities (mathagent.compat "
         "trinity-eval-no-logprobs), the third run: the evaluation of the starting weights, "
         "the same work in every run (the second run's is a second draw without the lever)",
         "MATHAGENT_EVAL_NO_LOGPROBS=1", EVAL_STEP0),
    ),
    "none": (),
}
#: The goals of one run alone on one GPU at 16 x 8: (row, most allowed)
GOALS = (("whole step (log: one explore start to the next)", 10.0),
         ("trainer: whole training step", 5.0), ("weight sync", 1.0),
         ("held-out evaluation (660 x 4)", 30.0), (START_GOAL, 2.0),
         ("peak GPU memory: run, all processes (sum at one time), GiB", 40.0))
#: The rows ``--levers none`` sets each later run against the first on
AGAINST_FIRST = ("whole step (log: one explore start to the next)", "trainer: whole training step",
                 "rollout (16 x 8 agent runs)", "held-out evaluation (660 x 4)")
ANCHOR_MB = "mb8"


def anchor_figures(anchor: dict) -> dict[str, float]:
    """The anchor's figures a phase is set against (seconds)."""
    mb = anchor[ANCHOR_MB]
    return {"logprob_pass_s": mb["two_logprob_passes_s"] / 2, "update_s": mb["update_s"],
            "total_s": mb["total_s"], "weight_copy_s": anchor["weight_copy_s"]}


def run_column(folder: Path) -> pd.Series:
    """Medians over steps 2+ of one run's phases, its whole step, start-up and memory."""
    scalars = results.read_scalars(folder)
    out: dict[str, float] = {}
    for name, tag, _ in PHASES:
        rows = scalars[scalars["tag"] == tag]
        later = rows[rows["step"] >= 2]["value"] if tag != "time/eval" else rows["value"]
        out[name] = float(later.median()) if len(later) else math.nan
    step0 = scalars[(scalars["tag"] == "time/eval") & (scalars["step"] == 0)]["value"]
    if len(step0):  # the starting weights, the same in every run: a like-for-like evaluation
        out[EVAL_STEP0] = float(step0.iloc[0])
    timings = json.loads((folder / "timings.json").read_text())
    whole = pd.Series(timings["whole_step_s"])
    whole.index = [int(str(k).split()[-1]) for k in whole.index]
    out["whole step (log: one explore start to the next)"] = float(whole[whole.index >= 2].median())
    out["steps measured (2+)"] = float((whole.index >= 2).sum())
    for name in STARTUP:
        out[f"start-up: {name}, min"] = float(timings["startup_min"].get(name, math.nan))
    eval_start = float(timings["startup_min"].get("step-0 evaluation starts", math.nan))
    out[START_GOAL] = (out["start-up: step 1 starts, min"] if math.isnan(eval_start)
                       else eval_start)
    compiled = timings.get("vllm_compile") or {}   # runs laid out before it was read: none
    if compiled:
        out[COMPILE_ROW] = float(compiled["seconds"])
        out[CACHE_ROW] = float(compiled["from cache"])
    for role, gib in timings["gpu_memory_gib"].items():
        out[f"peak GPU memory: {role}, GiB"] = float(gib)
    for name, tag in MEMORY_TAGS:
        rows = scalars[scalars["tag"] == tag]["value"]
        out[name] = float(rows.max()) if len(rows) else math.nan
    out[HELD_BEYOND] = held_beyond_tensors(scalars)
    return pd.Series(out)


def held_beyond_tensors(scalars: pd.DataFrame) -> float:
    """What the trainer's allocator held beyond its tensors' peak (GiB): its most reserved less
    its most allocated over the run. verl logs both as torch's running peaks since the trainer
    started, so each tag's last value is its most; NaN where the run logged either not at all."""
    (_, reserved), (_, allocated) = MEMORY_TAGS
    most = scalars[scalars["tag"].isin((reserved, allocated))].groupby("tag")["value"].max()
    if reserved not in most or allocated not in most:
        return math.nan
    return float(most[reserved] - most[allocated])


def ratios(column: pd.Series, anchor: dict) -> pd.Series:
    figures = anchor_figures(anchor)
    out = {}
    for name, _, key in PHASES:
        out[name] = column[name] / figures[key] if key else math.nan
    return pd.Series(out)


def lever_and_goal_tables(frame: pd.DataFrame, levers: str = "fast") -> str:
    """One row per lever of ``LEVER_SETS[levers]`` (the first and last columns: before and
    after) and one per goal, for the last column."""
    before, after = frame.columns[0], frame.columns[-1]
    rows = [f"| lever | setting | acts on | {before} | {after} |", "| --- " * 5 + "|"]
    for lever, setting, row in LEVER_SETS[levers]:
        if row not in frame.index:  # runs without a step-0 evaluation, or a compile line
            continue
        rows.append(f"| {lever} | `{setting}` | {row} | {_fmt(frame.at[row, before])} | "
                    f"{_fmt(frame.at[row, after])} |")
    return "\n".join(rows) + "\n\n" + goal_table(frame, [after])


def goal_table(frame: pd.DataFrame, labels: list[str]) -> str:
    """One row per goal: each of ``labels``' value and whether it is met."""
    rows = ["| goal | at most | " + " | ".join(f"{lab} | met" for lab in labels) + " |",
            "| --- " * (2 + 2 * len(labels)) + "|"]
    for row, most in GOALS:
        cells = [f"{_fmt(frame.at[row, lab])} | "
                 + ("not measured" if math.isnan(frame.at[row, lab])
                    else "yes" if frame.at[row, lab] <= most else "no") for lab in labels]
        rows.append(f"| {row} | {most:g} | {' | '.join(cells)} |")
    return "\n".join(rows)


def against_first(frame: pd.DataFrame) -> str:
    """Each later column's :data:`AGAINST_FIRST` rows over the first column's."""
    first, *later = frame.columns
    rows = ["| measure | " + " | ".join(f"{lab} / {first}" for lab in later) + " |",
            "| --- " * (1 + len(later)) + "|"]
    for row in AGAINST_FIRST:
        cells = [frame.at[row, lab] / frame.at[row, first] for lab in later]
        rows.append(f"| {row} | "
                    + " | ".join("" if math.isnan(x) else f"{x:.2f}x" for x in cells) + " |")
    return "\n".join(rows)


def table(folders: list[Path], labels: list[str], anchor: dict, levers: str = "fast") -> str:
    columns = {label: run_column(f) for label, f in zip(labels, folders, strict=True)}
    frame = pd.DataFrame(columns).reindex(list(dict.fromkeys(
        name for column in columns.values() for name in column.index)))
    if EVAL_STEP0 in frame.index and frame.loc[EVAL_STEP0].isna().any():
        frame = frame.drop(EVAL_STEP0)  # a row only where every run evaluated step 0
    lines = [f"| measure | {' | '.join(labels)} | "
             + " | ".join(f"{lab} / anchor" for lab in labels) + " |",
             "| --- " * (1 + 2 * len(labels)) + "|"]
    ratio_cols = {lab: ratios(frame[lab], anchor) for lab in labels}
    for name in frame.index:
        cells = [_fmt(frame.at[name, lab]) for lab in labels]
        rcells = [_fmt(ratio_cols[lab].get(name, math.nan), "x") for lab in labels]
        lines.append(f"| {name} | {' | '.join(cells)} | {' | '.join(rcells)} |")
    if levers == "none":
        lines += ["", "### The goals", "", goal_table(frame, labels)]
        if len(labels) > 1:
            lines += ["", "### Each run against the first", "", against_first(frame)]
    elif len(labels) > 1:
        lines += ["", "### The levers and the goals", "", lever_and_goal_tables(frame, levers)]
    return "\n".join(lines)


def cpu_lines(folders: list[Path], labels: list[str]) -> str:
    """The CPU cores busy by phase and role of the runs whose ``timings.json`` has
    ``cpu_cores`` (:func:`mathagent.experiment.layout.cpu_cores`), one column per run, blank
    where a run lacks the row; empty where no run has them."""
    cores = [json.loads((f / "timings.json").read_text()).get("cpu_cores", {}) for f in folders]
    phases = dict.fromkeys(phase for run in cores for phase in run)
    keys = [(phase, role) for phase in phases
            for role in dict.fromkeys(role for run in cores for role in run.get(phase, {}))]
    if not keys:
        return ""
    rows = ["### CPU cores busy, by phase and role", "",
            "The mean CPU cores each run's processes kept busy in each phase, all of a role's "
            "processes together and its busiest one alone, from the experiment command's CPU "
            "monitor (a process's seconds include those of the children it waited for, so a "
            "workflow runner's include its Python tool's sandboxes); the machine row is the "
            "whole machine's.", "",
            f"| phase | role | processes | {' | '.join(labels)} |",
            "| --- " * (3 + len(labels)) + "|"]
    for phase, role in keys:
        for which, name in (("all", "all processes"), ("busiest", "busiest process")):
            values = [run.get(phase, {}).get(role, {}).get(which) for run in cores]
            cells = ["" if x is None else f"{x:.2f}" for x in values]
            rows.append(f"| {phase} | {role} | {name} | {' | '.join(cells)} |")
    return "\n".join(rows)


def _fmt(value: float, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if unit:
        return f"{value:.1f}{unit}"
    return f"{value:.0f}" if float(value).is_integer() and abs(value) >= 3 else f"{value:.2f}"


#: Step-by-step curves the same-learning figure overlays: (title, Trinity tag)
CURVES = (("policy loss", "actor/pg_loss"), ("KL to the reference", "actor/kl_loss"),
          ("entropy", "actor/entropy_loss"), ("rollout reward (batch mean)", "critic/rewards/mean"))


def held_out(folder: Path) -> tuple[pd.Series, int]:
    """Held-out accuracy by step, and the number of 0/1 outcomes behind each (tasks x runs)."""
    scalars = results.read_scalars(folder)
    tags = results.eval_tags(set(scalars["tag"]))
    if len(tags) != 1:
        raise results.RunError(f"{folder}: {len(tags)} held-out tasksets; one expected")
    tag = next(iter(tags.values()))
    acc = scalars[scalars["tag"] == tag].set_index("step")["value"]
    runs = int(EVAL_TAG.match(tag).group("k") or 1)
    return acc, runs


def same_learning(fast: Path, reference: Path, tasks: int) -> str:
    """The held-out comparison (markdown); :func:`curves_figure` overlays the curves.

    Two yardsticks: the replies' noise (two standard errors of the difference of two
    evaluations of the same tasks, each over n = tasks x runs 0/1 outcomes), and the spread
    of the reference arm's seeds (every ``<arm>_seed*`` folder beside the reference run):
    runs of one arm with other seeds are what a changed engine must not be told apart from.
    """
    a, runs = held_out(fast)
    b, _ = held_out(reference)
    arm = reference.name.rsplit("_seed", 1)[0]
    seeds = [held_out(f)[0] for f in sorted(reference.parent.glob(f"{arm}_seed*"))]
    n = tasks * runs
    spread = len(seeds) > 1  # a range of seeds to place the fast run in (not one seed alone)
    columns = 8 if spread else 6
    head = "| step | fast | reference | difference | replies' noise (2 SE) | inside |"
    if spread:
        head += f" the {len(seeds)} committed `{arm}` seeds | inside |"
    rows = [head, "| --- " * columns + "|"]
    for step in sorted(set(a.index) & set(b.index)):
        pa, pb = float(a[step]), float(b[step])
        bound = 2 * math.sqrt(pa * (1 - pa) / n + pb * (1 - pb) / n)
        row = (f"| {step} | {pa:.3f} | {pb:.3f} | {pa - pb:+.3f} | {bound:.3f} | "
               f"{'yes' if abs(pa - pb) <= bound else 'no'} |")
        others = [float(x[step]) for x in seeds if step in x.index]
        if spread and others:
            lo, hi = min(others), max(others)
            row += f" {lo:.3f}-{hi:.3f} | {'yes' if lo <= pa <= hi else 'no'} |"
        elif spread:  # no seed beside it evaluated this step
            row += "  |  |"
        rows.append(row)
    return "\n".join(rows) + f"\n\nn = {tasks} tasks x {runs} runs per evaluation.\n"


def curves_figure(fast: Path, references: list[Path], figure: Path) -> None:
    """The fast run's loss, KL, entropy and reward curves over each reference run's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mathagent import plots

    fig, axes = plt.subplots(1, len(CURVES), figsize=(4 * len(CURVES), 3))
    named = [(f, f"reference: {f.parent.name}/{f.name}") for f in references]
    for ax, (title, tag) in zip(axes, CURVES, strict=True):
        for folder, label in (*named, (fast, f"fast: {fast.parent.name}/{fast.name}")):
            s = results.read_scalars(folder)
            s = s[s["tag"] == tag]
            ax.plot(s["step"], s["value"], marker=".", label=label)
        ax.set_title(title)
        ax.set_xlabel("step")
    axes[0].legend(fontsize="small")
    plots.save_figure(fig, figure.stem, figure.parent)
    plt.close(fig)


def profiled_steps(folders: list[Path], labels: list[str]) -> str:
    """A sentence naming each run's step profiled under torch.profiler (``params.json``'s
    ``levers``: MATHAGENT_PROFILE_STEP), whose seconds are in its medians; empty if none."""
    said = []
    for folder, label in zip(folders, labels, strict=True):
        try:
            step = (recorded_levers(folder) or {}).get("MATHAGENT_PROFILE_STEP")
        except (OSError, ValueError, AttributeError):
            step = None
        step = positive_int(step) if isinstance(step, str) else None
        if step:
            said.append(f"step {step} of {label}"
                        + (" (in its medians)" if step >= 2 else " (not in its medians)"))
    if not said:
        return ""
    return (f" Profiled under torch.profiler, so slower: {', '.join(said)}; the profile is in "
            "`profile/` of the run's folder.")


def anchor_lines(anchor: dict) -> str:
    rows = ["| micro-batch | two log-prob passes, s | update, s | total, s | peak GiB |",
            "| --- | --- | --- | --- | --- |"]
    for key in ("mb4", "mb8", "mb16"):
        m = anchor.get(key)
        if isinstance(m, dict):
            rows.append(f"| {key[2:]} | {m['two_logprob_passes_s']} | {m['update_s']} | "
                        f"{m['total_s']} | {m['peak_GiB']} |")
    rows.append(f"\nWeight copy, device to device: {anchor['weight_copy_s']} s.")
    return "\n".join(rows)


def recorded_levers(folder: Path) -> dict | None:
    """The levers a run recorded (``params.json``'s ``levers``), with torch's allocator setting
    under :data:`ALLOC_ENV` where the run recorded it (``torch_allocator``); None for a run laid
    out before levers were recorded; OSError or ValueError where params.json is missing or not
    JSON."""
    params = json.loads((folder / "params.json").read_text())
    levers = params.get("levers")
    if levers is not None and "torch_allocator" in params:
        levers = {**levers, ALLOC_ENV: params["torch_allocator"]}
    return levers


def lever_mismatch(before: Path, after: Path, levers: str) -> str | None:
    """Where the runs' recorded levers (``params.json``'s ``levers`` and ``torch_allocator``;
    a run laid out before either was recorded passes on it) contradict ``LEVER_SETS[levers]``:
    the before run with one of its variables set, or the after run without it."""
    switches = {word.split("=")[0]: word.split("=", 1)[1] for _, setting, _ in LEVER_SETS[levers]
                for word in setting.split() if word.startswith(("MATHAGENT_", ALLOC_ENV + "="))}
    if not switches:  # ``none``: the runs share their settings
        return None
    for folder, want in ((before, False), (after, True)):
        try:
            recorded = recorded_levers(folder)
        except (OSError, ValueError):
            return f"{folder / 'params.json'}: missing or not JSON"
        if recorded is None:
            continue
        for name, value in switches.items():
            if name == ALLOC_ENV and name not in recorded:  # laid out before it was recorded
                continue
            if (recorded.get(name) == value) != want:
                have = f"{name}={recorded[name]}" if recorded.get(name) else f"no {name}"
                return (f"{folder / 'params.json'}: ran with {have}, but --levers {levers} "
                        f"compares runs {'with' if want else 'without'} {name}={value}")
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="laid-out Trinity-RFT run folders")
    parser.add_argument("--anchor", type=Path, required=True,
                        help="JSON of benchmarks/engine_anchor.py from the same sitting")
    parser.add_argument("--labels", nargs="+", help="column names (default: folder names)")
    parser.add_argument("--out", type=Path, help="also write the markdown here")
    parser.add_argument("--same-learning", nargs="+", type=Path, metavar="RUN",
                        help="compare what a fast run learned with a reference run's")
    parser.add_argument("--figure", type=Path, help="where the same-learning figure goes")
    parser.add_argument("--levers", choices=sorted(LEVER_SETS), default="fast",
                        help="the levers the last run turned on against the first (default: "
                             "fast, the committed before and after); none: runs of the same "
                             "settings, each against the first")
    parser.add_argument("--eval-tasks", type=int, default=660,
                        help="held-out tasks per evaluation (for the bound; default 660)")
    args = parser.parse_args(argv)
    labels = args.labels or [f.name for f in args.runs]
    if len(labels) != len(args.runs):
        print(f"error: {len(labels)} --labels for {len(args.runs)} runs", file=sys.stderr)
        return 2
    for folder in args.runs:
        if not (folder / "timings.json").is_file():
            print(f"error: {folder}: no timings.json (not a laid-out Trinity-RFT run)",
                  file=sys.stderr)
            return 2
    if args.same_learning and len(args.same_learning) < 2:
        print("error: --same-learning takes the fast run and at least one reference run",
              file=sys.stderr)
        return 2
    wrong = lever_mismatch(args.runs[0], args.runs[-1], args.levers)
    if wrong:
        print(f"error: {wrong}", file=sys.stderr)
        return 2
    try:
        anchor = json.loads(args.anchor.read_text())
        anchor_figures(anchor)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"error: {args.anchor}: not an engine_anchor.py result ({exc})", file=sys.stderr)
        return 2
    try:
        body = table(args.runs, labels, anchor, args.levers)
        cpu = cpu_lines(args.runs, labels)
        if cpu:
            body += f"\n\n{cpu}"
        if args.same_learning:
            where = args.out.parent if args.out else Path(".")
            figure = args.figure or where / "same_learning.png"
            fast, *references = args.same_learning
            for reference in references:
                compared = same_learning(fast, reference, args.eval_tasks)
                body += f"\n\n## Same learning: `{fast}` against `{reference}`\n\n{compared}"
            curves_figure(fast, references, figure)
            body += f"\n![curves]({os.path.relpath(figure, where)})\n"
    except results.RunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    profiled = profiled_steps(args.runs, labels)
    text = (f"# The engine step: Qwen2.5-Coder-0.5B under Trinity-RFT, one {anchor['gpu']}\n\n"
            f"Written by `python benchmarks/bench_engine_step.py` from the run folders "
            f"{', '.join(f'`{f}`' for f in args.runs)} and the anchor of the same sitting. "
            "Medians over explore steps 2 and later; evaluation: every evaluation of the run."
            f"{profiled}\n\n"
            f"{body}\n\n## The anchor (`benchmarks/engine_anchor.py`, plain PyTorch)\n\n"
            f"{anchor_lines(anchor)}\n")
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Figures of run folders the notebooks print: the first and last steps of each run, held-out
means, a Trinity-RFT folder's start-up, step and memory figures, a seed's runs side by side at
each evaluation."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from mathagent.results import RunError

#: Per-step columns :func:`first_last` summarises, with the names its table shows.
CURVE_COLUMNS = {"rollout_accuracy": "rollout accuracy", "response_length": "reply tokens",
                 "truncated_ratio": "truncated", "kl_loss": "KL"}
#: vLLM's line at the end of its engine's initialisation, with the torch.compile share.
VLLM_INIT = re.compile(r"init engine \(profile, create kv cache, warmup model\) took "
                       r"(?P<total>[\d.]+) s(?: \(compilation: (?P<compile>[\d.]+) s\))?")
RUN_NAME = re.compile(r"^(?P<selector>[a-z_]+)_seed(?P<seed>\d+)$")


def fmt(value: float) -> str:
    """A measured value as the text quotes it: two significant digits below 10 (trailing zero
    kept: ``0.0030``, ``0.90``, ``4.9``), whole numbers from 10 up; ``-`` for NaN (of any
    float type) and ``inf`` / ``-inf`` for a ratio over zero."""
    if value is None:
        return "-"
    value = float(value)
    if math.isnan(value):
        return "-"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == 0:
        return "0"
    if abs(value) >= 10:
        return str(int(round(value)))
    return f"{value:#.2g}".rstrip(".")


def span(values: Iterable[float], decimals: int | None = None) -> str:
    """``"lo-hi"`` of the finite ``values`` (one value when they agree once formatted), each
    formatted by :func:`fmt` or with ``decimals`` decimals."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    if v.size == 0:
        return "-"
    one = (lambda x: f"{x:.{decimals}f}") if decimals is not None else fmt
    lo, hi = one(v.min()), one(v.max())
    return lo if lo == hi else f"{lo}-{hi}"


def _read_csv(file: Path, index_col: int | None = 0) -> pd.DataFrame:
    if not file.is_file():
        raise RunError(f"{file}: no such file")
    return pd.read_csv(file, index_col=index_col)


def _row(table: pd.DataFrame, name: str, file: Path) -> pd.Series:
    hits = [i for i in table.index if str(i).startswith(name)]
    if not hits:
        raise RunError(f"{file}: no row {name!r}; rows are {list(table.index)}")
    return table.loc[hits[0]].astype(float)


# --------------------------------------------------------------------------------------
# Curves: the first and last steps of every run
# --------------------------------------------------------------------------------------


def first_last(table: pd.DataFrame, window: int = 10) -> pd.DataFrame:
    """Per run (``selector, seed``): steps trained, and for each of :data:`CURVE_COLUMNS`
    present the mean over the first and the last ``window`` training steps (``ratio``: last
    over first rollout accuracy), then the held-out accuracy at step 0 and at the run's last
    evaluation (and which step that was). Values are strings (:func:`fmt`)."""
    missing = [c for c in ("selector", "seed", "step", "rollout_accuracy", "eval_accuracy")
               if c not in table]
    if missing:
        raise RunError(f"tidy table: missing column(s) {missing}")
    rows = []
    for (sel, seed), run in table.groupby(["selector", "seed"], sort=True):
        train = run[run["step"] > 0]
        last = int(train["step"].max())
        head, tail = train[train["step"] <= window], train[train["step"] > last - window]
        row = {"selector": sel, "seed": seed, "steps": str(last)}
        for col, name in CURVE_COLUMNS.items():
            if col in run and train[col].notna().any():
                row[f"{name}, first {window}"] = fmt(head[col].mean())
                row[f"{name}, last {window}"] = fmt(tail[col].mean())
            if col == "rollout_accuracy":
                with np.errstate(divide="ignore", invalid="ignore"):  # a zero start: inf, "-"
                    ratio = tail[col].mean() / head[col].mean()
                row["rollout accuracy, last / first"] = fmt(ratio)
        evals = run.dropna(subset=["eval_accuracy"]).sort_values("step")
        if len(evals):
            first_eval = evals[evals["step"] == 0]["eval_accuracy"]
            row["held-out, step 0"] = f"{first_eval.iloc[0]:.3f}" if len(first_eval) else "-"
            row["held-out, last"] = f"{evals['eval_accuracy'].iloc[-1]:.3f}"
            row["last eval step"] = str(int(evals["step"].iloc[-1]))
        rows.append(row)
    return pd.DataFrame(rows).set_index(["selector", "seed"])


def eval_means(table: pd.DataFrame, steps: Sequence[int] | None = None) -> pd.DataFrame:
    """Held-out accuracy per selector (rows) and eval step (columns): the mean over the seeds
    that have that evaluation, three decimals, and how many seeds that is (``n=``)."""
    ev = table.dropna(subset=["eval_accuracy"])
    if steps is not None:
        ev = ev[ev["step"].isin(steps)]
    g = ev.groupby(["selector", "step"])["eval_accuracy"]
    out = (g.mean().map(lambda v: f"{v:.3f}") + " (n=" + g.size().astype(str) + ")")
    return out.unstack("step").rename_axis(columns="eval step")


# --------------------------------------------------------------------------------------
# A Trinity-RFT results folder: start-up, phases, memory
# --------------------------------------------------------------------------------------


def vllm_init(folder: str | Path) -> pd.DataFrame:
    """Seconds of vLLM's engine initialisation and of its torch.compile share, per run folder
    of ``folder`` (from each ``train_log_excerpt.txt``)."""
    folder = Path(folder)
    rows = {}
    for excerpt in sorted(folder.glob("*/train_log_excerpt.txt")):
        hit = VLLM_INIT.search(excerpt.read_text(errors="replace"))
        if hit is None:
            raise RunError(f"{excerpt}: no line 'init engine (profile, create kv cache, "
                           "warmup model) took ...' of vLLM")
        rows[excerpt.parent.name] = {
            "engine init, s": float(hit["total"]),
            "torch.compile, s": float(hit["compile"]) if hit["compile"] else np.nan}
    if not rows:
        raise RunError(f"{folder}: no run folder with a train_log_excerpt.txt")
    return pd.DataFrame(rows)


def pair_peaks(memory: pd.DataFrame) -> pd.Series:
    """GiB per pair of runs that shared the GPU (same seed): the sum of the two runs' peaks
    of all their processes, from ``gpu_memory.csv``'s columns ``<selector>_seed<n>``."""
    row = _row(memory, "run, all processes", Path("gpu_memory.csv"))
    seeds: dict[str, float] = {}
    for run, gib in row.items():
        m = RUN_NAME.match(str(run))
        if m is None:
            raise RunError(f"gpu_memory.csv: column {run!r} is not <selector>_seed<n>")
        seeds[f"seed {m['seed']}"] = seeds.get(f"seed {m['seed']}", 0.0) + float(gib)
    return pd.Series(seeds)


def engine_timing(folder: str | Path) -> pd.Series:
    """The start-up, step and memory figures of a Trinity-RFT results folder, each the range
    over its runs: minutes from ``train`` to each milestone, vLLM's initialisation and
    torch.compile seconds, median seconds of each phase over steps 1+, and peak GPU memory
    (per role, and a pair's two runs added)."""
    folder = Path(folder)
    start_file, phase_file = folder / "startup.csv", folder / "phase_times.csv"
    memory_file = folder / "gpu_memory.csv"
    start, phases = _read_csv(start_file), _read_csv(phase_file)
    memory = _read_csv(memory_file)
    vllm = vllm_init(folder)
    runner = _row(start, "first workflow runner ready", start_file)
    evaluation = _row(start, "step-0 evaluation starts", start_file)
    facts = {
        "minutes to the step-0 evaluation": span(evaluation, 1),
        "minutes to step 1": span(_row(start, "step 1 starts", start_file), 1),
        "minutes to the trainer's workers": span(_row(start, "trainer workers ready",
                                                      start_file), 1),
        "minutes to the vLLM engine": span(_row(start, "vLLM engine ready", start_file), 1),
        "vLLM engine init, s": span(vllm.loc["engine init, s"], 0),
        "of which torch.compile, s": span(vllm.loc["torch.compile, s"], 0),
        "minutes from the first runner to the step-0 evaluation": span(evaluation - runner, 1),
        "whole step, s": span(_row(phases, "whole step", phase_file), 0),
        "rollout phase, s": span(_row(phases, "rollout phase", phase_file), 1),
        "training step, s": span(_row(phases, "training step", phase_file), 1),
        "weight sync, s": span(_row(phases, "weight sync", phase_file), 1),
        "evaluation, s": span(_row(phases, "evaluation", phase_file), 1),
        "vLLM peak, GiB": span(_row(memory, "vLLM", memory_file), 1),
        "trainer peak, GiB": span(_row(memory, "trainer", memory_file), 0),
        "a pair's two runs, peaks added, GiB": span(pair_peaks(memory), 0),
    }
    return pd.Series(facts, name=folder.name)


def paired_evaluations(folder: str | Path, studied: str = "difficulty_based",
                       baseline: str = "random",
                       eval_taskset: str | None = None) -> pd.DataFrame:
    """The two selectors side by side where a seed has a run of each in results folder
    ``folder``: per seed and evaluation step both made, each one's held-out accuracy, the
    difference (``studied`` minus ``baseline``), a standard error of that difference and the
    difference in it, ``z``. The error is :func:`mathagent.metrics.eval_se` of each run over
    the tasks its event files say it evaluated, in quadrature: an upper bound on the
    evaluations' noise (both runs answer the same tasks, so their difference varies less than
    that), so ``z`` is, in size, at least what the runs' weights differ by in the evaluation's
    noise. It says nothing of whether the selectors differ: that is the spread over seeds
    (:func:`mathagent.verdict.who_won`). Accuracies with three decimals, the error with four,
    ``z`` with one. No row where no seed has both yet. ``eval_taskset`` picks the held-out set
    where the runs evaluated several."""
    from mathagent.metrics import eval_se
    from mathagent.results import read_run, read_scalars

    columns = ["seed", "step", baseline, studied, "difference", "evaluation SE, at most",
               "z (size at least)"]
    evals: dict[tuple[int, str, int], tuple[float, float]] = {}
    made_by: dict[tuple[str, int], Path] = {}
    for run in run_folders([folder]):
        table = read_run(run, eval_taskset=eval_taskset)
        if table.empty:
            continue
        selector, seed = str(table["selector"].iloc[0]), int(table["seed"].iloc[0])
        if selector not in (studied, baseline):
            continue
        if (selector, seed) in made_by:
            raise RunError(f"{run}: {selector} seed {seed} a second time (also "
                           f"{made_by[(selector, seed)]})")
        made_by[(selector, seed)] = run
        made = table.dropna(subset=["eval_accuracy"])
        if made.empty:
            continue
        if "eval_taskset" not in made or made["eval_taskset"].isna().all():
            raise RunError(f"{run}: its held-out evaluations name no eval taskset (no "
                           "eval_taskset column or params.json key)")
        tag = f"eval/{made['eval_taskset'].dropna().iloc[0]}/finished_task_count"
        scalars = read_scalars(run)
        if scalars.empty:
            raise RunError(f"{run}: no TensorBoard event files, which give the number of tasks "
                           "each held-out accuracy is over")
        tasks = scalars[scalars["tag"] == tag].set_index("step")["value"]
        for step, accuracy in made[["step", "eval_accuracy"]].itertuples(index=False):
            if step not in tasks.index:
                raise RunError(f"{run}: no {tag} at step {int(step)}: the number of tasks its "
                               "held-out accuracy is over")
            evals[(seed, selector, int(step))] = (float(accuracy), float(tasks[step]))
    rows = []
    for seed, selector, step in sorted(evals):
        if selector != baseline or (seed, studied, step) not in evals:
            continue
        (b, nb), (a, na) = evals[(seed, baseline, step)], evals[(seed, studied, step)]
        se = float(np.hypot(eval_se(a, na), eval_se(b, nb)))
        rows.append([seed, step, f"{b:.3f}", f"{a:.3f}", f"{a - b:+.3f}", f"{se:.4f}",
                     f"{(a - b) / se:+.1f}" if se > 0 else "-"])
    return pd.DataFrame(rows, columns=columns)


def whole_step(folder: str | Path) -> str:
    """The range of the median whole-step seconds of a results folder's runs
    (``phase_times.csv`` of Trinity runs, ``step_times.csv`` of ``train-local`` runs)."""
    folder = Path(folder)
    for name in ("phase_times.csv", "step_times.csv"):
        if (folder / name).is_file():
            table = _read_csv(folder / name)
            return span(_row(table, "whole step", folder / name), 1)
    raise RunError(f"{folder}: neither phase_times.csv nor step_times.csv")


def run_folders(results_folders: Iterable[str | Path]) -> list[Path]:
    """The run folders (those with a ``params.json``) of each results folder, sorted."""
    return sorted(p.parent for folder in results_folders
                  for p in Path(folder).glob("*_seed*/params.json"))

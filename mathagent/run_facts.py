"""The figures the notebooks' results paragraphs cite, computed from committed run folders.

A results paragraph of notebook 04 or 05 interprets; the numbers it quotes come from here,
printed by the cell above it. Every value is a string in the form the text quotes it
(:func:`fmt`, ranges ``lo-hi`` from :func:`span`), so a reader can find the paragraph's number
in the table. What is read:

* tidy per-step tables (:func:`first_last`): per run, the first and last ``window`` training
  steps' means of rollout accuracy, reply length, truncation and KL, and the held-out accuracy
  at step 0 and at the last evaluation;
* a Trinity-RFT results folder (:func:`engine_timing`): ``startup.csv``, ``phase_times.csv``,
  ``gpu_memory.csv`` and every run's ``train_log_excerpt.txt`` (vLLM's engine initialisation
  and its torch.compile seconds, as vLLM logs them);
* a ``train-local`` run's ``samples.jsonl`` (:func:`saved_replies`, :func:`replies_report`):
  the replies it kept of its first and last steps, so a shortcut the numbers suggest can be read,
  and (:func:`batch_levels`) the levels of the tasks those steps drew;
* an experiment's results folder (:func:`experiment_progress`, :func:`paired_evaluations`):
  which planned runs exist, a seed's two selectors side by side at each evaluation, and the
  difference against a bound on the evaluations' standard error (each run's event files give
  its task count);
* a Trinity run's selector (:func:`run_selector`, :func:`saved_selector`,
  :func:`replay_selector`, :func:`beliefs_by_level`): rebuilt from the run's
  ``launched_config.yaml`` over the taskset, as the run started it; for the package's
  ``BOTSSelector``, loaded with the beliefs about every task it saved in the run's
  ``explorer_meta.json`` (Trinity's own selectors save their position only) and read level by
  level; or replayed step by step on the pass rates its buffer recorded.

Bad input is one :class:`~mathagent.results.RunError` naming the file and what is missing.
"""

from __future__ import annotations

import json
import math
import os
import re
import textwrap
from collections.abc import Iterable, Mapping, Sequence
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


def experiment_progress(folder: str | Path, configs: Mapping[str, str | Path],
                        seeds: Sequence[int]) -> pd.DataFrame:
    """Where an experiment stands: one row per planned run (each selector of ``configs``, its
    config file, x ``seeds``), in the plan's order, with the last step it explored out of its
    config's ``buffer.total_steps`` and its held-out accuracy at each evaluation (three
    decimals; ``-`` where it has none). A planned run not in ``folder`` yet says so. Refused in
    one line: a run in ``folder`` that the plan does not name, and a run folder (one with a
    ``params.json``) that the folder's tidy table leaves out (drawn before it came)."""
    import yaml

    from mathagent.results import has_runs, load_runs, selector_label

    folder, seeds = Path(folder), [int(s) for s in seeds]
    plan = f"({', '.join(configs)} x seeds {', '.join(map(str, seeds))})"
    runs: dict[tuple[str, int], pd.DataFrame] = {}
    if has_runs(folder):
        table = load_runs([folder], progress=False)
        for (selector, seed), run in table.groupby(["selector", "seed"], sort=False):
            if selector not in configs or int(seed) not in seeds:
                raise RunError(f"{folder}: {selector} seed {seed} is not a run of the plan {plan}")
            runs[(str(selector), int(seed))] = run
        for params in sorted(folder.glob("*/params.json")):
            try:
                said = json.loads(params.read_text())
                key = (selector_label(str(said["selector"])), int(said["seed"]))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                raise RunError(f"{params}: no selector and seed") from None
            if key not in runs:
                raise RunError(f"{params.parent}: {key[0]} seed {key[1]} is not in {folder}'s "
                               "table: draw the folder again with it")
    rows = []
    for selector, config in configs.items():
        try:
            text = Path(config).read_text()
        except OSError:
            raise RunError(f"{config}: no such config file") from None
        try:
            total = int(yaml.safe_load(text)["buffer"]["total_steps"])
        except yaml.YAMLError:
            raise RunError(f"{config}: not YAML") from None
        except (KeyError, TypeError, ValueError):
            raise RunError(f"{config}: no buffer.total_steps") from None
        for seed in seeds:
            row = {"selector": selector, "seed": seed}
            table = runs.get((selector, seed))
            if table is None:
                row["last step explored"] = f"not run yet (of {total})"
            else:
                row["last step explored"] = f"{int(table['step'].max())} of {total}"
                evals = table.dropna(subset=["eval_accuracy"]).sort_values("step")
                for step, acc in evals[["step", "eval_accuracy"]].values:
                    row[f"held-out accuracy, step {int(step)}"] = f"{acc:.3f}"
            rows.append(row)
    out = pd.DataFrame(rows)
    held = sorted((c for c in out.columns if c.startswith("held-out")),
                  key=lambda c: int(c.rsplit(" ", 1)[1]))
    return out[["selector", "seed", "last step explored", *held]].fillna("-")


def run_selector(run: str | Path, taskset: str | Path):
    """The selector of Trinity run folder ``run`` as the run started it: built over
    ``taskset`` (the folder its ``launched_config.yaml`` trained on, here) with that config's
    selector type, feature keys, kwargs and seed, through
    :func:`mathagent.selectors.make_selector`. A Trinity selector seeds each draw from its
    seed and position, so its first draw is the run's first batch. Refused in one line: a
    config without a data selector, a taskset that cannot be read."""
    import yaml

    from mathagent.selectors import make_selector
    from mathagent.tasks.io import TasksetError, load_taskset

    config = Path(run) / "launched_config.yaml"
    try:
        taskset_cfg = yaml.safe_load(config.read_text())["buffer"]["explorer_input"]["taskset"]
        selector = taskset_cfg["data_selector"]
        name, keys = selector["selector_type"], list(selector.get("feature_keys") or [])
        kwargs, seed = dict(selector.get("kwargs") or {}), int(selector.get("seed", 0))
    except OSError:
        raise RunError(f"{config}: no such file") from None
    except (yaml.YAMLError, KeyError, TypeError, ValueError):
        raise RunError(f"{config}: no buffer.explorer_input.taskset.data_selector with "
                       "selector_type") from None
    try:
        dataset = load_taskset(taskset, str(taskset_cfg.get("split", "train")), keys)
    except TasksetError as exc:
        raise RunError(str(exc)) from None
    return make_selector(name, dataset, keys or None, seed=seed, **kwargs)


def _saved_state(run: str | Path) -> dict:
    """The taskset selector state that Trinity run folder ``run`` saved
    (``explorer_meta.json``), refused in one line when the file or the state is missing."""
    meta = Path(run) / "explorer_meta.json"
    try:
        return json.loads(meta.read_text())["taskset_states"][0]
    except OSError:
        raise RunError(f"{meta}: no such file (the explorer's saved state)") from None
    except (json.JSONDecodeError, KeyError, IndexError, TypeError):
        raise RunError(f"{meta}: no taskset_states[0] (the taskset's selector state)") from None


def saved_selector(run: str | Path, taskset: str | Path):
    """The selector of Trinity run folder ``run`` as the run left it: :func:`run_selector`
    loaded with the state the run saved (``explorer_meta.json``). Returns the
    :class:`~mathagent.selectors.SelectorDriver`: its posteriors, capability and next batch
    are what a resumed run would start from. Refused in one line: no saved state, a state of
    the position only (what Trinity's own selectors save), a taskset the state does not fit,
    and whatever :func:`run_selector` refuses."""
    meta = Path(run) / "explorer_meta.json"
    state = _saved_state(run)
    if "alphas" not in state:
        raise RunError(f"{meta}: the selector saved its position only ({sorted(state)}), as "
                       "Trinity's own selectors do: no beliefs to read")
    driver = run_selector(run, taskset)
    try:
        driver.load_state_dict(state)
    except ValueError as exc:
        raise RunError(f"{meta}: {exc} ({taskset})") from None
    return driver


#: A Trinity run's per-step, per-task pass rates (``scripts/gpu/buffer_samples.py``).
BUFFER_TASKS = "buffer_tasks.csv"


def replay_selector(run: str | Path, taskset: str | Path, lag: int = 0):
    """Replay the selection of Trinity run folder ``run`` on a CPU: :func:`run_selector` draws
    each step's batch, and after it is fed the pass rates that ``pass_rate_calculator`` fed the
    run's selector (the run's ``buffer_tasks.csv``, in the operator's order). Returns the table
    (per step: ``tasks`` in the run's batch, ``same tasks`` the replay drew of them) and the
    selector after the last step, whose state a run that saved one (:func:`saved_selector`)
    can be set beside. ``lag`` feeds each step's pass rates that many steps late, as a
    selector fed before its next draw would not be (the selector returned then lacks the last
    ``lag`` steps). Refused in one line: a negative lag, no table (a run collected before it
    was written), a table without its columns, tasks without a task index."""
    if lag < 0:
        raise RunError(f"replay_selector: lag {lag}: a step's pass rates cannot come before it")
    file = Path(run) / BUFFER_TASKS
    try:
        fed = pd.read_csv(file, dtype={"taskset": str})
    except FileNotFoundError:
        raise RunError(f"{file}: no such file (runs collected before collect wrote it have "
                       "none)") from None
    missing = {"step", "taskset", "task_index", "pass_rate"} - set(fed.columns)
    if missing:
        raise RunError(f"{file}: no column(s) {', '.join(sorted(missing))}")
    if fed["task_index"].isna().any() or fed["taskset"].nunique() > 1:
        raise RunError(f"{file}: every row needs the task's index in one taskset (the buffer's "
                       "experiences had no info['task_index'], or came from several tasksets)")
    driver = run_selector(run, taskset)
    rows, waiting = [], []
    for step, batch in fed.groupby("step", sort=True):
        logged = batch["task_index"].astype(int).tolist()
        drawn = driver.get_indices(len(logged))
        rows.append({"step": int(step), "tasks": len(logged),
                     "same tasks": len(set(drawn) & set(logged))})
        waiting.append((logged, batch["pass_rate"].astype(float).tolist()))
        while len(waiting) > lag:
            driver.feedback(*waiting.pop(0))
    return pd.DataFrame(rows, columns=["step", "tasks", "same tasks"]), driver


#: Columns of :func:`replays`.
REPLAY_COLUMNS = ("run", "steps", "tasks", "drawn by the replay", "state as saved")


def replays(runs: Iterable[str | Path], taskset: str | Path) -> pd.DataFrame:
    """Each Trinity run folder of ``runs`` that kept its pass rates (``buffer_tasks.csv``),
    replayed by :func:`replay_selector`: its ``steps``, the ``tasks`` of its batches, how many
    of them the replay drew (``drawn by the replay``; all of them when the run's selection is
    its seed and the pass rates alone), and ``state as saved``: whether the replayed selector
    ends in the state the run saved (None for a selector that saves its position only). Runs
    without the table are left out; one with the table but no saved state
    (``explorer_meta.json``) is refused in one line."""
    rows = []
    for run in map(Path, runs):
        if not (run / BUFFER_TASKS).is_file():
            continue
        table, driver = replay_selector(run, taskset)
        same = None
        if "alphas" in _saved_state(run):
            saved, replayed = saved_selector(run, taskset).state_dict(), driver.state_dict()
            same = sorted(saved) == sorted(replayed) and all(
                np.array_equal(np.asarray(replayed[key]), np.asarray(value))
                for key, value in saved.items())
        rows.append(dict(zip(REPLAY_COLUMNS, (run.name, len(table), int(table["tasks"].sum()),
                                              int(table["same tasks"].sum()), same),
                             strict=True)))
    return pd.DataFrame(rows, columns=list(REPLAY_COLUMNS))


def beliefs_by_level(driver, level: str = "difficulty", next_batch: int = 16) -> pd.DataFrame:
    """What a difficulty-based selector believes, per value of the taskset's ``level`` column:
    ``tasks``; ``reference``, the mean of its strong reference pass rate (its last feature
    column); ``belief``, the mean of its posterior mean pass rates and ``sd`` of their
    standard deviations; ``no success``, how many tasks it holds no success for (alpha
    still the prior's 1); ``next batch``, how many tasks of that level its next draw of
    ``next_batch`` picks. The draw advances ``driver`` (a Trinity selector's draw is seeded
    from its seed and position, so it is the batch a resumed run would train on next)."""
    table = driver.posterior_table()
    if level not in driver.dataset.column_names:
        raise RunError(f"beliefs_by_level: the taskset has no column {level!r}")
    table["level"] = driver.dataset[level]
    table["reference"] = table[driver.feature_keys[-1]]
    table["no success"] = table["alpha"] == 1.0
    picked = table.loc[driver.get_indices(next_batch), "level"].value_counts()
    out = table.groupby("level").agg(tasks=("task", "size"), reference=("reference", "mean"),
                                     belief=("mean", "mean"), sd=("sd", "mean"),
                                     **{"no success": ("no success", "sum")})
    out["next batch"] = picked.reindex(out.index, fill_value=0)
    return out.reset_index()


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


# --------------------------------------------------------------------------------------
# Saved replies
# --------------------------------------------------------------------------------------


def saved_replies(run: str | Path, steps: int | None = 2) -> pd.DataFrame:
    """The replies a run kept (``samples.jsonl``) of its first and last ``steps`` steps (every
    kept step where ``steps`` is None):
    ``step, question, truth, reward, words, response``. ``train-local`` keeps them; a Trinity
    run keeps them where ``collect`` could read its experience buffer
    (``scripts/gpu/buffer_samples.py``, no truth). A run that keeps none raises
    :class:`RunError` saying so."""
    file = Path(run) / "samples.jsonl"
    if not file.is_file():
        raise RunError(f"{Path(run)}: no samples.jsonl (this run kept no replies)")
    records = []
    for n, line in enumerate(file.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            records.append({k: rec[k] for k in ("step", "question", "truth", "response",
                                                "reward")})
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise RunError(f"{file}: line {n} is not a saved reply "
                           f"({type(exc).__name__}: {exc})") from None
    if not records:
        raise RunError(f"{file}: no replies")
    table = pd.DataFrame(records)
    kept = sorted(table["step"].unique())
    chosen = set(kept) if steps is None else set(kept[:steps]) | set(kept[-steps:])
    out = table[table["step"].isin(chosen)].copy()
    out["words"] = out["response"].str.split().str.len()
    return out[["step", "question", "truth", "reward", "words", "response"]].reset_index(
        drop=True)


def kept_batches(run: str | Path, tasks: pd.DataFrame) -> dict[int, list]:
    """Per step that run folder ``run`` kept replies of (``samples.jsonl``), the rows of the
    taskset split ``tasks`` it drew (index labels, in the order first asked), matched by
    question text. A question the split does not hold raises :class:`RunError` naming the
    file and step."""
    if "question" not in tasks.columns:
        raise RunError("the taskset split has no column question")
    row_of = pd.Series(tasks.index, index=tasks["question"]).groupby(level=0).first()
    batches = {}
    for step, group in saved_replies(run, steps=None).groupby("step", sort=True):
        asked = list(dict.fromkeys(group["question"]))
        unknown = [q for q in asked if q not in row_of.index]
        if unknown:
            raise RunError(f"{Path(run) / 'samples.jsonl'}: step {step} asked "
                           f"{unknown[0]!r}, which the taskset split does not hold")
        batches[int(step)] = row_of.loc[asked].tolist()
    return batches


def batch_levels(runs: Iterable[str | Path], tasks: pd.DataFrame,
                 columns: Sequence[str] = ("difficulty", "qwen_bare_pass_rate")) -> pd.DataFrame:
    """What each run's kept steps drew: per run folder (``samples.jsonl``) and kept step, the
    number of distinct tasks and the mean of each of ``columns`` over them, read from the
    taskset split ``tasks`` the run trained on (:func:`kept_batches`), with the range of the
    first (``difficulty``: the level each task was made at). So a selector that steers its
    batches shows as levels moving from the first step to the last. A question the split does
    not hold raises :class:`RunError` naming the file and step."""
    missing = [c for c in ("question", *columns) if c not in tasks.columns]
    if missing:
        raise RunError(f"the taskset split has no column {', '.join(missing)}")
    rows = []
    for run in runs:
        for step, drawn_rows in kept_batches(run, tasks).items():
            drawn = tasks.loc[drawn_rows, list(columns)]
            first = drawn[columns[0]]
            rows.append({"run": Path(run).name, "step": step, "tasks": len(drawn_rows),
                         **{f"mean {c}": round(float(drawn[c].mean()), 2) for c in columns},
                         f"{columns[0]} range": f"{first.min():g}-{first.max():g}"})
    return pd.DataFrame(rows)


def replies_text(replies: pd.DataFrame, width: int = 100, max_chars: int = 240,
                 tasks: int | None = None) -> str:
    """The replies of :func:`saved_replies` as text: per step, each task's question once and
    then its replies (``train-local`` keeps two replies of one task a step; a Trinity run one
    reply of each of the batch's tasks). ``tasks``: at most this many tasks a step, the rest
    counted in one line."""
    lines = []
    replies = replies.assign(question=replies["question"].fillna("(question not kept)"))
    for step, group in replies.groupby("step", sort=True):
        questions = list(dict.fromkeys(group["question"]))
        shown = questions if tasks is None else questions[:tasks]
        for question in shown:
            same = group[group["question"] == question]
            truth = same.iloc[0]["truth"]  # Trinity's buffer keeps none (buffer_samples.py)
            known = truth is not None and not (isinstance(truth, float) and math.isnan(truth))
            lines.append(f"step {step}: {question}" + (f" (truth {truth})" if known else ""))
            for _, r in same.iterrows():
                text = " ".join(str(r["response"]).split())
                if len(text) > max_chars:
                    text = text[:max_chars] + " ..."
                body = textwrap.fill(text, width, initial_indent="      ",
                                     subsequent_indent="      ")
                lines.append(f"  reward {r['reward']:g}, {r['words']} words:\n{body}")
        if len(shown) < len(questions):
            left = group[group["question"].isin(questions[len(shown):])]
            lines.append(f"  ... {len(questions) - len(shown)} more tasks of step {step} "
                         f"(rewarded: {int((left['reward'] > 0).sum())} of their {len(left)} "
                         "replies)")
    return "\n".join(lines)


def runs_keeping_replies(folders: Iterable[str | Path]) -> dict[str, bool]:
    """Which run folders kept replies (a ``samples.jsonl``), by ``<results folder>/<run>``."""
    return {f"{Path(f).parent.name}/{Path(f).name}": (Path(f) / "samples.jsonl").is_file()
            for f in folders}


def run_folders(results_folders: Iterable[str | Path]) -> list[Path]:
    """The run folders (those with a ``params.json``) of each results folder, sorted."""
    return sorted(p.parent for folder in results_folders
                  for p in Path(folder).glob("*_seed*/params.json"))


def replies_report(results_folders: Sequence[str | Path], shown: Sequence[str],
                   steps: int = 2, tasks: int | None = None) -> str:
    """Which runs of ``results_folders`` kept replies and which did not, then the replies of
    the first and last ``steps`` steps (:func:`replies_text`, at most ``tasks`` tasks a step)
    of each run named in ``shown``, from the first results folder where that run kept them; a
    shown run that kept none anywhere is named as such. No run folder at all is a
    :class:`RunError`."""
    folders = [Path(f) for f in results_folders]
    runs = run_folders(folders)
    if not runs:
        raise RunError(f"no run folders under {', '.join(map(str, folders))}")
    kept = runs_keeping_replies(runs)
    lines = [f"kept replies: {', '.join(r for r, yes in kept.items() if yes) or 'none'}",
             f"no replies:   {', '.join(r for r, yes in kept.items() if not yes) or 'none'}"]
    for name in shown:
        where = next((f for f in folders if kept.get(f"{f.name}/{name}")), None)
        if where is None:
            lines.append(f"\n{name}: no saved replies in {', '.join(f.name for f in folders)}")
            continue
        lines.append(f"\n{'=' * 20} {where.name}/{name} {'=' * 20}")
        lines.append(replies_text(saved_replies(where / name, steps), tasks=tasks))
    return "\n".join(lines)


def runs_made_here(root: str | Path | None = None) -> list[Path]:
    """The training runs made in this checkout, under ``runs/`` (``root``, default
    :func:`mathagent.paths.runs_dir`): every ``train-local`` run folder
    (``train_local/<stamp>-...``, by name, so by the time it began; one killed before its
    first step is listed too), then the Trinity-RFT runs found under any ``smoke`` folder (the
    short runs of notebook 04 and ``launch.run_smoke``), by path. While ``python -m mathagent
    tutorial`` runs, the notebooks' scratch folders are in its run folder (``--out``, which
    may lie outside ``runs/``): its ``smoke`` folders are searched too. Simulated sweeps are not
    training runs and are left out."""
    from mathagent import paths
    from mathagent.results import find_runs, has_runs

    root = Path(root) if root is not None else paths.runs_dir()
    found = sorted(d for d in (root / paths.TRAIN_LOCAL_RUNS).glob("*") if d.is_dir())
    searched = [root]
    tutorial_run = os.environ.get(paths.RUN_DIR_ENV)
    if tutorial_run and not Path(tutorial_run).resolve().is_relative_to(root.resolve()):
        searched.append(Path(tutorial_run))
    for where in searched:
        for smoke in sorted(p for p in where.rglob(paths.SMOKE_RUNS) if p.is_dir()):
            if has_runs(smoke):
                found += [r for r in find_runs(smoke) if r not in found]
    return found


def _made_by(run: Path) -> str:
    """``train-local`` or ``Trinity-RFT``, from the ``kind`` the run's ``params.json`` records
    (``train-local`` or ``train``); without one, from the files the run holds."""
    try:
        kind = json.loads((run / "params.json").read_text()).get("kind")
    except (OSError, ValueError):
        kind = None
    if kind in ("train-local", "train"):
        return "train-local" if kind == "train-local" else "Trinity-RFT"
    return "train-local" if (run / "metrics.csv").is_file() else "Trinity-RFT"


def runs_overview(runs: Iterable[str | Path], source: str,
                  relative_to: str | Path) -> pd.DataFrame:
    """One row per run: where it comes from (``source``), whether ``train-local`` or
    Trinity-RFT made it, its folder relative to ``relative_to`` (else in full), selector, seed,
    last step, held-out accuracy at the first and the last evaluation (with their steps) and
    the mean rollout accuracy of the last step that has one. A run with nothing to read yet is
    a row whose ``note`` names the file at fault."""
    from mathagent.results import read_run

    rows = []
    for run in map(Path, runs):
        try:
            name = str(run.relative_to(relative_to))
        except ValueError:
            name = str(run)
        row = {"source": source, "made by": _made_by(run), "run": name}
        try:
            table = read_run(run)
            if table.empty:
                raise RunError(f"{run}: its table has no rows yet")
        except RunError as err:
            rows.append({**row, "steps": 0, "note": str(err)})
            continue
        evals = table.dropna(subset=["eval_accuracy"]).sort_values("step")
        rollout = table.dropna(subset=["rollout_accuracy"])
        row.update({"selector": table["selector"].iloc[0], "seed": int(table["seed"].iloc[0]),
                    "steps": int(table["step"].max())})
        if len(rollout):
            last = rollout[rollout["step"] == rollout["step"].max()]
            row["rollout accuracy, last step"] = f"{last['rollout_accuracy'].mean():.3f}"
        if len(evals):
            first_eval, last_eval = evals.iloc[0], evals.iloc[-1]
            row["held-out, first eval"] = \
                f"{first_eval['eval_accuracy']:.3f} (step {int(first_eval['step'])})"
            row["held-out, last eval"] = \
                f"{last_eval['eval_accuracy']:.3f} (step {int(last_eval['step'])})"
        rows.append(row)
    columns = ["source", "made by", "run", "selector", "seed", "steps", "held-out, first eval",
               "held-out, last eval", "rollout accuracy, last step", "note"]
    table = pd.DataFrame(rows, columns=columns).dropna(axis=1, how="all")
    return table.fillna("-")


def your_runs(committed: Iterable[str | Path],
              root: str | Path | None = None) -> tuple[str, pd.DataFrame]:
    """A line saying how many training runs were made here (:func:`runs_made_here`) and one
    :func:`runs_overview` table of them above the committed run folders of the results
    folders ``committed``."""
    from mathagent import paths

    root = Path(root) if root is not None else paths.runs_dir()
    mine = runs_made_here(root)
    line = f"{len(mine)} training run(s) made here under {root}" + (
        "" if mine else ": notebook 04 makes them (train-local on the CPU, Trinity-RFT on a GPU)")
    table = pd.concat([runs_overview(mine, "made here", root),
                       runs_overview(run_folders(committed), "committed", paths.RESULTS_DIR)],
                      ignore_index=True).fillna("-")
    return line, table

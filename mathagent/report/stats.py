"""The numbers of a report, computed from a results folder's runs.

The runs are read into the tidy table of :mod:`mathagent.results` (one row per selector,
seed and step). From it, per arm (a selector) and seed:

* the held-out accuracy at every evaluation (:func:`per_seed`);
* each arm's mean over its seeds and the standard error of that mean, the seeds' sample
  standard deviation over the square root of their number (:func:`arm_means`; ``n/a`` with
  one seed: one run has no spread);
* the difference of two arms at the last evaluation every run reached, its standard error
  from both arms' spreads (Welch, :func:`mathagent.metrics.difference`), the difference in
  standard errors, and the power: the smallest difference these seeds can show at two
  standard errors (:func:`differences`);
* what training did to the batches and the replies: rollout accuracy, effective task ratio
  and reply length (:func:`behaviour`);
* per run: steps trained, GPU model and wall time (:func:`runs_table`).

:func:`named_values` gives each number a name the hand-written prose cites.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from mathagent import metrics
from mathagent.report.spec import Experiment, ReportError
from mathagent.results import RunError, read_run

#: A difference of at least this many standard errors is one the seeds can show.
SHOWN = metrics.SHOWN_SE
NA = "n/a"


def acc(value: float) -> str:
    """An accuracy, a mean or a standard error as the report writes it: three decimals."""
    return "-" if value is None or not np.isfinite(value) else f"{value:.3f}"


def se_text(value: float) -> str:
    """A standard error, ``n/a`` where there is none (one seed)."""
    return NA if value is None or not np.isfinite(value) else f"{value:.3f}"


def one_decimal(value: float) -> str:
    return NA if value is None or not np.isfinite(value) else f"{value:.1f}"


def p_text(value: float) -> str:
    """A p-value as the report writes it: two decimals, ``< 0.01`` below that."""
    if value is None or not np.isfinite(value):
        return NA
    return "< 0.01" if value < 0.01 else f"{value:.2f}"


def signed(value: float, decimals: int = 3) -> str:
    return NA if value is None or not np.isfinite(value) else f"{value:+.{decimals}f}"


def _run_folders(folder: Path) -> list[Path]:
    """The run folders (with a ``params.json``), by name; not a hidden one: the experiment
    command lays a run out under a hidden name and renames it once whole."""
    return sorted(p.parent for p in folder.glob("*/params.json")
                  if not p.parent.name.startswith("."))


def read_runs(exp: Experiment) -> pd.DataFrame:
    """Every run of the experiment in one tidy table with a ``run`` column (the run folder's
    name, or ``<arm> seed <n>`` for runs kept as one table). Refused in one line: no runs, a
    run of a selector that is not an arm, a run folder that is not one of the spec's runs
    (``experiment:``) or not with its arm's selector and seed, an arm and seed twice."""
    try:
        if exp.table:
            table = read_run(exp.folder / exp.table)
            table["run"] = table["selector"].astype(str) + " seed " + table["seed"].astype(str)
            tables = [table]
        else:
            tables = [read_run(f).assign(run=f.name) for f in _run_folders(exp.folder)]
    except RunError as exc:
        raise ReportError(str(exc)) from None
    if not tables:
        raise ReportError(f"{exp.folder}: no run folders (folders with a params.json) and no "
                          "'table' in experiment.yaml")
    table = pd.concat(tables, ignore_index=True)
    seen: dict[tuple[str, int], str] = {}
    for (run, selector, seed), _ in table.groupby(["run", "selector", "seed"], sort=True):
        if exp.planned and not exp.table:
            _check_planned(exp, str(run), str(selector), int(seed))
        if selector not in exp.arm_names:
            raise ReportError(f"{exp.folder / str(run)}: selector {selector!r} is not an arm of "
                              f"experiment.yaml ({', '.join(exp.arm_names)})")
        key = (str(selector), int(seed))
        if key in seen:
            raise ReportError(f"{exp.folder}: {selector} seed {seed} twice ({seen[key]}, {run})")
        seen[key] = str(run)
    return table


def _check_planned(exp: Experiment, run: str, selector: str, seed: int) -> None:
    """Refuse run folder ``run`` unless the spec plans it with this selector and seed."""
    if run not in exp.planned:
        raise ReportError(f"{exp.folder / run}: not a run of {exp.experiment} (its runs: "
                          f"{', '.join(exp.planned)})")
    if exp.planned[run] != (selector, seed):
        want_selector, want_seed = exp.planned[run]
        raise ReportError(f"{exp.folder / run}: ran selector {selector!r} with seed {seed}; "
                          f"{exp.experiment} plans it as selector {want_selector!r} with seed "
                          f"{want_seed}")


#: Where a run's wall time comes from (:func:`wall_minutes`), as the page explains it.
WALL_SOURCES = {"train": "from `train` to its end (Trinity-RFT)",
                "steps": "the run's step and evaluation times added (`train-local`)"}


def wall_minutes(folder: Path, run: pd.DataFrame) -> tuple[float, str | None]:
    """Minutes from ``train`` to its end (a Trinity run's ``timings.json``: ``train``), else
    the sum of the run's own step and evaluation times (``train-local``'s ``time_step_s`` and
    ``time_eval_s``: ``steps``); NaN and None where neither is there."""
    timings = folder / "timings.json"
    if timings.is_file():
        start = json.loads(timings.read_text()).get("startup_min", {})
        for key in ("train command ends", "last step trained"):
            value = start.get(key)
            if value is not None and math.isfinite(float(value)):
                return float(value), "train"
    columns = [c for c in ("time_step_s", "time_eval_s") if c in run]
    if columns and run[columns].notna().any().any():
        return float(run[columns].sum().sum()) / 60, "steps"
    return math.nan, None


def runs_table(exp: Experiment, table: pd.DataFrame) -> pd.DataFrame:
    """One row per run: ``run, arm, seed, steps`` (trained), ``gpu``, ``wall_min`` and
    ``wall_source`` (:data:`WALL_SOURCES`)."""
    rows = []
    for run, part in table.groupby("run", sort=False):
        trained = part.dropna(subset=["rollout_accuracy"])
        wall, source = wall_minutes(exp.folder / str(run), part)
        rows.append({"run": run, "arm": part["selector"].iloc[0],
                     "seed": int(part["seed"].iloc[0]),
                     "steps": int(trained["step"].max()) if len(trained) else 0,
                     "gpu": exp.gpu(str(run)), "wall_min": wall, "wall_source": source})
    order = {name: i for i, name in enumerate(exp.arm_names)}
    out = pd.DataFrame(rows)
    return out.sort_values(["arm", "seed"], key=lambda c: c.map(order) if c.name == "arm" else c,
                           kind="stable").reset_index(drop=True)


def eval_steps(table: pd.DataFrame) -> list[int]:
    """The steps any run evaluated held-out accuracy at."""
    return sorted(int(s) for s in table.dropna(subset=["eval_accuracy"])["step"].unique())


def per_seed(exp: Experiment, table: pd.DataFrame) -> pd.DataFrame:
    """Held-out accuracy per arm and seed (rows, every planned seed and every seed run) and
    evaluation step (columns); NaN where that run made no evaluation or does not exist."""
    evals = table.dropna(subset=["eval_accuracy"])
    wide = evals.pivot_table(index=["selector", "seed"], columns="step",
                             values="eval_accuracy", aggfunc="last")
    seeds = sorted(set(exp.seeds) | {int(s) for s in table["seed"]})
    index = pd.MultiIndex.from_tuples(
        [(arm, s) for arm in exp.arm_names for s in seeds
         if s in exp.seeds or ((table["selector"] == arm) & (table["seed"] == s)).any()],
        names=["arm", "seed"])
    return wide.reindex(index=index, columns=eval_steps(table))


def progress_table(exp: Experiment, table: pd.DataFrame) -> pd.DataFrame:
    """Every planned run (each arm x each planned seed, and every seed run): ``arm``,
    ``seed``, ``steps trained`` and the held-out accuracy at each evaluation (``step k``:
    three decimals, ``-`` where the run made none), ``not run`` where it has no folder yet."""
    seeds = per_seed(exp, table)
    trained = table.dropna(subset=["rollout_accuracy"]).groupby(["selector", "seed"])["step"].max()
    rows = []
    for (arm, seed), accs in seeds.iterrows():
        ran = (arm, seed) in trained.index
        rows.append([arm, seed, int(trained[(arm, seed)]) if ran else "not run",
                     *(acc(v) if ran else "not run" for v in accs)])
    return pd.DataFrame(rows, columns=["arm", "seed", "steps trained",
                                       *(f"step {s}" for s in seeds.columns)])


def progress(results_dir: str | Path) -> pd.DataFrame:
    """:func:`progress_table` of a results folder: where its experiment stands."""
    from mathagent.report.spec import read_spec

    exp = read_spec(results_dir)
    return progress_table(exp, read_runs(exp))


def final_step(table: pd.DataFrame) -> int | None:
    """The last evaluation every run that evaluated reached (None where none evaluated)."""
    evals = table.dropna(subset=["eval_accuracy"])
    if evals.empty:
        return None
    return int(evals.groupby("run")["step"].max().min())


def _se(values: pd.Series) -> float:
    v = values.dropna()
    return float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else math.nan


def arm_means(seeds: pd.DataFrame) -> pd.DataFrame:
    """Per arm and evaluation step: ``mean``, ``se`` (NaN with one seed) and ``n`` seeds."""
    rows = []
    for arm, part in seeds.groupby(level="arm", sort=False):
        for step in seeds.columns:
            v = part[step].dropna()
            rows.append({"arm": arm, "step": int(step), "n": len(v),
                         "mean": float(v.mean()) if len(v) else math.nan, "se": _se(v)})
    return pd.DataFrame(rows, columns=["arm", "step", "n", "mean", "se"])


def differences(seeds: pd.DataFrame, step: int) -> pd.DataFrame:
    """Every pair of arms at evaluation ``step``, the later arm minus the earlier:
    ``diff``, ``se`` (Welch), ``z`` (the difference in standard errors), ``power``
    (:data:`SHOWN` standard errors: the smallest difference these seeds can show), ``df``
    (Welch's degrees of freedom) and ``p`` (Welch's two-sided t test); all but ``diff`` NaN
    where either arm has one seed there."""
    at = seeds[step].dropna().rename("eval_final").reset_index().rename(columns={"arm": "selector"})
    arms = list(dict.fromkeys(at["selector"]))
    rows = []
    for i, earlier in enumerate(arms):
        for later in arms[i + 1:]:
            d = metrics.difference(at, later, earlier)
            rows.append({"a": later, "b": earlier, "diff": d["diff"], "se": d["se"],
                         "z": d["z"], "power": SHOWN * d["se"], "df": d["df"], "p": d["p"]})
    return pd.DataFrame(rows, columns=["a", "b", "diff", "se", "z", "power", "df", "p"])


def behaviour(table: pd.DataFrame, arms: list[str]) -> pd.DataFrame:
    """Per arm, means over its seeds of each run's mean over its training steps: rollout
    accuracy and effective task ratio (with how many seeds logged it), and the reply length
    over the first and the last ``window`` steps (a quarter of the run)."""
    train = table[table["step"] > 0]
    rows = []
    for arm in arms:
        part = train[train["selector"] == arm]
        if part.empty:
            continue
        last = int(part["step"].max())
        window = max(1, last // 4)
        per_run = part.groupby("run")
        row = {"arm": arm, "seeds": part["seed"].nunique(), "window": window,
               "rollout": per_run["rollout_accuracy"].mean().mean(),
               "etr": per_run["effective_task_ratio"].mean().mean(),
               "etr_seeds": int(per_run["effective_task_ratio"].count().gt(0).sum())}
        if "response_length" in part and part["response_length"].notna().any():
            row["length_first"] = part[part["step"] <= window]["response_length"].mean()
            row["length_last"] = part[part["step"] > last - window]["response_length"].mean()
        rows.append(row)
    return pd.DataFrame(rows)


def file_value(folder: Path, spec: dict) -> float:
    """A number of a file: ``spec``'s ``stat`` of ``column`` (see ``values`` in spec.py)."""
    file = folder / spec["file"]
    try:
        frame = pd.read_parquet(file) if file.suffix == ".parquet" else pd.read_csv(file)
    except (OSError, ValueError) as exc:
        raise ReportError(f"{file}: not a readable table ({exc})") from None
    if spec["column"] not in frame:
        raise ReportError(f"{file}: no column {spec['column']!r}")
    column = frame[spec["column"]]
    if spec["stat"] != "count" and not pd.api.types.is_numeric_dtype(column):
        raise ReportError(f"{file}: column {spec['column']!r} is not numbers")
    return float(getattr(column, spec["stat"])())


def selector_replay(run: Path, taskset: Path) -> tuple[pd.DataFrame, bool | None, float]:
    """Run folder ``run``'s selector replayed over ``taskset`` on the pass rates it was fed
    (a copy of :func:`mathagent.run_facts.replay_selector`'s table), whether the replay ends in
    the state the run saved (:func:`mathagent.run_facts.ends_as_saved`) and the share of the
    taskset's tasks whose references are pinned (both at one rate strictly between 0 and 1).
    Refused in one line for a selector whose references imply no pass rates (not a BOTS
    selector with two references). The page and its named values share one replay while the
    run's and the taskset's files are unchanged."""
    files = [run / "buffer_tasks.csv", run / "explorer_meta.json", run / "launched_config.yaml",
             *sorted(Path(taskset).glob("*"))]
    stamps = tuple((str(f), f.stat().st_mtime_ns) for f in files if f.is_file())
    table, same, share = _replay(Path(run), Path(taskset), stamps)
    return table.copy(), same, share


@functools.lru_cache(maxsize=8)
def _replay(run: Path, taskset: Path, _stamps: tuple) -> tuple[pd.DataFrame, bool | None, float]:
    from mathagent import run_facts

    try:
        table, driver = run_facts.replay_selector(run, taskset)
        same = run_facts.ends_as_saved(run, taskset, driver)
    except RunError as exc:
        raise ReportError(str(exc)) from None
    pinned = driver.pinned_references()
    if pinned is None or table["implied pass rate"].isna().all():
        raise ReportError(f"{run}: its selector ({driver.name}) has no reference pass rates to "
                          "imply a task's pass rate from; a selector table needs a BOTS selector "
                          "with two references")
    return table, same, float(pinned.mean())


def selector_values(exp: Experiment) -> dict[str, str]:
    """For each ``selector`` table of ``exp``, by its run folder's name ``<run>``, at each
    step ``k``: ``rate_<run>_step<k>`` (the batch's fed pass rate), ``implied_<run>_step<k>``
    (what the references implied of it), ``pinned_<run>_step<k>`` (the share of its tasks
    whose references are pinned), ``capability_<run>_step<k>``; and ``pinned_share_<run>``, the
    share of the taskset's tasks whose references are pinned."""
    from mathagent import paths

    out = {}
    for t in exp.tables:
        if t["kind"] != "selector":
            continue
        run = Path(t["source"]).name
        replay, _, share = selector_replay(exp.folder / t["source"],
                                           paths.REPO_ROOT / t["taskset"])
        for row in replay.to_dict("records"):
            k = row["step"]
            out[f"rate_{run}_step{k}"] = acc(row["pass rate"])
            out[f"implied_{run}_step{k}"] = acc(row["implied pass rate"])
            out[f"pinned_{run}_step{k}"] = acc(row["pinned references"])
            out[f"capability_{run}_step{k}"] = capability_text(row["capability"])
        out[f"pinned_share_{run}"] = acc(share)
    return out


def capability_text(value: float) -> str:
    """A capability coefficient as the page writes it: two decimals, whole with thousands
    separators from 1,000 on, ``-`` before the selector has one."""
    if math.isnan(value):
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.2f}"


def named_values(exp: Experiment, table: pd.DataFrame | None) -> dict[str, str]:
    """Every number the prose may cite, by name, formatted as the page writes it:
    ``mean_<arm>``, ``se_<arm>``, ``seeds_<arm>``, ``min_<arm>``, ``max_<arm>`` (at the final
    step), ``mean_<arm>_step<k>`` (each evaluation), ``diff_<a>_vs_<b>``, ``se_<a>_vs_<b>``,
    ``z_<a>_vs_<b>``, ``power_<a>_vs_<b>``, ``rollout_<arm>``, ``etr_<arm>``, ``runs``,
    ``final_step``, ``final_<arm>_seed<n>`` (each run), ``min_final`` and ``max_final`` (over
    all runs), ``length_<arm>_seed<n>`` (a run's reply tokens over its last quarter),
    ``start_mean``, ``start_lo``, ``start_hi``, the spec's ``values`` and its selector tables'
    (:func:`selector_values`)."""
    out = {name: f"{file_value(exp.folder, v):.{v['decimals']}f}" for name, v in exp.values.items()}
    out.update(selector_values(exp))
    if exp.start_point:
        from mathagent.results import StartPoint

        try:
            start = StartPoint.read(exp.folder / exp.start_point)
        except RunError as exc:
            raise ReportError(str(exc)) from None
        out.update(start_mean=acc(start.mean), start_lo=acc(start.lo), start_hi=acc(start.hi))
    if table is None:
        return out
    seeds = per_seed(exp, table)
    step = final_step(table)
    out.update(runs=str(table["run"].nunique()), final_step=str(step))
    if step is not None:
        finals = seeds[step].dropna()
        out.update(min_final=acc(finals.min()), max_final=acc(finals.max()))
        out.update({f"final_{arm}_seed{seed}": acc(v) for (arm, seed), v in finals.items()})
    for row in arm_means(seeds).itertuples():
        out[f"mean_{row.arm}_step{row.step}"] = acc(row.mean)
        if row.step == step:
            values = seeds.loc[row.arm, step].dropna()
            out.update({f"mean_{row.arm}": acc(row.mean),
                        f"se_{row.arm}": se_text(row.se),
                        f"seeds_{row.arm}": str(row.n), f"min_{row.arm}": acc(values.min()),
                        f"max_{row.arm}": acc(values.max())})
    if step is not None:
        for row in differences(seeds, step).itertuples():
            pair = f"{row.a}_vs_{row.b}"
            out.update({f"diff_{pair}": signed(row.diff), f"se_{pair}": se_text(row.se),
                        f"z_{pair}": signed(row.z, 1), f"power_{pair}": se_text(row.power),
                        f"p_{pair}": p_text(row.p)})
    for row in behaviour(table, exp.arm_names).itertuples():
        out.update({f"rollout_{row.arm}": acc(row.rollout), f"etr_{row.arm}": acc(row.etr)})
    if "response_length" in table:
        for (arm, seed), run in table[table["step"] > 0].groupby(["selector", "seed"]):
            last = int(run["step"].max())
            tail = run[run["step"] > last - max(1, last // 4)]["response_length"].mean()
            out[f"length_{arm}_seed{seed}"] = "-" if math.isnan(tail) else f"{tail:.0f}"
    return out


def arm_table(results_dir: str | Path) -> pd.DataFrame:
    """Per arm of a results folder's experiment, at the last evaluation every run reached:
    ``seeds``, ``mean`` and ``se`` of the held-out accuracy over seeds (mean ± SE)."""
    from mathagent.report.spec import read_spec

    exp = read_spec(results_dir)
    table = read_runs(exp)
    step = final_step(table)
    if step is None:
        raise ReportError(f"{results_dir}: no run has evaluated yet")
    means = arm_means(per_seed(exp, table))
    at = means[means["step"] == step].set_index("arm")
    return pd.DataFrame({"step": step, "seeds": at["n"], "mean": at["mean"], "se": at["se"]})


def verdict_lines(results_dir: str | Path) -> list[str]:
    """Three sentences on a results folder's experiment, every number computed: which arm is
    ahead at the last evaluation and by how many standard errors over the runner-up and over
    the baseline; what that can show (a margin of :data:`SHOWN` standard errors or more) and
    what it cannot; and the power, the smallest difference these seeds could show."""
    from mathagent.report.spec import read_spec

    exp = read_spec(results_dir)
    table = read_runs(exp)
    step = final_step(table)
    if step is None:
        raise ReportError(f"{results_dir}: no run has evaluated yet")
    seeds = per_seed(exp, table)
    arms = arm_table(results_dir).sort_values("mean", ascending=False)
    diffs = differences(seeds, step)

    def pair(a: str, b: str) -> dict:
        row = diffs[(diffs["a"] == a) & (diffs["b"] == b)]
        if row.empty:
            row = diffs[(diffs["a"] == b) & (diffs["b"] == a)]
            r = row.iloc[0]
            return {"diff": -r["diff"], "se": r["se"], "z": -r["z"], "power": r["power"]}
        return row.iloc[0].to_dict()

    best, runner_up = arms.index[0], arms.index[1]
    top = pair(best, runner_up)
    base = exp.baseline
    lines = [f"**Ahead:** `{best}` at step {step}, {acc(arms.at[best, 'mean'])} held out "
             f"against `{runner_up}`'s {acc(arms.at[runner_up, 'mean'])}: "
             f"{signed(top['diff'])}, {signed(top['z'], 1)} standard errors over seeds."]
    if best != base:
        vs = pair(best, base)
        lines[0] += (f" Over `{base}`: {signed(vs['diff'])}, {signed(vs['z'], 1)} standard "
                     "errors.")
    clear = [f"`{r.a}` vs `{r.b}`" for r in diffs.itertuples() if abs(r.z) >= SHOWN]
    lines.append("**What it can show:** " + (
        f"a clear difference ({', '.join(clear)}: at least {SHOWN:.0f} standard errors)."
        if clear else
        f"no difference between any two arms reaches {SHOWN:.0f} standard errors, so the "
        "order of the arms is a lead the seeds cannot confirm, not a ranking."))
    lines.append(f"**Power:** with {int(arms['seeds'].min())} seeds per arm and this spread, "
                 f"the smallest difference the seeds could show at {SHOWN:.0f} standard "
                 f"errors is {se_text(top['power'])} between `{best}` and `{runner_up}`"
                 + (f" and {se_text(pair(best, base)['power'])} against `{base}`"
                    if best != base else "") + ".")
    return lines


def behaviour_line(results_dir: str | Path) -> str:
    """One sentence: each arm's mean effective task ratio and rollout accuracy over training
    (:func:`behaviour`), the takeaway under a results folder's ETR figure."""
    from mathagent.report.spec import read_spec

    exp = read_spec(results_dir)
    rows = behaviour(read_runs(exp), exp.arm_names)
    parts = [f"`{r.arm}` {acc(r.etr)} ({acc(r.rollout)})" for r in rows.itertuples()]
    return ("Mean effective task ratio over training (rollout accuracy in brackets): "
            + ", ".join(parts) + ".")

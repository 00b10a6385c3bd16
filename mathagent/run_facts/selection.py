"""A Trinity run's selector: rebuilt from its ``launched_config.yaml`` over the taskset, loaded
with the beliefs it saved, replayed step by step on the pass rates its buffer recorded, and
read level by level."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from mathagent.results import RunError


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


#: A Trinity run's per-step, per-task pass rates (``mathagent.experiment.buffer``).
BUFFER_TASKS = "buffer_tasks.csv"


def replay_selector(run: str | Path, taskset: str | Path, lag: int = 0):
    """Replay the selection of Trinity run folder ``run`` on a CPU: :func:`run_selector` draws
    each step's batch, and after it is fed the pass rates that ``pass_rate_calculator`` fed the
    run's selector (the run's ``buffer_tasks.csv``, in the operator's order). Returns the table
    and the selector after the last step, whose state a run that saved one
    (:func:`saved_selector`) can be set beside. Per step, the table holds ``tasks`` in the
    run's batch, ``same tasks`` the replay drew of them, the batch's mean fed ``pass rate``,
    ``pinned references`` (the share of its tasks whose two reference pass rates agree on a
    rate strictly between 0 and 1: ``SelectorDriver.pinned_references``), and, read once that
    step's pass rates are fed, the selector's ``capability`` coefficient and ``implied pass
    rate``, the batch's mean of what the references imply at it (the implicit evidence of a
    BOTS selector); NaN where the selector has no such thing. ``lag`` feeds each step's pass
    rates that many steps late, as a selector fed before its next draw would not be (the row
    of step k is then read with the steps up to k - lag fed). Refused in one line: a negative
    lag, no table (a run whose experience buffer was not read), a table without its columns
    or rows, tasks without a task index, a task index outside the taskset, a pass rate
    outside [0, 1]."""
    if lag < 0:
        raise RunError(f"replay_selector: lag {lag}: a step's pass rates cannot come before it")
    file = Path(run) / BUFFER_TASKS
    try:
        fed = pd.read_csv(file, dtype={"taskset": str})
    except FileNotFoundError:
        raise RunError(f"{file}: no such file (`python -m mathagent.experiment.buffer JOB OUT` "
                       "writes it from the run's experience buffer)") from None
    except pd.errors.EmptyDataError:
        raise RunError(f"{file}: empty (no step's pass rates)") from None
    missing = {"step", "taskset", "task_index", "pass_rate"} - set(fed.columns)
    if missing:
        raise RunError(f"{file}: no column(s) {', '.join(sorted(missing))}")
    if fed.empty:
        raise RunError(f"{file}: no rows (no step's pass rates)")
    if fed["task_index"].isna().any() or fed["taskset"].nunique() > 1:
        raise RunError(f"{file}: every row needs the task's index in one taskset (the buffer's "
                       "experiences had no info['task_index'], or came from several tasksets)")
    driver = run_selector(run, taskset)
    outside = fed.loc[(fed["task_index"] < 0) | (fed["task_index"] >= driver.n_tasks), "step"]
    if len(outside):
        raise RunError(f"{file}: step {int(outside.iloc[0])}: a task index outside the "
                       f"{driver.n_tasks} tasks of {taskset}")
    fed_rates = fed["pass_rate"].astype(float)
    bad = fed.loc[~((fed_rates >= 0) & (fed_rates <= 1)), "step"]
    if len(bad):
        raise RunError(f"{file}: step {int(bad.iloc[0])}: a pass rate outside [0, 1]")
    pinned = driver.pinned_references()
    rows, waiting = [], []
    for step, batch in fed.groupby("step", sort=True):
        logged = batch["task_index"].astype(int).tolist()
        drawn = driver.get_indices(len(logged))
        rates = batch["pass_rate"].astype(float).tolist()
        waiting.append((step, logged, rates))
        while len(waiting) > lag:
            fed_step, indices, values = waiting.pop(0)
            try:
                driver.feedback(indices, values)
            except ValueError as exc:
                raise RunError(f"{file}: step {fed_step}: {exc}") from None
        capability, implied = driver.capability(), driver.implicit_pass_rates()
        rows.append({"step": int(step), "tasks": len(logged),
                     "same tasks": len(set(drawn) & set(logged)),
                     "pass rate": float(np.mean(rates)),
                     "pinned references": np.nan if pinned is None else
                     float(pinned[logged].mean()),
                     "capability": np.nan if capability is None else capability,
                     "implied pass rate": np.nan if implied is None else
                     float(implied[logged].mean())})
    return pd.DataFrame(rows, columns=list(REPLAY_TABLE)), driver


#: Columns of :func:`replay_selector`'s table.
REPLAY_TABLE = ("step", "tasks", "same tasks", "pass rate", "pinned references", "capability",
                "implied pass rate")


def ends_as_saved(run: str | Path, taskset: str | Path, driver) -> bool | None:
    """Whether selector ``driver`` (a replay of Trinity run folder ``run``) holds the state
    the run saved; None for a run whose selector saved its position only."""
    if "alphas" not in _saved_state(run):
        return None
    saved, replayed = saved_selector(run, taskset).state_dict(), driver.state_dict()
    return sorted(saved) == sorted(replayed) and all(
        np.array_equal(np.asarray(replayed[key]), np.asarray(value))
        for key, value in saved.items())


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
        same = ends_as_saved(run, taskset, driver)
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

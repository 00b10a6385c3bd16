"""The replies a run kept (``samples.jsonl``) of its first and last steps, the levels of the
tasks those steps drew, and a report of them over results folders."""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from mathagent.results import RunError
from mathagent.run_facts.tables import run_folders


def saved_replies(run: str | Path, steps: int | None = 2) -> pd.DataFrame:
    """The replies a run kept (``samples.jsonl``) of its first and last ``steps`` steps (every
    kept step where ``steps`` is None):
    ``step, question, truth, reward, words, response``. ``train-local`` keeps them; a Trinity
    run keeps them where its experience buffer was read (``python -m mathagent experiment``
    reads it for every finished run with :mod:`mathagent.experiment.buffer`; no truth). A run
    that keeps none raises :class:`RunError` saying so."""
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
            truth = same.iloc[0]["truth"]  # Trinity's buffer keeps none (mathagent.experiment.buffer)
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

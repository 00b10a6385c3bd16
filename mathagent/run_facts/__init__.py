"""The tables notebooks 04 and 05 print from committed run folders.

A results paragraph of a notebook interprets; the numbers it quotes are printed by the cell
above it, from here. Values are strings in the form the text quotes them (:func:`fmt`, ranges
``lo-hi`` from :func:`span`). Bad input is one :class:`~mathagent.results.RunError` naming the
file and what is missing. The modules:

* :mod:`.tables`: per run, the first and last steps' means and the held-out accuracy
  (:func:`first_last`, :func:`eval_means`); a Trinity-RFT folder's start-up, step and memory
  figures (:func:`engine_timing`, :func:`whole_step`); a seed's runs side by side at each
  evaluation against a bound on the evaluations' standard error (:func:`paired_evaluations`);
  which planned runs of an experiment exist is :func:`mathagent.report.progress`;
* :mod:`.selection`: a run's selector rebuilt from its ``launched_config.yaml``
  (:func:`run_selector`), loaded with the beliefs it saved (:func:`saved_selector`), replayed on
  the pass rates its buffer recorded (:func:`replay_selector`, :func:`replays`), read by level
  (:func:`beliefs_by_level`);
* :mod:`.replies`: the replies a run kept of its first and last steps and the levels those
  steps drew (:func:`saved_replies`, :func:`batch_levels`, :func:`replies_report`);
* :mod:`.yours`: the training runs made in this checkout beside the committed ones
  (:func:`runs_made_here`, :func:`runs_overview`, :func:`your_runs`).
"""

from mathagent.run_facts.replies import (
    batch_levels,
    kept_batches,
    replies_report,
    replies_text,
    runs_keeping_replies,
    saved_replies,
)
from mathagent.run_facts.selection import (
    BUFFER_TASKS,
    REPLAY_COLUMNS,
    REPLAY_TABLE,
    beliefs_by_level,
    ends_as_saved,
    replay_selector,
    replays,
    run_selector,
    saved_selector,
)
from mathagent.run_facts.tables import (
    CURVE_COLUMNS,
    RUN_NAME,
    VLLM_INIT,
    engine_timing,
    eval_means,
    first_last,
    fmt,
    pair_peaks,
    paired_evaluations,
    run_folders,
    span,
    vllm_init,
    whole_step,
)
from mathagent.run_facts.yours import runs_made_here, runs_overview, your_runs

__all__ = ["BUFFER_TASKS", "CURVE_COLUMNS", "REPLAY_COLUMNS", "REPLAY_TABLE", "RUN_NAME",
    "VLLM_INIT", "batch_levels", "beliefs_by_level", "ends_as_saved", "engine_timing", "eval_means",
    "first_last", "fmt", "kept_batches", "paired_evaluations",
    "pair_peaks", "replay_selector", "replays", "replies_report", "replies_text",
    "run_folders", "run_selector", "runs_keeping_replies", "runs_made_here",
    "runs_overview", "saved_replies", "saved_selector", "span", "vllm_init", "whole_step",
    "your_runs"]

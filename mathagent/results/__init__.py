"""Read training runs into tidy tables, and draw the results figures from them.

Three kinds of run end up here, and all leave the same table: one row per
``(selector, seed, step)`` with ``rollout_accuracy``, ``eval_accuracy`` (NaN on steps
without an evaluation) and ``effective_task_ratio``, plus a ``run`` column naming the folder.
A Trinity run's effective task ratio is its ``pass_rate_calculator``'s; a run without that
operator (``random``) takes it from the ``buffer_steps.csv`` beside its event files, where
``mathagent.experiment.buffer`` computed it the same way from the run's experience buffer.

* **Trinity-RFT runs** (``python -m mathagent train``): TensorBoard event files under
  ``<checkpoint_job_dir>/monitor/tensorboard/{explorer,trainer}/``. Trinity 0.6.0 names the
  scalars as mapped in :mod:`mathagent.trinity_tags` (read from its explorer:
  ``rollout_coordinator`` aggregates each task's metrics with prefix ``rollout``; eval batches
  get ``eval/<taskset name>`` and task-level ``<metric>/mean@<repeats>``; the experience
  pipeline prefixes operator metrics with ``experience_pipeline/``).
* **Tutorial-scale runs** (``python -m mathagent train-local``): a tidy ``metrics.csv`` with
  ``params.json``, and TensorBoard events with the same Trinity tag names.
* **Simulated runs** (``python -m mathagent simulate``): a tidy ``steps.csv`` and ``params.json``.

A folder holding a tidy CSV is read from that CSV; otherwise from its event files. Which
selector and seed a run used come from its ``params.json`` (written by ``train`` and the
other commands) or, failing that, from the folder name and Trinity's default seed 42.

``python -m mathagent plot RUN_DIR...`` reads runs and writes the combined table, the
two-panel figure of the reference (rollout accuracy left, eval accuracy right), the
effective-task-ratio figure and the ETR/TTB/BSF summary of :mod:`mathagent.metrics`.

The package's modules: :mod:`.runs` (reading runs), :mod:`.figures` (the figures, a start
measured once, sources side by side), :mod:`.spec` (an experiment spec: its arms, seeds and
runs, read by the ``experiment`` command and the report), :mod:`.commands` (``plot``).
"""

from mathagent.results.commands import plot_command, plot_parser
from mathagent.results.figures import (
    BEHAVIOUR,
    SOURCE_STYLES,
    StartPoint,
    draw,
    draw_side_by_side,
    side_by_side,
    side_by_side_summary,
    start_point,
)
from mathagent.results.runs import (
    BUFFER_STEPS,
    EVENT_GLOB,
    TIDY_CSV_NAMES,
    TRINITY_DEFAULT_SEED,
    CutShortWarning,
    RunError,
    etr_sources,
    eval_label,
    eval_tags,
    find_runs,
    has_runs,
    load_runs,
    phase_times,
    read_run,
    read_scalars,
    scalars_to_table,
    selector_label,
)

__all__ = ["BEHAVIOUR", "BUFFER_STEPS", "EVENT_GLOB", "SOURCE_STYLES", "TIDY_CSV_NAMES",
    "TRINITY_DEFAULT_SEED", "CutShortWarning", "RunError", "StartPoint", "draw", "draw_side_by_side",
    "etr_sources", "eval_label", "eval_tags", "find_runs", "has_runs", "load_runs",
    "phase_times", "plot_command", "plot_parser", "read_run", "read_scalars",
    "scalars_to_table", "selector_label", "side_by_side", "side_by_side_summary",
    "start_point"]

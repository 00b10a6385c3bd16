"""Reference solutions to the exercises of notebook 04 (launching training).

Exercise 1 (make the preflight fail in a new way): drop the ``pass_rate_calculator`` operator
from the difficulty-based config (``data_processor.experience_pipeline.operators=[]`` on the
command line), run the dry run's checks and read the one line that names what is wrong. Then
drop it from the random config: why does that one pass?

Exercise 2 (read a run's ETR from its event files): a ``train-local`` run logs the effective
task ratio under Trinity's tag (``mathagent.trinity_tags.TAGS["effective_task_ratio"]``) in
its TensorBoard events. Read it back with ``results.read_scalars`` and compare it with the
run's tidy ``metrics.csv``; then compute the run's mean ETR over its training steps.

Exercise 3 (read a config): the replies one training step of ``config_bots_qwen.yaml`` makes.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mathagent import launch, paths, results, tasks, trinity_tags
from mathagent.exercises import checking

#: Exercise 1: the override that removes the feedback operator.
NO_OPERATOR = "data_processor.experience_pipeline.operators=[]"


def preflight_without_operator(work: str | Path, config: str = "config_difficulty.yaml"
                               ) -> list[str]:
    """Exercise 1: the preflight's problems for ``config`` with no experience-pipeline
    operator, on the tasksets the notebook's dry run uses."""
    work = Path(work)
    train, evaluation, _ = tasks.reference_tasksets(work)
    overrides = [f"buffer.explorer_input.taskset.path={train}",
                 f"buffer.explorer_input.eval_tasksets.0.path={evaluation}", NO_OPERATOR]
    plan = launch.load_plan(paths.CONFIGS_DIR / config, overrides, work / "plan")
    return list(launch.preflight(plan, dry_run=True).problems)


def etr_from_events(run: str | Path) -> pd.Series:
    """Exercise 2: the effective task ratio per training step, read from the run's event
    files under Trinity's tag (index: step)."""
    scalars = results.read_scalars(Path(run))
    tag_end = trinity_tags.TAGS["effective_task_ratio"]
    hits = scalars[scalars["tag"].str.endswith(tag_end)]
    if hits.empty:
        raise results.RunError(f"{run}: no scalar tagged ...{tag_end} in its event files")
    return hits.set_index("step")["value"].sort_index().rename("effective_task_ratio")


#: Exercise 3: the config whose replies per step the learner counts.
QWEN_CONFIG = "config_bots_qwen.yaml"


def replies_per_step(config: str = QWEN_CONFIG) -> int:
    """Exercise 3: the agent runs (replies) one training step of ``config`` makes: tasks
    per step (``buffer.batch_size``) times replies per task (``algorithm.repeat_times``)."""
    import yaml

    data = yaml.safe_load((paths.CONFIGS_DIR / config).read_text())
    return int(data["buffer"]["batch_size"]) * int(data["algorithm"]["repeat_times"])


# -- self-checks (mathagent.exercises.checking) ------------------------------------------
def check_exercise1(setting: str) -> bool:
    """The setting the preflight's message names when the feedback operator is removed."""
    import tempfile

    with tempfile.TemporaryDirectory() as work:
        expected = preflight_without_operator(work)[0].split(":", 1)[0].strip()
    right = isinstance(setting, str) and setting.strip() == expected
    return checking.verdict(right, "Copy the dotted setting at the start of the message, up "
                            "to its first colon.")


def check_exercise2(mean_etr: float) -> bool:
    """Your mean ETR over the training steps of the committed run
    ``results/trinity_h200_local/difficulty_seed0``, read from its event files."""
    expected = float(etr_from_events(paths.RESULTS_DIR / "trinity_h200_local"
                                     / "difficulty_seed0").mean())
    return checking.verdict(checking.close(mean_etr, expected, 0.005),
                            "Keep the scalars whose tag ends with Trinity's ETR tag, index "
                            "them by step and average the values.")


def check_exercise3(replies: int) -> bool:
    """The replies one training step of :data:`QWEN_CONFIG` makes."""
    return checking.verdict(replies == replies_per_step(),
                            "Multiply the tasks per step (buffer.batch_size) by the replies "
                            "per task (algorithm.repeat_times).")

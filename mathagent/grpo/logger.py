"""The run's logs: the tidy ``metrics.csv``, Trinity's metric names and TensorBoard events."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from mathagent.grpo.files import atomic_write_text
from mathagent.trinity_tags import run_tags, with_current_names

TIDY_COLUMNS = [
    "selector", "seed", "step", "rollout_accuracy", "eval_accuracy", "effective_task_ratio",
    "trainer_reward", "pg_loss", "kl_loss", "pg_clipfrac", "grad_norm", "entropy", "response_length",
    "truncated_ratio", "rollout_tool_calls", "rollout_tool_errors", "trained_sequences",
    "skipped_updates", "time_select_s", "time_generate_s", "time_score_s", "time_update_s",
    "time_eval_s", "time_step_s", "gpu_mem_peak_gb",
]


def _finite(value) -> bool:
    return value is not None and isinstance(value, int | float) and math.isfinite(value)


class RunLogger:
    """Writes one run's tidy ``metrics.csv``, ``trinity_metrics.csv`` and TensorBoard events.

    ``metrics.csv`` has the shared tidy shape (one row per step, ``selector, seed, step``
    first); ``trinity_metrics.csv`` holds the same numbers under Trinity's tag names (one
    column per tag, as TensorBoard shows them). Both are rewritten after every step through
    a temporary file and a rename, so a run killed at any moment leaves valid tables; on
    resume, rows after the checkpointed step are dropped first and TensorBoard purges its
    later events.
    """

    def __init__(self, run_dir: Path, eval_taskset: str, eval_repeats: int,
                 start_step: int | None):
        import pandas as pd

        self.run_dir = run_dir
        self.csv = run_dir / "metrics.csv"
        self.trinity_csv = run_dir / "trinity_metrics.csv"
        self.tags = run_tags(TIDY_COLUMNS, eval_taskset, eval_repeats)
        self.rows: list[dict] = []
        if start_step is not None and self.csv.exists():
            try:
                # round_trip: the rows kept are written again, digit for digit
                old = with_current_names(pd.read_csv(self.csv, float_precision="round_trip"))
                self.rows = old[old["step"] <= start_step].to_dict("records")
            except (ValueError, KeyError) as exc:
                raise ValueError(f"{self.csv}: cannot read the metrics table to resume "
                                 f"({exc})") from None
            if len(self.rows) < len(old):  # steps after the checkpoint are run again
                self._write_tables()
        self.writer = None
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(
                log_dir=str(run_dir / "tensorboard"),
                purge_step=None if start_step is None else start_step + 1)
        except ImportError:  # tensorboard missing: the CSV files still hold everything
            print("tensorboard is not installed: writing the CSV tables only", file=sys.stderr)

    def log(self, row: dict) -> None:
        self.rows.append(row)
        self._write_tables()
        if self.writer is None:
            return
        step = int(row["step"])
        for key, tag in self.tags.items():
            if _finite(row.get(key)):
                self.writer.add_scalar(tag, float(row[key]), step)
        self.writer.flush()

    def _write_tables(self) -> None:
        import pandas as pd

        # through a temporary file and a rename: a kill never leaves a torn table
        table = pd.DataFrame(self.rows, columns=TIDY_COLUMNS)
        atomic_write_text(self.csv, table.to_csv(index=False))
        trinity = table[["step", *self.tags]].rename(columns=self.tags)
        atomic_write_text(self.trinity_csv, trinity.to_csv(index=False))

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()

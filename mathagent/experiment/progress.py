"""A run's progress, read from its log as it grows and from its explorer's event files.

:class:`LogFollower` hands over the log's new whole lines at each poll; :class:`Progress`
keeps what they say (Trinity-RFT 0.6.0's lines: ``Explore step N started``, ``Training at
step N finished``, ``Evaluation at step N started``, an explorer's or trainer's ``Error in
...``) and the last held-out accuracy, read from the explorer's TensorBoard events once an
evaluation has been logged. Its :meth:`Progress.line` is one line for a log reader:

    [14:02:11] random_seed0: step 5 of 16 trained; held-out accuracy 0.391 at step 8
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

EXPLORE = re.compile(r"Explore step (\d+) started")
TRAINED = re.compile(r"Training at step (\d+) finished")
EVALUATION = re.compile(r"Evaluation at step (\d+) started")
#: An explorer or trainer that logged this goes on no more, though its processes may live
#: (a trainer waiting for a weight sync that never comes).
FAILED = re.compile(r"\[(explorer|trainer)\.py:\d+\] Error in (Explorer|Trainer):")
#: The exception a process logged at level ERROR (the cause of a failure, e.g. vLLM's).
CAUSE = re.compile(r" ERROR .*[A-Za-z]+(Error|Exception): ")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
EXPLORER_EVENTS = "monitor/tensorboard/explorer"


def now() -> str:
    return time.strftime("%H:%M:%S")


class LogFollower:
    """The new whole lines of a growing file at each :meth:`lines` call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.rest = ""

    def lines(self) -> list[str]:
        if not self.path.is_file():
            return []
        with open(self.path, encoding="utf-8", errors="replace") as fh:
            fh.seek(self.offset)
            text = fh.read()
            self.offset = fh.tell()
        text = self.rest + text
        *whole, self.rest = text.split("\n")
        return [ANSI.sub("", line) for line in whole]


@dataclass
class Progress:
    """What a run's log and events said so far; ``steps`` is the number it should train."""

    name: str
    steps: int
    explored: int = 0
    trained: int = 0
    evaluating: int | None = None
    accuracy: tuple[int, float] | None = None
    error: str | None = None
    cause: str | None = None
    _events_seen: tuple[float, int] | None = field(default=None, repr=False)

    def feed(self, lines: list[str]) -> bool:
        """Take new log lines; True when they moved the run on (a step, an evaluation, an
        error)."""
        moved = False
        for line in lines:
            if m := EXPLORE.search(line):
                moved |= int(m[1]) > self.explored
                self.explored = max(self.explored, int(m[1]))
            elif m := TRAINED.search(line):
                moved |= int(m[1]) > self.trained
                self.trained = max(self.trained, int(m[1]))
            elif m := EVALUATION.search(line):
                moved |= self.evaluating != int(m[1])
                self.evaluating = int(m[1])
            elif FAILED.search(line) and self.error is None:
                self.error = line.strip()[:300]
                moved = True
            elif CAUSE.search(line):
                self.cause = line.strip()[:400]
        return moved

    def read_accuracy(self, root: Path) -> bool:
        """Read the held-out accuracy from the explorer's event files under ``root`` when
        they changed since the last read; True when it is new."""
        if self.evaluating is None:
            return False
        files = sorted(root.glob(f"**/{EXPLORER_EVENTS}/events.out.tfevents*"))
        if not files:
            return False
        seen = (max(f.stat().st_mtime for f in files), sum(f.stat().st_size for f in files))
        if seen == self._events_seen:
            return False
        self._events_seen = seen
        found = held_out_accuracy(files[0].parent)
        if found is None or found == self.accuracy:
            return False
        self.accuracy = found
        return True

    @property
    def done(self) -> bool:
        """Every step trained."""
        return self.trained >= self.steps

    def line(self) -> str:
        """One line of where the run stands."""
        if self.error:
            return f"[{now()}] {self.name}: failed: {self.error}"
        if self.explored == 0 and self.trained == 0 and self.evaluating is None:
            state = f"starting (0 of {self.steps} steps)"
        else:
            # the explorer starts one step past the last before the run ends
            state = f"step {min(max(self.explored, self.trained), self.steps)} of {self.steps}, " \
                    f"{self.trained} trained"
        if self.accuracy:
            step, value = self.accuracy
            state += f"; held-out accuracy {value:.3f} at step {step}"
        elif self.evaluating is not None:
            state += f"; held-out evaluation at step {self.evaluating} running"
        return f"[{now()}] {self.name}: {state}"


#: A preflight's failed check (``train``'s report), a command's one-line error, or the last
#: line of a traceback.
PROBLEM = re.compile(r"^\s*FAIL\s|^error: |^[A-Za-z_.]+(Error|Exception): ")


def problem_lines(text: str, most: int = 8) -> list[str]:
    """The lines of a ``train`` output that say what went wrong (at most ``most``, the last
    ones); its last three lines where none does."""
    lines = [ANSI.sub("", x).rstrip() for x in text.splitlines()]
    found = [x.strip() for x in lines if PROBLEM.search(x)]
    return found[-most:] or [x.strip() for x in lines if x.strip()][-3:]


def held_out_accuracy(events: Path) -> tuple[int, float] | None:
    """``(step, accuracy)`` of the last held-out evaluation in the explorer's event files
    under ``events`` (the first eval taskset, by name), or None before the first one."""
    from mathagent.results import eval_tags, read_scalars

    try:
        scalars = read_scalars(events)
    except Exception:  # a file being written: read again at the next change
        return None
    tags = eval_tags(scalars["tag"].unique())
    if not tags:
        return None
    rows = scalars[scalars["tag"] == next(iter(tags.values()))].sort_values("step")
    if rows.empty:
        return None
    return int(rows["step"].iloc[-1]), float(rows["value"].iloc[-1])

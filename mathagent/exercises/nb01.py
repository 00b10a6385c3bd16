"""Reference solutions to the exercises of notebook 01 (data preparation).

Exercise 1 (predict P(signal)): before computing anything, write down for a group of
``n = 8`` rollouts the chance that a task of pass rate 0.05, 0.5 and 0.9 carries any GRPO
signal; then check your guesses by simulating groups.

Exercise 2 (a data check): break one pass rate of ``data/samples/guru_raw.jsonl`` (set it to
1.5) in a copy of the file, convert the copy, and read what the conversion says.

Exercise 3 (how large a group): the smallest group size at which a task of pass rate 0.05 is
mixed at least half the time.

Each exercise has a ``check_exercise<k>`` that says whether an answer is right.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mathagent import paths, tasks
from mathagent.exercises import checking

#: Exercise 1: P(signal) = 1 - p**8 - (1 - p)**8, to two decimals.
PREDICTIONS = {0.05: 0.34, 0.5: 0.99, 0.9: 0.57}


def signal_by_sampling(p: float, n: int = 8, groups: int = 100_000, seed: int = 0) -> float:
    """Exercise 1: the share of ``groups`` simulated groups of ``n`` rollouts (each right with
    probability ``p``) that are mixed, neither all right nor all wrong."""
    k = np.random.default_rng(seed).binomial(n, p, size=groups)
    return float(((k > 0) & (k < n)).mean())


def broken_pass_rate(work: str | Path, row: int = 3, column: str = "qwen2.5_7b_pass_rate",
                     value: float = 1.5) -> str:
    """Exercise 2: copy the raw guru sample with ``column`` of ``row`` set to ``value``,
    convert the copy, and return the one-line error the conversion stops with."""
    lines = (paths.SAMPLES_DIR / "guru_raw.jsonl").read_text().splitlines()
    record = json.loads(lines[row])
    record[column] = value
    lines[row] = json.dumps(record)
    broken = Path(work) / "guru_broken.jsonl"
    broken.parent.mkdir(parents=True, exist_ok=True)
    broken.write_text("\n".join(lines) + "\n")
    try:
        tasks.prepare_guru(broken, Path(work) / "guru_broken")
    except tasks.TasksetError as err:
        return str(err)
    raise AssertionError(f"{broken}: the conversion accepted a pass rate of {value}")


def smallest_group(p: float = 0.05, share: float = 0.5) -> int:
    """Exercise 3: the smallest group size ``n`` at which a task of pass rate ``p`` is mixed
    (carries a GRPO signal) in at least ``share`` of its groups."""
    n = 2
    while tasks.informative_probability(p, n) < share:
        n += 1
    return n


# -- self-checks (mathagent.exercises.checking) ------------------------------------------
def check_exercise1(answers: dict) -> bool:
    """Your P(signal) for pass rates 0.05, 0.5 and 0.9 and groups of 8, as ``{p: value}``."""
    expected = {p: tasks.informative_probability(p, 8) for p in PREDICTIONS}
    return checking.verdict(checking.all_close(answers, expected, 0.01),
                            "Give a dict {0.05: ..., 0.5: ..., 0.9: ...}. A group carries a "
                            "signal unless all 8 are right (p**8) or all wrong ((1-p)**8).")


def check_exercise2(message: str) -> bool:
    """The one-line message the conversion of your broken copy stopped with (row 3,
    ``qwen2.5_7b_pass_rate`` set to 1.5)."""
    import tempfile

    with tempfile.TemporaryDirectory() as work:
        expected = broken_pass_rate(work)
    tail = expected.split(": ", 1)[-1]
    return checking.verdict(isinstance(message, str) and tail in message,
                            "Catch tasks.TasksetError around tasks.prepare_guru and pass "
                            "str(error); the message names the row and the column.")


def check_exercise3(n: int) -> bool:
    """The smallest group size at which a task of pass rate 0.05 is mixed at least half the
    time."""
    return checking.verdict(n == smallest_group(),
                            "Solve 1 - p**n - (1-p)**n >= 0.5 for the smallest whole n, or "
                            "try n = 2, 3, ... with tasks.informative_probability(0.05, n).")

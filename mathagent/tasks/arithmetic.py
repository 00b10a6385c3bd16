"""The bundled arithmetic taskset: word problems and expressions over a wide difficulty range.

Eight levels, from "What is 3 + 4?" to five three-digit terms with products, drawn
deterministically from a seed; train and a harder held-out test split, disjoint.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from mathagent import __version__, paths
from mathagent.outputs import OutputError, one_line
from mathagent.settings import setting
from mathagent.tasks.io import save_taskset
from mathagent.tasks.schema import ANSWER, ANSWER_PREFIX, QUESTION, TasksetError

# Measured on the bundled arithmetic taskset by ``measure-pass-rates`` (weak, strong).
WEAK_KEY = "smollm2_weak_pass_rate"
STRONG_KEY = "smollm2_strong_pass_rate"
ARITHMETIC_FEATURE_KEYS = (WEAK_KEY, STRONG_KEY)
ARITHMETIC_SEED = 7


@dataclass(frozen=True)
class ArithmeticLevel:
    """One difficulty level of the generator.

    ``n_terms`` operands joined by operators drawn from ``ops``; ``+``/``-`` operands lie in
    [``min_operand``, ``max_operand``], ``*`` operands in [2, min(12, ``max_operand``)].
    ``word_share`` of the tasks are phrased as a short story read left to right, the rest
    as a bare expression with the usual precedence.
    """

    difficulty: int
    n_terms: int
    min_operand: int
    max_operand: int
    ops: str
    word_share: float


# From "What is 3 + 4?" (a 135M model sometimes gets it) to five 3-digit terms with
# products (it never does): single-digit sums, single-digit differences, sums and
# differences up to 20, two-digit sums, three single-digit terms, then products and longer
# chains. Levels 0-2 are deliberately common in train.
ARITHMETIC_LEVELS = (
    ArithmeticLevel(0, 2, 1, 9, "+", 0.3),
    ArithmeticLevel(1, 2, 1, 9, "-", 0.5),
    ArithmeticLevel(2, 2, 10, 20, "+-", 0.5),
    ArithmeticLevel(3, 2, 10, 99, "+", 0.3),
    ArithmeticLevel(4, 3, 1, 9, "+-", 0.5),
    ArithmeticLevel(5, 3, 1, 50, "+-*", 0.5),
    ArithmeticLevel(6, 4, 10, 99, "+-*", 0.5),
    ArithmeticLevel(7, 5, 100, 999, "+-*", 0.5),
)
TRAIN_LEVEL_SHARES = (0.18, 0.16, 0.14, 0.14, 0.12, 0.10, 0.08, 0.08)
# The held-out eval set is skewed harder, as AIME is for a large model.
TEST_LEVEL_SHARES = (0.04, 0.06, 0.08, 0.12, 0.15, 0.17, 0.18, 0.20)

_NAMES = ("Mia", "Leo", "Ava", "Noah", "Zoe", "Omar", "Lena", "Ravi", "Ines", "Tom", "Yuki",
          "Sara", "Ben", "Nia", "Hugo", "Maya")
_ITEMS = ("apples", "marbles", "stickers", "pencils", "coins", "books", "cards", "shells",
          "cookies", "stamps", "beads", "buttons", "eggs", "paper cranes", "seeds", "toy cars")
_BARE = ("What is {e}?", "Compute {e}.", "Calculate {e}.", "Evaluate {e}.", "{e} = ?",
         "Work out {e}.")
_BARE_SUM = ("What is the sum of {a} and {b}?", "Add {a} and {b}.")
_BARE_DIFF = ("What is {a} minus {b}?", "Subtract {b} from {a}.")
_START = ("{n} has {a} {i}.", "There are {a} {i} in {n}'s box.")
_STEP = {
    "+": ("{n} gets {b} more.", "{n} buys {b} more {i}.", "A friend gives {n} {b} more {i}.",
          "{n} finds {b} more {i}."),
    "-": ("{n} gives away {b}.", "{n} loses {b} {i}.", "{n} uses {b} of them."),
    "*": ("Then the number of {i} becomes {b} times as large.",
          "{n} ends up with {b} times as many {i} as before."),
}
_ASK = ("How many {i} does {n} have now?", "How many {i} does {n} have in the end?")
_SYMBOL = {"+": "+", "-": "-", "*": "×"}


def _pick(rng: np.random.Generator, options: Sequence[str]) -> str:
    return options[int(rng.integers(len(options)))]


def _operand(rng: np.random.Generator, level: ArithmeticLevel, op: str,
             cap: int | None = None) -> int:
    if op == "*":
        return int(rng.integers(2, min(12, level.max_operand) + 1))
    hi = level.max_operand if cap is None else min(level.max_operand, cap)
    return int(rng.integers(level.min_operand, hi + 1))


def _evaluate(terms: Sequence[int], ops: Sequence[str]) -> int:
    """Value of ``terms[0] ops[0] terms[1] ...`` with ``*`` before ``+``/``-``."""
    sums, signs = [terms[0]], []
    for op, t in zip(ops, terms[1:], strict=True):
        if op == "*":
            sums[-1] *= t
        else:
            sums.append(t)
            signs.append(op)
    total = sums[0]
    for op, t in zip(signs, sums[1:], strict=True):
        total = total + t if op == "+" else total - t
    return total


def _bare_task(rng: np.random.Generator, level: ArithmeticLevel) -> tuple[str, str, int]:
    for _ in range(1000):
        ops = [_pick(rng, level.ops) for _ in range(level.n_terms - 1)]
        terms = [_operand(rng, level, "+")] + [_operand(rng, level, op) for op in ops]
        value = _evaluate(terms, ops)
        if value >= 0:
            break
    else:  # pragma: no cover - the levels above never get here
        raise RuntimeError(f"level {level.difficulty}: no non-negative expression found")
    expr = " ".join([str(terms[0])] + [f"{op} {t}" for op, t in zip(ops, terms[1:], strict=True)])
    shown = " ".join([str(terms[0])] + [f"{_SYMBOL[op]} {t}"
                                        for op, t in zip(ops, terms[1:], strict=True)])
    templates = _BARE + {"+": _BARE_SUM, "-": _BARE_DIFF}.get("".join(ops), ())
    text = _pick(rng, templates).format(e=shown, a=terms[0], b=terms[1] if len(terms) > 1 else "")
    return text, expr, value


def _word_task(rng: np.random.Generator, level: ArithmeticLevel) -> tuple[str, str, int]:
    name, item = _pick(rng, _NAMES), _pick(rng, _ITEMS)
    total = _operand(rng, level, "+")
    parts = [_pick(rng, _START).format(n=name, a=total, i=item)]
    expr = str(total)
    for _ in range(level.n_terms - 1):
        op = _pick(rng, level.ops)
        if op == "-" and total < max(level.min_operand, 1):
            op = "+"  # a story cannot take away more than there is
        b = _operand(rng, level, op, cap=total if op == "-" else None)
        total = total + b if op == "+" else total - b if op == "-" else total * b
        parts.append(_pick(rng, _STEP[op]).format(n=name, b=b, i=item))
        expr = f"({expr} {op} {b})"
    parts.append(_pick(rng, _ASK).format(n=name, i=item))
    return " ".join(parts), expr, total


def level_table(levels: Sequence[ArithmeticLevel] = ARITHMETIC_LEVELS) -> pd.DataFrame:
    """The generator's levels with their train/test shares, one row per level."""
    frame = pd.DataFrame([asdict(lv) for lv in levels]).set_index("difficulty")
    frame["train_share"] = TRAIN_LEVEL_SHARES[: len(frame)]
    frame["test_share"] = TEST_LEVEL_SHARES[: len(frame)]
    return frame


def level_counts(n: int, shares: Sequence[float]) -> list[int]:
    """Split ``n`` tasks over levels by ``shares`` (largest remainder; sums to ``n``)."""
    raw = np.asarray(shares, dtype=float) / float(np.sum(shares)) * n
    counts = np.floor(raw).astype(int)
    order = np.argsort(-(raw - counts), kind="stable")
    counts[order[: n - counts.sum()]] += 1
    return counts.tolist()


def task_id(question: str) -> str:
    """A stable id derived from the question text (same question, same id, any seed)."""
    return "arith-" + hashlib.sha1(question.encode()).hexdigest()[:10]


def generate_arithmetic(n_train: int = 2000, n_test: int = 200, seed: int = ARITHMETIC_SEED,
                        levels: Sequence[ArithmeticLevel] = ARITHMETIC_LEVELS,
                        train_shares: Sequence[float] = TRAIN_LEVEL_SHARES,
                        test_shares: Sequence[float] = TEST_LEVEL_SHARES,
                        progress: bool = False) -> dict[str, pd.DataFrame]:
    """Generate the arithmetic taskset: ``{"train": frame, "test": frame}``, deterministic.

    Each split draws its level counts from its shares (test skews harder), then tasks one by
    one from a ``numpy`` Generator spawned from ``SeedSequence(seed)``; a question already
    used in either split is redrawn, so all questions are distinct and test is disjoint
    from train. Rows come shuffled. Columns: ``task_id, question, answer, difficulty,
    n_terms, min_operand, max_operand, ops, word_problem, expression`` (``expression`` is a
    Python expression whose value is the answer; word problems nest left to right).
    """
    from tqdm import tqdm

    if len(train_shares) != len(levels) or len(test_shares) != len(levels):
        raise ValueError("one share per level is needed")
    streams = np.random.SeedSequence(seed).spawn(2)
    seen: set[str] = set()
    out = {}
    bar = tqdm(total=n_train + n_test, desc="generate-arithmetic", disable=not progress)
    for (split, n, shares), ss in zip((("train", n_train, train_shares),
                                       ("test", n_test, test_shares)), streams, strict=True):
        rng = np.random.default_rng(ss)
        rows = []
        for level, count in zip(levels, level_counts(n, shares), strict=True):
            for _ in range(count):
                for _attempt in range(10_000):
                    word = bool(rng.random() < level.word_share)
                    text, expr, value = (_word_task if word else _bare_task)(rng, level)
                    if text not in seen:
                        break
                else:
                    raise RuntimeError(f"level {level.difficulty}: ran out of distinct tasks; "
                                       "lower its share")
                seen.add(text)
                rows.append({"task_id": task_id(text), QUESTION: text,
                             ANSWER: f"{ANSWER_PREFIX}{value}", "difficulty": level.difficulty,
                             "n_terms": level.n_terms, "min_operand": level.min_operand,
                             "max_operand": level.max_operand, "ops": level.ops,
                             "word_problem": word, "expression": expr})
                bar.update()
        frame = pd.DataFrame(rows)
        frame = frame.iloc[rng.permutation(len(frame))].reset_index(drop=True)
        out[split] = frame.astype({"difficulty": "int64", "n_terms": "int64",
                                   "min_operand": "int64", "max_operand": "int64",
                                   "word_problem": "bool"})
    bar.close()
    return out


GENERATOR_COLUMNS = ("task_id", QUESTION, ANSWER, "difficulty", "n_terms", "min_operand",
                     "max_operand", "ops", "word_problem", "expression")


@dataclass
class ArithmeticOptions:
    """The settings of ``generate-arithmetic``: tasks per split and the generator's seed."""

    n_train: int = setting(2000, flag=True, metavar="N_TRAIN", help="train tasks")
    n_test: int = setting(200, flag=True, metavar="N_TEST",
                          help="held-out eval tasks, skewed harder")
    seed: int = setting(ARITHMETIC_SEED, flag=True, metavar="SEED",
                        help="generator seed; the default gives the bundled data")


def write_arithmetic(out_dir: str | Path = paths.ARITHMETIC_DIR, n_train: int = 2000,
                     n_test: int = 200, seed: int = ARITHMETIC_SEED, force: bool = False,
                     progress: bool = False) -> dict[str, pd.DataFrame]:
    """Generate and save the arithmetic taskset (``train.parquet``, ``test.parquet``).

    Refuses to overwrite a taskset that already carries measured columns (anything beyond
    the generator's) unless ``force``: those measurements took hours of model time.
    """
    out_dir = Path(out_dir)
    if not force:
        for split in ("train", "test"):
            file = out_dir / f"{split}.parquet"
            if file.is_file():
                try:
                    names = pq.read_schema(file).names
                except (pa.ArrowException, OSError) as exc:
                    raise OutputError(f"{file}: cannot be read ({one_line(exc)}), so it may hold "
                                      "measured columns; pass --force to replace it") from exc
                extra = [c for c in names if c not in GENERATOR_COLUMNS]
                if extra:
                    raise TasksetError(f"{file}: holds measured column(s) {', '.join(extra)} "
                                       "that regenerating would lose; pass --force or "
                                       "choose another --out")
    splits = generate_arithmetic(n_train, n_test, seed, progress=progress)
    counts = {s: {str(k): int(v) for k, v in f["difficulty"].value_counts().sort_index().items()}
              for s, f in splits.items()}
    prov = {
        "kind": "arithmetic",
        "source": "generated by mathagent.tasks.generate_arithmetic",
        "command": f"python -m mathagent generate-arithmetic --n-train {n_train} "
                   f"--n-test {n_test} --seed {seed}",
        "options": {"n_train": n_train, "n_test": n_test, "seed": seed},
        "levels": [asdict(lv) for lv in ARITHMETIC_LEVELS],
        "level_shares": {"train": list(TRAIN_LEVEL_SHARES), "test": list(TEST_LEVEL_SHARES)},
        "counts": {"rows": {s: len(f) for s, f in splits.items()}, "by_difficulty": counts},
        "feature_columns": {"weak": WEAK_KEY, "strong": STRONG_KEY,
                            "status": "not measured yet (python -m mathagent measure-pass-rates)"},
        "versions": {"mathagent": __version__},
    }
    save_taskset(splits, out_dir, prov, replaces=("train", "test"))
    return splits

"""The arithmetic generator: word problems and expressions over a wide difficulty range.

Tasks are drawn deterministically from a seed, level by level, into a train and a held-out
test split that share no question. A *level set* (:class:`LevelSet`) fixes the levels, their
shares per split, the seed and the folder; two are known by name (:data:`LEVEL_SET_NAMES`):

* ``smollm2`` (:data:`SMOLLM2_LEVELS`, ``data/arithmetic``): eight levels, from
  "What is 3 + 4?" to five three-digit terms with products, for the bundled SmolLM2-135M;
* ``qwen`` (:mod:`mathagent.tasks.arithmetic_qwen`, ``data/arithmetic_qwen``): eleven levels
  for Qwen2.5-Coder-0.5B-Instruct, from sums it solves about half the time to products and
  nested parentheses of 3-4 digit numbers it almost never solves (``results/qwen_features/``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from mathagent import __version__, paths
from mathagent.outputs import OutputError, one_line
from mathagent.settings import SettingsError, setting
from mathagent.tasks.io import save_taskset
from mathagent.tasks.schema import ANSWER, ANSWER_PREFIX, QUESTION, TasksetError

# Measured on the bundled arithmetic taskset by ``measure-pass-rates`` (weak, strong).
WEAK_KEY = "smollm2_weak_pass_rate"
STRONG_KEY = "smollm2_strong_pass_rate"
ARITHMETIC_FEATURE_KEYS = (WEAK_KEY, STRONG_KEY)
ARITHMETIC_SEED = 7
# Bump when a level set's tasks for a given seed change (recorded in provenance.json).
GENERATOR_VERSION = 1


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

    def draw(self, rng: np.random.Generator, word: bool) -> tuple[str, str, int]:
        """One task: (question, Python expression, value); a story when ``word``."""
        return (_word_task if word else _bare_task)(rng, self)


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


class Level(Protocol):
    """What the generator needs of a level: its row fields and a way to draw one task."""

    difficulty: int
    n_terms: int
    min_operand: int
    max_operand: int
    ops: str
    word_share: float

    def draw(self, rng: np.random.Generator, word: bool) -> tuple[str, str, int]: ...


@dataclass(frozen=True)
class LevelSet:
    """A named taskset design: levels, shares per split, seed, sizes, folder, feature columns.

    ``design`` is a free-form record of why the levels and shares are what they are; it is
    written to ``provenance.json`` as is.
    """

    name: str
    policy: str
    levels: tuple[Level, ...]
    train_shares: tuple[float, ...]
    test_shares: tuple[float, ...]
    seed: int
    n_train: int
    n_test: int
    out_dir: Path
    feature_keys: tuple[str, str]
    design: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if [lv.difficulty for lv in self.levels] != list(range(len(self.levels))):
            raise ValueError(f"level set {self.name}: difficulties must be 0, 1, ... in order")
        for shares in (self.train_shares, self.test_shares):
            if len(shares) != len(self.levels) or abs(sum(shares) - 1.0) > 1e-9:
                raise ValueError(f"level set {self.name}: one share per level, summing to 1")


SMOLLM2_LEVELS = LevelSet(
    name="smollm2", policy="SmolLM2-135M-Instruct", levels=ARITHMETIC_LEVELS,
    train_shares=TRAIN_LEVEL_SHARES, test_shares=TEST_LEVEL_SHARES, seed=ARITHMETIC_SEED,
    n_train=2000, n_test=200, out_dir=paths.ARITHMETIC_DIR, feature_keys=ARITHMETIC_FEATURE_KEYS)
LEVEL_SET_NAMES = ("smollm2", "qwen")


def level_set(name: str | LevelSet) -> LevelSet:
    """The level set called ``name`` (one of :data:`LEVEL_SET_NAMES`)."""
    if isinstance(name, LevelSet):
        return name
    if name == "smollm2":
        return SMOLLM2_LEVELS
    if name == "qwen":
        from mathagent.tasks.arithmetic_qwen import QWEN_LEVELS  # it builds on this module

        return QWEN_LEVELS
    raise SettingsError(f"unknown level set {name!r}; choose one of "
                        f"{', '.join(LEVEL_SET_NAMES)}")


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


def level_table(levels: Sequence[ArithmeticLevel] | LevelSet | str = ARITHMETIC_LEVELS
                ) -> pd.DataFrame:
    """A level set's levels with their train/test shares, one row per level.

    ``levels`` is a level set or its name (``level_table("qwen")``), or a sequence of the
    first set's levels (shares then from :data:`TRAIN_LEVEL_SHARES`/:data:`TEST_LEVEL_SHARES`).
    """
    if isinstance(levels, str | LevelSet):
        chosen = level_set(levels)
        frame = pd.DataFrame([asdict(lv) for lv in chosen.levels]).set_index("difficulty")
        frame["train_share"] = chosen.train_shares
        frame["test_share"] = chosen.test_shares
        return frame
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
                        levels: Sequence[Level] = ARITHMETIC_LEVELS,
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
    ``levels`` are the first set's by default; see :func:`generate_level_set` for a named set.
    """
    from tqdm import tqdm

    if len(train_shares) != len(levels) or len(test_shares) != len(levels):
        raise ValueError("one share per level is needed")
    if n_train < 1 or n_test < 1:
        raise ValueError(f"n_train and n_test must be at least 1, got {n_train} and {n_test}")
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
                    text, expr, value = level.draw(rng, word)
                    if text not in seen:
                        break
                else:
                    raise ValueError(f"level {level.difficulty}: ran out of distinct tasks; "
                                     "ask for fewer tasks")
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


def generate_level_set(levels: str | LevelSet = "smollm2", n_train: int | None = None,
                       n_test: int | None = None, seed: int | None = None,
                       progress: bool = False) -> dict[str, pd.DataFrame]:
    """:func:`generate_arithmetic` with a level set's levels, shares and (unless given) sizes
    and seed: ``generate_level_set("qwen")`` is what ``data/arithmetic_qwen`` holds."""
    chosen = level_set(levels)
    return generate_arithmetic(chosen.n_train if n_train is None else n_train,
                               chosen.n_test if n_test is None else n_test,
                               chosen.seed if seed is None else seed, levels=chosen.levels,
                               train_shares=chosen.train_shares,
                               test_shares=chosen.test_shares, progress=progress)


@dataclass
class ArithmeticOptions:
    """The settings of ``generate-arithmetic``: the level set, tasks per split and the seed.

    Sizes and seed left unset are the level set's (:class:`LevelSet`).
    """

    levels: str = setting("smollm2", flag=True, choices=LEVEL_SET_NAMES,
                          help="level set: smollm2 (data/arithmetic, sized for SmolLM2-135M; "
                               "the default) or qwen (data/arithmetic_qwen, levels sized by "
                               "Qwen2.5-Coder-0.5B-Instruct's pass rates with no tool)")
    n_train: int | None = setting(None, flag=True, metavar="N_TRAIN",
                                  help="train tasks (default: the level set's; smollm2 2000, "
                                       "qwen 4400)")
    n_test: int | None = setting(None, flag=True, metavar="N_TEST",
                                 help="held-out eval tasks (default: the level set's; "
                                      "smollm2 200, qwen 660)")
    seed: int | None = setting(None, flag=True, metavar="SEED",
                               help="generator seed (default: the level set's, which gives the "
                                    "committed data)")


def _check_replaceable(out_dir: Path, chosen: LevelSet) -> None:
    """Refuse (without ``--force``) to replace measured columns or another level set's tasks."""
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
    prov_file = out_dir / "provenance.json"
    if prov_file.is_file():
        try:
            prov = json.loads(prov_file.read_text())
        except (OSError, ValueError) as exc:
            raise OutputError(f"{prov_file}: cannot be read ({one_line(exc)}); pass --force "
                              "to replace the taskset there") from exc
        if isinstance(prov, dict) and prov.get("kind") == "arithmetic":
            held = prov.get("level_set", "smollm2")  # the first set's files predate the key
            if held != chosen.name:
                raise OutputError(f"{out_dir}: holds the {held!r} level set, not "
                                  f"{chosen.name!r}; pass --force to replace it or choose "
                                  "another --out")


def write_arithmetic(out_dir: str | Path | None = None, n_train: int | None = None,
                     n_test: int | None = None, seed: int | None = None, force: bool = False,
                     progress: bool = False, levels: str | LevelSet = "smollm2"
                     ) -> dict[str, pd.DataFrame]:
    """Generate and save an arithmetic taskset (``train.parquet``, ``test.parquet``).

    ``levels`` names the level set; ``out_dir``, sizes and seed default to the set's.
    Refuses, unless ``force``, to overwrite a taskset that already carries measured columns
    (anything beyond the generator's: those measurements took hours of model time) or that
    holds another level set's tasks.
    """
    chosen = level_set(levels)
    out_dir = Path(chosen.out_dir if out_dir is None else out_dir)
    n_train = chosen.n_train if n_train is None else n_train
    n_test = chosen.n_test if n_test is None else n_test
    seed = chosen.seed if seed is None else seed
    if n_train < 1 or n_test < 1:
        raise SettingsError(f"--n-train and --n-test must be at least 1, got {n_train} and "
                            f"{n_test}")
    if not force:
        _check_replaceable(out_dir, chosen)
    splits = generate_level_set(chosen, n_train, n_test, seed, progress=progress)
    counts = {s: {str(k): int(v) for k, v in f["difficulty"].value_counts().sort_index().items()}
              for s, f in splits.items()}
    weak, strong = chosen.feature_keys
    prov = {
        "kind": "arithmetic",
        "level_set": chosen.name,
        "policy": chosen.policy,
        "source": "generated by mathagent.tasks.generate_level_set",
        "command": f"python -m mathagent generate-arithmetic --levels {chosen.name} "
                   f"--n-train {n_train} --n-test {n_test} --seed {seed}",
        "options": {"levels": chosen.name, "n_train": n_train, "n_test": n_test, "seed": seed},
        "levels": [asdict(lv) for lv in chosen.levels],
        "level_shares": {"train": list(chosen.train_shares), "test": list(chosen.test_shares)},
        "counts": {"rows": {s: len(f) for s, f in splits.items()}, "by_difficulty": counts},
        "feature_columns": {"weak": weak, "strong": strong,
                            "status": "not measured yet (python -m mathagent measure-pass-rates)"},
        "versions": {"mathagent": __version__, "arithmetic_generator": GENERATOR_VERSION},
    }
    if chosen.design:
        prov["design"] = chosen.design
    save_taskset(splits, out_dir, prov, replaces=("train", "test"))
    return splits

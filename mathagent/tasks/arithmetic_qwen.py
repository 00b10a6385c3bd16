"""The ``qwen`` level set: arithmetic sized for Qwen2.5-Coder-0.5B-Instruct without tools.

Eleven levels (:data:`QWEN_LEVEL_TABLE`), ordered by how much schoolbook work a task takes
(:func:`long_hand_steps`), in three tiers read from the policy's measured pass rates without
the tool (temperature 1, 8 samples per task, strict last ``\\boxed{}``, 512 new tokens, the
train split of ``data/arithmetic`` and three synthetic levels):

* **easy** (levels 0-1): one- and two-digit sums and differences of two terms. Measured
  0.46 (1-digit +), 0.53 (1-digit -), 0.48 (10-20 +/-), 0.40 (2-digit +), with 80-90% of
  the tasks giving mixed outcomes over 8 samples: the most this policy solves without a tool;
* **middle** (levels 2-4): three and four terms, short products. Measured 0.35, 0.20 and
  0.12 (mixed outcomes on 80-90%, 72% and 52% of the tasks): solved only sometimes;
* **hard** (levels 5-10): 3-digit × 2-digit products (measured 0.01), ``(a + b) × c - d``
  with a 3-digit term (0.04), five 3-digit terms (0.01), six-term sums of products (0.00),
  then nested parentheses over 3-4 digit numbers, harder by construction than all of those:
  essentially never solved without the tool (with it the policy did worse:
  ``results/qwen_features/`` measures both).

**Train shares** (:data:`QWEN_TRAIN_SHARES`): 15% easy, 20% middle, 65% hard. Weighting each
level by its measured rate (unmeasured levels 9-10 at 0) gives a mean pass rate of 0.12
without the tool under random selection (:data:`QWEN_EXPECTED_RANDOM_PASS_RATE`), below the
0.2 of the upstream experiment's start; about a third of the tasks (the easy and middle
tiers, where mixed outcomes are common) carry a learning signal, and the hard two thirds
carry one only once the policy calls the tool. Most tasks are thus too hard for the policy
at the start, as in the upstream situation, so choosing tasks can matter.

**Test shares** (:data:`QWEN_TEST_SHARES`): equal, 60 tasks per level (660 in all; 18% easy,
27% middle, 55% hard), so every level's held-out accuracy is measured with the same
precision and a gain shows where it happens, rather than mirroring train's skew.

About 40% of the tasks are short stories (as in the ``smollm2`` set): they tell the same
numbers and operators in written order, applied one after the other; levels 8 and 10, whose
parentheses or precedence do not read left to right, are bare expressions only.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass

import numpy as np

from mathagent import paths
from mathagent.tasks.arithmetic import (
    _ASK,
    _BARE,
    _BARE_DIFF,
    _BARE_SUM,
    _ITEMS,
    _NAMES,
    _START,
    _STEP,
    LevelSet,
    _pick,
)

# The two references, both the policy itself with no tool offered (temperature 1, strict judge):
# weak at 128 new tokens, strong at 512 (the candidate training setting, so the strong column is
# also the policy's own starting pass rate). Offering any tool (AgentScope's meta tool, the
# Python tool) made this model answer with made-up tool calls (results/qwen_features/).
QWEN_WEAK_KEY = "qwen_short_pass_rate"
QWEN_STRONG_KEY = "qwen_bare_pass_rate"
QWEN_FEATURE_KEYS = (QWEN_WEAK_KEY, QWEN_STRONG_KEY)
QWEN_SEED = 11
TIERS = ("easy", "middle", "hard")

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}
_BARE_PRODUCT = ("What is the product of {a} and {b}?", "Multiply {a} by {b}.")


def _tree(expression: str) -> ast.expr:
    """The syntax tree of a ``+ - *`` expression over integers or letters (else ValueError)."""
    body = ast.parse(expression, mode="eval").body
    for node in ast.walk(body):
        if isinstance(node, ast.BinOp | ast.Name | ast.expr_context) or type(node) in _OPS or (
                isinstance(node, ast.Constant) and type(node.value) is int):
            continue
        raise ValueError(f"{expression!r}: only integers, + - * and parentheses allowed")
    return body


def evaluate(expression: str) -> int:
    """The value of an integer ``+ - *`` expression (the ``expression`` column)."""
    def value(node: ast.expr) -> int:
        if isinstance(node, ast.BinOp):
            return _OPS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.Constant):
            return node.value
        raise ValueError(f"{expression!r}: not a number: {ast.dump(node)}")
    return value(_tree(expression))


def _digits(n: int) -> int:
    return len(str(abs(n)))


def long_hand_steps(expression: str) -> int:
    """Single-digit steps the schoolbook method takes for an integer ``+ - *`` expression.

    A sum or difference costs one step per digit of its longer operand; a product of a
    ``d1``-digit and a ``d2``-digit number (``d1 >= d2``) costs ``d1 * d2`` digit products
    plus, when ``d2 > 1``, ``d2 - 1`` additions of partial products of ``d1 + d2`` digits.
    Intermediate results are what the next operation works on.
    """
    total = 0

    def value(node: ast.expr) -> int:
        nonlocal total
        if isinstance(node, ast.Constant):
            return node.value
        left, right = value(node.left), value(node.right)
        if isinstance(node.op, ast.Mult):
            d1, d2 = sorted((_digits(left), _digits(right)), reverse=True)
            total += d1 * d2 + (d2 - 1) * (d1 + d2)
        else:
            total += max(_digits(left), _digits(right))
        return _OPS[type(node.op)](left, right)

    value(_tree(expression))
    return total


@dataclass(frozen=True)
class ExpressionLevel:
    """One level drawn from a fixed expression shape.

    ``shape`` is an expression over the letters ``a``, ``b``, ... (each once, in that order),
    ``+ - *``, parentheses and ``?``, an operator drawn from ``choices`` for each task;
    ``operands[i]`` is the inclusive range of the i-th letter, except that a letter right
    after a drawn ``*`` takes ``times`` (2-12, as in the first level set). A bare task shows
    the expression with the usual precedence; a story (``word_share`` of the tasks; only for
    shapes whose parentheses read left to right) tells the same numbers and operators in
    written order, applied one after the other. A draw whose value (or a story's running
    total) would be negative is redrawn.

    ``tier`` is how the policy does on the level without the tool, ``no_tool_rate`` the
    measured pass rate behind it (None where not measured) and ``basis`` where that comes from.
    """

    difficulty: int
    tier: str
    description: str
    shape: str
    operands: tuple[tuple[int, int], ...]
    choices: str = ""
    times: tuple[int, int] = (2, 12)
    word_share: float = 0.0
    no_tool_rate: float | None = None
    basis: str = ""

    def __post_init__(self) -> None:
        letters = [c for c in self.shape if c.isalpha()]
        if letters != [chr(ord("a") + i) for i in range(len(letters))]:
            raise ValueError(f"{self.shape!r}: letters must be a, b, c, ... in order")
        if len(letters) != len(self.operands) or any(lo < 1 or hi < lo
                                                     for lo, hi in self.operands):
            raise ValueError(f"{self.shape!r}: one positive range per letter is needed")
        if ("?" in self.shape) != bool(self.choices) or set(self.choices) - set("+-*"):
            raise ValueError(f"{self.shape!r}: '?' needs choices among + - * (and only then)")
        if self.tier not in TIERS:
            raise ValueError(f"tier {self.tier!r}: choose one of {', '.join(TIERS)}")
        if self.word_share > 0 and not _reads_left_to_right(self.shape):
            raise ValueError(f"{self.shape!r}: a story reads left to right; this shape does "
                             "not, so its word_share must be 0")

    @property
    def n_terms(self) -> int:
        return len(self.operands)

    @property
    def min_operand(self) -> int:
        return min(lo for lo, _ in self.operands)

    @property
    def max_operand(self) -> int:
        return max(hi for _, hi in self.operands)

    @property
    def ops(self) -> str:
        """Every operator a task of this level can hold, in the order ``+-*``."""
        present = set(self.shape + self.choices)
        return "".join(op for op in "+-*" if op in present)

    def _numbers_and_operators(self, rng: np.random.Generator) -> tuple[str, list[int], list[str]]:
        """The shape filled in: (expression, numbers in order, operators in written order)."""
        parts, numbers, operators, drawn = [], [], [], None
        for ch in self.shape:
            if ch == "?":
                drawn = _pick(rng, self.choices)
                parts.append(drawn)
                operators.append(drawn)
            elif ch.isalpha():
                lo, hi = self.times if drawn == "*" else self.operands[len(numbers)]
                numbers.append(int(rng.integers(lo, hi + 1)))
                parts.append(str(numbers[-1]))
                drawn = None
            else:
                parts.append(ch)
                if ch in "+-*":
                    operators.append(ch)
                if not ch.isspace():
                    drawn = None
        return "".join(parts), numbers, operators

    def draw(self, rng: np.random.Generator, word: bool) -> tuple[str, str, int]:
        """One task: (question, Python expression, value); a story when ``word``."""
        for _ in range(1000):
            expr, numbers, operators = self._numbers_and_operators(rng)
            if word:
                total, story = numbers[0], str(numbers[0])
                for op, b in zip(operators, numbers[1:], strict=True):
                    total = _OPS[{"+": ast.Add, "-": ast.Sub, "*": ast.Mult}[op]](total, b)
                    story = f"({story} {op} {b})"
                    if total < 0:
                        break
                if total >= 0:
                    return self._story(rng, numbers, operators), story, total
            else:
                value = evaluate(expr)
                if value >= 0:
                    return self._bare(rng, expr, numbers, operators), expr, value
        raise ValueError(f"level {self.difficulty}: no non-negative task found in 1000 draws")

    def _bare(self, rng: np.random.Generator, expr: str, numbers: list[int],
              operators: list[str]) -> str:
        two_terms = len(numbers) == 2 and "(" not in self.shape
        extra = {"+": _BARE_SUM, "-": _BARE_DIFF, "*": _BARE_PRODUCT}[operators[0]] \
            if two_terms else ()
        a, b = numbers[0], numbers[1]
        return _pick(rng, _BARE + extra).format(e=expr.replace("*", "×"), a=a, b=b)

    def _story(self, rng: np.random.Generator, numbers: list[int], operators: list[str]) -> str:
        name, item = _pick(rng, _NAMES), _pick(rng, _ITEMS)
        parts = [_pick(rng, _START).format(n=name, a=numbers[0], i=item)]
        for op, b in zip(operators, numbers[1:], strict=True):
            parts.append(_pick(rng, _STEP[op]).format(n=name, b=b, i=item))
        parts.append(_pick(rng, _ASK).format(n=name, i=item))
        return " ".join(parts)


def _reads_left_to_right(shape: str) -> bool:
    """True when the shape (``?`` read as ``+``) is ``(((a op b) op c) op d)``: a story."""
    node = _tree(shape.replace("?", "+"))
    while isinstance(node, ast.BinOp):
        if not isinstance(node.right, ast.Name):
            return False
        node = node.left
    return isinstance(node, ast.Name)


_D1, _D2, _D3, _D4 = (1, 9), (10, 99), (100, 999), (1000, 9999)
_SMOLLM2 = "data/arithmetic"

QWEN_LEVEL_TABLE = (
    ExpressionLevel(0, "easy", "a ± b, 1-digit", "a ? b", (_D1, _D1), "+-",
                    word_share=0.3, no_tool_rate=0.495,
                    basis=f"{_SMOLLM2} level 0 (1-digit +) 0.46, level 1 (1-digit -) 0.53"),
    ExpressionLevel(1, "easy", "a ± b, 2-digit", "a ? b", (_D2, _D2), "+-",
                    word_share=0.5, no_tool_rate=0.44,
                    basis=f"{_SMOLLM2} level 2 (10-20, + -) 0.48, level 3 (2-digit +) 0.40"),
    ExpressionLevel(2, "middle", "a ± b ± c, 1-digit", "a ? b ? c", (_D1,) * 3, "+-",
                    word_share=0.5, no_tool_rate=0.35, basis=f"{_SMOLLM2} level 4: 0.35"),
    ExpressionLevel(3, "middle", "three terms 1-50, + - × (× by 2-12)", "a ? b ? c",
                    ((1, 50),) * 3, "+-*", word_share=0.5, no_tool_rate=0.20,
                    basis=f"{_SMOLLM2} level 5: 0.20"),
    ExpressionLevel(4, "middle", "four 2-digit terms, + - × (× by 2-12)", "a ? b ? c ? d",
                    (_D2,) * 4, "+-*", word_share=0.5, no_tool_rate=0.12,
                    basis=f"{_SMOLLM2} level 6: 0.12"),
    ExpressionLevel(5, "hard", "a × b: a 3-digit, b 2-digit", "a * b", (_D3, _D2),
                    word_share=0.5, no_tool_rate=0.01,
                    basis="synthetic 'What is A × B?', A 3-digit, B 2-digit: 0.01"),
    ExpressionLevel(6, "hard", "(a + b) × c - d: a, d 2-digit, b 3-digit, c 3-12",
                    "(a + b) * c - d", (_D2, _D3, (3, 12), _D2), word_share=0.5,
                    no_tool_rate=0.04, basis="synthetic '(a + b) × c - d', same ranges: 0.04"),
    ExpressionLevel(7, "hard", "five 3-digit terms, + - × (× by 2-12)", "a ? b ? c ? d ? e",
                    (_D3,) * 5, "+-*", word_share=0.5, no_tool_rate=0.01,
                    basis=f"{_SMOLLM2} level 7: 0.01"),
    ExpressionLevel(8, "hard", "a × b + c × d - e + f: a-d 2-digit, e, f 3-digit",
                    "a * b + c * d - e + f", (_D2, _D2, _D2, _D2, _D3, _D3), no_tool_rate=0.0,
                    basis="synthetic six-term sums of products: 0.00"),
    ExpressionLevel(9, "hard", "((a + b) × c - d) × e: a, b, d 3-digit, c, e 2-digit",
                    "((a + b) * c - d) * e", (_D3, _D3, _D2, _D3, _D2), word_share=0.5,
                    basis="not measured; two products of 4-6 digits by 2 digits, harder by "
                          "construction than levels 5-8"),
    ExpressionLevel(10, "hard", "(a × b - c) × (d + e) - f: a, c, f 4-digit, b 2-digit, "
                    "d, e 3-digit", "(a * b - c) * (d + e) - f",
                    (_D4, _D2, _D4, _D3, _D3, _D4),
                    basis="not measured; a 6-digit by 3-4 digit product, harder by "
                          "construction than level 9"),
)
# 15% easy, 20% middle, 65% hard (see the module docstring).
QWEN_TRAIN_SHARES = (0.07, 0.08, 0.07, 0.07, 0.06, 0.11, 0.11, 0.11, 0.11, 0.11, 0.10)
# Equal: 60 held-out tasks per level at the default 660.
QWEN_TEST_SHARES = (1 / 11,) * 11
QWEN_EXPECTED_RANDOM_PASS_RATE = round(sum(
    share * (lv.no_tool_rate or 0.0) for lv, share in zip(QWEN_LEVEL_TABLE, QWEN_TRAIN_SHARES,
                                                          strict=True)), 4)


def tier_shares(shares: tuple[float, ...]) -> dict[str, float]:
    """Each tier's total share under ``shares`` (one per level of the ``qwen`` set)."""
    return {tier: round(sum(s for lv, s in zip(QWEN_LEVEL_TABLE, shares, strict=True)
                            if lv.tier == tier), 6) for tier in TIERS}


QWEN_LEVELS = LevelSet(
    name="qwen", policy="Qwen2.5-Coder-0.5B-Instruct", levels=QWEN_LEVEL_TABLE,
    train_shares=QWEN_TRAIN_SHARES, test_shares=QWEN_TEST_SHARES, seed=QWEN_SEED,
    n_train=4400, n_test=660, out_dir=paths.ARITHMETIC_QWEN_DIR, feature_keys=QWEN_FEATURE_KEYS,
    design={
        "order": "levels rise in schoolbook single-digit steps (long_hand_steps)",
        "tiers": {tier: [lv.difficulty for lv in QWEN_LEVEL_TABLE if lv.tier == tier]
                  for tier in TIERS},
        "tier_shares": {"train": tier_shares(QWEN_TRAIN_SHARES),
                        "test": tier_shares(QWEN_TEST_SHARES)},
        "no_tool_rates_measured_with": "Qwen2.5-Coder-0.5B-Instruct, no tool, temperature 1, "
                                       "8 samples per task, strict last \\boxed{}, 512 new "
                                       "tokens, train split",
        "expected_random_pass_rate_no_tool": QWEN_EXPECTED_RANDOM_PASS_RATE,
        "test_shares": "equal per level, so each level's held-out accuracy has the same "
                       "precision",
    })

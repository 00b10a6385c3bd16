"""Self-checks for the notebooks' exercises: each ``check_*`` function of ``nb01`` ... ``nb05``
takes a learner's answer, prints whether it is right and, if not, a hint, and returns True or
False. It never prints the reference solution."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

RIGHT = "Right."


def verdict(right: bool, hint: str) -> bool:
    """Print ``Right.`` or ``Not yet. <hint>``; return ``right``."""
    print(RIGHT if right else f"Not yet. {hint}")
    return bool(right)


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def close(answer: object, expected: float, tol: float) -> bool:
    """``answer`` is a finite number within ``tol`` of ``expected``."""
    return is_number(answer) and abs(float(answer) - expected) <= tol


def all_close(answers: object, expected: Mapping, tol: float) -> bool:
    """``answers`` maps the same keys as ``expected`` to numbers within ``tol``."""
    return (isinstance(answers, Mapping) and set(answers) == set(expected)
            and all(close(answers[k], v, tol) for k, v in expected.items()))


def same_items(answer: object, expected: Sequence) -> bool:
    """``answer`` holds the same items as ``expected``, in any order."""
    try:
        return sorted(map(tuple, answer)) == sorted(map(tuple, expected))
    except TypeError:
        return False

"""Where a final answer sits in a text: the content of its last complete box.

One rule for the two places that unwrap ``\\boxed{...}``: the judge reading a model's reply
(:mod:`mathagent.judge`) and the data readers normalising a taskset's answer cell
(:func:`mathagent.tasks.normalize_answer`).
"""

from __future__ import annotations

import re

# ``\boxed{`` or ``\fbox{`` (brace form) and ``\boxed 42`` (space form, rare in the wild).
_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BOX_SPACE = re.compile(r"\\boxed +([^\s$]+)")


def last_box(text: str) -> str | None:
    """Content of the last *complete* ``\\boxed{...}``/``\\fbox{...}`` (braces matched).

    A box whose braces never close (a reply cut off by ``max_tokens``) is skipped, so the
    previous complete box, if any, counts. ``\\boxed 42`` counts when no brace box exists.
    """
    for match in reversed(list(_BOX_OPEN.finditer(text))):
        depth, start = 1, match.end()
        for i in range(start, len(text)):
            ch = text[i]
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    return text[start:i]
    spaced = _BOX_SPACE.findall(text)
    return spaced[-1] if spaced else None

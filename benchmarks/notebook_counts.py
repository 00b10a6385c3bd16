"""Words and typed numbers per markdown cell of the tutorial's notebooks, and typed numbers
per code cell (the course's limits: no markdown cell over 250 words; in notebooks 04 and 05
no cell with over 16 typed numbers).

    python benchmarks/notebook_counts.py [--over] [NOTEBOOK ...]

Prints one line per cell: notebook, cell index, kind, words, numbers; ``--over`` prints only
the cells over a limit. A typed number is a run of digits (with a decimal point or a comma
inside) not part of a name, a file path or a LaTeX command.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_WORDS = 250
MAX_NUMBERS = 16
NUMBER_LIMITED = ("04_", "05_")
NUMBER = re.compile(r"(?<![\w./\\-])\d+(?:[.,]\d+)*(?![\w/])")


def counts(cell: dict) -> tuple[int, int]:
    """(words, typed numbers) of one cell's source."""
    text = "".join(cell.get("source", []))
    return len(text.split()), len(NUMBER.findall(text))


def rows(notebook: Path):
    cells = json.loads(notebook.read_text())["cells"]
    for i, cell in enumerate(cells):
        words, numbers = counts(cell)
        yield notebook.name, i, cell["cell_type"], words, numbers


def over(name: str, kind: str, words: int, numbers: int) -> bool:
    return ((kind == "markdown" and words > MAX_WORDS)
            or (name.startswith(NUMBER_LIMITED) and numbers > MAX_NUMBERS))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*", type=Path)
    ap.add_argument("--over", action="store_true", help="only the cells over a limit")
    args = ap.parse_args(argv)
    books = args.notebooks or sorted((ROOT / "notebooks").glob("0*.ipynb"))
    bad = 0
    for book in books:
        total = 0
        for name, i, kind, words, numbers in rows(book):
            flag = over(name, kind, words, numbers)
            bad += flag
            total += kind == "markdown"
            if kind == "markdown" and (flag or not args.over):
                mark = "\tOVER" if flag else ""
                print(f"{name}\t{i}\t{kind}\t{words}\t{numbers}{mark}")
            elif kind == "code" and flag:
                print(f"{name}\t{i}\t{kind}\t-\t{numbers}\tOVER")
    print(f"cells over a limit: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

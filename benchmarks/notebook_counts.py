"""Words and typed numbers per markdown cell of the tutorial's notebooks, and typed numbers
per code cell (the course's limits: no markdown cell over 250 words; in notebooks 04 and 05
no cell with over 16 typed numbers).

    python benchmarks/notebook_counts.py [--over] [--summary] [--at REV] [NOTEBOOK ...]

Prints one line per markdown cell: notebook, cell index, kind, words, numbers (and every code
cell over the number limit); ``--over`` prints only the cells over a limit, ``--summary`` one
line per notebook; ``--at REV`` reads the notebooks as they were at a git revision. A typed number is a run of digits (with a decimal point or a comma
inside) not part of a name, a file path or a LaTeX command.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_WORDS = 250
MAX_NUMBERS = 16
NUMBER_LIMITED = ("04_", "05_")
NUMBER = re.compile(r"(?<![\w./\\])\d+(?:[.,]\d+)*(?![\w/])")


def counts(cell: dict) -> tuple[int, int]:
    """(words, typed numbers) of one cell's source."""
    text = "".join(cell.get("source", []))
    return len(text.split()), len(NUMBER.findall(text))


def read(notebook: Path, rev: str | None) -> list[dict]:
    if rev is None:
        return json.loads(notebook.read_text())["cells"]
    rel = notebook.resolve().relative_to(ROOT).as_posix()
    shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{rel}"], capture_output=True,
                           text=True)
    if shown.returncode:
        raise SystemExit(f"{rel} at {rev}: {shown.stderr.strip()}")
    return json.loads(shown.stdout)["cells"]


def rows(notebook: Path, rev: str | None = None):
    cells = read(notebook, rev)
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
    ap.add_argument("--summary", action="store_true", help="one line per notebook")
    ap.add_argument("--at", metavar="REV", help="the notebooks as they were at a git revision")
    args = ap.parse_args(argv)
    books = args.notebooks or sorted((ROOT / "notebooks").glob("0*.ipynb"))
    bad = 0
    if args.summary:
        print("notebook\tmarkdown cells\tmost words\tover 250 words\tmost numbers\tover 16 numbers")
    for book in books:
        found = list(rows(book, args.at))
        flags = [over(*r[:1], *r[2:]) for r in found]
        bad += sum(flags)
        if args.summary:
            mds = [r for r in found if r[2] == "markdown"]
            print(f"{book.name}\t{len(mds)}\t{max(r[3] for r in mds)}\t"
                  f"{sum(r[3] > MAX_WORDS for r in mds)}\t{max(r[4] for r in found)}\t"
                  f"{sum(r[4] > MAX_NUMBERS for r in found) if book.name.startswith(NUMBER_LIMITED) else '-'}")
            continue
        for (name, i, kind, words, numbers), flag in zip(found, flags, strict=True):
            if kind == "markdown" and (flag or not args.over):
                mark = "\tOVER" if flag else ""
                print(f"{name}\t{i}\t{kind}\t{words}\t{numbers}{mark}")
            elif kind == "code" and flag:
                print(f"{name}\t{i}\t{kind}\t-\t{numbers}\tOVER")
    print(f"cells over a limit: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

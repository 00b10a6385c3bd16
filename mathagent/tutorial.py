"""Run the tutorial notebooks in order, each in a fresh kernel, and summarise.

``python -m mathagent tutorial`` executes ``notebooks/NN_*.ipynb`` one after the other,
writes the executed copies under ``runs/tutorial/<timestamp>/`` and prints a one-screen
summary: what ran, how long it took, what was skipped and why, where the figures are.

Notebooks report parts they cannot run on this machine (no GPU, no network) through
:func:`skip`, which prints a marker line the runner collects from the executed outputs;
nothing is skipped silently. Figures are saved through :func:`mathagent.paths.figure_dir`,
which points into the run folder while the tutorial runs and into ``runs/notebooks``
otherwise. An executed copy's links point from the folder it is written to
(:func:`rebase_links`), so ``../docs/glossary.md`` still opens the glossary there.
``tutorial --carry-prose DIR`` gives executed copies the notebooks' current prose
(:func:`carry_prose`) where only their markdown has changed since they ran.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from mathagent import paths

SKIP_MARKER = "[mathagent:skipped]"


def skip(part: str, reason: str) -> None:
    """Tell the reader (and the tutorial summary) that ``part`` did not run, and why."""
    print(f"{SKIP_MARKER} {part}: {reason}")


def tutorial_notebooks(folder: Path = paths.NOTEBOOKS_DIR) -> list[Path]:
    """The numbered notebooks (``01_...``, ``02_...``) in execution order."""
    return sorted(p for p in folder.glob("[0-9][0-9]*.ipynb"))


# a markdown link or image, ](target), or an HTML one, href="target" / src="target"
_MARKDOWN_LINK = re.compile(r'(\]\(|(?:href|src)=")([^)\s"]+)')
# a fenced code block or an inline code span (kept whole by re.split: a capturing group)
_CODE = re.compile(r"(```.*?```|`[^`\n]*`)", re.S)


def rebase_links(text: str, source_dir: Path, out_dir: Path) -> str:
    """``text``, a markdown cell of a notebook in ``source_dir``, with its relative links
    pointing at the same files from ``out_dir``, where its executed copy is written. A link
    to another tutorial notebook stays as it is: it means that notebook's executed copy,
    written beside this one."""
    siblings = {p.name for p in tutorial_notebooks(source_dir)}

    def rebase(m: re.Match) -> str:
        target, hash_, fragment = m.group(2).partition("#")
        if not target or re.match(r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*:|/)", target) or target in siblings:
            return m.group(0)
        moved = Path(os.path.relpath(source_dir.resolve() / target, out_dir.resolve())).as_posix()
        return m.group(1) + moved + ("/" if target.endswith("/") else "") + hash_ + fragment

    # code spans and fenced blocks are shown as written: only the text between them is rebased
    parts = _CODE.split(text)
    return "".join(part if i % 2 else _MARKDOWN_LINK.sub(rebase, part)
                   for i, part in enumerate(parts))


class ProseError(ValueError):
    """An executed copy whose code is not its notebook's: its prose cannot be carried over."""


def _code(cells) -> list[str]:
    return [c.source for c in cells if c.cell_type == "code"]


def carry_prose(notebook: Path, copy: Path) -> bool:
    """Rewrite the executed ``copy`` of ``notebook`` with the notebook's markdown cells (links
    rebased to the copy's folder) around the copy's own code cells and outputs, as they ran.
    True when the copy changed. A copy whose code cells differ from the notebook's was
    executed from other code: :class:`ProseError`, naming both (run the notebook again)."""
    import nbformat

    source, ran = nbformat.read(notebook, as_version=4), nbformat.read(copy, as_version=4)
    if _code(source.cells) != _code(ran.cells):
        raise ProseError(f"{copy}: its code cells are not those of {notebook}; run the "
                         "notebook again (`python -m mathagent tutorial`) instead")
    executed = iter(c for c in ran.cells if c.cell_type == "code")
    cells = []
    for cell in source.cells:
        if cell.cell_type == "code":
            cells.append(next(executed))
        else:
            cell.source = rebase_links(cell.source, notebook.parent, copy.parent)
            cells.append(cell)
    if [(c.cell_type, c.source) for c in cells] == [(c.cell_type, c.source) for c in ran.cells]:
        return False
    ran.cells = cells
    nbformat.write(ran, copy)
    return True


@dataclass
class NotebookResult:
    notebook: str
    seconds: float
    ok: bool
    skipped: list[str] = field(default_factory=list)
    error: str = ""


def _skipped_lines(nb) -> list[str]:
    lines = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            text = out.get("text", "") if out.get("output_type") == "stream" else ""
            lines += [ln[len(SKIP_MARKER):].strip() for ln in text.splitlines()
                      if ln.startswith(SKIP_MARKER)]
    return lines


def run_notebook(path: Path, out_dir: Path, timeout: int = 1800) -> NotebookResult:
    """Execute one notebook in a fresh kernel from its own folder; save the executed copy."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = rebase_links(cell.source, path.parent, out_dir)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    ok, error = True, ""
    try:
        client.execute()
    except CellExecutionError as exc:
        ok = False
        failing = next((i for i, c in enumerate(nb.cells)
                        if any(o.get("output_type") == "error" for o in c.get("outputs", []))),
                       None)
        first_line = str(exc).strip().splitlines()[-1] if str(exc).strip() else repr(exc)
        error = f"cell {failing}: {first_line}" if failing is not None else first_line
    finally:
        nbformat.write(nb, out_dir / path.name)
    return NotebookResult(path.name, time.perf_counter() - start, ok, _skipped_lines(nb), error)


@contextmanager
def _kernel_env(**values: str):
    """Set variables the notebook kernels inherit; restore the caller's afterwards."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_tutorial(notebooks: list[Path], out_dir: Path, smoke: bool) -> list[NotebookResult]:
    """Run ``notebooks`` in order; stop at the first failure (later ones depend on it)."""
    results = []
    with _kernel_env(**{paths.RUN_DIR_ENV: str(out_dir), "MATHAGENT_SMOKE": "1" if smoke else "0",
                        "PYTHONPATH": paths.pythonpath_with_repo()}):
        for i, nb in enumerate(notebooks, 1):
            print(f"[{i}/{len(notebooks)}] {nb.name} ...", flush=True)
            res = run_notebook(nb, out_dir)
            state = "ok" if res.ok else f"FAILED ({res.error})"
            print(f"[{i}/{len(notebooks)}] {nb.name}: {state} in {res.seconds:.0f} s", flush=True)
            results.append(res)
            if not res.ok:
                break
    return results


def format_summary(results: list[NotebookResult], notebooks: list[Path], out_dir: Path) -> str:
    ran = {r.notebook for r in results}
    lines = ["", "Tutorial summary", "================"]
    for r in results:
        status = "ok" if r.ok else "FAILED"
        lines.append(f"  {r.notebook:<34} {status:<7} {r.seconds:7.1f} s")
        if r.error:
            lines.append(f"      error: {r.error}")
        lines += [f"      skipped: {s}" for s in r.skipped]
    lines += [f"  {nb.name:<34} not run (an earlier notebook failed)"
              for nb in notebooks if nb.name not in ran]
    figures = sorted((out_dir / "figures").glob("*")) if (out_dir / "figures").exists() else []
    lines += ["", f"Executed notebooks: {out_dir}",
              f"Figures ({len(figures)}): {out_dir / 'figures'}"]
    return "\n".join(lines)


def carry_prose_command(notebooks: list[Path], folder: Path) -> int:
    """``tutorial --carry-prose DIR``: one line a copy; 2 when a copy is missing or ran other
    code (the copies before it are rewritten, those after it untouched)."""
    for notebook in notebooks:
        copy = folder / notebook.name
        if not copy.is_file():
            print(f"error: {copy}: no executed copy of {notebook.name}", file=sys.stderr)
            return 2
        try:
            changed = carry_prose(notebook, copy)
        except ProseError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        said = "prose carried over" if changed else "already the notebook's prose"
        print(f"{copy}: {said}")
    return 0


def tutorial_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--smoke", action="store_true",
                        help="quick variant of every notebook (what the tests run)")
    parser.add_argument("--only", nargs="+", metavar="NN",
                        help="run only notebooks whose names start with these numbers")
    parser.add_argument("--out", type=Path, help="run folder (default runs/tutorial/<timestamp>)")
    parser.add_argument("--carry-prose", type=Path, metavar="DIR",
                        help="run nothing: give the executed copies in DIR the notebooks' "
                             "current prose (their code must be the notebooks')")


def tutorial_command(args: argparse.Namespace) -> int:
    notebooks = tutorial_notebooks()
    if args.carry_prose is not None:
        return carry_prose_command(notebooks, args.carry_prose)
    if args.only:
        notebooks = [nb for nb in notebooks if nb.name[:2] in set(args.only)]
    if not notebooks:
        print("no notebooks to run", file=sys.stderr)
        return 2
    out_dir = args.out or paths.new_run_dir("tutorial")
    out_dir.mkdir(parents=True, exist_ok=True)
    results = run_tutorial(notebooks, out_dir, smoke=args.smoke or paths.smoke())
    print(format_summary(results, notebooks, out_dir))
    return 0 if results and all(r.ok for r in results) and len(results) == len(notebooks) else 1

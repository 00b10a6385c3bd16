"""Writing output folders without losing what is there.

Every command that writes a folder (taskset builders, measurements, plots, simulations)
goes through :func:`check_output` (an existing, non-empty folder is kept unless ``--force``)
and :func:`staged_output` (the new contents are written beside it and swapped in by
renames, so a failure or a kill midway leaves the old folder as it was).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from mathagent import paths


class OutputError(ValueError):
    """An output folder that is kept (it exists; no ``--force``) or could not be written.

    The message is one line naming the folder; a failed write leaves the folder as it was.
    """


def parse_jsonl(text: str, source: object, error: type[Exception] = ValueError) -> list:
    """The records of JSON Lines ``text`` (blank lines skipped); a line that is not JSON raises
    ``error`` naming ``source`` and the line."""
    records = []
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise error(f"{source}: line {line_no}: not valid JSON ({exc.msg})") from None
    return records


def one_line(exc: BaseException, limit: int = 200) -> str:
    """An exception's message on one line, capped (for one-line error reports)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def has_content(path: str | Path) -> bool:
    """True when ``path`` exists and is a file or a non-empty folder."""
    path = Path(path)
    if path.is_dir():
        return any(path.iterdir())
    return path.exists() or path.is_symlink()


def check_output(out: str | Path, force: bool) -> None:
    """Raise :class:`OutputError` when ``out`` holds something and ``force`` is off.

    An absent or empty folder is free to write (``paths.new_run_dir`` makes empty ones).
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out}: exists and is not a folder; choose another --out")
    if not force and has_content(out):
        raise OutputError(f"{out}: already exists and is kept; pass --force to replace it, "
                          "or choose another --out")


def fresh_run_dir(kind: str) -> Path:
    """An empty ``runs/<kind>/<timestamp>`` folder (suffixed ``-2``, ``-3``, ... when a run
    of the same second already filled the plain name)."""
    out = paths.new_run_dir(kind)
    stamp, n = out.name, 2
    while has_content(out):
        out = paths.new_run_dir(kind, stamp=f"{stamp}-{n}")
        n += 1
    return out


def _copy_entry(src: Path, dst: Path) -> None:
    if src.is_symlink():
        os.symlink(os.readlink(src), dst)
    elif src.is_dir():
        shutil.copytree(src, dst, symlinks=True)
    else:
        try:  # a hard link: instant, and the old folder goes away after the swap anyway
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)


def swap_in(tmp: Path, out: Path) -> None:
    """Put the finished folder ``tmp`` at ``out``; the old ``out`` goes only once it can
    (renamed aside, then deleted after ``tmp`` is in place; put back if that rename fails)."""
    if not out.exists():
        os.rename(tmp, out)
        return
    if out.is_dir() and not any(out.iterdir()):
        out.rmdir()
        os.rename(tmp, out)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    old.rmdir()
    os.rename(out, old)
    try:
        os.rename(tmp, out)
    except BaseException:
        os.rename(old, out)  # put the old output back
        raise
    shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def staged_output(out: str | Path, keep: Callable[[Path], bool] | None = None,
                  ) -> Iterator[Path]:
    """Write a folder's new contents into a temporary folder beside it, then swap it in.

    Yields the temporary folder. When the block finishes, the temporary folder replaces
    ``out`` (two renames on one file system; the old folder is removed last and put back
    if the second rename fails). When the block raises, ``out`` is left exactly as it was
    and the temporary folder is removed; an ``OSError`` (disk full, no permission) becomes
    an :class:`OutputError` naming ``out``. Entries of the old ``out`` for which ``keep``
    returns True are copied into the new folder first, so they survive the swap.
    """
    out = Path(out)
    if out.is_symlink():  # replace the folder the link points at, and keep the link
        out = out.resolve()
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out}: exists and is not a folder; choose another --out")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    except OSError as exc:
        raise OutputError(f"{out}: cannot create the output folder ({one_line(exc)})") from exc
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private
        if keep is not None and out.is_dir():
            for entry in sorted(out.iterdir()):
                if keep(entry):
                    _copy_entry(entry, tmp / entry.name)
        yield tmp
        swap_in(tmp, out)
    except OSError as exc:
        raise OutputError(f"{out}: writing failed ({one_line(exc)}); {out} was left as it "
                          "was") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def rebase(files: Mapping[str, Path], tmp: Path, out: Path) -> dict[str, Path]:
    """Paths written under the temporary folder ``tmp``, as they are under ``out`` after the
    swap."""
    return {k: out / Path(v).relative_to(tmp) for k, v in files.items()}

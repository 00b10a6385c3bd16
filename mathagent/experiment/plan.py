"""Which runs of an experiment are done, which to do, and where a killed run's files go.

A run is **done** when the output folder holds its finished folder (``OUT/<run>/`` with
``params.json`` and ``timings.json``: :func:`mathagent.experiment.layout.lay_out` renames a
folder into place only once it is whole). Otherwise it is **to do**, and **partial** when an
earlier try left files: its work folder (``WORK/<run>/``, a run killed or failed midway), a
half-written ``OUT/.<run>.tmp`` or an ``OUT/<run>/`` without those files. Before such a run
starts again from scratch, :func:`move_aside` moves those files to ``WORK/aside/<run>.<k>/``:
kept, never mixed into the new try or the results.

One experiment process at a time works in a work folder (:class:`WorkLock`).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from mathagent.experiment.layout import RUN_FILES
from mathagent.results.spec import Run, Spec

DONE, TODO, PARTIAL = "done", "to do", "partial"
ASIDE = "aside"


@dataclass(frozen=True)
class Planned:
    """A run and its state; ``leftovers`` are the files an earlier try left (partial)."""

    run: Run
    state: str
    leftovers: tuple[Path, ...] = ()
    mismatch: str | None = None  # a done run made with other settings than the spec's


def work_dir(spec: Spec) -> Path:
    """The default work folder of ``spec``'s runs: ``runs/experiment/<out folder's name>``."""
    from mathagent import paths

    return paths.runs_dir() / "experiment" / spec.out.name


def is_finished(folder: Path) -> bool:
    return folder.is_dir() and all((folder / f).is_file() for f in RUN_FILES)


def plan(spec: Spec, work: Path) -> list[Planned]:
    """Every run of ``spec`` with its state in ``spec.out`` and ``work``."""
    planned = []
    for run in spec.runs():
        result = spec.out / run.name
        if is_finished(result):
            planned.append(Planned(run, DONE, mismatch=settings_mismatch(run, result)))
            continue
        leftovers = tuple(p for p in (work / run.name, spec.out / f".{run.name}.tmp", result)
                          if p.exists())
        planned.append(Planned(run, PARTIAL if leftovers else TODO, leftovers))
    return planned


def settings_mismatch(run: Run, folder: Path) -> str | None:
    """Where finished run ``folder`` was made otherwise than ``run`` asks, or None: its
    config (``params.json``), or a value one of the run's overrides sets that its launched
    config (``launched_config.yaml``, what Trinity was handed) holds otherwise. Keys of the
    ``tuner:`` block are not in that file and are not compared."""
    import yaml

    from mathagent.launch.config import ConfigError, parse_override

    try:
        params = json.loads((folder / "params.json").read_text())
        launched = yaml.safe_load((folder / "launched_config.yaml").read_text()) \
            if (folder / "launched_config.yaml").is_file() else None
    except (OSError, ValueError, yaml.YAMLError):
        return f"{folder}: its params.json or launched_config.yaml cannot be read"
    made = Path(str(params.get("config", ""))).name
    if made and made != run.config.name:
        return f"{folder} was made from {made}, the spec's arm asks for {run.config.name}"
    if not isinstance(launched, dict):
        return None
    for text in run.overrides:
        try:
            key, want = parse_override(text)
        except ConfigError:
            continue
        if key.startswith("tuner."):
            continue
        have, found = launched, True
        for part in key.split("."):
            if isinstance(have, dict) and part in have:
                have = have[part]
            elif isinstance(have, list) and part.isdigit() and int(part) < len(have):
                have = have[int(part)]
            else:
                found = False
                break
        if found and have != want and not (_number(have) and _number(want)
                                            and float(have) == float(want)):
            return f"{folder} was made with {key}={have!r}, the spec asks for {want!r}"
    return None


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def move_aside(planned: Planned, work: Path) -> Path | None:
    """Move a partial run's leftovers to ``work/aside/<run>.<k>/`` (``k`` the first free
    number); return that folder (None when there was nothing to move)."""
    if not planned.leftovers:
        return None
    k = 1
    while (work / ASIDE / f"{planned.run.name}.{k}").exists():
        k += 1
    target = work / ASIDE / f"{planned.run.name}.{k}"
    target.mkdir(parents=True)
    names = {work / planned.run.name: "work"}
    for path in planned.leftovers:
        # the work folder, the half-written OUT/.<run>.tmp, an incomplete OUT/<run>
        name = names.get(path) or ("result.tmp" if path.name.endswith(".tmp") else "result")
        shutil.move(str(path), str(target / name))
    return target


class WorkLockError(RuntimeError):
    """Another live experiment process holds the work folder."""


class WorkLock:
    """``FOLDER/NAME`` (default ``lock.json``) holds the pid and start time of the experiment
    process working there; a second process is refused while the first lives (a lock whose
    process is gone is taken over: that process was killed). The file is made with
    ``O_EXCL``, so of two processes starting at once one gets it. ``experiment`` locks both its
    work folder and its output folder (``.experiment.lock.json``)."""

    def __init__(self, folder: Path, name: str = "lock.json") -> None:
        self.file = folder / name

    def _owner(self):
        from mathagent.reaper import same_process

        try:
            held = json.loads(self.file.read_text())
            return same_process(int(held["pid"]), float(held["created"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def __enter__(self) -> WorkLock:
        import psutil

        me = psutil.Process()
        record = (json.dumps({"pid": me.pid, "created": me.create_time()}) + "\n").encode()
        self.file.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(3):
            try:
                fd = os.open(self.file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                owner = self._owner()
                if owner is not None and owner.pid != os.getpid():
                    raise WorkLockError(f"{self.file}: experiment process {owner.pid} works in "
                                        f"{self.file.parent}; wait for it or stop it") from None
                self.file.unlink(missing_ok=True)  # its process is gone: taken over
                continue
            with os.fdopen(fd, "wb") as fh:
                fh.write(record)
            return self
        raise WorkLockError(f"{self.file}: could not be taken (another process keeps making it)")

    def __exit__(self, *exc) -> None:
        self.file.unlink(missing_ok=True)

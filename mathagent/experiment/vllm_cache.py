"""vLLM's compile cache, kept on this machine from one run to the next.

vLLM compiles its model's graphs at start (``torch.compile``) and keeps what it compiled under
``VLLM_CACHE_ROOT``, in a folder named by a hash of everything the compiled code depends on
(its settings, the model, the GPU, torch's). A later engine of the same hash loads the graphs
instead of compiling them. vLLM 0.23.0 records its compiled artifacts by their absolute path
(vllm-project/vllm#52154), so a cache must stay where it was written: a copy elsewhere does
not load.

So the experiment command keeps numbered cache folders, ``runs/vllm_cache/slot<k>``, that live
as long as the checkout: each run takes the first folder no other run holds, and holds it (an
exclusive ``flock`` on the folder's ``.lock``) until it ends. Runs one after another then reuse
slot 0, whatever their spec; runs side by side (``--parallel``) each write a folder of their
own: vLLM does not say that two engines may compile into one folder at once. A slot folder
that no run holds may be removed at any time: the next run to take it compiles again.

A lock ends with the process that held it, however it ended, so a killed run frees its folder
(where the experiment process itself is killed, its watchdog stops the run's ``train`` and Ray
head within a second or so, while a run of another experiment process would still be starting
its own head). ``flock`` locks hold between the processes of one machine; on a network file
system that does not pass them on, keep ``runs/`` on a local disk. Whether a run compiled or
loaded its graphs, and the seconds it took, are in its log (``torch.compile took``);
:func:`mathagent.experiment.layout.vllm_compile` reads them.
"""

from __future__ import annotations

import fcntl
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from mathagent import paths

#: The file of a slot folder that its run holds locked.
LOCK = ".lock"


def cache_root() -> Path:
    """Where the slot folders are: ``runs/vllm_cache`` (``MATHAGENT_RUNS`` moves it)."""
    return paths.runs_dir() / "vllm_cache"


@dataclass
class Slot:
    """A slot folder and the open lock file that holds it."""

    folder: Path
    lock: IO[str]

    def release(self) -> None:
        """Give the folder back (closing the file drops the lock); a second call is a no-op."""
        self.lock.close()


def claim(root: Path | None = None) -> Slot:
    """Hold the first slot folder under ``root`` (default :func:`cache_root`) that no live
    process holds, making it where none is free."""
    root = root or cache_root()
    k = 0
    while True:
        folder = root / f"slot{k}"
        folder.mkdir(parents=True, exist_ok=True)
        lock = open(folder / LOCK, "a")  # noqa: SIM115 - kept open: the lock is the file's
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            k += 1
            continue
        return Slot(folder, lock)

# Every pytest run (unit tests and `pytest --nbmake notebooks/`) uses the quick variant of
# the notebooks; the kernels nbmake starts inherit this environment.
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("MATHAGENT_SMOKE", "1")

# Under pytest-xdist each worker, and every process a test starts, computes on one thread
# (torch, numpy and llama.cpp's BLAS read OMP_NUM_THREADS when they load): with two workers on
# two cores, two thread pools of two would fight over the cores whenever both workers compute.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

# tests/bounds.py (the bounds on the tests' waits, scaled in one place by
# MATHAGENT_TEST_TIMEOUT_SCALE) is imported by the tests of every folder of tests/.
sys.path.insert(0, str(Path(__file__).resolve().parent / "tests"))


@pytest.fixture(scope="session")
def short_tmp_factory():
    """Make a fresh folder directly under /tmp (removed after the session): for a Ray head's
    temp dir, whose AF_UNIX socket paths must stay within 107 bytes; pytest's own folders
    are too deep for that under several workers (``.../pytest-N/popen-gwN/...``)."""
    made: list[Path] = []

    def make(prefix: str) -> Path:
        made.append(Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp")))
        return made[-1]

    yield make
    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)


# Under pytest-xdist with `--dist loadgroup` (the README's test command: `pytest -n 2 --dist
# loadgroup ...`) a test file is one unit of work, so its module fixtures are made once, and the
# notebooks are one unit that runs them in order (01 ... 05, as the tutorial does). The
# notebooks, the longest unit, go first; the trainer tests last, so that the trainers'
# checkpoint writing (1.6 GB each for the bundled model) does not meet notebook 04's. Without
# -n nothing changes.
_RANK = pytest.StashKey[int]()


def _rank(path: str) -> int:
    return 0 if path.startswith("notebooks/") else 2 if path.startswith("tests/grpo/") else 1


def pytest_collection_modifyitems(config, items):
    if not getattr(config.option, "numprocesses", None):
        return
    for item in items:
        path = Path(item.path).resolve().relative_to(Path(config.rootpath).resolve()).as_posix()
        group = "notebooks" if path.startswith("notebooks/") else path
        item.add_marker(pytest.mark.xdist_group(group))
        item.stash[_RANK] = _rank(path)
    items.sort(key=lambda item: item.stash[_RANK])   # stable: the collection order within

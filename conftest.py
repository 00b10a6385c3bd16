# Every pytest run (unit tests and `pytest --nbmake notebooks/`) uses the quick variant of
# the notebooks; the kernels nbmake starts inherit this environment.
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("MATHAGENT_SMOKE", "1")

# What the tests and the notebooks they run write as runs (notebook 04's train-local run with
# its 1.6 GB checkpoint, the Trinity smoke runs' logs, the notebooks' figures and scratch
# folders) goes to one temporary folder (under TMPDIR, else /tmp) for the whole session,
# removed at its end, not to the checkout's runs/, which is the user's: each test session there
# left 1.6 GB behind. Workers of pytest-xdist inherit the folder; the process that made it
# removes it. MATHAGENT_RUNS set by the caller is kept.
_OWN_RUNS = None
if "MATHAGENT_RUNS" not in os.environ:
    _OWN_RUNS = tempfile.mkdtemp(prefix="mathagent-test-runs-")
    os.environ["MATHAGENT_RUNS"] = _OWN_RUNS


def pytest_unconfigure(config):
    if _OWN_RUNS is not None:
        shutil.rmtree(_OWN_RUNS, ignore_errors=True)


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

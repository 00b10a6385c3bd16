"""Where things live: the repository, its data, configs and run folders.

Notebooks run from ``notebooks/`` (nbmake does so) and scripts from anywhere, so every
path in the package is derived from this file's location, never from the working
directory. ``MATHAGENT_RUNS`` overrides where run outputs go.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_ROOT / "data"
CONFIGS_DIR = REPO_ROOT / "configs"
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
RESULTS_DIR = REPO_ROOT / "results"

# The bundled offline taskset (arithmetic word problems with measured pass rates).
ARITHMETIC_DIR = DATA_DIR / "arithmetic"
# The second arithmetic taskset, sized for Qwen2.5-Coder-0.5B-Instruct (no tools).
ARITHMETIC_QWEN_DIR = DATA_DIR / "arithmetic_qwen"
# Small raw files in the upstream schemas (guru math, AIME), for the tutorial's conversions.
SAMPLES_DIR = DATA_DIR / "samples"
# Where ``prepare-data`` writes the guru math taskset and the AIME-24 eval set by default;
# the full configs point here.
GURU_DIR = DATA_DIR / "guru_math"
AIME24_DIR = DATA_DIR / "aime24"


#: Folder names under :func:`runs_dir`: ``train-local`` runs (``train_local/<stamp>-...``) and
#: the short Trinity-RFT runs of one-GPU configs (``smoke/<config>``, also under a notebook's
#: scratch folder).
TRAIN_LOCAL_RUNS = "train_local"
SMOKE_RUNS = "smoke"


def runs_dir() -> Path:
    """Root folder for run outputs (ignored by git)."""
    return Path(os.environ.get("MATHAGENT_RUNS", REPO_ROOT / "runs"))


def new_run_dir(kind: str, stamp: str | None = None) -> Path:
    """Create and return ``runs/<kind>/<timestamp>``; ``stamp`` fixes the name (tests)."""
    stamp = stamp or datetime.now().strftime("%Y%m%d-%H%M%S")
    path = runs_dir() / kind / stamp
    path.mkdir(parents=True, exist_ok=True)
    return path


#: Set by ``python -m mathagent tutorial``: the run folder whose ``figures/`` collects figures.
RUN_DIR_ENV = "MATHAGENT_RUN_DIR"


def figure_dir() -> Path:
    """Folder for figures written by the current notebook run."""
    root = os.environ.get(RUN_DIR_ENV)
    path = Path(root) / "figures" if root else runs_dir() / "notebooks" / "figures"
    path.mkdir(parents=True, exist_ok=True)
    return path


def scratch_dir(name: str) -> Path:
    """A notebook's scratch folder, beside the figures of the current run (created)."""
    path = figure_dir().parent / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def pythonpath_with_repo() -> str:
    """``PYTHONPATH`` with the repository root first, then the caller's entries: for processes
    (notebook kernels, Ray workers) that must import this checkout's ``mathagent`` from any
    working directory, also where the package is not installed (the offline GPU machine)."""
    root = str(REPO_ROOT)
    entries = [e for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if e and e != root]
    return os.pathsep.join([root, *entries])


def smoke() -> bool:
    """True when ``MATHAGENT_SMOKE`` asks for the quick variant (tests and CI set it)."""
    return os.environ.get("MATHAGENT_SMOKE", "0").lower() not in ("", "0", "false", "no")

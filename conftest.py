# Every pytest run (unit tests and `pytest --nbmake notebooks/`) uses the quick variant of
# the notebooks; the kernels nbmake starts inherit this environment.
import os
import sys
from pathlib import Path

os.environ.setdefault("MATHAGENT_SMOKE", "1")

# tests/bounds.py (the bounds on the tests' waits, scaled in one place by
# MATHAGENT_TEST_TIMEOUT_SCALE) is imported by the tests of every folder of tests/.
sys.path.insert(0, str(Path(__file__).resolve().parent / "tests"))

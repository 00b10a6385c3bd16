# Every pytest run (unit tests and `pytest --nbmake notebooks/`) uses the quick variant of
# the notebooks; the kernels nbmake starts inherit this environment.
import os

os.environ.setdefault("MATHAGENT_SMOKE", "1")

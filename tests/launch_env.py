"""The environment the launch tests run in (imported by tests/test_*launch.py).

A hub endpoint that refuses at once (the hub is unreachable here anyway; this keeps the model
check fast and deterministic), no model path or Ray address from the caller's shell, and
checkpoints and run folders under the test's own folder.
"""

from pathlib import Path

import pytest


def isolate(mp: pytest.MonkeyPatch, root: Path) -> None:
    mp.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    mp.delenv("HF_HUB_OFFLINE", raising=False)
    mp.delenv("TRINITY_MODEL_PATH", raising=False)
    mp.delenv("RAY_ADDRESS", raising=False)
    mp.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(root / "checkpoints"))
    mp.setenv("MATHAGENT_RUNS", str(root / "runs"))

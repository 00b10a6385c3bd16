"""The environment the launch tests run in (imported by the tests beside it).

A hub endpoint that refuses at once (this keeps the model check fast and deterministic), no
model path or Ray address from the caller's shell, and checkpoints and run folders under the
test's own folder.

What the launch machine has (GPUs, vllm, the model in the local hub cache) differs between a
CPU machine and a GPU machine; the probes below ask the same questions the preflight asks, so
a test can expect what this machine's preflight must report.
"""

from pathlib import Path

import pytest

from mathagent import launch, serving


def isolate(mp: pytest.MonkeyPatch, root: Path) -> None:
    mp.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    mp.delenv("HF_HUB_OFFLINE", raising=False)
    mp.delenv("TRINITY_MODEL_PATH", raising=False)
    mp.delenv("RAY_ADDRESS", raising=False)
    mp.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(root / "checkpoints"))
    mp.setenv("MATHAGENT_RUNS", str(root / "runs"))


def closed_address() -> str:
    """host:port on 127.0.0.1 where nothing listens."""
    return f"127.0.0.1:{serving.free_port()}"


def visible_gpus() -> int:
    """GPUs this process sees, as the preflight counts them."""
    return launch.visible_gpus()


def cuda_available() -> bool:
    """What Trinity's GPU memory check asks (``torch.cuda.is_available()``)."""
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def vllm_importable() -> bool:
    return launch.vllm_importable()


def hub_cached(repo_id: str) -> bool:
    """Whether the model is in the local hub cache (the preflight's first question; with the
    refusing endpoint of :func:`isolate` the hub itself never answers)."""
    return launch.hub_status(repo_id) == "cached"

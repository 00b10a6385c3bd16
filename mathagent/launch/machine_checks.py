"""Preflight checks of the machine: GPUs, vllm, versions, the model and the Ray cluster.

Each check appends to a :class:`~mathagent.launch.preflight.Preflight`: what passed, what is
wrong (naming the setting at fault) and, in a dry run, what the launch machine must provide.
:func:`trinity_reservation` is what Trinity's actors reserve in Ray, which
:func:`check_ray_resources` holds against what the cluster offers.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mathagent.launch.ray_head import cluster_resources
from mathagent.serving.vllm_server import visible_gpus, vllm_importable  # shared probes

if TYPE_CHECKING:
    from mathagent.launch.preflight import Preflight


HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def hub_status(repo_id: str, timeout: float = 3.0) -> str:
    """``"cached"``, ``"available"``, ``"not-found"`` or ``"unreachable"`` for a hub model id."""
    try:
        from huggingface_hub import try_to_load_from_cache

        if isinstance(try_to_load_from_cache(repo_id, "config.json"), str):
            return "cached"
    except Exception:
        pass
    from mathagent.tasks import hub_offline, probe_hub

    if hub_offline():
        return "unreachable"
    code = probe_hub(f"models/{repo_id}", timeout)
    if code is None:
        return "unreachable"
    return "available" if code < 400 or code in (401, 403) else "not-found"


def check_model(config: Any, result: Preflight, dry_run: bool) -> None:
    """A local Hugging Face folder, a cached hub id, or a hub id the hub can serve."""
    path = config.model.model_path
    key = "model.model_path"
    if not path:
        result.problems.append(f"{key}: not set")
        return
    local = Path(path).expanduser()
    if local.exists():
        if local.is_dir() and (local / "config.json").is_file():
            result.passed.append(f"model {path}: local Hugging Face folder")
        else:
            result.problems.append(f"{key}: {path} exists but is not a Hugging Face model "
                                   "folder (no config.json); vLLM and the trainer need one")
        return
    if not HUB_ID.match(path):
        result.problems.append(f"{key}: {path} does not exist (and is not a hub id like "
                               "Qwen/Qwen3-0.6B); set TRINITY_MODEL_PATH or "
                               "tuner.model.model_path=...")
        return
    status = hub_status(path)
    if status in ("cached", "available"):
        result.passed.append(f"model {path}: {'in the local hub cache' if status == 'cached' else 'served by the Hugging Face hub'}")
    elif status == "not-found":
        result.problems.append(f"{key}: {path} is neither a local folder nor a model on the "
                               "Hugging Face hub")
    elif dry_run:
        result.requirements.append(f"model {path}: downloadable from the Hugging Face hub or "
                                   "cached (the hub is unreachable here)")
    else:
        result.problems.append(f"{key}: {path} is not a local folder and the Hugging Face hub "
                               "is unreachable; download it and set TRINITY_MODEL_PATH or "
                               "tuner.model.model_path to the folder")


def check_machine(config: Any, result: Preflight, dry_run: bool) -> None:
    """GPU count against the cluster size, and vllm."""
    cluster = config.cluster
    have = visible_gpus()
    need_node, nodes = cluster.gpu_per_node, cluster.node_num
    if not need_node or not nodes:
        if dry_run:
            result.problems.append(
                "cluster.node_num / cluster.gpu_per_node: set both explicitly; otherwise Trinity "
                "asks Ray and, on a machine without GPUs, fails with ZeroDivisionError")
        else:
            result.notes.append("cluster size is taken from Ray at launch")
    elif dry_run:
        result.requirements.append(
            f"{nodes * need_node} GPU(s): cluster.node_num={nodes} x cluster.gpu_per_node="
            f"{need_node} (this machine has {have})")
    elif have < need_node:
        result.problems.append(
            f"cluster.gpu_per_node: the config needs {need_node} GPU(s) per node "
            f"({nodes * need_node} in all) but this machine has {have} "
            "(torch.cuda.device_count())")
    else:
        result.passed.append(f"{have} GPU(s) visible, {need_node} needed per node")

    engine = config.explorer.rollout_model.engine_type
    if not engine.startswith("vllm"):
        return
    if vllm_importable():
        result.passed.append("vllm is importable")
    elif dry_run:
        result.requirements.append("vllm importable (pip install 'trinity-rft[vllm]'; CUDA only)"
                                   " - it is not installed here")
    else:
        result.problems.append("vllm is not importable: Trinity's explorer serves the rollout "
                               "model with it; pip install 'trinity-rft[vllm]' on a CUDA machine")


#: The upstream versions this package's launch path was run with (FACTS of the H200 runs).
TESTED_VERSIONS = {"trinity-rft": "0.6.0", "verl": "0.8.0", "agentscope": "1.0.21",
                   "vllm": "0.23.0"}


def check_versions(config: Any, result: Preflight) -> None:
    """Upstream versions against the tested ones; the colocate fix's version gate; the
    levers' settings."""
    from mathagent import runner_slots
    from mathagent.compat import LEVER_ENVS, installed_version, lever_problem

    found = {name: installed_version(name) for name in TESTED_VERSIONS}
    off = [f"{n} {v} (tested: {TESTED_VERSIONS[n]})" for n, v in found.items()
           if v is not None and v != TESTED_VERSIONS[n]]
    if off:
        result.notes.append("versions differ from the tested set: " + ", ".join(off))
    trinity = found["trinity-rft"]
    for name in LEVER_ENVS:
        if name != runner_slots.SLOTS_ENV:
            wrong = lever_problem(name, os.environ.get(name))
            result.problems += [wrong] if wrong else []
    slots_problem = lever_problem(runner_slots.SLOTS_ENV, os.environ.get(runner_slots.SLOTS_ENV))
    mode = str(getattr(config.explorer.concurrent_mode, "value", config.explorer.concurrent_mode))
    if slots_problem is None and runner_slots.slots() > 1 and mode not in ("asynchronous",
                                                                            "multi-threading"):
        slots_problem = (f"{runner_slots.SLOTS_ENV}={runner_slots.slots()}: explorer.concurrent_mode "
                         f"is {mode!r}, where a runner reuses one workflow instance; several tasks "
                         "at once need 'asynchronous' or 'multi-threading'")
    if slots_problem:
        result.problems.append(slots_problem)
    if config.mode == "colocate" and trinity not in (None, "0.6.0"):
        result.notes.append(
            f"mode colocate: the fix for Trinity-RFT#602 (one-GPU deadlock) is for 0.6.0 and is "
            f"skipped for trinity-rft {trinity}; if this version still reserves a GPU for the "
            "vLLM engine, the trainer will wait for a second GPU forever")


def check_colocate_switch(checked_config: Any, result: Preflight) -> None:
    """In colocate mode the Trinity-RFT#602 fix needs ``rollout_model.cuda_visible_devices``.

    Trinity 0.6.0 sets it (to ``"0"``) only while capping ``gpu_memory_utilization`` from above
    0.25; a config asking for 0.25 or less leaves it unset, the fix cannot tell that the engine
    shares the trainer's GPU, and the run waits for a second GPU forever.
    """
    from mathagent.compat import installed_version

    rollout = checked_config.explorer.rollout_model
    if (checked_config.mode != "colocate" or rollout.cuda_visible_devices is not None
            or installed_version("trinity-rft") != "0.6.0"):
        return
    result.problems.append(
        f"explorer.rollout_model.gpu_memory_utilization={rollout.gpu_memory_utilization}: in "
        "colocate mode Trinity-RFT 0.6.0 marks the engine as sharing the GPU only when this is "
        "above 0.25 (it then caps it at 0.25), and without that mark the one-GPU run deadlocks "
        "(Trinity-RFT#602); remove the setting, or set "
        "explorer.rollout_model.cuda_visible_devices=0")


#: CPUs verl's FSDP trainer pool reserves per trainer GPU (``ResourcePoolManager``'s
#: ``max_colocate_count``, verl 0.8.0), and each vLLM engine's placement-group bundle.
TRAINER_CPUS_PER_GPU = 3
ENGINE_CPUS = 1


def trinity_reservation(config: Any) -> tuple[float, float, list[str]]:
    """``(CPUs, GPUs, parts)`` that Trinity's actors reserve in Ray for a checked config.

    Ray places a placement group only when all its bundles fit, and Trinity waits for it
    without a timeout, so a head offering less makes a run hang instead of failing. In
    ``colocate`` mode the engine reserves nothing (with the Trinity-RFT#602 fix) and the
    trainer one GPU; in ``both`` mode each engine reserves a bundle of ``gpu_per_engine`` GPUs
    and 1 CPU, and the trainer pool 1 GPU and 3 CPUs per trainer GPU.
    """
    cluster, explorer = config.cluster, config.explorer
    cpus = gpus = 0.0
    parts = []
    if config.mode in ("both", "explore", "bench", "serve"):
        models = [explorer.rollout_model, *explorer.auxiliary_models]
        engines = sum(m.engine_num * m.nnodes for m in models if m.gpu_per_engine)
        engine_gpus = sum(m.engine_num * m.gpu_per_engine for m in models)
        cpus += engines * ENGINE_CPUS
        gpus += engine_gpus
        parts.append(f"{engines} vLLM engine(s): {engine_gpus:g} GPU, {engines * ENGINE_CPUS} CPU")
    if config.mode in ("both", "train", "colocate"):
        n = cluster.trainer_gpu_num or 0
        cpus += n * TRAINER_CPUS_PER_GPU
        gpus += n
        parts.append(f"trainer on {n} GPU(s): {n} GPU, {n * TRAINER_CPUS_PER_GPU} CPU")
    if config.mode == "colocate":
        parts.append("vLLM engine shares the trainer's GPU (no reservation)")
    return cpus, gpus, parts


def check_ray_resources(config: Any, address: str, result: Preflight,
                        resources: dict[str, float] | None = None) -> None:
    """The Ray cluster's CPUs and GPUs against :func:`trinity_reservation`."""
    need_cpu, need_gpu, parts = trinity_reservation(config)
    if resources is None:
        try:
            resources = cluster_resources(address)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            result.problems.append(f"cluster.ray_address: {exc}")
            return
    have_cpu, have_gpu = resources.get("CPU", 0.0), resources.get("GPU", 0.0)
    what = f"Trinity reserves {need_cpu:g} CPU and {need_gpu:g} GPU ({'; '.join(parts)})"
    if have_cpu < need_cpu or have_gpu < need_gpu:
        result.problems.append(
            f"Ray cluster at {address} offers {have_cpu:g} CPU and {have_gpu:g} GPU, but {what}; "
            "the run would wait forever. Restart the head with `python -m mathagent ray stop` "
            "and `python -m mathagent ray start` (all CPUs and GPUs by default)")
    else:
        result.passed.append(f"Ray cluster offers {have_cpu:g} CPU and {have_gpu:g} GPU; {what}")

"""A short real run of a one-GPU config: the exact command, its environment, and the run.

:func:`one_gpu_smoke` turns a one-GPU Trinity config (``mode: colocate``, one node of one GPU:
the ``*_arithmetic`` configs) into the ``python -m mathagent train`` call of a few steps with
an evaluation at step 0 and after the last step, the seeds fixed, and the variables it runs
with (the model folder, a checkpoint root of its own). It reads only the YAML; the dry run
(the same command with ``--dry-run``) checks the rest on any machine.

:func:`run_smoke` runs it on a machine with a CUDA GPU and vllm: it exports the bundled model
first when the model folder is missing, starts a Ray head for the run (every CPU and GPU)
and stops it afterwards, shows the steps as they finish, and returns the end of the log
and the timings. Without a CUDA GPU (or without vllm) it starts nothing and says why.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path

from mathagent import paths
from mathagent.launch.config import ConfigError
from mathagent.serving.connection import ENV_MODEL_FOLDER
from mathagent.serving.vllm_server import hf_folder, visible_gpus, vllm_importable

CHECKPOINT_ENV = "TRINITY_CHECKPOINT_ROOT_DIR"
#: Where ``export-model`` writes the bundled model for the one-GPU runs (README).
DEFAULT_MODEL_FOLDER = paths.REPO_ROOT / "models" / "smollm2"

# Trinity's log lines that mark the run's progress (explorer and trainer, 0.6.0).
_EVAL = re.compile(r"Evaluation at step (\d+) started")
_TRAINED = re.compile(r"Training at step (\d+) finished")


@dataclass(frozen=True)
class SmokePlan:
    """The run: ``command`` with ``env`` set on top of this process's environment.

    ``prepare`` is the command that writes the model folder, run first when the folder has
    no ``config.json``. ``log`` is where the run's output goes.
    """

    config: Path
    steps: int
    command: list[str]
    env: dict[str, str]
    model_folder: Path
    prepare: list[str]
    log: Path

    def with_ray(self, address: str) -> SmokePlan:
        """The same run on the Ray head at ``address``."""
        # a setting goes before the options (`train` takes its KEY=VALUE settings first)
        at = self.command.index("--compare")
        return replace(self, command=[*self.command[:at], f"cluster.ray_address={address}",
                                      *self.command[at:]])

    def dry_run(self) -> list[str]:
        """The command's preflight alone (``--dry-run``; no GPU needed)."""
        return [*self.command, "--dry-run"]

    def shell(self) -> str:
        """The run as one shell line, to read or to paste."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return f"{env} {shlex.join(self.command)}"


def _one_gpu_layout(config: Path) -> None:
    """Raise :class:`ConfigError` unless ``config`` is a one-GPU colocate config."""
    import yaml

    try:
        raw = yaml.safe_load(config.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{config}: cannot read the config ({type(exc).__name__})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{config}: not a Trinity-RFT config (no mapping at the top)")
    cluster = raw.get("cluster") or {}
    nodes, gpus = cluster.get("node_num"), cluster.get("gpu_per_node")
    if raw.get("mode") != "colocate" or nodes != 1 or gpus != 1:
        raise ConfigError(
            f"{config}: mode={raw.get('mode')!r}, cluster.node_num={nodes!r}, "
            f"cluster.gpu_per_node={gpus!r}: not a one-GPU config (mode colocate, one node of "
            "one GPU), e.g. configs/config_random_arithmetic.yaml")


def one_gpu_smoke(config: str | Path, *, steps: int = 2, seed: int = 0,
                  model_folder: str | Path | None = None, work_dir: str | Path | None = None,
                  overrides: tuple[str, ...] = ()) -> SmokePlan:
    """The smoke run of a one-GPU config: ``steps`` steps, evaluated at 0 and at the end.

    ``model_folder`` (default ``TRINITY_MODEL_PATH``, else ``models/smollm2``) is the Hugging
    Face folder trained; ``work_dir`` (default ``runs/smoke/<config name>``) takes the log
    and the checkpoints. ``overrides`` are further ``KEY=VALUE`` settings. A config that is not
    one GPU, or ``steps`` below 1, is a :class:`ConfigError` naming it; nothing is written.
    """
    config = Path(config)
    if not config.is_absolute() and not config.exists():
        config = paths.REPO_ROOT / config
    if not config.is_file():
        raise ConfigError(f"{config}: no such config")
    config = config.resolve()
    if int(steps) < 1:
        raise ConfigError(f"steps={steps}: a smoke run needs at least one step")
    _one_gpu_layout(config)
    folder = Path(model_folder or os.environ.get(ENV_MODEL_FOLDER) or DEFAULT_MODEL_FOLDER)
    folder = folder if folder.is_absolute() else paths.REPO_ROOT / folder
    work = Path(work_dir) if work_dir else paths.runs_dir() / paths.SMOKE_RUNS / config.stem
    command = [sys.executable, "-m", "mathagent", "train", "--config", str(config),
               f"buffer.total_steps={int(steps)}",
               f"tuner.algorithm.eval_interval_steps={int(steps)}",
               f"buffer.explorer_input.taskset.data_selector.seed={int(seed)}",
               f"explorer.rollout_model.seed={int(seed)}",
               *overrides, "--compare", "none"]
    env = {ENV_MODEL_FOLDER: str(folder), CHECKPOINT_ENV: str(work / "checkpoints")}
    prepare = [sys.executable, "-m", "mathagent", "export-model", str(folder)]
    return SmokePlan(config=config, steps=int(steps), command=command, env=env,
                     model_folder=folder, prepare=prepare, log=work / "train.log")


@dataclass
class SmokeResult:
    """What :func:`run_smoke` did: ``status`` ``"skipped"``, ``"ok"`` or ``"failed"``."""

    status: str
    reason: str
    command: list[str] = field(default_factory=list)
    returncode: int | None = None
    log: Path | None = None
    log_tail: str = ""
    timings: dict[str, float] = field(default_factory=dict)

    def __str__(self) -> str:
        times = ", ".join(f"{k} {v:.0f} s" if k.endswith("_s") else f"{k} {v:g}"
                          for k, v in self.timings.items())
        line = self.reason if self.status == "skipped" else f"{self.status}: {self.reason}"
        return line + (f" ({times})" if times else "")


def smoke_blocker(gpus: int | None = None, vllm: bool | None = None) -> str | None:
    """Why a smoke run cannot start here, as its ``skipped:`` line; None when it can."""
    gpus = visible_gpus() if gpus is None else gpus
    if gpus < 1:
        return "skipped: no CUDA GPU (torch.cuda.device_count() is 0); the run needs one"
    vllm = vllm_importable() if vllm is None else vllm
    if not vllm:
        return ("skipped: vllm is not importable; install requirements/gpu.lock "
                "(docs/install.md)")
    return None


def _tail(path: Path, lines: int) -> str:
    with open(path, encoding="utf-8", errors="replace") as fh:
        return "".join(deque(fh, maxlen=lines))


def run_smoke(plan: SmokePlan, *, progress: bool = True, tail_lines: int = 40,
              gpus: int | None = None, vllm: bool | None = None) -> SmokeResult:
    """Run ``plan`` where a CUDA GPU and vllm are; otherwise start nothing and say why.

    Exports the model when ``plan.model_folder`` has no ``config.json``, starts a Ray head
    offering every CPU and GPU for the run and stops it (and only it) afterwards, runs the
    command with its output in ``plan.log`` and a bar of the trained steps, and returns the
    last ``tail_lines`` lines of the log and the timings: ``export_s``, ``startup_s`` (to the
    step-0 evaluation), ``train_s`` (the whole command), ``steps`` (trained).
    """
    blocker = smoke_blocker(gpus, vllm)
    if blocker:
        return SmokeResult("skipped", f"{blocker}; it would run: {plan.shell()}",
                           command=plan.command)
    from tqdm.auto import tqdm

    from mathagent.launch.ray_head import local_ray_head

    plan.log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **plan.env}
    timings: dict[str, float] = {}
    if not hf_folder(plan.model_folder):
        start = time.monotonic()
        with open(plan.log.with_name("export.log"), "w") as fh:
            code = subprocess.run(plan.prepare, cwd=paths.REPO_ROOT, env=env, stdout=fh,
                                  stderr=subprocess.STDOUT).returncode
        timings["export_s"] = time.monotonic() - start
        if code != 0:
            return SmokeResult("failed", f"export-model exited with {code}",
                               plan.prepare, code, plan.log.with_name("export.log"),
                               _tail(plan.log.with_name("export.log"), tail_lines), timings)
    with local_ray_head(num_cpus=None, num_gpus=None) as head:
        run = plan.with_ray(head.address)
        bar = tqdm(total=plan.steps, desc=f"{plan.config.stem}: starting",
                   disable=not progress, unit="step")
        start = time.monotonic()
        with open(plan.log, "w") as out, open(plan.log, encoding="utf-8",
                                                errors="replace") as follow:
            proc = subprocess.Popen(run.command, cwd=paths.REPO_ROOT, env=env, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            trained = 0
            try:
                while True:
                    done = proc.poll() is not None
                    for line in follow.readlines():
                        if _EVAL.search(line) and "startup_s" not in timings:
                            timings["startup_s"] = time.monotonic() - start
                            bar.set_description(f"{plan.config.stem}: training")
                        if (m := _TRAINED.search(line)) and int(m[1]) > trained:
                            bar.update(int(m[1]) - trained)
                            trained = int(m[1])
                    if done:
                        break
                    time.sleep(1.0)
            except BaseException:
                proc.terminate()  # the run this function started, and only it
                proc.wait()
                raise
            finally:
                bar.close()
    timings["train_s"] = time.monotonic() - start
    timings["steps"] = trained
    code = proc.returncode
    ok = code == 0 and trained >= plan.steps
    reason = (f"{trained} of {plan.steps} steps trained" if code == 0
              else f"train exited with {code} after {trained} of {plan.steps} steps")
    return SmokeResult("ok" if ok else "failed", reason, run.command, code, plan.log,
                       _tail(plan.log, tail_lines), timings)

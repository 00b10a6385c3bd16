"""Tutorial-scale GRPO: a compact, readable mirror of Trinity-RFT's explore/train loop.

Trinity-RFT splits reinforcement fine-tuning into an *explorer* (vLLM engines run the
workflow on a batch of tasks and the judge scores each run), a *buffer* (the
``pass_rate_calculator`` operator turns rewards into per-task pass rates that the task
selector receives through ``feedback``) and a *trainer* (verl computes GRPO advantages and
updates the policy). That needs vLLM and several GPUs. This module runs the same loop in
one process on one GPU, or on a CPU with tiny settings, with the bundled SmolLM2-135M:

1. **select**  ``B`` task indices from the selector (Trinity's own selector classes or
   :class:`mathagent.selectors.BOTSSelector`, built by ``make_selector``);
2. **explore** ``n`` completions per task with batched sampling (:meth:`Policy.sample`);
3. **judge**   every completion with :func:`mathagent.judge.score` in lenient mode (the
   small model rarely writes ``\\boxed{}``, so the last number in its reply counts);
4. **feedback** the per-task mean reward to the selector, exactly as Trinity's scheduler
   does with the ``pass_rate_calculator`` output (``feedback(indices, values)``);
5. **advantage** per group: ``A_ij = (r_ij - mean_j r_ij) / (std_j r_ij + eps)``; a group
   whose ``n`` rewards all agree carries no signal and gets ``A = 0``;
6. **train**   one clipped policy-gradient step over the batch in micro-batches
   (token-mean loss, optional k3 KL penalty to the initial model).

Every step appends one row to the tidy table ``metrics.csv`` (``selector, seed, step,
rollout_accuracy, eval_accuracy, effective_task_ratio`` plus timings), logs Trinity's own
metric names to TensorBoard, and every ``save_interval`` steps checkpoints the policy, the
optimizer, the sampler's random state and the complete selector state (also the posteriors
of Trinity's ``difficulty_based``, which its own ``state_dict`` leaves out) so a run resumes
where it stopped and continues exactly as an uninterrupted one. Checkpoints and tables are
swapped in by renames, so a run killed at any instant resumes with ``--resume``.
The policy itself (the bundled model, its chat prompt, batched sampling) is
:mod:`mathagent.policy`, which the pass-rate measurement samples from too.

Heavy libraries (torch, transformers, datasets, the selectors) are imported inside the
functions that need them, so the module imports quickly and runs on a GPU machine that
lacks the agent stack.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mathagent import paths
from mathagent.judge import score, truth_from_answer
from mathagent.metrics import effective_task_ratio
from mathagent.policy import (
    MODEL_PATH_ENV,
    Completion,
    Policy,
    PromptConfig,
    locate_model,
    make_generator,
    seed_stream,
)
from mathagent.trinity_tags import run_tags, with_current_names

# --------------------------------------------------------------------------------------
# Judge, advantages, loss
# --------------------------------------------------------------------------------------


def score_completions(texts: Sequence[str], truths: Sequence[str],
                      lenient: bool = True) -> np.ndarray:
    """Accuracy reward (0/1) of each text against its truth, with the package's judge.

    Returns an array of shape ``(len(texts),)``.
    """
    return np.array([float(score(t, y, lenient=lenient)["accuracy"])
                     for t, y in zip(texts, truths, strict=True)], dtype=np.float64)


def group_advantages(rewards: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """GRPO advantages for rewards of shape ``(B, n)`` (B groups of n completions).

    Each reward is centred on its group mean and scaled by the group's standard
    deviation. When all ``n`` rewards of a group agree the numerator is exactly zero, so
    the group contributes no policy gradient: a task the model always or never solves
    teaches nothing, which is why the selector's choice of tasks matters.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    if rewards.ndim != 2:
        raise ValueError(f"rewards must have shape (B, n), got {rewards.shape}")
    mean = rewards.mean(axis=1, keepdims=True)
    std = rewards.std(axis=1, ddof=1, keepdims=True) if rewards.shape[1] > 1 else 0.0
    adv = (rewards - mean) / (std + eps)
    adv[np.isclose(rewards, mean).all(axis=1)] = 0.0
    return adv


def clipped_pg_loss(logp, old_logp, advantages, mask, clip_eps: float, denom: float,
                    ref_logp=None, kl_coef: float = 0.0):
    """PPO-style clipped policy-gradient loss, summed over tokens and divided by ``denom``.

    ``logp``, ``old_logp``, ``mask`` (and ``ref_logp``): ``(m, R)`` token tensors;
    ``advantages``: ``(m,)``, one per sequence, broadcast over its tokens. Dividing every
    micro-batch by the token count of the whole batch makes the summed micro-batch
    gradients equal the token-mean loss of the full batch (Trinity's ``token-mean``).
    The KL penalty is the k3 estimator ``exp(ref - logp) - (ref - logp) - 1``.
    Returns ``(loss, stats)`` with the clip fraction and mean KL over real tokens.
    """
    import torch

    ratio = torch.exp(logp - old_logp)
    adv = advantages[:, None]
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv
    per_token = -torch.minimum(unclipped, clipped)
    kl = None
    if ref_logp is not None and kl_coef > 0:
        delta = ref_logp - logp
        kl = torch.exp(delta) - delta - 1.0
        per_token = per_token + kl_coef * kl
    loss = (per_token * mask).sum() / denom
    with torch.no_grad():
        n_tok = mask.sum().clamp(min=1)
        stats = {
            "clipfrac": float(((unclipped != clipped).float() * mask).sum() / n_tok),
            "kl": float((kl * mask).sum() / n_tok) if kl is not None else 0.0,
            "tokens": float(mask.sum()),
        }
    return loss, stats


# --------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------


@dataclass
class TasksetConfig:
    path: str = "data/arithmetic"  # relative paths are taken from the repository root
    split: str = "train"
    eval_split: str = "test"
    feature_keys: list[str] = field(default_factory=lambda: [
        "smollm2_weak_pass_rate", "smollm2_strong_pass_rate"])
    max_tasks: int | None = None  # keep only the first N training tasks (smoke runs)
    eval_max_tasks: int | None = None  # evaluate on the first N held-out tasks only


@dataclass
class ModelConfig:
    path: str | None = None  # GGUF file or checkpoint folder; None: the bundled GGUF


@dataclass
class RolloutConfig:
    batch_size: int = 32  # tasks per step (Trinity buffer.batch_size)
    repeat_times: int = 8  # completions per task (GRPO group size)
    max_new_tokens: int = 128
    temperature: float = 1.0
    chunk_size: int = 1024  # sequences sampled together
    lenient: bool = True  # judge accepts the last number when no boxed/#### answer


@dataclass
class AlgorithmConfig:
    lr: float = 1e-5
    weight_decay: float = 0.0
    clip_eps: float = 0.2
    kl_coef: float = 0.0  # >0 keeps a frozen copy of the initial model for a KL penalty
    micro_batch_size: int = 64  # sequences per forward/backward pass
    update_epochs: int = 1  # passes over each batch (>1 makes the clipping bite)
    max_grad_norm: float = 1.0
    adv_eps: float = 1e-6


@dataclass
class SelectorSettings:
    name: str = "random"
    # Keyword arguments per selector name, passed to make_selector for the chosen one.
    params: dict[str, dict] = field(default_factory=dict)


@dataclass
class EvalConfig:
    interval: int = 5  # evaluate every N steps (0: never)
    repeat_times: int = 4
    temperature: float = 1.0
    on_start: bool = True  # evaluate the initial model as step 0


@dataclass
class TrainerConfig:
    steps: int = 60
    save_interval: int = 10  # checkpoint every N steps (the last step is always saved)
    seed: int = 0
    device: str = "cpu"
    samples_per_step: int = 2  # completions written to samples.jsonl per step
    time_limit_s: float = 0.0  # stop (after a checkpoint) once a run has taken this long
    gpu_memory_fraction: float = 0.0  # >0: cap this process's share of GPU memory


@dataclass
class TrainConfig:
    """Everything a ``train-local`` run needs; mirrors the sections of the YAML file."""

    taskset: TasksetConfig = field(default_factory=TasksetConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    selector: SelectorSettings = field(default_factory=SelectorSettings)
    eval: EvalConfig = field(default_factory=EvalConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)

    def to_dict(self) -> dict:
        return asdict(self)


def _build(cls, data: Any, source: str, section: str = ""):
    """Build dataclass ``cls`` from a mapping; errors name the file and the section."""
    where = f"{source}: section {section!r}" if section else f"{source}: top level"
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a mapping, got {type(data).__name__}")
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")
    kwargs = {}
    for name, value in data.items():
        default = getattr(cls(), name)
        key = f"{section}.{name}" if section else name
        kwargs[name] = _build(type(default), value, source, key) if is_dataclass(
            default) else value
    return cls(**kwargs)


def load_config(path: str | os.PathLike | None = None,
                overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Read a ``train-local`` YAML file into a :class:`TrainConfig`, then apply overrides.

    ``overrides`` maps dotted keys (``"trainer.steps"``) to values. Unknown keys raise
    ``ValueError`` naming the file and the key.
    """
    import yaml

    data: dict = {}
    where = "defaults"
    if path is not None:
        where = str(path)
        with open(path) as f:
            data = yaml.safe_load(f) or {}
    cfg = _build(TrainConfig, data, where)
    for dotted, value in (overrides or {}).items():
        obj = cfg
        *parents, leaf = dotted.split(".")
        for p in parents:
            obj = getattr(obj, p)
        if not hasattr(obj, leaf):
            raise ValueError(f"override {dotted!r}: no such setting")
        setattr(obj, leaf, value)
    _validate(cfg, where)
    return cfg


def _validate(cfg: TrainConfig, where: str) -> None:
    checks = [
        (cfg.rollout.batch_size >= 1, "rollout.batch_size must be >= 1"),
        (cfg.rollout.repeat_times >= 2, "rollout.repeat_times must be >= 2 (GRPO compares "
                                        "completions within a group)"),
        (cfg.rollout.max_new_tokens >= 1, "rollout.max_new_tokens must be >= 1"),
        (cfg.rollout.temperature > 0, "rollout.temperature must be > 0 for exploration"),
        (cfg.algorithm.micro_batch_size >= 1, "algorithm.micro_batch_size must be >= 1"),
        (cfg.algorithm.update_epochs >= 1, "algorithm.update_epochs must be >= 1"),
        (cfg.algorithm.lr > 0, "algorithm.lr must be > 0"),
        (cfg.trainer.steps >= 0, "trainer.steps must be >= 0"),
        (cfg.trainer.save_interval >= 1, "trainer.save_interval must be >= 1"),
        (cfg.trainer.device in ("cpu", "cuda") or cfg.trainer.device.startswith("cuda:"),
         "trainer.device must be 'cpu' or 'cuda'"),
        (cfg.eval.interval >= 0, "eval.interval must be >= 0"),
        (cfg.eval.repeat_times >= 1, "eval.repeat_times must be >= 1"),
    ]
    for ok, msg in checks:
        if not ok:
            raise ValueError(f"{where}: {msg}")


# --------------------------------------------------------------------------------------
# Logging: Trinity's metric names, TensorBoard and the tidy table
# --------------------------------------------------------------------------------------

TIDY_COLUMNS = [
    "selector", "seed", "step", "rollout_accuracy", "eval_accuracy", "effective_task_ratio",
    "trainer_reward", "pg_loss", "kl_loss", "pg_clipfrac", "grad_norm", "entropy", "response_length",
    "truncated_ratio", "trained_sequences", "skipped_updates", "time_select_s", "time_generate_s",
    "time_score_s", "time_update_s", "time_eval_s", "time_step_s", "gpu_mem_peak_gb",
]


def _finite(value) -> bool:
    return value is not None and isinstance(value, int | float) and math.isfinite(value)


class RunLogger:
    """Writes one run's tidy ``metrics.csv``, ``trinity_metrics.csv`` and TensorBoard events.

    ``metrics.csv`` has the shared tidy shape (one row per step, ``selector, seed, step``
    first); ``trinity_metrics.csv`` holds the same numbers under Trinity's tag names (one
    column per tag, as TensorBoard shows them). Both are rewritten after every step through
    a temporary file and a rename, so a run killed at any moment leaves valid tables; on
    resume, rows after the checkpointed step are dropped first and TensorBoard purges its
    later events.
    """

    def __init__(self, run_dir: Path, eval_taskset: str, eval_repeats: int,
                 start_step: int | None):
        import pandas as pd

        self.run_dir = run_dir
        self.csv = run_dir / "metrics.csv"
        self.trinity_csv = run_dir / "trinity_metrics.csv"
        self.tags = run_tags(TIDY_COLUMNS, eval_taskset, eval_repeats)
        self.rows: list[dict] = []
        if start_step is not None and self.csv.exists():
            try:
                # round_trip: the rows kept are written again, digit for digit
                old = with_current_names(pd.read_csv(self.csv, float_precision="round_trip"))
                self.rows = old[old["step"] <= start_step].to_dict("records")
            except (ValueError, KeyError) as exc:
                raise ValueError(f"{self.csv}: cannot read the metrics table to resume "
                                 f"({exc})") from None
            if len(self.rows) < len(old):  # steps after the checkpoint are run again
                self._write_tables()
        self.writer = None
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(
                log_dir=str(run_dir / "tensorboard"),
                purge_step=None if start_step is None else start_step + 1)
        except ImportError:  # tensorboard missing: the CSV files still hold everything
            print("tensorboard is not installed: writing the CSV tables only", file=sys.stderr)

    def log(self, row: dict) -> None:
        self.rows.append(row)
        self._write_tables()
        if self.writer is None:
            return
        step = int(row["step"])
        for key, tag in self.tags.items():
            if _finite(row.get(key)):
                self.writer.add_scalar(tag, float(row[key]), step)
        self.writer.flush()

    def _write_tables(self) -> None:
        import pandas as pd

        # through a temporary file and a rename: a kill never leaves a torn table
        table = pd.DataFrame(self.rows, columns=TIDY_COLUMNS)
        atomic_write_text(self.csv, table.to_csv(index=False))
        trinity = table[["step", *self.tags]].rename(columns=self.tags)
        atomic_write_text(self.trinity_csv, trinity.to_csv(index=False))

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


# --------------------------------------------------------------------------------------
# Files that survive a kill at any instant
# --------------------------------------------------------------------------------------

# A checkpoint folder holds these files; trainer_state.json is written last, so a folder
# holding all of them with a readable trainer_state.json is complete.
CHECKPOINT_FILES = ("policy.pt", "optimizer.pt", "state.pt")
CHECKPOINT_MARKER = "trainer_state.json"
CHECKPOINT_NAME = "checkpoint"  # the run's current checkpoint
CHECKPOINT_TMP = "checkpoint.tmp"  # the next one, being written
CHECKPOINT_OLD = "checkpoint.old"  # the previous one, being retired


class NoCheckpointError(FileNotFoundError):
    """A run folder holds no complete checkpoint."""


def _fsync(fd: int) -> None:
    # some file systems do not support it; the order of the renames still holds
    with contextlib.suppress(OSError):
        os.fsync(fd)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        _fsync(fd)
    finally:
        os.close(fd)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``path`` through a temporary file and a rename: readers (and a resume after a
    kill) see the old content or the new one, never a torn file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        _fsync(f.fileno())
    os.replace(tmp, path)


def checkpoint_step(folder: Path) -> int | None:
    """The step of the complete checkpoint in ``folder``; None if absent or incomplete."""
    try:
        meta = json.loads((Path(folder) / CHECKPOINT_MARKER).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or not isinstance(meta.get("step"), int):
        return None
    if not all((Path(folder) / name).is_file() for name in CHECKPOINT_FILES):
        return None
    return meta["step"]


def _install_checkpoint(run_dir: Path, src: Path) -> Path:
    """Make the complete checkpoint folder ``src`` the run's ``checkpoint``.

    Renames only: ``checkpoint`` -> ``checkpoint.old``, ``src`` -> ``checkpoint``, then
    ``checkpoint.old`` is removed. A kill between any two operations leaves at least one
    complete checkpoint that :func:`recover_checkpoint` finds.
    """
    ckpt, old = run_dir / CHECKPOINT_NAME, run_dir / CHECKPOINT_OLD
    if old.exists():  # left by a kill; never the newest complete one here
        shutil.rmtree(old)
    if ckpt.exists():
        os.rename(ckpt, old)
    os.rename(src, ckpt)
    _fsync_dir(run_dir)
    if old.exists():
        shutil.rmtree(old)
    return ckpt


def recover_checkpoint(run_dir: Path) -> int | None:
    """Clean up after a kill and return the step of ``run_dir/checkpoint``.

    Of ``checkpoint``, ``checkpoint.tmp`` and ``checkpoint.old`` the newest complete one
    (ties: in that order) becomes ``checkpoint``; the others are removed. Each operation
    keeps that newest complete checkpoint on disk, so a kill during recovery is recovered
    the same way. Returns None when there is no complete checkpoint (incomplete leftovers
    of ``checkpoint.tmp``/``checkpoint.old`` are removed then).

    Raises:
        ValueError: ``checkpoint`` itself is incomplete and nothing complete replaces it
            (files deleted by hand): removing it would lose data, so a person decides.
    """
    run_dir = Path(run_dir)
    names = (CHECKPOINT_NAME, CHECKPOINT_TMP, CHECKPOINT_OLD)
    found = [(step, -rank, name) for rank, name in enumerate(names)
             if (step := checkpoint_step(run_dir / name)) is not None]
    ckpt = run_dir / CHECKPOINT_NAME
    if not found:
        if ckpt.exists():
            missing = [f for f in (*CHECKPOINT_FILES, CHECKPOINT_MARKER)
                       if not (ckpt / f).is_file()]
            raise ValueError(f"checkpoint {ckpt} is incomplete (missing or unreadable: "
                             f"{', '.join(missing) or CHECKPOINT_MARKER}); remove it to start "
                             "the run again from step 0")
        for name in (CHECKPOINT_TMP, CHECKPOINT_OLD):
            if (run_dir / name).exists():
                shutil.rmtree(run_dir / name)
        return None
    step, _, best = max(found)
    tmp, old = run_dir / CHECKPOINT_TMP, run_dir / CHECKPOINT_OLD
    if best == CHECKPOINT_OLD:  # move it where the swap below expects the newcomer
        if tmp.exists():
            shutil.rmtree(tmp)
        os.rename(old, tmp)
        best = CHECKPOINT_TMP
    if best == CHECKPOINT_TMP:
        _install_checkpoint(run_dir, tmp)
    for name in (CHECKPOINT_TMP, CHECKPOINT_OLD):
        if (run_dir / name).exists():
            shutil.rmtree(run_dir / name)
    return step


def truncate_jsonl(path: Path, last_step: int) -> int:
    """Keep the records of ``path`` with ``step <= last_step`` (atomically); returns how
    many were dropped. A torn last line (a kill during the append) is dropped too.

    Raises:
        ValueError: a line other than the last is not a JSON record with a step.
    """
    path = Path(path)
    if not path.exists():
        return 0
    text = path.read_text()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    keep, dropped = [], 0
    for k, line in enumerate(lines, start=1):
        try:
            step = json.loads(line)["step"]
        except (ValueError, TypeError, KeyError):
            if k == len(lines) and not text.endswith("\n"):  # torn by a kill
                dropped += 1
                continue
            raise ValueError(f"{path}: line {k} is not a JSON record with a 'step'") from None
        if int(step) <= last_step:
            keep.append(line)
        else:
            dropped += 1
    if dropped:
        atomic_write_text(path, "".join(line + "\n" for line in keep))
    return dropped


def last_logged_step(csv: Path) -> int:
    """The largest step in a run's ``metrics.csv`` (0 when it is absent or empty)."""
    import pandas as pd

    if not Path(csv).exists():
        return 0
    try:
        steps = pd.read_csv(csv)["step"]
    except (ValueError, KeyError, pd.errors.ParserError) as exc:
        raise ValueError(f"{csv}: not a metrics table with a 'step' column ({exc})") from None
    return int(steps.max()) if len(steps) else 0


# --------------------------------------------------------------------------------------
# The trainer
# --------------------------------------------------------------------------------------


def _resolve(path: str) -> Path:
    p = Path(path)
    return p if p.is_absolute() else paths.REPO_ROOT / p


@dataclass
class StepResult:
    """What one training step produced (also returned by :meth:`GRPOTrainer.step`)."""

    step: int
    indices: list[int]
    rewards: np.ndarray  # (B, n) accuracy rewards
    advantages: np.ndarray  # (B, n)
    row: dict
    completions: list[Completion] = field(default_factory=list)  # B * n, task-major


class GRPOTrainer:
    """One GRPO run: a policy, a selector over the training split and an eval split.

    ``policy`` may be passed in (already loaded) to avoid reloading the model, e.g. in
    tests or when a notebook runs several short runs; otherwise it is loaded from
    ``cfg.model.path`` (the bundled GGUF by default).
    """

    def __init__(self, cfg: TrainConfig, run_dir: str | os.PathLike,
                 policy: Policy | None = None, resume: bool = False):
        import torch

        self.torch = torch
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        if resume and not self.run_dir.is_dir():
            raise FileNotFoundError(f"cannot resume: run folder {self.run_dir} does not exist")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.ckpt_dir = self.run_dir / "checkpoint"
        self.seeds = seed_stream(cfg.trainer.seed, "sampler", "eval")

        if cfg.trainer.gpu_memory_fraction > 0 and str(cfg.trainer.device).startswith("cuda"):
            # several runs share one GPU: each keeps its cache of freed blocks within a share
            torch.cuda.set_per_process_memory_fraction(cfg.trainer.gpu_memory_fraction)
        self.train_set, self.eval_set = self._load_tasksets()
        self.selector = self._make_selector()  # before the model: bad settings fail fast
        self.policy = policy or Policy.load(cfg.model.path, device=cfg.trainer.device,
                                            prompt=cfg.prompt)
        self.policy.prompt = cfg.prompt
        if str(self.policy.device) != str(torch.device(cfg.trainer.device)):
            raise ValueError(f"policy is on {self.policy.device} but trainer.device is "
                             f"{cfg.trainer.device}")
        self.train_prompts = [self.policy.encode(q) for q in self.train_set["question"]]
        self.train_truths = [truth_from_answer(a) for a in self.train_set["answer"]]
        self.eval_prompts = [self.policy.encode(q) for q in self.eval_set["question"]]
        self.eval_truths = [truth_from_answer(a) for a in self.eval_set["answer"]]

        model = self.policy.model
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.algorithm.lr,
                                           weight_decay=cfg.algorithm.weight_decay)
        self.ref_model = None
        if cfg.algorithm.kl_coef > 0:
            self.ref_model = copy.deepcopy(model).eval().requires_grad_(False)
        self.sampler_gen = make_generator(self.policy.device, self.seeds["sampler"])
        self.step_count = 0
        if resume:
            self._resume()
        self._write_run_files()
        # samples and metrics of steps after the checkpoint are written again by this run
        truncate_jsonl(self.run_dir / "samples.jsonl", self.step_count)
        self.logger = RunLogger(self.run_dir, self.eval_name, cfg.eval.repeat_times,
                                self.step_count if resume else None)

    def _resume(self) -> None:
        """Restore the newest complete checkpoint; with none yet, start again from step 0
        (a kill before the first checkpoint), unless the run had logged past it."""
        try:
            self.load_checkpoint()
            return
        except NoCheckpointError:
            pass
        logged = last_logged_step(self.run_dir / "metrics.csv")
        first_save = min(self.cfg.trainer.save_interval, self.cfg.trainer.steps)
        if logged > first_save:
            raise NoCheckpointError(
                f"cannot resume: {self.run_dir / 'metrics.csv'} holds steps up to {logged} "
                f"but {self.ckpt_dir} holds no complete checkpoint")
        print(f"train-local: no checkpoint in {self.run_dir} yet (stopped before the first "
              "one); starting from step 0", file=sys.stderr)

    # -- setup ---------------------------------------------------------------------------
    @property
    def eval_name(self) -> str:
        return f"{Path(self.cfg.taskset.path).name}-{self.cfg.taskset.eval_split}"

    def _load_tasksets(self):
        from mathagent.selectors import reads_features
        from mathagent.tasks import load_taskset

        ts = self.cfg.taskset
        root = _resolve(ts.path)
        keys = tuple(ts.feature_keys) if reads_features(self.cfg.selector.name) else ()
        train = load_taskset(root, split=ts.split, feature_keys=keys)
        test = load_taskset(root, split=ts.eval_split)
        if ts.max_tasks is not None:
            train = train.select(range(min(ts.max_tasks, len(train))))
        if ts.eval_max_tasks is not None:
            test = test.select(range(min(ts.eval_max_tasks, len(test))))
        if len(train) < self.cfg.rollout.batch_size:
            raise ValueError(f"taskset {root} split {ts.split!r} has {len(train)} tasks, fewer "
                             f"than rollout.batch_size={self.cfg.rollout.batch_size}")
        return train, test

    def _make_selector(self):
        from mathagent.selectors import make_selector, reads_features, uses_feedback

        sel = self.cfg.selector
        n = self.cfg.rollout.repeat_times
        kwargs = dict(sel.params.get(sel.name, {}) or {})
        if uses_feedback(sel.name):
            # m is the pseudo-count of one feedback value: the group size
            kwargs.setdefault("m", n)
        keys = list(self.cfg.taskset.feature_keys) if reads_features(sel.name) else None
        return make_selector(sel.name, self.train_set, feature_keys=keys,
                             seed=self.cfg.trainer.seed, repeat_times=n, **kwargs)

    def _write_run_files(self) -> None:
        import yaml

        cfg = self.cfg.to_dict()
        atomic_write_text(self.run_dir / "config.yaml", yaml.safe_dump(cfg, sort_keys=False))
        params = {
            "kind": "train-local",
            "selector": self.cfg.selector.name,
            "seed": self.cfg.trainer.seed,
            "model": str(locate_model(self.cfg.model.path)) if self.cfg.model.path else
            "bundled SmolLM2-135M-Instruct GGUF",
            "device": self.cfg.trainer.device,
            "train_tasks": len(self.train_set),
            "eval_tasks": len(self.eval_set),
            "eval_taskset": self.eval_name,
            "judge": f"mathagent.judge.score(lenient={self.cfg.rollout.lenient})",
            "trinity_tags": run_tags(TIDY_COLUMNS, self.eval_name, self.cfg.eval.repeat_times),
            "config": cfg,
        }
        atomic_write_text(self.run_dir / "params.json", json.dumps(params, indent=2))

    # -- one step ------------------------------------------------------------------------
    def _selected(self, batch_size: int) -> list[int]:
        idx = self.selector.get_indices(batch_size)
        idx = [int(i) for i in (idx.tolist() if hasattr(idx, "tolist") else idx)]
        if len(idx) != batch_size:
            raise RuntimeError(f"selector {self.cfg.selector.name!r} returned {len(idx)} "
                               f"indices, expected {batch_size}")
        return idx

    def step(self) -> StepResult:
        """Run one explore/judge/feedback/train step and log it."""
        torch = self.torch
        cfg = self.cfg
        B, n = cfg.rollout.batch_size, cfg.rollout.repeat_times
        step = self.step_count + 1
        if self.policy.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.policy.device)
        t0 = time.perf_counter()
        idx = self._selected(B)
        t1 = time.perf_counter()
        prompts = [self.train_prompts[i] for i in idx for _ in range(n)]
        comps = self.policy.sample(prompts, max_new_tokens=cfg.rollout.max_new_tokens,
                                   temperature=cfg.rollout.temperature,
                                   generator=self.sampler_gen,
                                   chunk_size=cfg.rollout.chunk_size)
        self._sync()
        t2 = time.perf_counter()
        truths = [self.train_truths[i] for i in idx for _ in range(n)]
        rewards = score_completions([c.text for c in comps], truths,
                                    lenient=cfg.rollout.lenient).reshape(B, n)
        # What Trinity's pass_rate_calculator hands the scheduler: task indices and the
        # mean reward of each task's group, then selector.feedback(indices, values).
        pass_rates = rewards.mean(axis=1)
        self.selector.feedback(idx, pass_rates.tolist())
        adv = group_advantages(rewards, eps=cfg.algorithm.adv_eps)
        t3 = time.perf_counter()
        stats = self._update(prompts, comps, adv.reshape(-1))
        self._sync()
        t4 = time.perf_counter()
        self.step_count = step
        eval_acc = float("nan")
        if cfg.eval.interval and step % cfg.eval.interval == 0:
            eval_acc = self.evaluate()
        t5 = time.perf_counter()
        lengths = np.array([len(c.ids) for c in comps])
        row = {
            "selector": cfg.selector.name, "seed": cfg.trainer.seed, "step": step,
            "rollout_accuracy": float(rewards.mean()),
            "eval_accuracy": eval_acc,
            # share of tasks whose n rewards are not all equal: they carry the signal
            "effective_task_ratio": effective_task_ratio(pass_rates),
            "trainer_reward": float(rewards.mean()),
            **stats,
            "response_length": float(lengths.mean()),
            "truncated_ratio": float(np.mean([not c.finished for c in comps])),
            "time_select_s": t1 - t0, "time_generate_s": t2 - t1,
            "time_score_s": t3 - t2, "time_update_s": t4 - t3, "time_eval_s": t5 - t4,
            "time_step_s": t5 - t0,
            "gpu_mem_peak_gb": (torch.cuda.max_memory_allocated(self.policy.device) / 2**30
                                if self.policy.device.type == "cuda" else float("nan")),
        }
        self.logger.log(row)
        self._write_samples(step, idx, comps, rewards)
        if step % cfg.trainer.save_interval == 0 or step == cfg.trainer.steps:
            self.save_checkpoint()
        return StepResult(step, idx, rewards, adv, row, comps)

    def _sync(self) -> None:
        if self.policy.device.type == "cuda":
            self.torch.cuda.synchronize(self.policy.device)

    def _update(self, prompts, comps, adv: np.ndarray) -> dict:
        """One optimiser step (per epoch) of the clipped PG loss over the batch.

        Sequences with zero advantage add nothing to the policy gradient, so without a KL
        term they are skipped; the loss is still divided by the token count of the whole
        batch, so skipping changes the cost, not the gradient.
        """
        torch = self.torch
        cfg = self.cfg.algorithm
        temp = self.cfg.rollout.temperature
        model = self.policy.model
        total_tokens = float(sum(len(c.ids) for c in comps))
        keep = [i for i in range(len(comps)) if adv[i] != 0 or cfg.kl_coef > 0]
        stats = {"pg_loss": 0.0, "kl_loss": 0.0, "pg_clipfrac": 0.0, "grad_norm": 0.0,
                 "entropy": float("nan"), "trained_sequences": len(keep),
                 "skipped_updates": 0}
        if not keep or total_tokens == 0:
            return stats  # nothing to learn from: the policy stays as it is
        micro = [keep[i:i + cfg.micro_batch_size]
                 for i in range(0, len(keep), cfg.micro_batch_size)]
        old = None
        if cfg.update_epochs > 1:  # the ratio only moves away from 1 after an update
            with torch.no_grad():
                old = [self.policy.token_logprobs([prompts[i] for i in mb],
                                                  [comps[i].ids for i in mb], temp)[0]
                       for mb in micro]
        ent_sum = ent_tok = 0.0
        model.train()
        for epoch in range(cfg.update_epochs):
            self.optimizer.zero_grad(set_to_none=True)
            loss_sum = kl_sum = clip_sum = tok_sum = 0.0
            for k, mb in enumerate(micro):
                logp, mask, ent = self.policy.token_logprobs(
                    [prompts[i] for i in mb], [comps[i].ids for i in mb], temp,
                    with_entropy=epoch == 0)
                old_logp = old[k] if old is not None else logp.detach()
                ref = None
                if self.ref_model is not None:
                    with torch.no_grad():
                        ref = self._ref_logprobs([prompts[i] for i in mb],
                                                 [comps[i].ids for i in mb], temp)
                a = torch.tensor(adv[mb], dtype=logp.dtype, device=logp.device)
                loss, st = clipped_pg_loss(logp, old_logp, a, mask, cfg.clip_eps,
                                           total_tokens, ref, cfg.kl_coef)
                loss.backward()
                loss_sum += float(loss.detach())
                kl_sum += st["kl"] * st["tokens"]
                clip_sum += st["clipfrac"] * st["tokens"]
                tok_sum += st["tokens"]
                if ent is not None:
                    ent_sum += float((ent * mask).sum())
                    ent_tok += float(mask.sum())
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            if torch.isfinite(norm):
                self.optimizer.step()
            else:  # as verl does: a non-finite gradient is dropped, not applied
                self.optimizer.zero_grad(set_to_none=True)
                stats["skipped_updates"] += 1
        stats.update(pg_loss=loss_sum, kl_loss=kl_sum / max(tok_sum, 1.0),
                     pg_clipfrac=clip_sum / max(tok_sum, 1.0), grad_norm=float(norm),
                     entropy=ent_sum / max(ent_tok, 1.0))
        return stats

    def _ref_logprobs(self, prompts, completions, temp):
        live = self.policy.model
        self.policy.model = self.ref_model
        try:
            return self.policy.token_logprobs(prompts, completions, temp)[0]
        finally:
            self.policy.model = live

    # -- evaluation ----------------------------------------------------------------------
    def evaluate(self) -> float:
        """Mean accuracy over the held-out split, ``eval.repeat_times`` samples per task.

        The eval sampler is re-seeded identically every time, so differences between
        steps and between runs come from the weights, not from sampling luck.
        """
        cfg = self.cfg
        k = cfg.eval.repeat_times
        gen = make_generator(self.policy.device, self.seeds["eval"])
        prompts = [p for p in self.eval_prompts for _ in range(k)]
        comps = self.policy.sample(prompts, max_new_tokens=cfg.rollout.max_new_tokens,
                                   temperature=cfg.eval.temperature, generator=gen,
                                   chunk_size=cfg.rollout.chunk_size)
        truths = [t for t in self.eval_truths for _ in range(k)]
        return float(score_completions([c.text for c in comps], truths,
                                       lenient=cfg.rollout.lenient).mean())

    def _write_samples(self, step, idx, comps, rewards) -> None:
        k = self.cfg.trainer.samples_per_step
        if k <= 0:
            return
        n = self.cfg.rollout.repeat_times
        lines = []
        for j in range(min(k, len(comps))):
            task = idx[j // n]
            lines.append(json.dumps({
                "step": step, "task_index": task,
                "question": self.train_set[task]["question"],
                "truth": self.train_truths[task], "response": comps[j].text,
                "reward": float(rewards.reshape(-1)[j])}) + "\n")
        # one append per step; a kill mid-write leaves a torn last line, and a resume
        # drops it with every record after the checkpoint (truncate_jsonl)
        with open(self.run_dir / "samples.jsonl", "a") as f:
            f.write("".join(lines))

    # -- checkpoints ---------------------------------------------------------------------
    def save_checkpoint(self) -> Path:
        """Save policy, optimiser, sampler state, selector state and the step count.

        The new checkpoint is written to ``checkpoint.tmp`` (``trainer_state.json`` last,
        each file flushed to disk) and swapped in by renames (:func:`_install_checkpoint`),
        so a kill at any instant leaves a complete checkpoint for ``--resume``.
        """
        torch = self.torch
        tmp = self.run_dir / CHECKPOINT_TMP
        if tmp.exists():  # a half-written one from a killed run
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)

        def save(obj, name):
            with open(tmp / name, "wb") as f:
                torch.save(obj, f)
                f.flush()
                _fsync(f.fileno())

        save(self.policy.model.state_dict(), "policy.pt")
        save(self.optimizer.state_dict(), "optimizer.pt")
        save({"selector": self.selector.state_dict(),
              "sampler_rng": self.sampler_gen.get_state()}, "state.pt")
        with open(tmp / CHECKPOINT_MARKER, "w") as f:  # last: marks the folder complete
            json.dump({"step": self.step_count, "selector": self.cfg.selector.name,
                       "seed": self.cfg.trainer.seed}, f)
            f.flush()
            _fsync(f.fileno())
        _fsync_dir(tmp)
        return _install_checkpoint(self.run_dir, tmp)

    def load_checkpoint(self) -> int:
        """Restore everything :meth:`save_checkpoint` wrote; returns the restored step.

        Leftovers of a kill are cleaned up first and the newest complete checkpoint is
        used (:func:`recover_checkpoint`).

        Raises:
            NoCheckpointError: the run folder holds no complete checkpoint.
            ValueError: the checkpoint belongs to another selector or seed, or cannot be
                read; the message names the file.
        """
        torch = self.torch
        step = recover_checkpoint(self.run_dir)
        if step is None:
            raise NoCheckpointError(f"cannot resume: no checkpoint in {self.ckpt_dir}")
        state_file = self.ckpt_dir / CHECKPOINT_MARKER
        meta = json.loads(state_file.read_text())
        if meta.get("selector") != self.cfg.selector.name:
            raise ValueError(f"checkpoint {self.ckpt_dir} was written by selector "
                             f"{meta.get('selector')!r}, not {self.cfg.selector.name!r}")
        if "seed" in meta and meta["seed"] != self.cfg.trainer.seed:
            raise ValueError(f"checkpoint {self.ckpt_dir} was written with seed "
                             f"{meta['seed']}, not {self.cfg.trainer.seed}")
        dev = self.policy.device

        def load(name, map_location=dev, **kw):
            try:
                return torch.load(self.ckpt_dir / name, map_location=map_location, **kw)
            except Exception as exc:  # a damaged file: name it, no traceback
                raise ValueError(f"checkpoint file {self.ckpt_dir / name} cannot be read: "
                                 f"{type(exc).__name__}: {exc}") from None

        policy_state = load("policy.pt")
        optimizer_state = load("optimizer.pt")
        state = load("state.pt", map_location="cpu", weights_only=False)
        try:
            self.policy.model.load_state_dict(policy_state)
            self.optimizer.load_state_dict(optimizer_state)
        except (RuntimeError, ValueError, KeyError) as exc:
            raise ValueError(f"checkpoint {self.ckpt_dir} does not fit this model: "
                             f"{str(exc).splitlines()[0]}") from None
        from mathagent.selectors import load_selector_state

        try:  # the complete state, also for Trinity's difficulty_based (its posteriors)
            complete = load_selector_state(getattr(self.selector, "selector", self.selector),
                                           state["selector"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"checkpoint file {self.ckpt_dir / 'state.pt'}: {exc}") from None
        if not complete:
            print(f"train-local: {self.ckpt_dir / 'state.pt'} holds the selector's position "
                  "only (written by an older version); its posteriors restart from the prior",
                  file=sys.stderr)
        self.sampler_gen.set_state(state["sampler_rng"])
        self.step_count = int(step)
        return self.step_count

    # -- the loop ------------------------------------------------------------------------
    def train(self, progress: bool = True) -> list[dict]:
        """Run from the current step to ``trainer.steps``; returns the logged rows."""
        from tqdm.auto import tqdm

        cfg = self.cfg
        if self.step_count == 0 and cfg.eval.on_start and cfg.eval.interval and \
                not any(r.get("step") == 0 for r in self.logger.rows):  # not yet logged
            t0 = time.perf_counter()
            acc = self.evaluate()
            self.logger.log({"selector": cfg.selector.name, "seed": cfg.trainer.seed,
                             "step": 0, "eval_accuracy": acc,
                             "time_eval_s": time.perf_counter() - t0})
        bar = tqdm(total=cfg.trainer.steps, initial=self.step_count, disable=not progress,
                   desc=f"train-local {cfg.selector.name} seed {cfg.trainer.seed}")
        start = time.perf_counter()
        try:
            while self.step_count < cfg.trainer.steps:
                if cfg.trainer.time_limit_s and time.perf_counter() - start > \
                        cfg.trainer.time_limit_s:
                    self.save_checkpoint()
                    print(f"time limit of {cfg.trainer.time_limit_s:.0f} s reached after step "
                          f"{self.step_count}; checkpoint saved, resume with --resume",
                          file=sys.stderr)
                    break
                res = self.step()
                bar.update(1)
                bar.set_postfix(acc=f"{res.row['rollout_accuracy']:.2f}",
                                etr=f"{res.row['effective_task_ratio']:.2f}",
                                s=f"{res.row['time_step_s']:.1f}")
        finally:
            bar.close()
            self.logger.close()
        return self.logger.rows


# --------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------

DEFAULT_CONFIG = paths.CONFIGS_DIR / "train_local.yaml"
SMOKE_CONFIG = paths.CONFIGS_DIR / "train_local_smoke.yaml"


def train_local_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=None,
                        help=f"YAML config (default {DEFAULT_CONFIG.name}; "
                             f"{SMOKE_CONFIG.name} with --smoke)")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny CPU settings that finish in about a minute")
    parser.add_argument("--selector", default=None,
                        help="random, shuffle, sequential, offline_easy2hard, "
                             "difficulty_based or bots (default: the config's)")
    parser.add_argument("--steps", type=int, default=None, help="total training steps")
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--model", default=None,
                        help=f"GGUF file or checkpoint folder (default: ${MODEL_PATH_ENV} "
                             "or the bundled SmolLM2-135M GGUF)")
    parser.add_argument("--taskset", default=None, help="taskset folder (default: config's)")
    parser.add_argument("--out", type=Path, default=None,
                        help="run folder (default runs/train_local/<time>-<selector>-s<seed>)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --out from its last checkpoint")
    parser.add_argument("--time-limit", type=float, default=None, metavar="MIN",
                        help="stop after this many minutes, with a checkpoint (resumable)")
    parser.add_argument("--gpu-memory-fraction", type=float, default=None, metavar="F",
                        help="cap this run's share of GPU memory (runs sharing one GPU)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def train_local_command(args: argparse.Namespace) -> int:
    config = args.config or (SMOKE_CONFIG if args.smoke else DEFAULT_CONFIG)
    overrides = {k: v for k, v in {
        "selector.name": args.selector, "trainer.steps": args.steps,
        "trainer.device": args.device, "trainer.seed": args.seed,
        "model.path": args.model, "taskset.path": args.taskset,
        "trainer.time_limit_s": None if args.time_limit is None else 60.0 * args.time_limit,
        "trainer.gpu_memory_fraction": args.gpu_memory_fraction,
    }.items() if v is not None}
    try:
        cfg = load_config(config, overrides)
    except (OSError, ValueError) as exc:
        print(f"train-local: {exc}", file=sys.stderr)
        return 2
    if cfg.trainer.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print("train-local: --device cuda asked for, but torch sees no GPU",
                  file=sys.stderr)
            return 2
    if args.resume and args.out is None:
        print("train-local: --resume needs --out RUN_DIR", file=sys.stderr)
        return 2
    if not args.resume and args.out is not None and (args.out / "metrics.csv").exists():
        print(f"train-local: {args.out} already holds a run; pass --resume to continue it "
              "or choose another --out", file=sys.stderr)
        return 2
    run_dir = args.out or paths.new_run_dir(
        "train_local", f"{time.strftime('%Y%m%d-%H%M%S')}-{cfg.selector.name}"
                       f"-s{cfg.trainer.seed}")
    try:
        trainer = GRPOTrainer(cfg, run_dir, resume=args.resume)
    except (OSError, ValueError) as exc:  # taskset, selector, model or checkpoint problems
        print(f"train-local: {exc}", file=sys.stderr)
        return 2
    try:
        rows = trainer.train(progress=not args.no_progress)
    except OSError as exc:  # e.g. the disk filled up while writing a checkpoint
        print(f"train-local: {exc}; the last complete checkpoint stays in {run_dir}, "
              "resume with --resume", file=sys.stderr)
        return 1
    last = rows[-1] if rows else {}
    print(f"run folder: {run_dir}")
    if last:
        print(f"step {last['step']}: rollout_accuracy {last.get('rollout_accuracy')}, "
              f"effective_task_ratio {last.get('effective_task_ratio')}")
    return 0

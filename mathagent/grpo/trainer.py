"""The GRPO loop: select, explore, judge, feed back, compute advantages, update, log.

:class:`GRPOTrainer` runs one ``train-local`` run in one process: a policy
(:mod:`mathagent.policy`), a selector over the training split and a held-out eval split.
Its checkpoints come from :class:`~mathagent.grpo.checkpoint.CheckpointMixin`; with
``rollout.python_tool`` its rollouts are exchanges with the Python tool
(:mod:`mathagent.grpo.tool_rollout`).
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mathagent import paths
from mathagent.grpo.checkpoint import CheckpointMixin, NoCheckpointError
from mathagent.grpo.config import TrainConfig
from mathagent.grpo.files import atomic_write_text, last_logged_step, truncate_jsonl
from mathagent.grpo.logger import TIDY_COLUMNS, RunLogger
from mathagent.grpo.loss import clipped_pg_loss, group_advantages, score_completions
from mathagent.grpo.tool_rollout import PythonTool
from mathagent.judge import truth_from_answer
from mathagent.metrics import effective_task_ratio
from mathagent.policy import (
    MODEL_PATH_ENV,
    Completion,
    Policy,
    chat_messages,
    locate_model,
    make_generator,
    seed_stream,
)
from mathagent.trinity_tags import run_tags


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


def _written(completion: Completion) -> int:
    """How many of a completion's tokens the policy wrote (all but a tool's turns)."""
    mask = completion.loss_mask
    return len(completion.ids) if mask is None else sum(mask)


class GRPOTrainer(CheckpointMixin):
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
        self.tool = None  # the Python tool of the rollouts, if rollout.python_tool
        if cfg.rollout.python_tool:
            self.tool = PythonTool(cfg.rollout.max_turns, cfg.rollout.tool_timeout)
            self.tool.check_template(self.policy)
        tools = self.tool.schemas if self.tool else None
        self.train_questions = list(self.train_set["question"])
        self.train_prompts = [self.policy.encode(q, tools) for q in self.train_questions]
        self.train_truths = [truth_from_answer(a) for a in self.train_set["answer"]]
        self.eval_questions = list(self.eval_set["question"])
        self.eval_prompts = [self.policy.encode(q, tools) for q in self.eval_questions]
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
        from mathagent.grpo.config import selector_kwargs
        from mathagent.selectors import make_selector, reads_features

        sel = self.cfg.selector
        n = self.cfg.rollout.repeat_times
        kwargs = selector_kwargs(self.cfg)
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
            "model": (self.cfg.model.path or os.environ.get(MODEL_PATH_ENV)
                      or "smollm2-135m-instruct"),
            "model_file": str(locate_model(self.cfg.model.path)),
            "device": self.cfg.trainer.device,
            "train_tasks": len(self.train_set),
            "eval_tasks": len(self.eval_set),
            "eval_taskset": self.eval_name,
            "judge": f"mathagent.judge.score(lenient={self.cfg.rollout.lenient})",
            "trinity_tags": run_tags(TIDY_COLUMNS, self.eval_name, self.cfg.eval.repeat_times),
            "config": cfg,
        }
        if self.tool:
            params["python_tool"] = self.tool.describe()
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
        questions = [self.train_questions[i] for i in idx for _ in range(n)]
        comps = self._rollouts(prompts, questions, cfg.rollout.temperature, self.sampler_gen)
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
        lengths = np.array([_written(c) for c in comps])
        tool_calls = np.array([c.tool_calls if self.tool else 0 for c in comps], dtype=float)
        tool_errors = np.array([c.tool_errors if self.tool else 0 for c in comps], dtype=float)
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
            # tool calls (failed runs) per rollout, as Trinity logs the workflow's
            "rollout_tool_calls": float(tool_calls.mean()),
            "rollout_tool_errors": float(tool_errors.mean()),
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

    def _rollouts(self, prompts, questions, temperature, generator) -> list[Completion]:
        """One completion per prompt: a sampled reply, or with the Python tool a whole
        exchange (a :class:`~mathagent.grpo.tool_rollout.ToolRollout`)."""
        r = self.cfg.rollout
        kwargs = dict(max_new_tokens=r.max_new_tokens, temperature=temperature,
                      generator=generator, chunk_size=r.chunk_size)
        if self.tool is None:
            return self.policy.sample(prompts, **kwargs)
        messages = [chat_messages(q, self.policy.prompt) for q in questions]
        return self.tool.rollouts(self.policy, prompts, messages, **kwargs)

    def _sync(self) -> None:
        if self.policy.device.type == "cuda":
            self.torch.cuda.synchronize(self.policy.device)

    def _update(self, prompts, comps, adv: np.ndarray) -> dict:
        """One optimiser step (per epoch) of the clipped PG loss over the batch.

        Sequences with zero advantage add nothing to the policy gradient, so without a KL
        term they are skipped; the loss is still divided by the token count of the whole
        batch, so skipping changes the cost, not the gradient. Only the tokens the policy
        wrote count (:attr:`Completion.loss_mask`): never a tool's output.
        """
        torch = self.torch
        cfg = self.cfg.algorithm
        temp = self.cfg.rollout.temperature
        model = self.policy.model
        total_tokens = float(sum(_written(c) for c in comps))
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
                    with_entropy=epoch == 0, loss_masks=[comps[i].loss_mask for i in mb])
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
        questions = [q for q in self.eval_questions for _ in range(k)]
        comps = self._rollouts(prompts, questions, cfg.eval.temperature, gen)
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
            record = {
                "step": step, "task_index": task,
                "question": self.train_set[task]["question"],
                "truth": self.train_truths[task], "response": comps[j].text,
                "reward": float(rewards.reshape(-1)[j])}
            if self.tool:  # the whole exchange; "response" is its last reply
                record.update(tool_calls=comps[j].tool_calls,
                              tool_errors=comps[j].tool_errors, turns=comps[j].turns)
            lines.append(json.dumps(record) + "\n")
        # one append per step; a kill mid-write leaves a torn last line, and a resume
        # drops it with every record after the checkpoint (truncate_jsonl)
        with open(self.run_dir / "samples.jsonl", "a") as f:
            f.write("".join(lines))

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


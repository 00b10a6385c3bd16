"""Tests of the tutorial-scale GRPO trainer (mathagent.grpo).

The first group needs no model: advantages (checked against Trinity-RFT's own GRPO
advantage class), the clipped loss, micro-batch accumulation, configs, model location and
the command line. The second group loads the real bundled SmolLM2-135M once (about 20 s on
two cores) and runs the real sampler, judge, selectors and optimiser on the CPU, ending
with the CPU smoke of ``train-local``: a few tiny steps, then a resume. The resumed runs
that must equal uninterrupted ones, one per feedback selector, train the small model of
``conftest.py``.
"""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from bounds import hang_bound

from mathagent import grpo, paths, rollouts, tasks
from mathagent import policy as policy_mod

# --------------------------------------------------------------------------------------
# No model needed
# --------------------------------------------------------------------------------------


def test_group_advantages_are_zero_for_groups_that_agree():
    rewards = np.array([[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 0, 0]], dtype=float)
    adv = grpo.group_advantages(rewards)
    assert np.all(adv[0] == 0) and np.all(adv[1] == 0)
    assert adv[2, 0] > 0 and np.all(adv[2, 1:] < 0)
    assert adv[2].sum() == pytest.approx(0.0, abs=1e-9)


def test_group_advantages_match_trinity_grpo():
    from trinity.algorithm.advantage_fn.grpo_advantage import GRPOGroupedAdvantage
    from trinity.common.experience import Experience

    rng = np.random.default_rng(3)
    rewards = (rng.random((5, 8)) < 0.4).astype(float)
    rewards[0] = 1.0  # one all-right group
    ours = grpo.group_advantages(rewards)
    fn = GRPOGroupedAdvantage(epsilon=1e-6)
    for g, row in enumerate(rewards):
        exps = [Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=1, reward=float(r))
                for r in row]
        exps, _ = fn.calculate_group_advantage(str(g), exps)
        theirs = np.array([float(e.advantages[0]) for e in exps])
        np.testing.assert_allclose(ours[g], theirs, rtol=1e-5, atol=1e-6)


def test_group_advantages_reject_flat_input():
    with pytest.raises(ValueError, match=r"shape \(B, n\)"):
        grpo.group_advantages(np.zeros(8))


def _loss_grad(logp_value, old_value, adv, clip=0.2):
    logp = torch.tensor([[logp_value]], requires_grad=True)
    loss, stats = grpo.clipped_pg_loss(logp, torch.tensor([[old_value]]), torch.tensor([adv]),
                                       torch.ones(1, 1), clip, denom=1.0)
    loss.backward()
    return float(logp.grad), stats


def test_clipped_loss_gradient_and_clipping():
    # on-policy (ratio 1): d loss / d logp = -A
    g, stats = _loss_grad(-1.0, -1.0, 2.0)
    assert g == pytest.approx(-2.0) and stats["clipfrac"] == 0.0
    # ratio e^0.5 > 1.2 with A > 0: clipped, no gradient pushes it further up
    g, stats = _loss_grad(-0.5, -1.0, 2.0)
    assert g == 0.0 and stats["clipfrac"] == 1.0
    # ratio e^-0.5 < 0.8 with A < 0: clipped too
    g, _ = _loss_grad(-1.5, -1.0, -2.0)
    assert g == 0.0
    # ratio above the band but A < 0: the unclipped term is smaller, gradient flows
    g, _ = _loss_grad(-0.5, -1.0, -2.0)
    assert g == pytest.approx(2.0 * math.exp(0.5))


def test_kl_penalty_is_zero_at_the_reference_and_positive_away():
    logp = torch.tensor([[-1.0, -2.0]])
    mask = torch.ones(1, 2)
    adv = torch.zeros(1)
    _, at_ref = grpo.clipped_pg_loss(logp, logp, adv, mask, 0.2, 2.0, ref_logp=logp,
                                     kl_coef=0.1)
    _, away = grpo.clipped_pg_loss(logp, logp, adv, mask, 0.2, 2.0, ref_logp=logp - 0.5,
                                   kl_coef=0.1)
    assert at_ref["kl"] == pytest.approx(0.0) and away["kl"] > 0.0


def test_micro_batches_sum_to_the_full_batch_token_mean():
    rng = np.random.default_rng(0)
    logp = torch.tensor(rng.normal(size=(6, 5)), dtype=torch.float32)
    mask = torch.tensor(rng.random((6, 5)) < 0.7, dtype=torch.float32)
    adv = torch.tensor(rng.normal(size=6), dtype=torch.float32)
    total = float(mask.sum())
    full, _ = grpo.clipped_pg_loss(logp, logp - 0.1, adv, mask, 0.2, total)
    parts = sum(grpo.clipped_pg_loss(logp[s], logp[s] - 0.1, adv[s], mask[s], 0.2, total)[0]
                for s in (slice(0, 2), slice(2, 6)))
    # ratio e^0.1 lies inside the clip band [0.8, 1.2]: the loss is -ratio * A per token
    token_mean = -(math.exp(0.1) * adv[:, None] * mask).sum() / total
    assert float(parts) == pytest.approx(float(full), rel=1e-6)
    assert float(full) == pytest.approx(float(token_mean), rel=1e-6)


def test_shipped_configs_load_and_smoke_is_tiny():
    full = grpo.load_config(grpo.DEFAULT_CONFIG)
    smoke = grpo.load_config(grpo.SMOKE_CONFIG)
    assert full.taskset.feature_keys == [tasks.WEAK_KEY, tasks.STRONG_KEY]
    assert smoke.trainer.device == "cpu"
    def budget(c):  # sampled tokens per step, at most
        return c.rollout.batch_size * c.rollout.repeat_times * c.rollout.max_new_tokens

    assert budget(smoke) <= 256 < budget(full)


def test_config_errors_name_the_file_and_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("rollout:\n  batch_sise: 4\n")
    with pytest.raises(ValueError, match=r"bad\.yaml: rollout\.batch_sise: Key 'batch_sise' "
                                         r"not in 'RolloutConfig'"):
        grpo.load_config(bad)
    bad.write_text("rollout:\n  repeat_times: 1\n")
    with pytest.raises(ValueError, match="repeat_times must be >= 2"):
        grpo.load_config(bad)
    with pytest.raises(ValueError, match=r"defaults: override trainer\.stepz=3: "
                                         r"trainer\.stepz: Key 'stepz' not in"):
        grpo.load_config(None, {"trainer.stepz": 3})
    with pytest.raises(ValueError, match=r"defaults: override trainer\.steps='many': "
                                         r"trainer\.steps: Value 'many'"):
        grpo.load_config(None, {"trainer.steps": "many"})
    bad.write_text("trainer:\n  device: tpu\n")
    with pytest.raises(ValueError, match=r"bad\.yaml: trainer\.device must be 'cpu', 'cuda'"):
        grpo.load_config(bad)
    assert grpo.load_config(None, {"trainer.device": "cuda:1"}).trainer.device == "cuda:1"
    cfg = grpo.load_config(None, {"trainer.steps": 3, "selector.name": "bots"})
    assert cfg.trainer.steps == 3 and cfg.selector.name == "bots"


def test_cli_flags_override_the_config_file():
    import argparse

    from mathagent.settings import flag_overrides

    parser = argparse.ArgumentParser()
    grpo.train_local_parser(parser)
    assert flag_overrides(parser.parse_args([]), grpo.TrainConfig) == {}
    args = parser.parse_args(["--selector", "bots", "--steps", "5", "--device", "cpu",
                              "--seed", "3", "--model", "m.gguf", "--taskset", "data/x",
                              "--time-limit", "2", "--gpu-memory-fraction", "0.5"])
    assert flag_overrides(args, grpo.TrainConfig) == {
        "selector.name": "bots", "trainer.steps": 5, "trainer.device": "cpu",
        "trainer.seed": 3, "model.path": "m.gguf", "taskset.path": "data/x",
        "trainer.time_limit_s": 120.0, "trainer.gpu_memory_fraction": 0.5}
    cfg = grpo.load_config(grpo.SMOKE_CONFIG, flag_overrides(args, grpo.TrainConfig))
    assert (cfg.trainer.steps, cfg.trainer.time_limit_s, cfg.rollout.batch_size) == (5, 120.0, 2)
    with pytest.raises(SystemExit):
        parser.parse_args(["--steps", "many"])
    helps = {a.option_strings[0]: a.metavar for a in parser._actions if a.option_strings}
    assert helps["--time-limit"] == "MIN" and helps["--gpu-memory-fraction"] == "F"
    assert helps["--selector"] == "SELECTOR" and helps["--steps"] == "STEPS"


def test_locate_model(tmp_path, monkeypatch):
    from mathagent.models import MODELS, ModelError

    with pytest.raises(ModelError, match="model from argument: .*nowhere.gguf"):
        policy_mod.locate_model(tmp_path / "nowhere.gguf")
    monkeypatch.setenv(policy_mod.MODEL_PATH_ENV, str(tmp_path))
    assert policy_mod.locate_model() == tmp_path
    monkeypatch.setenv(policy_mod.MODEL_PATH_ENV, "no-such-model")
    with pytest.raises(ModelError, match=f"model from {policy_mod.MODEL_PATH_ENV}: .*no-such"):
        policy_mod.locate_model()
    monkeypatch.delenv(policy_mod.MODEL_PATH_ENV)
    bundled = policy_mod.locate_model()
    assert bundled == policy_mod.locate_model("smollm2-135m-instruct")
    assert bundled.suffix == ".gguf"
    assert tasks.sha256_file(bundled) == MODELS["smollm2-135m-instruct"].sha256
    # a hub id is passed on for transformers to fetch (for users with the hub)
    assert policy_mod.locate_model("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"


def test_cli_help_and_bad_settings_fail_before_loading_the_model(tmp_path):
    import os

    env = {**os.environ, "MATHAGENT_RUNS": str(tmp_path / "runs")}

    def _cli(*args):
        return subprocess.run([sys.executable, "-m", "mathagent", "train-local", *args],
                              capture_output=True, text=True, cwd=paths.REPO_ROOT, env=env,
                              timeout=hang_bound(300))

    out = _cli("--help")
    assert out.returncode == 0 and "--selector" in out.stdout and "--resume" in out.stdout
    out = _cli("--smoke", "--selector", "nosuch", "--out", str(tmp_path / "r"))
    assert out.returncode == 2 and "nosuch" in out.stderr
    out = _cli("--smoke", "--taskset", str(tmp_path / "missing"), "--out", str(tmp_path / "r"))
    assert out.returncode == 2 and "missing" in out.stderr
    out = _cli("--resume", "--smoke")
    assert out.returncode == 2 and "--resume needs --out" in out.stderr
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "metrics.csv").write_text("selector,seed,step\n")
    out = _cli("--smoke", "--out", str(tmp_path / "old"))
    assert out.returncode == 2 and "already holds a run" in out.stderr


# --------------------------------------------------------------------------------------
# The real model on the CPU
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def policy():
    """The bundled model, loaded once for this module (CPU, float32)."""
    torch.set_num_threads(2)
    return policy_mod.Policy.load(device="cpu")


@pytest.mark.slow
def test_left_padding_does_not_change_log_probs(policy):
    short = policy.encode("What is 2 + 3?")
    long = policy.encode("Mia has 12 apples and gets 7 more, then gives away 4. How many now?")
    reply = policy.tokenizer("2 + 3 = 5\n#### 5", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        alone, m1, _ = policy.token_logprobs([short], [reply])
        batch, m2, _ = policy.token_logprobs([short, long], [reply, reply[:3]])
    assert m1.sum() == len(reply) and m2[1].sum() == 3
    np.testing.assert_allclose(alone[0].numpy(), batch[0].numpy(), atol=1e-4)


@pytest.mark.slow
def test_sampling_is_reproducible_and_stops_at_the_end_token(policy):
    prompts = [policy.encode("What is 4 + 4?")] * 3
    a = policy.sample(prompts, max_new_tokens=12, temperature=1.0,
                      generator=policy_mod.make_generator("cpu", 5))
    b = policy.sample(prompts, max_new_tokens=12, temperature=1.0,
                      generator=policy_mod.make_generator("cpu", 5))
    assert [c.ids for c in a] == [c.ids for c in b]
    for c in a:
        assert 1 <= len(c.ids) <= 12
        stops = [i for i, t in enumerate(c.ids) if t in policy.stop_ids]
        assert stops in ([], [len(c.ids) - 1])  # nothing after the first stop token
        assert c.finished == bool(stops)


@pytest.mark.slow
def test_hf_backend_feeds_the_measurement_driver(policy, tmp_path):
    frames = tasks.generate_arithmetic(n_train=3, n_test=1, seed=11)
    tasks.save_taskset(frames, tmp_path / "ts", {"kind": "test"})
    backend = policy_mod.HFBackend(policy=policy, max_new_tokens=8)
    out = backend.run_batch([{"question": "What is 1 + 1?", "answer": "#### 2"}], n=2, seed=0)
    assert len(out) == 1 and [r["rollout"] for r in out[0]] == [0, 1]
    for rec in out[0]:
        assert set(rec) == set(rollouts.ROLLOUT_KEYS)
        assert rec["reward"] == rec["accuracy"] in (0.0, 1.0) and rec["tokens"] <= 8
    res = rollouts.measure_pass_rates(tmp_path / "ts", "hf_pass_rate", backend, n=2,
                                      chunk_size=2, rollouts_dir=tmp_path / "side",
                                      progress=False)
    assert res.complete and res.tasks == 3
    col = pd.read_parquet(tmp_path / "ts" / "train.parquet")["hf_pass_rate"]
    assert col.between(0, 1).all() and set(col * 2) <= {0.0, 1.0, 2.0}
    prov = json.loads((tmp_path / "ts" / "provenance.json").read_text())
    assert "hf_pass_rate" in prov["measurements"]


@pytest.mark.slow
def test_update_moves_the_policy_only_on_mixed_groups(policy, tmp_path):
    cfg = grpo.load_config(grpo.SMOKE_CONFIG)
    trainer = grpo.GRPOTrainer(cfg, tmp_path / "run", policy=policy)
    trainer.logger.close()
    prompts = [trainer.train_prompts[0]] * 4
    comps = policy.sample(prompts, max_new_tokens=8, temperature=1.0,
                          generator=policy_mod.make_generator("cpu", 1))
    weight = policy.model.get_decoder().layers[0].mlp.up_proj.weight
    before = weight.detach().clone()
    flat = trainer._update(prompts, comps, np.zeros(4))  # one group that agrees
    assert flat["trained_sequences"] == 0 and torch.equal(weight, before)
    adv = grpo.group_advantages(np.array([[1.0, 0.0, 1.0, 0.0]])).reshape(-1)
    stats = trainer._update(prompts, comps, adv)
    assert stats["trained_sequences"] == 4 and stats["skipped_updates"] == 0
    assert math.isfinite(stats["pg_loss"]) and 0 < stats["grad_norm"] < math.inf
    assert not torch.equal(weight, before)


@pytest.mark.slow
def test_cpu_smoke_trains_feeds_back_logs_and_resumes(policy, tmp_path):
    """The CPU smoke CI runs: real model, judge, Trinity selector; then resume."""
    # one checkpoint, after step 2 (1.6 GB of weights and AdamW moments, about 10 s to
    # write here): test_grpo_kill.py proves the checkpoint of every step
    cfg = grpo.load_config(grpo.SMOKE_CONFIG, {"trainer.steps": 2, "trainer.save_interval": 2})
    assert cfg.selector.name == "difficulty_based"
    pristine = copy.deepcopy(policy.model)  # the resumed run starts from these weights
    run = tmp_path / "run"
    trainer = grpo.GRPOTrainer(cfg, run, policy=policy)
    calls = []
    feedback = trainer.selector.feedback

    def spy(indices, values):  # records, then calls the real selector
        calls.append((list(indices), list(values)))
        feedback(indices, values)

    trainer.selector.feedback = spy
    prior = trainer.selector.posterior()[0].copy()
    results = [trainer.step() for _ in range(2)]
    trainer.logger.close()

    B, n = cfg.rollout.batch_size, cfg.rollout.repeat_times
    for res, (idx, vals) in zip(results, calls, strict=True):
        assert res.rewards.shape == (B, n) and idx == res.indices
        np.testing.assert_allclose(vals, res.rewards.mean(axis=1))
        assert math.isfinite(res.row["pg_loss"]) and math.isfinite(res.row["grad_norm"])
        assert res.row["trained_sequences"] == int((res.advantages != 0).sum())
    alpha = trainer.selector.posterior()[0]
    assert not np.allclose(alpha, prior)  # the Beta posterior took the feedback in

    table = pd.read_csv(run / "metrics.csv")
    assert list(table["step"]) == [1, 2]
    assert list(table.columns[:6]) == ["selector", "seed", "step", "rollout_accuracy",
                                       "eval_accuracy", "effective_task_ratio"]
    assert table["rollout_accuracy"].between(0, 1).all()
    assert table["eval_accuracy"].isna().tolist() == [True, False]  # eval every 2 steps
    trinity = pd.read_csv(run / "trinity_metrics.csv")
    assert {"rollout/accuracy/mean", "experience_pipeline/selection/valid_ratio",
            "actor/pg_loss", "eval/arithmetic-test/accuracy/mean@1"} <= set(trinity.columns)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    assert "rollout/accuracy/mean" in events.Tags()["scalars"]
    # the reader turns the run's event files back into its own table: one map of names
    from mathagent import results

    read = results.scalars_to_table(results.read_scalars(run / "tensorboard"),
                                    "difficulty_based", 0, source=str(run))
    for column in ("rollout_accuracy", "effective_task_ratio", "eval_accuracy",
                   "pg_loss", "trainer_reward"):
        np.testing.assert_allclose(read.set_index("step")[column].reindex(table["step"]),
                                   table[column], rtol=1e-6, err_msg=column)
    params = json.loads((run / "params.json").read_text())
    assert params["selector"] == "difficulty_based" and (run / "config.yaml").exists()
    saved = torch.load(run / "checkpoint" / "state.pt", weights_only=False)
    assert saved["selector"] == trainer.selector.state_dict()
    assert saved["selector"]["current_index"] == 2 * B

    # resume into a fresh policy (the initial weights) and run one more step
    fresh = policy_mod.Policy(pristine, policy.tokenizer, device="cpu")
    cfg3 = grpo.load_config(grpo.SMOKE_CONFIG, {"trainer.steps": 3})
    resumed = grpo.GRPOTrainer(cfg3, run, policy=fresh, resume=True)
    assert resumed.step_count == 2
    assert resumed.selector.state_dict() == saved["selector"]
    for (name, a), b in zip(policy.model.state_dict().items(),
                            fresh.model.state_dict().values(), strict=True):
        assert torch.equal(a, b), name  # the checkpointed weights were restored
    rows = resumed.train(progress=False)
    assert [r["step"] for r in rows] == [1, 2, 3]
    table = pd.read_csv(run / "metrics.csv")
    assert list(table["step"]) == [1, 2, 3]
    assert resumed.selector.state_dict()["current_index"] == 3 * B
    assert json.loads((run / "checkpoint" / "trainer_state.json").read_text())["step"] == 3


def _comparable(csv) -> pd.DataFrame:
    """A metrics table, read exactly, without the columns that measure the machine
    (timings, memory)."""
    table = pd.read_csv(csv, float_precision="round_trip")
    return table[[c for c in table.columns if not c.startswith(("time_", "gpu_mem"))]]


def _spy_selections(trainer) -> list:
    seen = []
    get = trainer.selector.get_indices

    def spy(batch_size):
        idx = get(batch_size)
        seen.append(list(idx))
        return idx

    trainer.selector.get_indices = spy
    return seen


@pytest.fixture(scope="module")
def small_policy(small_model):
    """The small model of ``conftest.py`` with its initial weights (never trained here)."""
    torch.set_num_threads(2)
    return policy_mod.Policy.load(small_model.model, device="cpu")


@pytest.mark.slow
@pytest.mark.parametrize("selector", ["difficulty_based", "bots"])
def test_resumed_run_equals_the_uninterrupted_one(small_model, small_policy, tmp_path, selector):
    """k steps, a kill right after step k+1 wrote its samples (before its checkpoint),
    --resume, N-k more steps: the same selections, metrics and samples as N straight steps.
    Trinity's difficulty_based keeps its posteriors only through mathagent's full state.

    On the small model of ``conftest.py`` (a step takes about a second, against several on
    the bundled model), which trains in the step after the resume (checked below), so the
    restored weights and optimiser state decide the resumed run's metrics. The bundled
    model's own checkpoint is resumed into fresh weights by the CPU smoke test above, and
    ``test_grpo_kill.py`` kills a ``train-local`` process in every part of a run.
    """
    steps, k = 3, 1
    cfg = grpo.load_config(small_model.config, {"trainer.steps": steps,
                                                "selector.name": selector})
    pristine = small_policy.model

    def fresh_policy():
        return policy_mod.Policy(copy.deepcopy(pristine), small_policy.tokenizer, device="cpu")

    straight = grpo.GRPOTrainer(cfg, tmp_path / "straight", policy=fresh_policy())
    straight_seen = _spy_selections(straight)
    straight.train(progress=False)
    run = tmp_path / "resumed"
    head = grpo.GRPOTrainer(cfg, run, policy=fresh_policy())
    seen = _spy_selections(head)
    for _ in range(k):
        head.step()
    head.logger.close()
    # the killed step k+1 had logged its row and appended its samples, the last torn
    samples = run / "samples.jsonl"
    lines = samples.read_text().splitlines(keepends=True)
    with open(samples, "a") as f:
        f.write(lines[-1].replace(f'"step": {k}', f'"step": {k + 1}'))
        f.write(lines[-1][: len(lines[-1]) // 2])
    table = pd.read_csv(run / "metrics.csv", float_precision="round_trip")
    extra = table.iloc[[-1]].assign(step=k + 1)
    pd.concat([table, extra]).to_csv(run / "metrics.csv", index=False)
    del head

    resumed = grpo.GRPOTrainer(cfg, run, policy=fresh_policy(), resume=True)
    assert resumed.step_count == k
    tail = _spy_selections(resumed)
    resumed.train(progress=False)
    seen += tail
    assert seen == straight_seen and len(seen) == steps
    trained = pd.read_csv(tmp_path / "straight" / "metrics.csv")["trained_sequences"]
    # the first step after the resume updated the model: its loss, its gradient and the
    # next step's replies depend on the restored weights and optimiser state
    assert trained[k] > 0, trained.tolist()
    pd.testing.assert_frame_equal(_comparable(run / "metrics.csv"),
                                  _comparable(tmp_path / "straight" / "metrics.csv"))
    assert samples.read_text() == (tmp_path / "straight" / "samples.jsonl").read_text()
    a, b = straight.selector, resumed.selector
    for x, y in zip(a.posterior(), b.posterior(), strict=True):
        np.testing.assert_array_equal(x, y)
    assert a.capability() == b.capability() and a.rho() == b.rho()

"""``train-local`` with the Python tool (``rollout.python_tool``, mathagent.grpo.tool_rollout).

The policy is a tiny random Llama (one layer, hidden size 32) with the bundled model's
tokenizer and chat template; the sandbox, the tokenizer, the template, the judge, the
selector and the optimiser are the real ones. A random model never writes a tool call, so
the replies that call the tool are scripted: :class:`ScriptedPolicy` samples every batch for
real, then replaces the replies its script gives text for (a fake only for what cannot run
here: a model that uses the tool). The replies it does not replace, and every reply after a
tool turn, are the tiny model's own.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from bounds import hang_bound

from mathagent import grpo, models, paths
from mathagent import policy as policy_mod
from mathagent.grpo.tool_rollout import TOOL_NAME, PythonTool

QUESTION = "What is 6 * 7?"
OTHER = "What is 2 + 2?"


def call(code: str, **extra) -> str:
    """A reply calling the tool in the hermes format the prompt asks for."""
    payload = json.dumps({"name": TOOL_NAME, "arguments": {"code": code, **extra}})
    return f"Let me compute.\n<tool_call>\n{payload}\n</tool_call>"


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    gguf = models.model_file()
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


@pytest.fixture(scope="module")
def tool():
    return PythonTool(max_turns=3)


def tiny_model(tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id))


class ScriptedPolicy(policy_mod.Policy):
    """A real policy whose replies are replaced where ``script(context)`` returns a text.

    Each batch is sampled for real first (the generator advances as it would), then the
    scripted rows get the script's text, ended by ``<|im_end|>`` as a reply that ended by
    itself. ``contexts`` records every batch that was sampled, ``trained`` the completions
    and loss masks of every gradient pass (:meth:`token_logprobs` with ``with_entropy`` set
    or not, but with ``loss_masks``).
    """

    def __init__(self, model, tokenizer, script):
        super().__init__(model, tokenizer, device="cpu")
        self.script = script
        self.contexts: list[list[list[int]]] = []
        self.trained: list[tuple[list, list]] = []

    def token_logprobs(self, prompts, completions, temperature=1.0, with_entropy=False,
                       loss_masks=None):
        if loss_masks is not None:
            self.trained.append((list(completions), list(loss_masks)))
        return super().token_logprobs(prompts, completions, temperature, with_entropy,
                                      loss_masks)

    def sample(self, prompts, **kwargs):
        self.contexts.append([list(p) for p in prompts])
        out = super().sample(prompts, **kwargs)
        end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        for k, context in enumerate(prompts):
            text = self.script(list(context))
            if text is not None:
                ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [end]
                out[k] = policy_mod.Completion(ids=ids, text=text, finished=True)
        return out


def first_turn(policy, tool, text):
    """A script: ``text`` as the first reply to QUESTION, the model's own replies after."""
    prompt = policy.encode(QUESTION, tool.schemas)
    return lambda context: text if context == prompt else None


def roll(policy, tool, questions=(QUESTION, OTHER)):
    """One rollout per question; returns the first one's prompt and messages, and all."""
    messages = [policy_mod.chat_messages(q, policy.prompt) for q in questions]
    prompts = [policy.encode(q, tool.schemas) for q in questions]
    rollouts = tool.rollouts(policy, prompts, messages, max_new_tokens=6, temperature=1.0,
                             generator=policy_mod.make_generator("cpu", 0), chunk_size=8)
    return prompts[0], messages[0], rollouts


# --------------------------------------------------------------------------------------
# The exchange
# --------------------------------------------------------------------------------------


def test_the_prompt_offers_the_tool_in_the_system_message(tokenizer, tool):
    policy = policy_mod.Policy(tiny_model(tokenizer), tokenizer)
    text = tokenizer.decode(policy.encode(QUESTION, tool.schemas))
    system = text.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\n" + policy.prompt.system + "\n\n# Tools")
    assert json.dumps(tool.schemas[0]) in system and "<tool_call>" in system
    assert text.endswith(f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n")
    # without tools the prompt is the plain chat template's, as before the tool existed
    plain = tokenizer.apply_chat_template(policy_mod.chat_messages(QUESTION, policy.prompt),
                                          tokenize=False, add_generation_prompt=True)
    assert tokenizer.decode(policy.encode(QUESTION)) == plain


@pytest.mark.slow
def test_the_tools_section_is_the_one_qwen_template_writes(tokenizer, tool):
    """A template that writes tools itself (Qwen2.5's) is used as is; SmolLM2's, which ignores
    them, gets the same section from mathagent.text_tool_calls."""
    from transformers import AutoTokenizer

    try:
        gguf = models.resolve_model("qwen2.5-coder-0.5b")
    except models.ModelError as exc:
        pytest.skip(f"the Qwen policy is not installed: {exc}")
    qwen = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    messages = policy_mod.chat_messages(QUESTION, policy_mod.PromptConfig())
    theirs = policy_mod.Policy(tiny_model(tokenizer), qwen).chat_text(messages, tool.schemas)
    ours = policy_mod.Policy(tiny_model(tokenizer), tokenizer).chat_text(messages, tool.schemas)
    assert theirs == qwen.apply_chat_template(messages, tools=tool.schemas, tokenize=False,
                                              add_generation_prompt=True)
    assert theirs.split("<|im_end|>")[0] == ours.split("<|im_end|>")[0]


def test_a_tool_call_runs_in_the_sandbox_and_the_reply_continues_after_its_output(
        tokenizer, tool):
    policy = ScriptedPolicy(tiny_model(tokenizer), tokenizer, None)
    policy.script = first_turn(policy, tool, call("print(6 * 7)"))  # OTHER gets no call
    prompt, messages, (used, plain) = roll(policy, tool)
    # batched: both first replies in one call, then the one that called the tool
    assert [len(batch) for batch in policy.contexts] == [2, 1]
    assert used.tool_calls == 1 and used.tool_errors == 0 and plain.tool_calls == 0
    assert [t["role"] for t in used.turns] == ["assistant", "tool", "assistant"]
    assert used.turns[1]["content"] == "Exit status 0.\nstdout:\n42"  # the real sandbox ran
    # the second reply was sampled after the tool's output, as the template writes it
    context = tokenizer.decode(policy.contexts[1][0])
    assert context == policy.chat_text([*messages, used.turns[0], used.turns[1]], tool.schemas)
    assert context.endswith("<|im_start|>tool\nExit status 0.\nstdout:\n42<|im_end|>\n"
                            "<|im_start|>assistant\n")
    assert used.text == used.turns[2]["content"]  # the judge reads the last reply
    assert plain.turns == [{"role": "assistant", "content": plain.text}]
    assert plain.loss_mask == [1] * len(plain.ids)


def test_the_loss_mask_leaves_out_the_tool_turn(tokenizer, tool):
    policy = ScriptedPolicy(tiny_model(tokenizer), tokenizer, None)
    policy.script = first_turn(policy, tool, call("print(6 * 7)"))
    prompt, messages, (r,) = roll(policy, tool, [QUESTION])
    first, out, second = r.turns
    ids, mask = np.array(r.ids), np.array(r.loss_mask)
    # the rollout's tokens are the conversation the template writes, reply by reply
    assert tokenizer.decode(prompt + r.ids) == (
        policy.chat_text([*messages, first, out], tool.schemas) + second["content"]
        + ("<|im_end|>" if r.finished else ""))
    # masked out: exactly the template's text between the first reply's end token and the
    # second reply, tool output included
    zeros = np.flatnonzero(mask == 0)
    assert zeros.size and np.all(np.diff(zeros) == 1)  # one run of tool-turn tokens
    assert tokenizer.decode(ids[zeros]) == ("\n<|im_start|>tool\nExit status 0.\nstdout:\n42"
                                            "<|im_end|>\n<|im_start|>assistant\n")
    assert tokenizer.decode(ids[: zeros[0]]) == first["content"] + "<|im_end|>"
    assert tokenizer.decode(ids[zeros[-1] + 1:], skip_special_tokens=True) == second["content"]
    # the policy's log-probabilities carry the same mask, so the loss ignores those tokens
    with torch.no_grad():
        logp, got, _ = policy.token_logprobs([prompt], [r.ids], loss_masks=[r.loss_mask])
    assert got[0].tolist() == mask.tolist()
    logp = logp.clone().requires_grad_(True)
    loss, stats = grpo.clipped_pg_loss(logp, logp.detach(), torch.tensor([1.0]), got, 0.2,
                                       float(got.sum()), logp.detach() - 0.3, kl_coef=0.1)
    loss.backward()
    assert stats["tokens"] == mask.sum()
    assert torch.all(logp.grad[0, zeros] == 0) and torch.all(logp.grad[0, mask == 1] != 0)


def test_failed_runs_bad_arguments_and_the_last_turn(tokenizer):
    tool = PythonTool(max_turns=2)
    policy = ScriptedPolicy(tiny_model(tokenizer), tokenizer, None)
    prompt = policy.encode(QUESTION, tool.schemas)
    # every reply calls the tool: the first reply's two calls fail (an exception; an argument
    # the tool does not take), the second reply's call is not run (the last allowed turn)
    first = call("1 / 0") + "\n" + call("print(1)", timeout=99)
    policy.script = lambda context: first if context == prompt else call("print(2)")
    _, _, (r,) = roll(policy, tool, [QUESTION])
    assert r.tool_calls == 2 and r.tool_errors == 2
    division, bad = (t["content"] for t in r.turns[1:3])
    assert division.startswith("Error: the code exited with status 1") and \
        "ZeroDivisionError" in division
    assert bad.startswith("Error: execute_python_code takes one argument, code")
    assert [t["role"] for t in r.turns] == ["assistant", "tool", "tool", "assistant"]
    assert r.text == call("print(2)")  # the last allowed reply: judged, its call not run
    assert len(policy.contexts) == 2


# --------------------------------------------------------------------------------------
# The trainer
# --------------------------------------------------------------------------------------


def config(tmp_path, **overrides):
    return grpo.load_config(grpo.SMOKE_CONFIG, {
        "trainer.steps": 2, "rollout.max_new_tokens": 6, "eval.interval": 2,
        "eval.repeat_times": 1, "taskset.eval_max_tasks": 2, **overrides})


def test_setting_off_samples_as_before(tokenizer, tmp_path):
    """With the tool off a step samples exactly what plain batched sampling of the plain
    chat prompts gives for the run's seed, and the samples file keeps its fields."""
    cfg = config(tmp_path, **{"trainer.steps": 1})
    assert cfg.rollout.python_tool is False  # off by default
    policy = policy_mod.Policy(tiny_model(tokenizer), tokenizer)
    reference = copy.deepcopy(policy.model)
    trainer = grpo.GRPOTrainer(cfg, tmp_path / "run", policy=policy)
    assert trainer.tool is None
    res = trainer.step()
    trainer.logger.close()
    n = cfg.rollout.repeat_times
    same = policy_mod.Policy(reference, tokenizer)
    questions = [trainer.train_set[i]["question"] for i in res.indices for _ in range(n)]
    prompts = [tokenizer(tokenizer.apply_chat_template(
        policy_mod.chat_messages(q, cfg.prompt), tokenize=False, add_generation_prompt=True),
        add_special_tokens=False)["input_ids"] for q in questions]
    seed = policy_mod.seed_stream(cfg.trainer.seed, "sampler", "eval")["sampler"]
    expected = same.sample(prompts, max_new_tokens=cfg.rollout.max_new_tokens,
                           temperature=cfg.rollout.temperature, chunk_size=64,
                           generator=policy_mod.make_generator("cpu", seed))
    assert res.completions == expected
    assert all(c.loss_mask is None for c in res.completions)
    record = json.loads((tmp_path / "run" / "samples.jsonl").read_text().splitlines()[0])
    assert set(record) == {"step", "task_index", "question", "truth", "response", "reward"}
    row = pd.read_csv(tmp_path / "run" / "metrics.csv").iloc[0]
    assert row["rollout_tool_calls"] == 0 and row["rollout_tool_errors"] == 0
    assert row["response_length"] == np.mean([len(c.ids) for c in expected])
    assert "python_tool" not in json.loads((tmp_path / "run" / "params.json").read_text())


def test_tool_use_reaches_the_metrics_and_samples_and_resumes(tokenizer, tmp_path):
    """Two steps with the tool, then the same two steps as one step, a checkpoint and a
    resumed step: the same tables and samples (the sandbox's output is deterministic)."""
    # with a KL penalty every rollout is trained, whatever the rewards
    cfg = config(tmp_path, **{"rollout.python_tool": True, "rollout.max_turns": 2,
                              "trainer.samples_per_step": 8, "algorithm.kl_coef": 0.01})

    def trainer(run, resume=False):
        policy = ScriptedPolicy(tiny_model(tokenizer), tokenizer, None)
        t = grpo.GRPOTrainer(cfg, run, policy=policy, resume=resume)
        prompts = {tuple(p) for k, p in enumerate(t.train_prompts) if k % 2 == 0}
        policy.script = lambda c: call("print(6 * 7)") if tuple(c) in prompts else None
        return t

    straight = trainer(tmp_path / "straight")
    results = [straight.step() for _ in range(2)]
    straight.logger.close()
    # the update read each rollout's loss mask (one micro-batch per step)
    assert straight.policy.trained == [([c.ids for c in r.completions],
                                        [c.loss_mask for c in r.completions])
                                       for r in results]
    assert any(0 in c.loss_mask for r in results for c in r.completions)
    table = pd.read_csv(tmp_path / "straight" / "metrics.csv")
    for res, (_, row) in zip(results, table.iterrows(), strict=True):
        n = cfg.rollout.repeat_times
        expected = np.mean([k % 2 == 0 for k in res.indices for _ in range(n)])
        assert row["rollout_tool_calls"] == expected == np.mean(
            [c.tool_calls for c in res.completions])
        assert row["rollout_tool_errors"] == 0
        # the length counts the tokens the policy wrote, not the tool's
        assert row["response_length"] == np.mean([sum(c.loss_mask) for c in res.completions])
    assert 0 < table["rollout_tool_calls"].mean() < 1  # both kinds of task were drawn
    trinity = pd.read_csv(tmp_path / "straight" / "trinity_metrics.csv")
    np.testing.assert_array_equal(trinity["rollout/tool_calls/mean"],
                                  table["rollout_tool_calls"])
    records = [json.loads(line) for line in
               (tmp_path / "straight" / "samples.jsonl").read_text().splitlines()]
    for rec in records:
        assert rec["tool_calls"] == (rec["task_index"] % 2 == 0)
        assert rec["response"] == rec["turns"][-1]["content"]
        if rec["tool_calls"]:
            assert rec["turns"][1] == {"role": "tool", "content": "Exit status 0.\nstdout:\n42"}
    params = json.loads((tmp_path / "straight" / "params.json").read_text())
    assert params["python_tool"]["max_turns"] == 2
    assert params["python_tool"]["tool_sandbox"]["timeout"] == cfg.rollout.tool_timeout

    run = tmp_path / "resumed"
    head = trainer(run)
    head.step()
    head.logger.close()
    resumed = trainer(run, resume=True)
    assert resumed.step_count == 1
    resumed.train(progress=False)

    def comparable(csv):
        t = pd.read_csv(csv, float_precision="round_trip")
        return t[[c for c in t.columns if not c.startswith(("time_", "gpu_mem"))]]

    pd.testing.assert_frame_equal(comparable(run / "metrics.csv"),
                                  comparable(tmp_path / "straight" / "metrics.csv"))
    assert (run / "samples.jsonl").read_text() == \
        (tmp_path / "straight" / "samples.jsonl").read_text()


# --------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------


def test_bad_tool_settings_are_one_line_naming_the_setting(tmp_path):
    too_long = r"rollout.tool_timeout \(seconds one run of the Python tool may take\) must be " \
               r"a number of seconds above 0 and at most 3600, got "
    for key, value, text in (("max_turns", 0, "rollout.max_turns must be >= 1"),
                             ("tool_timeout", 0, too_long + "0"),
                             ("tool_timeout", "1e9", too_long + "1000000000.0"),
                             ("tool_timeout", "1e20", too_long + "1e"),
                             ("tool_timeout", ".inf", too_long + "inf"),
                             ("tool_timeout", ".nan", too_long + "nan"),
                             ("python_tool", "maybe", "rollout.python_tool: Value 'maybe'")):
        bad = tmp_path / "bad.yaml"
        bad.write_text(f"rollout:\n  python_tool: true\n  {key}: {value}\n")
        with pytest.raises(ValueError, match=text) as err:
            grpo.load_config(bad)
        assert "\n" not in str(err.value)
    bad.write_text("rollout:\n  python_tool: true\n  max_turns: -1\n")
    out = subprocess.run([sys.executable, "-m", "mathagent", "train-local", "--config",
                          str(bad), "--out", str(tmp_path / "r")], capture_output=True,
                         text=True, cwd=paths.REPO_ROOT, timeout=hang_bound(300))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "rollout.max_turns must be >= 1" in out.stderr
    assert "Traceback" not in out.stderr


def test_the_flag_turns_the_tool_on_and_off():
    import argparse

    from mathagent.settings import flag_overrides

    parser = argparse.ArgumentParser()
    grpo.train_local_parser(parser)
    for argv, want in ((["--python-tool"], True), (["--no-python-tool"], False)):
        overrides = flag_overrides(parser.parse_args(argv), grpo.TrainConfig)
        assert overrides == {"rollout.python_tool": want}
        assert grpo.load_config(grpo.SMOKE_CONFIG, overrides).rollout.python_tool is want


def test_a_template_that_rewrites_replies_is_refused_at_start(tokenizer, tool):
    rewriting = copy.deepcopy(tokenizer)
    rewriting.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
        "{{ m['content'] | upper if m['role'] == 'assistant' else m['content'] }}"
        "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
        "{% endif %}")
    with pytest.raises(ValueError, match=r"^rollout\.python_tool: the policy's chat template "
                                         r"does not keep a reply as written"):
        tool.check_template(policy_mod.Policy(tiny_model(tokenizer), rewriting))

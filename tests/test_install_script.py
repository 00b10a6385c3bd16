"""scripts/install.sh: its options, and the pinned, hash-checked uv it installs with.

The install itself takes minutes (benchmarks/bench_install.py measures it); these tests run
the script's checks, which answer before anything is created, and look at the environment the
install made (the one the tests run in): bytecode written, excluded packages gone.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import sysconfig
from collections import Counter
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from mathagent import paths

ROOT = paths.REPO_ROOT
SCRIPT = ROOT / "scripts" / "install.sh"


@pytest.mark.parametrize("args, env, says", [
    (["--bogus"], {}, "error: unknown option --bogus (usage: bash scripts/install.sh "
                      "[--qwen] [--browser] [--pip])"),
    ([], {"MATHAGENT_INSTALLER": "conda"},
     "error: MATHAGENT_INSTALLER is 'conda'; it takes uv (the default) or pip"),
])
def test_bad_options_are_one_error_line_and_create_nothing(args, env, says, tmp_path):
    # a copy of the script, so that nothing beside it could be touched
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "install.sh").write_text(SCRIPT.read_text())
    done = subprocess.run(["bash", str(tmp_path / "scripts" / "install.sh"), *args],
                          capture_output=True, text=True, env={**os.environ, **env}, timeout=60)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [says]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scripts"]


def test_uv_is_pinned_and_every_wheel_hash_checked():
    lines = [ln.strip() for ln in (ROOT / "requirements" / "uv.txt").read_text().splitlines()
             if ln.strip() and not ln.lstrip().startswith("#")]
    pin = Requirement(lines[0].rstrip("\\").strip())
    assert pin.name == "uv" and str(pin.specifier).startswith("==")
    hashes = [ln for ln in lines[1:] if ln.startswith("--hash=sha256:")]
    assert len(hashes) == len(lines) - 1 >= 1
    assert all(len(h.split(":")[1].rstrip("\\ ")) == 64 for h in hashes)


def test_the_installed_packages_load_from_their_bytecode():
    """Every module the training stack imports from the environment has its bytecode there:
    the install compiles each step's packages (uv only compiles those of the step that asks).
    Where Python writes no bytecode (PYTHONDONTWRITEBYTECODE), a module without it is compiled
    again by every process that imports it: 3.1 s a process for torch's alone."""
    import agentscope  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401
    import trinity.common.config  # noqa: F401

    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    missing = Counter()
    for module in list(sys.modules.values()):
        source = getattr(module, "__file__", None) or ""
        if not source.endswith(".py") or not Path(source).resolve().is_relative_to(site):
            continue
        if not Path(importlib.util.cache_from_source(source)).is_file():
            missing[Path(source).resolve().relative_to(site).parts[0]] += 1
    assert not missing, (
        f"{sum(missing.values())} modules in {site} have no bytecode "
        f"({', '.join(f'{name}: {n}' for name, n in missing.most_common(5))}); a new "
        f"`bash scripts/install.sh` compiles them, or: {sys.executable} -m compileall -q {site}")


def test_the_packages_the_install_removes_are_gone_and_ray_builds_no_iri_parser():
    """``requirements/excluded.txt`` names what the install removes after the lock (and the GPU
    bundle leaves out): none of it is in the environment, so a process that imports Ray (which
    imports jsonschema) builds no IRI parser, and jsonschema still checks the formats it has
    checkers for."""
    excluded = [ln.strip() for ln in (ROOT / "requirements" / "excluded.txt").read_text()
                .splitlines() if ln.strip() and not ln.startswith("#")]
    assert excluded == ["rfc3987-syntax"]
    for name in excluded:
        with pytest.raises(importlib.metadata.PackageNotFoundError):
            importlib.metadata.version(name)
    dropped = (ROOT / "scripts" / "gpu" / "bundle-drop.txt").read_text().splitlines()
    assert {canonicalize_name(n) for n in excluded} <= {canonicalize_name(n) for n in dropped}
    probe = ("import sys, ray, jsonschema\n"
             "checker = jsonschema.Draft7Validator.FORMAT_CHECKER\n"
             "print('rfc3987_syntax' in sys.modules, 'iri' in checker.checkers,\n"
             "      jsonschema.Draft7Validator({'format': 'ipv4'}, format_checker=checker)"
             ".is_valid('1.2.3.999'))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False", "False"]


def test_a_python_the_lock_is_not_made_for_is_refused_in_one_line(tmp_path):
    """3.11 and 3.12 pass the check (requirements/cpu.lock is resolved for both); any other is
    refused before anything is made. No other Python is on this machine: an interpreter that
    reports 3.13 stands in for one (this Python, with ``sys.version_info`` set)."""
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "install.sh").write_text(SCRIPT.read_text())
    for version in ((3, 13, 0), (3, 10, 14)):
        fake = tmp_path / f"python{version[0]}.{version[1]}"
        fake.write_text(
            "#!/bin/sh\nexec " + sys.executable + " -c \"import sys; "
            f"sys.version_info = {version + ('final', 0)!r}; "
            f"sys.version = '{'.'.join(map(str, version))}'; exec(sys.stdin.read())\" \"$@\"\n")
        fake.chmod(0o755)
        done = subprocess.run(["bash", str(tmp_path / "scripts" / "install.sh")],
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHON": str(fake)})
        assert done.returncode == 1
        assert done.stderr.splitlines() == [
            f"error: mathagent's lock file is made for Python 3.11 and 3.12; this is "
            f"{'.'.join(map(str, version))}. Set PYTHON=python3.12 (or python3.11)."]
        assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["scripts"]


def test_the_cpu_lock_pins_one_version_of_each_package_on_311_and_312():
    """One lock for both Pythons (uv's universal resolution): on Linux x86_64 each package
    has exactly one line whose marker holds, the stack the tests run (3.11) is the one 3.12
    gets where the lock does not need another, and none of torch's CUDA-only wheels is listed
    (torch is installed first, on its own)."""
    lines = [ln.split("#", 1)[0].strip() for ln in
             (ROOT / "requirements" / "cpu.lock").read_text().splitlines()]
    reqs = [Requirement(ln) for ln in lines if ln]
    chosen = {}
    for python in ("3.11.7", "3.12.3"):
        env = {"python_version": python[:4], "python_full_version": python,
               "sys_platform": "linux", "platform_system": "Linux",
               "platform_machine": "x86_64", "os_name": "posix",
               "implementation_name": "cpython", "platform_python_implementation": "CPython"}
        held = [r for r in reqs if r.marker is None or r.marker.evaluate(env)]
        names = Counter(canonicalize_name(r.name) for r in held)
        assert [n for n, k in names.items() if k > 1] == [], python
        chosen[python] = {canonicalize_name(r.name): str(r.specifier) for r in held}
        assert chosen[python]["torch"] == "==2.13.0"
        assert not [n for n in names if n.startswith(("nvidia-cu", "nvidia-nccl")) or
                    n == "triton"], python
    assert any(r.marker is not None and "python_full_version" in str(r.marker) for r in reqs)
    same = {n for n in chosen["3.11.7"] if chosen["3.12.3"].get(n) == chosen["3.11.7"][n]}
    assert {"trinity-rft", "agentscope", "verl", "ray", "torch", "transformers"} <= same
    # the 3.11 pins are what this environment runs
    for name in ("trinity-rft", "agentscope", "transformers", "numpy", "pandas"):
        assert chosen["3.11.7"][name] == f"=={importlib.metadata.version(name)}", name

"""The project's own conventions: pinned installs, notebook hygiene, the CLI surface."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from packaging.requirements import Requirement

from mathagent import cli, paths

ROOT = paths.REPO_ROOT
NOTEBOOKS = sorted(paths.NOTEBOOKS_DIR.glob("*.ipynb"))


def _requirements(path):
    reqs = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            req = Requirement(line)
            reqs[req.name.lower().replace("_", "-")] = req
    return reqs


def _code_cells(path):
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


def test_top_level_layout():
    for name in ["notebooks", "mathagent", "data", "configs", "tests", "benchmarks",
                 "environment.yml", "README.md", "pyproject.toml", ".ci/run", ".gitignore"]:
        assert (ROOT / name).exists(), f"missing top-level {name}"
    # what git must never pick up; `.venv` also as a link (a second checkout sharing this one's
    # environment), which a `.venv/` pattern would not cover
    # (the pattern `.venv` covers the folder and all below it; git refuses to look below a link)
    for path in ["runs/a", "checkpoints/a", "notebooks/.ipynb_checkpoints/a", ".venv",
                 "data/arithmetic_qwen/.write.lock"]:
        ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT)
        assert ignored.returncode == 0, f".gitignore does not cover {path}"


def test_lock_pins_every_package_exactly_and_satisfies_the_top_level_file():
    lock = _requirements(ROOT / "requirements/cpu.lock")
    assert len(lock) > 100, "the lock should hold the full resolved set"
    loose = [name for name, req in lock.items()
             if len(req.specifier) != 1 or next(iter(req.specifier)).operator != "=="]
    assert not loose, f"lock entries without an exact pin: {loose}"
    for name, req in _requirements(ROOT / "requirements/cpu.in").items():
        assert name in lock, f"{name} from cpu.in is missing from cpu.lock"
        pinned = next(iter(lock[name].specifier)).version
        assert req.specifier.contains(pinned, prereleases=True), (
            f"cpu.lock pins {name}=={pinned}, outside cpu.in's {req.specifier}")


def test_gpu_lock_satisfies_its_top_level_file_and_trinitys_vllm_range():
    lock = _requirements(ROOT / "requirements/gpu.lock")
    for name, req in _requirements(ROOT / "requirements/gpu.in").items():
        assert name in lock, f"{name} from gpu.in is missing from gpu.lock"
        pinned = next(iter(lock[name].specifier)).version
        assert req.specifier.contains(pinned, prereleases=True), (
            f"gpu.lock pins {name}=={pinned}, outside gpu.in's {req.specifier}")
    vllm = next(iter(lock["vllm"].specifier)).version
    # trinity-rft 0.6.0's vllm extra accepts >=0.19.1,<=0.23.0
    assert Requirement("vllm>=0.19.1,<=0.23.0").specifier.contains(vllm)


def test_environment_yml_installs_the_lock_and_the_package():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    deps = env["dependencies"]
    assert "python=3.11" in deps
    pip_section = next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)
    assert "-r requirements/cpu.lock" in pip_section
    assert "-e ." in pip_section
    lock = _requirements(ROOT / "requirements/cpu.lock")
    for line in pip_section:
        if not line.startswith("-"):
            req = Requirement(line)
            assert str(lock[req.name].specifier) == str(req.specifier), line


def test_the_tutorial_notebooks_are_numbered_in_order():
    numbers = [nb.name[:2] for nb in NOTEBOOKS]
    assert numbers == [f"{i:02d}" for i in range(1, len(NOTEBOOKS) + 1)], numbers
    assert len(NOTEBOOKS) >= 5


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stripped_and_thin(nb):
    cells = _code_cells(nb)
    for i, cell in enumerate(cells):
        assert not cell.get("outputs"), f"{nb.name}: code cell {i} has committed outputs"
        assert cell.get("execution_count") is None, f"{nb.name}: code cell {i} has an execution count"
        src = "".join(cell["source"])
        assert "pip install" not in src, f"{nb.name}: code cell {i} installs packages"
        assert "../" not in src, f"{nb.name}: code cell {i} uses a relative path; use mathagent.paths"
        assert not any(ln.startswith(("def ", "class ")) for ln in src.splitlines()), (
            f"{nb.name}: code cell {i} defines a function or class; it belongs in mathagent")
    first = cells[0]
    assert "parameters" in first.get("metadata", {}).get("tags", []), (
        f"{nb.name}: the first code cell must be tagged 'parameters'")
    assert "SMOKE" in "".join(first["source"]), f"{nb.name}: the parameters cell must set SMOKE"


def test_cli_lists_every_command():
    out = subprocess.run([sys.executable, "-m", "mathagent", "--help"],
                         capture_output=True, text=True, check=True).stdout
    for name in cli.COMMANDS:
        assert name in out


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_every_command_has_help(command):
    proc = subprocess.run([sys.executable, "-m", "mathagent", command, "--help"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert f"usage: python -m mathagent {command}" in proc.stdout


def test_unknown_command_is_rejected():
    proc = subprocess.run([sys.executable, "-m", "mathagent", "no-such-command"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "invalid choice" in proc.stderr


def test_notebook_04_gives_a_trinity_run_the_time_it_needs():
    """nbmake stops a cell after 300 s unless the notebook says otherwise; notebook 04's smoke
    cell is a real Trinity-RFT run on a GPU (about 8 minutes on an H200, 7 of them start-up;
    the 300 s default stopped it there), and the tutorial runner allows 30 minutes a cell."""
    import inspect
    import json

    from mathagent import tutorial

    nb = json.loads((paths.NOTEBOOKS_DIR / "04_training_launch.ipynb").read_text())
    runner = inspect.signature(tutorial.run_notebook).parameters["timeout"].default
    assert nb["metadata"]["execution"]["timeout"] == runner >= 1800

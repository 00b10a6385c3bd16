"""Imports run one way (the import-linter contracts in pyproject.toml), and the check bites.

The second test breaks a contract in a copy of the package and expects the linter to name it,
so a configuration that silently checks nothing would fail here.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from bounds import hang_bound

from mathagent import paths

LINT = str(Path(sys.executable).with_name("lint-imports"))


def lint(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([LINT, "--no-cache"], cwd=cwd, capture_output=True, text=True,
                          timeout=hang_bound(300))


def test_the_package_keeps_its_import_contracts():
    done = lint(paths.REPO_ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 kept, 0 broken" in done.stdout


def test_a_results_module_importing_the_trainer_breaks_them(tmp_path):
    shutil.copy(paths.REPO_ROOT / "pyproject.toml", tmp_path)
    shutil.copytree(paths.REPO_ROOT / "mathagent", tmp_path / "mathagent",
                    ignore=shutil.ignore_patterns("__pycache__"))
    with open(tmp_path / "mathagent" / "results.py", "a") as f:
        f.write("\n\ndef _sneaky():\n    from mathagent import grpo  # noqa: F401\n")
    done = lint(tmp_path)
    assert done.returncode == 1, done.stdout
    assert "BROKEN" in done.stdout and "mathagent.results -> mathagent.grpo" in done.stdout


def test_no_module_is_over_600_lines():
    lines = {str(p.relative_to(paths.REPO_ROOT)): len(p.read_text().splitlines())
             for p in sorted((paths.REPO_ROOT / "mathagent").rglob("*.py"))}
    assert {name: n for name, n in lines.items() if n > 600} == {}

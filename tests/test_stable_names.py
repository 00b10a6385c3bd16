"""Every dotted ``mathagent.`` name that configs, the READMEs, docs/ and the notebooks give users
resolves.

Configs hand Trinity-RFT dotted paths (``mathagent.selectors.BOTSSelector``, the feedback
operator, the workflow and the judge), and the docs tell readers where things live; a package
reorganisation must keep each of them working, or move it everywhere at once.
"""

from __future__ import annotations

import importlib
import re

import pytest

from mathagent import paths

NAME = re.compile(r"\bmathagent(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


def _sources() -> dict[str, str]:
    root = paths.REPO_ROOT
    files = [*sorted(paths.CONFIGS_DIR.glob("*.yaml")), root / "README.md",
             *sorted((root / "notebooks").glob("*.ipynb")), root / "scripts" / "gpu" / "README.md",
             *sorted((root / "docs").glob("*.md")), *sorted((root / "data").glob("**/README.md")),
             *sorted((root / "results").glob("**/README.md"))]
    return {str(f.relative_to(paths.REPO_ROOT)): f.read_text() for f in files}


def _names() -> list[tuple[str, str]]:
    found = {(source, m.group(0)) for source, text in _sources().items()
             for m in NAME.finditer(text)}
    return sorted(found)


def _resolve(dotted: str) -> object:
    """The object a dotted name means: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


def test_the_user_facing_paths_are_among_those_checked():
    names = {name for _, name in _names()}
    for path in ("mathagent.selectors.BOTSSelector", "mathagent.agent.run_react_agent",
                 "mathagent.judge.gsm8k_judge"):
        assert path in names


@pytest.mark.parametrize(("source", "dotted"), _names())
def test_dotted_name_resolves(source, dotted):
    try:
        _resolve(dotted)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"{source} names {dotted}, which does not resolve: {exc}")

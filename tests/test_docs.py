"""The reference pages list what the package has: ``docs/layers.md``'s tables hold every module
of every package and every layer of the import-linter contract, in its order, and
``docs/commands.md`` has a row for every command and every variable the package reads.

A module, command or variable added without its row fails here, naming it.
"""

from __future__ import annotations

import re
import tomllib

from mathagent import cli, paths

DOCS = paths.REPO_ROOT / "docs"
PACKAGE = paths.REPO_ROOT / "mathagent"


def table(text: str, header: str) -> list[tuple[str, str]]:
    """The rows (first cell, second cell) of every two-column table whose header is ``header``."""
    rows = []
    for start in (m.start() for m in re.finditer(re.escape(header), text)):
        for line in text[start:].splitlines()[2:]:
            if not line.startswith("|"):
                break
            first, second = (cell.strip() for cell in line.strip().strip("|").split("|"))
            rows.append((first, second))
    assert rows, f"no table headed {header!r}"
    return rows


def names(cell: str) -> set[str]:
    """The module names of a cell written as "`a` (what a does), `b`, ...": every item between
    commas, once the parenthesised remarks are gone, is one name in backquotes."""
    bare = cell
    while (shorter := re.sub(r"\([^()]*\)", "", bare)) != bare:
        bare = shorter
    found = set()
    for item in (part.strip() for part in bare.split(",")):
        match = re.fullmatch(r"`(\w+)`", item)
        assert match, f"docs/layers.md: {item!r} in {cell!r} is not one `module` name"
        found.add(match.group(1))
    return found


def modules_of(folder) -> set[str]:
    return {p.stem for p in folder.glob("*.py") if p.stem not in ("__init__", "__main__")}


def packages() -> dict[str, set[str]]:
    return {p.parent.name: modules_of(p.parent) for p in PACKAGE.glob("*/__init__.py")}


def contract_layers() -> list[set[str]]:
    config = tomllib.loads((paths.REPO_ROOT / "pyproject.toml").read_text())
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    return [{name.strip().removeprefix("mathagent.") for name in layer.split("|")}
            for layer in contract["layers"]]


def test_every_package_has_a_row_listing_each_of_its_modules():
    rows = table((DOCS / "layers.md").read_text(), "| package | its modules |")
    documented = {first.strip("`"): names(second) for first, second in rows}
    assert documented.keys() == packages().keys(), "packages with no row, or rows with no package"
    for package, modules in packages().items():
        assert documented[package] == modules, (
            f"docs/layers.md, package {package}: missing {sorted(modules - documented[package])}, "
            f"no such module {sorted(documented[package] - modules)}")


def test_the_layer_table_is_the_contract_and_covers_every_module():
    rows = table((DOCS / "layers.md").read_text(), "| layer | modules |")
    *layered, (last_label, outside) = [(label, names(cell)) for label, cell in rows]
    assert last_label == "outside the layers"
    assert [cell for _, cell in layered] == contract_layers(), (
        "docs/layers.md's layer rows differ from pyproject.toml's layers contract")
    top_level = modules_of(PACKAGE) | packages().keys()
    documented = set().union(outside, *(cell for _, cell in layered))
    assert documented == top_level, (f"docs/layers.md: missing {sorted(top_level - documented)}, "
                                     f"no such module {sorted(documented - top_level)}")
    assert not outside & set().union(*contract_layers())


def test_every_command_has_a_row():
    rows = table((DOCS / "commands.md").read_text(), "| command | does |")
    assert [first.strip("`") for first, _ in rows] == list(cli.COMMANDS)


# Set by the package itself for the processes it starts (the tutorial's kernels, an
# experiment's runs), not by a user.
SET_BY_THE_PACKAGE = {"MATHAGENT_RUN_DIR", "MATHAGENT_RUN_LABEL"}


def test_every_variable_the_package_reads_has_a_row():
    rows = table((DOCS / "commands.md").read_text(), "| variable | meaning |")
    documented = {first.strip("`") for first, _ in rows}
    read = {m for p in PACKAGE.rglob("*.py")
            for m in re.findall(r"\"(MATHAGENT_[A-Z0-9_]+)\"", p.read_text())}
    assert read - SET_BY_THE_PACKAGE - documented == set()


def test_every_documented_variable_is_read_somewhere():
    """A row of commands.md names a variable the package, its tests or its configs read (a
    quoted name in Python, ``${oc.env:NAME}`` in a config): no row outlives its variable."""
    rows = table((DOCS / "commands.md").read_text(), "| variable | meaning |")
    documented = {first.strip("`") for first, _ in rows}
    root = PACKAGE.parent
    sources = [*PACKAGE.rglob("*.py"), *(root / "tests").rglob("*.py")]
    read = {m for p in sources for m in re.findall(r"[\"']([A-Z][A-Z0-9_]+)[\"']", p.read_text())}
    read |= {m for p in (root / "configs").glob("*.yaml")
             for m in re.findall(r"oc\.env:([A-Z][A-Z0-9_]+)", p.read_text())}
    assert documented - read == set()

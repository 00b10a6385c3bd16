"""Imports inside mathagent.launch run one way: no module imports, even for typing only, a module
that imports it back (grimp's graph, ``TYPE_CHECKING`` imports included).

The second test adds one back-import to the real graph and expects the cycle to be named, so a
check that silently finds nothing would fail here.
"""

from __future__ import annotations

import grimp

PACKAGE = "mathagent.launch"


def build() -> grimp.ImportGraph:
    return grimp.build_graph("mathagent", cache_dir=None)


def launch_edges(graph: grimp.ImportGraph) -> dict[str, set[str]]:
    """Each mathagent.launch module (the package itself included) -> the ones it imports."""
    mods = {m for m in graph.modules if m == PACKAGE or m.startswith(PACKAGE + ".")}
    return {m: {i for i in graph.find_modules_directly_imported_by(m) if i in mods}
            for m in mods}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while (w := stack.pop()) != v:
                comp.append(w)
            comp.append(v)
            if len(comp) > 1 or v in edges[v]:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(found)


def test_launch_modules_import_one_way():
    edges = launch_edges(build())
    assert f"{PACKAGE}.preflight" in edges and f"{PACKAGE}.checks" in edges
    assert cycles(edges) == []
    # the checks fill a Preflight, which imports none of them
    for module in ("attention", "data_checks", "machine_checks", "checks"):
        assert f"{PACKAGE}.preflight" in edges[f"{PACKAGE}.{module}"]
    assert edges[f"{PACKAGE}.preflight"] == set()


def test_a_back_import_is_named_as_a_cycle():
    graph = build()
    graph.add_import(importer=f"{PACKAGE}.preflight", imported=f"{PACKAGE}.checks")
    found = cycles(launch_edges(graph))
    assert len(found) == 1
    assert {f"{PACKAGE}.preflight", f"{PACKAGE}.checks"} <= set(found[0])

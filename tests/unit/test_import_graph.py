"""No import cycles inside solforge/.

The graph is built from the source with ast, not by importing: every `import` and `from ... import`
counts, at module level and inside functions alike (a function-level import is still a dependency;
it only moves the failure to run time). An edge goes to the module named, or to the submodule when
`from package import name` names one. A package's own `__init__` is not added as an implicit
dependency of its submodules (Python runs it first, but it is only a re-export list here)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "solforge"


def _modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for f in PKG.rglob("*.py"):
        parts = list(f.relative_to(PKG.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        out[".".join(parts)] = (f, is_pkg)
    return out


def _targets(mod: str, is_pkg: bool, node, mods) -> list[str]:
    names = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = mod.split(".") if is_pkg else mod.split(".")[:-1]
            base = base[:len(base) - (node.level - 1)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        for a in node.names:
            sub = f"{prefix}.{a.name}"
            names.append(sub if sub in mods else prefix)
    out = []
    for t in names:
        while t and t not in mods:  # solforge.x.y.Name -> solforge.x.y; outside packages drop out
            t = t.rpartition(".")[0]
        if t and t != mod:
            out.append(t)
    return out


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, (f, is_pkg) in mods.items():
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[m].update(_targets(m, is_pkg, node, mods))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_the_graph_sees_function_level_imports():
    g = import_graph()
    # solforge.roofline.count imports these at module level, solforge.cli.optimize's run() imports
    # solforge.orchestrate.setup inside the function: both must be edges
    assert {"solforge.roofline.analytic", "solforge.roofline.fit"} <= g["solforge.roofline.count"]
    assert "solforge.orchestrate.setup" in g["solforge.cli.optimize"]


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    found = cycles(import_graph())
    g = import_graph()
    detail = "\n".join(" <-> ".join(c) + "\n    " + "; ".join(
        f"{m} -> {sorted(g[m] & set(c))}" for m in c) for c in found)
    assert not found, f"import cycles in solforge/:\n{detail}"


def test_the_bare_box_parts_import_nothing_above_them():
    """problem/, compile/, evaluate/ and candidate.py run on a bare GPU box: they never import the
    store, the agents, the orchestrator, the CLI or the report (evaluate/api.py included)."""
    above = ("solforge.store", "solforge.agents", "solforge.orchestrate", "solforge.cli",
             "solforge.report")
    g = import_graph()
    bad = {m: sorted(t for t in g[m] if t.startswith(above)) for m in g
           if m.startswith(("solforge.problem", "solforge.compile", "solforge.evaluate"))
           or m == "solforge.candidate"}
    assert not {m: t for m, t in bad.items() if t}
    assert "solforge.evaluate.job" in g["solforge.evaluate.api"]  # the graph sees api's imports

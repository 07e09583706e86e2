"""The import graph of the three packages, read from the source (ast): no cycles, and measure/
and costmodel/ never import autosched.

Every import statement counts, at module level or inside a function. Imports under
`if TYPE_CHECKING:` never run, but a cycle they close is still two modules that need each other:
the graph counts them too, and no cycle may be closed that way either. `from pkg import name`
is an edge to `pkg.name` when that is a module, else to `pkg`; a module is not considered to
import its parent packages.
"""

from __future__ import annotations

import ast
import functools
import pathlib

import networkx as nx

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("autosched", "costmodel", "measure")
INDEPENDENT = ("costmodel", "measure")


def module_name(path: pathlib.Path, root: pathlib.Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules() -> dict[str, pathlib.Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skipped


def _resolve(name: str, modules: dict) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(
    name: str, path: pathlib.Path, modules: dict, type_checking: bool = False
) -> set[str]:
    """The project modules that `name` imports (and every top-level package name it imports);
    with `type_checking`, the imports under `if TYPE_CHECKING:` too."""
    tree = ast.parse(path.read_text(), str(path))
    skipped = set() if type_checking else _type_checking_nodes(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                out.add(_resolve(alias.name, modules) or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
            out.update(subs)
            if len(subs) < len(node.names):
                out.add(_resolve(target, modules) or target.split(".")[0])
    out.discard(name)
    return out


@functools.cache  # read once per session; no test changes the graph
def import_graph(type_checking: bool = False) -> nx.DiGraph:
    modules = source_modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        graph.add_edges_from((name, t) for t in imports_of(name, path, modules, type_checking))
    return graph


def cycles_of(graph: nx.DiGraph) -> list[frozenset[str]]:
    """The modules of each import cycle (strongly connected component of two or more)."""
    return [frozenset(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]


def test_the_graph_is_read_from_every_module():
    graph = import_graph()
    assert "autosched.schedule.loop_state" in graph
    assert "autosched.schedule.steps" in graph.successors("autosched.schedule.loop_state")


def test_no_import_cycles():
    cycles = [sorted(c) for c in cycles_of(import_graph())]
    assert not cycles, f"import cycles: {cycles}"


def test_no_import_cycles_counting_type_checking_imports():
    cycles = [sorted(c) for c in cycles_of(import_graph(type_checking=True))]
    assert not cycles, f"import cycles (TYPE_CHECKING imports counted): {cycles}"


def test_measure_and_costmodel_do_not_import_autosched():
    graph = import_graph()
    offenders = {
        (m, t)
        for m in graph
        if m.split(".")[0] in INDEPENDENT
        for t in graph.successors(m)
        if t.split(".")[0] == "autosched"
    }
    assert not offenders, f"measure/costmodel must not import autosched: {sorted(offenders)}"


def test_the_checker_sees_a_cycle_inside_a_function(tmp_path):
    """The checker itself: a cycle closed by a function-level import is found."""
    pkg = tmp_path / "autosched"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from autosched import b\n")
    (pkg / "b.py").write_text("def f():\n    from autosched.a import x\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import autosched.a\n"
    )
    modules = {module_name(p, tmp_path): p for p in sorted(pkg.rglob("*.py"))}
    graph = nx.DiGraph()
    for name, path in modules.items():
        graph.add_edges_from((name, t) for t in imports_of(name, path, modules))
    cycles = [sorted(c) for c in cycles_of(graph)]
    assert cycles == [["autosched.a", "autosched.b"]]
    assert "autosched.a" not in set(graph.successors("autosched.c"))
    assert "autosched.a" in imports_of("autosched.c", pkg / "c.py", modules, type_checking=True)

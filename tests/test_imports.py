"""The package's import graph, read from its source (every import, at the top of a module or inside a function):
no module takes another's private names, and no modules import each other in a circle (issue 32)."""
import ast
from pathlib import Path

import pytest

import gaescale

SRC = Path(gaescale.__file__).parent


def _module(path: Path) -> str:
    parts = ("gaescale",) + path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """``(module, names)`` of every ``from ... import`` and ``import`` in ``path``, relative ones resolved."""
    me = _module(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            names = [a.name for a in node.names]
            if not node.module:  # from . import x: x is a module
                found += [(f"{target}.{n}", []) for n in names]
            else:
                found.append((target, names))
        elif isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names]
    return [(m, n) for m, n in found if m == "gaescale" or m.startswith("gaescale.")]


def _graph() -> dict[str, set[str]]:
    modules = {_module(p): p for p in SRC.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        graph[name] = {m for m, _ in _imports(path) if m in modules and m != name}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_a_private_name_of_another():
    taken = [(_module(p), m, n) for p in SRC.rglob("*.py") for m, names in _imports(p) for n in names
             if n.startswith("_") and not n.startswith("__")]
    assert taken == []


def test_the_package_imports_form_no_circle():
    # the package's face (gaescale/__init__.py) hands names on and is imported by none of its modules
    graph = {m: {d for d in deps if d != "gaescale"} for m, deps in _graph().items()}
    assert _circles(graph) == []


def test_the_circle_finder_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


DIAGRAM = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
SUBGRAPHS = {"data": "gaescale.data.", "core": "gaescale.", "directed": "gaescale.directed.",
             "training": "gaescale.training.", "parallel": "gaescale.parallel.", "run": "gaescale.run."}


def _drawn() -> tuple[dict[str, str], list[tuple[str, str]]]:
    """docs/architecture.md's module diagram: each node's module (a node is defined as ``id["file.py"]`` inside the
    subgraph of its package) and each arrow ``a --> b``."""
    import re
    text = DIAGRAM.read_text()
    block = text[text.index("```mermaid"):]
    block = block[:block.index("```", 10)]
    nodes, arrows, package = {}, [], None
    for line in block.splitlines():
        if m := re.match(r"\s*subgraph (\w+)", line):
            package = SUBGRAPHS[m.group(1)]
        elif line.strip() == "end":
            package = None
        for node, file in re.findall(r'(\w+)\["([\w.]+)\.py"\]', line):
            nodes[node] = package + file
        for a, b in re.findall(r'(\w+)(?:\["[\w.]+"\])?\s*-->\s*(\w+)', line):
            arrows.append((a, b))
    return nodes, arrows


def test_every_arrow_of_the_architecture_diagram_is_an_import():
    if not DIAGRAM.is_file():
        pytest.skip(f"{DIAGRAM} not found (an installed package without its docs)")
    nodes, arrows = _drawn()
    graph = _graph()
    assert len(arrows) > 50 and set(nodes.values()) <= set(graph)
    assert [(nodes[a], nodes[b]) for a, b in arrows if nodes[b] not in graph[nodes[a]]] == []


def test_a_name_that_moved_is_found_at_its_old_place_with_a_warning():
    import importlib

    from gaescale._moved import MOVED_NAMES
    for module, names in MOVED_NAMES.items():
        for name, target in names.items():
            place, _, attr = target.rpartition(".")
            with pytest.warns(DeprecationWarning, match=f"{module}.{name} moved: use {target}"):
                assert getattr(importlib.import_module(module), name) is getattr(importlib.import_module(place), attr)
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        missing = "nothing"
        getattr(importlib.import_module("gaescale.run.rundir"), missing)

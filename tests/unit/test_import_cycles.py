"""No import cycle in ``contextual_kb``: every import of a ``contextual_kb`` module counts, at the top of a
module, inside a function, or under ``TYPE_CHECKING`` (a type-only import still ties the two modules: one
cannot be read, moved or tested without the other)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "lambda" / "contextual_kb"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The package's modules ``path`` imports, wherever the import is; ``from a import b`` is ``a.b`` when
    that is a module, else ``a``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                whole = f"{node.module}.{alias.name}"
                found.add(whole if whole in modules else node.module)
    return {name for name in found if name in modules} - {module_name(path)}


def graph() -> dict[str, set[str]]:
    paths = list(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): imports_of(p, modules) for p in paths}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_type_only_cycle(tmp_path: Path) -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    source = tmp_path / "contextual_kb" / "x.py"
    source.parent.mkdir()
    source.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from contextual_kb.y import Y\n"
        "def f():\n    from contextual_kb import z\n"
    )
    found = ast.walk(ast.parse(source.read_text()))
    names = {n.module for n in found if isinstance(n, ast.ImportFrom)}
    assert names == {"typing", "contextual_kb.y", "contextual_kb"}


def test_no_import_cycle_in_the_package() -> None:
    """The whole package: the deferred path (contextualize and shards), the CDK constructs (nag and the
    constructs, monitoring and the ingestion logs, the settings and the workflow) and the command line (its
    entry and the extras check) each had one, type-only and lazy imports included."""
    edges = graph()
    assert "contextual_kb.deferred.contextualize" in edges and edges["contextual_kb.deferred.workflow"]
    assert cycles(edges) == []

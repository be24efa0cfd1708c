"""No import circles among llmq's modules: a module never needs, even lazily, one that
needs it back. Imports inside functions count (a lazy import hides a circle, it does
not remove it); imports under ``if TYPE_CHECKING`` do not (they never run)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.unit.test_layers import imported_modules, module_name, source_files


def _type_checking_lines(path: Path) -> set[int]:
    """Lines of the imports that only a type checker runs."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            lines |= {child.lineno for child in ast.walk(node) if hasattr(child, "lineno")}
    return lines


def import_graph() -> dict[str, set[str]]:
    """Each module of ours, and the modules of ours it imports."""
    paths = {module_name(path): path for path in source_files()}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        skipped = _type_checking_lines(path)
        targets: set[str] = set()
        for line, imported in imported_modules(path):
            module = imported
            while module and module not in paths:  # a name imported from a module
                module = module.rpartition(".")[0]
            if module and module != name and line not in skipped:
                targets.add(module)
        graph[name] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group: list[str] = []
            while not group or group[-1] != node:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_finder_sees_a_circle_through_a_lazy_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_ours_is_in_an_import_circle() -> None:
    graph = import_graph()
    assert len(graph) > 100  # every package was read
    assert circles(graph) == []

"""envs/sandbox's modules import one another without a cycle (read from the source with ast).

Every import counts, a function's too (a lazy import that closes a circle is still a circle);
only `if TYPE_CHECKING:` blocks are left out, since they never run.
"""
from __future__ import annotations

import ast

from tests.cli import REPO

PKG = "envs.sandbox"
ROOT = REPO / "envs" / "sandbox"


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of `tree` outside `if TYPE_CHECKING:` bodies."""
    out: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                todo.extend(child.orelse)
            else:
                todo.append(child)
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the envs.sandbox modules it imports ("envs.sandbox" is the package's __init__)."""
    modules = {p.stem for p in ROOT.glob("*.py") if p.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for path in ROOT.glob("*.py"):
        me = PKG if path.stem == "__init__" else f"{PKG}.{path.stem}"
        deps: set[str] = set()
        for node in _runtime_nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith(PKG)}
            elif isinstance(node, ast.ImportFrom) and node.module == PKG:
                deps |= {f"{PKG}.{a.name}" if a.name in modules else PKG for a in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PKG + "."):
                deps.add(node.module)
        graph[me] = deps - {me}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of `graph` as a path that ends where it starts, or [] if there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        state[node] = 2
        path.pop()
        return []

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return []


def test_cycle_finder_sees_a_lazy_import_cycle():
    tree = ast.parse("def f():\n    from envs.sandbox.a import x\n")
    assert any(isinstance(n, ast.ImportFrom) for n in _runtime_nodes(tree))
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []


def test_sandbox_modules_import_without_a_cycle():
    graph = import_graph()
    assert f"{PKG}.container" in graph[f"{PKG}.sweeper"]  # the graph is read, not empty
    assert find_cycle(graph) == [], " -> ".join(find_cycle(graph))

"""The kit's import graph, read from its source (every import, those inside functions too; imports made only
for type checkers left out), and the layer rule it must follow (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Folder -> the package it is (setup.py maps the folders beside eppkit/ into it).
FOLDERS = {"eppkit": "eppkit", "services": "eppkit.services", "observability": "eppkit.observability"}


def modules() -> dict[str, Path]:
    """Every module of the distribution: its dotted name -> its file."""
    found = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def _type_checking_only(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The kit's modules that module ``name`` imports (``from a import b`` counts b when b is a module)."""
    tree = ast.parse(path.read_text(), str(path))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)) or _type_checking_only(node, parents):
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for target in targets:
            while target and target not in known:  # a name inside a module: the module
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports(name, path, set(found)) for name, path in found.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import circles (strongly connected groups of more than one module), Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def layer_of(module: str, layers: list[list[str]]) -> int | None:
    """The index of the layer (top first) whose package holds ``module``; None for the root package."""
    best: tuple[int, int] | None = None
    for i, layer in enumerate(layers):
        for package in layer:
            if module == package or module.startswith(package + "."):
                if best is None or len(package) > best[1]:
                    best = (i, len(package))
    return best[0] if best else None

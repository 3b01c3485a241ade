"""Which module of the program imports which: the import graph of `components/` and `tools/`
(and `__main__.py`), read from the source with `ast`, drawn with Graphviz.

    python -m tools.import_graph                  # DOT on stdout
    python -m tools.import_graph --out build/imports   # imports.dot, .svg and .png there
    python -m tools.import_graph --cycles         # the import cycles, if any (exit 1)

Nodes are modules, grouped by package, labelled with their line count; a -> b: a imports b,
when loaded (solid), inside a function (dashed) or for type checking only (dotted). A cycle is
one through solid and dashed edges: both run. The output is deterministic (sorted, no
timestamps), so two revisions compare with `diff`.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tools import graph_picture

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("components", "tools")
EAGER, DEFERRED, TYPING = "eager", "deferred", "typing"


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    lines: int

    @property
    def package(self) -> str:
        return self.name if self.path.name == "__init__.py" else self.name.rpartition(".")[0]


def modules(root: Path = ROOT) -> dict[str, Module]:
    """Dotted name -> Module for every .py file of the packages, and `__main__`."""
    paths = [p for package in PACKAGES for p in sorted((root / package).rglob("*.py"))]
    if (root / "__main__.py").is_file():
        paths.append(root / "__main__.py")
    found = {}
    for path in paths:
        if path.name == "__init__.py" and not _has_code(path):
            continue
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = Module(name, path, len(path.read_text(encoding="utf-8").splitlines()))
    return found


def _has_code(path: Path) -> bool:
    """More than a docstring: a package's `__init__` is drawn only when it holds something."""
    body = ast.parse(path.read_text(encoding="utf-8")).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return bool(body)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.Module) -> Iterable[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import statement with how it runs: at load time, or deferred."""

    def visit(node: ast.AST, kind: str) -> Iterable[tuple[ast.Import | ast.ImportFrom, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, kind
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                yield from visit(child, DEFERRED)
            elif isinstance(child, ast.If) and _is_type_checking(child):
                for stmt in child.body:
                    yield from visit(ast.Module(body=[stmt], type_ignores=[]), TYPING)
                for stmt in child.orelse:
                    yield from visit(ast.Module(body=[stmt], type_ignores=[]), kind)
            else:
                yield from visit(child, kind)

    yield from visit(tree, EAGER)


def _targets(node: ast.Import | ast.ImportFrom, module: Module, known: set[str]) -> set[str]:
    """The program's modules one import statement loads."""
    if isinstance(node, ast.Import):
        candidates = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            anchor = module.package.split(".")
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, *([base] if base else [])])
        # `from package import module` loads the module; `from module import name` the module.
        candidates = [f"{base}.{alias.name}" for alias in node.names] + [base]
    found = set()
    for candidate in candidates:
        while candidate and candidate not in known:
            candidate = candidate.rpartition(".")[0]
        if candidate:
            found.add(candidate)
    return found


_RANK = {EAGER: 0, DEFERRED: 1, TYPING: 2}


def edges(found: dict[str, Module]) -> dict[tuple[str, str], str]:
    """(importer, imported) -> how the pair's imports run: EAGER when any runs at load time,
    else DEFERRED when any runs in a function, else TYPING."""
    known = set(found)
    result: dict[tuple[str, str], str] = {}
    for module in found.values():
        tree = ast.parse(module.path.read_text(encoding="utf-8"), str(module.path))
        for node, kind in _imports(tree):
            for target in _targets(node, module, known):
                if target == module.name or module.name.startswith(f"{target}."):
                    continue  # a package's own __init__ on the way to a submodule
                pair = (module.name, target)
                if pair not in result or _RANK[kind] < _RANK[result[pair]]:
                    result[pair] = kind
    return result


def cycles(pairs: dict[tuple[str, str], str]) -> list[list[str]]:
    """The import cycles through edges that run (EAGER and DEFERRED), each as its modules in
    sorted order (strongly connected components of more than one module, or a self-import)."""
    graph: dict[str, list[str]] = {}
    for (importer, imported), kind in sorted(pairs.items()):
        if kind != TYPING:
            graph.setdefault(importer, []).append(imported)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def _quote(text: str) -> str:
    return '"' + text.replace('"', '\\"') + '"'


def to_dot(found: dict[str, Module], pairs: dict[tuple[str, str], str]) -> str:
    lines = [
        "digraph imports {",
        "  rankdir=LR;",
        '  node [shape=box, style="rounded,filled", fillcolor="#f5f5f5", fontname="Helvetica"];',
        '  edge [color="#555555"];',
    ]
    packages = sorted({m.package for m in found.values()})
    for index, package in enumerate(packages):
        members = sorted((m for m in found.values() if m.package == package), key=lambda m: m.name)
        lines.append(f"  subgraph cluster_{index} {{")
        lines.append(f'    label={_quote(package or "(top)")}; style=rounded; color="#4a7bb7";')
        for module in members:
            label = f"{module.name.rpartition('.')[2] or module.name}\\n{module.lines} lines"
            lines.append(f"    {_quote(module.name)} [label={_quote(label)}];")
        lines.append("  }")
    for (importer, imported), kind in sorted(pairs.items()):
        style = {EAGER: "", DEFERRED: " [style=dashed]", TYPING: " [style=dotted]"}[kind]
        lines.append(f"  {_quote(importer)} -> {_quote(imported)}{style};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.import_graph", description=__doc__)
    parser.add_argument("--out", type=Path, help="write imports.dot (and .svg, .png) here")
    parser.add_argument("--root", type=Path, default=ROOT, help="a checkout of the project")
    parser.add_argument("--cycles", action="store_true", help="print the import cycles")
    args = parser.parse_args(argv)
    found = modules(args.root)
    if args.cycles:
        loops = cycles(edges(found))
        for loop in loops:
            print("cycle: " + " <-> ".join(loop))
        print(f"{len(loops)} import cycle(s) among {len(found)} modules")
        return 1 if loops else 0
    dot_text = to_dot(found, edges(found))
    if args.out is None:
        sys.stdout.write(dot_text)
        return 0
    picture = graph_picture.render(dot_text, args.out, stem="imports")
    for path in picture.paths.values():
        print(path)
    if picture.notice:
        print(picture.notice, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

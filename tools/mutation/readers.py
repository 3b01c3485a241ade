"""The tests that can see a mutant on a line that runs only at import time.

Coverage gives such a line no test context, so without more its mutant would run against every
test file of its module (the whole suite for most of components/). A constant, a class attribute
or a decorator is seen only where code reads it: for a module-level name, the lines that use the
name as a word (and the test files that name it themselves); for an attribute in a class body,
the lines that read `.name`. The tests that execute those lines are the ones that can catch the
mutant; when nothing executes a reader, the caller falls back to the file-level map.

Why: docs/decisions/022-mutation-tests-run-only-the-tests-that-can-see-a-mutant.md
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

READER_SOURCES = ("components/**/*.py", "policies/**/*.py", "__main__.py")


@dataclass(frozen=True)
class Names:
    """What a statement defines: module-level names, and attributes read as `.name`."""

    module: tuple[str, ...] = ()
    attributes: tuple[str, ...] = ()
    lines: tuple[int, int] = (0, 0)  # the statement's own lines, not readers of itself


def _targets(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.Assign):
        return [n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    if isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    return []


def _span(node: ast.stmt) -> tuple[int, int]:
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return first, node.end_lineno or node.lineno


def defined_at(text: str, line: int) -> Names:
    """The names the top-level statement holding `line` defines (for a class, also the
    attribute or method defined at that line of its body)."""
    for node in ast.parse(text).body:
        first, last = _span(node)
        if not first <= line <= last:
            continue
        module = _targets(node)
        attributes: list[str] = []
        if isinstance(node, ast.ClassDef):
            for inner in node.body:
                inner_first, inner_last = _span(inner)
                if inner_first <= line <= inner_last:
                    attributes = _targets(inner)
                    return Names(tuple(module), tuple(attributes), (inner_first, inner_last))
        return Names(tuple(module), tuple(attributes), (first, last))
    return Names()


@functools.cache
def _source_lines(root: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for pattern in READER_SOURCES:
        for path in root.glob(pattern):
            if path.is_file():
                found[path.relative_to(root).as_posix()] = path.read_text(
                    encoding="utf-8"
                ).splitlines()
    return found


def reader_lines(root: Path, source: str, names: Names) -> dict[str, list[int]]:
    """{file: [line numbers]} of the lines that use `names` (outside their own statement)."""
    patterns = [re.compile(rf"\b{re.escape(n)}\b") for n in names.module]
    patterns += [re.compile(rf"\.{re.escape(n)}\b") for n in names.attributes]
    if not patterns:
        return {}
    found: dict[str, list[int]] = {}
    for relative, lines in _source_lines(root).items():
        for number, text in enumerate(lines, start=1):
            if relative == source and names.lines[0] <= number <= names.lines[1]:
                continue
            code = text.split("#", 1)[0]
            if any(p.search(code) for p in patterns):
                found.setdefault(relative, []).append(number)
    return found


def test_files_naming(root: Path, names: Names) -> list[str]:
    """Test files that use one of the module-level names themselves."""
    patterns = [re.compile(rf"\b{re.escape(n)}\b") for n in names.module]
    if not patterns:
        return []
    return sorted(
        path.relative_to(root).as_posix()
        for path in (root / "tests").glob("test_*.py")
        if any(p.search(path.read_text(encoding="utf-8")) for p in patterns)
    )

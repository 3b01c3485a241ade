"""The code's layout rules: the tools run without the test suite (tests depend on code, never the
reverse), and no module of the program grows past what a reader takes in at once."""

from __future__ import annotations

import ast

import pytest

from tools.harness.stacks import ROOT

TOOLS = sorted((ROOT / "tools").rglob("*.py"))
COMPONENTS = sorted((ROOT / "components").rglob("*.py"))
MAX_COMPONENT_LINES = 500


def imported_modules(source: str) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


@pytest.mark.parametrize("path", TOOLS, ids=lambda p: str(p.relative_to(ROOT)))
def test_tools_do_not_import_the_tests(path):
    leaning = sorted(
        m for m in imported_modules(path.read_text()) if m == "tests" or m.startswith("tests.")
    )
    assert not leaning, f"{path.relative_to(ROOT)} imports {leaning}: use tools.harness instead"


@pytest.mark.parametrize("path", COMPONENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_component_modules_stay_short(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_COMPONENT_LINES, (
        f"{path.relative_to(ROOT)}: {lines} lines; split it by concern "
        f"(at most {MAX_COMPONENT_LINES})"
    )


def test_the_layout_check_sees_a_test_import():
    assert "tests.harness" in imported_modules("from tests.harness import run_program\n")
    assert "tests" in imported_modules("from tests import harness\n")

"""The code's layout rules: the tools run without the test suite (tests depend on code, never the
reverse), no module of the program grows past what a reader takes in at once, and no test module
imports another (what tests share is in tests/helpers/ and tests/conftest.py)."""

from __future__ import annotations

import ast

import pytest

from tools import import_graph
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


# The SDK's internals, which the program never imports (docs/decisions/001-the-sdk-as-it-ships.md).
SDK_INTERNALS = (
    "pulumi.runtime.rpc",
    "pulumi.runtime.resource",
    "pulumi.runtime.known_types",
    "pulumi.runtime.resource_cycle_breaker",
    "pulumi.runtime.proto",
    "pulumi._types",
    "google.protobuf",
    "gc",
)
PROGRAM = [ROOT / "__main__.py", *COMPONENTS, *sorted((ROOT / "policies").rglob("*.py"))]


@pytest.mark.parametrize("path", PROGRAM, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_program_imports_no_sdk_internals(path):
    source = path.read_text()
    internal = sorted(
        m
        for m in imported_modules(source)
        if any(m == i or m.startswith(f"{i}.") for i in SDK_INTERNALS)
    )
    assert not internal, f"{path.relative_to(ROOT)} imports {internal}"
    tree = ast.parse(source)
    from_runtime = sorted(
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module in ("pulumi", "pulumi.runtime")
        for alias in node.names
        if alias.name in ("rpc", "resource", "known_types", "proto", "_types")
    )
    assert not from_runtime, f"{path.relative_to(ROOT)} imports {from_runtime} of the SDK"


def test_the_internals_check_sees_an_internal_import():
    assert "pulumi.runtime.rpc" in imported_modules("from pulumi.runtime.rpc import x\n")


def test_the_layout_check_sees_a_test_import():
    assert "tests.harness" in imported_modules("from tests.harness import run_program\n")
    assert "tests" in imported_modules("from tests import harness\n")


TEST_FILES = sorted((ROOT / "tests").rglob("*.py"))
TEST_MODULES = frozenset(p.stem for p in (ROOT / "tests").glob("test_*.py"))


def imported_test_modules(source: str, test_modules: frozenset[str] = TEST_MODULES) -> set[str]:
    """The test modules a source imports, anywhere in it (deferred imports too), however named:
    `tests.test_x`, `from tests import test_x`, or plain `test_x` (pytest puts tests/ on the
    path) and relative imports."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            names.add(base)
            names.update(f"{base}.{alias.name}".lstrip(".") for alias in node.names)
    first = {name.removeprefix("tests.").split(".")[0] for name in names}
    return first & test_modules


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_test_module_imports_another(path):
    """Shared helpers live in tests/helpers/ and shared fixtures in tests/conftest.py, as pytest's
    own documentation shows: a test module imported by another is loaded twice (pytest imports
    it under its own name) and ties the two files' insides together."""
    found = sorted(imported_test_modules(path.read_text()) - {path.stem})
    assert not found, (
        f"{path.relative_to(ROOT)} imports the test module(s) {found}: move what it uses to "
        "tests/helpers/ (or a fixture in tests/conftest.py)"
    )


def test_the_test_import_check_sees_every_spelling():
    modules = frozenset({"test_policies", "test_node_scripts"})
    spellings = {
        "from tests.test_policies import analyze\n": {"test_policies"},
        "from tests import test_policies\n": {"test_policies"},
        "import tests.test_policies\n": {"test_policies"},
        "import test_node_scripts\n": {"test_node_scripts"},
        "from .test_node_scripts import DRIVER\n": {"test_node_scripts"},
        "def f():\n    from tests.test_policies import analyze\n": {"test_policies"},
        "from tests.helpers.policies import analyze\n": set(),
        "from tests.sandbox import Sandbox\n": set(),
    }
    for source, expected in spellings.items():
        assert imported_test_modules(source, modules) == expected, source


def test_components_never_import_the_tools_and_nothing_imports_in_a_cycle():
    found = import_graph.modules()
    pairs = import_graph.edges(found)
    assert ("__main__", "components.gpu_node") in pairs, "the graph misses the program's imports"
    leaning = sorted(
        (a, b) for a, b in pairs if a.startswith("components") and b.startswith("tools")
    )
    assert not leaning, f"components import tools: {leaning}"
    assert import_graph.cycles(pairs) == [], "modules import each other (deferred imports too)"


def test_import_graph_reads_imports_as_python_runs_them(tmp_path):
    files = {
        "components/__init__.py": "",
        "components/a.py": "from typing import TYPE_CHECKING\n"
        "from components import b\n"
        "if TYPE_CHECKING:\n    from components.c import C\n",
        "components/b.py": "def later():\n    from .c import C\n    return C\n",
        "components/c.py": "import pulumi\nC = 1\n",
        "tools/__init__.py": "",
        "tools/t.py": "import components.a\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = import_graph.modules(tmp_path)
    assert sorted(found) == ["components.a", "components.b", "components.c", "tools.t"]
    assert import_graph.edges(found) == {
        ("components.a", "components.b"): import_graph.EAGER,
        ("components.a", "components.c"): import_graph.TYPING,
        ("components.b", "components.c"): import_graph.DEFERRED,
        ("tools.t", "components.a"): import_graph.EAGER,
    }
    dot = import_graph.to_dot(found, import_graph.edges(found))
    assert '"components.a" -> "components.c" [style=dotted];' in dot
    assert '"components.b" -> "components.c" [style=dashed];' in dot
    assert dot == import_graph.to_dot(found, import_graph.edges(found))


def _components() -> list[type]:
    import importlib
    import inspect

    import pulumi

    found = {}
    for path in COMPONENTS:
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for _, cls in inspect.getmembers(importlib.import_module(module), inspect.isclass):
            if issubclass(cls, pulumi.ComponentResource) and cls.__module__ == module:
                found[cls.__qualname__] = cls
    return [found[name] for name in sorted(found)]


@pytest.mark.parametrize("component", _components(), ids=lambda c: c.__name__)
def test_every_component_takes_name_args_opts(component):
    """Like Pulumi's own component libraries: `(name, args, opts=None)`, the args one frozen
    class holding only what the component uses (never the whole Settings)."""
    import dataclasses
    import importlib
    import inspect

    parameters = list(inspect.signature(component.__init__).parameters.values())[1:]
    assert [p.name for p in parameters] == ["name", "args", "opts"], component
    assert parameters[2].default is None
    module = importlib.import_module(component.__module__)
    args_type = getattr(module, str(parameters[1].annotation))
    assert dataclasses.is_dataclass(args_type) and args_type.__dataclass_params__.frozen
    held = {str(field.type) for field in dataclasses.fields(args_type)}
    assert "Settings" not in held, f"{args_type.__name__} holds the whole Settings"


def test_a_cycle_through_a_deferred_import_is_a_cycle_and_one_for_typing_is_not():
    pairs = {
        ("a", "b"): import_graph.EAGER,
        ("b", "a"): import_graph.DEFERRED,
        ("c", "d"): import_graph.EAGER,
        ("d", "c"): import_graph.TYPING,
    }
    assert import_graph.cycles(pairs) == [["a", "b"]]

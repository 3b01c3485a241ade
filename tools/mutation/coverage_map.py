"""Which tests execute which line of components/ and policies/, from one coverage run with a
context per phase of each test (tools/mutation/contexts.py).

A Python mutant then runs only the tests that execute its line, fastest first (durations from
the same run's JUnit report). Lines that run at import time only have no test context: their
mutants fall back to readers.py and the file-level map (testmap.py). The run takes as long as
the suite under coverage (minutes); `keep` saves its data file and durations so the next run
over the same tests (`reuse`) skips it.

Why: docs/decisions/022-mutation-tests-run-only-the-tests-that-can-see-a-mutant.md
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from coverage import CoverageData

from tools.mutation import readers
from tools.mutation.testmap import DESELECT, Selection, naming_tests

# Contexts come from tools/mutation/contexts.py (each test's phases), not from coverage.py's
# `dynamic_context = test_function`, which gives a fixture's work to no test.
RC = """[run]
source = components,policies
relative_files = true
"""


def _node_id(context: str, root: Path) -> str | None:
    """tests.test_network.test_rules -> tests/test_network.py::test_rules (classes kept).

    Without a tests/__init__.py, pytest imports a test module by its bare name (rootdir-relative
    `prepend` import mode puts tests/ on sys.path), so the context reads
    `test_network.test_rules`: looked up under tests/ as well."""
    parts = context.split(".")
    for split in range(len(parts) - 1, 0, -1):
        for base in (Path(), Path("tests")):
            module = base / Path(*parts[:split]).with_suffix(".py")
            if (root / module).is_file():
                return "::".join([module.as_posix(), *parts[split:]])
    return None


@dataclass
class LineMap:
    """{source file: {line: [pytest node ids that execute it]}}, and seconds per node id."""

    lines: dict[str, dict[int, list[str]]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def tests_of(self, source: str, line: int, first: Collection[str] = ()) -> list[str]:
        """The node ids that execute `line` of `source`: those of the test files in `first`
        (the files that name `source`: they usually catch its mutant), then the rest; fastest
        first within each (unknown ones last)."""
        return self.ordered(self.lines.get(source, {}).get(line, []), first)

    def ordered(self, tests: Iterable[str], first: Collection[str] = ()) -> list[str]:
        def key(node: str) -> tuple[bool, float, str]:
            named = node.split("::", 1)[0] in first
            return (not named, self.seconds.get(node, float("inf")), node)

        return sorted(set(tests), key=key)


def _durations_path(data_file: Path) -> Path:
    return data_file.with_name(data_file.name + ".durations.json")


def line_tests(
    root: Path,
    test_files: list[str],
    timeout: float,
    reuse: Path | None = None,
    keep: Path | None = None,
) -> LineMap:
    """The line map of the given test files, run once under coverage in root (a private copy:
    the data file lands there), or read from an earlier run's data file (`reuse`) of the same
    tests. `keep`: also copy this run's data file (and its durations) there."""
    if not test_files:
        return LineMap()
    if reuse is not None:
        return _read(reuse, root)
    rc = root / ".mutation-coveragerc"
    rc.write_text(RC)
    data_file = root / ".mutation-coverage"
    report = root / ".mutation-junit.xml"
    command = [
        sys.executable, "-m", "coverage", "run", f"--rcfile={rc}", f"--data-file={data_file}",
        "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tools.mutation.contexts",
        f"--junitxml={report}",
        *[f"--deselect={d}" for d in DESELECT], *test_files,
    ]  # fmt: skip
    # The plugin comes from this tool's own tree, whatever tree is measured (--root); after
    # the measured tree on sys.path (its cwd comes first), so it shadows none of its modules.
    tool_root = str(Path(__file__).resolve().parents[2])
    paths = [os.environ.get("PYTHONPATH", ""), tool_root]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    subprocess.run(
        command, cwd=root, capture_output=True, text=True, timeout=timeout, check=False, env=env
    )
    if not data_file.exists():
        return LineMap()
    durations = _durations_path(data_file)
    durations.write_text(json.dumps(_seconds_by_function(report, root), sort_keys=True))
    if keep is not None:
        keep.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(data_file, keep)
        shutil.copyfile(durations, _durations_path(keep))
    return _read(data_file, root)


def _seconds_by_function(report: Path, root: Path) -> dict[str, float]:
    """Seconds per test function (parametrized cases summed), keyed like the coverage
    contexts' node ids, from pytest's JUnit XML."""
    if not report.exists():
        return {}
    seconds: dict[str, float] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        name = case.get("name", "")
        node = _node_id(f"{case.get('classname', '')}.{name.split('[', 1)[0]}", root)
        if node:
            spent = float(case.get("time") or 0)
            parametrized = node + name[len(name.split("[", 1)[0]) :]
            file = node.split("::", 1)[0]
            for key in {node, parametrized, file}:
                seconds[key] = seconds.get(key, 0.0) + spent
    return seconds


def _tests_of_context(context: str, root: Path) -> str | None:
    """The pytest selection a coverage context stands for: `<node id>|call` (or teardown) that
    test; `<node id>|setup` its whole file (its module-scoped fixtures serve every test of the
    file); an older run's `tests.test_x.test_y` (coverage's test_function) that function."""
    if "|" in context:
        node, phase = context.rsplit("|", 1)
        return node.split("::", 1)[0] if phase == "setup" else node
    return _node_id(context, root) if context else None


def _read(data_file: Path, root: Path) -> LineMap:
    durations = _durations_path(data_file)
    seconds = json.loads(durations.read_text()) if durations.exists() else {}
    data = CoverageData(basename=str(data_file))
    data.read()
    found: dict[str, dict[int, list[str]]] = {}
    for measured in data.measured_files():
        path = Path(measured)
        relative = (path if not path.is_absolute() else path.relative_to(root)).as_posix()
        by_line: dict[int, list[str]] = {}
        for line, contexts in data.contexts_by_lineno(measured).items():
            ids = sorted({n for c in contexts if c and (n := _tests_of_context(c, root))})
            if ids:
                by_line[line] = ids
        found[relative] = by_line
    return LineMap(found, seconds)


def selection_for(
    source: str,
    line: int,
    coverage: LineMap,
    fallback: Selection,
    root: Path | None = None,
    excluded: tuple[str, ...] = (),
) -> Selection:
    """The tests that execute `line` of `source` (fastest first); for a line that ran only at
    import time, the tests that execute the lines reading what it defines, then the test files
    that name it (tools/mutation/readers.py); else the file-level fallback."""
    first = set(naming_tests(source, root)) if root is not None else set()
    tests = coverage.tests_of(source, line, first)
    if tests:
        return Selection(tuple(tests))
    if root is not None:
        names = readers.defined_at((root / source).read_text(encoding="utf-8"), line)
        found: set[str] = set()
        for relative, numbers in readers.reader_lines(root, source, names).items():
            for number in numbers:
                found.update(coverage.tests_of(relative, number))
        ordered = coverage.ordered(found, first)
        ordered += [f for f in readers.test_files_naming(root, names) if f not in excluded]
        if ordered:
            return Selection(tuple(dict.fromkeys(ordered)))
    return fallback

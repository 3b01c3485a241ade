"""Which tests execute which line of components/ and policies/, from one coverage run with a
context per test function (coverage.py `dynamic_context = test_function`).

A Python mutant then runs only the tests that execute its line (the tests that can see it),
instead of every test of the program. Lines that run at import time only (constants, class
bodies) have no test context: their mutants fall back to the file-level map (testmap.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from coverage import CoverageData

from tools.mutation.testmap import DESELECT, Selection

RC = """[run]
dynamic_context = test_function
source = components,policies
relative_files = true
"""


def _node_id(context: str, root: Path) -> str | None:
    """tests.test_network.test_rules -> tests/test_network.py::test_rules (classes kept)."""
    parts = context.split(".")
    for split in range(len(parts) - 1, 0, -1):
        module = Path(*parts[:split]).with_suffix(".py")
        if (root / module).is_file():
            return "::".join([module.as_posix(), *parts[split:]])
    return None


def line_tests(
    root: Path, test_files: list[str], timeout: float, reuse: Path | None = None
) -> dict[str, dict[int, list[str]]]:
    """{source file: {line: [pytest node ids that execute it]}} for the given test files, run
    once under coverage in root (a private copy: the data file lands there), or read from the
    data file of an earlier run (`reuse`) of the same tests."""
    if not test_files:
        return {}
    if reuse is not None:
        return _read(reuse, root)
    rc = root / ".mutation-coveragerc"
    rc.write_text(RC)
    data_file = root / ".mutation-coverage"
    command = [
        sys.executable, "-m", "coverage", "run", f"--rcfile={rc}", f"--data-file={data_file}",
        "-m", "pytest", "-q", "-p", "no:cacheprovider",
        *[f"--deselect={d}" for d in DESELECT], *test_files,
    ]  # fmt: skip
    subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=timeout, check=False)
    if not data_file.exists():
        return {}
    return _read(data_file, root)


def _read(data_file: Path, root: Path) -> dict[str, dict[int, list[str]]]:
    data = CoverageData(basename=str(data_file))
    data.read()
    found: dict[str, dict[int, list[str]]] = {}
    for measured in data.measured_files():
        path = Path(measured)
        relative = (path if not path.is_absolute() else path.relative_to(root)).as_posix()
        by_line: dict[int, list[str]] = {}
        for line, contexts in data.contexts_by_lineno(measured).items():
            ids = sorted({n for c in contexts if c and (n := _node_id(c, root))})
            if ids:
                by_line[line] = ids
        found[relative] = by_line
    return found


def selection_for(
    source: str, line: int, coverage: dict[str, dict[int, list[str]]], fallback: Selection
) -> Selection:
    """The tests that execute `line` of `source`, or the file-level fallback."""
    tests = coverage.get(source, {}).get(line)
    return Selection(tuple(tests)) if tests else fallback

"""pytest plugin of the coverage run: each test's phases as coverage contexts.

Every line run while a test is set up, called or torn down is labelled `<node id>|<phase>` (as
pytest-cov's `--cov-context=test` does), so the work of a module-scoped fixture belongs to the
tests that use it; coverage.py's own `dynamic_context = test_function` gives it to no test.
coverage_map.py reads a line set up for a test as seen by that test's whole file.

Loaded by the coverage run only: `python -m pytest -p tools.mutation.contexts`.
Why: docs/decisions/022-mutation-tests-run-only-the-tests-that-can-see-a-mutant.md
"""

from __future__ import annotations

import coverage
import pytest


def _switch(label: str) -> None:
    current = coverage.Coverage.current()
    if current is not None:
        current.switch_context(label)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    _switch(f"{item.nodeid}|setup")
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    _switch(f"{item.nodeid}|call")
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item):
    _switch(f"{item.nodeid}|teardown")
    yield
    _switch("")

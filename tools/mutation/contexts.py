"""pytest plugin of the coverage run: each test's phases as coverage contexts.

coverage.py's own `dynamic_context = test_function` labels a line with the test function on the
stack when it runs, so the work of a fixture (set up from pytest's own frames) belongs to no
test: a line run only while a module-scoped fixture builds the program's graph looked untested,
and its mutant ran against too few tests. Here, as pytest-cov's `--cov-context=test` does,
every line run while a test is set up, called or torn down is labelled `<node id>|<phase>`;
coverage_map.py reads a line set up for a test as seen by that test's whole file (the tests of
a module share its fixtures).

Loaded by the coverage run only: `python -m pytest -p tools.mutation.contexts`.
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

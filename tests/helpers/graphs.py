"""The program's graph of each stack file as written (`run_program(stack)`, no overrides), run
once per test session: some twenty test modules read it. Each caller gets its own copy, so a
module that changes its graph cannot change another's."""

from __future__ import annotations

import copy
from functools import cache

from tools.harness.graph import Graph
from tools.harness.stacks import run_program


@cache
def _run(stack: str) -> Graph:
    return run_program(stack)


def stack_graph(stack: str) -> Graph:
    """What `run_program(stack)` returns: the same program, config, mocks and clock give the
    same graph (test_lifecycle.py `test_an_unchanged_program_changes_nothing` runs it twice)."""
    return copy.deepcopy(_run(stack))

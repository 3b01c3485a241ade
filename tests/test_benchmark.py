"""The benchmark report (`python -m tools.benchmark`): what it measures and how it reads. Timings
are not asserted (on a shared machine they are noise); counts and the memory verdict are."""

from __future__ import annotations

from tools.benchmark import MAX_MIB, Row, Run, format_table, measure, over_memory


def test_a_row_measures_the_program_and_as_many_bare_resources_in_their_own_processes():
    row = measure(1)
    assert row.nodes == 1
    assert row.program.resources > 50, "the program for one node registers its whole stack"
    assert row.bare.resources == row.program.resources
    for run in (row.program, row.bare):
        assert run.seconds > 0 and run.peak_mib > 10
        assert run.cpu_seconds > 0, "the CPU the evaluation took, what tools.timeline streams at"
    table = format_table([row])
    assert table.splitlines()[2].split()[:2] == ["1", str(row.program.resources)]


def test_only_memory_over_the_bound_is_reported():
    def row(nodes: int, mib: float) -> Row:
        return Row(nodes, Run(10.0, mib, 12 * nodes), Run(1.0, 100.0, 12 * nodes))

    assert over_memory([row(64, 300.0), row(1000, MAX_MIB)]) == []
    [problem] = over_memory([row(64, 300.0), row(1000, MAX_MIB + 1)])
    assert problem.startswith("1000 nodes peaked at")

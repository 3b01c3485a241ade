"""The benchmark's verdict (`python -m tools.benchmark`): which rows miss which target. The
measurement itself is not run here (timings on a shared machine are noise, not a test)."""

from __future__ import annotations

import time

import pytest

from tools.benchmark import Row, missed_targets
from tools.harness.stacks import run_program


def row(nodes: int, *, seconds: float, same_types: float, peak: float = 500.0) -> Row:
    return Row(
        nodes=nodes,
        resources=12 * nodes + 30,
        seconds=seconds,
        max_join_depth=12,
        graph_depth=14,
        bare_seconds=seconds / 3,
        peak_mib=peak,
        same_types_seconds=same_types,
    )


def test_own_cost_counts_from_64_nodes_up():
    small = row(8, seconds=1.5, same_types=1.0)
    assert missed_targets([small]) == []
    large = row(64, seconds=13.0, same_types=10.0)
    [line] = missed_targets([small, large])
    assert "own cost 1.30" in line and "64 node(s)" in line


def test_large_stack_time_memory_and_flat_depth():
    first = row(1, seconds=0.2, same_types=0.2)
    big = row(1000, seconds=61.0, same_types=60.0, peak=2100.0)
    deeper = Row(**{**row(64, seconds=6.0, same_types=6.0).__dict__, "graph_depth": 15})
    missed = missed_targets([first, deeper, big])
    assert any("depth grows" in line for line in missed)
    assert any("61.0 s" in line for line in missed)
    assert any("2100 MiB" in line for line in missed)


def test_own_cost_on_the_program_side_takes_the_engine_stand_in_out_of_both_runs():
    measured = Row(
        **{
            **row(64, seconds=10.0, same_types=6.0).__dict__,
            "cpu_seconds": 10.0,
            "engine_cpu_seconds": 2.0,
            "same_types_cpu_seconds": 6.0,
            "same_types_engine_cpu_seconds": 1.0,
        }
    )
    assert measured.own_ratio == pytest.approx(10 / 6)
    assert measured.own_program_side_ratio == pytest.approx(8 / 5)


def test_the_recording_monitor_counts_the_cpu_it_spends_as_the_engine():
    started = time.process_time()
    graph = run_program("dev")
    spent = time.process_time() - started
    assert 0 < graph.engine_cpu_seconds < spent


def test_each_run_has_its_own_process_and_the_row_joins_them():
    """The program, the same types and the bare program each run in a fresh interpreter (the
    same types once ran on the heap a 1,000-node program left, a third slower), and the row
    holds all three: as many resources registered by each, every figure measured."""
    from tools.benchmark import format_table, measure_isolated

    measured = measure_isolated(1)
    assert measured.nodes == 1 and measured.resources > 50
    figures = [
        measured.seconds,
        measured.same_types_seconds,
        measured.bare_seconds,
        measured.peak_mib,
        measured.same_types_peak_mib,
        measured.cpu_seconds,
        measured.engine_cpu_seconds,
        measured.same_types_cpu_seconds,
        measured.same_types_engine_cpu_seconds,
    ]
    assert all(figure > 0 for figure in figures), measured
    assert 0 < measured.max_join_depth <= measured.graph_depth
    assert "same-types peak MiB" in format_table([measured])


def test_without_inputs_the_graph_keeps_types_names_and_dependencies():
    """The benchmark's recording (`record_inputs=False`): the same resources, names, types and
    dependencies as a full recording, no inputs, and the mock monitor keeps no state (under
    `pulumi up` the engine holds that in its own process)."""
    from pulumi.runtime import settings as runtime_settings

    def shape(graph):
        # Sorted: registration order follows Outputs resolving on threads.
        return sorted(
            (r.urn, r.type, r.name, sorted(r.dependencies), sorted(r.property_dependencies.items()))
            for r in graph
        )

    full = run_program("dev")
    assert any(r.inputs for r in full)
    lean = run_program("dev", record_inputs=False)
    assert shape(lean) == shape(full)
    assert all(r.inputs == {} for r in lean)
    monitor = runtime_settings.get_monitor()
    states = [r.state for r in monitor.resources.values()]
    assert states and all(state == {} for state in states)


def test_repeated_runs_interleave_and_keep_the_fastest_of_each(monkeypatch):
    """With --repeat, the program, same-types and bare children alternate (a slow spell of the
    machine falls on all three), and each figure comes from its own fastest run."""
    import tools.benchmark as benchmark

    calls: list[str] = []
    program_seconds = iter([9.0, 7.0, 8.0])
    same_seconds = iter([5.0, 6.0, 4.0])
    bare_seconds = iter([2.0, 1.0, 3.0])

    def child(*args: str) -> dict:
        calls.append(args[0])
        if args[0] == "--one":
            seconds = next(program_seconds)
            return {
                "nodes": int(args[1]),
                "resources": 100,
                "seconds": seconds,
                "max_join_depth": 14,
                "graph_depth": 18,
                "peak_mib": seconds * 10,
                "cpu_seconds": seconds,
                "engine_cpu_seconds": 1.0,
            }
        if args[0] == "--same-types":
            seconds = next(same_seconds)
            return {
                "same_types_seconds": seconds,
                "same_types_cpu_seconds": seconds,
                "same_types_engine_cpu_seconds": 0.5,
                "same_types_peak_mib": seconds * 10,
            }
        return {"bare_seconds": next(bare_seconds)}

    monkeypatch.setattr(benchmark, "_child", child)
    row = benchmark.measure_isolated(8, repeat=3)
    assert calls == ["--one", "--same-types", "--bare"] * 3
    assert (row.seconds, row.peak_mib) == (7.0, 70.0)  # figures of the same, fastest run
    assert (row.same_types_seconds, row.same_types_peak_mib) == (4.0, 40.0)
    assert row.bare_seconds == 1.0
    assert row.own_ratio == 7.0 / 4.0

"""The benchmark's verdict (`python -m tools.benchmark`): which rows miss which target. The
measurement itself is not run here (timings on a shared machine are noise, not a test)."""

from __future__ import annotations

from tools.benchmark import Row, missed_targets


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

"""The benchmark's verdict (`python -m tools.benchmark`): which rows miss which target, and how
its children are run and counted. The measurement itself is not run here (timings on a shared
machine are noise, not a test; counting under callgrind takes minutes)."""

from __future__ import annotations

import os
import subprocess
import sys
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


def test_the_same_types_register_each_type_a_node_adds():
    """The bound the own cost is held to: every resource a node adds is registered again, of
    its own type (not a stand-in type), so the SDK's and the stand-in's cost for that type
    (a generated host key included) is on both sides; the stack's fixed resources may be
    trivial ones, whose cost does not grow with the nodes."""
    from collections import Counter

    from tools import benchmark

    def registered(program=benchmark.PROGRAM, nodes: int = 1) -> Counter:
        config = benchmark.config_for(nodes)
        graph = run_program("dev", config=config, program=program, record_inputs=False)
        return Counter(r.type for r in graph)

    per_node = registered(nodes=2) - registered(nodes=1)
    assert per_node["kubernetes:batch/v1:Job"] == 1 and per_node["command:remote:Command"] > 10
    same_types = benchmark.same_types_program(list(per_node.elements()))
    # Less what a program registering nothing leaves (the stack itself).
    assert registered(same_types) - registered(lambda: None) == per_node


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


def test_repeated_runs_interleave_keep_the_fastest_figures_and_pair_the_ratios(monkeypatch):
    """With --repeat, the program, same-types and bare children alternate (a slow spell of the
    machine falls on all three), each figure comes from its own fastest run, and the own cost
    is the median of each program run over the same-types run after it, not the fastest
    program run over a same-types run from another spell (7 / 4)."""
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
    assert row.paired_own == (9.0 / 5.0, 7.0 / 6.0, 8.0 / 4.0)
    assert row.own_ratio == 9.0 / 5.0
    assert row.own_range == "1.17-2.00"
    # CPU less the stand-in's (1.0 and 0.5 s), pair by pair.
    assert row.paired_own_program_side == (8.0 / 4.5, 6.0 / 5.5, 7.0 / 3.5)
    assert row.own_program_side_ratio == 8.0 / 4.5
    [line] = benchmark.missed_targets([benchmark.Row(**{**row.__dict__, "nodes": 64})])
    assert "own cost 1.80" in line and "median of 3 pairs, 1.17-2.00" in line


def test_one_run_is_its_own_pair():
    measured = row(64, seconds=6.0, same_types=5.0)
    assert measured.paired_own == () and measured.own_range == "-"
    assert measured.own_ratio == 6.0 / 5.0


# --instructions


def test_a_childs_counts_are_its_main_thread_and_the_others(tmp_path):
    from tools.benchmark import Instructions, read_instructions

    out = tmp_path / "program.callgrind"
    out.write_text("")  # callgrind leaves the bare name empty with one file per thread
    (out.parent / "program.callgrind-01").write_text("events: Ir\nsummary: 0\nfn=x\ntotals: 900\n")
    (out.parent / "program.callgrind-02").write_text("events: Ir\ntotals: 60\n")
    (out.parent / "program.callgrind-03").write_text("events: Ir\ntotals: 40\n")
    (out.parent / "same-types.callgrind-01").write_text("totals: 5\n")  # another child's
    assert read_instructions(str(out)) == Instructions(program=900, engine=100)


def test_a_child_without_counts_for_its_main_thread_is_an_error(tmp_path):
    from tools.benchmark import read_instructions

    with pytest.raises(RuntimeError, match="main thread"):
        read_instructions(str(tmp_path / "program.callgrind"))


def test_the_counted_own_cost_is_held_to_the_same_target():
    from tools.benchmark import (
        InstructionRow,
        Instructions,
        format_instruction_table,
        missed_instruction_targets,
    )

    small = InstructionRow(8, Instructions(150, 50), Instructions(100, 50))
    within = InstructionRow(64, Instructions(1100, 100), Instructions(900, 100))
    over = InstructionRow(256, Instructions(5000, 400), Instructions(3000, 300))
    assert over.own_ratio == pytest.approx(5400 / 3300)
    assert over.own_program_side_ratio == pytest.approx(5000 / 3000)
    [line] = missed_instruction_targets([small, within, over])
    assert "1.64" in line and "256 node(s)" in line
    table = format_instruction_table([small, within, over])
    assert "own, program side" in table and len(table.splitlines()) == 4


def test_a_counted_child_runs_under_callgrind_counting_only_its_measured_run(monkeypatch):
    import tools.benchmark as benchmark

    ran: list[tuple[list[str], dict | None]] = []

    def run(command, **kwargs):
        ran.append((command, kwargs.get("env")))
        return subprocess.CompletedProcess(command, 0, stdout='{"seconds": 1.0}\n', stderr="")

    monkeypatch.setattr(benchmark.subprocess, "run", run)
    assert benchmark._child("--one", "8", instructions_file="/tmp/x/program.callgrind") == {
        "seconds": 1.0
    }
    [(command, env)] = ran
    assert command[:5] == benchmark.callgrind_command("/tmp/x/program.callgrind")
    assert "--instr-atstart=no" in command and "--separate-threads=yes" in command
    assert command[5:] == [sys.executable, "-m", "tools.benchmark", "--one", "8"]
    assert env[benchmark.INSTRUCTIONS_ENV] == "1" and env["PYTHONHASHSEED"] == "0"

    # In the child: counting on and off around the measured run, by its own pid.
    ran.clear()
    monkeypatch.setenv(benchmark.INSTRUCTIONS_ENV, "1")
    monkeypatch.setattr(benchmark, "run_program", lambda *args, **kwargs: "graph")
    assert benchmark.run_timed(nodes=1)[2] == "graph"
    assert [command for command, _ in ran] == [
        ["callgrind_control", "--instr=on", str(os.getpid())],
        ["callgrind_control", "--instr=off", str(os.getpid())],
    ]
    # Outside callgrind nothing is run.
    ran.clear()
    monkeypatch.delenv(benchmark.INSTRUCTIONS_ENV)
    benchmark.run_timed(nodes=1)
    assert ran == []


def test_counting_without_valgrind_says_what_to_install(monkeypatch, capsys):
    import tools.benchmark as benchmark

    monkeypatch.setattr(benchmark.shutil, "which", lambda tool: None)
    with pytest.raises(SystemExit) as exit_:
        benchmark.main(["--instructions", "--nodes", "8"])
    assert exit_.value.code == 2
    assert "apt-get install valgrind" in capsys.readouterr().err


def test_counting_refuses_repeats_it_does_not_need(monkeypatch, capsys):
    import tools.benchmark as benchmark

    monkeypatch.setattr(benchmark.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    with pytest.raises(SystemExit):
        benchmark.main(["--instructions", "--repeat", "3"])
    assert "--repeat does not apply" in capsys.readouterr().err


def test_counting_that_callgrind_control_could_not_switch_is_an_error(monkeypatch):
    import tools.benchmark as benchmark

    def run(command, **kwargs):
        # What callgrind_control prints, with exit status 0, when no callgrind run has that pid.
        out = f"Error: Callgrind task with PID/name '{command[-1]}' not detected.\n"
        return subprocess.CompletedProcess(command, 0, stdout=out, stderr="")

    monkeypatch.setattr(benchmark.subprocess, "run", run)
    monkeypatch.setenv(benchmark.INSTRUCTIONS_ENV, "1")
    with pytest.raises(RuntimeError, match="could not turn counting on"):
        benchmark._count_instructions("on")


def test_counting_without_node_counts_stays_small(monkeypatch, capsys):
    import tools.benchmark as benchmark
    from tools.benchmark import InstructionRow, Instructions

    counted: list[int] = []

    def measure(nodes: int) -> InstructionRow:
        counted.append(nodes)
        return InstructionRow(nodes, Instructions(110, 0), Instructions(100, 0))

    monkeypatch.setattr(benchmark.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(benchmark, "measure_instructions", measure)
    assert benchmark.main(["--instructions"]) == 0
    assert counted == list(benchmark.INSTRUCTION_COUNTS) and max(counted) <= 64
    assert "OK: own cost" in capsys.readouterr().out

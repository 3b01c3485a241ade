"""How long the program takes to evaluate, and how much memory, as the fleet grows (a report).

    python -m tools.benchmark                  # 1, 64, 256 and 1,000 nodes
    python -m tools.benchmark --nodes 1 64     # any counts
    python -m tools.benchmark --repeat 3       # each figure the median of three runs

For each count N, a fresh subprocess runs the real program (the dev stack, one pool of N
g5.xlarge nodes) under the harness's mock engine, and a second one registers as many trivial
resources through the same SDK ("bare SDK"): the floor any program with that many resources
pays. `tools.timeline` streams registrations at the CPU figure (docs/decisions/051-the-model-
meets-a-fleets-limits.md). Its bound: a 1,000-node evaluation fits in MAX_MIB (a CI runner).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

DEFAULT_COUNTS = (1, 64, 256, 1000)
MAX_MIB = 2048.0
STACK = "dev"
BARE_TYPE = "bench:index:Trivial"


@dataclass(frozen=True)
class Run:
    """One child's figures: wall seconds of the evaluation, peak resident MiB, resources, and
    the CPU seconds the process spent on it."""

    seconds: float
    peak_mib: float
    resources: int
    cpu_seconds: float = 0.0


@dataclass(frozen=True)
class Row:
    nodes: int
    program: Run
    bare: Run

    @property
    def ms_per_resource(self) -> float:
        return 1000 * self.program.seconds / max(self.program.resources, 1)

    @property
    def bare_ms_per_resource(self) -> float:
        return 1000 * self.bare.seconds / max(self.bare.resources, 1)

    @property
    def cpu_ms_per_resource(self) -> float:
        return 1000 * self.program.cpu_seconds / max(self.program.resources, 1)


def fleet(nodes: int) -> dict:
    """The dev stack's overrides for one pool of `nodes` nodes (tools.harness.stacks)."""
    from tools.harness.stacks import fleet_config

    pool = {"name": "bench", "instanceType": "g5.xlarge", "count": nodes}
    return fleet_config(STACK, nodes, pool)


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def child_program(nodes: int) -> Run:
    """Run the program for `nodes` nodes in this process, the providers' SDKs imported before the
    clock starts (no inputs kept by the mock engine: under `pulumi up` they live in the engine's
    process, not the program's)."""
    import importlib

    from tools.harness.stacks import run_program

    for module in ("pulumi_aws", "pulumi_command", "pulumi_kubernetes", "pulumi_tls"):
        importlib.import_module(module)

    config = fleet(nodes)
    started, cpu = time.perf_counter(), time.process_time()
    graph = run_program(STACK, config=config, record_inputs=False)
    elapsed = time.perf_counter() - started
    return Run(elapsed, _peak_mib(), len(graph), time.process_time() - cpu)


def child_bare(count: int) -> Run:
    """Register `count` trivial custom resources through the same SDK and mock engine."""
    import pulumi

    from tools.harness.stacks import run_program

    class Trivial(pulumi.CustomResource):
        def __init__(self, name: str):
            super().__init__(BARE_TYPE, name, {"value": name})

    def program() -> None:
        for index in range(count):
            Trivial(f"r{index}")

    started, cpu = time.perf_counter(), time.process_time()
    graph = run_program(STACK, program=program, record_inputs=False)
    elapsed = time.perf_counter() - started
    return Run(elapsed, _peak_mib(), len(graph), time.process_time() - cpu)


def _in_child(kind: str, count: int) -> Run:
    done = subprocess.run(
        [sys.executable, "-m", "tools.benchmark", "--child", kind, str(count)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{kind} child for {count} failed:\n{done.stderr[-4000:]}")
    return Run(**json.loads(done.stdout.strip().splitlines()[-1]))


def _median(runs: list[Run]) -> Run:
    return Run(
        statistics.median(r.seconds for r in runs),
        statistics.median(r.peak_mib for r in runs),
        runs[0].resources,
        statistics.median(r.cpu_seconds for r in runs),
    )


def measure(nodes: int, repeat: int = 1) -> Row:
    """The program and the bare SDK for `nodes` nodes, each the median of `repeat` children,
    run in turns so that a slow spell of the machine falls on both."""
    programs, bares = [], []
    for _ in range(repeat):
        programs.append(_in_child("program", nodes))
        bares.append(_in_child("bare", programs[-1].resources))
    return Row(nodes, _median(programs), _median(bares))


def format_table(rows: list[Row]) -> str:
    header = (
        f"{'nodes':>6} {'resources':>9} {'eval s':>8} {'ms/res':>7} {'peak MiB':>9}"
        f" | {'bare s':>7} {'ms/res':>7} {'peak MiB':>9} | {'cpu s':>7} {'cpu ms/res':>10}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        p, b = row.program, row.bare
        lines.append(
            f"{row.nodes:>6} {p.resources:>9} {p.seconds:>8.1f} {row.ms_per_resource:>7.2f}"
            f" {p.peak_mib:>9.0f} | {b.seconds:>7.1f} {row.bare_ms_per_resource:>7.2f}"
            f" {b.peak_mib:>9.0f} | {p.cpu_seconds:>7.1f} {row.cpu_ms_per_resource:>10.2f}"
        )
    return "\n".join(lines)


def over_memory(rows: list[Row]) -> list[str]:
    """The counts whose evaluation peaked above MAX_MIB."""
    return [
        f"{row.nodes} nodes peaked at {row.program.peak_mib:.0f} MiB (at most {MAX_MIB:.0f})"
        for row in rows
        if row.program.peak_mib > MAX_MIB
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.benchmark", description=__doc__)
    parser.add_argument("--nodes", type=int, nargs="+", default=list(DEFAULT_COUNTS))
    parser.add_argument("--repeat", type=int, default=1, help="runs per figure (median)")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        kind, count = args.child[0], int(args.child[1])
        run = child_program(count) if kind == "program" else child_bare(count)
        print(json.dumps(run.__dict__))
        return 0
    if any(n < 1 for n in args.nodes) or args.repeat < 1:
        parser.error("--nodes and --repeat take positive numbers")
    rows = []
    for nodes in args.nodes:
        rows.append(measure(nodes, args.repeat))
        print(f"measured {nodes} nodes", file=sys.stderr)
    print("Program evaluation under the mock engine (the program | the bare SDK, as many")
    print("trivial resources); medians of", args.repeat, "run(s) each:")
    print(format_table(rows))
    problems = over_memory(rows)
    for problem in problems:
        print(f"over memory: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

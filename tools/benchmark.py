"""How the program scales with the number of GPU nodes (a benchmark, not a test).

    python -m tools.benchmark                 # 1, 8, 64 and 256 nodes
    python -m tools.benchmark --nodes 1 1000  # any counts

For each count N the real program runs (tests.harness.run_program, the dev stack with one pool of
N g5.xlarge nodes) and the table shows: registered resources, program seconds, milliseconds per
node, and the longest dependency chain that ends at a node's `-join` step (the graph depth to a
joined node). Nodes never wait on each other, so that depth must be the same for 1 node and for
1,000: the run exits non-zero when it grows.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

from tests.harness import Graph, run_program, stack_file

DEFAULT_COUNTS = (1, 8, 64, 256)
STACK = "dev"
INSTANCE_TYPE = "g5.xlarge"
POOL_NAME = "bench"


@dataclass(frozen=True)
class Row:
    nodes: int
    resources: int
    seconds: float
    max_join_depth: int

    @property
    def ms_per_node(self) -> float:
        return 1000 * self.seconds / self.nodes


def config_for(nodes: int) -> dict:
    """The dev stack's settings with one pool of `nodes` g5.xlarge instances."""
    template = stack_file(STACK)["gpu-cluster:nodePools"][0]
    pool = {**template, "name": POOL_NAME, "instanceType": INSTANCE_TYPE, "count": nodes}
    return {"nodePools": [pool]}


def join_depths(graph: Graph, nodes: int) -> list[int]:
    """Length of the longest dependency chain ending at each node's `-join` step."""
    cluster = stack_file(STACK)["gpu-cluster:clusterName"]
    return [
        len(graph.longest_path(graph.named(f"{cluster}-{POOL_NAME}-{index}-join")))
        for index in range(nodes)
    ]


def measure(nodes: int) -> Row:
    """Run the program once for `nodes` GPU nodes and measure it."""
    overrides = config_for(nodes)
    started = time.perf_counter()
    graph = run_program(STACK, config=overrides)
    seconds = time.perf_counter() - started
    return Row(
        nodes=nodes,
        resources=len(graph),
        seconds=seconds,
        max_join_depth=max(join_depths(graph, nodes)),
    )


def format_table(rows: list[Row]) -> str:
    base = rows[0].max_join_depth
    lines = [
        f"{'nodes':>6} {'resources':>10} {'program s':>10} {'ms/node':>9} "
        f"{'join depth':>11} {'depth ratio':>12}"
    ]
    for row in rows:
        lines.append(
            f"{row.nodes:>6} {row.resources:>10} {row.seconds:>10.2f} {row.ms_per_node:>9.1f} "
            f"{row.max_join_depth:>11} {row.max_join_depth / base:>12.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.benchmark", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--nodes",
        type=int,
        nargs="+",
        default=list(DEFAULT_COUNTS),
        metavar="N",
        help=f"node counts to run (default: {' '.join(map(str, DEFAULT_COUNTS))})",
    )
    args = parser.parse_args(argv)
    counts = sorted(set(args.nodes))
    if counts[0] < 1:
        parser.error("node counts must be at least 1")
    # Warm-up: the first run pays for importing pulumi_aws and the components; not measured.
    run_program(STACK, config=config_for(1))
    rows = []
    for nodes in counts:
        rows.append(measure(nodes))
        print(f"measured {nodes} node(s)", file=sys.stderr, flush=True)
    print(format_table(rows))
    grown = [row for row in rows if row.max_join_depth != rows[0].max_join_depth]
    if grown:
        print(
            f"FAIL: the depth to a node's join grows with the node count "
            f"({rows[0].max_join_depth} at {rows[0].nodes} node(s), "
            + ", ".join(f"{r.max_join_depth} at {r.nodes}" for r in grown)
            + "): nodes wait on each other",
            file=sys.stderr,
        )
        return 1
    print(f"OK: depth to every join is {rows[0].max_join_depth} at every node count")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What one GPU node costs the engine and the control plane, counted from the registrations
(deterministic: no timing).

    python -m tools.node_cost dev                  # one pool of 1, 8, 64, 256, 1,000 nodes
    python -m tools.node_cost dev --nodes 9

Per node: its resources, the bytes of their inputs as the engine receives them, an estimate of
the state they leave (a `remote.Command` or `CopyToRemote` keeps its inputs in its outputs too,
pulumi-command `CommandOutputs` embeds `CommandInputs`; other resources about their inputs once
more), and its control-plane steps: the resources of the node that dial the control plane over
SSH. A node's resources are the instance `<node>` and every resource under its component.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass

from tools.harness.graph import Graph, Resource, unwrap

COMMAND_TYPES = ("command:remote:Command", "command:remote:CopyToRemote")
NODE_COMPONENT = "gpu-cluster:index:GpuNode"
DEFAULT_COUNTS = (1, 8, 64, 256, 1000)


@dataclass(frozen=True)
class NodeCost:
    node: str
    resources: int
    input_bytes: int
    state_bytes: int
    control_plane_steps: int
    names: tuple[str, ...]


def input_bytes(resource: Resource) -> int:
    """The size of a resource's inputs as JSON (secrets as their plain value)."""
    return len(json.dumps(unwrap(resource.inputs), sort_keys=True, separators=(",", ":")))


def state_bytes(resource: Resource) -> int:
    """An estimate of what the resource leaves in the state: its inputs, and its outputs, which
    repeat the inputs (a command's also carry its stdout and stderr, left out here)."""
    return 2 * input_bytes(resource)


def node_resources(graph: Graph, node: str) -> list[Resource]:
    """The instance `<node>` and everything under the node's component `<node>-node`."""
    component = next(
        (r for r in graph if r.type == NODE_COMPONENT and r.name == f"{node}-node"), None
    )
    if component is None:
        raise KeyError(f"no GpuNode component for {node}")
    under = {component.urn}
    found = [component]
    for resource in graph:  # registration order: parents before children
        if resource.parent in under:
            under.add(resource.urn)
            found.append(resource)
    return found


def _host(resource: Resource) -> str | None:
    connection = unwrap(resource.inputs.get("connection"))
    return connection.get("host") if isinstance(connection, dict) else None


def control_plane_hosts(graph: Graph) -> set[str]:
    """The addresses the control plane's own steps dial."""
    return {
        host
        for r in graph
        if r.type in COMMAND_TYPES and "ControlPlane" in r.urn.split("::")[2]
        if (host := _host(r))
    }


def cost(graph: Graph, node: str) -> NodeCost:
    resources = node_resources(graph, node)
    cp_hosts = control_plane_hosts(graph)
    return NodeCost(
        node=node,
        resources=len(resources),
        input_bytes=sum(input_bytes(r) for r in resources),
        state_bytes=sum(state_bytes(r) for r in resources),
        control_plane_steps=sum(
            1 for r in resources if r.type in COMMAND_TYPES and _host(r) in cp_hosts
        ),
        names=tuple(r.name for r in resources),
    )


def nodes_of(graph: Graph) -> list[str]:
    pools = unwrap(graph.outputs.get("nodePools")) or {}
    return [name for names in pools.values() for name in names]


@dataclass(frozen=True)
class FleetCost:
    nodes: int
    resources: int
    state_bytes: int
    control_plane_steps: int
    per_node: NodeCost


def fleet_cost(graph: Graph) -> FleetCost:
    """The whole stack's resources and state, its nodes' control-plane steps, and one node."""
    nodes = nodes_of(graph)
    costs = [cost(graph, node) for node in nodes]
    return FleetCost(
        nodes=len(nodes),
        resources=len(graph),
        state_bytes=sum(state_bytes(r) for r in graph),
        control_plane_steps=sum(c.control_plane_steps for c in costs),
        per_node=costs[0],
    )


def measure(stack: str, counts: Iterable[int]) -> list[FleetCost]:
    from tools.harness.stacks import fleet_config, run_program, stack_file

    pool = dict(stack_file(stack)["gpu-cluster:nodePools"][0])
    rows = []
    for count in counts:
        graph = run_program(stack, config=fleet_config(stack, count, pool))
        rows.append(fleet_cost(graph))
    return rows


def format_table(rows: list[FleetCost]) -> str:
    header = (
        f"{'nodes':>6} {'resources':>9} {'state MB':>9} {'CP steps':>8}"
        f" | per node: {'resources':>9} {'inputs KB':>9} {'state KB':>8} {'CP steps':>8}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        one = row.per_node
        lines.append(
            f"{row.nodes:>6} {row.resources:>9} {row.state_bytes / 1e6:>9.2f}"
            f" {row.control_plane_steps:>8} | per node: {one.resources:>9}"
            f" {one.input_bytes / 1e3:>9.1f} {one.state_bytes / 1e3:>8.1f}"
            f" {one.control_plane_steps:>8}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.node_cost", description=__doc__)
    parser.add_argument("stack", nargs="?", default="dev")
    parser.add_argument("--nodes", type=int, nargs="+", default=list(DEFAULT_COUNTS))
    args = parser.parse_args(argv)
    print(format_table(measure(args.stack, args.nodes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

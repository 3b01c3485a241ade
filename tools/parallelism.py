"""The `pulumi up --parallel` a stack needs so that GPU nodes never queue for the engine's slots.

    python -m tools.parallelism dev    # one number: pass it as --parallel or PULUMI_PARALLEL

The engine runs at most `--parallel` steps at once (default 4 x the CPUs of the machine running
it), and each GPU node holds one slot for its whole strict chain: with fewer slots than nodes,
nodes wait for each other although the graph has no edge between them. The recommendation: one
slot per node, plus a fixed allowance for the shared part (network, control plane, device
plugin, providers).

Why: docs/decisions/015-one-engine-slot-per-gpu-node.md
"""

from __future__ import annotations

import argparse
import sys

# Slots for what every stack shares: at most ~10 network/control-plane/plugin steps are ready
# at the same moment (tools.timeline on the dev stack); the rest is margin.
SHARED_SLOTS = 16


def recommended_parallelism(nodes: int, concurrent_steps_per_node: int = 1) -> int:
    """Slots for `nodes` GPU nodes whose chains run `concurrent_steps_per_node` steps at once."""
    if nodes < 0 or concurrent_steps_per_node < 1:
        raise ValueError(
            f"nodes must be >= 0 and concurrent_steps_per_node >= 1, got {nodes}, "
            f"{concurrent_steps_per_node}"
        )
    return nodes * concurrent_steps_per_node + SHARED_SLOTS


def stack_node_count(stack: str) -> int:
    """GPU nodes the stack file configures (the sum of `nodePools[].count`), validated the way
    `pulumi up` validates it."""
    from tools.harness import stacks

    # Encrypted values are never read here: the test secrets stand in for them.
    encrypted = {
        key: None
        for key, value in stacks.stack_file(stack).items()
        if isinstance(value, dict) and "secure" in value
    }
    settings = stacks.load_stack_settings(stack, config=encrypted)
    return sum(pool.count for pool in settings.node_pools)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.parallelism", description=__doc__.split("\n")[0]
    )
    parser.add_argument("stack", help="stack name (reads Pulumi.<stack>.yaml)")
    args = parser.parse_args(argv)
    from components.settings.load import ConfigError

    try:
        print(recommended_parallelism(stack_node_count(args.stack)))
    except ConfigError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

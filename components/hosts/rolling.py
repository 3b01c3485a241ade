"""Disruptive changes roll: a driver, container runtime or kubelet change reaches a joined node
only after the node was taken out, and at most `nodePools[].maxUnavailable` nodes of a pool are
out at once, with no edge between nodes in the graph.

Per node, through the Kubernetes API (components/kube/node_hooks.py): before a disruptive step
re-runs on a joined node, its hook takes a pool slot (a Lease), cordons and drains; after the
node's checks passed again, `<node>-in-service` uncordons it and gives the slot back. Both act
on `CHANGE`, the digest of what the disruptive steps install (`pinned_programs`): a node that
completed it (its Node's `gpu-cluster.io/node-change`) is not taken out, so a script edit or a
new login key re-runs the idempotent scripts without a roll. Why: docs/decisions/
007-disruptive-steps-roll-through-a-lease.md, 058-a-node-leaves-through-the-api.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from components.hosts import steps
from components.hosts.roll_budget import (
    API_WAIT_SECONDS,
    DRAIN_TIMEOUT_SECONDS,
    slot_seconds,
    slot_wait_seconds,
)


def change_digest(programs: Mapping[str, Mapping[str, str]]) -> str:
    """What `CHANGE` carries: sha256 over the disruptive steps' scripts and parameters
    ({script: params}), the pinned things a host gets (driver branch, toolkit version, Kubernetes
    minor). An edit of a script's text re-runs the idempotent script (an update) without a roll:
    draining every node for a reworded log line would be the harm the roll exists to avoid."""
    text = "\n".join(
        f"{script} {name}={programs[script][name]}"
        for script in sorted(programs)
        for name in sorted(programs[script])
    )
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class RollTiming:
    """How long a slot holds and how long a node waits for one, in seconds."""

    slot_seconds: int
    slot_wait_seconds: int
    drain_seconds: int = DRAIN_TIMEOUT_SECONDS

    @property
    def take_out_seconds(self) -> int:
        """The bound of taking a node out: waiting for the API, for a slot, then the drain."""
        return API_WAIT_SECONDS + self.slot_wait_seconds + self.drain_seconds


def roll_timing(validation_seconds: int) -> RollTiming:
    """A node's slot (`slot_seconds`) and its wait for one (`slot_wait_seconds`): a node still
    waiting when the wait is up fails naming the holders, and the next `up` goes on."""
    return RollTiming(
        slot_seconds=slot_seconds(validation_seconds),
        slot_wait_seconds=slot_wait_seconds(validation_seconds),
    )


def pinned_programs(
    installs: Mapping[str, Mapping[str, str]],
    kubernetes_minor: str,
    efa: Mapping[str, str] | None,
) -> dict[str, Mapping[str, str]]:
    """What CHANGE is a digest of: {name: parameters} of what the disruptive steps install,
    from the install steps' parameters by suffix. The names are the ones the steps had when the
    digest was defined (the kubelet upgrade had a step of its own, upgrade-node.sh): renaming
    one would change every node's digest and roll every node for nothing."""
    pinned: dict[str, Mapping[str, str]] = {
        steps.NOUVEAU.script: installs[steps.NOUVEAU.suffix],
        steps.DRIVER.script: installs[steps.DRIVER.suffix],
        steps.RUNTIME.script: installs[steps.RUNTIME.suffix],
        "upgrade-node.sh": {"KUBERNETES_MINOR": kubernetes_minor},
        steps.KUBE_TOOLS.script: installs[steps.KUBE_TOOLS.suffix],
    }
    if efa is not None:
        # Only EFA pools carry it: the digest of every other node stays what it was.
        pinned[steps.EFA.script] = efa
    return {name: params for name, params in pinned.items() if name is not None}

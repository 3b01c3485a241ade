"""A node's Kubernetes side, run by the program through the API with the credential it holds when
a hook runs (`ClusterAccess`), never by a step that dials the control plane or a credential
stored with a resource: `joins` (before a join: a dead machine's Node of the name goes), `leaves`
(before a join's delete: its machine's Node drained and deleted), `take_out` (before a disruptive
step's update on a joined node: slot, cordon, drain), `in_service` (after the node's checks:
labels, taints, the proof taint off, uncordon, slot back).

The shared hooks are registered under fixed names on every run, with or without nodes: the
engine finds a delete hook by the name the state stored. Why, with the engine's rules:
docs/decisions/058-a-node-leaves-through-the-api.md, 059-no-tenant-before-the-proof.md.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi

from components.hosts import steps
from components.hosts.roll_budget import API_WAIT_SECONDS
from components.kube.api import drain as drains
from components.kube.api import nodes, slots
from components.kube.api.client import ApiError, AsyncKubeApi, KubeApi, credential_of
from components.kube.api.nodes import Api, Clock, Say

JOINS = "gpu-cluster-node-joins"
LEAVES = "gpu-cluster-node-leaves"
IN_SERVICE = "gpu-cluster-node-in-service"
# Bound on the drain of a node that leaves (it goes whatever its pods do; a budget that allows
# no eviction fails the delete and names the pods).
LEAVE_DRAIN_SECONDS = 300
API_POLL_SECONDS = 5
# What a node's machine is called: an EC2 instance id, or an existing host's (node_machine.py).
MACHINE_ID = re.compile(r"(i|host)-[0-9a-f]+")
# How long the kubeconfig may take to resolve (its step ran long before any hook).
KUBECONFIG_WAIT_SECONDS = 60


@dataclass(frozen=True)
class ClusterAccess:
    """How the hooks reach the API: `kubeconfig`, the one accessor of the credential the
    Kubernetes provider uses (ControlPlane.kubeconfig), resolved when a hook runs; `unreachable`
    (controlPlane.unreachable), read from the program when a delete runs; `clock` for waits."""

    kubeconfig: pulumi.Input[str]
    unreachable: bool = False
    clock: Clock = field(default_factory=Clock)

    async def api(self) -> AsyncKubeApi:
        value = self.kubeconfig
        if isinstance(value, pulumi.Output):
            value = await asyncio.wait_for(value.future(), KUBECONFIG_WAIT_SECONDS)
        if not isinstance(value, str):
            raise RuntimeError("the cluster's kubeconfig is not known yet")
        return AsyncKubeApi(KubeApi(credential_of(value)))


def _say(args: pulumi.ResourceHookArgs) -> Say:
    return lambda message: pulumi.log.info(f"{args.name}: {message}")


async def answering(api: Api, clock: Clock, seconds: int = API_WAIT_SECONDS) -> None:
    """Wait (bounded) until the API server says /readyz ok."""
    deadline = clock.now() + seconds
    while True:
        try:
            await api.call("GET", "/readyz")
            return
        except (OSError, ApiError) as error:
            if clock.now() >= deadline:
                raise RuntimeError(
                    f"the Kubernetes API did not answer /readyz within {seconds}s: {error}"
                ) from error
        await clock.sleep(API_POLL_SECONDS)


def machine_of_step(name: str, inputs: Mapping[str, Any] | None) -> str:
    """The machine a host step is about: the first of its `triggers` (components/hosts/steps.py:
    Identity.HOST comes first), an EC2 instance id or an existing host's id (components/
    node_machine.py)."""
    triggers = (inputs or {}).get("triggers") or []
    if not triggers or not isinstance(triggers[0], str):
        raise RuntimeError(f"{name}: its triggers name no machine: {triggers!r}")
    if not MACHINE_ID.fullmatch(triggers[0]):
        raise RuntimeError(
            f"{name}: its machine must be an EC2 instance id (i-...) or an existing host's id "
            f"(host-...), got {triggers[0]!r}"
        )
    return triggers[0]


def node_of_join(name: str) -> str:
    return name.removesuffix(f"-{steps.JOIN.suffix}")


# ---------------------------------------------------------------- what the hooks do


async def leave(api: Api, node_name: str, machine: str, clock: Clock, say: Say) -> None:
    """Drain and delete the Node `machine` registered; another machine's is left alone."""
    await answering(api, clock)
    node = await nodes.read_node(api, node_name)
    if node is None:
        say(f"Node {node_name} not registered: nothing to drain")
        return
    if not nodes.registered_by(node, machine):
        say(
            f"Node {node_name} belongs to {nodes.machine_of(node)}, not to {machine} (this "
            "step's machine): the new machine's Node is left alone"
        )
        return
    await drains.drain(
        api,
        node_name,
        ready=nodes.is_ready(node),
        seconds=LEAVE_DRAIN_SECONDS,
        clock=clock,
        say=say,
    )
    await nodes.delete_node(api, node, say)


async def join(api: Api, node_name: str, machine: str, clock: Clock, say: Say) -> None:
    """Make room for `machine` to register `node_name`: a Node of that name that a machine gone
    since registered (not Ready) is drained without eviction and deleted; a Ready one that
    another machine registered stops the join, naming both."""
    await answering(api, clock)
    node = await nodes.read_node(api, node_name)
    if node is None or nodes.registered_by(node, machine):
        return
    owner = nodes.machine_of(node)
    if nodes.is_ready(node):
        raise RuntimeError(
            f"Node {node_name} is Ready and was registered by {owner}, not by {machine}: another "
            "machine still serves under this name. If it is gone, delete its Node "
            f"(kubectl delete node {node_name}) and run pulumi up again"
        )
    say(f"Node {node_name} of {owner} (gone, not Ready) makes room for {machine}")
    await drains.drain(api, node_name, ready=False, seconds=0, clock=clock, say=say)
    await nodes.delete_node(api, node, say)


@dataclass(frozen=True)
class Roll:
    """One node's roll: the slots of its pool it takes, its drain's bound and `change`, the
    digest of what its disruptive steps install (components/hosts/rolling.py)."""

    node_name: str
    slots: slots.Slots
    drain_seconds: int
    change: str


async def take_out(api: Api, roll: Roll, machine: str, clock: Clock, say: Say) -> None:
    """Before a disruptive step re-runs on a joined node that has not completed `roll.change`:
    a slot, the roll's cordon, a drain. A node not joined yet (or another machine's Node) and a
    node that completed this change (a script edit, a new login key) need neither."""
    await answering(api, clock)
    node = await nodes.read_node(api, roll.node_name)
    if node is None or not nodes.registered_by(node, machine):
        say(f"Node {roll.node_name} of {machine} not registered yet: nothing to take out")
        return
    if nodes.completed_change(node) == roll.change:
        say(f"Node {roll.node_name} already has change {roll.change[:12]}: no roll")
        return
    await slots.acquire(api, roll.slots, clock, say)
    node = await nodes.update_node(api, roll.node_name, nodes.cordon(roll.change))
    if node is None:
        raise RuntimeError(f"Node {roll.node_name} went away while it was being taken out")
    say(f"Node {roll.node_name} cordoned for change {roll.change[:12]}")
    await drains.drain(
        api,
        roll.node_name,
        ready=nodes.is_ready(node),
        seconds=roll.drain_seconds,
        clock=clock,
        say=say,
    )


@dataclass(frozen=True)
class InServiceInputs:
    """What `<node>-in-service` carries (its `environment`, components/kube/in_service.py)."""

    node_name: str
    machine: str
    wanted: nodes.InService
    slots: slots.Slots
    ready_seconds: int

    @classmethod
    def of(cls, environment: Mapping[str, str]) -> InServiceInputs:
        node_name = environment["NODE_NAME"]
        return cls(
            node_name=node_name,
            machine=environment["INSTANCE_ID"],
            wanted=nodes.InService(
                labels=environment["NODE_LABELS"],
                taints=environment["NODE_TAINTS"],
                change=environment["CHANGE"],
            ),
            slots=slots.Slots(
                pool=environment["POOL_NAME"],
                max_unavailable=int(environment["MAX_UNAVAILABLE"]),
                holder=node_name,
                hold_seconds=0,
                wait_seconds=0,
            ),
            ready_seconds=int(environment["READY_TIMEOUT_SECONDS"]),
        )


async def put_in_service(api: Api, inputs: InServiceInputs, clock: Clock, say: Say) -> None:
    """After the node's own checks: wait for Ready, then one write sets what the control plane
    owns on it and lifts the proof taint (and the roll's cordon); then the slot goes back."""
    await answering(api, clock)
    deadline = clock.now() + inputs.ready_seconds
    while True:
        node = await nodes.read_node(api, inputs.node_name)
        if node is None or not nodes.registered_by(node, inputs.machine):
            raise RuntimeError(
                f"Node {inputs.node_name} of {inputs.machine} is not registered: its join must "
                "have run first (look at the join step's output)"
            )
        if nodes.is_ready(node):
            break
        if clock.now() >= deadline:
            raise RuntimeError(
                f"Node {inputs.node_name} not Ready after {inputs.ready_seconds}s: it keeps its "
                "proof taint (and a roll's cordon); look at 'kubectl describe node "
                f"{inputs.node_name}' and 'journalctl -u kubelet' on the node"
            )
        await clock.sleep(API_POLL_SECONDS)
    await nodes.update_node(api, inputs.node_name, lambda n: nodes.put_in_service(n, inputs.wanted))
    say(f"Node {inputs.node_name} in service: labels {inputs.wanted.labels or 'none'}")
    await slots.release(api, inputs.slots, clock, say)


# ---------------------------------------------------------------- the hooks' callbacks


async def on_join_create(access: ClusterAccess, args: pulumi.ResourceHookArgs) -> None:
    """Before `<node>-join` is created: make room for its machine (`join`)."""
    machine = machine_of_step(args.name, args.new_inputs)
    api = await access.api()
    await join(api, node_of_join(args.name), machine, access.clock, _say(args))


async def on_join_delete(access: ClusterAccess, args: pulumi.ResourceHookArgs) -> None:
    """Before `<node>-join` is deleted or replaced: its machine's Node leaves (`leave`), from
    the machine its stored triggers name; with controlPlane.unreachable, nothing is dialled."""
    node, machine = node_of_join(args.name), machine_of_step(args.name, args.old_inputs)
    if access.unreachable:
        pulumi.log.warn(
            f"{args.name}: controlPlane.unreachable is true: Node {node} is NOT drained or "
            "deleted (docs/operations.md, a control plane that is gone)"
        )
        return
    api = await access.api()
    await leave(api, node, machine, access.clock, _say(args))


async def on_in_service(access: ClusterAccess, args: pulumi.ResourceHookArgs) -> None:
    """Before `<node>-in-service` is created or updated: `put_in_service`, from its inputs."""
    environment = (args.new_inputs or {}).get("environment") or {}
    api = await access.api()
    await put_in_service(api, InServiceInputs.of(environment), access.clock, _say(args))


async def on_disruptive_update(
    access: ClusterAccess, roll: Roll, args: pulumi.ResourceHookArgs
) -> None:
    """Before a disruptive step of the node is updated: `take_out`."""
    machine = machine_of_step(args.name, args.new_inputs)
    api = await access.api()
    await take_out(api, roll, machine, access.clock, _say(args))


class NodeHooks:
    """The hooks of every node of the stack, registered once per run (with zero nodes too):
    `joins` and `leaves` bind to each `<node>-join`, `in_service` to each `<node>-in-service`;
    `take_out(roll)` makes the one hook of a node's disruptive steps."""

    def __init__(self, access: ClusterAccess):
        self.access = access

        async def joins(args: pulumi.ResourceHookArgs) -> None:
            await on_join_create(access, args)

        async def leaves(args: pulumi.ResourceHookArgs) -> None:
            await on_join_delete(access, args)

        async def in_service(args: pulumi.ResourceHookArgs) -> None:
            await on_in_service(access, args)

        self.joins = pulumi.ResourceHook(JOINS, joins)
        self.leaves = pulumi.ResourceHook(LEAVES, leaves)
        self.in_service = pulumi.ResourceHook(IN_SERVICE, in_service)

    def join_binding(self) -> pulumi.ResourceHookBinding:
        return pulumi.ResourceHookBinding(before_create=[self.joins], before_delete=[self.leaves])

    def in_service_binding(self) -> pulumi.ResourceHookBinding:
        return pulumi.ResourceHookBinding(
            before_create=[self.in_service], before_update=[self.in_service]
        )

    def take_out(self, roll: Roll) -> pulumi.ResourceHookBinding:
        access = self.access

        async def take_out(args: pulumi.ResourceHookArgs) -> None:
            await on_disruptive_update(access, roll, args)

        hook = pulumi.ResourceHook(f"{roll.node_name}-take-out", take_out)
        return pulumi.ResourceHookBinding(before_update=[hook])

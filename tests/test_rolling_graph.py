"""Disruptive changes roll, on the registered graph: each node's roll (its disruptive steps take
it out first, through their hook; `<node>-in-service` puts it back after its checks) lives in its
own chain, never waits on another node (the pool's slots, Leases in the cluster, do that at run
time), and a Kubernetes minor upgrade reaches the control plane before any node's kubelet.

And on two runs of the program (tools/lifecycle.py, the providers' replace rules): what a
`kubernetesVersion` one minor up makes the engine do."""

from __future__ import annotations

import re
from functools import cache
from itertools import pairwise

import pytest

from components.hosts import pins, rolling, steps
from components.kube import node_hooks
from tests.helpers import graphs as shared
from tools import lifecycle
from tools.harness.graph import Graph, Resource, script_params
from tools.harness.stacks import STACKS, run_program, stack_file
from tools.lifecycle import Action


@cache
def graph(stack: str) -> Graph:
    return shared.stack_graph(stack)


def nodes(g: Graph) -> list[str]:
    return lifecycle.node_names(g)


def owned_by(g: Graph, node: str) -> set[str]:
    return {r.urn for r in g.find(lambda r: r.name == node or r.name.startswith(f"{node}-"))}


def at(g: Graph, node: str, row: steps.Step) -> Resource:
    return g.named(row.resource_name(node))


def cluster(stack: str) -> str:
    return stack_file(stack)["gpu-cluster:clusterName"]


ROLLED_CHAIN = (
    steps.NOUVEAU,
    steps.DRIVER,
    steps.RUNTIME,
    steps.KUBE_TOOLS,
    steps.JOIN_TOKEN,
    steps.JOIN,
)


def in_service(g: Graph, node: str) -> dict[str, str]:
    return at(g, node, steps.IN_SERVICE).plain_inputs()["environment"]


@pytest.mark.parametrize("stack", STACKS)
def test_a_nodes_roll_is_its_own_hooks_and_dials_no_control_plane(stack):
    """Each disruptive step takes its node out first (one hook of the node's own, before an
    update); the put in service runs no command, so it dials nothing and holds no login key."""
    g = graph(stack)
    everyone = {n: owned_by(g, n) for n in nodes(g)}
    for node in everyone:
        others = set().union(*(urns for n, urns in everyone.items() if n != node))
        for row in steps.disruptive_steps():
            resource = at(g, node, row)
            assert resource.hooks == {"before_update": [f"{node}-take-out"]}, resource.urn
        resource = at(g, node, steps.IN_SERVICE)
        assert resource.hooks == {
            "before_create": [node_hooks.IN_SERVICE],
            "before_update": [node_hooks.IN_SERVICE],
        }, resource.urn
        assert not g.ancestors(resource) & others, f"{resource.urn} waits on another node"
        inputs = resource.plain_inputs()
        assert not {"create", "update", "delete"} & inputs.keys(), f"{resource.urn}: {inputs}"
        assert "privateKey" not in inputs["connection"], f"{resource.urn}: holds a login key"
        assert not {
            r.name for r in g.of_type(lifecycle.COMMAND) if r.name.endswith(("-drain", "-uncordon"))
        }, "a step on the control plane per node"


@pytest.mark.parametrize("stack", STACKS)
def test_no_resource_of_a_node_waits_on_another_node(stack):
    g = graph(stack)
    everyone = {n: owned_by(g, n) for n in nodes(g)}
    for node, own in everyone.items():
        others = set().union(*(urns for n, urns in everyone.items() if n != node))
        for urn in own:
            tangled = g.ancestors(g.by_urn[urn]) & others
            assert not tangled, f"{urn} waits on {sorted(tangled)}"


@pytest.mark.parametrize("stack", STACKS)
def test_a_change_goes_out_then_the_steps_then_checks_then_in_service(stack):
    g = graph(stack)
    validated = bool(g.of_type("kubernetes:batch/v1:Job"))
    for node in nodes(g):
        # The join's own checks (Ready, every GPU) come with it.
        chain = [at(g, node, row) for row in ROLLED_CHAIN]
        if validated:
            chain.append(g.named(f"{node}-validation-job"))
        chain.append(at(g, node, steps.IN_SERVICE))
        for before, after in pairwise(chain):
            assert g.depends_on(after, before), f"{after.urn} does not wait for {before.urn}"


@pytest.mark.parametrize("stack", STACKS)
def test_in_service_carries_the_pools_slots_and_the_change(stack):
    g = graph(stack)
    pools = {p["name"]: p for p in stack_file(stack)["gpu-cluster:nodePools"]}
    for node in nodes(g):
        pool = next(p for name, p in pools.items() if node.startswith(f"{cluster(stack)}-{name}-"))
        environment = in_service(g, node)
        assert environment["POOL_NAME"] == pool["name"], environment
        assert environment["MAX_UNAVAILABLE"] == str(pool.get("maxUnavailable", 1)), environment
        assert environment["CHANGE"] == script_params(at(g, node, steps.JOIN))["CHANGE"], node


@pytest.mark.parametrize("stack", STACKS)
def test_no_node_moves_its_kubelet_before_the_control_plane(stack):
    """Managed: the control plane's kubeadm upgrade; existing: its version-skew check. Both come
    before every node's kube-tools (which moves a joined node's kubelet)."""
    g = graph(stack)
    managed = stack_file(stack)["gpu-cluster:controlPlane"]["mode"] == "managed"
    gate = g.named(f"{cluster(stack)}-{'upgrade' if managed else 'version-skew'}")
    for node in nodes(g):
        assert g.depends_on(at(g, node, steps.KUBE_TOOLS), gate), f"{node}: not after {gate.urn}"
    if managed:
        assert g.depends_on(g.named(f"{cluster(stack)}-kube-tools"), gate)


# ---------------------------------------------------------------- two runs


def _plan(stack: str, **config) -> lifecycle.Plan:
    return lifecycle.plan(graph(stack), run_program(stack, config=config))


def test_a_kubernetes_minor_up_upgrades_the_control_plane_first_and_rolls_every_node():
    plan = _plan("dev", kubernetesVersion="1.36")
    after = run_program("dev", config={"kubernetesVersion": "1.36"})
    name = cluster("dev")
    running = stack_file("dev")["gpu-cluster:kubernetesVersion"]
    sandbox_moves = pins.PAUSE_IMAGES[running] != pins.PAUSE_IMAGES["1.36"]
    upgrade = plan.named(f"{name}-upgrade")
    assert upgrade.action is Action.RERUN, lifecycle.render(plan)
    assert script_params(after.named(f"{name}-upgrade"))["KUBERNETES_MINOR"] == "1.36"
    instances = [c.name for c in plan.by_action(Action.REPLACE) if c.type.startswith("aws:")]
    assert instances == [], lifecycle.render(plan)
    for node in nodes(after):
        change = plan.named(steps.KUBE_TOOLS.resource_name(node))
        assert change.action is Action.RERUN, f"{change.urn}: {change.action}"
        # The put in service runs no command: an update its hook acts on.
        change = plan.named(steps.IN_SERVICE.resource_name(node))
        assert change.action is Action.UPDATE, f"{change.urn}: {change.action}"
        change = plan.named(steps.DRIVER.resource_name(node))
        assert change.action is Action.UNCHANGED, f"{change.urn}: {change.action}"
        # containerd's sandbox image follows the pause image the new minor's kubeadm lists
        # (pins.PAUSE_IMAGES): where it moves, the runtime step re-runs, taken out by its hook.
        runtime = plan.named(steps.RUNTIME.resource_name(node))
        assert runtime.action is (Action.RERUN if sandbox_moves else Action.UNCHANGED), runtime
        assert at(after, node, steps.RUNTIME).hooks["before_update"] == [f"{node}-take-out"]
        # join-node.sh carries the minor too; on a joined node its re-run joins nothing and
        # checks the node again (Ready, every GPU).
        change = plan.named(steps.JOIN.resource_name(node))
        assert change.action is Action.RERUN, f"{change.urn}: {change.action}"
        # The engine runs updates in dependency order: the control plane's upgrade finishes
        # before this node's kube-tools update (which moves its kubelet) starts.
        assert after.depends_on(at(after, node, steps.KUBE_TOOLS), after.named(f"{name}-upgrade"))
        disrupted = ["runtime"] if sandbox_moves else []
        assert plan.nodes[node].disrupted == [*disrupted, "kube-tools"], node


def test_a_kubernetes_minor_up_rolls_a_pool_node_by_node_through_its_slots():
    overrides = {
        "kubernetesVersion": "1.36",
        "nodePools": [
            {**p, "count": 3, "maxUnavailable": 1}
            for p in stack_file("dev")["gpu-cluster:nodePools"]
        ],
    }
    after = run_program("dev", config=overrides)
    rolls = [in_service(after, n) for n in nodes(after)]
    assert len(rolls) == 3
    assert {(r["POOL_NAME"], r["MAX_UNAVAILABLE"]) for r in rolls} == {("a10g", "1")}
    assert len({r["CHANGE"] for r in rolls}) == 1, "nodes of one pool roll for one change"
    before = run_program("dev", config={**overrides, "kubernetesVersion": "1.35"})
    assert {in_service(before, n)["CHANGE"] for n in nodes(before)} != {rolls[0]["CHANGE"]}


def test_a_script_edit_without_a_pinned_change_rolls_nothing():
    """The change a roll is for is the disruptive steps' scripts and parameters: a reworded log
    line re-runs the idempotent scripts (updates) but drains no node."""
    digest = rolling.change_digest({"install-driver.sh": {"DRIVER_BRANCH": "580"}})
    assert digest == rolling.change_digest({"install-driver.sh": {"DRIVER_BRANCH": "580"}})
    assert digest != rolling.change_digest({"install-driver.sh": {"DRIVER_BRANCH": "570"}})


def _host_bound(step: Resource) -> tuple[int, int]:
    """(bound on the host, the engine's create timeout) of a registered step."""
    kill, bound = map(int, re.search(r"timeout -k (\d+) (\d+) ", step.inputs["create"]).groups())
    return bound + kill, int(step.custom_timeouts["create"].removesuffix("s"))


@pytest.mark.parametrize("stack", STACKS)
def test_a_slot_outlasts_the_change_it_covers_and_a_dial(stack):
    """What a slot covers, read from the registered steps: every host step from the first
    disruptive one at its bound on the host (the join's includes its capacity check), the
    validation Job's deadline and the put in service, plus at least one SSH dial (the engine's
    margin over a step's host bound). A shorter slot expires while its node still changes, and
    another node of the pool starts: two down at once."""
    g = graph(stack)
    for node in nodes(g):
        first = steps.NODE_STEPS.index(steps.disruptive_steps()[0])
        covered = [at(g, node, row) for row in steps.NODE_STEPS[first:] if row.script is not None]
        bounds = [_host_bound(step) for step in covered]
        job = g.named(f"{node}-validation-job").plain_inputs()
        deadline = job["spec"]["activeDeadlineSeconds"]
        dial = max(engine - host for host, engine in bounds)
        needed = (
            sum(host for host, _ in bounds) + deadline + dial + steps.IN_SERVICE.timeout_seconds
        )
        slot = rolling.roll_timing(validation_seconds=deadline).slot_seconds
        assert slot >= needed, f"{node}: slot {slot}s < {needed}s"

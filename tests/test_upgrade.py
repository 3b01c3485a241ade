"""A running stack moves to this version without draining, resetting or re-joining a node, and
without running a GPU Job again on a node in service.

The states are what each pinned stack registered at 8c2ffef (the version before each node's
control-plane sessions and state were cut) and at 1552dff (the version before the Kubernetes side
of a node moved to the API, whose `<node>-drain` stores drain-node.sh as its delete):
tests/deployed/, `python -m tools.harness.deployed`. The plan follows the engine's rules
(tools/lifecycle.py: aliases, the providers' replace rules, `replace_with`,
`replacement_trigger`, `ignore_changes`); a stored delete runs when its step is deleted or
replaced (pulumi-command commandController.go `Delete` runs the stored `delete`)."""

from __future__ import annotations

import pytest

from components.hosts import steps
from components.kube.manifests import NODE_CHANGE_ANNOTATION
from tools import lifecycle, recovery
from tools.harness import deployed
from tools.harness.graph import Graph, unwrap
from tools.harness.identity import VARIANTS
from tools.harness.stacks import ROOT, STACKS, run_program

DEPLOYED = ROOT / "tests" / "deployed"
RELEASES = ("8c2ffef", "1552dff")
PINNED = [*STACKS, *VARIANTS]
# A GPU Job's pod template carries its node's roll digest (`CHANGE`, what the node's disruptive
# steps install): components/kube/validation.py, nccl_efa_validation.py.
NODE_CHANGE = f"spec.template.metadata.annotations.{NODE_CHANGE_ANNOTATION}"
JOB = "kubernetes:batch/v1:Job"


def _graphs(pinned: str, release: str = "8c2ffef") -> tuple[Graph, Graph]:
    stack, config = VARIANTS.get(pinned, (pinned, None))
    state = deployed.load(DEPLOYED / release / f"{pinned}.json.gz")
    return state, run_program(stack, config=config)


def _plan(pinned: str, release: str = "8c2ffef") -> lifecycle.Plan:
    return lifecycle.plan(*_graphs(pinned, release))


def _roll_digest(graph: Graph, node: str) -> str | None:
    """The node's `CHANGE`: its put in service's, its drain step's at 1552dff, its
    `<node>-roll-drain`'s at 8c2ffef."""
    return lifecycle.roll_change(graph, node)


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("pinned", PINNED)
def test_no_node_is_drained_reset_rejoined_or_revalidated(pinned, release):
    plan = _plan(pinned, release)
    assert plan.nodes, f"{pinned}: no GPU nodes to upgrade"
    harmed = {
        node: impact.summary()
        for node, impact in plan.nodes.items()
        if impact.drained or impact.reset or impact.rejoined or impact.revalidated
    }
    assert not harmed, f"{pinned}: the upgrade harms running nodes: {harmed}"


@pytest.mark.parametrize("pinned", PINNED)
def test_no_machine_or_cluster_object_is_replaced(pinned):
    """Nothing is replaced but the GPU Jobs of the one roll the CHANGELOG announces (issue 35,
    "every GPU node rolls once"): what every node's disruptive steps install changed (the
    runtime's containerd pin for all, GSP and module type on g4dn/g5, the CUDA repository on
    NVSwitch types, the EFA installer), so every node's roll digest moved, and the Jobs that
    carry it in their pod template are re-created inside that roll, after the drain: each
    node's validation Job for its node-change annotation, the NCCL Job replaced with it, and an
    EFA pool's NCCL-EFA Job for both. Any other reason, object or node fails here."""
    before, after = _graphs(pinned)
    plan = lifecycle.plan(before, after)
    nodes = lifecycle.node_names(before)
    moved = {
        node: new
        for node in nodes
        if (new := _roll_digest(after, node)) and new != _roll_digest(before, node)
    }
    assert sorted(moved) == sorted(nodes), f"{pinned}: nodes that do not roll: {moved.keys()}"
    validation_jobs = {steps.VALIDATION_JOB.resource_name(node) for node in nodes}
    replaced = plan.by_action(lifecycle.Action.REPLACE, lifecycle.Action.BLOCKED)
    replaced_urns = {c.urn for c in replaced}
    unexplained = []
    for change in replaced:
        new = after.by_urn[change.urn]
        reasons = set(change.reason.split(", "))
        template = unwrap(new.inputs).get("spec", {}).get("template", {})
        annotations = template.get("metadata", {}).get("annotations", {})
        digests = set(annotations.get(NODE_CHANGE_ANNOTATION, "").split())
        with_replaced = bool(new.replace_with) and set(new.replace_with) <= replaced_urns
        if (
            change.action is lifecycle.Action.REPLACE
            and change.type == JOB
            and reasons <= {NODE_CHANGE, "replaceWith"}
            and set(change.changed) <= {NODE_CHANGE}
            and (NODE_CHANGE not in reasons or (digests and digests <= set(moved.values())))
            and ("replaceWith" not in reasons or with_replaced)
        ):
            continue
        unexplained.append(f"{change.name} ({change.type}: {change.reason})")
    assert not unexplained, f"{pinned}: replaced by the upgrade, not by the roll: {unexplained}"
    # The roll validates every node again: each node's validation Job, for its digest alone.
    by_node_change = {c.name for c in replaced if c.reason == NODE_CHANGE}
    assert validation_jobs <= by_node_change, sorted(validation_jobs - by_node_change)


@pytest.mark.parametrize("release", RELEASES)
def test_the_steps_the_upgrade_drops_run_no_delete_hook(release):
    """What a running stack loses: steps without a stored delete hook (pulumi-command deletes
    those without dialling) and the per-node validation components. The one step that stored a
    drain (`<node>-drain`, `<node>-node-ready` before it) is taken over by `<node>-in-service`:
    an update that stores it without its `delete` and runs no command."""
    plan = _plan("prod", release)
    before = deployed.load(DEPLOYED / release / "prod.json.gz")
    for change in plan.by_action(lifecycle.Action.DELETE):
        old = before.by_urn[change.urn]
        hook = old.inputs.get("delete")
        assert not hook, f"{change.urn}: deleted with a stored delete hook"
    node = lifecycle.node_names(before)[0]
    dropped = {
        c.name.removeprefix(f"{node}-")
        for c in plan.by_action(lifecycle.Action.DELETE)
        if c.type == lifecycle.COMMAND and c.name.startswith(f"{node}-")
    }
    assert dropped == DROPPED[release], dropped
    taken = plan.named(steps.IN_SERVICE.resource_name(node))
    assert taken.action is lifecycle.Action.UPDATE, f"{taken.urn}: {taken.action}"
    assert recovery.hook_runs(plan, before, _graphs("prod", release)[1]) == []


DROPPED = {
    "8c2ffef": {
        "authorized-keys",  # wait-ready writes the keys now
        "roll-drain",  # the roll's take-out is the disruptive steps' hook
        "kube-upgrade",  # kube-tools moves a joined node to a new minor
        "join-token",  # a Secret through the API
        "labels",  # set by the control plane once the node is proven
        "gpu-capacity",  # the join waits for the GPUs through the API
        "uncordon",  # its work is `<node>-in-service`'s hook
    },
    # The uncordon stored no delete; `-drain`'s state goes on as `-in-service`.
    "1552dff": {"uncordon"},
}


def test_the_plan_sees_a_drain_hook_run():
    """The check above can fail: a program without the put in service (which takes over the
    drain step's state) lets the engine delete `<node>-drain` and run its stored drain."""
    before = deployed.load(DEPLOYED / "1552dff" / "dev.json.gz")
    after = run_program("dev")
    after.resources = [r for r in after if not r.name.endswith("-in-service")]
    after.by_urn = {r.urn: r for r in after.resources}
    plan = lifecycle.plan(before, after)
    assert all(impact.drained for impact in plan.nodes.values())

"""A running stack moves to this version without draining, resetting or re-joining a node, and
without running a GPU Job again on a node in service.

The state is what each pinned stack registered at 8c2ffef, the version before each node's
control-plane sessions and state were cut (tests/deployed/, `python -m tools.harness.deployed`).
The plan follows the engine's rules (tools/lifecycle.py: aliases, the providers' replace rules,
`replace_with`, `replacement_trigger`); a stored delete hook runs when its step is deleted or
replaced (pulumi-command commandController.go `Delete` runs the stored `delete`)."""

from __future__ import annotations

import pytest

from components.hosts import steps
from components.kube.manifests import NODE_CHANGE_ANNOTATION
from tools import lifecycle
from tools.harness import deployed
from tools.harness.graph import Graph, script_params, unwrap
from tools.harness.identity import VARIANTS
from tools.harness.stacks import ROOT, STACKS, run_program

DEPLOYED = ROOT / "tests" / "deployed" / "8c2ffef"
PINNED = [*STACKS, *VARIANTS]
# A GPU Job's pod template carries its node's roll digest (`CHANGE`, what the node's disruptive
# steps install): components/kube/validation.py, nccl_efa_validation.py.
NODE_CHANGE = f"spec.template.metadata.annotations.{NODE_CHANGE_ANNOTATION}"
JOB = "kubernetes:batch/v1:Job"


def _graphs(pinned: str) -> tuple[Graph, Graph]:
    stack, config = VARIANTS.get(pinned, (pinned, None))
    return deployed.load(DEPLOYED / f"{pinned}.json.gz"), run_program(stack, config=config)


def _plan(pinned: str) -> lifecycle.Plan:
    return lifecycle.plan(*_graphs(pinned))


def _roll_digest(graph: Graph, node: str) -> str | None:
    """The node's `CHANGE`, from its drain step (`<node>-roll-drain` at 8c2ffef)."""
    names = (steps.DRAIN.resource_name(node), f"{node}-roll-drain")
    return next((script_params(r)["CHANGE"] for r in graph if r.name in names), None)


@pytest.mark.parametrize("pinned", PINNED)
def test_no_node_is_drained_reset_rejoined_or_revalidated(pinned):
    plan = _plan(pinned)
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


def test_the_steps_the_upgrade_drops_run_no_delete_hook():
    """What a running stack loses: steps without a stored delete hook (pulumi-command deletes
    those without dialling) and the per-node validation components."""
    plan = _plan("prod")
    before = deployed.load(DEPLOYED / "prod.json.gz")
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
    assert dropped == {
        "authorized-keys",  # wait-ready writes the keys now
        "roll-drain",  # `<node>-drain`, which continues node-ready, drains for a roll
        "kube-upgrade",  # kube-tools moves a joined node to a new minor
        "join-token",  # a Secret through the API
        "labels",  # set at join, reconciled by the uncordon step
        "gpu-capacity",  # the join waits for the GPUs through the API
    }, dropped


def test_the_plan_sees_a_drain_hook_run():
    """The check above can fail: a program that drops the drain step drains every node."""
    before = deployed.load(DEPLOYED / "dev.json.gz")
    after = run_program("dev")
    after.resources = [r for r in after if not r.name.endswith("-drain")]
    after.by_urn = {r.urn: r for r in after.resources}
    plan = lifecycle.plan(before, after)
    assert all(impact.drained for impact in plan.nodes.values())

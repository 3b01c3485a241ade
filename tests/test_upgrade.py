"""A running stack moves to this version without draining, resetting or re-joining a node, and
without running a GPU Job again on a node in service.

The state is what each pinned stack registered at 8c2ffef, the version before each node's
control-plane sessions and state were cut (tests/deployed/, `python -m tools.harness.deployed`).
The plan follows the engine's rules (tools/lifecycle.py: aliases, the providers' replace rules,
`replace_with`, `replacement_trigger`); a stored delete hook runs when its step is deleted or
replaced (pulumi-command commandController.go `Delete` runs the stored `delete`)."""

from __future__ import annotations

import pytest

from tools import lifecycle
from tools.harness import deployed
from tools.harness.identity import VARIANTS
from tools.harness.stacks import ROOT, STACKS, run_program

DEPLOYED = ROOT / "tests" / "deployed" / "8c2ffef"
PINNED = [*STACKS, *VARIANTS]


def _plan(pinned: str) -> lifecycle.Plan:
    stack, config = VARIANTS.get(pinned, (pinned, None))
    before = deployed.load(DEPLOYED / f"{pinned}.json.gz")
    return lifecycle.plan(before, run_program(stack, config=config))


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
    plan = _plan(pinned)
    replaced = [
        f"{c.name} ({c.type}: {c.reason})"
        for c in plan.by_action(lifecycle.Action.REPLACE, lifecycle.Action.BLOCKED)
    ]
    assert not replaced, f"{pinned}: replaced by the upgrade: {replaced}"


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

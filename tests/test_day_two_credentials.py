"""Which credential each delete runs with, in the `up`s that change credentials: a scale-down, a
lost machine's recovery and the upgrade from 1552dff, each in the same `up` as a login-key
rotation (a new `sshPrivateKey`) and a host-key rotation (a new `controlPlane.hostKey` of prod's
existing control plane).

A stored delete runs over the connection its resource stored (pulumi step.go `DeleteStep.Apply`
sends `s.old.Inputs`; pulumi-command remote/commandController.go `Delete` runs `props.Delete` over
`props.Connection`), after every create and update of the `up` (deployment_executor.go), so after
the control plane's wait-ready wrote only the new login key; a node hook runs in the program,
with the credential it holds then. tools/recovery.py `hook_runs` models both, and the day-two
plan prints them (`render_runs`)."""

from __future__ import annotations

import copy
from functools import cache

import pytest

from components.kube import node_hooks
from tools import lifecycle, recovery
from tools.harness import deployed
from tools.harness.graph import Graph
from tools.harness.mocks import ed25519_key
from tools.harness.stacks import ROOT, run_program, stack_file
from tools.recovery import Credential

ROTATED = {"sshPrivateKey": ed25519_key("rotated login")["privateKeyOpenssh"]}
NEW_HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHr1dWDZ5x9c3Sx0n9cFRXH6Rz7m0c5bH0Jj4Pj6f8Nn"
UPGRADED_FROM = ROOT / "tests" / "deployed" / "1552dff"


def _config(*, fewer: bool = False, host_key: bool = False) -> dict:
    """prod's config with its first pool one node smaller and/or its control plane's host key
    rotated."""
    config: dict = {}
    if fewer:
        pools = copy.deepcopy(stack_file("prod")["gpu-cluster:nodePools"])
        pools[0]["count"] -= 1
        config["nodePools"] = pools
    if host_key:
        config["controlPlane"] = dict(stack_file("prod")["gpu-cluster:controlPlane"])
        config["controlPlane"]["hostKey"] = NEW_HOST_KEY
    return config


ROTATIONS = {
    "login key": {"secrets": ROTATED},
    "host key": {"host_key": True},
}


def _after(rotation: str, **kw) -> Graph:
    options = ROTATIONS[rotation]
    config = _config(host_key=options.get("host_key", False), **kw)
    return run_program("prod", config=config, secrets=options.get("secrets"))


@cache
def _prod() -> Graph:
    return run_program("prod")


def _removed_node(before: Graph, after: Graph) -> str:
    (node,) = set(lifecycle.node_names(before)) - set(lifecycle.node_names(after))
    return node


@pytest.mark.parametrize("rotation", ROTATIONS)
def test_a_scale_down_in_a_rotation_drains_through_the_api_and_nothing_fails(rotation):
    before, after = _prod(), _after(rotation, fewer=True)
    plan = lifecycle.plan(before, after)
    node = _removed_node(before, after)
    runs = recovery.hook_runs(plan, before, after)
    assert [(r.name, r.program, r.credential) for r in runs] == [
        (f"{node}-join", node_hooks.LEAVES, Credential.LIVE_API)
    ], runs
    assert not any(r.fails for r in runs), recovery.render_runs(runs)
    assert plan.nodes[node].drained, plan.nodes[node]


@pytest.mark.parametrize("rotation", ROTATIONS)
def test_a_recovery_in_a_rotation_drains_through_the_api_and_nothing_fails(rotation):
    before = _prod()
    node = lifecycle.node_names(before)[0]
    state = recovery.refreshed(before, [node])
    after = _after(rotation)
    runs = recovery.hook_runs(lifecycle.plan(state, after), state, after)
    assert {r.credential for r in runs} == {Credential.LIVE_API}, runs
    assert {r.program for r in runs} == {node_hooks.LEAVES, node_hooks.JOINS}, runs
    assert not any(r.fails for r in runs), recovery.render_runs(runs)


@pytest.mark.parametrize("rotation", ROTATIONS)
def test_the_upgrade_in_a_rotation_runs_no_stored_delete(rotation):
    before = deployed.load(UPGRADED_FROM / "prod.json.gz")
    after = _after(rotation)
    plan = lifecycle.plan(before, after)
    assert recovery.hook_runs(plan, before, after) == [], lifecycle.render(plan)
    assert not any(i.drained or i.reset or i.rejoined for i in plan.nodes.values())


@pytest.mark.parametrize("rotation", ROTATIONS)
def test_the_upgrade_with_a_scale_down_in_a_rotation_is_said_to_be_stuck(rotation):
    """The removed node's `<node>-drain` of 1552dff is not in the program, so nothing takes its
    state over: the engine runs its stored drain over its stored connection, which the rotation
    made stale. The plan says so (upgrade first, then scale down)."""
    before = deployed.load(UPGRADED_FROM / "prod.json.gz")
    after = _after(rotation, fewer=True)
    node = _removed_node(before, after)
    runs = recovery.hook_runs(lifecycle.plan(before, after), before, after)
    (stored,) = [r for r in runs if r.credential is Credential.STORED_CONNECTION]
    assert stored.name == f"{node}-drain" and stored.program == "drain-node.sh", stored
    assert "stack is stuck" in stored.fails, stored
    assert f"Fails: {node}-drain: " in recovery.render_runs(runs)
    # Without the rotation the same stored drain dials with a connection that still works.
    plain = run_program("prod", config=_config(fewer=True))
    (ok,) = recovery.hook_runs(lifecycle.plan(before, plain), before, plain)
    assert not ok.fails, ok


@pytest.mark.parametrize("rotation", ROTATIONS)
def test_the_earlier_design_was_stuck_by_a_scale_down_in_a_rotation(rotation):
    """What finding 1 of issue 40 is, planned: at 1552dff a scale-down in a rotation runs the
    removed node's stored drain with the stale connection."""
    with lifecycle.program_of("1552dff") as checkout:
        options = ROTATIONS[rotation]
        config = _config(fewer=True, host_key=options.get("host_key", False))
        before = run_program("prod", program=checkout / "__main__.py")
        after = run_program(
            "prod", config=config, secrets=options.get("secrets"), program=checkout / "__main__.py"
        )
    runs = recovery.hook_runs(lifecycle.plan(before, after), before, after)
    assert [r.credential for r in runs] == [Credential.STORED_CONNECTION], runs
    assert "stack is stuck" in runs[0].fails, runs

"""Recovery without harm: a machine lost (terminated, spot-reclaimed) and recovered with
`pulumi refresh` + `pulumi up`, or replaced on purpose with `pulumi up --replace <its URN>`,
ends with its node drained and deleted once, before the new machine joins, and every other
node untouched.

The plans follow the engine's rules (tools/recovery.py and tools/lifecycle.py cite them): a
refresh drops a terminated instance, the next `up` creates it and replaces what it identifies;
the join's stored before-delete hook runs for the machine its stored triggers name, through the
API with the credential the program holds then; a delete-before-replace step is deleted before
anything that waits for its replacement. The hook itself runs against a fake API server.
"""

from __future__ import annotations

import pytest

from components.hosts import steps
from components.kube import node_hooks
from components.kube.api.nodes import Clock
from tests.helpers.fake_kube_api import FakeApiServer, run_async
from tools import lifecycle, recovery
from tools.harness.stacks import run_program

INSTANCE = "aws:ec2/instance:Instance"


@pytest.fixture(scope="module")
def staging():
    """staging: two l4 nodes (spot) and one l40s node; the program run once."""
    return run_program("staging")


def _node(graph, pool: str) -> str:
    return next(n for n in lifecycle.node_names(graph) if f"-{pool}-" in n)


def _recovered(graph, node: str):
    state = recovery.refreshed(graph, [node])
    after = run_program("staging")
    return state, after, lifecycle.plan(state, after)


def test_refresh_and_up_recreate_the_lost_machine_and_replace_only_its_steps(staging):
    node = _node(staging, "l4")
    _, _, plan = _recovered(staging, node)
    assert plan.named(node).action is lifecycle.Action.CREATE, lifecycle.render(plan)
    touched = {c.name for c in plan.changes if c.action is not lifecycle.Action.UNCHANGED}
    assert all(name == node or name.startswith(f"{node}-") for name in touched), touched
    # The new machine gets its scripts: an update of the copy for a new address alone would
    # copy nothing (pulumi-command copyController.go `Update`).
    scripts = plan.named(f"{node}-scripts")
    assert scripts.action is lifecycle.Action.REPLACE, f"{scripts.urn}: {scripts.action}"
    for other, impact in plan.nodes.items():
        if other != node:
            assert impact.summary() == "untouched", f"{other}: {impact.summary()}"
    assert plan.nodes[node].rejoined, plan.nodes[node]


def test_the_lost_machines_node_leaves_by_its_own_instance_id_before_the_new_one_joins(staging):
    node = _node(staging, "l4")
    state, after, plan = _recovered(staging, node)
    runs = recovery.hook_runs(plan, state, after)
    join = steps.JOIN.resource_name(node)
    leaves = [run for run in runs if run.program == node_hooks.LEAVES]
    assert [run.name for run in leaves] == [join], runs
    (run,) = leaves
    # Through the API, with the credential the program holds: no stored connection dials.
    assert run.credential is recovery.Credential.LIVE_API, run
    assert not [r for r in runs if r.credential is recovery.Credential.STORED_CONNECTION], runs
    assert run.params == {"NODE_NAME": node, "INSTANCE_ID": staging.named(node).id}, run.params
    # Delete-first: the hook has run before the new machine's join starts.
    assert join in run.before, run.before
    # And the new join makes room first, whatever a refresh left in the cluster.
    assert [r.name for r in runs if r.program == node_hooks.JOINS] == [join], runs


def test_up_replace_of_a_machine_drains_its_node_before_terminating_it(staging):
    node = _node(staging, "l40s")
    urn = staging.named(node).urn
    after = run_program("staging")
    plan = lifecycle.plan(staging, after, replace=[urn])
    assert plan.named(node).action is lifecycle.Action.REPLACE
    assert plan.named(node).reason == "--replace", plan.named(node)
    runs = [r for r in recovery.hook_runs(plan, staging, after) if r.program == node_hooks.LEAVES]
    assert [run.name for run in runs] == [steps.JOIN.resource_name(node)], runs
    # The machine is delete-before-replace: its dependents that are replaced are deleted first,
    # so the Node is drained while its machine still runs.
    assert node in runs[0].before, runs[0].before
    assert runs[0].params["INSTANCE_ID"] == staging.named(node).id
    for other, impact in plan.nodes.items():
        expected = other == node
        assert (impact.drained, impact.rejoined) == (expected, expected), impact


def test_the_plan_says_what_a_recovery_does(staging):
    node = _node(staging, "l4")
    _, _, plan = _recovered(staging, node)
    text = lifecycle.render(plan)
    assert f"create    {node}  [{INSTANCE}]" in text, text
    assert f"{node}: drained, reset, re-joined" in text, text


# ------------------------------------------------------------------ the hook, run


def _leave_hook(staging) -> recovery.HookRun:
    node = _node(staging, "l4")
    state, after, plan = _recovered(staging, node)
    (run,) = [r for r in recovery.hook_runs(plan, state, after) if r.program == node_hooks.LEAVES]
    return run


def _leave(server: FakeApiServer, run: recovery.HookRun) -> None:
    access = node_hooks.ClusterAccess(kubeconfig=server.kubeconfig(), clock=Clock())

    async def leave() -> None:
        api = await access.api()
        await node_hooks.leave(
            api, run.params["NODE_NAME"], run.params["INSTANCE_ID"], access.clock, print
        )

    run_async(leave())


def test_the_leave_hook_removes_the_lost_machines_node(staging):
    run = _leave_hook(staging)
    with FakeApiServer() as server:
        server.cluster.add_node(
            run.params["NODE_NAME"], machine=run.params["INSTANCE_ID"], ready=False
        )
        server.cluster.add_pod("ml", "train-0", run.params["NODE_NAME"])
        _leave(server, run)
        assert not server.cluster.nodes and not server.cluster.pods


def test_the_leave_hook_leaves_the_new_machines_node_alone(staging):
    """Whatever the order, the hook of the lost machine never drains the Node its replacement
    registered under the same name (kubelets do not register again: kubernetes/kubernetes#71398,
    so a deleted Node would stay gone)."""
    run = _leave_hook(staging)
    with FakeApiServer() as server:
        server.cluster.add_node(run.params["NODE_NAME"], machine="i-0123456789abcdef0")
        server.cluster.add_pod("ml", "train-0", run.params["NODE_NAME"])
        _leave(server, run)
        assert run.params["NODE_NAME"] in server.cluster.nodes and server.cluster.pods
        assert not [r for r in server.cluster.requests if r[0] != "GET"]


# ------------------------------------------------------------------ a replacement's inputs

NEW_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILLhP4TTP//n0PsiX2Sb5Mbjjg1dvJO5U5OTAbqoytet ops@example"
)


def test_a_replacement_after_a_key_rotation_launches_with_the_live_key_pair_and_new_image():
    """`ssh.publicKey` rotated: the pool's key pair is replaced under a new name and the old one
    deleted, while running machines keep the old name (ignored). A later planned replacement (a
    new instanceType) launches with the program's values, not the stored ones (the engine checks
    `goal.Properties` again for a replacement): the live key pair and the newest AMI."""
    from tools.harness import mocks
    from tools.harness.graph import unwrap
    from tools.harness.stacks import stack_file

    base = run_program("dev")
    node = lifecycle.node_names(base)[0]
    ssh = dict(stack_file("dev")["gpu-cluster:ssh"], publicKey=NEW_KEY)
    rotated = run_program("dev", config={"ssh": ssh})
    first = lifecycle.plan(base, rotated)
    assert "aws:ec2/keyPair:KeyPair" in {c.type for c in first.by_action(lifecycle.Action.REPLACE)}
    state = recovery.state_after(first, base, rotated)
    stored_key = unwrap(state.named(node).inputs["keyName"])
    live_key = unwrap(rotated.named(node).inputs["keyName"])
    assert stored_key == unwrap(base.named(node).inputs["keyName"]) != live_key, (
        "the rotation should leave the running machine with the old, deleted key pair's name"
    )
    pools = [dict(pool) for pool in stack_file("dev")["gpu-cluster:nodePools"]]
    pools[0]["instanceType"] = "g5.2xlarge"
    mocks.AMI_RELEASE[0] = "-next-release"
    try:
        later = run_program("dev", config={"ssh": ssh, "nodePools": pools})
    finally:
        mocks.AMI_RELEASE[0] = ""
    second = lifecycle.plan(state, later)
    assert second.named(node).action is lifecycle.Action.REPLACE, lifecycle.render(second)
    launched = recovery.state_after(second, state, later).named(node)
    assert unwrap(launched.inputs["keyName"]) == live_key, launched.inputs["keyName"]
    assert unwrap(launched.inputs["ami"]) != unwrap(state.named(node).inputs["ami"]), (
        "a replacement boots the image the program looks up now"
    )

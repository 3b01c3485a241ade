"""Recovery without harm: a machine lost (terminated, spot-reclaimed) and recovered with
`pulumi refresh` + `pulumi up`, or replaced on purpose with `pulumi up --replace <its URN>`,
ends with its node drained and deleted once, before the new machine joins, and every other
node untouched.

The plans follow the engine's rules (tools/recovery.py and tools/lifecycle.py cite them): a
refresh drops a terminated instance, the next `up` creates it and replaces what it identifies;
a stored delete hook runs with its stored parameters; a delete-before-replace step is deleted
before anything that waits for its replacement. The hook itself runs in the script sandbox.
"""

from __future__ import annotations

import json

import pytest

from components.hosts import steps
from components.labels import INSTANCE_LABEL
from tests.sandbox import Sandbox, needs_sandbox
from tools import lifecycle, recovery
from tools.harness.stacks import run_program

INSTANCE = "aws:ec2/instance:Instance"
ADMIN_CONF = "/etc/kubernetes/admin.conf"


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


def test_the_lost_machines_drain_runs_with_its_own_instance_id_before_the_new_one_joins(staging):
    node = _node(staging, "l4")
    state, after, plan = _recovered(staging, node)
    runs = recovery.hook_runs(plan, state, after)
    assert [run.name for run in runs] == [steps.DRAIN.resource_name(node)], runs
    (run,) = runs
    assert run.program == steps.DRAIN.delete_script, run
    lost_id = staging.named(node).id
    assert run.params == {
        "NODE_NAME": node,
        "INSTANCE_ID": lost_id,
        "DRAIN_TIMEOUT_SECONDS": run.params["DRAIN_TIMEOUT_SECONDS"],
    }, run.params
    # Delete-first: the hook has run before the new machine's join starts.
    assert steps.JOIN.resource_name(node) in run.before, run.before


def test_up_replace_of_a_machine_drains_its_node_before_terminating_it(staging):
    node = _node(staging, "l40s")
    urn = staging.named(node).urn
    after = run_program("staging")
    plan = lifecycle.plan(staging, after, replace=[urn])
    assert plan.named(node).action is lifecycle.Action.REPLACE
    assert plan.named(node).reason == "--replace", plan.named(node)
    runs = recovery.hook_runs(plan, staging, after)
    assert [run.name for run in runs] == [steps.DRAIN.resource_name(node)], runs
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


# ------------------------------------------------------------------ the stored hook, run


def _node_object(name: str, instance_id: str, ready: str) -> str:
    return json.dumps(
        {
            "metadata": {"name": name, "labels": {INSTANCE_LABEL: instance_id}},
            "spec": {"providerID": f"aws:///us-east-2a/{instance_id}"},
            "status": {"conditions": [{"type": "Ready", "status": ready}]},
        }
    )


@pytest.fixture
def control_plane(tmp_path) -> Sandbox:
    sandbox = Sandbox(tmp_path)
    sandbox.write(ADMIN_CONF, "apiVersion: v1\nkind: Config\n", 0o600)
    sandbox.state("kubectl/api", "v1.35.1")
    (sandbox.state_dir / "kubectl" / "nodes").mkdir(parents=True, exist_ok=True)
    return sandbox


def _stored_drain(staging) -> recovery.HookRun:
    node = _node(staging, "l4")
    state, after, plan = _recovered(staging, node)
    (run,) = recovery.hook_runs(plan, state, after)
    return run


@needs_sandbox
def test_the_stored_drain_removes_the_lost_machines_node(staging, control_plane):
    run = _stored_drain(staging)
    node = run.params["NODE_NAME"]
    control_plane.state(
        f"kubectl/nodes/{node}.json", _node_object(node, run.params["INSTANCE_ID"], "Unknown")
    )
    result = control_plane.run(run.program, run.params)
    assert result.returncode == 0, result.stderr
    assert [c for c in result.calls if "drain" in c], result.commands()
    assert not (control_plane.state_dir / f"kubectl/nodes/{node}.json").exists(), "Node kept"


@needs_sandbox
def test_the_stored_drain_leaves_the_new_machines_node_alone(staging, control_plane):
    """Whatever the order, the hook of the lost machine never drains the Node its replacement
    registered under the same name (kubelets do not register again: kubernetes/kubernetes#71398,
    so a deleted Node would stay gone)."""
    run = _stored_drain(staging)
    node = run.params["NODE_NAME"]
    control_plane.state(
        f"kubectl/nodes/{node}.json", _node_object(node, "i-0123456789abcdef0", "True")
    )
    result = control_plane.run(run.program, run.params)
    assert result.returncode == 0, result.stderr
    assert not [c for c in result.calls if "drain" in c or "delete" in c], result.commands()
    assert (control_plane.state_dir / f"kubectl/nodes/{node}.json").exists(), "Node deleted"
    assert "the new machine's Node is left alone" in result.stderr, result.stderr


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

"""Day two: the program run twice (before and after a change), and what the real engine would do
to a running stack, from the providers' own replace rules (tools/lifecycle.py lists each
ForceNew field with its source). Ordinary changes replace, reset or re-join nothing."""

from __future__ import annotations

import contextlib
import copy
import datetime
import re
from collections.abc import Iterator

import pytest
import yaml

from components.hosts import steps
from tests.helpers import graphs as shared
from tools import lifecycle
from tools.harness import mocks
from tools.harness.graph import unwrap
from tools.harness.stacks import PROGRAM_CLOCK, edited_script, run_program, stack_file
from tools.lifecycle import Action

INSTANCE = "aws:ec2/instance:Instance"
COMMAND = "command:remote:Command"
NEW_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILLhP4TTP//n0PsiX2Sb5Mbjjg1dvJO5U5OTAbqoytet ops@example"
)


def pools_with(stack: str, **changes: dict) -> dict:
    pools = copy.deepcopy(stack_file(stack)["gpu-cluster:nodePools"])
    for pool in pools:
        pool.update(changes.get(pool["name"], {}))
    return {"nodePools": pools}


@contextlib.contextmanager
def newer_ami() -> Iterator[None]:
    mocks.AMI_RELEASE[0] = "-next-release"
    try:
        yield
    finally:
        mocks.AMI_RELEASE[0] = ""


def replaced(plan: lifecycle.Plan, type_: str | None = None) -> list[str]:
    return [
        c.name
        for c in plan.by_action(Action.REPLACE, Action.BLOCKED, Action.DELETE)
        if type_ is None or c.type == type_
    ]


@pytest.fixture(scope="module")
def baseline() -> dict:
    return {stack: shared.stack_graph(stack) for stack in ("dev", "prod")}


def test_an_unchanged_program_changes_nothing(baseline):
    plan = lifecycle.plan(baseline["dev"], run_program("dev"))
    assert plan.counts() == {"unchanged": len(baseline["dev"])}, lifecycle.render(plan)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_a_newer_ubuntu_ami_replaces_nothing(baseline, stack):
    with newer_ami():
        after = run_program(stack)
    amis = {unwrap(r.inputs.get("ami")) for r in after.of_type(INSTANCE)}
    assert amis != {unwrap(r.inputs.get("ami")) for r in baseline[stack].of_type(INSTANCE)}, (
        "the newer AMI never reached the program: the test would pass vacuously"
    )
    plan = lifecycle.plan(baseline[stack], after)
    assert replaced(plan) == [], lifecycle.render(plan)
    assert not plan.by_action(Action.RERUN), lifecycle.render(plan)


def test_a_pinned_ami_change_still_rebuilds_that_pool():
    before = run_program("dev", config=pools_with("dev", a10g={"amiId": "ami-0123456789abcdef0"}))
    after = run_program("dev", config=pools_with("dev", a10g={"amiId": "ami-0fedcba9876543210"}))
    plan = lifecycle.plan(before, after)
    assert replaced(plan, INSTANCE) == ["dev-gpu-a10g-0"], lifecycle.render(plan)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_key_rotation_replaces_no_instance_and_reaches_every_host(baseline, stack):
    ssh = dict(stack_file(stack)["gpu-cluster:ssh"], publicKey=NEW_KEY)
    after = run_program(stack, config={"ssh": ssh})
    plan = lifecycle.plan(baseline[stack], after)
    assert replaced(plan, INSTANCE) == [], lifecycle.render(plan)
    # The key pair itself is replaced (public_key is ForceNew): only machines created from now on
    # boot with it; running ones get it from their wait-ready step (its authorized_keys).
    assert [c.type for c in plan.by_action(Action.REPLACE)] == ["aws:ec2/keyPair:KeyPair"] * len(
        plan.by_action(Action.REPLACE)
    ), lifecycle.render(plan)
    for node in lifecycle.node_names(after):
        change = plan.named(steps.WAIT_READY.resource_name(node))
        assert change.action is Action.RERUN, f"{change.urn}: {change.action}"
        assert NEW_KEY in unwrap(after.named(change.name).inputs["stdin"]), change.urn
        assert plan.nodes[node].summary() == "untouched", f"{node}: {plan.nodes[node]}"
    assert not [c for c in plan.by_action(Action.REPLACE) if c.type == COMMAND]


@pytest.mark.parametrize("script", ["lib/common.sh", "install-driver.sh", "join-node.sh"])
def test_a_comment_or_blank_line_re_runs_nothing(baseline, script):
    def add_comment(text: str) -> str:
        lines = text.splitlines(keepends=True)
        return "".join([lines[0], "# a note for the next reader\n\n", *lines[1:], "\n# end\n"])

    with edited_script(script, add_comment):
        after = run_program("dev")
    plan = lifecycle.plan(baseline["dev"], after)
    assert plan.counts() == {"unchanged": len(after)}, lifecycle.render(plan)


def test_a_real_edit_of_the_shared_library_updates_steps_in_place(baseline):
    def edit(text: str) -> str:
        return text + '\nreadonly GPU_CLUSTER_LIBRARY_EDITION="2"\n'

    with edited_script("lib/common.sh", edit):
        after = run_program("dev")
    plan = lifecycle.plan(baseline["dev"], after)
    assert replaced(plan) == [], lifecycle.render(plan)
    reruns = plan.by_action(Action.RERUN)
    assert reruns, "an edit of common.sh changed no step: the test is vacuous"
    for impact in plan.nodes.values():
        assert not (impact.drained or impact.reset or impact.rejoined), impact


def test_a_real_edit_of_a_node_script_copies_every_nodes_scripts_again(baseline):
    """The engine hashes a copy's source directory (an archive sent by path) and updates the
    copy when the hash changes (pulumi archive.go `EnsureHashWithWD`; pulumi-command
    copyController.go `Update`): an edit of install-driver.sh copies every GPU node's scripts
    again before its driver step runs the new program. Found by the end-to-end run
    (tests/test_e2e.py): the plan said the copies were unchanged."""

    def edit(text: str) -> str:
        return text + '\nreadonly GPU_CLUSTER_DRIVER_EDITION="2"\n'

    with edited_script("install-driver.sh", edit):
        after = run_program("dev")
    plan = lifecycle.plan(baseline["dev"], after)
    copies = {c.name: c.action for c in plan.changes if c.name.endswith("-scripts")}
    nodes = lifecycle.node_names(after)
    assert {n for n, a in copies.items() if a is Action.UPDATE} == {f"{n}-scripts" for n in nodes}
    assert copies["dev-gpu-control-plane-scripts"] is Action.UNCHANGED, "not in its bundle"


def test_a_driver_change_updates_only_that_pools_driver_step(baseline):
    after = run_program("prod", config=pools_with("prod", h100={"driverVersion": "570"}))
    plan = lifecycle.plan(baseline["prod"], after)
    h100 = [n for n in lifecycle.node_names(after) if "-h100-" in n]
    assert h100, "prod has an h100 pool"
    # The GPU Jobs of a changed node run again (replaced: a Job's spec is immutable; the NCCL
    # Job follows its node's validation Job, replace_with).
    jobs = {f"{n}-{job}" for n in h100 for job in lifecycle.GPU_JOBS} & {r.name for r in after}
    assert f"{h100[0]}-validation-job" in jobs, sorted(jobs)
    assert sorted(replaced(plan)) == sorted(jobs), lifecycle.render(plan)
    changed = {c.name for c in plan.changes if c.action is not Action.UNCHANGED}
    # nouveau re-runs too: it checks the archive has the new branch's signed module for the
    # running kernel (and may move to a kernel that has one), inside the roll; the join re-runs
    # its checks of the changed host (its CHANGE), joining nothing.
    rolled = (steps.NOUVEAU, steps.DRIVER, steps.JOIN, steps.IN_SERVICE)
    expected = {row.resource_name(n) for n in h100 for row in rolled}
    assert changed == expected | jobs, lifecycle.render(plan)
    for node in h100:
        assert plan.nodes[node].disrupted == ["nouveau", "driver"], plan.nodes[node]
        join = plan.named(steps.JOIN.resource_name(node))
        assert join.action is Action.RERUN, f"{join.urn}: {join.action}"
        assert not (plan.nodes[node].reset or plan.nodes[node].rejoined), plan.nodes[node]


def test_a_new_job_image_warns_that_busy_nodes_are_re_validated_in_service(baseline):
    """A new validation image changes every GPU Job's pod template, so each node's validation
    Job is replaced at once, outside a roll, while the node runs work: the plan says so, for a
    reviewer to apply it when the nodes are idle. A new taint does not (a Job keeps the
    tolerations it ran with, decision 059), and inside a roll (a driver change) it does not
    warn."""
    validation = dict(stack_file("prod")["gpu-cluster:validation"])
    validation["image"] = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.1"
    after = run_program("prod", config={"validation": validation})
    plan = lifecycle.plan(baseline["prod"], after)
    nodes = lifecycle.node_names(after)
    for node in nodes:
        assert "validation-job" in plan.nodes[node].revalidated, plan.nodes[node]
    text = lifecycle.render(plan)
    assert f"Warning: {len(nodes)} node(s) in service re-run their GPU Jobs at once" in text, text
    pools = copy.deepcopy(stack_file("prod")["gpu-cluster:nodePools"])
    h100 = next(pool for pool in pools if pool["name"] == "h100")
    h100["taints"] = [
        *h100.get("taints", []),
        {"key": "team", "value": "ml", "effect": "NoSchedule"},
    ]
    plan = lifecycle.plan(baseline["prod"], run_program("prod", config={"nodePools": pools}))
    assert not any(impact.revalidated for impact in plan.nodes.values()), lifecycle.render(plan)
    rolled = run_program("prod", config=pools_with("prod", h100={"driverVersion": "570"}))
    plan = lifecycle.plan(baseline["prod"], rolled)
    assert not any(impact.revalidated for impact in plan.nodes.values()), lifecycle.render(plan)
    assert "Warning" not in lifecycle.render(plan)


def test_a_new_ssh_user_warns_that_running_machines_lack_it(baseline):
    """Every step re-runs as the new user, whom the machines never got: the plan says so."""
    ssh = dict(stack_file("dev")["gpu-cluster:ssh"], user="admin")
    plan = lifecycle.plan(baseline["dev"], run_program("dev", config={"ssh": ssh}))
    reruns = plan.by_action(Action.RERUN)
    assert reruns and all("connection.user" in c.changed for c in reruns), lifecycle.render(plan)
    text = lifecycle.render(plan)
    assert f"Warning: {len(reruns)} step(s) dial machines they ran on before as another" in text
    assert "another SSH" not in lifecycle.render(lifecycle.plan(baseline["dev"], baseline["dev"]))


def test_a_smaller_root_volume_is_said_to_fail_and_a_larger_one_applies(baseline):
    def with_root(gib: int) -> lifecycle.Plan:
        after = run_program("dev", config=pools_with("dev", a10g={"rootVolumeGiB": gib}))
        return lifecycle.plan(baseline["dev"], after)

    size = stack_file("dev")["gpu-cluster:nodePools"][0]["rootVolumeGiB"]
    smaller, larger = with_root(size - 50), with_root(size + 50)
    assert len(smaller.refused) == len(lifecycle.node_names(baseline["dev"])), smaller.refused
    assert f"cannot shrink from {size} to {size - 50} GiB" in lifecycle.render(smaller)
    assert not larger.refused and larger.by_action(Action.UPDATE), lifecycle.render(larger)


def test_a_new_ubuntu_release_on_running_machines_is_said_to_fail():
    """Running machines keep their release (the looked-up AMI is ignored after launch), so a
    runtime step re-run with the new release's containerd pin cannot install it: the plan says
    so for each such step, and not when the release stays."""
    before = run_program("staging")
    after = run_program("staging", config=pools_with("staging", l40s={"osVersion": "24.04"}))
    plan = lifecycle.plan(before, after)
    failing = [line for line in plan.refused if "keeps Ubuntu 22.04" in line]
    assert failing and all("-l40s-" in line for line in failing), plan.refused
    assert "the containerd of 24.04" in lifecycle.render(plan)
    assert not lifecycle.plan(before, before).refused


def test_a_label_change_rejoins_nothing_and_reconciles_through_the_api(baseline):
    """The control plane sets the new label through the API (the put in service's hook, on its
    update); nothing on a host runs, and the join, which registers no such label, is
    unchanged."""
    after = run_program("dev", config=pools_with("dev", a10g={"labels": {"team": "research"}}))
    plan = lifecycle.plan(baseline["dev"], after)
    assert replaced(plan) == [], lifecycle.render(plan)
    assert not plan.by_action(Action.RERUN), lifecycle.render(plan)
    for node in lifecycle.node_names(after):
        assert plan.nodes[node].summary() == "untouched", plan.nodes[node]
        in_service = plan.named(steps.IN_SERVICE.resource_name(node))
        assert in_service.action is Action.UPDATE, f"{in_service.urn}: {in_service.action}"
        environment = unwrap(after.named(in_service.name).inputs["environment"])
        assert "team=research" in environment["NODE_LABELS"], environment
        join = plan.named(steps.JOIN.resource_name(node))
        assert join.action is Action.UNCHANGED, f"{join.urn}: {join.action}"


def test_a_replaced_machine_cascades_to_its_own_chain_only(baseline):
    """The model itself: a ForceNew change (on-demand to spot) replaces the machine and, through
    the instance id in their triggers, its steps: that node is drained, reset and re-joined; the
    control plane and the other nodes are untouched."""
    after = run_program("prod", config=pools_with("prod", h100={"market": "spot"}))
    plan = lifecycle.plan(baseline["prod"], after)
    h100 = [n for n in lifecycle.node_names(after) if "-h100-" in n]
    assert sorted(replaced(plan, INSTANCE)) == sorted(h100), lifecycle.render(plan)
    for node, impact in plan.nodes.items():
        expected = node in h100
        assert (impact.drained, impact.reset, impact.rejoined) == (expected,) * 3, impact
    for node in h100:
        for step in steps.NODE_STEPS:  # the token record too: its trigger holds the machine
            change = plan.named(step.resource_name(node))
            assert change.action is Action.REPLACE, f"{change.urn}: {change.action}"


def test_a_new_instance_type_replaces_that_pools_machines_drained(baseline):
    """The provider would stop and start each machine of the pool at once to change its type
    (no drain, the old GPU count; a one-time spot machine cannot stop): the machine is replaced
    instead, delete-first, so its node is drained and reset before it goes."""
    after = run_program("prod", config=pools_with("prod", a10g={"instanceType": "g5.24xlarge"}))
    plan = lifecycle.plan(baseline["prod"], after)
    a10g = [n for n in lifecycle.node_names(after) if "-a10g-" in n]
    assert a10g and sorted(replaced(plan, INSTANCE)) == sorted(a10g), lifecycle.render(plan)
    for node, impact in plan.nodes.items():
        expected = node in a10g
        assert (impact.drained, impact.reset, impact.rejoined) == (expected,) * 3, impact
    for node in a10g:
        assert after.named(node).delete_before_replace, node


def test_the_control_plane_machine_is_protected_and_a_switch_lifts_it(baseline):
    machine = [r for r in baseline["dev"].of_type(INSTANCE) if r.name.endswith("-control-plane")]
    assert machine and machine[0].protect, f"{machine}: not protected"
    control_plane = dict(stack_file("dev")["gpu-cluster:controlPlane"], protect=False)
    after = run_program("dev", config={"controlPlane": control_plane})
    unprotected = [r for r in after.of_type(INSTANCE) if r.name.endswith("-control-plane")]
    assert not unprotected[0].protect, unprotected[0].urn


def test_a_policy_flags_an_unprotected_control_plane_machine(baseline):
    from tools import policy_adapter

    assert not [v for v in policy_adapter.run(baseline["dev"]).violations if "protect" in v]
    control_plane = dict(stack_file("dev")["gpu-cluster:controlPlane"], protect=False)
    report = policy_adapter.run(run_program("dev", config={"controlPlane": control_plane}))
    flagged = [v for v in report.violations if v.startswith("[control-plane-protected]")]
    assert len(flagged) == 1 and "dev-gpu-control-plane" in flagged[0], report.violations


# ---------------------------------------------------------------- python -m tools.preview --against


def test_preview_against_a_second_stack_file_reports_per_resource_and_node(tmp_path):
    from tools import preview

    deployed = tmp_path / "Pulumi.deployed.yaml"
    deployed.write_text(yaml.safe_dump({"config": stack_file("prod")}), encoding="utf-8")
    # This version: the prod file with the h100 pool on driver 570.
    report = preview.what_will_change(
        "prod", str(deployed), config=pools_with("prod", h100={"driverVersion": "570"})
    )
    assert "re-run    prod-gpu-h100-0-driver" in report, report
    # Per h100 node: nouveau, driver, join (its checks) re-run, its put in service updated; its
    # validation Job replaced, and the NCCL Job of the pool with it.
    assert re.search(r"^    6 re-run, 4 replace, \d+ unchanged, 2 update$", report, re.M), report
    assert "prod-gpu-h100-0: re-runs nouveau, driver" in report, report
    assert "prod-gpu-a10g-0: untouched" in report, report


def test_preview_against_a_git_ref_runs_that_version(capsys):
    from tools import preview

    assert preview.main(["dev", "--against", "HEAD"]) == 0
    out = capsys.readouterr().out
    assert "Resources:" in out and "Nodes:" in out, out
    assert "dev-gpu-a10g-0:" in out, out
    assert preview.main(["dev", "--against", "no-such-ref-anywhere"]) == 1


# ---------------------------------------------------------------- retries and dead hosts


def test_a_join_too_late_for_its_token_gets_a_new_one_and_rejoins_nothing(baseline):
    """A join retried within its token's two hours needs nothing new (the same record:
    test_an_unchanged_program_changes_nothing). Later, `pulumi up --replace` of the node's
    `<node>-join-token` gives a new record, minted by its hook with that run's clock, and the
    join takes the new token as an update, on the same machine, of the same cluster."""
    records = [steps.JOIN_TOKEN.resource_name(n) for n in lifecycle.node_names(baseline["dev"])]
    later = PROGRAM_CLOCK + datetime.timedelta(hours=3)
    after = run_program("dev", clock=later, state=baseline["dev"], replace=records)
    plan = lifecycle.plan(baseline["dev"], after, replace=records)
    for node in lifecycle.node_names(after):
        token = plan.named(steps.JOIN_TOKEN.resource_name(node))
        assert token.action is Action.REPLACE, f"{token.urn}: {token.action}"
        join = plan.named(steps.JOIN.resource_name(node))
        assert join.action is Action.RERUN, f"{join.urn}: {join.action}"
        impact = plan.nodes[node]
        assert not (impact.drained or impact.reset or impact.rejoined), impact
    assert {c.type for c in plan.by_action(Action.REPLACE)} == {"pulumi:index:Stash"}


def test_no_delete_dials_a_host_and_every_node_leaves_through_the_api(baseline):
    """No Command stores a `delete` (which pulumi-command runs over the stored connection);
    every GPU node's join carries the hook that drains and deletes its Node through the API."""
    for graph in baseline.values():
        for resource in graph.of_type(COMMAND):
            assert not resource.plain_inputs().get("delete"), f"{resource.urn}: dials on delete"
        for node in lifecycle.node_names(graph):
            join = graph.named(steps.JOIN.resource_name(node))
            assert lifecycle.LEAVES_HOOK in join.hooks["before_delete"], join.urn

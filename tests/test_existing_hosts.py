"""Pools of existing servers (`nodePools[].hosts`) on the real registered graph, under the SDK's
mocks: the `onprem` test stack (tests/stacks/Pulumi.onprem.yaml: an existing control plane and
two hosts pools) and prod with a hosts pool added.

A stack that launches no EC2 machine registers no AWS resource and calls no AWS API; a host's
node runs the step table's node rows after the copy of its scripts (no host-key rotation: its
key is pinned from config); its identity (Identity.HOST, the join token's machine, the
instance label, the leave hook's check, the provider id) is its host key's; and on a later `up`,
reordering, adding, removing, renaming, readdressing and re-keying hosts do what
docs/decisions/054-machines-the-stack-did-not-create.md says (tools.lifecycle).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import runpy
from functools import cache

import pytest
from pulumi.runtime import MockCallArgs

from components.hosts import steps
from components.kube import node_hooks
from components.node_machine import host_id, host_provider_id
from tests.helpers.policies import analyze, as_policy_input
from tools import lifecycle, policy_adapter, preview, recovery
from tools.harness.graph import Graph, Resource, script_params, unwrap
from tools.harness.mocks import CA_CERT_HASH, Mocks, ed25519_key
from tools.harness.recorder import record
from tools.harness.stacks import PROGRAM, PROJECT, run_program, set_stack_config, stack_file
from tools.lifecycle import Action

STACK = "onprem"
CLUSTER = "lab-gpu"
COMMAND = "command:remote:Command"
POOLS = stack_file(STACK)["gpu-cluster:nodePools"]
HGX_A, HGX_B = POOLS[0]["hosts"]
L40S = POOLS[1]["hosts"][0]
NODE_A = f"{CLUSTER}-hgx-10-8-0-21"  # named by its address
NODE_B = f"{CLUSTER}-hgx-gpu-b"  # named by its name
NODE_L = f"{CLUSTER}-l40s-gpu-l40s-1"  # named by the first label of its DNS name
# What each host node registers after the copy of its scripts, in chain order.
HOST_CHAIN = ["scripts", *(s.suffix for s in steps.NODE_STEPS)]


class RecordingMocks(Mocks):
    """The harness's provider answers, keeping the token of every invoke the program made."""

    def __init__(self) -> None:
        super().__init__()
        self.invokes: list[str] = []

    def call(self, args: MockCallArgs):
        self.invokes.append(args.token)
        return super().call(args)


@cache
def onprem() -> tuple[Graph, tuple[str, ...]]:
    """The onprem stack's graph and the invokes its program made."""
    set_stack_config(STACK)
    mocks = RecordingMocks()
    graph = record(
        lambda: runpy.run_path(str(PROGRAM), run_name="__main__"),
        mocks,
        project=PROJECT,
        stack=STACK,
    )
    return graph, tuple(mocks.invokes)


def graph() -> Graph:
    return onprem()[0]


def with_pools(pools: list[dict]) -> Graph:
    return run_program(STACK, config={"nodePools": pools})


def hgx_hosts(*hosts: dict) -> list[dict]:
    pools = copy.deepcopy(POOLS)
    pools[0]["hosts"] = [copy.deepcopy(h) for h in hosts]
    return pools


# ------------------------------------------------------------------ no AWS at all


def test_a_stack_of_existing_machines_registers_nothing_of_aws_and_calls_no_aws_api(monkeypatch):
    """No resource or invoke of the aws package, so the engine never starts the AWS provider
    (nor needs aws:region: the stack file sets none, and no AWS_REGION is in the environment)."""
    for variable in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(variable, raising=False)
    assert "aws:region" not in stack_file(STACK)
    graph, invokes = onprem.__wrapped__()
    aws = [r.urn for r in graph if r.type.startswith(("aws:", "pulumi:providers:aws"))]
    assert not aws, f"{STACK}: AWS resources registered: {aws}"
    assert not [t for t in invokes if t.startswith("aws:")], f"{STACK}: AWS calls: {invokes}"
    # Nothing the stack generates for machines it launches: no host key, no rotation, and no
    # provider but command and kubernetes (the join tokens' seed is a Stash of the engine's own,
    # components/kube/bootstrap_token.py).
    generated = [r.urn for r in graph if r.type.startswith(("tls:", "command:local:"))]
    assert not generated, generated
    seeds = graph.find(lambda r: r.name.endswith("-join-token-seed"))
    assert len(seeds) == len(stack_file(STACK)["gpu-cluster:nodePools"]), seeds


def test_the_recording_mocks_see_the_aws_calls_of_a_stack_that_launches_machines():
    """The invoke recorder is not blind: prod (existing VPC, EC2 pools) reads its VPC."""
    set_stack_config("prod")
    mocks = RecordingMocks()
    record(
        lambda: runpy.run_path(str(PROGRAM), run_name="__main__"),
        mocks,
        project=PROJECT,
        stack="prod",
    )
    assert "aws:ec2/getVpc:getVpc" in mocks.invokes, mocks.invokes


# ------------------------------------------------------------------ each host's chain


def node_steps(node: str) -> dict[str, Resource]:
    return {r.name[len(node) + 1 :]: r for r in graph() if r.name.startswith(f"{node}-")}


@pytest.mark.parametrize("node", [NODE_A, NODE_B, NODE_L])
def test_each_host_runs_the_node_rows_in_order_after_the_copy_of_its_scripts(node):
    found = node_steps(node)
    assert not graph().find(lambda r: r.name == node), f"{node}: a resource of the node's name"
    # No boot key, rotation or switch: the host came with its key, which its scripts' copy pins.
    pinned = steps.PINNED_FIRST_CONTACT
    launched_only = {"host-key", *(r.suffix for r in steps.FIRST_CONTACT if r not in pinned)}
    assert launched_only == {"host-key", "host-key-rotation", "host-key-switch"}
    assert not launched_only & set(found), sorted(found)
    for earlier, later in itertools.pairwise(HOST_CHAIN):
        assert graph().depends_on(found[later], found[earlier]), (
            f"{found[later].urn}: does not wait for {found[earlier].urn}"
        )
    assert graph().depends_on(found["validation-job"], found["join"])
    assert graph().depends_on(found["in-service"], found["validation-job"])


def test_a_host_without_its_key_is_never_dialled():
    """Fail closed past the settings too (they require the key): a host of a pool whose key is
    empty gets no connection, naming the node, before anything is registered for it."""
    from components.hosts.host_keys import UnpinnedHost
    from components.hosts.remote import Login
    from components.node_machine import existing_host
    from components.settings.hosts_pool import ExistingHost
    from tools.harness.stacks import load_stack_settings

    settings = load_stack_settings(STACK)
    keyless = ExistingHost.model_construct(address=HGX_A["address"], host_key="")
    with pytest.raises(UnpinnedHost, match=f"^{NODE_A}: no host key to pin for"):
        existing_host(NODE_A, keyless, Login.of(settings), parent=None)  # type: ignore[arg-type]


def test_nodes_of_hosts_never_wait_on_each_other():
    a, b = node_steps(NODE_A), node_steps(NODE_B)
    for mine, theirs in ((a, b), (b, a)):
        for resource in mine.values():
            for other in theirs.values():
                assert not graph().depends_on(resource, other), f"{resource.urn} -> {other.urn}"


@pytest.mark.parametrize(("node", "host"), [(NODE_A, HGX_A), (NODE_B, HGX_B), (NODE_L, L40S)])
def test_every_step_on_a_host_pins_its_configured_key_at_its_address(node, host):
    for resource in node_steps(node).values():
        if resource.type not in (COMMAND, "command:remote:CopyToRemote"):
            continue
        connection = unwrap(resource.inputs["connection"])
        assert connection["host"] == host["address"], f"{resource.urn}: dials {connection}"
        assert connection["hostKey"] == host["hostKey"], f"{resource.urn}: host key not pinned"
        assert connection["user"] == host.get("user", "ops"), f"{resource.urn}: user"
        assert connection["port"] == host.get("port", 22), f"{resource.urn}: port"


@pytest.mark.parametrize(("node", "host"), [(NODE_A, HGX_A), (NODE_L, L40S)])
def test_a_hosts_identity_is_its_host_keys_in_every_trigger_label_and_check(node, host):
    identity = host_id(host["hostKey"])
    found = node_steps(node)
    for suffix, resource in found.items():
        # The in-service row runs no command and ignores triggers (components/kube/in_service.py):
        # its hook reads the machine from INSTANCE_ID, checked below.
        if resource.type != COMMAND or suffix == steps.IN_SERVICE.suffix:
            continue
        triggers = unwrap(resource.inputs["triggers"])
        assert identity in triggers, f"{resource.urn}: triggers {triggers}"
    join = script_params(found["join"])
    assert join["PROVIDER_ID"] == host_provider_id(identity) == f"gpu-cluster:///{identity}"
    # The control plane sets the identity label once the node is proven (decision 059).
    assert "gpu-cluster.io/instance-id" not in join["NODE_LABELS"], join["NODE_LABELS"]
    in_service = unwrap(found["in-service"].inputs["environment"])
    assert in_service["INSTANCE_ID"] == identity, in_service
    assert f"gpu-cluster.io/instance-id={identity}" in in_service["NODE_LABELS"].split(",")
    assert unwrap(found["scripts"].replacement_trigger) == identity
    assert identity in unwrap(found["validation-job"].replacement_trigger)
    assert unwrap(found["join"].inputs["triggers"]) == [identity, "10.8.0.10:6443", CA_CERT_HASH]


def test_deleting_a_host_drains_the_node_its_key_registered_and_dials_nothing_else():
    """Taking a host out of its pool runs one hook: its join's leave, through the API with the
    live credential, for the Node the host's identity registered. Nothing dials the host on
    delete, and nothing terminates or resets it (it has no instance, and its steps have no
    delete)."""
    plan = lifecycle.plan(baseline(), with_pools(hgx_hosts(HGX_B)))
    (run,) = recovery.hook_runs(plan, baseline(), with_pools(hgx_hosts(HGX_B)))
    assert (run.name, run.program) == (f"{NODE_A}-join", node_hooks.LEAVES), run
    assert run.credential is recovery.Credential.LIVE_API and not run.idle, run
    assert run.params["NODE_NAME"] == NODE_A, run.params
    assert run.params["INSTANCE_ID"] == host_id(HGX_A["hostKey"]), run.params
    for resource in node_steps(NODE_A).values():
        if resource.type == COMMAND:
            assert not unwrap(resource.inputs.get("delete")), f"{resource.urn}: dials on delete"


def test_with_the_control_plane_unreachable_a_hosts_leave_drains_nothing():
    """controlPlane.unreachable: the leave hook of a host taken out of its pool reads it from
    the program and drains and deletes nothing, as an EC2 node's does."""
    config = dict(stack_file(STACK)["gpu-cluster:controlPlane"], unreachable=True)
    before = baseline()
    after = run_program(STACK, config={"nodePools": hgx_hosts(HGX_B), "controlPlane": config})
    (run,) = recovery.hook_runs(lifecycle.plan(before, after), before, after)
    assert run.program == node_hooks.LEAVES and "drains and deletes nothing" in run.idle, run


def test_an_existing_hosts_wait_ready_keeps_its_login_keys_and_checks_its_release():
    params = script_params(node_steps(NODE_L)["wait-ready"])
    assert params["OS_VERSION"] == "22.04", params
    assert "AUTHORIZED_KEYS" not in params and "SSH_USER" not in params, params
    assert "ROOT_VOLUME_GIB" not in params, params
    assert params["KERNEL_WITH_DRIVER"] == "true", params


def test_the_driver_rules_of_a_hosts_pool_come_from_its_gpus():
    hgx = script_params(node_steps(NODE_A)["driver"])
    assert hgx["GPU_COUNT"] == "8" and hgx["NEEDS_FABRIC_MANAGER"] == "true", hgx
    assert hgx["GSP_FIRMWARE"] == "on" and hgx["KERNEL_MODULES"] == "open", hgx
    assert "CUDA_REPOSITORY" in hgx, hgx
    l40s = script_params(node_steps(NODE_L)["driver"])
    assert l40s["GPU_COUNT"] == "4" and l40s["NEEDS_FABRIC_MANAGER"] == "false", l40s
    assert l40s["DRIVER_BRANCH"] == "570", l40s
    runtime = script_params(node_steps(NODE_L)["runtime"])
    assert runtime["CONTAINERD_VERSION"].endswith("~jammy"), runtime
    assert script_params(node_steps(NODE_A)["join"])["EXPECTED_GPUS"] == "8"


def test_the_gpu_checks_of_hosts_pools_are_per_node_and_never_over_efa():
    names = {r.name for r in graph()}
    assert f"{NODE_A}-nccl-job" in names and f"{NODE_L}-nccl-job" in names, sorted(names)
    assert not [n for n in names if n.endswith("-nccl-efa") or n.endswith("-efa")], names
    floors = {}
    for node in (NODE_A, NODE_L):
        job = graph().named(f"{node}-nccl-job")
        command = unwrap(job.inputs)["spec"]["template"]["spec"]["containers"][0]["command"]
        floors[node] = " ".join(command)
    assert "-v floor=225 " in floors[NODE_A], "an NVSwitch H100 host: NVLink's floor"
    assert "-v floor=3 " in floors[NODE_L], "an L40S host over PCIe: PCIe's floor"


def test_the_outputs_name_each_hosts_address_and_identity():
    nodes = unwrap(graph().outputs["gpuNodes"])
    assert nodes[NODE_A] == {
        "pool": "hgx",
        "address": "10.8.0.21",
        "hostId": host_id(HGX_A["hostKey"]),
        "gpuModel": "NVIDIA H100",
        "gpuCount": 8,
        "validated": True,
    }, nodes[NODE_A]
    assert unwrap(graph().outputs["nodePools"]) == {
        "hgx": [NODE_A, NODE_B],
        "l40s": [NODE_L],
    }


def test_a_hosts_pool_beside_ec2_pools_changes_nothing_of_theirs():
    before = run_program("prod")
    pools = [*stack_file("prod")["gpu-cluster:nodePools"], copy.deepcopy(POOLS[1])]
    after = run_program("prod", config={"nodePools": pools})
    plan = lifecycle.plan(before, after)
    # The node guard covers the new pool's node names too (components/kube/node_guard.py).
    (guard,) = [
        p
        for p in after.of_type(
            "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"
        )
        if unwrap(p.inputs)["metadata"]["name"] == "gpu-cluster-prod-gpu-gpu-nodes"
    ]
    assert (
        '"prod-gpu-l40s-gpu-l40s-1"' in unwrap(guard.inputs)["spec"]["validations"][0]["expression"]
    )
    changes = [c for c in plan.changes if c.action is not Action.UNCHANGED and c.urn != guard.urn]
    assert plan.named(guard.name).action is Action.UPDATE
    changed = [c.name for c in changes]
    assert changed and all(name.startswith("prod-gpu-l40s") for name in changed), changed
    assert {c.action for c in changes} == {Action.CREATE}
    assert not after.find(
        lambda r: r.name.startswith("prod-gpu-l40s") and r.type.startswith("aws:")
    )


# ------------------------------------------------------------------ the offline preview


def test_the_offline_preview_of_a_stack_of_hosts_passes_its_policies(tmp_path):
    result = preview.preview(STACK, out_root=tmp_path)
    for node in (NODE_A, NODE_B, NODE_L):
        chain = [preview.step_label(r, node) for r in result.chains[node]]
        assert chain[: len(HOST_CHAIN)] == HOST_CHAIN, chain
    report = policy_adapter.run(result.graph)
    assert report.available and report.passed, report.note
    assert not report.violations, report.violations
    assert (tmp_path / STACK / "scripts" / f"{NODE_A}-join.sh").is_file()


def test_the_policy_pack_passes_a_stack_of_hosts_through_its_analyzer_and_holds_its_keys():
    """Through pulumi_policy's analyzer as the deploy job runs it; and a host step without its
    pinned key would be refused (remote-commands-pin-host-keys), so the rotation the join ordering
    leaves out for existing hosts is not a gap."""
    resources = [as_policy_input(r) for r in graph()]
    assert analyze(resources) == []
    join = next(r for r in resources if r.name == f"{NODE_A}-join")
    props = dict(join.props)
    props["connection"] = {k: val for k, val in props["connection"].items() if k != "hostKey"}
    unpinned = dataclasses.replace(join, props=props)
    found = analyze([unpinned if r is join else r for r in resources])
    assert [(p, u) for p, u, _m, _l in found] == [("remote-commands-pin-host-keys", join.urn)], (
        found
    )


# ------------------------------------------------------------------ day two


@cache
def baseline() -> Graph:
    return with_pools(POOLS)


def impacts(after: Graph) -> tuple[lifecycle.Plan, dict[str, str]]:
    plan = lifecycle.plan(baseline(), after)
    return plan, {node: impact.summary() for node, impact in plan.nodes.items()}


def test_reordering_hosts_changes_nothing():
    plan, _ = impacts(with_pools(hgx_hosts(HGX_B, HGX_A)))
    assert plan.counts() == {"unchanged": len(baseline())}, lifecycle.render(plan)


def test_adding_a_host_creates_only_its_node():
    new = {"address": "10.8.0.23", "hostKey": ed25519_key("onprem gpu-c")["publicKeyOpenssh"]}
    after = with_pools(hgx_hosts(HGX_A, HGX_B, new))
    plan, nodes = impacts(after)
    # The node guard learns the new node's name (components/kube/node_guard.py): an update.
    assert plan.named("gpu-node-guard-policy").action is Action.UPDATE
    changed = {c.name for c in plan.changes if c.action is not Action.UNCHANGED}
    changed.discard("gpu-node-guard-policy")
    assert changed and all(n.startswith(f"{CLUSTER}-hgx-10-8-0-23") for n in changed), changed
    assert {c.action for c in plan.changes if c.name in changed} == {Action.CREATE}
    assert nodes[NODE_A] == nodes[NODE_B] == "untouched", nodes


def test_removing_a_host_drains_its_node_and_leaves_the_machine():
    plan, nodes = impacts(with_pools(hgx_hosts(HGX_B)))
    gone = {c.name for c in plan.by_action(Action.DELETE)}
    assert gone and all(n.startswith(f"{NODE_A}-") for n in gone), gone
    assert nodes[NODE_A] == "drained", nodes
    assert nodes[NODE_B] == "untouched", nodes
    # Only the node guard changes beside them: it forgets the node's name.
    others = plan.by_action(Action.REPLACE, Action.RERUN, Action.UPDATE)
    assert [c.name for c in others] == ["gpu-node-guard-policy"], lifecycle.render(plan)


def test_renaming_a_host_is_a_new_node_on_the_same_machine():
    plan, nodes = impacts(with_pools(hgx_hosts({**HGX_A, "name": "gpu-a"}, HGX_B)))
    assert nodes[NODE_A] == "drained", nodes
    assert nodes[f"{CLUSTER}-hgx-gpu-a"] == "untouched", nodes  # new: created, joined
    created = {c.name for c in plan.by_action(Action.CREATE)}
    assert f"{CLUSTER}-hgx-gpu-a-join" in created, created


def test_a_named_hosts_new_address_re_runs_its_steps_there_and_drains_nothing():
    """A host keeps its node across a new address when it has a name (its key in the pool):
    the same machine (the same host key), reached elsewhere. Its steps run again there, each
    finding its work done."""
    plan, nodes = impacts(with_pools(hgx_hosts(HGX_A, {**HGX_B, "address": "10.9.0.22"})))
    assert not plan.by_action(Action.REPLACE, Action.DELETE, Action.CREATE), lifecycle.render(plan)
    rerun = {c.name for c in plan.by_action(Action.RERUN)}
    assert f"{NODE_B}-join" in rerun and f"{NODE_B}-driver" in rerun, rerun
    assert all("connection.host" in c.changed for c in plan.by_action(Action.RERUN)), (
        lifecycle.render(plan)
    )
    assert not nodes[NODE_B].startswith("drained"), nodes


def test_an_unnamed_hosts_new_address_is_a_new_node():
    """Without a name a host is keyed by its address: a new one is a new node (the old one
    drained), as a rename is."""
    plan, nodes = impacts(with_pools(hgx_hosts({**HGX_A, "address": "10.9.0.21"}, HGX_B)))
    assert nodes[NODE_A] == "drained", nodes
    assert f"{CLUSTER}-hgx-10-9-0-21-join" in {c.name for c in plan.by_action(Action.CREATE)}


def test_a_new_host_key_is_a_new_machine_drained_joined_and_proven_again():
    """A re-installed server (or another one at the address) presents a new key: its Node is
    drained and deleted before the new join (the old join's leave hook runs first: delete
    before replace), which registers it afresh, and its GPUs are proven again."""
    rekeyed = {**HGX_A, "hostKey": ed25519_key("onprem gpu-a reinstalled")["publicKeyOpenssh"]}
    after = with_pools(hgx_hosts(rekeyed, HGX_B))
    plan, nodes = impacts(after)
    replaced = {c.name for c in plan.by_action(Action.REPLACE)}
    for suffix in ("scripts", "wait-ready", "driver", "join", "validation-job"):
        assert f"{NODE_A}-{suffix}" in replaced, sorted(replaced)
    assert nodes[NODE_A].startswith("drained, reset, re-joined"), nodes
    assert nodes[NODE_B] == "untouched", nodes
    runs = recovery.hook_runs(plan, baseline(), after)
    (run,) = [r for r in runs if r.program == node_hooks.LEAVES]
    assert run.params["INSTANCE_ID"] == host_id(HGX_A["hostKey"]), run.params
    assert f"{NODE_A}-join" in run.before, run.before
    # The new join's create hook looks for the old key's Node under the name: none is left.
    (joins,) = [r for r in runs if r.program == node_hooks.JOINS]
    assert joins.params["INSTANCE_ID"] == host_id(rekeyed["hostKey"]), joins.params

"""The CrossGuard policy pack (policies/): each policy against a passing and a violating resource,
every stack file's recorded graph against all mandatory policies, and an unsafe dev variant.

The validators are pure functions over what the engine shows a policy (engine camelCase input
names, URN, name, additional secret outputs); the stack-level tests also run the resources through
pulumi_policy's own analyzer servicer (the code the CLI talks to over gRPC), without its server.
"""

from __future__ import annotations

import copy
import inspect
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pulumi_aws
import pytest
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc
from pulumi_policy import EnforcementLevel
from pulumi_policy.policy import _PolicyAnalyzerServicer
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, unknown_checking_proxy

from tools.harness.graph import Graph
from tools.harness.mocks import COMMAND_STDOUT
from tools.harness.stacks import STACKS, run_program

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "policies"))

from gpu_cluster_policies import chain as pack_chain
from gpu_cluster_policies import validators as v
from gpu_cluster_policies.pack import PACK_NAME, build_policies

from components import catalog
from tests.helpers import graphs as shared
from tests.helpers.policies import (
    MANDATORY,
    analyze,
    analyzer_resource,
    as_policy_input,
    assert_names_resource_and_fix,
    check,
    policy,
    resource,
    security_group,
    ssh_rule,
)

# mint-join-token.sh prints one JSON line; the program parses it (the token is made up).
COMMAND_STDOUT.setdefault(
    "-join-token",
    lambda args: json.dumps(
        {"token": "abcdef.0123456789abcdef", "caCertHash": "sha256:" + "a" * 64}
    ),
)

# ---------------------------------------------------------------- resources used by the cases

SAFE_INSTANCE = {
    "instanceType": "g5.xlarge",
    "metadataOptions": {
        "httpEndpoint": "enabled",
        "httpTokens": "required",
        "httpPutResponseHopLimit": 1,
    },
    "rootBlockDevice": {"volumeType": "gp3", "volumeSize": 200, "encrypted": True},
    "tags": {"env": "dev", "owner": "ml-platform", "Name": "dev-gpu-a10g-0"},
}


def instance(name: str = "dev-gpu-a10g-0", **changes: Any) -> v.Resource:
    props = copy.deepcopy(SAFE_INSTANCE)
    for key, value in changes.items():
        if value is None:
            props.pop(key, None)
        else:
            props[key] = value
    return resource(v.INSTANCE, name, props)


def pod_template(*containers: dict[str, Any]) -> dict[str, Any]:
    return {"template": {"spec": {"containers": list(containers)}}}


def validation_job(
    name: str = "dev-gpu-a10g-0-validation-job",
    *,
    image: str = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
    deadline: int | None = 900,
    gpus: int | None = 1,
) -> v.Resource:
    container: dict[str, Any] = {"name": "cuda", "image": image}
    if gpus is not None:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec = pod_template(container)
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    return resource(v.JOB, name, {"metadata": {"name": "gpu-validation"}, "spec": spec})


def command(name: str, *, secret: bool, stdin: str = "") -> v.Resource:
    return resource(
        v.REMOTE_COMMAND,
        name,
        {
            "create": "sudo bash -s",
            "stdin": stdin,
            "logging": "none" if secret else "stdoutAndStderr",
        },
        additional_secret_outputs=("stdout", "stderr") if secret else (),
    )


# ---------------------------------------------------------------- one policy at a time


def test_imdsv2_required():
    assert check("imdsv2-required", instance()) == [], "IMDSv2-only instance flagged"
    for tokens in ("optional", None):
        bad = instance(metadataOptions={"httpTokens": tokens} if tokens else None)
        messages = check("imdsv2-required", bad)
        assert_names_resource_and_fix(messages, bad)
        assert "httpTokens" in messages[0] and "required" in messages[0], f"{bad.urn}: {messages}"


def test_root_and_data_volumes_encrypted():
    good = instance(ebsBlockDevices=[{"deviceName": "/dev/sdf", "encrypted": True}])
    assert check("ebs-volumes-encrypted", good) == [], f"{good.urn}: encrypted volumes flagged"
    bad_root = instance(rootBlockDevice={"volumeSize": 200})
    assert_names_resource_and_fix(check("ebs-volumes-encrypted", bad_root), bad_root)
    bad_data = instance(ebsBlockDevices=[{"deviceName": "/dev/sdf", "encrypted": False}])
    messages = check("ebs-volumes-encrypted", bad_data)
    assert_names_resource_and_fix(messages, bad_data)
    assert "/dev/sdf" in messages[0], f"{bad_data.urn}: the volume is not named: {messages}"
    volume = resource(v.EBS_VOLUME, "scratch", {"size": 100})
    assert_names_resource_and_fix(check("ebs-volumes-encrypted", volume), volume)


@pytest.mark.parametrize("port", [22, 6443, 10250])
def test_no_world_ingress_to_admin_ports(port: int):
    good = security_group(ssh_rule("203.0.113.0/24", port=port), {"protocol": "-1", "self": True})
    assert check("no-world-ingress-to-admin-ports", good) == [], f"{good.urn}: narrow range flagged"
    for world in ("0.0.0.0/0", "::/0"):
        rule = ssh_rule(port=port)
        rule["cidrBlocks" if world == "0.0.0.0/0" else "ipv6CidrBlocks"] = [world]
        bad = security_group({"protocol": "-1", "self": True}, rule)
        messages = check("no-world-ingress-to-admin-ports", bad)
        assert_names_resource_and_fix(messages, bad)
        assert f"ingress[1] opens port {port}" in messages[0], f"{bad.urn}: {messages}"


def test_world_ingress_on_other_ports_and_separate_rules():
    https = security_group(
        {"protocol": "tcp", "fromPort": 443, "toPort": 443, "cidrBlocks": ["0.0.0.0/0"]}
    )
    assert check("no-world-ingress-to-admin-ports", https) == [], f"{https.urn}: 443 flagged"
    everything = security_group(
        {"protocol": "-1", "fromPort": 0, "toPort": 0, "cidrBlocks": ["0.0.0.0/0"]}
    )
    messages = check("no-world-ingress-to-admin-ports", everything)
    assert_names_resource_and_fix(messages, everything)
    assert "22" in messages[0] and "6443" in messages[0] and "10250" in messages[0], messages
    # TCP with the EC2 API's "all" marker for both ports (-1 to -1, as rules read back from
    # an account can carry it) opens every port, not none.
    tcp_all = security_group(
        {"protocol": "tcp", "fromPort": -1, "toPort": -1, "cidrBlocks": ["0.0.0.0/0"]}
    )
    messages = check("no-world-ingress-to-admin-ports", tcp_all)
    assert_names_resource_and_fix(messages, tcp_all)
    assert "22" in messages[0] and "6443" in messages[0] and "10250" in messages[0], messages
    rule = resource(
        v.SECURITY_GROUP_RULE,
        "ssh-anywhere",
        {
            "type": "ingress",
            "protocol": "tcp",
            "fromPort": 0,
            "toPort": 65535,
            "cidrBlocks": ["0.0.0.0/0"],
        },
    )
    assert_names_resource_and_fix(check("no-world-ingress-to-admin-ports", rule), rule)
    egress = resource(v.SECURITY_GROUP_RULE, "out", {**rule.props, "type": "egress"})
    assert check("no-world-ingress-to-admin-ports", egress) == [], f"{egress.urn}: egress flagged"
    vpc_rule = resource(
        v.INGRESS_RULE,
        "kubelet",
        {"ipProtocol": "tcp", "fromPort": 10250, "toPort": 10250, "cidrIpv6": "::/0"},
    )
    assert_names_resource_and_fix(check("no-world-ingress-to-admin-ports", vpc_rule), vpc_rule)


def test_gpu_instance_type_allowlist():
    assert check("gpu-instance-type-allowed", instance()) == [], "catalog type flagged"
    control_plane = instance("dev-gpu-control-plane", instanceType="m7i.large")
    assert check("gpu-instance-type-allowed", control_plane) == [], (
        f"{control_plane.urn}: not a GPU type"
    )
    unknown = instance(instanceType="g5g.xlarge")
    messages = check("gpu-instance-type-allowed", unknown)
    assert_names_resource_and_fix(messages, unknown)
    assert "g5g.xlarge" in messages[0] and "g5.xlarge" in messages[0], f"{unknown.urn}: {messages}"
    narrowed = {"allowedInstanceTypes": ["g6.xlarge"]}
    messages = check("gpu-instance-type-allowed", instance(), narrowed)
    assert len(messages) == 1 and "g6.xlarge" in messages[0], f"config not applied: {messages}"


def test_allowlist_default_is_the_catalog():
    assert sorted(v.CATALOG_INSTANCE_TYPES) == sorted(catalog.CATALOG), (
        "policies/gpu_cluster_policies/validators.py CATALOG_INSTANCE_TYPES differs from "
        f"components/catalog.py: {sorted(set(v.CATALOG_INSTANCE_TYPES) ^ set(catalog.CATALOG))}"
    )
    default = policy("gpu-instance-type-allowed").defaults()["allowedInstanceTypes"]
    assert sorted(default) == sorted(catalog.CATALOG), (
        "allowedInstanceTypes default is not the catalog"
    )
    assert all(v.GPU_FAMILY.match(t) for t in catalog.CATALOG), "a catalog type is not seen as GPU"


def test_required_tags():
    assert check("required-tags", instance()) == [], "tagged instance flagged"
    bad = instance(tags={"env": "dev", "owner": ""})
    messages = check("required-tags", bad)
    assert_names_resource_and_fix(messages, bad)
    assert "owner" in messages[0] and "gpu-cluster:tags" in messages[0], f"{bad.urn}: {messages}"
    untagged = resource("aws:ec2/vpc:Vpc", "network-vpc", {"cidrBlock": "10.42.0.0/16"})
    assert_names_resource_and_fix(check("required-tags", untagged), untagged)
    association = resource(
        "aws:ec2/routeTableAssociation:RouteTableAssociation", "a", {"subnetId": "s"}
    )
    assert check("required-tags", association) == [], "an untaggable type was flagged"
    messages = check("required-tags", instance(), {"requiredTags": ["cost-center"]})
    assert len(messages) == 1 and "cost-center" in messages[0], f"config not applied: {messages}"


@pytest.mark.parametrize(
    ("image", "reason"),
    [
        ("nvcr.io/nvidia/k8s-device-plugin:latest", "latest"),
        ("nvcr.io/nvidia/k8s-device-plugin", "untagged"),
        ("localhost:5000/device-plugin", "untagged"),
    ],
)
def test_container_images_pinned(image: str, reason: str):
    def daemonset(image: str) -> v.Resource:
        spec = pod_template({"name": "nvidia-device-plugin-ctr", "image": image})
        return resource("kubernetes:apps/v1:DaemonSet", "nvidia-device-plugin", {"spec": spec})

    for pinned in (
        "nvcr.io/nvidia/k8s-device-plugin:v0.20.0",
        "registry:5000/plugin@sha256:" + "0" * 64,
    ):
        assert check("container-images-pinned", daemonset(pinned)) == [], f"{pinned} flagged"
    bad = daemonset(image)
    messages = check("container-images-pinned", bad)
    assert_names_resource_and_fix(messages, bad)
    assert reason in messages[0] and "nvidia-device-plugin-ctr" in messages[0], (
        f"{bad.urn}: {messages}"
    )
    job = validation_job(image=image)
    assert_names_resource_and_fix(check("container-images-pinned", job), job)


def test_validation_job_has_deadline_and_gpu_limits():
    assert check("validation-job-bounded", validation_job()) == [], "bounded validation Job flagged"
    no_deadline = validation_job(deadline=None)
    messages = check("validation-job-bounded", no_deadline)
    assert_names_resource_and_fix(messages, no_deadline)
    assert "spec.activeDeadlineSeconds is unset;" in messages[0], f"{no_deadline.urn}: {messages}"
    no_gpus = validation_job(gpus=None)
    messages = check("validation-job-bounded", no_gpus)
    assert_names_resource_and_fix(messages, no_gpus)
    assert "nvidia.com/gpu" in messages[0], f"{no_gpus.urn}: {messages}"
    assert_names_resource_and_fix(
        check("validation-job-bounded", validation_job(deadline=None, gpus=0)), no_gpus, count=2
    )
    other = validation_job("nightly-report", deadline=None, gpus=None)
    assert check("validation-job-bounded", other) == [], f"{other.urn}: not a validation Job"


def test_secret_command_output_declared_secret():
    for name, stdin in (
        ("dev-gpu-a10g-0-join-token", "mint"),
        ("dev-gpu-kubeconfig", "read"),
        ("print-token", "kubeadm token create --ttl 15m"),
        ("admin", "cat /etc/kubernetes/admin.conf"),
    ):
        good = command(name, secret=True, stdin=stdin)
        assert check("secret-command-output", good) == [], f"{good.urn}: declared secret, flagged"
        bad = command(name, secret=False, stdin=stdin)
        messages = check("secret-command-output", bad)
        assert_names_resource_and_fix(messages, bad, count=2)
        assert "secret_stdout=True" in messages[0], f"{bad.urn}: {messages}"
    plain = command("dev-gpu-a10g-0-driver", secret=False, stdin="apt-get install nvidia-driver")
    assert check("secret-command-output", plain) == [], f"{plain.urn}: no secret, flagged"
    using = command(
        "join", secret=False, stdin="kubectl --kubeconfig /etc/kubernetes/admin.conf get nodes"
    )
    assert check("secret-command-output", using) == [], (
        f"{using.urn}: uses admin.conf, prints nothing"
    )


def test_secret_command_check_runs_in_preview_with_unknown_scripts():
    """In preview, a join step's stdin (rendered with the minted token) is unknown: the check
    still runs on what is known instead of giving up on the resource."""
    props = unknown_checking_proxy(
        {"create": "sudo bash -s", "stdin": UNKNOWN_STRING_VALUE, "logging": "none"}
    )
    join = resource(v.REMOTE_COMMAND, "dev-gpu-a10g-0-join", props)
    assert check("secret-command-output", join) == [], f"{join.urn}: unknown stdin flagged"
    token = resource(v.REMOTE_COMMAND, "dev-gpu-a10g-0-join-token", props)
    assert_names_resource_and_fix(check("secret-command-output", token), token)


def chain(node: str, *, join_after: str = "kube-tools") -> list[v.Resource]:
    """A node's host steps, each after the previous one, and the join after `join_after`."""
    steps: dict[str, v.Resource] = {}
    previous = None
    for step in (*pack_chain.JOIN_FOLLOWS, pack_chain.JOIN):
        after = steps[join_after] if step == "join" else previous
        deps = frozenset({after.urn}) if after else frozenset()
        steps[step] = previous = resource(v.REMOTE_COMMAND, f"{node}-{step}", {}, dependencies=deps)
    return list(steps.values())


def test_join_depends_on_driver_and_runtime():
    spec = policy("join-after-driver-and-runtime")
    good = chain("dev-gpu-a10g-0") + chain("dev-gpu-a10g-1")
    assert spec.check(good, spec.config()) == [], "a strict chain was flagged"
    early = chain("dev-gpu-a10g-0", join_after="driver")
    found = spec.check(early, spec.config())
    join = next(r for r in early if r.name.endswith("-join"))
    assert [urn for urn, _ in found] == [join.urn], (
        f"{join.urn}: expected one violation, got {found}"
    )
    assert_names_resource_and_fix([m for _, m in found], join)
    assert "dev-gpu-a10g-0-runtime" in found[0][1], f"{join.urn}: {found}"
    missing = [r for r in chain("dev-gpu-a10g-0") if not r.name.endswith("-driver")]
    found = spec.check(missing, spec.config())
    absent = [m for _, m in found if "has no" in m]
    assert len(absent) == 1 and "has no 'dev-gpu-a10g-0-driver' step" in absent[0], (
        f"missing driver step not reported once: {found}"
    )


def test_a_launched_machines_join_needs_its_host_key_rotation_an_existing_hosts_does_not():
    """A machine the stack launched (an EC2 instance of the node's name) booted with a key
    others could read: its join waits for the rotation. An existing host (no instance) booted
    with none of the stack's: its key is pinned from config, and the join needs no rotation."""
    spec = policy("join-after-driver-and-runtime")
    node = "dev-gpu-a10g-0"
    instance = resource(v.INSTANCE, node, {"instanceType": "g5.xlarge"})
    unrotated = [r for r in chain(node) if not r.name.endswith("-host-key-rotation")]
    found = spec.check([instance, *unrotated], spec.config())
    join = next(r for r in unrotated if r.name.endswith("-join"))
    assert [urn for urn, _ in found] == [join.urn], found
    assert f"has no '{node}-host-key-rotation' step" in found[0][1], found
    assert spec.check(unrotated, spec.config()) == [], "an existing host asked for a rotation"
    assert spec.check([instance, *chain(node)], spec.config()) == []


def test_every_policy_is_mandatory_with_a_schema_default_for_each_setting():
    names = [p.name for p in v.POLICIES]
    assert len(names) == len(set(names)), f"duplicate policy names: {names}"
    for spec, built in zip(v.POLICIES, build_policies(), strict=True):
        assert built.name == spec.name and built.enforcement_level is EnforcementLevel.MANDATORY, (
            f"{spec.name}: enforcement {built.enforcement_level}"
        )
        for key, schema in spec.config_schema.items():
            assert "default" in schema and "description" in schema, f"{spec.name}.{key}: {schema}"


# ---------------------------------------------------------------- through pulumi_policy's analyzer


@pytest.fixture(scope="module", params=STACKS)
def stack_graph(request) -> tuple[str, Graph]:
    return request.param, shared.stack_graph(request.param)


def test_every_stack_passes_all_mandatory_policies(stack_graph):
    stack, graph = stack_graph
    resources = [as_policy_input(r) for r in graph]
    found = analyze(resources)
    assert found == [], f"{stack}: policy violations: " + "\n".join(
        f"{p} {u}: {m}" for p, u, m, _ in found
    )
    # The policies had something to check: a vacuous pass proves nothing.
    joins = [
        r for r in resources if r.resource_type == v.REMOTE_COMMAND and r.name.endswith("-join")
    ]
    jobs = [r for r in resources if r.resource_type == v.JOB and r.name.endswith("-validation-job")]
    nodes = [
        r
        for r in resources
        if r.resource_type == v.INSTANCE and v.GPU_FAMILY.match(r.props["instanceType"])
    ]
    secret_steps = [
        r.name
        for r in resources
        if v.carries_secret_output(r, policy("secret-command-output").config())
    ]
    assert nodes and len(joins) == len(nodes) == len(jobs), (
        f"{stack}: {len(nodes)} GPU instances, {len(joins)} joins, {len(jobs)} validation Jobs"
    )
    # The join tokens are minted through the Kubernetes API by the program (decision 057) and
    # remembered by a record per node, no command's stdout: the commands that print a
    # credential are the two kubeconfig steps.
    tokens = [
        r
        for r in resources
        if r.resource_type == "pulumi:index:Stash" and r.name.endswith("-join-token")
    ]
    assert len(tokens) == len(nodes), f"{stack}: {len(tokens)} join tokens, {len(nodes)} nodes"
    assert sorted(n.rsplit("-gpu-", 1)[1] for n in secret_steps) == [
        "kubeconfig",
        "operator-kubeconfig",
    ], f"{stack}: commands with a credential on stdout: {secret_steps}"
    assert v.check_join_ordering(resources, {}) == [], f"{stack}: join ordering"


def test_taggable_types_in_the_stacks_are_known(stack_graph):
    """Every AWS type the program registers that takes `tags` is checked by required-tags even
    when a change drops its tags (TAGGABLE_TYPES covers it)."""
    _, graph = stack_graph
    for r in graph:
        if not r.type.startswith("aws:"):
            continue
        module = r.type.split(":")[1].split("/")[0]
        cls = getattr(
            pulumi_aws if module == "index" else getattr(pulumi_aws, module),
            r.type.rsplit(":", 1)[1],
        )
        if "tags" in inspect.signature(cls._internal_init).parameters:
            assert r.type in v.TAGGABLE_TYPES, (
                f"{r.urn}: taggable type {r.type} missing from TAGGABLE_TYPES"
            )


def test_unsafe_dev_variant_is_rejected_once_per_problem():
    """dev with SSH open to the world, an instance changed to IMDSv1 and the validation image
    changed to `latest` (the settings model refuses all three, so they are applied to the
    recorded resources, as a changed program would send them)."""
    graph = run_program("dev")
    resources = [as_policy_input(r) for r in graph]
    open_ssh_to_the_world(resources, ["0.0.0.0/0"])
    (node,) = [r for r in resources if r.resource_type == v.INSTANCE and r.name.endswith("-a10g-0")]
    (job,) = [
        r for r in resources if r.resource_type == v.JOB and r.name.endswith("-validation-job")
    ]
    imds_urn, job_urn = node.urn, job.urn
    node.props["metadataOptions"]["httpTokens"] = "optional"
    for container in job.props["spec"]["template"]["spec"]["containers"]:
        container["image"] = container["image"].rsplit(":", 1)[0] + ":latest"
    found = analyze(resources)
    by_policy = {}
    for name, urn, message, level in found:
        by_policy.setdefault(name, []).append((urn, message))
        assert level == MANDATORY, f"{urn}: {name} reported as {level}, not mandatory"
    report = "\n".join(f"{p} {u}: {m}" for p, u, m, _ in found)
    assert sorted(by_policy) == [
        "container-images-pinned",
        "imdsv2-required",
        "no-world-ingress-to-admin-ports",
    ], f"unexpected violations:\n{report}"
    assert all(len(items) == 1 for items in by_policy.values()), (
        f"not one violation per problem:\n{report}"
    )
    assert by_policy["imdsv2-required"][0][0] == imds_urn, (
        f"{imds_urn}: IMDSv1 not reported:\n{report}"
    )
    assert by_policy["container-images-pinned"][0][0] == job_urn, (
        f"{job_urn}: latest not reported:\n{report}"
    )
    ssh_urn, ssh_message = by_policy["no-world-ingress-to-admin-ports"][0]
    assert "22 (SSH)" in ssh_message and "0.0.0.0/0" in ssh_message, f"{ssh_urn}: {ssh_message}"


def open_ssh_to_the_world(resources: list[v.Resource], sources: list[str]) -> None:
    """The recorded cluster group's SSH rule, widened to `sources` (settings refuse it)."""
    (group,) = [r for r in resources if r.name == "network-cluster"]
    (rule,) = [r for r in group.props["ingress"] if r["fromPort"] == 22]
    rule["cidrBlocks"] = sources


# ---------------------------------------------------------------- issue 34: the missed cases
# One unsafe and one safe case per rule the pack missed.


def test_world_ingress_on_any_other_port_is_refused():
    unsafe = security_group(
        {"protocol": "tcp", "fromPort": 2379, "toPort": 2380, "cidrBlocks": ["0.0.0.0/0"]},
        {"protocol": "-1", "fromPort": 0, "toPort": 0, "ipv6CidrBlocks": ["::/0"]},
    )
    messages = check("no-world-ingress-to-any-port", unsafe)
    assert_names_resource_and_fix(messages, unsafe, count=2)
    assert "tcp 2379-2380" in messages[0] and "every port" in messages[1], messages
    safe = security_group(
        {"protocol": "udp", "fromPort": 8472, "toPort": 8472, "self": True},
        {"protocol": "tcp", "fromPort": 443, "toPort": 443, "cidrBlocks": ["0.0.0.0/0"]},
    )
    assert check("no-world-ingress-to-any-port", safe, {"allowedWorldPorts": [443]}) == []
    assert check("no-world-ingress-to-any-port", security_group(ssh_rule("0.0.0.0/0"))) == [], (
        "SSH is the admin-port policy's: reported once"
    )


def daemon_set(
    name: str,
    pod: dict[str, Any],
    *,
    namespace: str = "nvidia-device-plugin",
    metadata_name: str = "nvidia-device-plugin",
    type_: str = "kubernetes:apps/v1:DaemonSet",
) -> v.Resource:
    return resource(
        type_,
        name,
        {
            "metadata": {"name": metadata_name, "namespace": namespace},
            "spec": {"template": {"spec": pod}},
        },
    )


PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.20.0@sha256:" + "a" * 64


HARDENED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"securityContext": {**HARDENED, "privileged": True}}, "is privileged"),
        ({"securityContext": {"capabilities": {"drop": ["ALL"]}}}, "may escalate privileges"),
        (
            {
                "securityContext": {
                    **HARDENED,
                    "capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]},
                }
            },
            "adds capabilities NET_ADMIN",
        ),
        ({"securityContext": {"allowPrivilegeEscalation": False}}, "does not drop ALL"),
        ({"pod": {"hostPID": True}}, "spec.hostPID is true"),
        ({"pod": {"hostNetwork": True}}, "spec.hostNetwork is true"),
        ({"pod": {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}}, "is a hostPath (/)"),
    ],
    ids=["privileged", "escalation", "capability", "no-drop", "hostPID", "hostNetwork", "hostPath"],
)
def test_host_access_outside_the_system_daemonsets_is_refused(change, says):
    container = {"name": "c", "image": PLUGIN_IMAGE, "securityContext": HARDENED}
    if "securityContext" in change:
        container = {**container, "securityContext": change["securityContext"]}
    pod = {"containers": [container], **change.get("pod", {})}
    unsafe = resource(v.JOB, "dev-gpu-a10g-0-debug", {"spec": {"template": {"spec": pod}}})
    messages = check("host-access-only-for-system-daemonsets", unsafe)
    assert_names_resource_and_fix(messages, unsafe)
    assert says in messages[0], messages
    # The same pod as a system DaemonSet (the device plugin: its namespace, its name, its
    # image) is allowed; a DaemonSet named otherwise is not.
    assert check("host-access-only-for-system-daemonsets", daemon_set("anything", pod)) == []
    assert check(
        "host-access-only-for-system-daemonsets",
        daemon_set("debug-agent", pod, metadata_name="debug-agent"),
    )


def _root_pod(image: str = PLUGIN_IMAGE) -> dict[str, Any]:
    """hostPID, hostPath /, privileged: the pod of issue 41's finding 2."""
    return {
        "hostPID": True,
        "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
        "containers": [{"name": "c", "image": image, "securityContext": {"privileged": True}}],
    }


@pytest.mark.parametrize(
    "unsafe",
    [
        daemon_set("tenant-dcgm-exporter", _root_pod(), namespace="tenant", metadata_name="x"),
        daemon_set(
            "gpu-node-addons-dcgm-exporter",
            _root_pod("nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless"),
            namespace="tenant",
            metadata_name="dcgm-exporter",
        ),
        daemon_set(
            "dcgm-exporter", _root_pod("evil.example.com/x:1"), metadata_name="dcgm-exporter"
        ),
        daemon_set(
            "nvidia-device-plugin-daemonset",
            _root_pod(),
            type_="kubernetes:apps/v1:DaemonSetPatch",
        ),
        daemon_set("agent", _root_pod(), type_="kubernetes:apps/v1:DeploymentPatch"),
        daemon_set("rc", _root_pod(), type_="kubernetes:core/v1:ReplicationController"),
        resource("kubernetes:core/v1:PodTemplate", "tpl", {"template": {"spec": _root_pod()}}),
        resource(
            "kubernetes:argoproj.io/v1alpha1:Workflow",
            "wf",
            {"spec": {"templates": [{"name": "t", "podSpecPatch": "", "x": _root_pod()}]}},
        ),
    ],
    ids=[
        "named like a system DaemonSet",
        "a system name in another namespace",
        "a system name with a foreign image",
        "a patch of the device plugin",
        "a Deployment patch",
        "a ReplicationController",
        "a PodTemplate",
        "a custom resource embedding a pod spec",
    ],
)
def test_host_access_cannot_be_named_around(unsafe):
    """Issue 41, finding 2: a privileged, hostPID, hostPath / DaemonSet named
    `tenant-dcgm-exporter` passed the name-suffix check; patches, ReplicationControllers and
    PodTemplates were not checked at all."""
    messages = check("host-access-only-for-system-daemonsets", unsafe)
    assert any("is privileged" in m for m in messages), messages
    assert any("hostPID" in m for m in messages) and any("hostPath (/)" in m for m in messages)


def test_a_hardened_workload_passes_the_host_access_policy():
    container = {"name": "c", "image": "nvcr.io/nvidia/x:1", "securityContext": HARDENED}
    safe = resource(v.JOB, "x", {"spec": {"template": {"spec": {"containers": [container]}}}})
    assert check("host-access-only-for-system-daemonsets", safe) == []


def test_remote_commands_without_host_keys_are_refused():
    pinned = {"host": "10.0.0.5", "hostKey": "ssh-ed25519 AAAA", "user": "ubuntu"}
    safe = resource(v.REMOTE_COMMAND, "dev-gpu-a10g-0-driver", {"connection": pinned})
    assert check("remote-commands-pin-host-keys", safe) == []
    unpinned = {k: val for k, val in pinned.items() if k != "hostKey"}
    unsafe = resource(v.REMOTE_COMMAND, "dev-gpu-a10g-0-driver", {"connection": unpinned})
    messages = check("remote-commands-pin-host-keys", unsafe)
    assert_names_resource_and_fix(messages, unsafe)
    hop = {**pinned, "proxy": {"host": "198.51.100.7", "user": "ubuntu"}}
    copy_ = resource(v.REMOTE_COPY, "dev-gpu-a10g-0-scripts", {"connection": hop})
    messages = check("remote-commands-pin-host-keys", copy_)
    assert_names_resource_and_fix(messages, copy_)
    assert "connection.proxy has no hostKey" in messages[0], messages


def test_images_from_registries_nobody_trusts_are_refused():
    for image in ("evil.example.com/cuda:12", "cuda-sample:vectoradd", "docker.io/nvidia/cuda:12"):
        unsafe = validation_job(image=image)
        messages = check("trusted-registries", unsafe)
        assert_names_resource_and_fix(messages, unsafe)
    assert check("trusted-registries", validation_job()) == []


def test_a_gpu_job_under_any_name_needs_a_deadline():
    unsafe = validation_job(name="dev-gpu-a10g-0-burn", deadline=None)
    assert check("validation-job-bounded", unsafe) == [], "the old policy saw only its suffix"
    messages = check("gpu-jobs-bounded", unsafe)
    assert_names_resource_and_fix(messages, unsafe)
    assert check("gpu-jobs-bounded", validation_job(name="dev-gpu-a10g-0-burn")) == []
    assert check("gpu-jobs-bounded", validation_job(name="no-gpus", deadline=None, gpus=None)) == []


def test_every_security_property_of_every_stack_is_guarded_by_a_policy(stack_graph):
    """Mutation sample of issue 34 (seed 20261203 flipped allowPrivilegeEscalation in the NCCL
    manifest and no test failed): every security property of every recorded workload and
    resource, flipped one at a time, makes the pack report a mandatory violation."""
    _, graph = stack_graph
    flips = 0
    for original in (as_policy_input(r) for r in graph):
        for what, mutate in SECURITY_FLIPS.get(original.resource_type, ()):
            for target in mutate(copy.deepcopy(dict(original.props))):
                flipped = v.Resource(
                    original.resource_type,
                    target,
                    original.urn,
                    original.name,
                    original.additional_secret_outputs,
                )
                flips += 1
                assert v.validate_resource(flipped), f"{original.urn}: {what} flipped, no policy"
    assert flips > 20, flips


def _containers_of(props: dict[str, Any]) -> list[dict[str, Any]]:
    spec = props.get("spec", {})
    pod = (
        spec.get("template", {}).get("spec")
        or spec.get("jobTemplate", {}).get("spec", {}).get("template", {}).get("spec")
        or {}
    )
    return [*pod.get("initContainers", []), *pod.get("containers", [])]


def _pod_of(props: dict[str, Any]) -> dict[str, Any]:
    return props["spec"]["template"]["spec"]


def _each_container(change):
    def mutate(props):
        for index in range(len(_containers_of(props))):
            flipped = copy.deepcopy(props)
            change(_containers_of(flipped)[index])
            yield flipped

    return mutate


def _set_context(key, value):
    def change(container):
        container.setdefault("securityContext", {})[key] = value

    return change


def _add_capability(container):
    context = container.setdefault("securityContext", {})
    context.setdefault("capabilities", {}).setdefault("add", []).append("SYS_ADMIN")


def _pod_change(change):
    def mutate(props):
        flipped = copy.deepcopy(props)
        change(_pod_of(flipped))
        yield flipped

    return mutate


def _unpinned_image(container):
    container["image"] = container["image"].split("@")[0].rsplit(":", 1)[0] + ":latest"


def _untrusted_image(container):
    container["image"] = "evil.example.com/" + container["image"].split("/", 1)[1]


def _once(change):
    def mutate(props):
        flipped = copy.deepcopy(props)
        change(flipped)
        yield flipped

    return mutate


def _world_ssh(props):
    props.setdefault("ingress", []).append(ssh_rule("0.0.0.0/0"))


def _world_etcd(props):
    props.setdefault("ingress", []).append(
        {"protocol": "tcp", "fromPort": 2379, "toPort": 2380, "cidrBlocks": ["0.0.0.0/0"]}
    )


def _drop_host_key(props):
    props["connection"].pop("hostKey", None)


WORKLOAD_FLIPS = (
    ("allowPrivilegeEscalation", _each_container(_set_context("allowPrivilegeEscalation", True))),
    ("privileged", _each_container(_set_context("privileged", True))),
    ("an added capability", _each_container(_add_capability)),
    ("hostPID", _pod_change(lambda pod: pod.__setitem__("hostPID", True))),
    ("hostIPC", _pod_change(lambda pod: pod.__setitem__("hostIPC", True))),
    (
        "a hostPath",
        _pod_change(
            lambda pod: pod.setdefault("volumes", []).append(
                {"name": "r", "hostPath": {"path": "/"}}
            )
        ),
    ),
    ("an image tag", _each_container(_unpinned_image)),
    ("an image's registry", _each_container(_untrusted_image)),
)
SECURITY_FLIPS: dict[str, tuple] = {
    "kubernetes:batch/v1:Job": WORKLOAD_FLIPS,
    "kubernetes:apps/v1:Deployment": WORKLOAD_FLIPS,
    # A system DaemonSet may use the host; its image and registry are still checked.
    "kubernetes:apps/v1:DaemonSet": WORKLOAD_FLIPS[-2:],
    v.INSTANCE: (
        ("IMDSv2", _once(lambda p: p["metadataOptions"].__setitem__("httpTokens", "optional"))),
        (
            "root volume encryption",
            _once(lambda p: p["rootBlockDevice"].__setitem__("encrypted", False)),
        ),
    ),
    v.SECURITY_GROUP: (
        ("SSH to the world", _once(_world_ssh)),
        ("etcd to the world", _once(_world_etcd)),
    ),
    v.REMOTE_COMMAND: (("the host key", _once(_drop_host_key)),),
    v.REMOTE_COPY: (("the host key", _once(_drop_host_key)),),
}


# ---------------------------------------------------------------- configuration and the pack itself


def test_enforcement_and_settings_come_from_the_policy_config():
    """What `--policy-pack-config` sends: a policy made advisory reports as advisory, a disabled
    one reports nothing, and policy settings replace the defaults."""
    servicer = _PolicyAnalyzerServicer(
        PACK_NAME, "0.0.1", build_policies(), EnforcementLevel.MANDATORY
    )
    levels = analyzer_pb2.EnforcementLevel
    settings = struct_pb2.Struct()
    settings.update({"requiredTags": ["cost-center"]})
    servicer.Configure(
        analyzer_pb2.ConfigureAnalyzerRequest(
            policyConfig={
                "imdsv2-required": analyzer_pb2.PolicyConfig(
                    enforcementLevel=levels.Value("ADVISORY")
                ),
                "ebs-volumes-encrypted": analyzer_pb2.PolicyConfig(
                    enforcementLevel=levels.Value("DISABLED")
                ),
                "required-tags": analyzer_pb2.PolicyConfig(
                    enforcementLevel=levels.Value("MANDATORY"), properties=settings
                ),
            }
        ),
        None,
    )
    bad = instance(
        metadataOptions={"httpTokens": "optional", "httpPutResponseHopLimit": 1},
        rootBlockDevice={"volumeSize": 200},
    )
    response = servicer.Analyze(analyzer_resource(bad, analyzer_pb2.AnalyzeRequest), None)
    found = {d.policyName: (d.enforcementLevel, d.message) for d in response.diagnostics}
    assert sorted(found) == ["imdsv2-required", "required-tags"], f"{bad.urn}: {found}"
    assert found["imdsv2-required"][0] == levels.Value("ADVISORY"), f"{bad.urn}: {found}"
    assert "cost-center" in found["required-tags"][1], f"{bad.urn}: {found}"


def test_the_pack_starts_and_lists_every_policy_as_mandatory():
    """`python policies/__main__.py`, as the Pulumi CLI starts it: it prints its port and serves
    the analyzer; GetAnalyzerInfo lists every policy, mandatory, with its config schema."""
    pack_dir = Path(__file__).resolve().parent.parent / "policies"
    process = subprocess.Popen(
        [sys.executable, "-u", "__main__.py"],
        cwd=pack_dir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        port = process.stdout.readline().decode().strip()
        assert port.isdigit(), (
            f"policies/__main__.py printed {port!r}: {process.stderr.read1().decode()}"
        )
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            info = analyzer_pb2_grpc.AnalyzerStub(channel).GetAnalyzerInfo(
                empty_pb2.Empty(), timeout=30
            )
    finally:
        process.kill()
        process.wait(timeout=30)
    assert info.name == PACK_NAME, f"pack name {info.name}"
    listed = {p.name: p for p in info.policies}
    assert sorted(listed) == sorted(p.name for p in v.POLICIES), (
        f"policies listed: {sorted(listed)}"
    )
    for spec in v.POLICIES:
        served = listed[spec.name]
        assert served.enforcementLevel == MANDATORY, f"{spec.name}: level {served.enforcementLevel}"
        schema = json_format.MessageToDict(served.configSchema.properties)
        assert schema == json.loads(json.dumps(dict(spec.config_schema))), (
            f"{spec.name}: schema {schema}"
        )


@pytest.mark.parametrize("limit", [0, -1, 0.5, -1.0, True, "0", "-1", "0.5", "", None])
def test_validation_job_refuses_a_gpu_limit_that_is_no_positive_whole_number(limit):
    """A validation pod with 0, -1 or half a GPU runs without a GPU and proves nothing; the
    engine sends numbers as floats and quantities as strings, so both shapes are refused."""
    job = validation_job()
    container = job.props["spec"]["template"]["spec"]["containers"][0]
    container["resources"]["limits"]["nvidia.com/gpu"] = limit
    messages = check("validation-job-bounded", job)
    assert_names_resource_and_fix(messages, job)
    assert "nvidia.com/gpu" in messages[0], f"{job.urn}: limit {limit!r}: {messages}"


@pytest.mark.parametrize("limit", [1, 8, 1.0, 8.0, "1", "8"])
def test_validation_job_accepts_a_whole_number_of_gpus(limit):
    job = validation_job()
    container = job.props["spec"]["template"]["spec"]["containers"][0]
    container["resources"]["limits"]["nvidia.com/gpu"] = limit
    assert check("validation-job-bounded", job) == [], f"{job.urn}: limit {limit!r} refused"


@pytest.mark.parametrize("deadline", [0, -1, 0.5, True, "0"])
def test_validation_job_refuses_a_deadline_that_is_no_positive_whole_number(deadline):
    job = validation_job(deadline=deadline)
    messages = check("validation-job-bounded", job)
    assert_names_resource_and_fix(messages, job)
    # The reviewer reads the value that was refused.
    assert f"spec.activeDeadlineSeconds is {deadline};" in messages[0], f"{job.urn}: {messages}"


def test_configured_secret_output_suffixes_replace_the_defaults():
    """An organisation that names its credential steps differently configures their suffixes:
    those steps are then held to secret stdout, and the default names no longer are."""
    config = {"secretOutputCommandSuffixes": ["-vault-read"]}
    custom = resource(v.REMOTE_COMMAND, "cp-vault-read", {"create": "cat /etc/creds"})
    default_named = resource(v.REMOTE_COMMAND, "n1-join-token", {"create": "echo hello"})
    spec = policy("secret-command-output")
    assert v.carries_secret_output(custom, spec.config(config))
    assert not v.carries_secret_output(default_named, spec.config(config))
    assert v.carries_secret_output(default_named, spec.config())

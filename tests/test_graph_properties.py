"""The graph's rules hold for any valid stack, not just the three stack files: each node's chain
in the step table's order and waiting on no other node, the device plugin on no node, hardened
machines, secrets kept secret (README: Architecture; components/hosts/steps.py).

Hypothesis draws whole valid configurations (either control-plane mode, a created or an existing
VPC, a bastion or not, one to three pools of any catalog type and a driver branch that supports
it, MIG or time slicing, validation on or off), runs the real program and checks every rule.
Valid means what the settings accept: a host the stack did not create (an existing control
plane, a bastion) comes with its host key, a bastion named by a public address with its
security group (decisions 038, 041), and a managed control plane is sized to its fleet (049).
"""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from components import catalog
from components.settings import (
    SUPPORTED_DRIVER_BRANCHES,
    SUPPORTED_KUBERNETES_MINORS,
    control_plane_size,
)
from components.settings.sections import ManagedControlPlane
from tools.harness.graph import (
    HOST_CHAIN,
    VALIDATION_CHAIN,
    Graph,
    Secret,
    plain_strings,
    script_params,
)
from tools.harness.stacks import TEST_SECRETS, run_program, stack_file

DNS = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)
# Host keys of hosts the stack did not create, required in config (decision 041): the ones
# prod's stack file pins (any valid key line serves; nothing here dials).
_PROD = stack_file("prod")
CONTROL_PLANE_HOST_KEY = _PROD["gpu-cluster:controlPlane"]["hostKey"]
BASTION_HOST_KEY = _PROD["gpu-cluster:network"]["bastion"]["hostKey"]
BASTION_SECURITY_GROUP = "sg-0a1b2c3d4e5f60788"


def _branches_for(instance_type: str) -> list[str]:
    gpu = catalog.CATALOG[instance_type].gpu
    return [
        b
        for b in SUPPORTED_DRIVER_BRANCHES
        if gpu.min_driver_branch <= int(b) <= (gpu.max_driver_branch or 10_000)
    ]


@st.composite
def pools(draw):
    names = draw(st.lists(DNS, min_size=1, max_size=3, unique=True))
    result = []
    for name in names:
        instance_type = draw(st.sampled_from(sorted(catalog.CATALOG)))
        pool = {
            "name": name,
            "instanceType": instance_type,
            "count": draw(st.integers(0, 3)),
            "driverVersion": draw(st.sampled_from(_branches_for(instance_type))),
            "market": draw(st.sampled_from(["on-demand", "spot"])),
            "osVersion": draw(st.sampled_from(["24.04", "22.04"])),
            "labels": draw(st.dictionaries(DNS, DNS, max_size=2)),
        }
        if draw(st.booleans()):
            pool["taints"] = [
                {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
                {"key": f"{name}.example.com/dedicated", "effect": "NoExecute"},
            ]
        result.append(pool)
    return result


@st.composite
def stacks(draw):
    config = {
        "clusterName": draw(DNS),
        "kubernetesVersion": draw(st.sampled_from(SUPPORTED_KUBERNETES_MINORS)),
        "ssh": {
            "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI"
            "INTIjGyr13HQLAMEix1wpOhWub0XPBWDPSSbpsKUm8F ops@example"
        },
        "nodePools": draw(pools()),
    }
    if draw(st.booleans()):
        config["network"] = {"create": True, "sshAllowedCidrs": ["203.0.113.0/24"]}
    else:
        subnets = [f"subnet-0a1b2c3d4e5f6071{i}" for i in range(draw(st.integers(1, 3)))]
        config["network"] = {"vpcId": "vpc-0a1b2c3d4e5f60718", "subnetIds": subnets}
        if draw(st.booleans()):  # a bastion reaches into an existing VPC only
            # Named by a public address it needs its security group (SSH is admitted from it;
            # decision 038); by its private address, the group or that address's /32.
            host = draw(st.sampled_from(["198.51.100.7", "10.9.0.4"]))
            bastion = {"host": host, "hostKey": BASTION_HOST_KEY}
            if host == "198.51.100.7" or draw(st.booleans()):
                bastion["securityGroupId"] = BASTION_SECURITY_GROUP
            config["network"]["bastion"] = bastion
    if draw(st.booleans()):
        config["controlPlane"] = {"mode": "managed", "apiAllowedCidrs": ["203.0.113.0/24"]}
        # Sized to its fleet (decision 049), as an operator would set it: the default machine
        # unless the drawn fleet needs a larger one (tools.harness.stacks.fleet_config).
        default = ManagedControlPlane.model_fields["instance_type"].default
        fleet = sum(pool["count"] for pool in config["nodePools"])
        size = control_plane_size.instance_size(default)
        if size is not None and not size.holds(control_plane_size.needed(fleet)):
            config["controlPlane"]["instanceType"] = control_plane_size.to_use(default, fleet)
    elif "vpcId" in config["network"]:
        config["controlPlane"] = {
            "mode": "existing",
            "host": "10.9.0.5",
            "endpoint": "10.9.0.5:6443",
            "hostKey": CONTROL_PLANE_HOST_KEY,
        }
    else:  # a VPC the stack creates reaches an existing control plane on a public address
        config["controlPlane"] = {
            "mode": "existing",
            "host": "cp.example.com",
            "endpoint": "cp.example.com:6443",
            "hostKey": CONTROL_PLANE_HOST_KEY,
        }
    mig = draw(st.sampled_from(["none", "single", "mixed"]))
    replicas = 1 if mig != "none" else draw(st.integers(1, 4))
    config["devicePlugin"] = {"migStrategy": mig, "timeSlicing": {"replicas": replicas}}
    config["validation"] = {"enabled": draw(st.booleans())}
    return config


def _nodes(config: dict) -> list[tuple[str, dict]]:
    return [
        (f"{config['clusterName']}-{pool['name']}-{index}", pool)
        for pool in config["nodePools"]
        for index in range(pool["count"])
    ]


def _owned(graph: Graph, node: str) -> set[str]:
    return {r.urn for r in graph if r.name == node or r.name.startswith(f"{node}-")}


def _check(config: dict, graph: Graph) -> None:
    nodes = _nodes(config)
    validation = config["validation"]["enabled"]
    chain_steps = HOST_CHAIN + (VALIDATION_CHAIN if validation else ())
    managed = config["controlPlane"]["mode"] == "managed"
    instances = graph.of_type("aws:ec2/instance:Instance")
    assert len(instances) == len(nodes) + (1 if managed else 0), [i.name for i in instances]

    owned = {node: _owned(graph, node) for node, _ in nodes}
    for node, pool in nodes:
        chain = [graph.named(node), *(graph.named(f"{node}-{s}") for s in chain_steps)]
        for earlier, later in itertools.pairwise(chain):
            assert graph.depends_on(later, earlier), f"{later.urn} does not wait for {earlier.name}"
        for other, urns in owned.items():
            if other != node:
                leaked = graph.ancestors(chain[-1]) & urns
                assert not leaked, f"{chain[-1].urn} waits on {other}: {sorted(leaked)}"
        entry = catalog.CATALOG[pool["instanceType"]]
        driver = script_params(graph.named(f"{node}-driver"))
        assert driver["GPU_COUNT"] == str(entry.gpu_count), f"{node}-driver: {driver}"
        assert driver["DRIVER_BRANCH"] == pool["driverVersion"], f"{node}-driver: {driver}"
        assert driver["NEEDS_FABRIC_MANAGER"] == str(entry.needs_fabric_manager).lower(), node
        join = graph.named(f"{node}-join")
        assert isinstance(join.inputs["stdin"], Secret), f"{join.urn}: token stdin not secret"
        assert not join.plain_inputs().get("delete"), f"{join.urn}: a dead node would block"
        if validation:
            job = graph.named(f"{node}-validation-job").plain_inputs()
            container = job["spec"]["template"]["spec"]["containers"][0]
            limit = container["resources"]["limits"]["nvidia.com/gpu"]
            # Every nvidia.com/gpu the node advertises: GPUs x time-slicing shares, so the
            # pod holds each physical GPU at least once.
            shares = config["devicePlugin"]["timeSlicing"]["replicas"]
            expected = entry.gpu_count * shares
            assert int(limit) == expected, f"{node}-validation-job requests {limit}, not {expected}"

    daemon_set = graph.of_type("kubernetes:apps/v1:DaemonSet")[0]
    gpu_resources = set().union(*owned.values()) if owned else set()
    assert not graph.ancestors(daemon_set) & gpu_resources, f"{daemon_set.urn} waits on a node"

    for instance in instances:
        inputs = instance.plain_inputs()
        assert inputs["metadataOptions"]["httpTokens"] == "required", instance.urn
        assert inputs["rootBlockDevice"]["encrypted"] is True, instance.urn
    key_line = TEST_SECRETS["sshPrivateKey"].splitlines()[1]
    for resource in graph:
        for text in plain_strings(resource.inputs):
            assert key_line not in text, f"{resource.urn}: SSH key in a plain input"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stacks())
def test_graph_rules_hold_for_any_valid_stack(config):
    graph = run_program("dev", config=config, replace_config=True)
    _check(config, graph)

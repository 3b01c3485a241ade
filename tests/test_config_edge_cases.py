"""Stack configurations nobody wrote yet, through the real entry points (the loader and the
program under the harness): each either yields a plan that makes sense or stops before any
resource with one message per key path, saying what was given and what is accepted."""

from __future__ import annotations

import base64

import pytest

from components import catalog
from components.kube.manifests import validation_job_name
from components.settings import (
    MAX_NODE_NAME_LENGTH,
    SUPPORTED_KUBERNETES_MINORS,
    SUPPORTED_UBUNTU,
)
from components.settings.load import ConfigError
from tools.harness.graph import unwrap
from tools.harness.stacks import load_stack_settings, run_program, stack_file

POOL = {"name": "a", "instanceType": "g5.xlarge", "count": 1}
PUBLIC_KEY = stack_file("dev")["gpu-cluster:ssh"]["publicKey"]
JOB_TYPE = "kubernetes:batch/v1:Job"
# An existing VPC, the one kind a bastion reaches into.
EXISTING_VPC = {"vpcId": "vpc-0a1b2c3d4e5f60718", "subnetIds": ["subnet-0a1b2c3d4e5f60710"]}
INSTANCE_TYPE = "aws:ec2/instance:Instance"
# dev's control plane (m7i.large) serves up to 10 GPU nodes; tests of larger fleets give it the
# size the settings ask for 11 to 99 (tests/test_control_plane_sizing.py).
SIZED_CONTROL_PLANE = {
    "controlPlane": {
        **stack_file("dev")["gpu-cluster:controlPlane"],
        "instanceType": "m7i.xlarge",
    }
}
# A host key for the hosts the stack did not create (bastion, existing control plane): required.
HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHgQhqhz7570cVflJzFU7G+rWj7+er6oB85ewHM+R5QD"


def _problem(key: str, **kwargs) -> str:
    """The one problem reported for `gpu-cluster:<key>` (the text after 'expected')."""
    with pytest.raises(ConfigError) as caught:
        load_stack_settings(**kwargs)
    error = caught.value
    found = [p for p in error.problems if p.key == f"gpu-cluster:{key}"]
    assert found, f"no problem for gpu-cluster:{key}; got {[str(p) for p in error.problems]}"
    assert "Traceback" not in str(error), f"gpu-cluster:{key}: a traceback in the message"
    return found[0].expected


def _gpu_nodes(graph) -> list[str]:
    return sorted(graph.outputs["gpuNodes"])


# ---------------------------------------------------------------- pool sizes and counts


def test_user_scales_every_pool_to_zero_keeps_the_cluster_and_creates_no_node():
    graph = run_program("dev", config={"nodePools": [{**POOL, "count": 0}]})
    assert _gpu_nodes(graph) == [], f"nodes planned for count 0: {_gpu_nodes(graph)}"
    assert not graph.of_type(JOB_TYPE), "a validation Job without any node"
    assert graph.outputs["nodePools"] == {"a": []}, f"{graph.outputs['nodePools']}"
    # The control plane and the device plugin stay: scaling to zero is not destroying.
    assert graph.find(lambda r: r.type == "kubernetes:apps/v1:DaemonSet"), "device plugin gone"


def test_user_scales_one_pool_to_zero_while_another_has_nodes():
    graph = run_program(
        "dev",
        config={"nodePools": [{**POOL, "count": 0}, {**POOL, "name": "b", "count": 2}]},
    )
    assert graph.outputs["nodePools"] == {"a": [], "b": ["dev-gpu-b-0", "dev-gpu-b-1"]}, (
        f"nodePools output: {graph.outputs['nodePools']}"
    )
    assert len(graph.of_type(JOB_TYPE)) == 2, "one validation Job per node of pool b"


def test_user_configures_twenty_pools():
    pools = [{**POOL, "name": f"p{i}"} for i in range(20)]
    graph = run_program("dev", config={"nodePools": pools, **SIZED_CONTROL_PLANE})
    assert _gpu_nodes(graph) == sorted(f"dev-gpu-p{i}-0" for i in range(20))
    assert len(graph.of_type(INSTANCE_TYPE)) == 21, "20 GPU nodes plus the control plane"


def test_user_passes_count_as_true():
    assert "whole number" in _problem(
        "nodePools[0].count", config={"nodePools": [{**POOL, "count": True}]}
    )


def test_user_passes_numbers_as_strings():
    settings = load_stack_settings(
        config={
            "nodePools": [{**POOL, "count": "2", "rootVolumeGiB": "300"}],
            "validation": {"timeoutSeconds": "600"},
        }
    )
    pool = settings.node_pools[0]
    assert (pool.count, pool.root_volume_gib) == (2, 300), f"pool {pool.name}"
    assert settings.validation.timeout_seconds == 600


# ---------------------------------------------------------------- names and their limits


def test_user_picks_a_one_character_pool_name():
    graph = run_program("dev", config={"nodePools": [POOL]})
    assert _gpu_nodes(graph) == ["dev-gpu-a-0"]


def test_user_picks_names_that_fit_exactly_in_a_node_name():
    cluster = "c" * 40
    pool = "p" * (MAX_NODE_NAME_LENGTH - len(cluster) - len("--9"))
    graph = run_program(
        "dev", config={"clusterName": cluster, "nodePools": [{**POOL, "name": pool, "count": 10}]}
    )
    for node in _gpu_nodes(graph):
        assert len(node) <= MAX_NODE_NAME_LENGTH, f"node name {node} has {len(node)} characters"
    for job in graph.of_type(JOB_TYPE):
        metadata = unwrap(job.inputs["metadata"])
        assert len(metadata["name"]) <= 63, f"{job.urn}: Job name {metadata['name']}"
        for key, value in metadata["labels"].items():
            assert len(value) <= 63, f"{job.urn}: label {key}={value} longer than 63"


def test_user_picks_the_longest_cluster_and_pool_names():
    """40 + 40 characters: each name is valid, the node names (83) are not."""
    expected = _problem(
        "nodePools[0].name",
        config={"clusterName": "c" * 40, "nodePools": [{**POOL, "name": "p" * 40}]},
    )
    assert "63" in expected and "c" * 40 + "-" + "p" * 40 + "-0" in expected, expected


def test_longest_node_index_counts_toward_the_node_name():
    cluster, pool = "c" * 40, "p" * 20  # "<c>-<p>-9" has 63 characters, "<c>-<p>-10" 64
    load_stack_settings(
        config={"clusterName": cluster, "nodePools": [{**POOL, "name": pool, "count": 10}]}
    )
    expected = _problem(
        "nodePools[0].name",
        config={
            "clusterName": cluster,
            "nodePools": [{**POOL, "name": pool, "count": 11}],
            **SIZED_CONTROL_PLANE,
        },
    )
    assert f"{cluster}-{pool}-10" in expected, expected


def test_validation_job_name_of_a_63_character_node_is_shortened_not_cut():
    node = "n" * MAX_NODE_NAME_LENGTH
    name = validation_job_name(node)
    assert len(name) <= 63 and not name.endswith("-"), f"Job name {name}"
    assert validation_job_name("m" * MAX_NODE_NAME_LENGTH) != name, "two nodes, one Job name"


# ---------------------------------------------------------------- every supported choice


@pytest.mark.parametrize("instance_type", sorted(catalog.CATALOG))
def test_user_picks_any_catalog_instance_type(instance_type):
    settings = load_stack_settings(config={"nodePools": [{**POOL, "instanceType": instance_type}]})
    assert settings.node_pools[0].gpu_type.gpu_count >= 1, instance_type


@pytest.mark.parametrize("minor", SUPPORTED_KUBERNETES_MINORS)
def test_user_picks_any_supported_kubernetes_minor(minor):
    graph = run_program("dev", config={"kubernetesVersion": minor})
    assert graph.outputs["kubernetesVersion"] == minor, f"kubernetesVersion {minor}"


@pytest.mark.parametrize("release", SUPPORTED_UBUNTU)
def test_user_picks_any_supported_ubuntu_for_a_pool(release):
    graph = run_program("dev", config={"nodePools": [{**POOL, "osVersion": release}]})
    assert _gpu_nodes(graph) == ["dev-gpu-a-0"], f"Ubuntu {release}"


@pytest.mark.parametrize(
    "device_plugin",
    [
        {"migStrategy": "single"},
        {"migStrategy": "mixed"},
        {"timeSlicing": {"replicas": 64}},
    ],
    ids=["mig-single", "mig-mixed", "time-slicing-64"],
)
def test_user_sets_mig_or_time_slicing(device_plugin):
    graph = run_program("dev", config={"devicePlugin": device_plugin})
    assert len(graph.of_type(JOB_TYPE)) == 1, f"{device_plugin}: one validation Job"


def test_user_disables_validation():
    graph = run_program("dev", config={"validation": {"enabled": False}})
    assert not graph.of_type(JOB_TYPE), "validation Job planned while disabled"
    (node,) = graph.outputs["gpuNodes"].values()
    assert node["validated"] == "disabled", f"gpuNodes output {node}"


# ---------------------------------------------------------------- YAML oddities


def test_unquoted_kubernetes_version_that_yaml_shortens():
    """`kubernetesVersion: 1.30` unquoted reaches the program as 1.3."""
    expected = _problem("kubernetesVersion", config={"kubernetesVersion": 1.3})
    assert '"1.30" in quotes' in expected, expected


def test_unquoted_kubernetes_version_yaml_keeps():
    settings = load_stack_settings(config={"kubernetesVersion": 1.35})
    assert settings.kubernetes_version == "1.35"


def test_unquoted_driver_branch_is_the_branch():
    settings = load_stack_settings(config={"nodePools": [{**POOL, "driverVersion": 580}]})
    assert settings.node_pools[0].driver_version == "580"


@pytest.mark.parametrize(("given", "meant"), [("yes", True), ("on", True), ("off", False)])
def test_yaml_1_1_booleans_as_strings(given, meant):
    """The Pulumi CLI reads YAML 1.2, where yes/on/off stay strings."""
    settings = load_stack_settings(config={"validation": {"enabled": given}})
    assert settings.validation.enabled is meant, f"validation.enabled: {given!r}"


def test_unquoted_boolean_label_value_says_to_quote_it():
    expected = _problem(
        "nodePools[0].labels.gpu", config={"nodePools": [{**POOL, "labels": {"gpu": True}}]}
    )
    assert '"true"' in expected, expected


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("clusterName", ["dev"], "DNS label"),
        ("nodePools", {"name": "a"}, "a list"),
        ("network", {"create": True, "sshAllowedCidrs": "203.0.113.0/24"}, "a list"),
        ("tags", "env=dev", "object"),
    ],
    ids=["name-as-list", "pools-as-object", "cidrs-as-string", "tags-as-string"],
)
def test_user_writes_the_wrong_shape(key, value, expected):
    path = "network.sshAllowedCidrs" if key == "network" else key
    assert expected in _problem(path, config={key: value})


# ---------------------------------------------------------------- labels, taints and tags


@pytest.mark.parametrize("label", ["nvidia.com/gpu.present", "gpu-cluster.io/pool"])
def test_user_label_collides_with_a_label_the_program_sets(label):
    expected = _problem(
        f"nodePools[0].labels.{label}",
        config={"nodePools": [{**POOL, "labels": {label: "false"}}]},
    )
    assert "does not set itself" in expected, expected


@pytest.mark.parametrize(
    ("label", "why"),
    [
        ("kubernetes.io/hostname", "kubelet does not set itself"),
        ("kubernetes.io/os", "kubelet does not set itself"),
        ("kubernetes.io/arch", "kubelet does not set itself"),
        ("node.kubernetes.io/instance-type", "kubelet does not set itself"),
        ("topology.kubernetes.io/zone", "kubelet does not set itself"),
        ("topology.kubernetes.io/region", "kubelet does not set itself"),
        ("beta.kubernetes.io/arch", "kubelet does not set itself"),
        ("failure-domain.beta.kubernetes.io/zone", "kubelet does not set itself"),
        ("nvidia.com/gpu.product", "hardware discovery"),
        ("nvidia.com/gpu.count", "hardware discovery"),
        ("nvidia.com/mig.config", "hardware discovery"),
        ("nvidia.com/cuda.driver.major", "hardware discovery"),
        ("feature.node.kubernetes.io/pci-10de.present", "hardware discovery"),
        ("gpu-cluster.io/node-change", "outside gpu-cluster.io/"),
        ("gpu-cluster.io/unproven", "outside gpu-cluster.io/"),
    ],
)
def test_user_label_of_the_kubelet_discovery_or_the_program_is_refused(label, why):
    """Issue 41: the kubelet sets its own well-known labels (kubernetes
    pkg/kubelet/kubelet_node_status.go initialNode, updateDefaultLabels), so the node guard
    refused the registration of a pool that also set one (a managed key); GPU feature discovery
    and NFD write the nvidia.com/gpu., mig., cuda. and feature.node.kubernetes.io/ keys; the
    program keeps gpu-cluster.io/. Each is refused naming the key and the value."""
    expected = _problem(
        f"nodePools[0].labels.{label}", config={"nodePools": [{**POOL, "labels": {label: "v1"}}]}
    )
    assert why in expected, expected


@pytest.mark.parametrize("effect", ["NoSchedule", "PreferNoSchedule", "NoExecute"])
def test_user_taint_of_the_program_is_refused(effect):
    """Issue 41: a pool taint gpu-cluster.io/unproven would race the write that lifts the proof
    taint; the program keeps every gpu-cluster.io/ taint key."""
    taints = [{"key": "team", "effect": "NoSchedule"}]
    taints.append({"key": "gpu-cluster.io/unproven", "effect": effect})
    expected = _problem(
        "nodePools[0].taints[1].key", config={"nodePools": [{**POOL, "taints": taints}]}
    )
    assert "outside gpu-cluster.io/" in expected, expected


@pytest.mark.parametrize(
    "label",
    [
        "node-role.kubernetes.io/gpu",
        "kubernetes.io/role",
        "kubernetes.io/x",
        "example.k8s.io/team",
        "k8s.io/team",
        "a.b.k8s.io/team",
        "sub.kubernetes.io/x",
        "node.k8s.io/team",
    ],
)
def test_user_label_the_kubelet_refuses_to_set(label):
    """The kubelet refuses to start (20 minutes into `up`) with a label of the kubernetes.io or
    k8s.io namespaces, bare or a subdomain, that it may not set on its own Node."""
    expected = _problem(
        f"nodePools[0].labels.{label}", config={"nodePools": [{**POOL, "labels": {label: ""}}]}
    )
    assert "kubectl label" in expected, expected


@pytest.mark.parametrize(
    "label",
    [
        "node.kubernetes.io/lifecycle",
        "team.example.com/owner",
        "nvidia.com/team",
        "kubelet.kubernetes.io/x",
        "a.node.kubernetes.io/x",
        "k8s.io.example.com/team",
        "examplek8s.io/team",
    ],
)
def test_user_label_the_kubelet_may_set(label):
    settings = load_stack_settings(config={"nodePools": [{**POOL, "labels": {label: "x"}}]})
    assert settings.node_pools[0].labels == {label: "x"}, label


def test_label_names_and_values_of_the_kubernetes_limit_are_accepted():
    """Kubernetes allows 63 characters in a label key's name part and in a value
    (apimachinery validation.IsQualifiedName, IsValidLabelValue); 64 is refused at once."""
    name, value = "a" * 63, "v" * 63
    settings = load_stack_settings(
        config={"nodePools": [{**POOL, "labels": {f"example.com/{name}": value}}]}
    )
    assert settings.node_pools[0].labels == {f"example.com/{name}": value}
    assert "at most 63" in _problem(
        f"nodePools[0].labels.example.com/{name}a",
        config={"nodePools": [{**POOL, "labels": {f"example.com/{name}a": "x"}}]},
    )
    assert "at most 63" in _problem(
        "nodePools[0].labels.team",
        config={"nodePools": [{**POOL, "labels": {"team": value + "v"}}]},
    )


def test_user_sets_a_taint_with_an_empty_value():
    taint = {"key": "dedicated", "value": "", "effect": "NoSchedule"}
    graph = run_program("dev", config={"nodePools": [{**POOL, "taints": [taint]}]})
    job = graph.of_type(JOB_TYPE)[0]
    tolerations = unwrap(job.inputs["spec"])["template"]["spec"]["tolerations"]
    assert any(t.get("key") == "dedicated" for t in tolerations), f"{job.urn}: {tolerations}"


def test_user_sets_fifty_tags():
    expected = _problem("tags", config={"tags": {f"k{i}": "v" for i in range(50)}})
    assert "50 per resource" in expected and "Name" in expected, expected


@pytest.mark.parametrize("key", ["Name", "gpu-cluster:cluster", "gpu-cluster.io/pool"])
def test_user_tag_collides_with_a_tag_the_program_sets(key):
    expected = _problem(f"tags.{key}", config={"tags": {key: "mine"}})
    assert "does not set itself" in expected, expected


def test_user_sets_the_most_tags_allowed():
    tags = {f"k{i}": "v" for i in range(40)}
    graph = run_program("dev", config={"tags": tags})
    for resource in graph.find(lambda r: "tags" in r.inputs):
        count = len(unwrap(resource.inputs["tags"]))
        assert count <= 50, f"{resource.urn}: {count} AWS tags"


# ---------------------------------------------------------------- network and endpoints


@pytest.mark.parametrize(
    ("key", "config"),
    [
        (
            "network.sshAllowedCidrs[0]",
            {"network": {"create": True, "sshAllowedCidrs": ["2001:db8::/32"]}},
        ),
        (
            "controlPlane.apiAllowedCidrs[0]",
            {"controlPlane": {"mode": "managed", "apiAllowedCidrs": ["2001:db8::/32"]}},
        ),
    ],
    ids=["ssh", "api"],
)
def test_user_allows_an_ipv6_source(key, config):
    assert "IPv4" in _problem(key, config=config)


def test_user_reaches_nodes_through_a_bastion_by_dns_name_on_a_custom_port():
    bastion = {
        "host": "bastion.example.com",
        "port": 2222,
        "user": "jump",
        "hostKey": HOST_KEY,
        "securityGroupId": "sg-0a1b2c3d4e5f60788",
    }
    graph = run_program("dev", config={"network": {**EXISTING_VPC, "bastion": bastion}})
    steps = graph.find(lambda r: r.type == "command:remote:Command")
    assert steps, "no host steps"
    for step in steps:
        proxy = unwrap(step.inputs["connection"]).get("proxy")
        assert proxy and (proxy["host"], proxy["port"], proxy["user"]) == (
            "bastion.example.com",
            2222,
            "jump",
        ), f"{step.urn}: proxy {proxy}"


def test_user_joins_an_existing_control_plane_by_dns_name():
    control_plane = {
        "mode": "existing",
        "host": "cp.example.com",
        "endpoint": "cp.example.com:6443",
        "hostKey": HOST_KEY,
    }
    graph = run_program("prod", config={"controlPlane": control_plane})
    assert graph.outputs["endpoint"] == "cp.example.com:6443", graph.outputs["endpoint"]


@pytest.mark.parametrize(
    "endpoint",
    [
        "https://cp.example.com:6443",
        "fd00::10:6443",
        "cp.example.com",
        "cp:99999",
        "cp.example.com:65536",
        "cp.example.com:0",
    ],
)
def test_user_writes_an_endpoint_that_is_not_host_port(endpoint):
    control_plane = {"mode": "existing", "host": "cp.example.com", "endpoint": endpoint}
    expected = _problem(
        "controlPlane.endpoint", stack="prod", config={"controlPlane": control_plane}
    )
    assert "host:port" in expected and "cp.example.com:6443" in expected, expected


@pytest.mark.parametrize(
    ("key", "control_plane"),
    [
        ("controlPlane.endpoint", {"host": "10.0.1.10", "endpoint": "[fd00::10]:6443"}),
        ("controlPlane.host", {"host": "fd00::10", "endpoint": "10.0.1.10:6443"}),
    ],
    ids=["endpoint", "host"],
)
def test_user_gives_the_existing_control_plane_an_ipv6_address(key, control_plane):
    """Its address becomes an IPv4 security group source (kubelet access): 'fd00::10/32'
    would be refused by AWS at up time."""
    expected = _problem(
        key, stack="prod", config={"controlPlane": {"mode": "existing", **control_plane}}
    )
    assert "IPv4" in expected, expected


def test_user_creates_a_vpc_too_small_for_the_pools():
    """/24 in two zones: two /28 subnets of 11 usable addresses each."""
    network = {"create": True, "cidr": "10.42.0.0/24", "sshAllowedCidrs": ["203.0.113.0/24"]}
    load_stack_settings(
        config={"network": network, "nodePools": [{**POOL, "count": 20}], **SIZED_CONTROL_PLANE}
    )
    expected = _problem(
        "network.cidr",
        config={"network": network, "nodePools": [{**POOL, "count": 21}], **SIZED_CONTROL_PLANE},
    )
    assert "11 usable" in expected and "would need 12" in expected, expected


def test_user_creates_a_small_vpc_over_more_zones():
    network = {
        "create": True,
        "cidr": "10.42.0.0/24",
        "sshAllowedCidrs": ["203.0.113.0/24"],
        "availabilityZones": ["us-west-2a", "us-west-2b", "us-west-2c"],
    }
    graph = run_program(
        "dev",
        config={"network": network, "nodePools": [{**POOL, "count": 30}], **SIZED_CONTROL_PLANE},
    )
    subnets = graph.of_type("aws:ec2/subnet:Subnet")
    assert len(subnets) == 3, [s.name for s in subnets]


def test_user_puts_an_efa_pool_in_a_small_created_vpc():
    """An EFA pool's nodes all sit in the first subnet, with an address per `efa` interface
    (p4d: 4; p5: 1, its further ones being `efa-only`). /24: /28 subnets of 11 addresses, the
    managed control plane taking one."""
    network = {"create": True, "cidr": "10.42.0.0/24", "sshAllowedCidrs": ["203.0.113.0/24"]}

    def pool(instance_type: str, count: int) -> dict:
        return {"name": "fab", "instanceType": instance_type, "count": count}

    load_stack_settings(config={"network": network, "nodePools": [pool("p4d.24xlarge", 2)]})
    load_stack_settings(config={"network": network, "nodePools": [pool("p5.48xlarge", 10)]})
    expected = _problem(
        "network.cidr", config={"network": network, "nodePools": [pool("p4d.24xlarge", 3)]}
    )
    assert "would need 13" in expected and "one address per EFA interface" in expected, expected
    expected = _problem(
        "network.cidr", config={"network": network, "nodePools": [pool("p5.48xlarge", 11)]}
    )
    assert "would need 12" in expected, expected


def test_user_joins_an_existing_control_plane_inside_the_created_vpc():
    """The created VPC routes its own block: a control plane launched into it later (its
    endpoint in network.cidr) is reachable; another private address is not."""
    network = {"create": True, "cidr": "10.42.0.0/16", "sshAllowedCidrs": ["203.0.113.0/24"]}

    def control_plane(address: str) -> dict:
        return {
            "mode": "existing",
            "host": address,
            "endpoint": f"{address}:6443",
            "hostKey": HOST_KEY,
        }

    config = {"network": network, "controlPlane": control_plane("10.42.0.10")}
    assert load_stack_settings(config=config).control_plane.endpoint == "10.42.0.10:6443"
    config = {"network": network, "controlPlane": control_plane("10.43.0.10")}
    assert "no route to the private address 10.43.0.10" in _problem(
        "controlPlane.endpoint", config=config
    )


def test_user_pins_an_older_device_plugin_without_feature_discovery():
    """v0.12 to v0.14 take --config-file but have no GPU Feature Discovery binary: fine with
    feature discovery off, refused with it on; v0.15.0 is fine either way."""
    digest = "sha256:" + "0" * 64  # a release the program has no digest of needs its own
    old = {"devicePlugin": {"version": "v0.14.5", "imageDigest": digest}}
    off = {**old, "featureDiscovery": {"enabled": False}}
    assert load_stack_settings(config=off).device_plugin.version == "v0.14.5"
    assert "v0.15.0 or newer" in _problem("devicePlugin.version", config=old)
    load_stack_settings(config={"devicePlugin": {"version": "v0.15.0", "imageDigest": digest}})


def test_privileged_images_are_pulled_by_digest():
    """Issue 34, finding 9: the device plugin (SYS_ADMIN) needs a digest for a release the
    program does not know, and the DCGM exporter (privileged) takes an image by digest only."""
    expected = _problem("devicePlugin.imageDigest", config={"devicePlugin": {"version": "v0.17.0"}})
    assert "crane digest nvcr.io/nvidia/k8s-device-plugin:v0.17.0" in expected, expected
    tag_only = {
        "dcgmExporter": {"image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-ubuntu22.04"}
    }
    assert "pinned by digest" in _problem("dcgmExporter.image", config=tag_only)
    assert _problem("devicePlugin.imageDigest", config={"devicePlugin": {"imageDigest": "latest"}})


def _problem_keys(**kwargs) -> set[str]:
    with pytest.raises(ConfigError) as caught:
        load_stack_settings(**kwargs)
    return {p.key.removeprefix("gpu-cluster:") for p in caught.value.problems}


def test_user_sees_every_problem_of_a_pool_at_once():
    """One message lists them all: a fix-one-run-again loop costs a preview per problem."""
    pool = {
        "name": "b200",
        "instanceType": "p6-b200.48xlarge",
        "count": 1,
        "driverVersion": "535",
        "kernelModules": "proprietary",
        "market": "capacity-block",
        "taints": [
            {"key": "gpu", "value": "a", "effect": "NoSchedule"},
            {"key": "gpu", "value": "b", "effect": "NoSchedule"},
        ],
        "image": "baked",
        "amiId": "ami-0123456789abcdef0",
        "labels": {"gpu-cluster.io/pool": "x"},
    }
    assert _problem_keys(config={"nodePools": [pool]}) == {
        "nodePools[0].driverVersion",
        "nodePools[0].kernelModules",
        "nodePools[0].capacityReservationId",
        "nodePools[0].taints",
        "nodePools[0].image",
        "nodePools[0].labels.gpu-cluster.io/pool",
    }


def test_user_sees_every_problem_of_a_control_plane_at_once():
    managed = {
        "mode": "managed",
        "apiAllowedCidrs": ["203.0.113.0/24"],
        "image": "baked",
        "amiId": "ami-0123456789abcdef0",
        "podCidr": "10.96.0.0/16",
    }
    assert _problem_keys(config={"controlPlane": managed}) == {
        "controlPlane.image",
        "controlPlane.serviceCidr",
    }
    existing = {
        "mode": "existing",
        "host": "cp.example.com",
        "endpoint": "cp.example.com:6443",
        "user": "Admin",
        "podNetworkPorts": ["udp/9000-8000", "tcp/0", "udp/8472"],
    }
    assert _problem_keys(stack="prod", config={"controlPlane": existing}) == {
        "controlPlane.user",
        "controlPlane.podNetworkPorts[0]",
        "controlPlane.podNetworkPorts[1]",
    }


def test_messages_spell_values_as_the_stack_file_does():
    """A stack file says true and null, not Python's True and None, and an EFA refusal names
    the sizes of the same family that do have EFA."""
    with pytest.raises(ConfigError) as caught:
        load_stack_settings(config={"controlPlane": {"mode": None}})
    assert "controlPlane.mode: got nothing; expected one of: managed, existing" in str(caught.value)
    pool = {**POOL, "efa": True}
    with pytest.raises(ConfigError) as caught:
        load_stack_settings(config={"nodePools": [pool]})
    (problem,) = caught.value.problems
    assert problem.given == "true", str(problem)
    assert "of the g5 types, g5.8xlarge" in problem.expected, str(problem)
    assert "g4dn" not in problem.expected, str(problem)


def test_user_names_zones_of_the_stacks_region_local_zones_included():
    """Zones are checked against the stack's own aws:region (dev: us-west-2, staging:
    us-east-2), a Local Zone being one of its region's."""
    network = {
        "create": True,
        "sshAllowedCidrs": ["203.0.113.0/24"],
        "availabilityZones": ["us-west-2a", "us-west-2-lax-1a"],
    }
    zones = load_stack_settings(config={"network": network}).network.availability_zones
    assert zones == ["us-west-2a", "us-west-2-lax-1a"]
    expected = _problem(
        "network.availabilityZones[0]", stack="staging", config={"network": network}
    )
    assert "us-east-2" in expected, expected


def test_user_spreads_small_pools_that_all_start_in_the_first_subnet():
    """Two pools of 11 in two /28 subnets: each pool puts 6 nodes in the first subnet."""
    network = {"create": True, "cidr": "10.42.0.0/24", "sshAllowedCidrs": ["203.0.113.0/24"]}
    pools = [{**POOL, "count": 11}, {**POOL, "name": "b", "count": 11}]
    expected = _problem(
        "network.cidr", config={"network": network, "nodePools": pools, **SIZED_CONTROL_PLANE}
    )
    assert "would need 13" in expected, expected


@pytest.mark.parametrize(
    ("key", "config", "stack"),
    [
        (
            "network.bastion.user",
            {
                "network": {
                    "create": True,
                    "sshAllowedCidrs": ["203.0.113.0/24"],
                    "bastion": {"host": "bastion.example.com", "user": "jump user"},
                }
            },
            "dev",
        ),
        (
            "controlPlane.user",
            {
                "controlPlane": {
                    "mode": "existing",
                    "host": "10.0.1.10",
                    "endpoint": "10.0.1.10:6443",
                    "user": "Admin User",
                }
            },
            "prod",
        ),
    ],
    ids=["bastion", "control-plane"],
)
def test_user_names_a_login_user_that_is_no_unix_user(key, config, stack):
    assert "a login name like ubuntu" in _problem(key, stack=stack, config=config)


def test_user_brings_an_existing_vpc_with_one_subnet():
    network = {
        "vpcId": "vpc-0a1b2c3d4e5f60718",
        "subnetIds": ["subnet-0a1b2c3d4e5f60711"],
        "sshAllowedCidrs": ["203.0.113.0/24"],
    }
    graph = run_program("dev", config={"network": network, "nodePools": [{**POOL, "count": 3}]})
    for instance in graph.of_type(INSTANCE_TYPE):
        subnet = unwrap(instance.inputs).get("subnetId")
        assert subnet == "subnet-0a1b2c3d4e5f60711", f"{instance.urn}: subnet {subnet}"


def test_user_moves_ssh_to_another_port_on_canonical_images():
    """Nothing reconfigures sshd on the Canonical AMI: it listens on 22 whatever ssh.port says."""
    expected = _problem("ssh.port", config={"ssh": {"publicKey": PUBLIC_KEY, "port": 2222}})
    assert "22" in expected and "nodePools[0]" in expected and "controlPlane" in expected, expected


def test_user_moves_ssh_to_another_port_on_own_images():
    ami = "ami-0123456789abcdef0"
    settings = load_stack_settings(
        config={
            "ssh": {"publicKey": PUBLIC_KEY, "port": 2222},
            "controlPlane": {
                "mode": "managed",
                "apiAllowedCidrs": ["203.0.113.0/24"],
                "amiId": ami,
            },
            "nodePools": [{**POOL, "amiId": ami}, {**POOL, "name": "b", "count": 0}],
        }
    )
    assert settings.ssh.port == 2222


# ---------------------------------------------------------------- secrets


def _openssh_key(cipher: bytes) -> str:
    blob = b"openssh-key-v1\0" + len(cipher).to_bytes(4, "big") + cipher + b"\0" * 8
    body = base64.b64encode(blob).decode()
    return f"-----BEGIN OPENSSH PRIVATE KEY-----\n{body}\n-----END OPENSSH PRIVATE KEY-----\n"


def test_user_sets_no_private_key():
    assert "pulumi config set --secret" in _problem("sshPrivateKey", secrets={})


def test_user_sets_an_rsa_pem_private_key():
    key = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----\n"
    settings = load_stack_settings(secrets={"sshPrivateKey": key})
    assert settings.ssh_private_key.get_secret_value() == key.strip()


def test_user_sets_an_unencrypted_openssh_key():
    key = _openssh_key(b"none")
    load_stack_settings(secrets={"sshPrivateKey": key})


@pytest.mark.parametrize(
    "key",
    [
        _openssh_key(b"aes256-ctr"),
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIFHzBJBgkq\n"
        "-----END ENCRYPTED PRIVATE KEY-----\n",
        "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00FF\n\n"
        "MIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----\n",
    ],
    ids=["openssh-aes256-ctr", "pkcs8-encrypted", "pem-proc-type-encrypted"],
)
def test_user_sets_a_passphrase_protected_key(key):
    with pytest.raises(ConfigError) as caught:
        load_stack_settings(secrets={"sshPrivateKey": key})
    (problem,) = caught.value.problems
    assert problem.key == "gpu-cluster:sshPrivateKey", str(problem)
    assert "passphrase" in problem.expected and "ssh-keygen -p" in problem.expected, str(problem)
    assert key.splitlines()[1] not in str(caught.value), "key material in the message"


# Public keys as `ssh-keygen -t rsa -b 3072` and `-t ed25519` print them (comments with spaces
# kept).
RSA_PUBLIC_KEY = (
    "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQCXt9QvEort5DnifkhiUVVsurOqNp3u+ULu3KwSeSsPNCspWpnPK5dX"
    "r26wH7GmBRE37saSCA+acINd11JQU6AOT/4wH5j6dqOwCUi9ebYFaHyTqnBwkGK1+83BlGB40gBSbg5xAiM0AtN/lXZ3"
    "ncFCwHK/OYaT4NQ4JpHZQsb72fS427UBNztJQLKCtvAos1U9r+zNESalZvmLGEt98pMiVO2jzU9s0kfWtkj3476Z8rWZ"
    "A0zOZfrUL2gsNdbaPkLI9EFiyjU2sIIj1CfRFTOjtZA1MO3hlHSngyrp7qJsOX0MP0LszVtJSSvCST5JpOV0VgM670We"
    "tdyLlPalP2kSgBNNOVvogwD/oT34s9Th0R//rVNKBVM1sL6IRzpSVxfbWc67LDyEJkgsI18ywYYsTruWticsOjpswsUS"
    "9hShiq3dDj2pMNHo2lzMVK1yrOkN1N8m4hhzCQilLe2sergqvmsE3OTx+1wpLZBXEo+MxTu2I3n+GJlcdzOxvGEOWp8= "
    "ops team@laptop"
)
# `ssh-keygen -t rsa -b 2048` and `-b 1024`: RSA keys below 3072 bits.
RSA_2048_PUBLIC_KEY = (
    "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQD1MSJeau0vilHhFGuo8X67lBiBADnJWpFhJS45nkNo3RY5K1QoMZPMa"
    "1RoYQ9utdZfZ1deNyx1BpYMPEJs2cZ+P2Unug+GzbRSgj3cYnKZQH04D5JCtPztuIjGJp9RG01iKFHZBfT+Wp1jhFaH5"
    "JxMLeGTcvwG7VII6dEdMEVhJ1GTub9Xjz3XGS5gkQtirqml1iRbEGHBPUq9d3CViTTmCbt2Gbi5VlEonjul9dHZp9ndK"
    "SujoniIi5IN1/X25Xg+w/nDzW18w6q2IJchbd+sV/TSbil0YeXZTVhd7sDXHOTh/N/emDiQJETtaoqAop+oGzu2K5Qjq"
    "I7ei1u99V3n ops@example"
)
RSA_1024_PUBLIC_KEY = (
    "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQDXTNs8HIeyub2cbnGotZOReeOKtAyHDZI0ON/uQuXYvj267EsDM1Uf"
    "Zjz6e+h/rsD6qqjUV3CXz7unCPJ8beapIloK1M0Qx1wTbusMqQDSTMzWAKovxFHgywb3ZvN4iA4fs7IVr9W5/PN261p"
    "xQuuqPY98ms5QKy/MQzAREt0UhQ== ops team@laptop"
)


def _padded_rsa_key(public_key: str, zeros: int) -> str:
    """`public_key` (ssh-rsa) with its modulus mpint led by `zeros` zero bytes: as long as a
    larger key, the same number."""
    blob = base64.b64decode(public_key.split()[1])
    fields, at = [], 0
    while at < len(blob):
        length = int.from_bytes(blob[at : at + 4], "big")
        fields.append(blob[at + 4 : at + 4 + length])
        at += 4 + length
    fields[2] = b"\0" * zeros + fields[2]
    padded = b"".join(len(f).to_bytes(4, "big") + f for f in fields)
    return f"ssh-rsa {base64.b64encode(padded).decode()} ops@example"


ED25519_PUBLIC_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINs2Dxzfq9kRrQHiqtRbPBP2tOjA6R6zrl7yywi4+pz1 ops@example"
)


@pytest.mark.parametrize("key", [RSA_PUBLIC_KEY, ED25519_PUBLIC_KEY], ids=["rsa", "ed25519"])
def test_user_sets_a_login_key_ec2_imports(key):
    """Kept exactly as given: the key pairs are created from it, and a rewritten value would
    replace them."""
    ssh = {"user": "ubuntu", "publicKey": key}
    assert load_stack_settings(config={"ssh": ssh}).ssh.public_key == key


@pytest.mark.parametrize(
    ("key", "bits"),
    [
        (RSA_2048_PUBLIC_KEY, 2048),
        (RSA_1024_PUBLIC_KEY, 1024),
        (_padded_rsa_key(RSA_1024_PUBLIC_KEY, 300), 1024),
    ],
    ids=["rsa-2048", "rsa-1024", "rsa-1024-padded-to-3072-bits-of-text"],
)
def test_user_sets_an_rsa_login_key_under_3072_bits(key, bits):
    """Judged by the modulus the key holds, not by the length of its text."""
    expected = _problem("ssh.publicKey", config={"ssh": {"user": "ubuntu", "publicKey": key}})
    assert f"at least 3072 bits (this one has {bits})" in expected, expected


def test_user_pastes_the_public_key_as_the_private_key():
    expected = _problem("sshPrivateKey", secrets={"sshPrivateKey": PUBLIC_KEY})
    assert "private key" in expected, expected


@pytest.mark.parametrize("port", [1, 65535])
def test_user_names_the_last_tcp_port_for_an_endpoint_or_a_bastion(port):
    control_plane = {
        "mode": "existing",
        "host": "cp.example.com",
        "endpoint": f"cp:{port}",
        "hostKey": HOST_KEY,
    }
    settings = load_stack_settings("prod", config={"controlPlane": control_plane})
    assert settings.control_plane.endpoint == f"cp:{port}"
    bastion = {
        "host": "bastion.example.com",
        "port": port,
        "user": "jump",
        "hostKey": HOST_KEY,
        "securityGroupId": "sg-0a1b2c3d4e5f60788",
    }
    network = {**EXISTING_VPC, "bastion": bastion}
    assert load_stack_settings(config={"network": network}).network.bastion.port == port


@pytest.mark.parametrize("port", [0, 65536])
def test_user_names_a_port_tcp_does_not_have(port):
    """AWS and sshd refuse port 0 and ports above 65535 at `up` time; the config says so first."""
    bastion = {"host": "bastion.example.com", "port": port, "user": "jump"}
    network = {"create": True, "sshAllowedCidrs": ["203.0.113.0/24"], "bastion": bastion}
    expected = _problem("network.bastion.port", config={"network": network})
    assert "65535" in expected or "1" in expected, expected
    ssh = {"publicKey": PUBLIC_KEY, "port": port}
    assert _problem("ssh.port", config={"ssh": ssh})


def _openssh_private_key(key_type: bytes) -> str:
    """An unencrypted OpenSSH private key file whose public section names `key_type`."""

    def string(data: bytes) -> bytes:
        return len(data).to_bytes(4, "big") + data

    public = string(key_type) + string(b"\x01" * 32)
    blob = b"openssh-key-v1\0" + string(b"none") + string(b"none") + string(b"")
    blob += (1).to_bytes(4, "big") + string(public) + string(b"\0" * 16)
    body = base64.b64encode(blob).decode()
    lines = "\n".join(body[i : i + 70] for i in range(0, len(body), 70))
    return f"-----BEGIN OPENSSH PRIVATE KEY-----\n{lines}\n-----END OPENSSH PRIVATE KEY-----\n"


def test_a_private_key_cannot_smuggle_a_second_authorized_key():
    """Issue 34, finding 6: the public half of sshPrivateKey is written to authorized_keys
    beside ssh.publicKey; a key file whose type field holds a newline and another key adds
    nothing, and control characters in the file are refused naming sshPrivateKey."""
    from pydantic import SecretStr

    from components.aws.machines import authorized_keys, public_key_of

    smuggled = _openssh_private_key(b"ssh-ed25519\nssh-ed25519 AAAAattacker")
    assert public_key_of(smuggled) is None
    lines = authorized_keys(PUBLIC_KEY, SecretStr(smuggled)).splitlines()
    assert lines == [PUBLIC_KEY], lines
    honest = _openssh_private_key(b"ssh-ed25519")
    assert public_key_of(honest).startswith("ssh-ed25519 AAAA"), public_key_of(honest)
    escaped = honest.replace("-----END", "\x1b[2J-----END")
    assert "U+001B" in _problem("sshPrivateKey", secrets={"sshPrivateKey": escaped})


@pytest.mark.parametrize(
    "public_key",
    [f"{PUBLIC_KEY}\n", f"  {PUBLIC_KEY} ops@exämple  ", f"{PUBLIC_KEY} ssh-ed25519 AAAAsecond"],
    ids=["trailing-newline", "unicode-comment", "second-key-in-the-comment"],
)
def test_a_login_key_reaches_the_hosts_as_exactly_one_line(public_key):
    """What is accepted reaches authorized_keys as one line: a trailing newline is whitespace,
    a comment is a comment (a second key written into it is not a key to sshd)."""
    settings = load_stack_settings(config={"ssh": {"user": "ubuntu", "publicKey": public_key}})
    written = settings.ssh.public_key
    assert "\n" not in written and written.startswith(PUBLIC_KEY.split()[0]), written

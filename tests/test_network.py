"""The network: a created VPC or existing subnets, and who may reach which port: members only
the cluster's ports (flannel's VXLAN, path MTU ICMP), the kubelet from the control plane, etcd
from the control plane only, SSH from the operators' ranges or the bastion's group or /32."""

from __future__ import annotations

import pytest

from components.aws.network import KUBELET_PORT, MEMBER_PORTS
from components.control_plane import ETCD_PORTS
from tests.helpers import graphs as shared
from tools.harness.stacks import STACKS, load_stack_settings, run_program, stack_file

SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"


@pytest.fixture(scope="module", params=STACKS)
def stack_graph(request):
    return request.param, shared.stack_graph(request.param)


def _covers(rule: dict, port: int) -> bool:
    if rule["protocol"] in ("-1", "all"):
        return True
    return rule["protocol"] == "tcp" and rule["fromPort"] <= port <= rule["toPort"]


def test_kubelet_is_reachable_from_the_control_plane_only(stack_graph):
    stack, graph = stack_graph
    kubelet_rules = []
    for group in graph.of_type(SECURITY_GROUP):
        for rule in group.plain_inputs().get("ingress", []):
            if _covers(rule, KUBELET_PORT):
                kubelet_rules.append((group, rule))
    assert kubelet_rules, f"{stack}: nothing opens the kubelet port to the control plane"
    for group, rule in kubelet_rules:
        assert group.name.endswith("-nodes"), f"{group.urn}: opens {KUBELET_PORT}: {rule}"
        assert not rule.get("self") and rule["fromPort"] == rule["toPort"] == KUBELET_PORT, (
            f"{group.urn}: kubelet rule wider than the control plane: {rule}"
        )
        assert "0.0.0.0/0" not in rule.get("cidrBlocks", []), f"{group.urn}: kubelet open"


def test_members_reach_each_other_only_on_the_cluster_ports(stack_graph):
    """Issue 34, finding 8: members reached each other on every TCP port but 10250 (etcd's
    2379-2380 included); now only MEMBER_PORTS, each with its reason."""
    _, graph = stack_graph
    cluster = graph.named("network-cluster")
    member = [r for r in cluster.plain_inputs()["ingress"] if r.get("self")]
    spans = sorted((r["protocol"], r["fromPort"], r["toPort"]) for r in member)
    assert spans == sorted((p.protocol, p.from_port, p.to_port) for p in MEMBER_PORTS), (
        f"{cluster.urn}: member rules {spans}"
    )
    assert ("udp", 8472, 8472) in spans, f"{cluster.urn}: flannel's VXLAN is closed"
    for port in MEMBER_PORTS:
        assert port.why, port


def test_etcd_is_reachable_from_the_control_plane_only(stack_graph):
    """No rule of any group opens etcd but the control plane's own group to itself."""
    _stack, graph = stack_graph
    for group in graph.of_type(SECURITY_GROUP):
        for rule in group.plain_inputs().get("ingress", []):
            opens = [p for p in ETCD_PORTS if _covers(rule, p)]
            if not opens:
                continue
            assert group.name.endswith("-api") and rule.get("self") is True, (
                f"{group.urn}: etcd {opens} open beyond the control plane: {rule}"
            )
            assert not rule.get("cidrBlocks") and not rule.get("securityGroups"), rule


def test_every_ingress_rule_says_why(stack_graph):
    _stack, graph = stack_graph
    for group in graph.of_type(SECURITY_GROUP):
        for rule in group.plain_inputs().get("ingress", []):
            assert rule.get("description"), f"{group.urn}: a rule without its reason: {rule}"


def test_created_vpc_has_public_subnets_in_two_zones():
    graph = run_program("dev")
    subnets = graph.of_type("aws:ec2/subnet:Subnet")
    assert len(subnets) == 2, f"dev: {len(subnets)} subnets"
    for subnet in subnets:
        inputs = subnet.plain_inputs()
        assert inputs["mapPublicIpOnLaunch"] is True, f"{subnet.urn}: hosts need egress"
        assert graph.depends_on(subnet, graph.named("network-vpc")), subnet.urn
    zones = {s.plain_inputs()["availabilityZone"] for s in subnets}
    assert len(zones) == 2, f"dev: subnets share a zone: {zones}"
    route = graph.named("network-public").plain_inputs()["routes"]
    assert route[0]["cidrBlock"] == "0.0.0.0/0", "dev: no default route to the internet gateway"


def test_configured_zones_are_used():
    graph = run_program("staging")
    zones = sorted(
        s.plain_inputs()["availabilityZone"] for s in graph.of_type("aws:ec2/subnet:Subnet")
    )
    assert zones == load_stack_settings("staging").network.availability_zones


def test_existing_vpc_creates_no_network_and_admits_the_existing_cluster():
    graph = run_program("prod")
    assert not graph.of_type("aws:ec2/vpc:Vpc"), "prod: created a VPC next to the given one"
    assert not graph.of_type("aws:ec2/subnet:Subnet"), "prod: created subnets"
    cluster = graph.named("network-cluster")
    assert cluster.plain_inputs()["vpcId"] == load_stack_settings("prod").network.vpc_id
    existing = load_stack_settings("prod").control_plane
    ingress = cluster.plain_inputs()["ingress"]
    from_cluster = [r for r in ingress if r.get("securityGroups")]
    bastion = load_stack_settings("prod").network.bastion
    assert [
        (r["protocol"], r["fromPort"], r["toPort"], r["securityGroups"]) for r in from_cluster
    ] == [
        ("udp", 8472, 8472, [existing.security_group_id]),
        ("tcp", 22, 22, [bastion.security_group_id]),
    ], f"{cluster.urn}: the existing cluster's pod network is not its CNI port from its group"
    vpc = [r for r in ingress if r.get("cidrBlocks") and r["fromPort"] != 22]
    assert not vpc, f"{cluster.urn}: opens ports to the VPC's range: {vpc}"
    instances = graph.of_type("aws:ec2/instance:Instance")
    subnets = {i.plain_inputs()["subnetId"] for i in instances}
    assert subnets <= set(load_stack_settings("prod").network.subnet_ids), subnets
    assert len(subnets) > 1, "prod: nodes are not spread over the given subnets"


def _ssh_rules(graph) -> list[dict]:
    rules = graph.named("network-cluster").plain_inputs()["ingress"]
    return [r for r in rules if r["protocol"] == "tcp" and r["fromPort"] == r["toPort"] == 22]


def test_a_bastion_relays_ssh_from_its_group_or_its_own_address():
    """Issue 34, finding 8: with a bastion, SSH was open to the whole VPC; now from the
    bastion's security group, or the /32 of a bastion named by its private address."""
    prod = load_stack_settings("prod").network
    relayed = [r for r in _ssh_rules(run_program("prod")) if not r.get("cidrBlocks")]
    assert relayed == [
        {
            "description": "SSH relayed by the bastion (network.bastion)",
            "protocol": "tcp",
            "fromPort": 22,
            "toPort": 22,
            "securityGroups": [prod.bastion.security_group_id],
        }
    ], relayed
    network = stack_file("prod")["gpu-cluster:network"]
    private = {k: v for k, v in network["bastion"].items() if k != "securityGroupId"}
    private["host"] = "10.20.0.5"
    graph = run_program("prod", config={"network": {**network, "bastion": private}})
    sources = [r.get("cidrBlocks") for r in _ssh_rules(graph)]
    assert ["10.20.0.5/32"] in sources, sources
    vpc = graph.named("network-cluster").plain_inputs()
    assert all(s in (["10.20.0.5/32"], list(prod.ssh_allowed_cidrs)) for s in sources), vpc


def test_a_bastion_on_a_public_address_needs_its_group():
    from components.settings.load import ConfigError

    network = stack_file("prod")["gpu-cluster:network"]
    public = {k: v for k, v in network["bastion"].items() if k != "securityGroupId"}
    with pytest.raises(ConfigError) as refused:
        load_stack_settings("prod", config={"network": {**network, "bastion": public}})
    (problem,) = refused.value.problems
    assert problem.key == "gpu-cluster:network.bastion.securityGroupId", problem
    assert "a /32 of it would admit nothing" in problem.expected, problem


def test_every_rule_names_ports_aws_accepts(stack_graph):
    """AWS refuses a rule beyond port 65535 at `up` time (a preview shows nothing): every TCP and
    UDP span of every security group lies in 0-65535; ICMP names a type and code, -1 or "all"
    protocols 0/0."""
    _stack, graph = stack_graph
    for group in graph.of_type(SECURITY_GROUP):
        inputs = group.plain_inputs()
        for rule in [*inputs.get("ingress", []), *inputs.get("egress", [])]:
            low, high = rule["fromPort"], rule["toPort"]
            if rule["protocol"] in ("tcp", "udp"):
                assert 0 <= low <= high <= 65535, f"{group.urn}: ports {low}-{high}: {rule}"
            elif rule["protocol"] == "icmp":
                assert -1 <= low <= 255 and -1 <= high <= 255, f"{group.urn}: {rule}"
            else:
                assert (low, high) in ((-1, -1), (0, 0)), f"{group.urn}: {rule}"


def test_existing_mode_without_a_security_group_opens_only_the_cni_ports_to_the_vpc():
    prod = stack_file("prod")["gpu-cluster:controlPlane"]
    without = {k: v for k, v in prod.items() if k != "securityGroupId"}
    graph = run_program("prod", config={"controlPlane": without})
    ingress = graph.named("network-cluster").plain_inputs()["ingress"]
    vpc = [(r["protocol"], r["fromPort"], r["toPort"]) for r in ingress if r.get("cidrBlocks")]
    assert sorted(set(vpc)) == [("tcp", 22, 22), ("udp", 8472, 8472)], vpc  # SSH: bastion, ops


def test_existing_mode_pod_network_ports_are_configurable():
    prod = stack_file("prod")["gpu-cluster:controlPlane"]
    graph = run_program(
        "prod", config={"controlPlane": {**prod, "podNetworkPorts": ["udp/4789", "tcp/4240"]}}
    )
    ingress = graph.named("network-cluster").plain_inputs()["ingress"]
    spans = sorted((r["protocol"], r["fromPort"]) for r in ingress if r.get("securityGroups"))
    assert spans == [("tcp", 22), ("tcp", 4240), ("udp", 4789)], spans  # 22: the bastion's

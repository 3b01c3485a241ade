"""The network: a created VPC or existing subnets, and who may reach which port."""

from __future__ import annotations

import pytest

from components.aws.network import KUBELET_PORT
from tools.harness.stacks import STACKS, load_stack_settings, run_program, stack_file

SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"


@pytest.fixture(scope="module", params=STACKS)
def stack_graph(request):
    return request.param, run_program(request.param)


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


def test_members_share_the_pod_network(stack_graph):
    _, graph = stack_graph
    cluster = graph.named("network-cluster")
    rules = cluster.plain_inputs()["ingress"]
    member = [r for r in rules if r.get("self")]
    protocols = {r["protocol"] for r in member}
    assert {"tcp", "udp", "icmp", "4"} <= protocols, f"{cluster.urn}: member rules {protocols}"
    udp = next(r for r in member if r["protocol"] == "udp")
    assert (udp["fromPort"], udp["toPort"]) == (0, 65535), f"{cluster.urn}: VXLAN needs all UDP"


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
    assert [
        (r["protocol"], r["fromPort"], r["toPort"], r["securityGroups"]) for r in from_cluster
    ] == [("udp", 8472, 8472, [existing.security_group_id])], (
        f"{cluster.urn}: the existing cluster's pod network is not its CNI port from its group"
    )
    vpc = [r for r in ingress if r.get("cidrBlocks") and r["fromPort"] != 22]
    assert not vpc, f"{cluster.urn}: opens ports to the VPC's range: {vpc}"
    instances = graph.of_type("aws:ec2/instance:Instance")
    subnets = {i.plain_inputs()["subnetId"] for i in instances}
    assert subnets <= set(load_stack_settings("prod").network.subnet_ids), subnets
    assert len(subnets) > 1, "prod: nodes are not spread over the given subnets"


def test_bastion_opens_ssh_from_the_vpc_only():
    graph = run_program("prod")
    rules = graph.named("network-cluster").plain_inputs()["ingress"]
    ssh = [r for r in rules if r["protocol"] == "tcp" and r["fromPort"] == r["toPort"] == 22]
    assert ssh, "prod: no SSH rule for the bastion"
    for rule in ssh:
        assert "0.0.0.0/0" not in rule.get("cidrBlocks", []), f"prod: SSH open to the world {rule}"


def test_every_rule_names_ports_aws_accepts(stack_graph):
    """AWS refuses a rule beyond port 65535 at `up` time (a preview shows nothing): every TCP and
    UDP span of every security group lies in 0-65535 (ICMP and IP-in-IP use -1/0), and the member
    spans reach the last port, so no CNI port is left closed."""
    stack, graph = stack_graph
    for group in graph.of_type(SECURITY_GROUP):
        inputs = group.plain_inputs()
        for rule in [*inputs.get("ingress", []), *inputs.get("egress", [])]:
            low, high = rule["fromPort"], rule["toPort"]
            if rule["protocol"] in ("tcp", "udp"):
                assert 0 <= low <= high <= 65535, f"{group.urn}: ports {low}-{high}: {rule}"
            else:
                assert (low, high) in ((-1, -1), (0, 0)), f"{group.urn}: {rule}"
    member = [r for r in graph.named("network-cluster").plain_inputs()["ingress"] if r.get("self")]
    for protocol in ("tcp", "udp"):
        top = max(r["toPort"] for r in member if r["protocol"] == protocol)
        assert top == 65535, f"{stack}: {protocol} member rules stop at port {top}"
    # Members reach each other on every TCP port but the kubelet's (its own rule, from the
    # control plane only): kube-proxy's 10249 and 10256 sit right beside it.
    tcp = set()
    for rule in member:
        if rule["protocol"] == "tcp":
            tcp.update(range(rule["fromPort"], rule["toPort"] + 1))
    assert set(range(65536)) - tcp == {KUBELET_PORT}, sorted(set(range(65536)) - tcp)[:5]


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
    assert spans == [("tcp", 4240), ("udp", 4789)], spans

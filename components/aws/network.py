"""Network: a small VPC of public subnets, or the given subnets of an existing VPC, plus the
security group every cluster machine shares (SSH from the allowed ranges, all traffic among
cluster members for the CNI)."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.settings import (
    SUBNET_PREFIX_DIFF,
    SUBNETS_IN_NEW_VPC,
    ExistingControlPlane,
    Settings,
)
from components.settings import Network as NetworkSection

KUBELET_PORT = 10250


@dataclass(frozen=True)
class NetworkArgs:
    """What the network uses: the `network` section, the SSH port, the existing control plane
    (its CNI's ports are opened) and the tags of every resource."""

    cluster_name: str
    network: NetworkSection
    ssh_port: int
    existing_control_plane: ExistingControlPlane | None
    tags: Mapping[str, str]

    @classmethod
    def of(cls, settings: Settings) -> NetworkArgs:
        existing = settings.control_plane
        return cls(
            cluster_name=settings.cluster_name,
            network=settings.network,
            ssh_port=settings.ssh.port,
            existing_control_plane=existing if isinstance(existing, ExistingControlPlane) else None,
            tags=settings.stack_tags,
        )


@dataclass(frozen=True)
class VpcData:
    """The VPC the machines live in and its subnets (created, or given)."""

    vpc_id: pulumi.Output[str]
    vpc_cidr: pulumi.Output[str]
    subnet_ids: list[pulumi.Output[str]]


class Network(pulumi.ComponentResource):
    """A small VPC of public subnets (`network.create`), or the given subnets of an existing VPC,
    and the security group every cluster machine shares.

    Outputs: `vpc_id`, `vpc_cidr`, `subnet_ids` (machines are spread over them in order) and
    `cluster_security_group_id` (SSH from the allowed ranges, the pod network among members).
    """

    vpc_id: pulumi.Output[str]
    vpc_cidr: pulumi.Output[str]
    subnet_ids: list[pulumi.Output[str]]
    cluster_security_group_id: pulumi.Output[str]

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-cluster:index:Network", name, None, opts)
        self._name = name
        self._args = args
        network = args.network
        if network.creates_vpc:
            subnets = self._create_vpc()
        else:
            vpc = aws.ec2.get_vpc_output(
                id=network.vpc_id, opts=pulumi.InvokeOutputOptions(parent=self)
            )
            subnets = VpcData(
                vpc_id=pulumi.Output.from_input(network.vpc_id),
                vpc_cidr=vpc.cidr_block,
                subnet_ids=[pulumi.Output.from_input(s) for s in network.subnet_ids],
            )
        self.vpc_id = subnets.vpc_id
        self.vpc_cidr = subnets.vpc_cidr
        self.subnet_ids = subnets.subnet_ids
        self.cluster_security_group_id = self._cluster_security_group(subnets).id
        self.register_outputs(
            {
                "vpcId": self.vpc_id,
                "subnetIds": self.subnet_ids,
                "clusterSecurityGroupId": self.cluster_security_group_id,
            }
        )

    def _tags(self, name: str) -> dict[str, str]:
        return {**self._args.tags, "Name": name}

    def _child(self) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self)

    def _create_vpc(self) -> VpcData:
        name, network, cluster = self._name, self._args.network, self._args.cluster_name
        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=network.cidr,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags=self._tags(f"{cluster}-vpc"),
            opts=self._child(),
        )
        gateway = aws.ec2.InternetGateway(
            f"{name}-igw",
            vpc_id=vpc.id,
            tags=self._tags(f"{cluster}-igw"),
            opts=self._child(),
        )
        routes = aws.ec2.RouteTable(
            f"{name}-public",
            vpc_id=vpc.id,
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=gateway.id)],
            tags=self._tags(f"{cluster}-public"),
            opts=self._child(),
        )
        blocks = list(ipaddress.ip_network(network.cidr).subnets(prefixlen_diff=SUBNET_PREFIX_DIFF))
        subnet_ids = []
        for index, zone in enumerate(subnet_zones(network, parent=self)):
            key = zone.key
            # Keyed by zone, so adding or reordering zones moves no subnet; the alias takes
            # over the subnet a running stack has at this position (`<network>-public-<i>`).
            moved = [pulumi.Alias(name=f"{name}-public-{index}")] if zone.named else []
            subnet = aws.ec2.Subnet(
                f"{name}-{key}",
                vpc_id=vpc.id,
                cidr_block=str(blocks[index]),
                availability_zone=zone.name,
                map_public_ip_on_launch=network.assigns_public_ips,
                tags=self._tags(f"{cluster}-{key}"),
                opts=pulumi.ResourceOptions(
                    parent=self,
                    aliases=moved,
                    # A subnet keeps the block and zone it was created with: a zone moved in
                    # the list (its position gives the block) or a different zone look-up
                    # must not replace it under running machines.
                    ignore_changes=["cidrBlock", "availabilityZone"],
                    # A replacement (a new VPC) takes the same block: AWS refuses a second
                    # subnet with it (InvalidSubnet.Conflict), so the old one goes first.
                    delete_before_replace=True,
                ),
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-{key}",
                subnet_id=subnet.id,
                route_table_id=routes.id,
                opts=pulumi.ResourceOptions(parent=self, aliases=moved),
            )
            subnet_ids.append(subnet.id)
        return VpcData(vpc_id=vpc.id, vpc_cidr=vpc.cidr_block, subnet_ids=subnet_ids)

    def _cluster_security_group(self, subnets: VpcData) -> aws.ec2.SecurityGroup:
        """Shared by the control plane and every node: SSH from the operators' ranges (and from
        inside the VPC when a bastion relays), and the pod network among cluster members.

        Members reach each other on every port but the kubelet's: that one is open only to the
        control plane (each pool's own group), so one node cannot drive another's kubelet. An
        existing cluster's machines are not members: with `controlPlane.mode: existing` only
        their CNI's ports (`controlPlane.podNetworkPorts`) are open, from their own security
        group (`controlPlane.securityGroupId`; without one, from the VPC's range).
        """
        args, network = self._args, self._args.network
        ingress = _member_rules("cluster members", self_=True)
        if args.existing_control_plane is not None:
            ingress += _existing_cluster_rules(args.existing_control_plane, subnets.vpc_cidr)
        if network.ssh_allowed_cidrs:
            ingress.append(
                tcp_port_rule(
                    "SSH from the operators' ranges (network.sshAllowedCidrs)",
                    args.ssh_port,
                    list(network.ssh_allowed_cidrs),
                )
            )
        if network.bastion is not None:
            ingress.append(
                tcp_port_rule(
                    "SSH relayed by the bastion (network.bastion)",
                    args.ssh_port,
                    [subnets.vpc_cidr],
                )
            )
        return aws.ec2.SecurityGroup(
            f"{self._name}-cluster",
            description=f"{args.cluster_name}: cluster members and SSH",
            vpc_id=subnets.vpc_id,
            ingress=ingress,
            egress=[
                aws.ec2.SecurityGroupEgressArgs(
                    description="package downloads, image pulls, AWS APIs",
                    protocol="-1",
                    from_port=0,
                    to_port=0,
                    cidr_blocks=["0.0.0.0/0"],
                )
            ],
            tags=self._tags(f"{args.cluster_name}-cluster"),
            opts=self._child(),
        )


@dataclass(frozen=True)
class SubnetZone:
    """One subnet of a created VPC: its zone (a name, or the region's look-up) and the key its
    resources are named by: the zone's name when configured, else `public-<i>` (the i-th zone
    the region lists, which has no name before the program runs)."""

    name: pulumi.Input[str]
    key: str
    named: bool


def subnet_zones(network: NetworkSection, *, parent: pulumi.Resource) -> list[SubnetZone]:
    """The created VPC's subnets, in `availabilityZones` order (each one's block is its
    position's, fixed once created), or the region's first SUBNETS_IN_NEW_VPC zones."""
    if network.availability_zones:
        return [SubnetZone(zone, zone, named=True) for zone in network.availability_zones]
    available = aws.get_availability_zones_output(
        state="available", opts=pulumi.InvokeOutputOptions(parent=parent)
    )
    return [
        SubnetZone(available.names[index], f"public-{index}", named=False)
        for index in range(SUBNETS_IN_NEW_VPC)
    ]


def tcp_port_rule(
    description: str, port: int, cidr_blocks: pulumi.Input[list[pulumi.Input[str]]]
) -> aws.ec2.SecurityGroupIngressArgs:
    """Ingress to one TCP port from the given ranges."""
    return aws.ec2.SecurityGroupIngressArgs(
        description=description,
        protocol="tcp",
        from_port=port,
        to_port=port,
        cidr_blocks=cidr_blocks,
    )


def _existing_cluster_rules(
    control_plane: ExistingControlPlane, vpc_cidr: pulumi.Output[str]
) -> list[aws.ec2.SecurityGroupIngressArgs]:
    """The existing cluster's pod network (its CNI's tunnel ports), from its security group
    (or, when none is configured, from the VPC's range: those ports only)."""
    source: dict = (
        {"security_groups": [control_plane.security_group_id]}
        if control_plane.security_group_id
        else {"cidr_blocks": [vpc_cidr]}
    )
    rules = []
    for span in control_plane.pod_network_ports:
        protocol, ports = span.split("/")
        low, _sep, high = ports.partition("-")
        rules.append(
            aws.ec2.SecurityGroupIngressArgs(
                description=f"pod network ({span}) from the existing cluster's machines",
                protocol=protocol,
                from_port=int(low),
                to_port=int(high or low),
                **source,
            )
        )
    return rules


def _member_rules(
    who: str, *, self_: bool = False, cidr: pulumi.Input[str] | None = None
) -> list[aws.ec2.SecurityGroupIngressArgs]:
    """Every protocol a CNI uses (TCP, UDP, ICMP, IP-in-IP), with the kubelet port left out."""
    source = {"self": True} if self_ else {"cidr_blocks": [cidr]}
    spans = [
        ("tcp", 0, KUBELET_PORT - 1),
        ("tcp", KUBELET_PORT + 1, 65535),
        ("udp", 0, 65535),
        ("icmp", -1, -1),
        ("4", 0, 0),  # IP-in-IP (Calico)
    ]
    return [
        aws.ec2.SecurityGroupIngressArgs(
            description=f"pod network from {who} ({protocol})",
            protocol=protocol,
            from_port=low,
            to_port=high,
            **source,
        )
        for protocol, low, high in spans
    ]

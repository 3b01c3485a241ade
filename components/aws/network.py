"""Network: a small VPC of public subnets, or the given subnets of an existing VPC, plus the
security group every cluster machine shares: SSH from the operators' ranges or the bastion, and
among members only the ports the cluster uses (`MEMBER_PORTS`, each with its source).

Why: docs/decisions/038-the-network-opens-only-what-the-cluster-uses.md
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.settings import (
    SUBNET_PREFIX_DIFF,
    SUBNETS_IN_NEW_VPC,
    Bastion,
    ExistingControlPlane,
    Settings,
)
from components.settings import Network as NetworkSection

KUBELET_PORT = 10250


@dataclass(frozen=True)
class MemberPort:
    """One port (span) cluster members open to each other, and why (with the source)."""

    protocol: str
    from_port: int
    to_port: int
    why: str


# What members of the cluster send each other outside the pod network's tunnel. Pod-to-pod
# traffic (CoreDNS, metrics, the NCCL checks' bootstrap) travels inside flannel's VXLAN, so it
# needs no port of its own. The API (6443) has its own group (components/control_plane.py), the
# kubelet (10250) its own from the control plane only (components/gpu_node.py), etcd (2379-2380)
# the control plane's own group only; an EFA pool's all-traffic rule is its own group
# (components/aws/fabric.py).
MEMBER_PORTS = (
    # flannel Documentation/backends.md (vxlan: "Port: UDP port to use for sending encapsulated
    # packets. Defaults to kernel default, currently 8472"); kubeadm's flannel manifest keeps it.
    MemberPort("udp", 8472, 8472, "flannel VXLAN (pod network)"),
    # RFC 1191 path MTU discovery: ICMP destination unreachable (type 3), fragmentation needed
    # (code 4); VXLAN's 50-byte header makes it matter. In an AWS rule from_port is the ICMP
    # type and to_port the code.
    MemberPort("icmp", 3, 4, "ICMP fragmentation needed (path MTU discovery)"),
)


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
    `cluster_security_group_id` (SSH from the allowed ranges or the bastion, the pod network's
    tunnel among members).
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
        """Shared by the control plane and every node: SSH from the operators' ranges or the
        bastion, and among members only `MEMBER_PORTS`. An existing cluster's machines are not
        members: with `controlPlane.mode: existing` only their CNI's ports
        (`controlPlane.podNetworkPorts`) are open, from their own security group
        (`controlPlane.securityGroupId`; without one, from the VPC's range).
        """
        args, network = self._args, self._args.network
        ingress = _member_rules()
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
            ingress.append(_bastion_rule(network.bastion, args.ssh_port))
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


def _bastion_rule(bastion: Bastion, ssh_port: int) -> aws.ec2.SecurityGroupIngressArgs:
    """SSH relayed by the bastion: from its security group, else from its own private address
    (settings refuse a bastion with neither: its traffic into the VPC leaves from its private
    address, whatever address the operators reach it on)."""
    source: dict = (
        {"security_groups": [bastion.security_group_id]}
        if bastion.security_group_id
        else {"cidr_blocks": [f"{bastion.host}/32"]}
    )
    return aws.ec2.SecurityGroupIngressArgs(
        description="SSH relayed by the bastion (network.bastion)",
        protocol="tcp",
        from_port=ssh_port,
        to_port=ssh_port,
        **source,
    )


def _member_rules() -> list[aws.ec2.SecurityGroupIngressArgs]:
    """`MEMBER_PORTS` from the group itself (every cluster member carries it)."""
    return [
        aws.ec2.SecurityGroupIngressArgs(
            description=f"{port.why} from cluster members",
            protocol=port.protocol,
            from_port=port.from_port,
            to_port=port.to_port,
            self=True,
        )
        for port in MEMBER_PORTS
    ]

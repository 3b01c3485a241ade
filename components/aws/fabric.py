"""What multi-node training adds to a pool's machines at launch: the EFA interfaces per network
card, the pool's `cluster` placement group and self-admitting security group, and an optional
capacity reservation or Capacity Block.

Each function returns what it built or the `aws.ec2.Instance` arguments to merge into the
machine's own (`launch_args`), so an instance builder takes them as one dict. Everything here is
fixed at launch: turning EFA on or off for a pool replaces its machines.

Why: docs/decisions/009-efa-is-fixed-at-launch.md
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from components.aws.network import Network
from components.catalog import GpuInstanceType
from components.labels import POOL_LABEL
from components.settings import NodePool


@dataclass(frozen=True)
class EfaFabric:
    """What the nodes of an EFA pool share."""

    placement_group: aws.ec2.PlacementGroup
    security_group: aws.ec2.SecurityGroup
    subnet_id: pulumi.Output[str]


def pool_fabric(
    name: str,
    pool: NodePool,
    tags: Mapping[str, str],
    network: Network,
    *,
    parent: pulumi.Resource,
) -> EfaFabric:
    """`<pool>-placement` and `<pool>-efa`: a `cluster` placement group (AWS recommends one for
    low latency between EFA instances), one subnet (a cluster placement group lives in one
    Availability Zone, and EFA's OS-bypass traffic does not cross subnets), and a security group
    that admits all traffic from and to itself, which EFA requires (AWS EFA user guide, "Prepare
    an EFA-enabled security group": all inbound and outbound traffic to and from the security
    group itself)."""
    tags = {**tags, POOL_LABEL: pool.name}
    placement_group = aws.ec2.PlacementGroup(
        f"{name}-placement",
        strategy="cluster",
        tags={**tags, "Name": f"{name}-placement"},
        opts=pulumi.ResourceOptions(parent=parent),
    )
    everything_from_itself = {"protocol": "-1", "from_port": 0, "to_port": 0, "self": True}
    security_group = aws.ec2.SecurityGroup(
        f"{name}-efa",
        description=f"{name}: EFA traffic among the pool's nodes (all, to and from itself)",
        vpc_id=network.vpc_id,
        ingress=[
            aws.ec2.SecurityGroupIngressArgs(
                description="EFA: all traffic from the group itself", **everything_from_itself
            )
        ],
        egress=[
            aws.ec2.SecurityGroupEgressArgs(
                description="EFA: all traffic to the group itself", **everything_from_itself
            )
        ],
        tags={**tags, "Name": f"{name}-efa"},
        opts=pulumi.ResourceOptions(parent=parent),
    )
    return EfaFabric(
        placement_group=placement_group,
        security_group=security_group,
        subnet_id=network.subnet_ids[0],
    )


def node_interfaces(
    node_name: str,
    pool: NodePool,
    tags: Mapping[str, str],
    fabric: EfaFabric,
    security_group_ids: list[pulumi.Input[str]],
    *,
    parent: pulumi.Resource,
) -> list[aws.ec2.NetworkInterface]:
    """The node's EFA interfaces (`<node>-efa-<network card>`), created before the instance and
    attached at launch: EC2 cannot attach or detach an EFA while the instance runs (AWS EFA user
    guide, "Create and attach an EFA"), and aws.ec2.Instance takes several interfaces only as
    `network_interfaces` at launch (terraform-provider-aws `ec2_instance.go`: `network_interface`
    is ForceNew and conflicts with `subnet_id`, `vpc_security_group_ids` and
    `associate_public_ip_address`). Which card gets which type is the catalog's
    (GpuInstanceType.efa_layout)."""
    tags = {**tags, POOL_LABEL: pool.name}
    return [
        aws.ec2.NetworkInterface(
            f"{node_name}-efa-{layout.network_card_index}",
            subnet_id=fabric.subnet_id,
            security_groups=security_group_ids,
            interface_type=layout.interface_type,
            description=f"{node_name}: {layout.interface_type} on network card "
            f"{layout.network_card_index}",
            tags={**tags, "Name": f"{node_name}-efa-{layout.network_card_index}"},
            # It stays in its subnet when zones are added or reordered, as its machine does
            # (components/aws/machines.py day_two_ignored): a new one would replace the machine.
            opts=pulumi.ResourceOptions(parent=parent, ignore_changes=["subnetId"]),
        )
        for layout in pool.gpu_type.efa_layout
    ]


def efa_launch_args(
    fabric: EfaFabric,
    interfaces: list[aws.ec2.NetworkInterface],
    gpu_type: GpuInstanceType,
) -> dict[str, Any]:
    """The Instance arguments of an EFA node: its placement group and its interfaces by network
    card. aws_placement_group's id is its name (terraform-provider-aws `placement_group.go`:
    `d.SetId(name)`), which is what the instance's `placement_group` takes."""
    return {
        "placement_group": fabric.placement_group.id,
        "network_interfaces": [
            aws.ec2.InstanceNetworkInterfaceArgs(
                network_interface_id=interface.id,
                network_card_index=layout.network_card_index,
                device_index=layout.device_index,
            )
            for interface, layout in zip(interfaces, gpu_type.efa_layout, strict=True)
        ],
    }


@dataclass(frozen=True)
class EfaPlacement:
    """Where an EFA node sits: its pool's placement group and its own EFA interfaces, which
    carry its subnet and security groups (components/aws/machines.py reads `launch_args()`)."""

    fabric: EfaFabric
    interfaces: Sequence[aws.ec2.NetworkInterface]
    gpu_type: GpuInstanceType

    def launch_args(self) -> dict[str, Any]:
        return efa_launch_args(self.fabric, list(self.interfaces), self.gpu_type)


# Instance inputs a later `pulumi up` must not apply to a running machine: changing
# `capacity_reservation_specification` stops the instance, modifies it and starts it again
# (terraform-provider-aws `ec2_instance.go`, resourceInstanceUpdate: "To modify capacity
# reservation attributes of an instance, instance state needs to be in ... Stopped"), a GPU node
# going down without a drain. A reservation set or changed later applies to machines launched
# after it; running ones keep theirs.
LAUNCH_ONLY_INPUTS = ("capacityReservationSpecification",)


def reservation_args(pool: NodePool) -> dict[str, Any]:
    """The Instance arguments that launch into `capacityReservationId` (an On-Demand Capacity
    Reservation, or a Capacity Block with market: capacity-block); none without one, so a
    running machine of a pool without a reservation sees no new input."""
    args: dict[str, Any] = {}
    if pool.capacity_reservation_id is not None:
        args["capacity_reservation_specification"] = (
            aws.ec2.InstanceCapacityReservationSpecificationArgs(
                capacity_reservation_target=aws.ec2.InstanceCapacityReservationSpecificationCapacityReservationTargetArgs(
                    capacity_reservation_id=pool.capacity_reservation_id
                )
            )
        )
    if pool.market == "capacity-block":
        args["instance_market_options"] = aws.ec2.InstanceInstanceMarketOptionsArgs(
            market_type="capacity-block"
        )
    return args


def public_address(
    node_name: str,
    pool: NodePool,
    tags: Mapping[str, str],
    primary: aws.ec2.NetworkInterface,
    instance: aws.ec2.Instance,
    *,
    parent: pulumi.Resource,
) -> pulumi.Output[str]:
    """EC2 gives no automatic public address to an instance launched with several network
    interfaces, so an EFA node that needs one gets an Elastic IP on its primary (`efa`)
    interface, `<node>-ip`."""
    address = aws.ec2.Eip(
        f"{node_name}-ip",
        domain="vpc",
        network_interface=primary.id,
        tags={**tags, POOL_LABEL: pool.name, "Name": node_name},
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[instance]),
    )
    return address.public_ip

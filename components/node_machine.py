"""The machine under a GPU node, as its chain sees it: an EC2 instance the stack launches
(`launched`), or an existing server a hosts pool names (`existing_host`). GpuNode builds the
same rows of the step table on either.

What the chain needs of a machine (`NodeMachine`): its identity (the value of `Identity.HOST`
in every trigger, the join token's machine, the Node's instance label and the drain's check),
how steps reach it, the kubelet's `--provider-id`, what its first row follows, and what is
deleted with it. An EC2 machine's identity is its instance id. An existing host's is its host
key's (`host_id`): the key every connection pins is what makes it that machine, so a new key
is a new machine (drained, joined and proven again), a new address the same one.
Why: docs/decisions/054-machines-the-stack-did-not-create.md
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws

from components.aws import fabric, machines
from components.hosts import host_keys, steps
from components.hosts.remote import Host, Login, machine_host, ssh_host
from components.labels import POOL_LABEL
from components.node_inputs import provider_id
from components.settings import NodePool
from components.settings.hosts_pool import ExistingHost

# An existing host's identity: this prefix and the first hex digits of the SHA-256 of its host
# key's blob (a Kubernetes label value, as an EC2 instance id is: gpu-cluster.io/instance-id).
HOST_ID_PREFIX = "host-"
HOST_ID_HEX_DIGITS = 20
# The kubelet's --provider-id of an existing host. Free-form for the kubelet ("Unique identifier
# for identifying the node in a machine database", kubernetes cmd/kubelet/app/options/options.go
# AddKubeletConfigFlags), set once (pkg/apis/core/validation ValidateNodeUpdate: "node updates
# may not change providerID except from "" to valid"), and, as AWS's aws:///<zone>/<id>, it ends
# with the machine's identity, which drain-node.sh compares.
HOST_PROVIDER_ID_PREFIX = "gpu-cluster:///"
# The Instance input of its type, as the engine and replace_on_changes name it.
INSTANCE_TYPE_INPUT = "instanceType"


@dataclass(frozen=True)
class NodeMachine:
    """What a node's chain needs of its machine (see the module docstring).

    `first` maps step-table names to what the first rows follow (`steps.INSTANCE`: the EC2
    instance; nothing for an existing host); `deleted_with` goes when the node goes (a drain's
    delete hook is skipped with it while the control plane is unreachable); `outputs` are what
    GpuNode registers about it; `instance` and `efa_interfaces` are an EC2 machine's."""

    id: pulumi.Input[str]
    host: Host
    provider_id: pulumi.Input[str]
    deleted_with: pulumi.Resource
    first: Mapping[str, pulumi.Resource] = field(default_factory=dict)
    outputs: Mapping[str, Any] = field(default_factory=dict)
    instance: aws.ec2.Instance | None = None
    efa_interfaces: Sequence[aws.ec2.NetworkInterface] = ()


def host_id(host_key: str) -> str:
    """An existing host's identity: `host-` and the first digits of the SHA-256 of its host key's
    blob (the key's base64 field, decoded), the same for the same key on every run.
    `awk '{print $2}' key.pub | base64 -d | sha256sum | cut -c1-20` prints its digits."""
    blob = base64.b64decode(host_key.split()[1])
    return HOST_ID_PREFIX + hashlib.sha256(blob).hexdigest()[:HOST_ID_HEX_DIGITS]


def host_provider_id(identity: str) -> str:
    return f"{HOST_PROVIDER_ID_PREFIX}{identity}"


def existing_host(
    node_name: str, host: ExistingHost, login: Login, *, parent: pulumi.Resource
) -> NodeMachine:
    """The machine of a node of a hosts pool: reached at its address (through the bastion when
    the stack has one) as its own user and port, pinning its configured host key on every
    connection (no rotation: the stack did not give it that key). Its first contact is the copy
    of its scripts, made here with `parent`. Fails closed: no key, no host (settings require
    one)."""
    if not host_keys.key_line(host.host_key):
        raise host_keys.UnpinnedHost(
            f"{node_name}: no host key to pin for {host.address}; nothing dials a host it "
            "cannot check (docs/ssh-keys.md, 'SSH host keys')."
        )
    assert host.host_key is not None
    identity = host_id(host.host_key)
    reach = ssh_host(
        node_name,
        host.address,
        login,
        identity=identity,
        host_key=host.host_key,
        user=host.user,
        port=host.port,
        role=steps.Where.NODE,
    )
    return NodeMachine(
        id=identity,
        host=reach,
        provider_id=host_provider_id(identity),
        deleted_with=reach.scripts(parent),
        outputs={"hostId": identity, "address": host.address},
    )


@dataclass(frozen=True)
class Launch:
    """How an EC2 node's machine is launched: what it shares with the pool's (image, key,
    security groups), its own subnet, its addresses and tags, and the pool's EFA fabric."""

    image: machines.MachineImage
    key_name: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    security_group_ids: Sequence[pulumi.Input[str]]
    assigns_public_ips: bool  # the instance gets a public address (network.publicIps)
    dials_public_ips: bool  # steps dial the public address (no bastion relays)
    tags: Mapping[str, str]
    efa: fabric.EfaFabric | None = None  # the pool uses EFA: its placement group and group


def launched(
    node_name: str, pool: NodePool, args: Launch, login: Login, *, parent: pulumi.Resource
) -> NodeMachine:
    """The node's EC2 machine: its EFA interfaces, the instance with a boot host key of its own
    (a new key for every launch), and the first contact that rotates that key
    (components/hosts/host_keys.py)."""
    interfaces: list[aws.ec2.NetworkInterface] = []
    if args.efa is not None:
        interfaces = fabric.node_interfaces(
            node_name, pool, args.tags, args.efa, args.security_group_ids, parent=parent
        )
    instance, host_key = _instance(node_name, pool, args, interfaces, parent=parent)
    public_ip = instance.public_ip
    if interfaces and args.assigns_public_ips:
        public_ip = fabric.public_address(
            node_name, pool, args.tags, interfaces[0], instance, parent=parent
        )
    address = public_ip if args.dials_public_ips else instance.private_ip
    host = machine_host(node_name, instance, address, login, boot_key=host_key, parent=parent)
    return NodeMachine(
        id=instance.id,
        host=host,
        provider_id=provider_id(instance),
        deleted_with=instance,
        first={steps.INSTANCE: instance},
        outputs={"instanceId": instance.id, "privateIp": instance.private_ip},
        instance=instance,
        efa_interfaces=interfaces,
    )


def _instance(
    name: str,
    pool: NodePool,
    args: Launch,
    interfaces: list[aws.ec2.NetworkInterface],
    *,
    parent: pulumi.Resource,
) -> tuple[aws.ec2.Instance, host_keys.HostKey]:
    """The node's instance, `<node>`: the pool's type, disk, tags and market, and the host key it
    boots with (`host_keys.launch`: replaced with it)."""
    # Only what a pool configures is passed: an input a running machine never had would
    # change it (and replace it, for network interfaces and the placement group).
    placement: machines.Placing = machines.Placement(
        subnet_id=args.subnet_id,
        security_group_ids=args.security_group_ids,
        public_ip=args.assigns_public_ips,
    )
    if args.efa is not None:
        placement = fabric.EfaPlacement(args.efa, interfaces, pool.gpu_type)
    return host_keys.launch(
        name,
        machines.MachineArgs(
            image=args.image,
            instance_type=pool.instance_type,
            key_name=args.key_name,
            placement=placement,
            root_volume_gib=pool.root_volume_gib,
            tags={**args.tags, POOL_LABEL: pool.name, "Name": name},
            tag_root_volume=True,
            metadata_hop_limit=pool.metadata_hop_limit,
            spot=pool.market == "spot",
            launch_only=fabric.reservation_args(pool),
            launch_only_inputs=fabric.LAUNCH_ONLY_INPUTS,
            delete_before_replace=True,
            # The provider changes a type in place by stopping and starting the machine
            # (terraform-provider-aws ec2_instance.go, resourceInstanceUpdate:
            # modifyInstanceAttributeWithStopStart): the node went down undrained, with the
            # GPU count of the old type, and AWS refuses to stop a one-time spot machine.
            # Replaced instead, it is drained and reset first, then boots as the new type.
            replace_on_changes=[INSTANCE_TYPE_INPUT],
        ),
        parent=parent,
    )

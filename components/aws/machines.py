"""Every EC2 machine the stack creates (the managed control plane, the GPU nodes, the builder of a
baked image) is built here, once: `machine(name, MachineArgs(...), parent=...)` (the shape of
pulumi-eks `nodes/instances.ts`: one instance builder, one AMI lookup).

What they share: the boot image (`MachineImage`: a Canonical Ubuntu AMI looked up, or a
configured one), the SSH key pair (`key_pair`), the hardened instance options (IMDSv2 only, an
encrypted gp3 root volume that goes with the instance), where it sits in the network
(`Placement`), and which inputs a later `up` leaves alone (`day_two_ignored`).

Why: docs/decisions/006-day-two-ignored-instance-inputs.md
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pulumi
import pulumi_aws as aws
from pydantic import SecretStr

CANONICAL_OWNER = "099720109477"
# Ubuntu server images for amd64 by release; gp3 images first (24.04), gp2-era names as fallback.
UBUNTU_IMAGE_NAMES = {
    "24.04": "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-*",
    "22.04": "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-*",
}


def ubuntu_ami(
    os_version: str, ami_id: str | None, *, parent: pulumi.Resource
) -> pulumi.Output[str]:
    """The AMI id to boot: `ami_id` when configured, else the newest Canonical Ubuntu image of
    `os_version` ("24.04" or "22.04") for amd64 in the stack's region."""
    if ami_id is not None:
        return pulumi.Output.from_input(ami_id)
    if os_version not in UBUNTU_IMAGE_NAMES:
        raise ValueError(
            f"Ubuntu {os_version!r} unsupported; expected one of {sorted(UBUNTU_IMAGE_NAMES)}"
        )
    image = aws.ec2.get_ami_output(
        most_recent=True,
        owners=[CANONICAL_OWNER],
        filters=[
            aws.ec2.GetAmiFilterArgs(name="name", values=[UBUNTU_IMAGE_NAMES[os_version]]),
            aws.ec2.GetAmiFilterArgs(name="architecture", values=["x86_64"]),
            aws.ec2.GetAmiFilterArgs(name="virtualization-type", values=["hvm"]),
            aws.ec2.GetAmiFilterArgs(name="root-device-type", values=["ebs"]),
        ],
        opts=pulumi.InvokeOutputOptions(parent=parent),
    )
    return image.id


@dataclass(frozen=True)
class MachineImage:
    """The AMI a machine boots: `pinned` when configured (`amiId`, or a baked image), so a change
    of it is a deliberate rebuild; a looked-up Canonical image is not followed after create."""

    id: pulumi.Input[str]
    pinned: bool


def machine_image(os_version: str, ami_id: str | None, *, parent: pulumi.Resource) -> MachineImage:
    """`ami_id` when configured, else the newest Canonical Ubuntu image of `os_version`."""
    return MachineImage(ubuntu_ami(os_version, ami_id, parent=parent), pinned=ami_id is not None)


def key_pair(
    name: str, public_key: str, tags: Mapping[str, str], *, parent: pulumi.Resource
) -> aws.ec2.KeyPair:
    """An EC2 key pair `f"{name}-key"` from `ssh.publicKey` (AWS names it uniquely), tagged."""
    return aws.ec2.KeyPair(
        f"{name}-key",
        public_key=public_key,
        tags={**tags, "Name": f"{name}-key"},
        opts=pulumi.ResourceOptions(parent=parent),
    )


# The instance input that carries the generated host key (components/hosts/host_keys.py).
USER_DATA = "userData"
# The instance input that places it in a subnet (and so a zone).
SUBNET_ID = "subnetId"
# Instance outputs that hold a secret: the provider stores the SHA-1 of the user data, which
# holds the private host key.
SECRET_OUTPUTS = [USER_DATA]


def day_two_ignored(*, ami_pinned: bool) -> list[str]:
    """Instance inputs a later `pulumi up` must not act on, since a change replaces the machine
    or stops it: `ami` (unless configured: a running machine does not follow a newer looked-up
    AMI), `keyName` (a new key reaches running machines through their `wait-ready` step),
    `userData` (the host key is read once, at first boot) and `subnetId` (a machine stays in
    its zone when zones are added or reordered). A replacement takes the program's values.
    Sources: docs/decisions/006-day-two-ignored-instance-inputs.md,
    docs/decisions/032-subnets-are-keyed-by-zone-and-machines-keep-theirs.md."""
    ignored = ["keyName", USER_DATA, SUBNET_ID]
    return ignored if ami_pinned else ["ami", *ignored]


def authorized_keys(public_key: str, private_key: SecretStr) -> str:
    """AUTHORIZED_KEYS for wait-ready.sh: `ssh.publicKey`, then the public half of
    `sshPrivateKey` (the key every step logs in with) when it differs. Rotating is two `up`s:
    set the new publicKey (both keys are authorized), then the new sshPrivateKey (only it is)."""
    keys = [public_key.strip()]
    login = public_key_of(private_key.get_secret_value())
    if login is not None and _key_body(login) != _key_body(keys[0]):
        keys.append(login)
    return "\n".join(keys)


def _key_body(line: str) -> str:
    return " ".join(line.split()[:2])


def public_key_of(private_key: str) -> str | None:
    """The OpenSSH public key line of an OpenSSH private key, read from the key file's own
    public section (openssh PROTOCOL.key: magic, cipher, kdf, kdf options, key count, then the
    public key blob, in the clear even for encrypted keys); None for other formats."""
    match = re.search(
        r"-----BEGIN OPENSSH PRIVATE KEY-----(.+?)-----END OPENSSH PRIVATE KEY-----",
        private_key,
        re.S,
    )
    if not match:
        return None
    try:
        blob = base64.b64decode("".join(match.group(1).split()), validate=True)
    except (binascii.Error, ValueError):
        return None
    magic = b"openssh-key-v1\0"
    if not blob.startswith(magic):
        return None
    offset = len(magic)
    for _ in range(3):  # cipher name, kdf name, kdf options
        _, offset = _ssh_string(blob, offset)
    if offset + 4 > len(blob) or int.from_bytes(blob[offset : offset + 4], "big") < 1:
        return None
    public, _ = _ssh_string(blob, offset + 4)
    key_type, _ = _ssh_string(public, 0)
    # The type goes into authorized_keys as a word: one that is not a key type's name (a
    # newline and a second key, say) is no key this program will install.
    if not public or not _KEY_TYPE.fullmatch(key_type):
        return None
    return f"{key_type.decode('ascii')} {base64.b64encode(public).decode()}"


# An SSH key type's name (RFC 4250 4.6.1: printable US-ASCII, no spaces; OpenSSH's are these).
_KEY_TYPE = re.compile(rb"[a-z0-9][a-z0-9@.+-]{0,63}")


def _ssh_string(blob: bytes, offset: int) -> tuple[bytes, int]:
    """One length-prefixed string of the SSH wire format at `offset`, and the offset after it
    (b"" past the end)."""
    if offset + 4 > len(blob):
        return b"", len(blob)
    length = int.from_bytes(blob[offset : offset + 4], "big")
    start = offset + 4
    return blob[start : start + length], start + length


def metadata_options(hop_limit: int = 1) -> aws.ec2.InstanceMetadataOptionsArgs:
    """IMDSv2 only; with one hop (the default) containers on the host cannot reach the
    instance credentials."""
    return aws.ec2.InstanceMetadataOptionsArgs(
        http_endpoint="enabled",
        http_tokens="required",
        http_put_response_hop_limit=hop_limit,
    )


def root_volume(size_gib: int) -> aws.ec2.InstanceRootBlockDeviceArgs:
    """An encrypted gp3 root volume that goes with the instance."""
    return aws.ec2.InstanceRootBlockDeviceArgs(
        volume_type="gp3",
        volume_size=size_gib,
        encrypted=True,
        delete_on_termination=True,
    )


@dataclass(frozen=True)
class Placement:
    """Where a machine sits in the network: one subnet, its security groups, and whether it gets
    a public address. `launch_args()` is all `machine` reads of it: a placement of another shape
    (network interfaces of its own, a placement group) brings its own."""

    subnet_id: pulumi.Input[str]
    security_group_ids: Sequence[pulumi.Input[str]]
    public_ip: bool

    def launch_args(self) -> dict[str, Any]:
        """The Instance inputs of this placement."""
        return {
            "subnet_id": self.subnet_id,
            "vpc_security_group_ids": list(self.security_group_ids),
            "associate_public_ip_address": self.public_ip,
        }


class Placing(Protocol):
    """What `machine` reads of a placement: the Instance inputs that put it in the network
    (`Placement`; an EFA node's interfaces and placement group, components/aws/fabric.py)."""

    def launch_args(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class MachineArgs:
    """One EC2 machine of the stack. `tags` are the instance's (its `Name` included);
    `tag_root_volume` gives them to the root volume too (the GPU nodes). A `one_shot` machine
    (the image builder) terminates when it powers off and keeps only its AMI on a later `up`;
    every other machine is a cluster member kept across `up`s (`day_two_ignored`)."""

    image: MachineImage
    instance_type: str
    key_name: pulumi.Input[str]
    placement: Placing
    root_volume_gib: int
    tags: Mapping[str, str]
    # Secret: the cloud-config that installs the machine's generated SSH host key
    # (components/hosts/host_keys.py). Read at first boot only; ignored by a later `up`.
    user_data: pulumi.Input[str] | None = None
    tag_root_volume: bool = False
    metadata_hop_limit: int = 1
    spot: bool = False
    one_shot: bool = False
    protect: bool | None = None
    # Inputs that apply at launch only (a capacity reservation and its market,
    # components/aws/fabric.py), and the names a later `up` must then leave alone.
    launch_only: Mapping[str, Any] = field(default_factory=dict)
    launch_only_inputs: Sequence[str] = ()
    # A replacement (a planned one: amiId, market, efa) terminates the machine before it
    # launches the new one, after the steps that depend on it are deleted (their hooks drain
    # and reset the node). The engine deletes a delete-before-replace resource's dependents
    # that it replaces first, in reverse order (pulumi/pulumi tests/integration/
    # delete_before_create). Created first instead, the new machine could not join under the
    # node's name while the old one is still a Ready Node (kubeadm join refuses that name),
    # nor take an EFA interface still attached to the old one.
    delete_before_replace: bool = False
    # Inputs whose change replaces the machine where the provider would change it in place.
    replace_on_changes: Sequence[str] = ()


# Instance inputs whose change replaces the machine (terraform-provider-aws
# internal/service/ec2/ec2_instance.go, ResourceInstance schema: ForceNew on ami,
# associate_public_ip_address, availability_zone, key_name, subnet_id, private_ip,
# placement_group, tenancy, security_groups, ebs_optimized, hibernation, launch_template and on
# every field of network_interface; instance_market_options: a market change needs a new
# instance). instance_type and vpc_security_group_ids are updated in place. tools/lifecycle.py
# plans with this list.
FORCE_NEW_INPUTS = frozenset(
    {
        "ami",
        "associatePublicIpAddress",
        "availabilityZone",
        "keyName",
        "subnetId",
        "privateIp",
        "placementGroup",
        "tenancy",
        "securityGroups",
        "ebsOptimized",
        "hibernation",
        "launchTemplate",
        "networkInterfaces",
        "instanceMarketOptions",
    }
)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


def _registration(args: MachineArgs) -> tuple[dict[str, Any], list[str]]:
    """The Instance's inputs as `machine` registers them (by Python name), and the ones a later
    `up` ignores (by engine name)."""
    tags = dict(args.tags)
    root = root_volume(args.root_volume_gib)
    if args.tag_root_volume:
        root.tags = tags
    if args.one_shot:
        # Powering off terminates it: power-off-builder.sh ends the build that way.
        extra: dict[str, Any] = {"instance_initiated_shutdown_behavior": "terminate"}
        ignored = [USER_DATA] if args.image.pinned else ["ami", USER_DATA]
    else:
        extra = {
            "instance_market_options": spot_market() if args.spot else None,
            **args.launch_only,
        }
        ignored = [*day_two_ignored(ami_pinned=args.image.pinned), *args.launch_only_inputs]
    inputs = {
        "ami": args.image.id,
        "instance_type": args.instance_type,
        "key_name": args.key_name,
        "metadata_options": metadata_options(args.metadata_hop_limit),
        "root_block_device": root,
        "user_data": args.user_data,
        "tags": tags,
        **args.placement.launch_args(),
        **extra,
    }
    return inputs, ignored


def replacing_inputs(args: MachineArgs) -> dict[str, Any]:
    """The inputs of the machine `args` launches whose change replaces it (by engine name): the
    provider's ForceNew ones and `replace_on_changes`, less what a later `up` ignores. Its boot
    key's replacement trigger (components/hosts/host_keys.py `launch`): a new launch, a new key."""
    inputs, ignored = _registration(args)
    replacing = FORCE_NEW_INPUTS | set(args.replace_on_changes)
    return {
        _camel(name): value
        for name, value in sorted(inputs.items())
        if value is not None and _camel(name) in replacing and _camel(name) not in ignored
    }


def machine(
    name: str,
    args: MachineArgs,
    *,
    parent: pulumi.Resource,
    boot_key: pulumi.Resource | None = None,
) -> aws.ec2.Instance:
    """The EC2 instance `name` under `parent`, hardened (IMDSv2 only, encrypted root volume);
    replaced whenever `boot_key` (the host key in its user data) is (`replace_with`)."""
    inputs, ignored = _registration(args)
    return aws.ec2.Instance(
        name,
        **inputs,
        opts=pulumi.ResourceOptions(
            parent=parent,
            ignore_changes=ignored,
            additional_secret_outputs=SECRET_OUTPUTS,
            protect=args.protect,
            delete_before_replace=args.delete_before_replace,
            replace_on_changes=list(args.replace_on_changes),
            replace_with=[boot_key] if boot_key is not None else None,
        ),
    )


def spot_market() -> aws.ec2.InstanceInstanceMarketOptionsArgs:
    """A one-time spot request, terminated when reclaimed."""
    return aws.ec2.InstanceInstanceMarketOptionsArgs(
        market_type="spot",
        spot_options=aws.ec2.InstanceInstanceMarketOptionsSpotOptionsArgs(
            spot_instance_type="one-time",
            instance_interruption_behavior="terminate",
        ),
    )


def ssh_address(instance: aws.ec2.Instance, *, public: bool) -> pulumi.Output[str]:
    """The address the operator's machine dials: the public one unless a bastion relays."""
    return instance.public_ip if public else instance.private_ip

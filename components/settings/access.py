"""The stack configuration's reach: the network the hosts live in (a created VPC or given
subnets), the bastion that relays to private hosts, and how steps log in over SSH. Hosts the
stack did not create are pinned (hostKey), and source ranges are judged by the public addresses
they admit."""

from __future__ import annotations

import ipaddress

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from components.settings.addresses import PRIVATE_IPV4_BLOCKS, too_public
from components.settings.fields import (
    AvailabilityZone,
    Cidr,
    Found,
    Host,
    Model,
    PrivateCidr,
    SecurityGroupId,
    SshHostKey,
    SshPublicKey,
    SubnetId,
    UnixUser,
    VpcId,
    problems,
)


def too_public_problems(key: str, cidrs: list[str], port: str) -> list[Found]:
    """Source ranges that together admit more of the internet than one organisation's egress
    (components/settings/addresses.py MAX_PUBLIC_SOURCES), however they are split, would open
    `port` on every host to strangers: refused, naming the key and how much they admit."""
    found = too_public(cidrs)
    if not found:
        return []
    return [
        (
            key,
            cidrs,
            f"the operators' own ranges: these admit {' and '.join(found)}, which would open "
            f"{port} to much of the internet (a world split into pieces is still the world; "
            "reach private hosts through network.bastion instead)",
        )
    ]


def host_key_needed(host: str | None, port: int = 22) -> str:
    """What a missing hostKey of a host the stack did not create should be, and how to get it:
    without it pulumi-command accepts any key (`ssh.InsecureIgnoreHostKey`), so whoever sits on
    the path would receive the join token and hand back a kubeconfig."""
    where = host or "<host>"
    scan = f"ssh-keyscan -t ed25519{'' if port == 22 else f' -p {port}'} {where}"
    return (
        f"the host's SSH host public key line, like 'ssh-ed25519 AAAA...': run `{scan}`, "
        "drop the host name, and check its fingerprint (`ssh-keygen -lf`) against the host's "
        "own (`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` on its console: a BMC's, or "
        "AWS Systems Manager on EC2), never only over the connection you want to check; without it "
        "every SSH connection would accept any host"
    )


class Bastion(Model):
    host: Host = Field(
        description="Address of the SSH jump host that reaches nodes in private subnets"
    )
    user: UnixUser | None = Field(
        default=None, description="SSH user on the bastion (default: ssh.user)"
    )
    port: int = Field(default=22, ge=1, le=65535, description="SSH port of the bastion")
    host_key: SshHostKey | None = Field(
        default=None,
        description="The bastion's SSH host public key ('ssh-ed25519 AAAA...'), required: "
        "every hop through it checks it (ssh-keyscan, then check the fingerprint out of band)",
    )
    security_group_id: SecurityGroupId | None = Field(
        default=None,
        description="The bastion's security group: SSH to the hosts is admitted from it "
        "(without it: from the bastion's address, when host is an IPv4 address)",
    )

    @model_validator(mode="after")
    def _pinned(self) -> Bastion:
        if self.host_key is None:
            raise problems([("hostKey", None, host_key_needed(self.host, self.port))])
        return self

    def admission_problems(self) -> list[Found]:
        """What the EC2 machines' security group needs to admit SSH from this bastion (a
        stack that launches none has no group: components/settings/rules.py asks only then)."""
        if self.security_group_id is not None or _private_ipv4(self.host):
            return []
        return [
            (
                "securityGroupId",
                None,
                f"the bastion's security group, like sg-0123456789abcdef0: SSH to the hosts "
                f"is admitted from it only. {self.host} is not the private IPv4 address the "
                "bastion's traffic into the VPC comes from, so a /32 of it would admit "
                "nothing (or set host to the bastion's private address)",
            )
        ]


def _private_ipv4(host: str) -> bool:
    """An address a VPC can hold (RFC 1918, RFC 6598): a bastion named by one is inside the VPC
    (or routed into it), and that is the address its SSH comes from."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(address in block for block in PRIVATE_IPV4_BLOCKS)


class Network(Model):
    create: bool | None = Field(
        default=None,
        description="true: create a small VPC for the cluster; false: use vpcId + subnetIds "
        "(unset: create unless vpcId/subnetIds are given)",
    )
    cidr: PrivateCidr = Field(
        default="10.42.0.0/16",
        description="IPv4 block of the created VPC, /16 to /24, private (RFC 1918 or 6598)",
    )
    vpc_id: VpcId | None = Field(
        default=None, description="Id of the existing VPC (with create: false)"
    )
    subnet_ids: list[SubnetId] = Field(
        default_factory=list,
        description="Subnets of the existing VPC the nodes are spread over (with create: false)",
    )
    availability_zones: list[AvailabilityZone] = Field(
        default_factory=list,
        max_length=6,
        description=(
            "Zones of the stack's aws:region for the created VPC's subnets, one subnet each, "
            "named by its zone; a zone's block is its position's (add zones at the end), and "
            "machines keep the zone they were launched in (default: the region's first zones)"
        ),
    )
    ssh_allowed_cidrs: list[Cidr] = Field(
        default_factory=list,
        description="Sources allowed to reach SSH (22) on the hosts from outside the VPC",
    )
    bastion: Bastion | None = Field(
        default=None,
        description="SSH jump host into an existing VPC (vpcId + subnetIds); hosts are then "
        "reached on their private addresses",
    )
    public_ips: bool | None = Field(
        default=None,
        description="Give hosts public addresses "
        "(default: true in a created VPC, which has no NAT gateway)",
    )

    @field_validator("cidr")
    @classmethod
    def _vpc_size(cls, value: str) -> str:
        net = ipaddress.ip_network(value)
        if net.version != 4 or not 16 <= net.prefixlen <= 24:
            raise PydanticCustomError("vpc_cidr", "an IPv4 block from /16 to /24 for the VPC")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> Network:
        found: list[Found] = []
        existing = self.vpc_id is not None or bool(self.subnet_ids)
        if self.create is True and existing:
            found.append(
                (
                    "vpcId",
                    self.vpc_id,
                    "either create: true (a new VPC) or vpcId + subnetIds, not both",
                )
            )
        elif self.create is False or (self.create is None and existing):
            if self.vpc_id is None:
                found.append(("vpcId", None, "the id of the existing VPC (with create: false)"))
            if not self.subnet_ids:
                found.append(
                    (
                        "subnetIds",
                        [],
                        "at least one subnet id of the existing VPC (with create: false)",
                    )
                )
        if len(set(self.subnet_ids)) != len(self.subnet_ids):
            found.append(("subnetIds", self.subnet_ids, "each subnet id once"))
        if len(set(self.availability_zones)) != len(self.availability_zones):
            # Each zone names its subnet (components/aws/network.py).
            found.append(("availabilityZones", self.availability_zones, "each zone once"))
        found += too_public_problems("sshAllowedCidrs", list(self.ssh_allowed_cidrs), "SSH (22)")
        if found:
            raise problems(found)
        return self

    def bastion_problems(self) -> list[Found]:
        """A bastion relays to the EC2 machines' private addresses: it needs a VPC it sits in
        (or is routed into) and their security group must admit it. Asked only of a stack
        that launches machines (components/settings/rules.py)."""
        if self.bastion is None:
            return []
        found: list[Found] = [
            (("bastion", *_parts(key)), given, accepted)
            for key, given, accepted in self.bastion.admission_problems()
        ]
        if self.creates_vpc:
            # Through a bastion the hosts are dialled on their private addresses, and SSH is
            # open to the VPC's own block only (components/aws/network.py): a bastion must sit in
            # the VPC or be routed into it, which a VPC this stack is about to create is not.
            found.append(
                (
                    ("bastion",),
                    {"host": self.bastion.host},
                    "no bastion with a VPC the stack creates (its hosts get public addresses "
                    "and are reached on them): remove bastion, or give vpcId + subnetIds of an "
                    "existing VPC the bastion reaches",
                )
            )
        return found

    @property
    def creates_vpc(self) -> bool:
        return self.create is not False and self.vpc_id is None

    @property
    def assigns_public_ips(self) -> bool:
        """Instances get a public address: always in a created VPC (it has no NAT gateway)."""
        return self.public_ips if self.public_ips is not None else self.creates_vpc

    @property
    def connects_to_public_ips(self) -> bool:
        """SSH goes to public addresses, unless a bastion relays to private ones."""
        return self.bastion is None and self.assigns_public_ips


def _parts(key: str) -> tuple[str, ...]:
    return tuple(key.split("."))


class Ssh(Model):
    user: UnixUser = Field(
        default="ubuntu", description="Login user on the hosts (the AMI's default user)"
    )
    public_key: SshPublicKey | None = Field(
        default=None,
        description="OpenSSH public key the EC2 machines the stack launches boot with and keep "
        "in the login user's authorized_keys (required when it launches any); its private key "
        "is sshPrivateKey. Existing hosts and an existing control plane keep the keys they have",
    )
    port: int = Field(
        default=22,
        ge=1,
        le=65535,
        description=(
            "SSH port of the hosts (22 unless the machines use your own amiId, "
            "whose sshd listens on it)"
        ),
    )

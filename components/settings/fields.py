"""Field types of the settings model: one validated type per kind of value (CIDR, DNS label, host,
pinned image, label key/value, AWS tag key/value, ...), the base `Model` every section derives
from, and `problem(s)`, which a rule raises so each problem names the exact key it is about."""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from components.settings.addresses import CNI_PORTS, is_private
from components.settings.constants import PROGRAM_TAGS
from components.settings.keys import (  # noqa: F401 (the settings' field types, in one place)
    MIN_RSA_LOGIN_KEY_BITS,
    SshHostKey,
    SshPublicKey,
    _one_line,
    control_characters,
)

# A problem as a rule reports it: (key relative to the model that reports it, what was given,
# what is accepted). The key is a dotted path (`timeSlicing.replicas`, `[1].name`) or a tuple of
# path parts when a part holds a dot itself (a label key).
Found = tuple[Any, Any, str]
PROBLEMS_ERROR_TYPE = "gpu_cluster_problems"

_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# One label of a DNS name (RFC 1123, section 2.1: letters, digits and '-', not first or last,
# at most 63 characters; RFC 1035, section 2.3.4 caps the name at 253 characters as written).
_DNS_NAME_LABEL = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?")
_DNS_NAME_MAX = 253
# A login name by the rules of both useradd and Debian's adduser, less their extensions: shadow-
# utils `is_valid_user_name` (lib/chkname.c: `[a-zA-Z0-9_.][a-zA-Z0-9_.-]*$?`, not all digits,
# no leading '-') and adduser's SYS_NAME_REGEX (`^[A-Za-z_][-A-Za-z0-9_]*\$?$`) and default
# NAME_REGEX (`^[a-z][-a-z0-9_]*\$?$`), lowercase, without the trailing '$' of Samba machine
# accounts (a shell metacharacter) and at most 32 characters (utmp's ut_user).
_UNIX_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
# An availability zone's name: its region (us-west-2, us-gov-west-1, cn-north-1,
# eusc-de-east-1), then a letter, or for a Local or Wavelength Zone a dash and the zone's own
# part (us-west-2-lax-1a, us-east-1-wl1-bos-wlz-1). Not a zone id (usw2-az1): the subnets take
# names.
ZONE_NAME = re.compile(r"^(?P<region>[a-z]+(-[a-z]+)+-[0-9]+)([a-z]|(-[a-z0-9]+)+)$")
_CAPACITY_RESERVATION_ID = re.compile(r"^cr-[0-9a-f]{17}$")
_AMI_ID = re.compile(r"^ami-[0-9a-f]{8}([0-9a-f]{9})?$")
_VPC_ID = re.compile(r"^vpc-[0-9a-f]{8}([0-9a-f]{9})?$")
_SUBNET_ID = re.compile(r"^subnet-[0-9a-f]{8}([0-9a-f]{9})?$")
_IMAGE_REF = re.compile(
    r"^(?P<name>[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*)"
    r"(:(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(@(?P<digest>sha256:[0-9a-f]{64}))?$"
)


def problem(key: str, given: Any, accepted: str) -> PydanticCustomError:
    """One cross-field problem, about `key` relative to the model that raises it."""
    return problems([(key, given, accepted)])


def image_source_problems(image: str, ami_id: str | None) -> list[Found]:
    """`image: baked` is built from Canonical Ubuntu: it does not go with an `amiId` of one's own
    (for a section's model validator, so `image` is relative to that section)."""
    if image == "baked" and ami_id is not None:
        return [
            (
                "image",
                image,
                "stock with an amiId (your own image), or baked without one (the program "
                "builds the image from Canonical Ubuntu): remove amiId or image",
            )
        ]
    return []


def problems(items: list[Found]) -> PydanticCustomError:
    return PydanticCustomError(
        PROBLEMS_ERROR_TYPE,
        "{count} problem(s)",
        {"count": len(items), "problems": tuple(items)},
    )


class Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        str_strip_whitespace=True,
    )

    @model_validator(mode="before")
    @classmethod
    def _bool_is_not_a_number(cls, data: Any) -> Any:
        # pydantic reads true as 1: `count: true` would silently mean one node.
        if isinstance(data, dict):
            found = [
                (field.alias or name, data[field.alias or name], "a whole number")
                for name, field in cls.model_fields.items()
                if field.annotation is int and isinstance(data.get(field.alias or name), bool)
            ]
            if found:
                raise problems(found)
        return data


# ---------------------------------------------------------------- field checks


def _cidr(value: str) -> str:
    try:
        net = ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        raise PydanticCustomError(
            "cidr",
            "a CIDR block with no host bits set, like 203.0.113.0/24 ({reason})",
            {"reason": str(exc)},
        ) from None
    if net.version != 4:
        # Security group rules take these as IPv4 cidr_blocks, and the hosts have IPv4
        # addresses only, so an IPv6 source could never reach them.
        raise PydanticCustomError(
            "cidr_ipv4",
            "an IPv4 CIDR block like 203.0.113.0/24 (the hosts and their security groups are "
            "IPv4 only)",
        )
    return str(net)


Cidr = Annotated[str, AfterValidator(_cidr)]


def _private_cidr(value: str) -> str:
    if not is_private(ipaddress.ip_network(value)):
        raise PydanticCustomError(
            "cidr_private",
            "a private block: inside 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16 (RFC 1918) or "
            "100.64.0.0/10 (RFC 6598), never link-local (169.254.0.0/16) or public (a public "
            "block would send the cluster's own traffic, and rules that admit it, to the "
            "internet's owners of those addresses)",
        )
    return value


PrivateCidr = Annotated[str, AfterValidator(_cidr), AfterValidator(_private_cidr)]


def _dns_label(value: str) -> str:
    if len(value) > 40 or not _DNS_LABEL.match(value):
        raise PydanticCustomError(
            "dns_label",
            "a lowercase DNS label: letters, digits and '-', starting with a letter, "
            "at most 40 characters (it becomes part of resource and node names)",
        )
    return value


DnsLabel = Annotated[str, AfterValidator(_dns_label)]


def dns_name(value: str) -> bool:
    """A DNS name of RFC 1123 labels that no resolver reads as an address: its last label is not
    all digits (RFC 3696, section 2) and glibc's `inet_aton`, which `getaddrinfo` and so ssh use,
    does not take it for one ('10.1' is 10.0.0.1 to it, '0x7f000001' is 127.0.0.1)."""
    labels = value.split(".")
    if len(value) > _DNS_NAME_MAX or not all(_DNS_NAME_LABEL.fullmatch(x) for x in labels):
        return False
    if labels[-1].isdigit():
        return False
    try:
        socket.inet_aton(value)
    except OSError:
        return True
    return False


def host_problem(value: str) -> str | None:
    """Why `value` cannot name a host a connection dials, or None: it must be an IP address in
    its plain form, with no IPv6 zone index ('%eth0': an interface of the machine that dials,
    and text of any kind after the '%'), or a DNS name (`dns_name`)."""
    accepted = (
        "an IPv4 or IPv6 address without a zone index ('%...'), or a DNS name of letters, "
        "digits, '-' and '.', like 10.0.1.10 or bastion.example.com"
    )
    if "%" in value:
        return f"{accepted}: a zone index names an interface of the machine that dials"
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        if value.lower() == "localhost" or value.lower().endswith(".localhost"):
            # RFC 6761 section 6.3: resolvers answer loopback for these names.
            return f"{accepted}, not localhost: it names the machine that dials"
        return None if dns_name(value) else accepted
    return _special_address(address, accepted)


def _special_address(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address, accepted: str
) -> str | None:
    """Why `address` names no remote host, or None: loopback, unspecified, link-local
    (169.254.0.0/16, fe80::/10: the EC2 metadata service among them), multicast, or an IPv4
    address in IPv6's mapped form (::ffff:a.b.c.d, which dodges the IPv4 checks)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return f"{accepted}: write an IPv4 address as itself, not as ::ffff:{address.ipv4_mapped}"
    kinds = (
        ("is_loopback", "a loopback address (the machine that dials)"),
        ("is_unspecified", "the unspecified address"),
        ("is_link_local", "a link-local address (169.254.0.0/16, fe80::/10: the metadata service)"),
        ("is_multicast", "a multicast address"),
    )
    for attribute, kind in kinds:
        if getattr(address, attribute):
            return f"{accepted}, of a remote host: not {kind}"
    return None


def _host(value: str) -> str:
    found = host_problem(value)
    if found is not None:
        raise PydanticCustomError("host", found)
    return value


Host = Annotated[str, AfterValidator(_host)]


def is_ipv6(value: str) -> bool:
    try:
        return ipaddress.ip_address(value).version == 6
    except ValueError:
        return False


def _endpoint(value: str) -> str:
    expected = (
        "host:port of the Kubernetes API without a scheme, like 10.0.1.10:6443 or "
        "cp.example.com:6443"
    )
    host, sep, port = value.rpartition(":")
    ascii_port = port.isascii() and port.isdigit()  # "٦٤٤٣".isdigit() is True too
    if not sep or not ascii_port or not 0 < int(port) < 65536 or "/" in value:
        raise PydanticCustomError("endpoint", expected)
    bracketed = host.startswith("[") and host.endswith("]")
    if bracketed:
        host = host[1:-1]
    if host_problem(host) is not None:
        raise PydanticCustomError("endpoint", expected)
    if is_ipv6(host) != bracketed:
        raise PydanticCustomError("endpoint", expected)
    if not dns_name(host) and not is_private(ipaddress.ip_network(host)):
        raise PydanticCustomError(
            "endpoint_private",
            "{expected}: a DNS name or a private address (10.0.0.0/8, 172.16.0.0/12, "
            "192.168.0.0/16, 100.64.0.0/10, fc00::/7); nodes join the API at this address "
            "and send it their join tokens, so a public address is someone else's machine",
            {"expected": expected},
        )
    return value


def _image(value: str) -> str:
    match = _IMAGE_REF.match(value)
    if not match:
        raise PydanticCustomError("image", "a container image reference, like registry/name:tag")
    if not match.group("digest") and match.group("tag") in (None, "latest"):
        raise PydanticCustomError(
            "image_pinned",
            "an image pinned to a version tag or digest (not 'latest', not untagged), "
            "like nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
        )
    return value


def _image_by_digest(value: str) -> str:
    match = _IMAGE_REF.match(_image(value))
    if match is None or not match.group("digest"):
        raise PydanticCustomError(
            "image_digest",
            "an image pinned by digest, like registry/name:tag@sha256:<64 hex digits>",
        )
    return value


PinnedImage = Annotated[str, AfterValidator(_image)]
DigestPinnedImage = Annotated[str, AfterValidator(_image_by_digest)]
Endpoint = Annotated[str, AfterValidator(_endpoint)]


def _pattern(regex: re.Pattern[str], error_type: str, expected: str):
    def check(value: str) -> str:
        if not regex.fullmatch(value):
            raise PydanticCustomError(error_type, expected)
        return value

    return AfterValidator(check)


ImageDigest = Annotated[
    str,
    _pattern(
        re.compile(r"^sha256:[0-9a-f]{64}$"),
        "image_digest",
        "an image digest like sha256:<64 hex digits> (`crane digest repository:tag`)",
    ),
]
AmiId = Annotated[str, _pattern(_AMI_ID, "ami_id", "an AMI id like ami-0123456789abcdef0")]
SecurityGroupId = Annotated[
    str,
    _pattern(
        re.compile(r"^sg-[0-9a-f]{8}([0-9a-f]{9})?$"),
        "security_group_id",
        "a security group id like sg-0123456789abcdef0",
    ),
]


def _cni_port(value: str) -> str:
    if value not in CNI_PORTS:
        raise PydanticCustomError(
            "cni_port",
            "one port a CNI sends between machines, as protocol/port: {ports}; one port each, "
            "never a range, SSH (22), the API (6443), etcd (2379-2380) or the kubelet (10250)",
            {"ports": ", ".join(f"{port} ({what})" for port, what in CNI_PORTS.items())},
        )
    return value


CniPort = Annotated[str, AfterValidator(_cni_port)]
_RBAC_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9:._-]{0,61}[A-Za-z0-9])?$")


# Group prefixes whose groups Kubernetes or kubeadm already bind: `system:` is Kubernetes' own
# (system:masters bypasses RBAC), and kubeadm binds `kubeadm:cluster-admins` to cluster-admin
# (kubeadm `init` since 1.29, ClusterRoleBinding kubeadm:cluster-admins) and its
# `kubeadm:` node groups to the join RBAC.
RESERVED_GROUP_PREFIXES = ("system:", "kubeadm:")


def _own_group(value: str) -> str:
    """Not a group Kubernetes or kubeadm binds itself: deleting our binding would revoke nothing
    (system:masters is let through before RBAC is asked; kubeadm:cluster-admins has kubeadm's
    own binding to cluster-admin)."""
    if value.lower().startswith(RESERVED_GROUP_PREFIXES):
        raise PydanticCustomError(
            "rbac_group",
            "a group of your own like gpu-cluster:operators, not a system: or kubeadm: group "
            "(Kubernetes and kubeadm bind those themselves: system:masters bypasses RBAC and "
            "kubeadm binds kubeadm:cluster-admins to cluster-admin, so deleting our binding "
            "would revoke nothing)",
        )
    return value


RbacGroup = Annotated[
    str,
    _pattern(_RBAC_NAME, "rbac_name", "a group name like gpu-cluster:operators (ASCII)"),
    AfterValidator(_own_group),
]
RbacRole = Annotated[
    str, _pattern(_RBAC_NAME, "rbac_name", "a ClusterRole name like cluster-admin or view")
]
CapacityReservationId = Annotated[
    str,
    _pattern(
        _CAPACITY_RESERVATION_ID,
        "capacity_reservation_id",
        "a capacity reservation id like cr-0123456789abcdef0",
    ),
]
VpcId = Annotated[str, _pattern(_VPC_ID, "vpc_id", "a VPC id like vpc-0123456789abcdef0")]
SubnetId = Annotated[
    str, _pattern(_SUBNET_ID, "subnet_id", "a subnet id like subnet-0123456789abcdef0")
]
UnixUser = Annotated[
    str,
    _pattern(
        _UNIX_USER,
        "unix_user",
        "a login name like ubuntu: a lowercase letter or '_', then lowercase letters, digits, "
        "'_' or '-', at most 32 characters (useradd's and adduser's rules)",
    ),
]
AvailabilityZone = Annotated[
    str,
    _pattern(ZONE_NAME, "availability_zone", "an availability zone name like us-west-2a"),
]
InstanceId = Annotated[
    str,
    _pattern(
        re.compile(r"^i-[0-9a-f]{8}([0-9a-f]{9})?$"),
        "instance_id",
        "an EC2 instance id like i-0123456789abcdef0",
    ),
]
InstanceTypeName = Annotated[
    str,
    _pattern(
        re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$"),
        "instance_type",
        "an EC2 instance type like m7i.large",
    ),
]


def _label_key(key: str) -> str:
    prefix, _, name = key.rpartition("/")
    if (prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix))) or (
        len(name) > 63 or not _LABEL_NAME.match(name)
    ):
        raise PydanticCustomError(
            "label_key",
            "a Kubernetes label key: an optional DNS prefix and '/', then at most 63 letters, "
            "digits, '-', '_' or '.'",
        )
    return key


def _label_value(value: str) -> str:
    if value and (len(value) > 63 or not _LABEL_NAME.match(value)):
        raise PydanticCustomError(
            "label_value",
            "a Kubernetes label value: at most 63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit",
        )
    return value


LabelKey = Annotated[str, AfterValidator(_label_key)]
LabelValue = Annotated[str, AfterValidator(_label_value)]


def _tag_key(key: str) -> str:
    _one_line(key)
    if not 1 <= len(key) <= 128 or key.lower().startswith("aws:"):
        raise PydanticCustomError(
            "tag_key", "an AWS tag key of 1 to 128 characters, not starting with 'aws:'"
        )
    if key in PROGRAM_TAGS:
        raise PydanticCustomError(
            "tag_key_reserved",
            "a tag key the program does not set itself: it sets {keys} on its resources "
            "(a configured value would be overwritten); use another key",
            {"keys": ", ".join(PROGRAM_TAGS)},
        )
    return key


def _tag_value(value: str) -> str:
    _one_line(value)
    if len(value) > 256:
        raise PydanticCustomError("tag_value", "an AWS tag value of at most 256 characters")
    return value


TagKey = Annotated[str, AfterValidator(_tag_key)]
TagValue = Annotated[str, AfterValidator(_tag_value)]

# Existing hosts: the last part of a node's name <clusterName>-<pool>-<this>, a host's key.
NodeNamePart = Annotated[
    str,
    _pattern(
        re.compile(r"^(?=.{1,40}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),
        "node_name_part",
        "a lowercase name of letters, digits and '-', starting and ending with a letter or "
        "digit, at most 40 characters (it ends the node's name)",
    ),
]

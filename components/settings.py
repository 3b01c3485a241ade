"""The stack configuration contract: one typed model, validated once, before any resource exists.

Key names (camelCase, in the `gpu-cluster:` namespace) are the public interface documented in
DESIGN.md and Pulumi.yaml. Defaults live here, not in Pulumi.yaml, so a program run under the SDK's
mocks sees the same values as `pulumi up`.

Rules that involve one field are field validators; rules across fields are model validators that
raise `problems(...)`, so each problem still names the exact key it is about.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from components import catalog
from components.labels import GPU_PRESENT_LABEL, POOL_LABEL

PROJECT = "gpu-cluster"

# Kubernetes minors this program installs and tests (kubelet/kubeadm come from pkgs.k8s.io,
# which publishes one repository per minor; the manifests are validated against these schemas).
SUPPORTED_KUBERNETES_MINORS = ("1.33", "1.34", "1.35", "1.36", "1.37")
# NVIDIA driver branches with Ubuntu server packages (nvidia-headless-<branch>-server).
SUPPORTED_DRIVER_BRANCHES = ("535", "550", "570", "575", "580")
SUPPORTED_UBUNTU = ("24.04", "22.04")
DEFAULT_DEVICE_PLUGIN_VERSION = "v0.20.0"
DEFAULT_VALIDATION_IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
# A Node's name is its kubernetes.io/hostname label value (and our Job's gpu-cluster.io/node
# label value): Kubernetes caps label values at 63 characters, so longer names never register.
MAX_NODE_NAME_LENGTH = 63
# Labels the program sets on every GPU node itself (the device plugin selects on them).
PROGRAM_NODE_LABELS = (GPU_PRESENT_LABEL, POOL_LABEL)
# Label namespaces a kubelet may set on its own Node (kubelet --node-labels / NodeRestriction):
# other kubernetes.io and k8s.io labels make the kubelet refuse to start.
KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")
KUBELET_LABELS = frozenset(
    {
        "beta.kubernetes.io/arch",
        "beta.kubernetes.io/instance-type",
        "beta.kubernetes.io/os",
        "failure-domain.beta.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "kubernetes.io/arch",
        "kubernetes.io/hostname",
        "kubernetes.io/os",
        "node.kubernetes.io/instance-type",
        "topology.kubernetes.io/region",
        "topology.kubernetes.io/zone",
    }
)
# AWS tags the program sets on its resources itself (a configured one would be overwritten).
PROGRAM_TAGS = ("Name", "gpu-cluster:cluster", POOL_LABEL)
# A created VPC: one subnet per zone (the first SUBNETS_IN_NEW_VPC of the region unless
# availabilityZones names them), each 1/2**SUBNET_PREFIX_DIFF of the VPC block. AWS keeps 5
# addresses of every subnet (the first four and the last).
SUBNETS_IN_NEW_VPC = 2
SUBNET_PREFIX_DIFF = 4
AWS_RESERVED_PER_SUBNET = 5
# AWS allows 50 tags per resource; the program adds PROGRAM_TAGS and keeps room to grow.
MAX_TAGS = 40

_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_SEMVER_TAG = re.compile(r"^v\d+\.\d+\.\d+$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SSH_PUBLIC_KEY = re.compile(
    r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)|sk-ssh-ed25519@openssh\.com) "
    r"[A-Za-z0-9+/=]+( .*)?$"
)
_PRIVATE_KEY = re.compile(
    r"-----BEGIN ([A-Z]+ )?PRIVATE KEY-----.+-----END ([A-Z]+ )?PRIVATE KEY-----", re.S
)
_HOSTNAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*$"
)
_UNIX_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
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


def problems(items: list[tuple[str, Any, str]]) -> PydanticCustomError:
    return PydanticCustomError(
        "gpu_cluster_problems",
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


def _dns_label(value: str) -> str:
    if len(value) > 40 or not _DNS_LABEL.match(value):
        raise PydanticCustomError(
            "dns_label",
            "a lowercase DNS label: letters, digits and '-', starting with a letter, "
            "at most 40 characters (it becomes part of resource and node names)",
        )
    return value


DnsLabel = Annotated[str, AfterValidator(_dns_label)]


def _host(value: str) -> str:
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    if not _HOSTNAME.match(value):
        raise PydanticCustomError("host", "an IP address or DNS name, like 10.0.1.10")
    return value


Host = Annotated[str, AfterValidator(_host)]


def _is_ipv6(value: str) -> bool:
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
    if not sep or not port.isdigit() or not 0 < int(port) < 65536 or "/" in value:
        raise PydanticCustomError("endpoint", expected)
    bracketed = host.startswith("[") and host.endswith("]")
    if bracketed:
        host = host[1:-1]
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if (address is not None and address.version == 6) != bracketed or not (
        address is not None or _HOSTNAME.match(host)
    ):
        raise PydanticCustomError("endpoint", expected)
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


PinnedImage = Annotated[str, AfterValidator(_image)]


def _pattern(regex: re.Pattern[str], error_type: str, expected: str):
    def check(value: str) -> str:
        if not regex.match(value):
            raise PydanticCustomError(error_type, expected)
        return value

    return AfterValidator(check)


AmiId = Annotated[str, _pattern(_AMI_ID, "ami_id", "an AMI id like ami-0123456789abcdef0")]


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


# ---------------------------------------------------------------- models


def _bad_user(user: str | None) -> list[tuple[str, Any, str]]:
    """A problem for an optional `user` key that is not a Unix user name (like ssh.user)."""
    if user is not None and not _UNIX_USER.match(user):
        return [("user", user, "a Unix user name like ubuntu")]
    return []


class Bastion(Model):
    host: Host = Field(
        description="Address of the SSH jump host that reaches nodes in private subnets"
    )
    user: str | None = Field(
        default=None, description="SSH user on the bastion (default: ssh.user)"
    )
    port: int = Field(default=22, ge=1, le=65535, description="SSH port of the bastion")

    @model_validator(mode="after")
    def _user_name(self) -> Bastion:
        if found := _bad_user(self.user):
            raise problems(found)
        return self


class Network(Model):
    create: bool | None = Field(
        default=None,
        description="true: create a small VPC for the cluster; false: use vpcId + subnetIds "
        "(unset: create unless vpcId/subnetIds are given)",
    )
    cidr: Cidr = Field(
        default="10.42.0.0/16", description="IPv4 block of the created VPC, /16 to /24"
    )
    vpc_id: (
        Annotated[str, _pattern(_VPC_ID, "vpc_id", "a VPC id like vpc-0123456789abcdef0")] | None
    ) = Field(default=None, description="Id of the existing VPC (with create: false)")
    subnet_ids: list[
        Annotated[
            str, _pattern(_SUBNET_ID, "subnet_id", "a subnet id like subnet-0123456789abcdef0")
        ]
    ] = Field(
        default_factory=list,
        description="Subnets of the existing VPC the nodes are spread over (with create: false)",
    )
    availability_zones: list[str] = Field(
        default_factory=list,
        max_length=6,
        description="Zones for the created VPC's subnets (default: the region's first zones)",
    )
    ssh_allowed_cidrs: list[Cidr] = Field(
        default_factory=list,
        description="Sources allowed to reach SSH (22) on the hosts from outside the VPC",
    )
    bastion: Bastion | None = Field(
        default=None, description="SSH jump host; hosts are then reached on their private addresses"
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
        found: list[tuple[str, Any, str]] = []
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
        if found:
            raise problems(found)
        return self

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


class Ssh(Model):
    user: Annotated[
        str,
        _pattern(_UNIX_USER, "unix_user", "a Unix user name like ubuntu"),
    ] = Field(default="ubuntu", description="Login user on the hosts (the AMI's default user)")
    public_key: Annotated[
        str,
        _pattern(
            _SSH_PUBLIC_KEY,
            "ssh_public_key",
            "an OpenSSH public key line like 'ssh-ed25519 AAAA... ops@example'",
        ),
    ] = Field(
        description="OpenSSH public key installed on every host; its private key is sshPrivateKey"
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


class ManagedControlPlane(Model):
    mode: Literal["managed"] = Field(
        description="managed: the stack creates a kubeadm control plane on EC2 (CNI included)"
    )
    instance_type: Annotated[
        str,
        _pattern(
            re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$"),
            "instance_type",
            "an EC2 instance type like m7i.large",
        ),
    ] = Field(default="m7i.large", description="EC2 instance type of the control-plane machine")
    api_allowed_cidrs: list[Cidr] = Field(
        default_factory=list,
        description="Sources allowed to reach the Kubernetes API (6443) from outside the VPC",
    )
    pod_cidr: Cidr = Field(
        default="10.244.0.0/16", description="Pod network block (outside the VPC)"
    )
    service_cidr: Cidr = Field(
        default="10.96.0.0/12", description="Service network block (outside the VPC and podCidr)"
    )
    root_volume_gi_b: int = Field(
        default=50,
        ge=20,
        le=16384,
        alias="rootVolumeGiB",
        description="Root disk size of the control-plane machine, GiB",
    )
    os_version: Literal["24.04", "22.04"] = Field(
        default="24.04", description="Ubuntu release of the control-plane machine (Canonical AMI)"
    )
    ami_id: AmiId | None = Field(
        default=None, description="AMI id to use instead of looking up the Canonical Ubuntu AMI"
    )

    @model_validator(mode="after")
    def _cidrs_apart(self) -> ManagedControlPlane:
        if ipaddress.ip_network(self.pod_cidr).overlaps(ipaddress.ip_network(self.service_cidr)):
            raise problem(
                "serviceCidr",
                self.service_cidr,
                f"a block that does not overlap podCidr {self.pod_cidr}",
            )
        return self


class ExistingControlPlane(Model):
    mode: Literal["existing"] = Field(description="existing: join an existing kubeadm cluster")
    host: Host | None = Field(
        default=None,
        description="A control-plane node reachable over SSH (mints join tokens, drains nodes on "
        "delete, serves the kubeconfig); required with mode: existing",
    )
    endpoint: Annotated[str, AfterValidator(_endpoint)] | None = Field(
        default=None,
        description="API server address nodes join, host:port; required with mode: existing",
    )
    user: str | None = Field(
        default=None, description="SSH user on the control-plane host (default: ssh.user)"
    )

    @model_validator(mode="after")
    def _reachable(self) -> ExistingControlPlane:
        found = _bad_user(self.user)
        ipv4_only = (
            "an IPv4 address or DNS name: the nodes' security groups admit the control plane "
            "by its IPv4 address (the hosts are IPv4 only)"
        )
        if self.host is not None and _is_ipv6(self.host):
            found.append(("host", self.host, ipv4_only))
        if self.endpoint is not None and _is_ipv6(self.endpoint.rpartition(":")[0].strip("[]")):
            found.append(("endpoint", self.endpoint, f"host:port with {ipv4_only}"))
        if self.host is None:
            found.append(
                (
                    "host",
                    None,
                    "the control-plane node's address, reachable over SSH (mode: existing)",
                )
            )
        if self.endpoint is None:
            found.append(
                (
                    "endpoint",
                    None,
                    "the API server address as host:port, like 10.0.1.10:6443 (mode: existing)",
                )
            )
        if found:
            raise problems(found)
        return self


ControlPlane = Annotated[ManagedControlPlane | ExistingControlPlane, Field(discriminator="mode")]


class Taint(Model):
    key: LabelKey = Field(description="Taint key")
    value: LabelValue = Field(default="", description="Taint value")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        description="Taint effect"
    )


def _kubernetes_namespace(namespace: str) -> bool:
    return namespace in ("kubernetes.io", "k8s.io") or namespace.endswith(
        (".kubernetes.io", ".k8s.io")
    )


def _kubelet_may_set(key: str, namespace: str) -> bool:
    return key in KUBELET_LABELS or any(
        namespace == allowed or namespace.endswith(f".{allowed}")
        for allowed in KUBELET_LABEL_NAMESPACES
    )


class NodePool(Model):
    name: DnsLabel = Field(
        description="Pool name, part of node names (<clusterName>-<name>-<index>)"
    )
    instance_type: str = Field(
        description="EC2 GPU instance type from the catalog (components/catalog.py); "
        "GPU count and model come from it"
    )
    count: int = Field(ge=0, le=1000, description="Number of GPU nodes in the pool")
    max_unavailable: int = Field(
        default=1,
        ge=1,
        le=1000,
        description=(
            "At most this many joined nodes of the pool are cordoned and drained at once for a "
            "disruptive change (driver, container runtime, kubelet upgrade); each holds a slot, "
            "a Lease on the control plane, until it is validated and uncordoned again"
        ),
    )
    driver_version: str = Field(
        default="580",
        description="NVIDIA driver branch (the branch number, not a full version)",
    )
    root_volume_gi_b: int = Field(
        default=200,
        ge=50,
        le=16384,
        alias="rootVolumeGiB",
        description="Root disk size of each node, GiB",
    )
    labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict,
        description=(
            "Kubernetes labels of the pool's nodes, set at join (not nvidia.com/gpu.present "
            "or gpu-cluster.io/pool, which the program sets, nor kubernetes.io/k8s.io keys "
            "the kubelet refuses)"
        ),
    )
    taints: list[Taint] = Field(
        default_factory=lambda: [Taint(key="nvidia.com/gpu", value="true", effect="NoSchedule")],
        description="Kubernetes taints of the pool's nodes",
    )
    market: Literal["on-demand", "spot"] = Field(
        default="on-demand", description="EC2 purchase option"
    )
    os_version: Literal["24.04", "22.04"] = Field(
        default="24.04", description="Ubuntu release of the nodes (Canonical AMI)"
    )
    ami_id: AmiId | None = Field(
        default=None, description="AMI id to use instead of looking up the Canonical Ubuntu AMI"
    )
    metadata_hop_limit: int = Field(
        default=1,
        ge=1,
        le=2,
        description="IMDSv2 response hop limit (2 lets containers reach instance metadata)",
    )
    image: Literal["stock", "baked"] = Field(
        default="stock",
        description="stock: boot Canonical Ubuntu and install the driver, runtime and kube tools "
        "on every node; baked: boot a GPU image built once from the same install scripts "
        "(per Ubuntu release, driver branch and module type, toolkit and Kubernetes minor; "
        "shared across stacks of the account), whose install steps only verify",
    )

    @field_validator("instance_type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        if value not in catalog.CATALOG:
            raise PydanticCustomError(
                "gpu_instance_type",
                "an EC2 GPU instance type from the catalog (families: {families}; "
                "see components/catalog.py)",
                {"families": ", ".join(catalog.families())},
            )
        return value

    @field_validator("driver_version")
    @classmethod
    def _driver_branch(cls, value: str) -> str:
        if value not in SUPPORTED_DRIVER_BRANCHES:
            raise PydanticCustomError(
                "driver_branch",
                "an NVIDIA driver branch, one of {branches} "
                "(the branch number, not a full version)",
                {"branches": ", ".join(SUPPORTED_DRIVER_BRANCHES)},
            )
        return value

    @field_validator("driver_version", mode="before")
    @classmethod
    def _branch_number(cls, value: Any) -> Any:
        # `driverVersion: 580` unquoted is a YAML number; the branch is meant either way.
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        return value

    @model_validator(mode="after")
    def _labels_the_kubelet_can_set(self) -> NodePool:
        found: list[tuple[Any, Any, str]] = []
        for key, value in self.labels.items():
            namespace = key.rpartition("/")[0]
            if key in PROGRAM_NODE_LABELS:
                found.append(
                    (
                        ("labels", key),
                        value,
                        "a label the program does not set itself: it sets "
                        f"{', '.join(PROGRAM_NODE_LABELS)} on every GPU node (the device plugin "
                        "selects on them); remove this one",
                    )
                )
            elif _kubernetes_namespace(namespace) and not _kubelet_may_set(key, namespace):
                found.append(
                    (
                        ("labels", key),
                        value,
                        "a label the kubelet may set on its own Node: in the kubernetes.io and "
                        f"k8s.io namespaces only {', '.join(KUBELET_LABEL_NAMESPACES)} "
                        "(and their subdomains) or a well-known key like "
                        "topology.kubernetes.io/zone; the kubelet refuses to start with others "
                        "(set node-role.kubernetes.io/* with kubectl label after the join)",
                    )
                )
        if found:
            raise problems(found)
        return self

    @model_validator(mode="after")
    def _driver_supports_gpu(self) -> NodePool:
        gpu = catalog.CATALOG[self.instance_type].gpu
        branch = int(self.driver_version)
        if branch < gpu.min_driver_branch or (
            gpu.max_driver_branch is not None and branch > gpu.max_driver_branch
        ):
            newest = f" to {gpu.max_driver_branch}" if gpu.max_driver_branch else " or newer"
            raise problem(
                "driverVersion",
                self.driver_version,
                f"a branch that supports the {gpu.name} of {self.instance_type}: "
                f"{gpu.min_driver_branch}{newest}",
            )
        taint_keys = [(t.key, t.effect) for t in self.taints]
        if len(set(taint_keys)) != len(taint_keys):
            raise problem(
                "taints", [t.model_dump() for t in self.taints], "each key/effect pair once"
            )
        return self

    @model_validator(mode="after")
    def _image_source(self) -> NodePool:
        if self.image == "baked" and self.ami_id is not None:
            raise problem(
                "image",
                self.image,
                "stock with an amiId (your own image), or baked without one (the program "
                "builds the image from Canonical Ubuntu): remove amiId or image",
            )
        return self

    @property
    def gpu_type(self) -> catalog.GpuInstanceType:
        return catalog.CATALOG[self.instance_type]


class TimeSlicing(Model):
    replicas: int = Field(
        default=1, ge=1, le=64, description="Pods sharing each GPU (1: no sharing)"
    )


class DevicePlugin(Model):
    version: str = Field(
        default=DEFAULT_DEVICE_PLUGIN_VERSION,
        description="Release tag of the NVIDIA device plugin image "
        "(nvcr.io/nvidia/k8s-device-plugin)",
    )
    mig_strategy: Literal["none", "single", "mixed"] = Field(
        default="none", description="How MIG devices are advertised"
    )
    time_slicing: TimeSlicing = Field(
        default=TimeSlicing(), description="GPU time slicing (not with MIG)"
    )

    @field_validator("version")
    @classmethod
    def _pinned(cls, value: str) -> str:
        if not _SEMVER_TAG.match(value):
            raise PydanticCustomError(
                "pinned_version",
                "a pinned release tag of the NVIDIA device plugin like {default} "
                "(not 'latest', not a branch)",
                {"default": DEFAULT_DEVICE_PLUGIN_VERSION},
            )
        return value

    @model_validator(mode="after")
    def _slicing_without_mig(self) -> DevicePlugin:
        if self.time_slicing.replicas > 1 and self.mig_strategy != "none":
            raise problem(
                "timeSlicing.replicas",
                self.time_slicing.replicas,
                f"1 while migStrategy is {self.mig_strategy!r} (time slicing and MIG do not "
                "mix here; set migStrategy: none to share whole GPUs)",
            )
        return self


class Validation(Model):
    enabled: bool = Field(
        default=True,
        description="Run a CUDA validation Job on every node after its GPUs are allocatable",
    )
    image: PinnedImage = Field(
        default=DEFAULT_VALIDATION_IMAGE,
        description="Pinned CUDA sample image of the validation Job (version tag or digest)",
    )
    timeout_seconds: int = Field(
        default=900, ge=60, le=7200, description="How long the validation Job may run"
    )


def _tag_key(key: str) -> str:
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
    if len(value) > 256:
        raise PydanticCustomError("tag_value", "an AWS tag value of at most 256 characters")
    return value


def _encrypted_private_key(text: str) -> bool:
    """True for a key that needs a passphrase: PKCS#8 `ENCRYPTED PRIVATE KEY`, legacy PEM with
    `Proc-Type: 4,ENCRYPTED`, or an OpenSSH key whose cipher is not `none`."""
    if "ENCRYPTED" in text:
        return True
    match = re.search(
        r"-----BEGIN OPENSSH PRIVATE KEY-----(.+?)-----END OPENSSH PRIVATE KEY-----", text, re.S
    )
    if not match:
        return False
    try:
        blob = base64.b64decode("".join(match.group(1).split()), validate=True)
    except (binascii.Error, ValueError):
        return False  # not decodable here; ssh reports it at connect time
    magic = b"openssh-key-v1\0"
    if not blob.startswith(magic) or len(blob) < len(magic) + 4:
        return False
    length = int.from_bytes(blob[len(magic) : len(magic) + 4], "big")
    cipher = blob[len(magic) + 4 : len(magic) + 4 + length]
    return cipher != b"none"


class Settings(Model):
    cluster_name: DnsLabel = Field(
        description="Cluster name, the prefix of every resource and node name"
    )
    kubernetes_version: str = Field(
        default="1.35",
        description="Kubernetes minor version; kubelet and kubeadm are pinned to it",
    )
    control_plane: ControlPlane = Field(
        default_factory=lambda: ManagedControlPlane(mode="managed"),
        description="The Kubernetes control plane: created (mode: managed) or existing",
    )
    network: Network = Field(
        default=Network(), description="Where the machines live: a created VPC or existing subnets"
    )
    ssh: Ssh = Field(description="How the program reaches the hosts over SSH")
    ssh_private_key: SecretStr = Field(
        description="Private key matching ssh.publicKey, set as a secret: "
        "pulumi config set --secret gpu-cluster:sshPrivateKey < ~/.ssh/id_ed25519"
    )
    node_pools: list[NodePool] = Field(
        min_length=1, description="GPU node pools, each a number of identical GPU nodes"
    )
    device_plugin: DevicePlugin = Field(
        default=DevicePlugin(), description="The NVIDIA device plugin DaemonSet"
    )
    validation: Validation = Field(
        default=Validation(), description="The per-node GPU validation Job"
    )
    tags: dict[
        Annotated[str, AfterValidator(_tag_key)], Annotated[str, AfterValidator(_tag_value)]
    ] = Field(
        default_factory=dict,
        max_length=40,
        description=(
            "AWS tags on every AWS resource, at most 40 (the program adds Name, "
            "gpu-cluster:cluster and gpu-cluster.io/pool itself; those keys are reserved)"
        ),
    )

    @field_validator("tags", mode="before")
    @classmethod
    def _room_for_program_tags(cls, value: Any) -> Any:
        if isinstance(value, dict) and len(value) > MAX_TAGS:
            raise PydanticCustomError(
                "too_many_tags",
                "at most {max} tags ({count} given): AWS allows 50 per resource and the "
                "program adds its own ({keys})",
                {"max": MAX_TAGS, "count": len(value), "keys": ", ".join(PROGRAM_TAGS)},
            )
        return value

    @field_validator("kubernetes_version")
    @classmethod
    def _supported_minor(cls, value: str) -> str:
        if value not in SUPPORTED_KUBERNETES_MINORS:
            hint = ""
            if re.fullmatch(r"\d+\.\d", value):
                hint = (
                    f"; YAML reads an unquoted {value}0 as the number {value}: "
                    f'write "{value}0" in quotes'
                )
            raise PydanticCustomError(
                "kubernetes_minor",
                "a Kubernetes minor version in the supported window: {window} "
                '(the minor only, like "1.35"; kubelet and kubeadm are pinned to it){hint}',
                {"window": ", ".join(SUPPORTED_KUBERNETES_MINORS), "hint": hint},
            )
        return value

    @field_validator("ssh_private_key")
    @classmethod
    def _private_key(cls, value: SecretStr) -> SecretStr:
        text = value.get_secret_value()
        if not _PRIVATE_KEY.search(text):
            raise PydanticCustomError(
                "ssh_private_key",
                "an unencrypted PEM/OpenSSH private key, set with "
                "`pulumi config set --secret gpu-cluster:sshPrivateKey < ~/.ssh/id_ed25519`",
            )
        if _encrypted_private_key(text):
            raise PydanticCustomError(
                "ssh_private_key_encrypted",
                "an unencrypted private key: this one needs a passphrase, which the program "
                "has no way to type; set a copy without one "
                "(`cp key key.nopass && ssh-keygen -p -N '' -f key.nopass`, then "
                "`pulumi config set --secret gpu-cluster:sshPrivateKey < key.nopass`)",
            )
        return value

    @field_validator("node_pools")
    @classmethod
    def _unique_pool_names(cls, pools: list[NodePool]) -> list[NodePool]:
        found: list[tuple[str, Any, str]] = []
        seen: dict[str, int] = {}
        for index, pool in enumerate(pools):
            if pool.name in seen:
                found.append(
                    (
                        f"[{index}].name",
                        pool.name,
                        f"a name no other pool uses "
                        f"(nodePools[{seen[pool.name]}] is also {pool.name!r})",
                    )
                )
            seen.setdefault(pool.name, index)
        if found:
            raise problems(found)
        return pools

    @model_validator(mode="after")
    def _across_sections(self) -> Settings:
        found: list[tuple[str, Any, str]] = []
        for index, pool in enumerate(self.node_pools):
            longest = f"{self.cluster_name}-{pool.name}-{pool.count - 1}"
            if pool.count and len(longest) > MAX_NODE_NAME_LENGTH:
                found.append(
                    (
                        f"nodePools[{index}].name",
                        pool.name,
                        f"a shorter pool name: node names <clusterName>-<name>-<index> must fit "
                        f"in {MAX_NODE_NAME_LENGTH} characters (a Kubernetes label value), and "
                        f"{longest!r} has {len(longest)}",
                    )
                )
        cp = self.control_plane
        if isinstance(cp, ManagedControlPlane):
            vpc = ipaddress.ip_network(self.network.cidr)
            for key in ("podCidr", "serviceCidr"):
                value = cp.pod_cidr if key == "podCidr" else cp.service_cidr
                if self.network.creates_vpc and ipaddress.ip_network(value).overlaps(vpc):
                    found.append(
                        (
                            f"controlPlane.{key}",
                            value,
                            f"a block outside the VPC {self.network.cidr}",
                        )
                    )
        if self.network.creates_vpc:
            found.extend(self._room_in_created_subnets())
        canonical = [
            f"nodePools[{index}]"
            for index, pool in enumerate(self.node_pools)
            if pool.count and pool.ami_id is None
        ]
        if isinstance(cp, ManagedControlPlane) and cp.ami_id is None:
            canonical.insert(0, "controlPlane")
        if self.ssh.port != 22 and canonical:
            found.append(
                (
                    "ssh.port",
                    self.ssh.port,
                    f"22 for machines booted from the Canonical Ubuntu AMI ({', '.join(canonical)}"
                    "): its sshd listens on 22 and nothing here moves it, so every host step "
                    f"would dial {self.ssh.port} until it times out; use 22, or an amiId whose "
                    f"sshd listens on {self.ssh.port}",
                )
            )
        if self.network.connects_to_public_ips and not self.network.ssh_allowed_cidrs:
            found.append(
                (
                    "network.sshAllowedCidrs",
                    [],
                    "the address range of the machine that runs pulumi up, like "
                    "[203.0.113.0/24]: hosts are reached over SSH on their public addresses, "
                    "so without it every host step would dial until it times out (or set "
                    "network.bastion)",
                )
            )
        if (
            isinstance(cp, ManagedControlPlane)
            and self.network.connects_to_public_ips
            and not cp.api_allowed_cidrs
        ):
            found.append(
                (
                    "controlPlane.apiAllowedCidrs",
                    [],
                    "the address range of the machine that runs pulumi up, like "
                    "[203.0.113.0/24]: the Kubernetes provider reaches the API on the control "
                    "plane's public address, which otherwise admits the VPC only",
                )
            )
        if self.network.creates_vpc and self.network.public_ips is False:
            found.append(
                (
                    "network.publicIps",
                    False,
                    "true (or unset) with create: true: the new VPC has no NAT gateway, so hosts "
                    "need public addresses to download packages; use vpcId + subnetIds of a VPC "
                    "with NAT for private hosts",
                )
            )
        if found:
            raise problems(found)
        return self

    def _room_in_created_subnets(self) -> list[tuple[str, Any, str]]:
        """Each pool's nodes go round-robin over the subnets from the first, which also holds
        the managed control plane: the first subnet fills up first."""
        zones = len(self.network.availability_zones) or SUBNETS_IN_NEW_VPC
        prefix = ipaddress.ip_network(self.network.cidr).prefixlen + SUBNET_PREFIX_DIFF
        usable = 2 ** (32 - prefix) - AWS_RESERVED_PER_SUBNET
        nodes = sum(pool.count for pool in self.node_pools)
        first = sum(-(-pool.count // zones) for pool in self.node_pools) + isinstance(
            self.control_plane, ManagedControlPlane
        )
        if first <= usable:
            return []
        return [
            (
                "network.cidr",
                self.network.cidr,
                f"a block large enough for {nodes} node(s) and the control plane: it is split "
                f"into {zones} /{prefix} subnets of {usable} usable addresses each (AWS keeps "
                f"{AWS_RESERVED_PER_SUBNET} per subnet), and the first would need {first}; "
                "use a larger block (down to /16) or more availabilityZones",
            )
        ]

    @property
    def stack_tags(self) -> dict[str, str]:
        """Tags every AWS resource carries: the configured ones plus the cluster's own."""
        return {**self.tags, "gpu-cluster:cluster": self.cluster_name}

"""The sections of the stack configuration besides the node pools: network, SSH, control plane,
device plugin and validation. Each section checks its own fields and the rules among them."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

# Network, Bastion and Ssh live in access.py; imported here for the modules that name them here.
from components.settings.access import (  # noqa: F401
    Bastion,
    Network,
    Ssh,
    host_key_needed,
    too_public_problems,
)
from components.settings.constants import (
    DEFAULT_DCGM_EXPORTER_IMAGE,
    DEFAULT_DEVICE_PLUGIN_VERSION,
    DEFAULT_NCCL_IMAGE,
    DEFAULT_VALIDATION_IMAGE,
    DEVICE_PLUGIN_DIGESTS,
)
from components.settings.fields import (
    AmiId,
    Cidr,
    CniPort,
    DigestPinnedImage,
    Endpoint,
    Found,
    Host,
    ImageDigest,
    InstanceTypeName,
    Model,
    PinnedImage,
    PrivateCidr,
    RbacGroup,
    RbacRole,
    SecurityGroupId,
    SshHostKey,
    UnixUser,
    image_source_problems,
    is_ipv6,
    problem,
    problems,
)

_SEMVER_TAG = re.compile(r"^v[0-9]+\.[0-9]+\.[0-9]+$")


_UNREACHABLE = (
    "The control plane is gone or cannot be reached: no delete dials it (a node's drain on "
    "delete is skipped, Kubernetes objects are dropped from the state when the API does not "
    "answer). Set it, `pulumi up`, then destroy or scale down (docs/operations.md); remove it "
    "once the control plane is back"
)


class ManagedControlPlane(Model):
    mode: Literal["managed"] = Field(
        description="managed: the stack creates a kubeadm control plane on EC2 (CNI included)"
    )
    instance_type: InstanceTypeName = Field(
        default="m7i.large", description="EC2 instance type of the control-plane machine"
    )
    api_allowed_cidrs: list[Cidr] = Field(
        default_factory=list,
        description="Sources allowed to reach the Kubernetes API (6443) from outside the VPC",
    )
    pod_cidr: PrivateCidr = Field(
        default="10.244.0.0/16", description="Pod network block (private, outside the VPC)"
    )
    service_cidr: PrivateCidr = Field(
        default="10.96.0.0/12",
        description="Service network block (private, outside the VPC and podCidr)",
    )
    root_volume_gib: int = Field(
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
    image: Literal["stock", "baked"] = Field(
        default="stock",
        description="stock: boot Canonical Ubuntu and install the runtime and kube tools on the "
        "machine; baked: boot a control-plane image built once from the same install scripts "
        "with kubeadm's and the CNI's images pre-pulled (per Ubuntu release, containerd and "
        "Kubernetes minor; shared across stacks of the account), whose install steps only "
        "verify",
    )
    protect: bool = Field(
        default=True,
        description="Protect the control-plane machine from deletion and replacement (its loss "
        "is a new cluster); set false only to destroy or rebuild it on purpose",
    )
    unreachable: bool = Field(default=False, description=_UNREACHABLE)

    @model_validator(mode="after")
    def _consistent(self) -> ManagedControlPlane:
        """The image source and the cluster's blocks, every problem at once."""
        found = image_source_problems(self.image, self.ami_id)
        found += too_public_problems(
            "apiAllowedCidrs", list(self.api_allowed_cidrs), "the Kubernetes API (6443)"
        )
        if ipaddress.ip_network(self.pod_cidr).overlaps(ipaddress.ip_network(self.service_cidr)):
            found.append(
                (
                    "serviceCidr",
                    self.service_cidr,
                    f"a block that does not overlap podCidr {self.pod_cidr}",
                )
            )
        if found:
            raise problems(found)
        return self


class ExistingControlPlane(Model):
    mode: Literal["existing"] = Field(description="existing: join an existing kubeadm cluster")
    host: Host | None = Field(
        default=None,
        description="A control-plane node reachable over SSH (mints join tokens, drains nodes on "
        "delete, serves the kubeconfig); required with mode: existing",
    )
    endpoint: Endpoint | None = Field(
        default=None,
        description="API server address nodes join, host:port (a private address or a DNS "
        "name); required with mode: existing",
    )
    user: UnixUser | None = Field(
        default=None, description="SSH user on the control-plane host (default: ssh.user)"
    )
    host_key: SshHostKey | None = Field(
        default=None,
        description="The control-plane host's SSH host public key ('ssh-ed25519 AAAA...'), "
        "required: every step on it checks it (ssh-keyscan, then check the fingerprint out of "
        "band)",
    )
    security_group_id: SecurityGroupId | None = Field(
        default=None,
        description="Security group of the existing cluster's machines: the only source the GPU "
        "nodes admit its pod network from (without it: the VPC's range, CNI ports only)",
    )
    pod_network_ports: list[CniPort] = Field(
        default=["udp/8472"],
        min_length=1,
        description="What the existing cluster's CNI sends between machines, one port each from "
        "the CNIs' own lists (default: flannel's VXLAN, udp/8472; Calico VXLAN: udp/4789; "
        "Cilium: udp/8472 and tcp/4240)",
    )
    unreachable: bool = Field(default=False, description=_UNREACHABLE)

    @model_validator(mode="after")
    def _reachable(self) -> ExistingControlPlane:
        found: list[Found] = []
        ipv4_only = (
            "an IPv4 address or DNS name: the nodes' security groups admit the control plane "
            "by its IPv4 address (the hosts are IPv4 only)"
        )
        if self.host is not None and is_ipv6(self.host):
            found.append(("host", self.host, ipv4_only))
        if self.endpoint is not None and is_ipv6(self.endpoint_host):
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
        if self.host_key is None:
            found.append(("hostKey", None, host_key_needed(self.host)))
        if found:
            raise problems(found)
        return self

    @property
    def endpoint_host(self) -> str:
        """The endpoint's host: a DNS name or an IP address, an IPv6 one without brackets."""
        assert self.endpoint is not None
        return self.endpoint.rpartition(":")[0].strip("[]")

    @property
    def kubelet_client_address(self) -> str | None:
        """The address this control plane reaches node kubelets from: the API endpoint's
        private IP (what nodes join, so the VPC-side address), else the SSH host's private IP,
        else any IP given; None when both are DNS names."""
        assert self.host is not None and self.endpoint is not None  # _reachable checks both
        addresses = []
        for candidate in (self.endpoint_host, self.host):
            try:
                addresses.append(ipaddress.ip_address(candidate))
            except ValueError:
                continue
        private = [a for a in addresses if a.is_private]
        chosen = (private or addresses or [None])[0]
        return None if chosen is None else str(chosen)


ControlPlane = Annotated[ManagedControlPlane | ExistingControlPlane, Field(discriminator="mode")]


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
    image_digest: ImageDigest | None = Field(
        default=None,
        description="Digest of the device plugin image at version (it runs with SYS_ADMIN, so "
        "it is pulled by digest); known for the releases the program lists, required for "
        "another",
    )

    @property
    def digest_known(self) -> bool:
        return self.image_digest is not None or self.version in DEVICE_PLUGIN_DIGESTS

    @property
    def digest(self) -> str:
        """The image's digest: configured, else the one known for the release."""
        digest = self.image_digest or DEVICE_PLUGIN_DIGESTS.get(self.version)
        assert digest is not None  # rules.device_plugin_digest_known
        return digest

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


class OperatorKubeconfig(Model):
    """Who the exported `kubeconfig` output is: a client certificate of its own (not the
    cluster's admin.conf), in a group bound to one ClusterRole, valid for a bounded time."""

    group: RbacGroup = Field(
        default="gpu-cluster:operators",
        description="Group (certificate organization) of the exported kubeconfig's identity",
    )
    cluster_role: RbacRole = Field(
        default="cluster-admin",
        description="ClusterRole bound to the group (deleting the binding revokes access)",
    )
    validity_hours: int = Field(
        default=168,
        ge=1,
        le=8760,
        description="Lifetime of the exported kubeconfig's certificate, hours",
    )


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
    nccl: bool = Field(
        default=True,
        description="Also run NCCL all_reduce_perf across the GPUs of every node with two or "
        "more, and across two nodes over EFA in every EFA pool of two or more nodes, against "
        "the instance type's bus-bandwidth floors (components/catalog.py)",
    )
    nccl_image: PinnedImage = Field(
        default=DEFAULT_NCCL_IMAGE,
        description="Pinned image with nccl-tests (/opt/nccl-tests/build/all_reduce_perf) for "
        "the NCCL check",
    )


class DcgmExporter(Model):
    enabled: bool = Field(
        default=True, description="Deploy the NVIDIA DCGM exporter (GPU metrics) on GPU nodes"
    )
    image: DigestPinnedImage = Field(
        default=DEFAULT_DCGM_EXPORTER_IMAGE,
        description="Image of the DCGM exporter (nvcr.io/nvidia/k8s/dcgm-exporter), by digest: "
        "it runs privileged (repository:tag@sha256:...)",
    )
    service_monitor: bool = Field(
        default=False,
        description="Also create a Prometheus operator ServiceMonitor for the exporter's "
        "Service (needs the operator's monitoring.coreos.com/v1 CRDs in the cluster)",
    )


class NodeTerminationHandler(Model):
    image: DigestPinnedImage | None = Field(
        default=None,
        description="The AWS Node Termination Handler image the spot pools' nodes run, pinned "
        "by digest (public.ecr.aws/aws-ec2/aws-node-termination-handler:v1.25.6@sha256:...); "
        "unset: that tag, with a warning on every preview",
    )


class FeatureDiscovery(Model):
    enabled: bool = Field(
        default=True,
        description="Deploy GPU Feature Discovery (at devicePlugin.version) and the NFD master "
        "that labels GPU nodes (nvidia.com/gpu.product, nvidia.com/gpu.memory, ...); false on a "
        "cluster that already runs node-feature-discovery",
    )

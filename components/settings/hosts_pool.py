"""A pool of existing servers (`nodePools[].hosts`): GPU machines the stack did not create (on
premises, or anywhere SSH reaches), pinned from config like the existing control plane.

They get an EC2 pool's chain, checks, rolls and proof. What only a launched machine has
(instance type, market, EFA, root volume, image, zones) is not a key here; the GPUs the checks
expect come from `gpu`. Each host is keyed by its `name` (by default one made from its address),
never by its place in the list. Why: docs/decisions/054-machines-the-stack-did-not-create.md
"""

from __future__ import annotations

import ipaddress
from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from components import catalog
from components.settings.access import host_key_needed
from components.settings.fields import (
    DnsLabel,
    Found,
    Host,
    LabelKey,
    LabelValue,
    Model,
    NodeNamePart,
    SshHostKey,
    UnixUser,
    is_ipv6,
    problems,
)
from components.settings.node_pool import (
    DriverBranch,
    NodePool,
    Taint,
    gpu_problems,
    label_problems,
    taint_problems,
)


def _shared(name: str) -> str:
    """The description of a key both pool kinds have, as the EC2 pool words it."""
    return NodePool.model_fields[name].description or ""


class HostGpus(Model):
    model: str = Field(
        description="The GPU model of every host of the pool, NVIDIA's short name (its "
        "architecture and driver branches come from the catalog, components/catalog.py)"
    )
    count: int = Field(
        ge=1,
        le=16,
        description="GPUs in each host: nvidia-smi must list them, the Node must report them "
        "allocatable and the validation Job takes them all",
    )
    nvswitch: bool = Field(
        default=False,
        description="The GPUs are joined by NVSwitch (HGX and DGX boards): the hosts get the "
        "fabric manager at the driver's version, and the NCCL check expects NVLink bandwidth "
        "(else PCIe's)",
    )

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if value not in catalog.GPU_MODELS:
            raise PydanticCustomError(
                "gpu_model",
                "a GPU model from the catalog: {models} (components/catalog.py GPU_MODELS)",
                {"models": ", ".join(catalog.GPU_MODELS)},
            )
        return value


class ExistingHost(Model):
    address: Host = Field(
        description="Where the host is reached over SSH: an IPv4 address or a DNS name (not an "
        "IPv6 address: its kubelet's serving certificate could not be approved)"
    )
    host_key: SshHostKey | None = Field(
        default=None,
        description="The host's SSH host public key ('ssh-ed25519 AAAA...'), required: every "
        "step on it checks it (ssh-keyscan, then check the fingerprint out of band). It is also "
        "the machine's identity: a new key is a new machine, drained, joined and proven again",
    )
    name: NodeNamePart | None = Field(
        default=None,
        description="The host's key in its pool and the end of its node's name "
        "<clusterName>-<pool>-<name> (default: from the address, 10.8.0.21 -> 10-8-0-21, "
        "gpu01.lab.example -> gpu01). Renaming makes a new node",
    )
    user: UnixUser | None = Field(
        default=None, description="SSH user on this host (default: ssh.user)"
    )
    port: int | None = Field(
        default=None, ge=1, le=65535, description="SSH port of this host (default: ssh.port)"
    )

    @model_validator(mode="after")
    def _pinned_and_named(self) -> ExistingHost:
        found: list[Found] = []
        if is_ipv6(self.address):
            # The serving names an existing host's certificate is approved against are checked
            # as IPv4 only (lib/common.sh require_serving_names), and openssl prints an IPv6
            # SAN expanded and uppercase (crypto/x509/v3_san.c, i2v_GENERAL_NAME), so the
            # approval would never match: refused here instead of failing on the host.
            found.append(
                (
                    "address",
                    self.address,
                    "an IPv4 address or a DNS name: a host reached by an IPv6 address cannot "
                    "have its kubelet's serving certificate approved (name it by a DNS name "
                    "that resolves to it instead)",
                )
            )
        if self.host_key is None:
            found.append(("hostKey", None, host_key_needed(self.address, self.port or 22)))
        if found:
            raise problems(found)
        return self

    @property
    def key(self) -> str | None:
        """The host's key in its pool: its name, else one made from its address (None for an
        IPv6 address)."""
        if self.name is not None:
            return self.name
        try:
            address = ipaddress.ip_address(self.address)
        except ValueError:
            return self.address.split(".", 1)[0].lower()
        return str(address).replace(".", "-") if address.version == 4 else None


class HostsNodePool(Model):
    """A pool of existing servers; see the module docstring."""

    # How the settings tell the two pool kinds apart (components/settings/model.py).
    union_tag: ClassVar[str] = "hosts"
    kind: ClassVar[str] = "a pool of existing hosts"

    name: DnsLabel = Field(
        description="Pool name, part of node names (<clusterName>-<name>-<host name>)"
    )
    hosts: list[ExistingHost] = Field(
        description="The existing servers of the pool, each keyed by its name: the stack does "
        "not create them and never terminates or resets them (a host taken out of the list is "
        "drained and its Node deleted; the machine is left as it is). No EFA: the NCCL check "
        "across nodes over EFA does not apply"
    )
    gpu: HostGpus = Field(description="The GPUs every host of the pool carries")
    max_unavailable: int = Field(default=1, ge=1, le=1000, description=_shared("max_unavailable"))
    driver_version: DriverBranch = Field(default="580", description=_shared("driver_version"))
    os_version: Literal["24.04", "22.04"] = Field(
        default="24.04",
        description="Ubuntu release of the hosts (the packages pinned for it are installed; "
        "wait-ready refuses a host that runs another)",
    )
    kernel_modules: Literal["open", "proprietary"] | None = Field(
        default=None,
        description="NVIDIA kernel module type; default from the GPU's architecture: open on "
        "Turing and newer (required on Blackwell), proprietary on Volta",
    )
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, description=_shared("labels"))
    taints: list[Taint] = Field(
        default_factory=NodePool.model_fields["taints"].default_factory,
        description=_shared("taints"),
    )

    @model_validator(mode="after")
    def _consistent(self) -> HostsNodePool:
        """Every problem of the pool at once: its hosts' keys, labels, taints and GPUs."""
        found = [
            *self._host_problems(),
            *label_problems(self.labels),
            *taint_problems(self.taints),
            *gpu_problems(
                self.gpu_type, self.driver_version, self.kernel_modules, "of the pool's hosts"
            ),
        ]
        if self.gpu.nvswitch and self.gpu.model not in catalog.NVSWITCH_MODELS:
            found.append(
                (
                    "gpu.nvswitch",
                    True,
                    f"false: no NVSwitch board carries the {self.gpu.model} (NVSwitch models: "
                    f"{', '.join(catalog.NVSWITCH_MODELS)})",
                )
            )
        if found:
            raise problems(found)
        return self

    def _host_problems(self) -> list[Found]:
        """Each host's name once in the pool (reordering the list changes nothing; two hosts of
        one name would be one node)."""
        found: list[Found] = []
        seen: dict[str, int] = {}
        for index, host in enumerate(self.hosts):
            if host.key is None:
                continue
            if host.key in seen:
                found.append(
                    (
                        f"hosts[{index}].name",
                        host.key,
                        f"a name no other host of the pool has (hosts[{seen[host.key]}] is also "
                        f"{host.key!r}{'' if host.name else ', from its address'}): set name",
                    )
                )
            seen.setdefault(host.key, index)
        return found

    @property
    def count(self) -> int:
        return len(self.hosts)

    @property
    def gpu_type(self) -> catalog.GpuServer:
        return catalog.GpuServer.of(self.gpu.model, self.gpu.count, nvswitch=self.gpu.nvswitch)

    @property
    def kernel_module_type(self) -> catalog.KernelModules:
        """The configured kernel module type, else the GPU architecture's default."""
        return self.kernel_modules or self.gpu_type.default_kernel_modules

    @property
    def uses_efa(self) -> Literal[False]:
        return False

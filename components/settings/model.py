"""`Settings`: the whole stack configuration, one typed model validated once, before any resource
exists. Each section validates itself (`sections`, `node_pool`); the rules that need more than one
section are named functions in `rules`, run here in order.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Annotated, Any

from pydantic import Discriminator, Field, SecretStr, Tag, field_validator, model_validator
from pydantic_core import PydanticCustomError

from components.settings.constants import MAX_TAGS, PROGRAM_TAGS, SUPPORTED_KUBERNETES_MINORS
from components.settings.fields import (
    DnsLabel,
    Found,
    InstanceId,
    Model,
    SshHostKey,
    TagKey,
    TagValue,
    control_characters,
    problems,
)
from components.settings.hosts_pool import HostsNodePool
from components.settings.node_pool import NodePool
from components.settings.rules import CROSS_SECTION_RULES
from components.settings.sections import (
    ControlPlane,
    DcgmExporter,
    DevicePlugin,
    FeatureDiscovery,
    ManagedControlPlane,
    Network,
    NodeTerminationHandler,
    OperatorKubeconfig,
    Ssh,
    Validation,
)

_PRIVATE_KEY = re.compile(
    r"-----BEGIN ([A-Z]+ )?PRIVATE KEY-----.+-----END ([A-Z]+ )?PRIVATE KEY-----", re.S
)


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


def _pool_kind(value: Any) -> str:
    """Which kind of pool a `nodePools` item is: one that names `hosts` is a pool of existing
    servers, any other one of EC2 instances (as every pool was before hosts pools)."""
    if isinstance(value, dict):
        return HostsNodePool.union_tag if "hosts" in value else NodePool.union_tag
    return getattr(value, "union_tag", NodePool.union_tag)


AnyNodePool = Annotated[
    Annotated[NodePool, Tag(NodePool.union_tag)]
    | Annotated[HostsNodePool, Tag(HostsNodePool.union_tag)],
    Discriminator(_pool_kind),
]


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
    ssh: Ssh = Field(default=Ssh(), description="How the program reaches the hosts over SSH")
    ssh_private_key: SecretStr = Field(
        description="Private key matching ssh.publicKey, set as a secret: "
        "pulumi config set --secret gpu-cluster:sshPrivateKey < ~/.ssh/id_ed25519"
    )
    node_pools: list[AnyNodePool] = Field(
        min_length=1,
        description="GPU node pools: each a number of identical EC2 instances (instanceType, "
        "count) or a list of existing servers (hosts, gpu)",
    )
    device_plugin: DevicePlugin = Field(
        default=DevicePlugin(), description="The NVIDIA device plugin DaemonSet"
    )
    validation: Validation = Field(
        default=Validation(), description="The per-node GPU validation Job"
    )
    kubeconfig: OperatorKubeconfig = Field(
        default=OperatorKubeconfig(),
        description="Identity of the exported kubeconfig output (its own certificate, group, "
        "lifetime)",
    )
    host_keys: dict[InstanceId, SshHostKey] = Field(
        default_factory=dict,
        description="SSH host public keys read out of band, by instance id: the machine's "
        "first contact accepts its entry beside the key it booted with (required for machines "
        "created before the program generated host keys; a machine with no key to check stops "
        "the up)",
    )
    dcgm_exporter: DcgmExporter = Field(
        default=DcgmExporter(),
        description="NVIDIA DCGM exporter DaemonSet, Service and (optionally) ServiceMonitor",
    )
    feature_discovery: FeatureDiscovery = Field(
        default=FeatureDiscovery(),
        description="GPU Feature Discovery and the NFD master that applies its node labels",
    )
    node_termination_handler: NodeTerminationHandler = Field(
        default=NodeTerminationHandler(),
        description="The AWS Node Termination Handler on spot pools' nodes (its image by digest)",
    )
    tags: dict[TagKey, TagValue] = Field(
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
            if re.fullmatch(r"[0-9]+\.[0-9]", value):
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
        # A key file is lines of base64 between its BEGIN and END lines: no other control
        # characters (the value itself is never shown).
        stray = [c for c in control_characters(text.replace("\r\n", "\n")) if c != "U+000A"]
        if stray:
            raise PydanticCustomError(
                "ssh_private_key_characters",
                "a private key file as ssh-keygen writes it: lines of text without control "
                "characters (found {found}); set it again with `pulumi config set --secret "
                "gpu-cluster:sshPrivateKey < ~/.ssh/id_ed25519`",
                {"found": ", ".join(dict.fromkeys(stray))},
            )
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
    def _unique_pool_names(
        cls, pools: list[NodePool | HostsNodePool]
    ) -> list[NodePool | HostsNodePool]:
        found: list[Found] = []
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
        found: list[Found] = [item for rule in CROSS_SECTION_RULES for item in rule(self)]
        if found:
            raise problems(found)
        return self

    @property
    def instance_pools(self) -> list[NodePool]:
        """The pools of EC2 instances the stack launches (an empty one too: it holds a key pair
        and a security group)."""
        return [pool for pool in self.node_pools if isinstance(pool, NodePool)]

    @property
    def host_pools(self) -> list[HostsNodePool]:
        """The pools of existing servers."""
        return [pool for pool in self.node_pools if isinstance(pool, HostsNodePool)]

    @property
    def launches_machines(self) -> bool:
        """The stack creates EC2 machines (a managed control plane, a pool of instances), and
        with them its network. Without: no AWS resource, no AWS call, no `aws:region`."""
        return isinstance(self.control_plane, ManagedControlPlane) or bool(self.instance_pools)

    @property
    def stack_tags(self) -> dict[str, str]:
        """Tags every AWS resource carries: the configured ones plus the cluster's own."""
        return {**self.tags, "gpu-cluster:cluster": self.cluster_name}

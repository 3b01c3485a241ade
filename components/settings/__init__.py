"""The stack configuration contract: one typed model, validated once, before any resource exists.

Key names (camelCase, in the `gpu-cluster:` namespace) are the public interface, described in
Pulumi.yaml and docs/configuration.md. Defaults live in code, where `pulumi up` and the tests
get the same values (tests/test_project_file.py keeps Pulumi.yaml's equal). Modules: `constants`
(supported versions, defaults, the labels and tags the program owns), `fields` (one validated
type per kind of value, `problem(s)`), `keys` (SSH keys), `addresses` (what source ranges
admit), `sections`, `node_pool`, `rules` (rules across sections), `model` (`Settings`). Each
problem names the exact key it is about.
Why: docs/decisions/021-settings-defaults-live-in-code.md
"""

from components.settings.constants import (
    AWS_RESERVED_PER_SUBNET,
    DEFAULT_DEVICE_PLUGIN_VERSION,
    DEFAULT_VALIDATION_IMAGE,
    KUBELET_LABEL_NAMESPACES,
    KUBELET_OWN_LABELS,
    MAX_NODE_NAME_LENGTH,
    MAX_TAGS,
    PROGRAM_NODE_LABELS,
    PROGRAM_TAGS,
    PROJECT,
    SUBNET_PREFIX_DIFF,
    SUBNETS_IN_NEW_VPC,
    SUPPORTED_DRIVER_BRANCHES,
    SUPPORTED_KUBERNETES_MINORS,
    SUPPORTED_UBUNTU,
)
from components.settings.fields import (
    AmiId,
    Cidr,
    DnsLabel,
    Host,
    LabelKey,
    LabelValue,
    Model,
    PinnedImage,
    problem,
    problems,
)
from components.settings.model import Settings
from components.settings.node_pool import NodePool, Taint
from components.settings.sections import (
    Bastion,
    ControlPlane,
    DcgmExporter,
    DevicePlugin,
    ExistingControlPlane,
    FeatureDiscovery,
    ManagedControlPlane,
    Network,
    NodeTerminationHandler,
    OperatorKubeconfig,
    Ssh,
    TimeSlicing,
    Validation,
)

__all__ = [
    "AWS_RESERVED_PER_SUBNET",
    "DEFAULT_DEVICE_PLUGIN_VERSION",
    "DEFAULT_VALIDATION_IMAGE",
    "KUBELET_LABEL_NAMESPACES",
    "KUBELET_OWN_LABELS",
    "MAX_NODE_NAME_LENGTH",
    "MAX_TAGS",
    "PROGRAM_NODE_LABELS",
    "PROGRAM_TAGS",
    "PROJECT",
    "SUBNETS_IN_NEW_VPC",
    "SUBNET_PREFIX_DIFF",
    "SUPPORTED_DRIVER_BRANCHES",
    "SUPPORTED_KUBERNETES_MINORS",
    "SUPPORTED_UBUNTU",
    "AmiId",
    "Bastion",
    "Cidr",
    "ControlPlane",
    "DcgmExporter",
    "DevicePlugin",
    "DnsLabel",
    "ExistingControlPlane",
    "FeatureDiscovery",
    "Host",
    "LabelKey",
    "LabelValue",
    "ManagedControlPlane",
    "Model",
    "Network",
    "NodePool",
    "NodeTerminationHandler",
    "OperatorKubeconfig",
    "PinnedImage",
    "Settings",
    "Ssh",
    "Taint",
    "TimeSlicing",
    "Validation",
    "problem",
    "problems",
]

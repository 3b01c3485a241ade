"""How large a managed control plane must be for its fleet: the vCPUs and memory published
control-plane sizings ask for a number of nodes, and the vCPUs and memory an EC2 instance type
has, read from its name for the families a control plane is usually given (m, c, r, t3).

Why, with the figures and their sources: docs/decisions/049-a-control-plane-sized-to-its-fleet.md
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pulumi

if TYPE_CHECKING:
    from components.settings.model import Settings

# Kubernetes' kube-up master sizes (kubernetes.io, "Considerations for large clusters"): up to
# this many nodes, a GCE n1-standard-N master, N vCPUs and 3.75 N GiB.
KUBE_UP_VCPUS = ((5, 1), (10, 2), (100, 4), (250, 8), (500, 16))
KUBE_UP_VCPUS_BEYOND = 32
N1_GIB_PER_VCPU = 3.75
# OpenShift's control-plane density tests (docs.redhat.com, "Control plane node sizing"): the
# size that ran this many worker nodes, (nodes, vCPUs, GiB).
OPENSHIFT_TESTED = ((25, 4, 16), (100, 8, 32), (250, 16, 96))
# kubeadm's own minimum for a control-plane machine ("Installing kubeadm": 2 CPUs or more).
KUBEADM_MIN_VCPUS = 2

# Memory per vCPU by family letter (AWS "Amazon EC2 instance types" specifications: general
# purpose m 4 GiB, compute optimized c 2 GiB, memory optimized r 8 GiB per vCPU).
GIB_PER_VCPU = {"m": 4.0, "c": 2.0, "r": 8.0}
# Burstable t3/t3a/t4g sizes, (vCPUs, GiB) as AWS lists them.
BURSTABLE = {
    "nano": (2, 0.5),
    "micro": (2, 1.0),
    "small": (2, 2.0),
    "medium": (2, 4.0),
    "large": (2, 8.0),
    "xlarge": (4, 16.0),
    "2xlarge": (8, 32.0),
}
BURSTABLE_FAMILIES = ("t3", "t3a", "t4g")
# The sizes a message proposes, smallest first.
STANDARD_SIZES = ("large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge")

_NAME = re.compile(r"^(?P<family>(?P<letter>[a-z])[0-9][a-z0-9-]*)\.(?P<size>[a-z0-9]+)$")
_MULTIPLE = re.compile(r"^(?P<n>[0-9]+)xlarge$")


@dataclass(frozen=True)
class Size:
    vcpus: int
    memory_gib: float

    def holds(self, other: Size) -> bool:
        return self.vcpus >= other.vcpus and self.memory_gib >= other.memory_gib

    def __str__(self) -> str:
        return f"{self.vcpus} vCPUs and {self.memory_gib:g} GiB"


def _vcpus_of_size(size: str) -> int | None:
    if size == "medium":
        return 1
    if size == "large":
        return 2
    if size == "xlarge":
        return 4
    match = _MULTIPLE.match(size)
    return 4 * int(match["n"]) if match else None


def instance_size(instance_type: str) -> Size | None:
    """The vCPUs and memory of `instance_type`, or None for a family or size this table does
    not know (metal sizes, x/z/u/i/g/p families, ...)."""
    match = _NAME.match(instance_type)
    if match is None:
        return None
    family, size = match["family"], match["size"]
    if family in BURSTABLE_FAMILIES:
        known = BURSTABLE.get(size)
        return Size(*known) if known else None
    per_vcpu = GIB_PER_VCPU.get(match["letter"])
    vcpus = _vcpus_of_size(size)
    if per_vcpu is None or vcpus is None:
        return None
    return Size(vcpus, vcpus * per_vcpu)


def _kube_up_vcpus(nodes: int) -> int:
    return next((v for most, v in KUBE_UP_VCPUS if nodes <= most), KUBE_UP_VCPUS_BEYOND)


def _openshift_floor(nodes: int) -> tuple[int, int, int] | None:
    """The largest OpenShift test with at most `nodes` workers: a larger fleet needs at least
    that size."""
    return next((t for t in reversed(OPENSHIFT_TESTED) if t[0] <= nodes), None)


def needed(nodes: int) -> Size:
    """What a control plane for `nodes` GPU nodes needs: kube-up's master size, at least the
    size OpenShift tested with as many workers or fewer, never under kubeadm's minimum."""
    kube_up = _kube_up_vcpus(nodes)
    vcpus, memory = max(kube_up, KUBEADM_MIN_VCPUS), kube_up * N1_GIB_PER_VCPU
    floor = _openshift_floor(nodes)
    if floor is not None:
        vcpus, memory = max(vcpus, floor[1]), max(memory, float(floor[2]))
    return Size(vcpus, memory)


def why(nodes: int) -> str:
    """The published figures behind `needed(nodes)`, for messages."""
    text = f"kube-up's master for {nodes} nodes is n1-standard-{_kube_up_vcpus(nodes)}"
    floor = _openshift_floor(nodes)
    if floor is not None:
        text += f"; OpenShift ran {floor[0]} workers on {floor[1]} vCPUs and {floor[2]} GB"
    return text


def smallest_fitting(instance_type: str, nodes: int) -> str | None:
    """The smallest standard size of `instance_type`'s family that holds `needed(nodes)`, or
    None when the family is unknown here or has no size that large."""
    match = _NAME.match(instance_type)
    if match is None or instance_size(instance_type) is None:
        return None
    family, need = match["family"], needed(nodes)
    sizes = tuple(BURSTABLE) if family in BURSTABLE_FAMILIES else STANDARD_SIZES
    for size in sizes:
        candidate = f"{family}.{size}"
        found = instance_size(candidate)
        if found is not None and found.holds(need):
            return candidate
    return None


# Proposed when the given family has no size that large (t3 stops at 2xlarge).
FALLBACK_TYPE = "m7i.large"


def to_use(instance_type: str, nodes: int) -> str:
    """The type a message proposes: the given family's smallest fitting size, else m7i's."""
    fitting = smallest_fitting(instance_type, nodes) or smallest_fitting(FALLBACK_TYPE, nodes)
    assert fitting is not None, f"no {FALLBACK_TYPE} size holds {needed(nodes)}"
    return fitting


def gpu_nodes(settings: Settings) -> int:
    return sum(pool.count for pool in settings.node_pools)


def warn_unchecked_size(settings: Settings) -> None:
    """A managed control plane of a family the table does not know is not refused, but its size
    goes unchecked: said on every preview and up."""
    from components.settings.sections import ManagedControlPlane

    control_plane = settings.control_plane
    if not isinstance(control_plane, ManagedControlPlane):
        return
    given = control_plane.instance_type
    if instance_size(given) is not None:
        return
    nodes = gpu_nodes(settings)
    pulumi.log.warn(
        f"gpu-cluster:controlPlane.instanceType {given}: its vCPUs and memory are not in the "
        f"sizing table (m, c, r and t3 families), so whether it can serve {nodes} GPU node(s) "
        f"is not checked; it needs at least {needed(nodes)} ({why(nodes)})."
    )

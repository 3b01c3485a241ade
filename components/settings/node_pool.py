"""A GPU node pool: instance type from the catalog, driver branch, disk, labels and taints."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BeforeValidator, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from components import catalog
from components.settings.constants import (
    DISCOVERY_LABEL_PREFIXES,
    KUBELET_LABEL_NAMESPACES,
    KUBELET_OWN_LABEL_NAMESPACES,
    KUBELET_OWN_LABELS,
    PROGRAM_KEY_PREFIX,
    PROGRAM_NODE_LABELS,
    SUPPORTED_DRIVER_BRANCHES,
)
from components.settings.fields import (
    AmiId,
    CapacityReservationId,
    DnsLabel,
    Found,
    LabelKey,
    LabelValue,
    Model,
    image_source_problems,
    problems,
)


class Taint(Model):
    key: LabelKey = Field(description="Taint key")
    value: LabelValue = Field(default="", description="Taint value")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        description="Taint effect"
    )


def _driver_branch(value: str) -> str:
    if value not in SUPPORTED_DRIVER_BRANCHES:
        raise PydanticCustomError(
            "driver_branch",
            "an NVIDIA driver branch, one of {branches} (the branch number, not a full version)",
            {"branches": ", ".join(SUPPORTED_DRIVER_BRANCHES)},
        )
    return value


def _branch_number(value: Any) -> Any:
    # `driverVersion: 580` unquoted is a YAML number; the branch is meant either way.
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


# A pool's NVIDIA driver branch (EC2 and hosts pools alike).
DriverBranch = Annotated[str, BeforeValidator(_branch_number), AfterValidator(_driver_branch)]


def _kubernetes_namespace(namespace: str) -> bool:
    return namespace in ("kubernetes.io", "k8s.io") or namespace.endswith(
        (".kubernetes.io", ".k8s.io")
    )


def _kubelet_may_set(namespace: str) -> bool:
    return any(
        namespace == allowed or namespace.endswith(f".{allowed}")
        for allowed in KUBELET_LABEL_NAMESPACES
    )


def _reserved_label(key: str) -> str | None:
    """Why a pool may not set label `key`, or None."""
    namespace = key.rpartition("/")[0]
    if key in PROGRAM_NODE_LABELS:
        return (
            "a label the program does not set itself: it sets "
            f"{', '.join(PROGRAM_NODE_LABELS)} on GPU nodes (the device plugins "
            "selects on them); remove this one"
        )
    if key in KUBELET_OWN_LABELS or namespace in KUBELET_OWN_LABEL_NAMESPACES:
        return (
            "a label the kubelet does not set itself from the machine (it sets "
            f"{', '.join(sorted(KUBELET_OWN_LABELS))} and the "
            f"{', '.join(KUBELET_OWN_LABEL_NAMESPACES)} keys): the node guard refuses a "
            "registration that carries a pool's value for it, and the value would claim "
            "another machine's name, zone or type; remove this one"
        )
    if key.startswith(DISCOVERY_LABEL_PREFIXES):
        return (
            "a label outside the keys hardware discovery writes "
            f"({', '.join(p + '*' for p in DISCOVERY_LABEL_PREFIXES)}): a pool's value would "
            "claim GPUs or features the machine may lack, and the discovery would overwrite "
            "it; use a key of your own domain (team.example.com/gpu)"
        )
    if key.startswith(PROGRAM_KEY_PREFIX):
        return (
            f"a key outside {PROGRAM_KEY_PREFIX}, which the program keeps for its own labels "
            "and taints; use a key of your own domain (team.example.com/...)"
        )
    if _kubernetes_namespace(namespace) and not _kubelet_may_set(namespace):
        return (
            "a label the kubelet may set on its own Node: in the kubernetes.io and "
            f"k8s.io namespaces only {', '.join(KUBELET_LABEL_NAMESPACES)} "
            "(and their subdomains); the kubelet refuses to start with others "
            "(set node-role.kubernetes.io/* with kubectl label after the join)"
        )
    return None


class NodePool(Model):
    # How the settings tell the two pool kinds apart (components/settings/model.py).
    union_tag: ClassVar[str] = "instances"
    kind: ClassVar[str] = "a pool of EC2 instances"

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
    driver_version: DriverBranch = Field(
        default="580",
        description="NVIDIA driver branch (the branch number, not a full version)",
    )
    root_volume_gib: int = Field(
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
    market: Literal["on-demand", "spot", "capacity-block"] = Field(
        default="on-demand",
        description="EC2 purchase option (capacity-block: launch into the EC2 Capacity Block "
        "named by capacityReservationId)",
    )
    efa: bool | None = Field(
        default=None,
        description="Give each node its Elastic Fabric Adapter interfaces, a cluster placement "
        "group and the EFA software (default: on for p4d, p4de, p5, p5e, p5en and p6-b200; "
        "other types with EFA opt in). Set at launch: changing it replaces the pool's machines",
    )
    capacity_reservation_id: CapacityReservationId | None = Field(
        default=None,
        description="Launch the pool's machines into this On-Demand Capacity Reservation or "
        "(with market: capacity-block) Capacity Block",
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
    kernel_modules: Literal["open", "proprietary"] | None = Field(
        default=None,
        description="NVIDIA kernel module type; default from the GPU's architecture: open on "
        "Turing and newer (required on Blackwell), proprietary on Volta (which has no open one); "
        "proprietary, with GSP firmware off, on g4dn and g5 (as AWS's own images run them)",
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

    @model_validator(mode="after")
    def _consistent(self) -> NodePool:
        """Every cross-field problem of the pool at once: each check below adds its own, none
        stops the others."""
        found = [
            *self._label_problems(),
            *self._gpu_problems(),
            *self._capacity_problems(),
            *image_source_problems(self.image, self.ami_id),
        ]
        if found:
            raise problems(found)
        return self

    def _label_problems(self) -> list[Found]:
        return label_problems(self.labels)

    def _gpu_problems(self) -> list[Found]:
        """The driver branch, kernel modules and EFA against what the instance type has."""
        found = gpu_problems(
            self.gpu_type, self.driver_version, self.kernel_modules, f"of {self.instance_type}"
        )
        if self.efa and not self.gpu_type.efa_interfaces:
            found.append(
                (
                    "efa",
                    self.efa,
                    f"false or unset: {self.instance_type} has no EFA interface "
                    f"({_with_efa(self.gpu_type.family)})",
                )
            )
        return found

    def _capacity_problems(self) -> list[Found]:
        """The market against the reservation, and the taints."""
        found: list[Found] = []
        if self.market == "capacity-block" and self.capacity_reservation_id is None:
            found.append(
                (
                    "capacityReservationId",
                    None,
                    "the id of the Capacity Block (cr-...) with market: capacity-block",
                )
            )
        if self.market == "spot" and self.capacity_reservation_id is not None:
            found.append(
                (
                    "capacityReservationId",
                    self.capacity_reservation_id,
                    "unset with market: spot (a reservation holds on-demand or capacity-block "
                    "capacity)",
                )
            )
        return found + taint_problems(self.taints)

    @property
    def gpu_type(self) -> catalog.GpuInstanceType:
        return catalog.CATALOG[self.instance_type]

    @property
    def kernel_module_type(self) -> catalog.KernelModules:
        """The configured kernel module type, else the instance type's default (its GPU
        architecture's, proprietary where GSP firmware is off)."""
        return self.kernel_modules or self.gpu_type.default_kernel_modules

    @property
    def uses_efa(self) -> bool:
        """The pool's nodes get EFA interfaces, a placement group and the EFA software."""
        if self.efa is None:
            return self.gpu_type.efa_by_default
        return self.efa and self.gpu_type.efa_interfaces > 0


def label_problems(labels: dict[str, str]) -> list[Found]:
    """A pool's labels that the program, the kubelet or hardware discovery set, or that the
    kubelet refuses to set."""
    found: list[Found] = []
    for key, value in labels.items():
        why = _reserved_label(key)
        if why is not None:
            found.append((("labels", key), value, why))
    return found


def taint_problems(taints: list[Taint]) -> list[Found]:
    """Each key/effect pair of a pool's taints once, and no key of the program's own."""
    found: list[Found] = [
        (
            ("taints", index, "key"),
            taint.key,
            f"a key outside {PROGRAM_KEY_PREFIX}, which the program keeps for its own taints "
            "(the proof taint gpu-cluster.io/unproven is lifted by the same write that sets a "
            "pool's taints); use a key of your own domain (team.example.com/dedicated)",
        )
        for index, taint in enumerate(taints)
        if taint.key.startswith(PROGRAM_KEY_PREFIX)
    ]
    keys = [(t.key, t.effect) for t in taints]
    if len(set(keys)) != len(keys):
        found.append(("taints", [t.model_dump() for t in taints], "each key/effect pair once"))
    return found


def gpu_problems(
    gpu_type: catalog.GpuInstanceType,
    driver_version: str,
    kernel_modules: str | None,
    of: str,
) -> list[Found]:
    """The driver branch and kernel module type against the GPUs a pool's machines carry
    (`of`: "of g5.xlarge", "of the pool's hosts")."""
    found: list[Found] = []
    gpu = gpu_type.gpu
    branch = int(driver_version)
    if branch < gpu.min_driver_branch or (
        gpu.max_driver_branch is not None and branch > gpu.max_driver_branch
    ):
        newest = f" to {gpu.max_driver_branch}" if gpu.max_driver_branch else " or newer"
        found.append(
            (
                "driverVersion",
                driver_version,
                f"a branch that supports the {gpu.name} {of}: {gpu.min_driver_branch}{newest}",
            )
        )
    allowed = gpu_type.kernel_modules
    if kernel_modules is not None and kernel_modules not in allowed:
        only = " or ".join(allowed)
        why = (
            f"{gpu.arch.name} GPUs are driven by the {only} kernel modules only"
            if gpu_type.gsp_firmware
            else f"{gpu_type.family} runs with GSP firmware off, which only the proprietary "
            "modules can"
        )
        found.append(
            (
                "kernelModules",
                kernel_modules,
                f"{only} for the {gpu.name} {of}: {why}; set {only} or leave it unset",
            )
        )
    return found


def _with_efa(family: str) -> str:
    """Which types have EFA: the sizes of `family` that do, else the families that do."""
    sizes = [
        name
        for name, gpu_type in catalog.CATALOG.items()
        if gpu_type.family == family and gpu_type.efa_interfaces
    ]
    if sizes:
        return f"of the {family} types, {', '.join(sizes)} have EFA"
    families = sorted({t.family for t in catalog.CATALOG.values() if t.efa_interfaces})
    return f"families with EFA: {', '.join(families)}"

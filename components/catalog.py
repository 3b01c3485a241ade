"""The EC2 GPU instance types gpu-cluster knows, and what each one carries; and the GPU models an
existing server of a hosts pool may name (`GPU_MODELS`, `GpuServer`).

The GPU count here is the contract the whole chain is checked against: `nvidia-smi` on the host
must list it, the node must report it as allocatable `nvidia.com/gpu`, and the validation Job
requests all of it. An instance type or GPU model missing from this table is a configuration
error, never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

KernelModules = Literal["open", "proprietary"]


@dataclass(frozen=True)
class Architecture:
    """A GPU generation and the NVIDIA kernel module types that drive it.

    NVIDIA ("NVIDIA Transitions Fully Towards Open-Source GPU Kernel Modules", and the driver
    README's "Open Linux Kernel Modules" chapter): Blackwell is supported by the open modules
    only; from branch 560 the open modules are the default, and recommended, on Turing and
    newer; Volta and older have no open module. NVIDIA's own driver container picks the same
    way (gpu-driver-container `ubuntu24.04/precompiled/nvidia-driver`, `_resolve_kernel_type`:
    `KERNEL_MODULE_TYPE` auto | open | proprietary, open from 560).
    """

    name: str
    default_kernel_modules: KernelModules
    kernel_modules: tuple[KernelModules, ...]


VOLTA = Architecture("volta", "proprietary", ("proprietary",))
TURING = Architecture("turing", "open", ("open", "proprietary"))
AMPERE = Architecture("ampere", "open", ("open", "proprietary"))
ADA_LOVELACE = Architecture("ada-lovelace", "open", ("open", "proprietary"))
HOPPER = Architecture("hopper", "open", ("open", "proprietary"))
BLACKWELL = Architecture("blackwell", "open", ("open",))
ARCHITECTURES = (VOLTA, TURING, AMPERE, ADA_LOVELACE, HOPPER, BLACKWELL)


@dataclass(frozen=True)
class GpuModel:
    name: str
    arch: Architecture
    # Memory per GPU as AWS's accelerated-computing table states it (tests/test_catalog.py):
    # rounded GB for most (A10G 24, L40S 48), GiB for B200 (179). Informational: nothing in the
    # program schedules or checks on it (GPU Feature Discovery labels the real figure).
    memory_gib: int
    # Oldest and newest NVIDIA driver branch that supports this GPU (None: no upper bound known).
    min_driver_branch: int
    max_driver_branch: int | None = None

    @property
    def architecture(self) -> str:
        return self.arch.name


@dataclass(frozen=True)
class EfaInterface:
    """One EFA network interface of an instance, as EC2 RunInstances takes it."""

    network_card_index: int
    device_index: int
    # `efa`: EFA with ENA (an IP address, SSH and kubelet traffic can use it); `efa-only`: the
    # EFA device alone, no IP address (EC2 NetworkInterfaceCreationType: efa | efa-only).
    interface_type: str


@dataclass(frozen=True)
class GpuInstanceType:
    name: str
    gpu: GpuModel
    gpu_count: int
    # NVSwitch systems need nvidia-fabricmanager matching the driver branch, or CUDA fails with
    # error 802 while nvidia-smi looks healthy.
    needs_fabric_manager: bool
    efa_interfaces: int

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def gsp_firmware(self) -> bool:
        """Whether the driver may run the GPU System Processor firmware. AWS's own images turn it
        off on g4dn, g5 and g5g, for GSP problems on those types, and load the proprietary
        module, the only one that runs without it (amazon-eks-ami `templates/al2023/runtime/
        gpu/nvidia-kmod-load.sh`). docs/decisions/043-gsp-off-on-g4dn-and-g5.md."""
        return self.family not in GSP_OFF_FAMILIES

    @property
    def kernel_modules(self) -> tuple[KernelModules, ...]:
        """The kernel module types this type can run: its GPU's, without GSP the proprietary."""
        if not self.gsp_firmware:
            return ("proprietary",)
        return self.gpu.arch.kernel_modules

    @property
    def default_kernel_modules(self) -> KernelModules:
        return "proprietary" if not self.gsp_firmware else self.gpu.arch.default_kernel_modules

    @property
    def needs_nvlink_subnet_manager(self) -> bool:
        """NVSwitch gen 4 (NVLink 5, Blackwell HGX): fabric manager also needs NVLSM, libnvsdm and
        ib_umad (gpu-driver-container `ubuntu24.04/precompiled/nvidia-driver`: on an NVLink5+
        system it installs nvlsm and libnvsdm and starts fabric manager with an NVLSM config)."""
        return self.needs_fabric_manager and self.gpu.arch is BLACKWELL

    @property
    def efa_by_default(self) -> bool:
        """Pools of this type use EFA unless they say `efa: false` (the multi-node training
        families, whose point is the fabric)."""
        return self.efa_interfaces > 0 and self.family in EFA_DEFAULT_FAMILIES

    @property
    def efa_layout(self) -> tuple[EfaInterface, ...]:
        """The instance's EFA interfaces, one per network card, as AWS recommends: the primary
        one (network card 0, device index 0) an `efa` interface, every further one on the next
        network card at device index 1, `efa-only` on P5-class types and `efa` on the others.
        Sources: docs/decisions/009-efa-is-fixed-at-launch.md."""
        further = "efa-only" if self.family in EFA_ONLY_FAMILIES else "efa"
        return tuple(
            EfaInterface(card, 0 if card == 0 else 1, "efa" if card == 0 else further)
            for card in range(self.efa_interfaces)
        )

    @property
    def nvlink(self) -> bool:
        """The GPUs talk over NVLink (all P types), not PCIe: the NCCL check's floor and hint."""
        return self.family in NVLINK_FAMILIES

    @property
    def nccl_floor(self) -> NcclFloor:
        return NcclFloor.for_type(self)


@dataclass(frozen=True)
class GpuServer(GpuInstanceType):
    """The GPUs of every existing server of a hosts pool (`gpu: {model, count, nvswitch}`), in
    the shape the chain reads from an instance type. No EC2 family's rule applies: GSP firmware
    stays the driver's default (on), no EFA, and NVSwitch alone means the fabric manager and
    NVLink bandwidth. Why: docs/decisions/054-machines-the-stack-did-not-create.md."""

    nvswitch: bool = False

    @classmethod
    def of(cls, model: str, count: int, *, nvswitch: bool) -> GpuServer:
        gpu = GPU_MODELS[model]
        joined = " over NVSwitch" if nvswitch else ""
        return cls(
            name=f"a server of {count} {gpu.name}{joined}",
            gpu=gpu,
            gpu_count=count,
            needs_fabric_manager=nvswitch,
            efa_interfaces=0,
            nvswitch=nvswitch,
        )

    @property
    def family(self) -> str:
        return ""  # no EC2 family

    @property
    def gsp_firmware(self) -> bool:
        return True

    @property
    def nvlink(self) -> bool:
        return self.nvswitch


T4 = GpuModel("NVIDIA T4", TURING, 16, min_driver_branch=418)
A10G = GpuModel("NVIDIA A10G", AMPERE, 24, min_driver_branch=470)
L4 = GpuModel("NVIDIA L4", ADA_LOVELACE, 24, min_driver_branch=525)
L40S = GpuModel("NVIDIA L40S", ADA_LOVELACE, 48, min_driver_branch=535)
# R580 is the last driver branch that supports Volta.
V100 = GpuModel("NVIDIA V100", VOLTA, 16, min_driver_branch=384, max_driver_branch=580)
V100_32 = GpuModel("NVIDIA V100", VOLTA, 32, min_driver_branch=384, max_driver_branch=580)
A100_40 = GpuModel("NVIDIA A100", AMPERE, 40, min_driver_branch=450)
A100_80 = GpuModel("NVIDIA A100", AMPERE, 80, min_driver_branch=450)
H100 = GpuModel("NVIDIA H100", HOPPER, 80, min_driver_branch=525)
H200 = GpuModel("NVIDIA H200", HOPPER, 141, min_driver_branch=550)
B200 = GpuModel("NVIDIA B200", BLACKWELL, 179, min_driver_branch=570)


def _types(
    family: str, gpu: GpuModel, sizes: dict[str, tuple[int, int]], *, fabric_manager: bool = False
) -> list[GpuInstanceType]:
    """sizes maps an instance size to (GPU count, EFA interfaces)."""
    return [
        GpuInstanceType(f"{family}.{size}", gpu, count, fabric_manager, efa)
        for size, (count, efa) in sizes.items()
    ]


_SINGLE_GPU_SIZES = {"xlarge": (1, 0), "2xlarge": (1, 0), "4xlarge": (1, 0)}

CATALOG: dict[str, GpuInstanceType] = {
    t.name: t
    for t in [
        *_types(
            "g4dn",
            T4,
            {
                **_SINGLE_GPU_SIZES,
                "8xlarge": (1, 1),
                "16xlarge": (1, 1),
                "12xlarge": (4, 1),
                "metal": (8, 1),
            },
        ),
        *_types(
            "g5",
            A10G,
            {
                **_SINGLE_GPU_SIZES,
                "8xlarge": (1, 1),
                "16xlarge": (1, 1),
                "12xlarge": (4, 1),
                "24xlarge": (4, 1),
                "48xlarge": (8, 1),
            },
        ),
        *_types(
            "g6",
            L4,
            {
                **_SINGLE_GPU_SIZES,
                "8xlarge": (1, 1),
                "16xlarge": (1, 1),
                "12xlarge": (4, 1),
                "24xlarge": (4, 1),
                "48xlarge": (8, 1),
            },
        ),
        *_types(
            "g6e",
            L40S,
            {
                **_SINGLE_GPU_SIZES,
                "8xlarge": (1, 1),
                "16xlarge": (1, 1),
                "12xlarge": (4, 1),
                "24xlarge": (4, 2),
                "48xlarge": (8, 4),
            },
        ),
        *_types("p3", V100, {"2xlarge": (1, 0), "8xlarge": (4, 0), "16xlarge": (8, 0)}),
        *_types("p3dn", V100_32, {"24xlarge": (8, 1)}),
        *_types("p4d", A100_40, {"24xlarge": (8, 4)}, fabric_manager=True),
        *_types("p4de", A100_80, {"24xlarge": (8, 4)}, fabric_manager=True),
        *_types("p5", H100, {"48xlarge": (8, 32)}, fabric_manager=True),
        *_types("p5e", H200, {"48xlarge": (8, 32)}, fabric_manager=True),
        *_types("p5en", H200, {"48xlarge": (8, 16)}, fabric_manager=True),
        *_types("p6-b200", B200, {"48xlarge": (8, 8)}, fabric_manager=True),
    ]
}


# Families whose GPUs run without GSP firmware, on the proprietary module (GpuInstanceType.
# gsp_firmware); g5g (Graviton) is not in the catalog.
GSP_OFF_FAMILIES = ("g4dn", "g5", "g5g")

# Families whose pools use EFA by default: the instance types AWS builds for multi-node training
# (P4d/P4de 400 Gbps over 4 EFA; P5/P5e 3200 Gbps over 32; P5en 3200 Gbps over 16;
# P6-B200 3200 Gbps over 8). Other EFA-capable types (g5/g6/g6e large sizes, p3dn) opt in.
EFA_DEFAULT_FAMILIES = ("p4d", "p4de", "p5", "p5e", "p5en", "p6-b200")
# Families whose secondary EFA interfaces are `efa-only` (see GpuInstanceType.efa_layout).
EFA_ONLY_FAMILIES = ("p5", "p5e", "p5en", "p6-b200")


@dataclass(frozen=True)
class NcclFloor:
    """Lowest NCCL `all_reduce_perf` bus bandwidth (GB/s, the "busbw" column of nccl-tests, at
    the largest message size) that passes validation.

    `node`: one node, all its GPUs; 0 where there is nothing to measure (one GPU: busbw is
    0 by definition, 2(n-1)/n of algbw). `efa`: two nodes of the type over EFA.

    About half of what the hardware's published link rate allows (NVLink, PCIe or EFA), so a
    broken path fails and a healthy but busy node passes. The rates and their sources:
    docs/decisions/010-nccl-floors-are-half-the-link-rate.md.
    """

    node: float
    efa: float

    @staticmethod
    def for_type(gpu_type: GpuInstanceType) -> NcclFloor:
        if gpu_type.gpu_count < 2:
            node = 0.0
        elif gpu_type.nvlink:
            node = _NVLINK_FLOOR[gpu_type.gpu.architecture]
        else:
            node = _PCIE_FLOOR
        efa = _EFA_FLOOR.get(gpu_type.family, _EFA_OPT_IN_FLOOR) if gpu_type.efa_interfaces else 0.0
        return NcclFloor(node=node, efa=efa)


# The catalog's GPUs joined by NVLink (all P types); the G types talk over PCIe.
NVLINK_FAMILIES = ("p3", "p3dn", "p4d", "p4de", "p5", "p5e", "p5en", "p6-b200")
# Half of one direction of the per-GPU NVLink bandwidth (NVIDIA data sheets), GB/s.
_NVLINK_FLOOR = {"volta": 75.0, "ampere": 150.0, "hopper": 225.0, "blackwell": 450.0}
_PCIE_FLOOR = 3.0
# 40% of the published network bandwidth, GB/s.
_EFA_FLOOR = {
    "p4d": 20.0,
    "p4de": 20.0,
    "p5": 160.0,
    "p5e": 160.0,
    "p5en": 160.0,
    "p6-b200": 160.0,
}
_EFA_OPT_IN_FLOOR = 5.0


# The GPU models a hosts pool may name (`gpu.model`), by NVIDIA's short product name: the catalog's
# own models (their architecture and driver branches). Memory is informational (see GpuModel):
# A100 and V100 servers come with either size, and GPU Feature Discovery labels the real one.
GPU_MODELS: dict[str, GpuModel] = {
    "T4": T4,
    "A10G": A10G,
    "L4": L4,
    "L40S": L40S,
    "V100": V100_32,
    "A100": A100_80,
    "H100": H100,
    "H200": H200,
    "B200": B200,
}
# The models NVIDIA builds NVSwitch boards of (HGX, DGX) that the catalog's NVSwitch types carry:
# the ones whose servers need the fabric manager with `nvswitch: true`.
NVSWITCH_MODELS = tuple(
    sorted(
        {
            short
            for short, model in GPU_MODELS.items()
            for t in CATALOG.values()
            if t.needs_fabric_manager and t.gpu.name == model.name
        }
    )
)


def lookup(instance_type: str) -> GpuInstanceType:
    """The catalog entry for an instance type; KeyError names the type when it is unknown."""
    try:
        return CATALOG[instance_type]
    except KeyError:
        raise KeyError(
            f"{instance_type!r} is not an EC2 GPU instance type in the catalog"
        ) from None


def families() -> list[str]:
    return sorted({t.family for t in CATALOG.values()})

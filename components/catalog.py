"""The EC2 GPU instance types gpu-cluster knows, and what each one carries.

The GPU count here is the contract the whole chain is checked against: `nvidia-smi` on the host
must list it, the node must report it as allocatable `nvidia.com/gpu`, and the validation Job
requests all of it. An instance type missing from this table is a configuration error, never a
guess.
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
    memory_gib: int
    # Oldest and newest NVIDIA driver branch that supports this GPU (None: no upper bound known).
    min_driver_branch: int
    max_driver_branch: int | None = None

    @property
    def architecture(self) -> str:
        return self.arch.name


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
    def needs_nvlink_subnet_manager(self) -> bool:
        """NVSwitch gen 4 (NVLink 5, Blackwell HGX): fabric manager also needs NVLSM, libnvsdm and
        ib_umad (gpu-driver-container `ubuntu24.04/precompiled/nvidia-driver`: on an NVLink5+
        system it installs nvlsm and libnvsdm and starts fabric manager with an NVLSM config)."""
        return self.needs_fabric_manager and self.gpu.arch is BLACKWELL


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

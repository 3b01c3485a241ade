"""A GPU host in the script sandbox: the inputs the node scripts run with in the tests and a
fresh Ubuntu 24.04 host whose simulated archive has what they install."""

from __future__ import annotations

from pathlib import Path

from components.hosts import pins
from tests.helpers.archive_packages import NVLSM_VERSION
from tests.sandbox import Sandbox

FAST = {"RETRY_BASE_SECONDS": "0.01"}
DRIVER = {
    "DRIVER_BRANCH": "580",
    "GPU_COUNT": "4",
    "NEEDS_FABRIC_MANAGER": "false",
    "KERNEL_MODULES": "proprietary",
    **FAST,
}
RUNTIME = {**pins.runtime_params("24.04", "1.35", with_toolkit=True), **FAST}
# An NVSwitch host's driver step: its fabric packages come from NVIDIA's CUDA repository.
FABRIC = {
    **DRIVER,
    "NEEDS_FABRIC_MANAGER": "true",
    "CUDA_REPOSITORY": pins.CUDA_REPOSITORIES["24.04"],
}
UBUNTU_2404 = 'NAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\nID_LIKE=debian\n'
FSTAB = (
    "LABEL=cloudimg-rootfs\t/\text4\tdiscard,errors=remount-ro\t0 1\n"
    "# /swapfile none swap sw 0 0 (an old comment)\n"
    "/swapfile none swap sw 0 0\n"
    "/dev/nvme1n1 /mnt/swap-archive ext4 defaults 0 2\n"
)
DRIVER_UPSTREAM = "580.95.05"
DRIVER_VERSION = "580.95.05-0ubuntu0.24.04.2"
NEWER_DRIVER = "580.105.08-0ubuntu0.24.04.1"  # userspace a day ahead of the built modules
RUNNING_KERNEL = "6.8.0-1021-aws"  # the uname stub's default
CONTAINERD = "2.2.1-1~ubuntu.24.04~noble"  # Docker's containerd.io (components/hosts/pins.py)
# The lists the runtime and kube-tools steps add (the apt-get stub installs their packages only
# after an `apt-get update` read them).
NVIDIA_SOURCES = "/etc/apt/sources.list.d/nvidia-container-toolkit.list"
KUBERNETES_SOURCES = "/etc/apt/sources.list.d/kubernetes.list"
# pkgs.k8s.io's packages the kube-tools step installs (cri-tools at the same minor).
KUBE_PACKAGES = ("kubelet", "kubeadm", "kubectl", "cri-tools")
KUBE_VERSIONS = ("1.35.0-1.1", "1.35.1-1.1")
CTK_PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)


def new_gpu_host(root: Path) -> Sandbox:
    """A fresh Ubuntu 24.04 GPU host on AWS with 4 GPUs and nouveau loaded, whose archive offers
    what the pinned scripts install, in the package shapes of the real archive."""
    sb = Sandbox(root)
    sb.write("/etc/os-release", UBUNTU_2404)
    sb.write("/etc/fstab", FSTAB)
    sb.state("modules", "nouveau\n")
    sb.state("nvidia-smi.gpus", 4)
    for suffix in ("580-server", "580-server-open"):
        offer_module(sb, suffix, RUNNING_KERNEL)
        sb.apt_available(f"nvidia-headless-no-dkms-{suffix}", DRIVER_VERSION, NEWER_DRIVER)
    for pkg in (
        "nvidia-kernel-common-580-server",
        "nvidia-utils-580-server",
        "libnvidia-decode-580-server",
        "libnvidia-encode-580-server",
    ):
        sb.apt_available(pkg, DRIVER_VERSION, NEWER_DRIVER)
    # Fabric packages come from NVIDIA's CUDA repository (its own Debian revision); their
    # upstream version must equal the driver's. NVLink 5's IB modules are in modules-extra.
    for pkg in ("nvidia-fabricmanager", "libnvidia-nscq", "libnvsdm", "nvlsm"):
        versions = [NVLSM_VERSION] if pkg == "nvlsm" else ["580.95.05-1", "580.105.08-1"]
        sb.apt_available(pkg, *versions)
        sb.state(f"apt.source/{pkg}", "/etc/apt/sources.list.d/cuda.list")
    sb.apt_available(f"linux-modules-extra-{RUNNING_KERNEL}", "6.8.0-1021.23")
    for pkg in ("infiniband-diags", "libibumad3"):  # Ubuntu's rdma-core (noble)
        sb.apt_available(pkg, "50.0-2build2")
    # Docker's repository keeps every containerd.io; a later 2.3 must not be taken by a pinned
    # host (tests/helpers/archive.py builds the same archive for the tests of issue 35).
    sb.apt_available(
        "containerd.io", "1.7.28-1~ubuntu.24.04~noble", CONTAINERD, "2.3.0-1~ubuntu.24.04~noble"
    )
    sb.state("apt.source/containerd.io", "/etc/apt/sources.list.d/docker.list")
    for pkg in CTK_PACKAGES:
        sb.apt_available(pkg, "1.17.8-1", "1.18.0-1", "1.20.0-1")
        sb.state(f"apt.source/{pkg}", NVIDIA_SOURCES)
    for pkg in KUBE_PACKAGES:
        sb.apt_available(pkg, *(["1.35.0-1.1"] if pkg == "cri-tools" else KUBE_VERSIONS))
        sb.state(f"apt.source/{pkg}", KUBERNETES_SOURCES)
    return sb


def offer_module(
    sb: Sandbox, suffix: str, kernel: str, built_for: str = DRIVER_UPSTREAM, branch: str = "580"
) -> str:
    """The archive's signed module package of one driver flavour for one kernel, in the shape
    Ubuntu's linux-restricted-modules builds it: versioned like its kernel, depending on the
    kernel image and on nvidia-kernel-common of exactly the driver it was built with."""
    pkg = f"linux-modules-nvidia-{suffix}-{kernel}"
    abi = kernel.rsplit("-", 1)[0]
    sb.apt_available(pkg, f"{abi}.23")
    common = f"nvidia-kernel-common-{branch}-server"
    sb.state(
        f"apt.depends/{pkg}",
        f"linux-image-{kernel} | linux-image-unsigned-{kernel}, "
        f"{common} (<= {built_for}-1), {common} (>= {built_for})",
    )
    return pkg

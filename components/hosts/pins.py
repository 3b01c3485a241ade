"""What the host scripts install, pinned in one place, with where each pin comes from.

Each pin travels to the hosts as a script parameter (components/hosts/rendering.py), so changing
one re-runs the step that installs it and nothing else.
"""

from __future__ import annotations

from components.catalog import GpuInstanceType

# NVIDIA Container Toolkit, an apt version of NVIDIA's libnvidia-container repository: v1.20.0
# (NVIDIA/nvidia-container-toolkit CHANGELOG.md). From 1.18 `nvidia-ctk runtime configure` writes
# containerd's nvidia runtime to a drop-in, /etc/containerd/conf.d/99-nvidia.toml
# (cmd/nvidia-ctk/runtime/configure/configure.go, defaultContainerdDropInConfigFilePath), which
# only `containerd config dump` shows merged with config.toml.
NVIDIA_CTK_VERSION = "1.20.0-1"

# AWS EFA installer release, installed by install-efa.sh on the nodes of EFA pools: the EFA
# driver, rdma-core, libfabric with the efa provider and the NCCL network plugin (libnccl-ofi).
# AWS EC2 user guide, "Elastic Fabric Adapter release notes" (efa-changelog): 1.51.0 (October
# 22, 2026) upgrades to libfabric 2.7.0amzn2.0, EFA driver 3.3.1, rdma-core 65.0 and the OFI
# NCCL plugin 1.22.0. The installer is run only after its GPG signature checks out against AWS's
# key (docs/decisions/047-efa-verified-and-checked-by-its-loaded-module.md), and the step
# checks the efa module the running kernel loads is its driver, EFA_DRIVER_VERSION.
EFA_INSTALLER_VERSION = "1.51.0"
EFA_DRIVER_VERSION = "3.3.1"

# containerd.io from Docker's apt repository, per Ubuntu release: 2.2.1, the containerd the
# hosts ran from Ubuntu's archive before. Docker's repository keeps every version it published
# (Holodeck pkg/provisioner/templates/containerd.go installs containerd.io=<version>* from it),
# Ubuntu's archive only the newest of each pocket, where 2.2.1 stops installing when 2.2.2
# arrives. Changing a version here rolls every node. Why, and how to pick the next:
# docs/decisions/042-containerd-from-a-repository-that-keeps-every-version.md.
CONTAINERD_VERSIONS = {
    "24.04": "2.2.1-1~ubuntu.24.04~noble",
    "22.04": "2.2.1-1~ubuntu.22.04~jammy",
}
UBUNTU_CODENAMES = {"24.04": "noble", "22.04": "jammy"}
DOCKER_APT_REPOSITORY = "https://download.docker.com/linux/ubuntu"


def containerd_repository(os_version: str) -> str:
    """Docker's apt source for one Ubuntu release (docs.docker.com/engine/install/ubuntu/)."""
    return f"{DOCKER_APT_REPOSITORY} {UBUNTU_CODENAMES[os_version]} stable"


# The pause (sandbox) image kubeadm expects for each Kubernetes minor (kubeadm's
# cmd/kubeadm/app/constants PauseVersion; `kubeadm config images list` prints it). containerd's
# own default differs by release, and kubeadm warns when the runtime's sandbox image is not its
# own; install-kube-tools.sh checks this table against the installed kubeadm.
# Source: kubernetes/minikube pkg/minikube/constants/constants_kubeadm_images.go, which
# hack/update/kubeadm_constants writes from `kubeadm config images list --kubernetes-version`
# of each released kubeadm: pause 3.10 for v1.33.0-v1.33.13, 3.10.1 for v1.34.0-rc.0-v1.34.10
# and v1.35.0-v1.35.7, 3.10.2 from v1.36.0-rc.0 (beta.0 still 3.10.1) through v1.36.3 and
# v1.37.0-alpha.1-rc.0. kubespray roles/kubespray_defaults/vars/main/main.yml
# pod_infra_supported_versions (1.36: 3.10.2, 1.35/1.34: 3.10.1) and kubeone
# pkg/apis/kubeone/helpers.go SandboxImage (>= 1.36: 3.10.2, else 3.10.1) agree.
PAUSE_IMAGES = {
    "1.33": "registry.k8s.io/pause:3.10",
    "1.34": "registry.k8s.io/pause:3.10.1",
    "1.35": "registry.k8s.io/pause:3.10.1",
    "1.36": "registry.k8s.io/pause:3.10.2",
    "1.37": "registry.k8s.io/pause:3.10.2",
}


# The CNI of a managed control plane (install-cni.sh): flannel, pinned to one release manifest,
# which is applied with admin rights only when its sha256 is this one (the release asset
# kube-flannel.yml of v0.27.4 as downloaded, before the pod network is set in it; check with
# `curl -fsSL https://github.com/flannel-io/flannel/releases/download/v0.27.4/kube-flannel.yml
# | sha256sum`). A new FLANNEL_VERSION needs its own.
FLANNEL_VERSION = "v0.27.4"
FLANNEL_MANIFEST_SHA256 = "f17c57f82ffef1d53dbf558ac30755241980563044622778a15df339e4346c57"
# The images that manifest runs, pinned by digest (install-cni.sh rewrites its image lines to
# these, and applies nothing that names another image). flannel-io/flannel v0.27.4's
# kube-flannel.yml (`make release-manifest`: `kubectl kustomize Documentation/kustomization/
# kube-flannel/`) runs ghcr.io/flannel-io/flannel:v0.27.4 in install-cni and kube-flannel, and
# ghcr.io/flannel-io/flannel-cni-plugin:v1.8.0-flannel1 in install-cni-plugin. No registry is
# reachable where this is written, so each digest is one a public source records:
# - flannel:v0.27.4: sha256:2ff3c5cb... as randomcoww/homelab's Renovate-maintained
#   `container_images` pin it (the same digest in every version of that file from October 2025
#   to January 2026).
# - the CNI plugin: v1.7.1-flannel1, the plugin of flannel v0.27.0 to v0.27.3's manifests (git
#   show v0.27.3:Documentation/kube-flannel.yml), at sha256:cb3176a2..., the digest three
#   independent transcripts record (`kubectl describe` Image ID, a pod's status.imageID and
#   containerd's "repo digest" log line). No public source records v1.8.0-flannel1's digest;
#   flannel-io/cni-plugin v1.7.1-flannel1..v1.8.0-flannel1 changes one error message in
#   flannel.go and bumps dependencies (containernetworking/plugins 1.7.1 -> 1.8.0, Go 1.24.3),
#   so the binary root runs is the same plugin. Check one with `crane digest <image:tag>`.
# docs/decisions/039-what-runs-as-root-is-pinned-by-digest.md
FLANNEL_IMAGE = (
    f"ghcr.io/flannel-io/flannel:{FLANNEL_VERSION}"
    "@sha256:2ff3c5cb44d0e27b09f27816372084c98fa12486518ca95cb4a970f4a1a464c4"
)
FLANNEL_CNI_PLUGIN_IMAGE = (
    "ghcr.io/flannel-io/flannel-cni-plugin:v1.7.1-flannel1"
    "@sha256:cb3176a2c9eae5fa0acd7f45397e706eacb4577dac33cad89f93b775ff5611df"
)
# Baked images hold them.
FLANNEL_IMAGES = (FLANNEL_IMAGE, FLANNEL_CNI_PLUGIN_IMAGE)


# The EFA installer's own bound: under the `efa` step's 30-minute host-side bound
# (components/hosts/steps.py EFA), so a hung installer is reported as the installer, not as
# the step.
EFA_INSTALLER_TIMEOUT_SECONDS = 25 * 60


def efa_params(efa_interfaces: int) -> dict[str, str]:
    """Parameters of install-efa.sh for a node with `efa_interfaces` EFA interfaces."""
    return {
        "EFA_INSTALLER_VERSION": EFA_INSTALLER_VERSION,
        "EFA_DRIVER_VERSION": EFA_DRIVER_VERSION,
        "EFA_INTERFACES": str(efa_interfaces),
        "EFA_INSTALLER_TIMEOUT_SECONDS": str(EFA_INSTALLER_TIMEOUT_SECONDS),
    }


def runtime_params(os_version: str, kubernetes_minor: str, *, with_toolkit: bool) -> dict[str, str]:
    """Parameters of install-runtime.sh for one host."""
    params = {
        "CONTAINERD_VERSION": CONTAINERD_VERSIONS[os_version],
        "CONTAINERD_REPOSITORY": containerd_repository(os_version),
        "SANDBOX_IMAGE": PAUSE_IMAGES[kubernetes_minor],
    }
    if with_toolkit:
        params["NVIDIA_CTK_VERSION"] = NVIDIA_CTK_VERSION
    else:
        params["WITH_NVIDIA_TOOLKIT"] = "false"
    return params


# NVIDIA's CUDA apt repository per Ubuntu release: fabric manager, NSCQ, NVSDM and nvlsm of every
# driver version come from it (gpu-driver-container ubuntu24.04/precompiled: its Dockerfile adds
# this repository, local-repo.sh and nvidia-driver install those packages from it), pinned in
# apt to just those packages at the driver's version (install-driver.sh). Its key: 3bf863cc.pub
# there, fingerprint EB69 3B30 35CD 5710 E231 E123 A4B4 6996 3BF8 63CC.
# docs/decisions/045-fabric-packages-from-nvidias-cuda-repository.md
CUDA_REPOSITORIES = {
    "24.04": "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/",
    "22.04": "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/",
}


def driver_params(
    gpu: GpuInstanceType, os_version: str, driver_branch: str, kernel_modules: str
) -> dict[str, str]:
    """Parameters of install-driver.sh for one instance type, Ubuntu release, driver branch and
    module type. Only NVSwitch types get the CUDA repository: a change of it rolls only them."""
    params = {
        "DRIVER_BRANCH": driver_branch,
        "GPU_COUNT": str(gpu.gpu_count),
        "NEEDS_FABRIC_MANAGER": "true" if gpu.needs_fabric_manager else "false",
        "KERNEL_MODULES": kernel_modules,
        "NVLINK_SUBNET_MANAGER": "true" if gpu.needs_nvlink_subnet_manager else "false",
        "GSP_FIRMWARE": "on" if gpu.gsp_firmware else "off",
    }
    if gpu.needs_fabric_manager:
        params["CUDA_REPOSITORY"] = CUDA_REPOSITORIES[os_version]
    return params

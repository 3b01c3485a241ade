"""What the host scripts install, pinned in one place, with where each pin comes from.

Each pin travels to the hosts as a script parameter (components/hosts/rendering.py), so changing
one re-runs the step that installs it and nothing else.
"""

from __future__ import annotations

# NVIDIA Container Toolkit, an apt version of NVIDIA's libnvidia-container repository: v1.20.0
# (NVIDIA/nvidia-container-toolkit CHANGELOG.md). From 1.18 `nvidia-ctk runtime configure` writes
# containerd's nvidia runtime to a drop-in, /etc/containerd/conf.d/99-nvidia.toml
# (cmd/nvidia-ctk/runtime/configure/configure.go, defaultContainerdDropInConfigFilePath), which
# only `containerd config dump` shows merged with config.toml.
NVIDIA_CTK_VERSION = "1.20.0-1"

# AWS EFA installer release, installed by install-efa.sh on the nodes of EFA pools: the EFA
# driver, rdma-core, libfabric with the efa provider and the NCCL network plugin (libnccl-ofi).
# AWS EC2 user guide, "Elastic Fabric Adapter release notes" (efa-changelog): 1.43.2 (15 August
# 2025) upgrades libnccl-ofi to 1.16.3 on top of 1.43.1's libfabric 2.1.0amzn5.0.
EFA_INSTALLER_VERSION = "1.43.2"

# containerd from Ubuntu's archive, per release. packages.ubuntu.com: noble-updates and
# jammy-updates carry containerd (source containerd-app) 2.2.1, 2.2.1-0ubuntu1~24.04.3 and
# 2.2.1-0ubuntu1~22.04.2; the release pockets still carry 1.7.12-0ubuntu4 (noble) and
# 1.5.9-0ubuntu3 (jammy). Which one apt picks depends on the host's pockets, so the version is
# pinned: any Ubuntu revision of the 2.2.1 build for that release.
CONTAINERD_VERSIONS = {
    "24.04": "2.2.1-0ubuntu1~24.04.*",
    "22.04": "2.2.1-0ubuntu1~22.04.*",
}

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
# The images that manifest runs (flannel-io/flannel v0.27.4: the release's kube-flannel.yml is
# `make release-manifest`, `kubectl kustomize Documentation/kustomization/kube-flannel/`, whose
# kube-flannel.yml names ghcr.io/flannel-io/flannel-cni-plugin:v1.8.0-flannel1 for the
# install-cni-plugin init container and ghcr.io/flannel-io/flannel for install-cni and
# kube-flannel, tagged FLANNEL_VERSION by its kustomization.yaml). Baked images hold them.
FLANNEL_IMAGES = (
    f"ghcr.io/flannel-io/flannel:{FLANNEL_VERSION}",
    "ghcr.io/flannel-io/flannel-cni-plugin:v1.8.0-flannel1",
)


# The EFA installer's own bound: under the `efa` step's 30-minute host-side bound
# (components/hosts/steps.py EFA), so a hung installer is reported as the installer, not as
# the step.
EFA_INSTALLER_TIMEOUT_SECONDS = 25 * 60


def efa_params(efa_interfaces: int) -> dict[str, str]:
    """Parameters of install-efa.sh for a node with `efa_interfaces` EFA interfaces."""
    return {
        "EFA_INSTALLER_VERSION": EFA_INSTALLER_VERSION,
        "EFA_INTERFACES": str(efa_interfaces),
        "EFA_INSTALLER_TIMEOUT_SECONDS": str(EFA_INSTALLER_TIMEOUT_SECONDS),
    }


def runtime_params(os_version: str, kubernetes_minor: str, *, with_toolkit: bool) -> dict[str, str]:
    """Parameters of install-runtime.sh for one host."""
    params = {
        "CONTAINERD_VERSION": CONTAINERD_VERSIONS[os_version],
        "SANDBOX_IMAGE": PAUSE_IMAGES[kubernetes_minor],
    }
    if with_toolkit:
        params["NVIDIA_CTK_VERSION"] = NVIDIA_CTK_VERSION
    else:
        params["WITH_NVIDIA_TOOLKIT"] = "false"
    return params

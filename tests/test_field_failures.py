"""Failures the real commands have in the field, simulated by the stubs (tests/stubs/), and the
step that must stop on them instead of reporting success.

Each stub documents its failure switches in its header (state files set with Sandbox.state).
"""

from __future__ import annotations

import pytest

from tests.sandbox import Sandbox, sandbox_available

pytestmark = pytest.mark.skipif(
    not sandbox_available(), reason="needs root, unshare --mount and overlayfs"
)

FAST = {"RETRY_BASE_SECONDS": "0.01", "POLL_SECONDS": "0.01"}
UBUNTU_2404 = 'NAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\nID_LIKE=debian\n'
CTK_PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)
RUNTIME = {"NVIDIA_CTK_VERSION": "1.17.8-1", **FAST}
PRIVATE_IP = "10.42.3.7"
INIT = {
    "CLUSTER_NAME": "dev-gpu",
    "NODE_NAME": "dev-gpu-control-plane",
    "KUBERNETES_MINOR": "1.35",
    "CONTROL_PLANE_ENDPOINT": f"{PRIVATE_IP}:6443",
    "ADVERTISE_ADDRESS": PRIVATE_IP,
    "POD_SUBNET": "10.244.0.0/16",
    "SERVICE_SUBNET": "10.96.0.0/12",
    "CERT_SANS": PRIVATE_IP,
    "API_WAIT_SECONDS": "1",
    **FAST,
}


@pytest.fixture
def gpu_host(tmp_path) -> Sandbox:
    """Ubuntu 24.04 with containerd and the pinned toolkit in the repositories."""
    sb = Sandbox(tmp_path)
    sb.write("/etc/os-release", UBUNTU_2404)
    sb.apt_available("containerd", "1.7.28-0ubuntu1~24.04.1")
    for pkg in CTK_PACKAGES:
        sb.apt_available(pkg, "1.17.8-1")
    return sb


@pytest.fixture
def control_plane_host(tmp_path) -> Sandbox:
    """A control-plane host after install-kube-tools.sh, no cluster yet."""
    sb = Sandbox(tmp_path)
    for pkg in ("kubelet", "kubeadm", "kubectl"):
        sb.state(f"dpkg/{pkg}", "1.35.1-1.1")
    return sb


# ---- install-runtime.sh: nvidia-ctk that leaves no runtime section -----------------------


def test_runtime_without_an_nvidia_runtime_section_fails(gpu_host):
    """nvidia-ctk set nvidia as the default runtime but wrote no runtime for it (it edited
    another config schema): containerd would start, and every GPU pod would fail later."""
    gpu_host.state("nvidia-ctk.no-runtime-section", 1)
    result = gpu_host.run("install-runtime.sh", RUNTIME)
    assert result.returncode == 1, (
        f"a containerd without the nvidia runtime passed:\n{result.stderr}"
    )
    assert (
        "[runtime] FAILED: an nvidia runtime section expected in /etc/containerd/config.toml, "
        "not found" in result.stderr
    )
    assert "nvidia is the default runtime" not in result.stderr


# ---- init-control-plane.sh: an API that never becomes ready after init --------------------


@pytest.mark.parametrize("failure", ["kubectl/never-ready", "kubectl/api-down"])
def test_init_whose_api_never_answers_fails_after_init(control_plane_host, failure):
    """kubeadm init returned 0 but the API server never answers /readyz (etcd unhealthy, or the
    static pod crash-looping): the control plane must not be reported initialised."""
    control_plane_host.state(failure, "yes")
    result = control_plane_host.run("init-control-plane.sh", INIT)
    assert result.called("kubeadm", "init"), result.commands()
    assert result.returncode == 1, (
        f"an API that never answered was reported ready:\n{result.stderr}"
    )
    assert "[init] FAILED: API server did not answer /readyz within 1s after kubeadm init" in (
        result.stderr
    )
    assert "journalctl -u kubelet" in result.stderr
    assert "API server ready" not in result.stderr


def test_init_waits_for_an_api_that_becomes_ready(control_plane_host):
    control_plane_host.state("kubectl/not-ready-count", 3)
    result = control_plane_host.run("init-control-plane.sh", {**INIT, "API_WAIT_SECONDS": "30"})
    assert result.returncode == 0, result.stderr
    readyz = [c for c in result.called("kubectl") if "/readyz" in c]
    assert len(readyz) == 4, result.commands()
    assert "API server ready" in result.stderr

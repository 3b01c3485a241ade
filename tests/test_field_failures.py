"""Failures the real commands have in the field, simulated by the stubs (tests/stubs/), and the
step that must stop on them instead of reporting success.

Each stub documents its failure switches in its header (state files set with Sandbox.state).
"""

from __future__ import annotations

import hashlib

import pytest

from tests.helpers.control_plane_host import ADMIN_KUBECONFIG, CNI, FLANNEL_MANIFEST
from tests.helpers.gpu_host import DRIVER, RUNTIME, new_gpu_host
from tests.sandbox import Sandbox, needs_sandbox

pytestmark = needs_sandbox

FAST = {"RETRY_BASE_SECONDS": "0.01", "POLL_SECONDS": "0.01"}
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
    "SERVING_NAMES": f"DNS:dev-gpu-control-plane\nIP Address:{PRIVATE_IP}",
    "API_WAIT_SECONDS": "1",
    "CSR_WAIT_SECONDS": "0",  # the kubeadm stub's kubelet files no serving certificate request
    **FAST,
}


@pytest.fixture
def gpu_host(tmp_path) -> Sandbox:
    """A fresh Ubuntu 24.04 GPU host whose archive has what the pinned scripts install (the
    node-script tests' host, so both follow the archive's real package shapes)."""
    return new_gpu_host(tmp_path)


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
    # install-runtime.sh checks what containerd itself loaded (`containerd config dump`, drop-ins
    # included): with no nvidia runtime there is no SystemdCgroup for it either.
    assert (
        "[runtime] FAILED: nvidia runtime SystemdCgroup: true expected in "
        "`containerd config dump`, found 'nothing'" in result.stderr
    ), result.stderr
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


def test_init_that_leaves_no_admin_conf_fails(control_plane_host):
    """kubeadm init exited 0 but wrote its kubeconfigs elsewhere: nothing after this step could
    reach the cluster, so the step fails here, naming the file."""
    control_plane_host.state("kubeadm.init-no-admin-conf", 1)
    result = control_plane_host.run("init-control-plane.sh", INIT)
    assert result.returncode == 1, result.stderr
    assert "[init] FAILED: /etc/kubernetes/admin.conf expected after kubeadm init, not found" in (
        result.stderr
    )


@pytest.mark.parametrize(
    ("script", "params", "message"),
    [
        ("init-control-plane.sh", {**INIT, "NODE_NAME": "CP_1"}, "NODE_NAME must be a lowercase"),
        ("read-kubeconfig.sh", {"API_SERVER": "10.0.0.1:6443"}, "API_SERVER must be https://"),
    ],
)
def test_control_plane_scripts_refuse_malformed_inputs_before_acting(
    control_plane_host, script, params, message
):
    result = control_plane_host.run(script, params)
    assert result.returncode == 1, result.stderr
    assert message in result.stderr, result.stderr
    assert not result.called("kubeadm") and not result.called("kubectl"), result.commands()


ADMIN_CONF_TWO_CLUSTERS = """apiVersion: v1
kind: Config
clusters:
- cluster:
    server: https://10.42.3.7:6443
  name: a
- cluster:
    server: https://10.42.3.8:6443
  name: b
"""


def test_kubeconfig_of_a_host_with_two_clusters_is_refused(control_plane_host, ca_cert):
    """The operator's kubeconfig is rewritten to one public server: with two clusters in
    admin.conf the program cannot know which one the stack made."""
    control_plane_host.write("/etc/kubernetes/admin.conf", ADMIN_CONF_TWO_CLUSTERS, 0o600)
    control_plane_host.write("/etc/kubernetes/pki/ca.crt", ca_cert)
    result = control_plane_host.run("read-kubeconfig.sh", {"API_SERVER": "https://1.2.3.4:6443"})
    assert result.returncode == 1, result.stderr
    assert "expected one cluster server in /etc/kubernetes/admin.conf, found 2" in result.stderr
    assert result.stdout == "", "printed a kubeconfig anyway"


def test_skew_check_behind_a_proxy_that_answers_no_version_fails(control_plane_host):
    control_plane_host.write("/etc/kubernetes/admin.conf", ADMIN_CONF_TWO_CLUSTERS, 0o600)
    control_plane_host.state("kubectl/api", "v1.35.1")
    control_plane_host.state("kubectl/version-body", "<html>Bad Gateway</html>")
    result = control_plane_host.run("check-version-skew.sh", {"KUBERNETES_MINOR": "1.35"})
    assert result.returncode == 1, result.stderr
    assert "FAILED: no gitVersion in the API server's /version answer" in result.stderr


# ---- install-runtime.sh: containerd that does not stay up --------------------------------


def test_runtime_whose_containerd_fails_after_start_fails(gpu_host):
    gpu_host.state("systemd/containerd.crashes", 1)
    result = gpu_host.run("install-runtime.sh", RUNTIME)
    assert result.returncode == 1, result.stderr
    assert "[runtime] FAILED: containerd expected active, systemctl reports 'failed'" in (
        result.stderr
    )


# ---- join-node.sh: a join that reports success without a working kubelet ----------------

JOIN = {
    "NODE_NAME": "dev-gpu-a10g-0",
    "API_ENDPOINT": "10.42.1.10:6443",
    "JOIN_TOKEN": "abcdef.0123456789abcdef",
    "CA_CERT_HASH": "sha256:" + "ab" * 32,
    "KUBERNETES_MINOR": "1.35",
    # After the join, one look at the Node (tests/test_join_checks.py has the waits).
    "READY_TIMEOUT_SECONDS": "0",
    "CAPACITY_TIMEOUT_SECONDS": "0",
    **FAST,
}


@pytest.fixture
def kube_host(tmp_path) -> Sandbox:
    sb = Sandbox(tmp_path)
    sb.state("dpkg/kubeadm", "1.35.1-1.1")
    sb.state("dpkg/kubelet", "1.35.1-1.1")
    sb.state("systemd/kubelet.enabled", "yes")
    return sb


@pytest.mark.parametrize(
    ("failure", "message"),
    [
        (
            "kubeadm.join-no-kubelet-conf",
            "/etc/kubernetes/kubelet.conf expected after kubeadm join, not found",
        ),
        (
            "kubeadm.join-kubelet-fails",
            "kubelet expected active after kubeadm join, systemctl reports 'failed'",
        ),
    ],
)
def test_join_without_a_running_kubelet_fails(kube_host, failure, message):
    """A Node that never registers would only show up as the join's readiness timeout ten
    minutes later; the join step says what is wrong on the host first."""
    kube_host.state(failure, 1)
    result = kube_host.run("join-node.sh", JOIN)
    assert result.returncode == 1, result.stderr
    assert f"[join] FAILED: {message}" in result.stderr, result.stderr
    assert JOIN["JOIN_TOKEN"] not in result.output


def test_join_refuses_a_node_name_that_is_no_dns_name(kube_host):
    result = kube_host.run("join-node.sh", {**JOIN, "NODE_NAME": "GPU_0"})
    assert result.returncode == 1, result.stderr
    assert "NODE_NAME must be a lowercase DNS name, got 'GPU_0'" in result.stderr
    assert not result.called("kubeadm"), result.commands()


# ---- install-driver.sh: a module that loads and a GPU that does not answer ---------------


def test_driver_whose_gpu_does_not_answer_fails(gpu_host):
    """The module loaded but nvidia-smi cannot reach the GPU (fallen off the bus, Xid 79):
    the node must not go on to join as a GPU node."""
    gpu_host.state("nvidia-smi.no-device", 1)
    result = gpu_host.run("install-driver.sh", DRIVER)
    assert result.returncode == 1, result.stderr
    assert "[driver] FAILED: nvidia-smi failed; the nvidia kernel module did not load" in (
        result.stderr
    )


# ---- install-cni.sh: a release manifest that is not the pinned flannel -------------------


def test_cni_manifest_with_another_flannel_image_is_not_applied(control_plane_host):
    """The download answered with a manifest of another release (a moved tag, a mirror): the
    step refuses it before applying anything."""
    control_plane_host.write("/etc/kubernetes/admin.conf", ADMIN_KUBECONFIG, 0o600)
    control_plane_host.state("kubectl/api", "v1.35.1")
    other = FLANNEL_MANIFEST.replace("flannel:v0.27.4", "flannel:v0.26.0")
    control_plane_host.state("curl.body.kube-flannel.yml", other)
    result = control_plane_host.run("install-cni.sh", CNI)
    assert result.returncode == 1, result.stderr
    # Another manifest is not the pinned one: refused by its sha256 before it is read.
    assert "has sha256" in result.stderr and "not applying it" in result.stderr, result.stderr
    assert not [c for c in result.commands() if " apply " in c], result.commands()
    # Pinned to that very manifest, the image check still refuses it.
    pinned = {**CNI, "FLANNEL_MANIFEST_SHA256": hashlib.sha256(other.encode()).hexdigest()}
    result = control_plane_host.run("install-cni.sh", pinned)
    assert result.returncode == 1, result.stderr
    assert "to run ghcr.io/flannel-io/flannel:v0.27.4 twice" in result.stderr, result.stderr
    assert "ghcr.io/flannel-io/flannel:v0.26.0" in result.stderr, result.stderr
    assert not [c for c in result.commands() if " apply " in c], result.commands()

"""Kubernetes minor upgrades, run for real in the sandbox: the managed control plane first
(upgrade-control-plane.sh), then each drained node (upgrade-node.sh), in the order kubeadm's
upgrade procedure gives (kubernetes.io/docs/tasks/administer-cluster/kubeadm/kubeadm-upgrade/:
"Skipping MINOR versions when upgrading is unsupported"; upgrade kubeadm, `kubeadm upgrade
plan`/`apply` on the control plane, then per node `kubeadm upgrade node`, then kubelet and
kubectl, kubelet restarted).
"""

from __future__ import annotations

import pytest

from tests.sandbox import Sandbox, sandbox_available

pytestmark = pytest.mark.skipif(
    not sandbox_available(), reason="needs root, unshare --mount and overlayfs"
)

FAST = {"RETRY_BASE_SECONDS": "0.01", "POLL_SECONDS": "0.1"}
KUBE_PACKAGES = ("kubelet", "kubeadm", "kubectl")


def host(root, running: str = "1.35.1-1.1") -> Sandbox:
    """A host with kube tools of one minor installed and held; 1.34 to 1.37 in the repository."""
    sb = Sandbox(root)
    for pkg in KUBE_PACKAGES:
        sb.state(f"dpkg/{pkg}", running)
        sb.apt_available(pkg, "1.34.3-1.1", "1.35.1-1.1", "1.36.0-1.1", "1.37.0-1.1")
    sb.state("apt-mark.held", "kubelet\nkubeadm\nkubectl\n")
    sb.state("systemd/kubelet.active", "yes")
    return sb


def control_plane(root, cluster: str | None = "v1.35.1") -> Sandbox:
    sb = host(root)
    if cluster:
        sb.write("/etc/kubernetes/admin.conf", "apiVersion: v1\nkind: Config\n", 0o600)
        sb.state("kubectl/api", cluster)
    return sb


def node(root, api: str = "v1.36.0", joined: bool = True) -> Sandbox:
    sb = host(root)
    sb.state("kubectl/api", api)
    if joined:
        sb.write("/etc/kubernetes/kubelet.conf", "apiVersion: v1\nkind: Config\n", 0o600)
    return sb


def order(result, *needles: str) -> list[int]:
    """Index of the first recorded call containing each needle, for order assertions."""
    commands = result.commands()
    found = []
    for needle in needles:
        hits = [i for i, c in enumerate(commands) if needle in c]
        assert hits, f"no call with {needle!r} in {commands}"
        found.append(hits[0])
    return found


# ---------------------------------------------------------------- control plane


def test_control_plane_moves_one_minor_in_kubeadms_order(tmp_path):
    sb = control_plane(tmp_path)
    result = sb.run("upgrade-control-plane.sh", {"KUBERNETES_MINOR": "1.36", **FAST})
    assert result.returncode == 0, result.stderr
    steps = order(
        result,
        "apt-get -q -y",  # the repository switched and updated first
        "install --no-install-recommends --allow-change-held-packages kubeadm=1.36.*",
        "kubeadm upgrade plan v1.36.0",
        "kubeadm upgrade apply --yes v1.36.0",
        "kubelet=1.36.* kubectl=1.36.*",
        "systemctl restart kubelet",
    )
    assert steps == sorted(steps), result.commands()
    assert sb.state("kubectl/api") == "v1.36.0"
    assert sb.state("kubeadm.upgrades").splitlines() == ["plan v1.36.0", "apply v1.36.0"]
    assert "core:/stable:/v1.36/deb/" in sb.read("/etc/apt/sources.list.d/kubernetes.list")
    assert {sb.installed(p) for p in KUBE_PACKAGES} == {"1.36.0-1.1"}
    assert sb.held() >= set(KUBE_PACKAGES)
    again = sb.run("upgrade-control-plane.sh", {"KUBERNETES_MINOR": "1.36", **FAST})
    assert again.returncode == 0 and "already runs 1.36" in again.stderr
    assert not again.called("kubeadm", "upgrade") and not again.called("apt-get"), again.commands()


def test_first_up_has_no_cluster_to_upgrade(tmp_path):
    sb = control_plane(tmp_path, cluster=None)
    result = sb.run("upgrade-control-plane.sh", {"KUBERNETES_MINOR": "1.35", **FAST})
    assert result.returncode == 0, result.stderr
    assert "no cluster on this host yet" in result.stderr
    assert result.calls == [], result.commands()


@pytest.mark.parametrize(
    ("wanted", "message"),
    [
        (
            "1.37",
            "gpu-cluster:kubernetesVersion is 1.37 but the control plane runs 1.35; kubeadm "
            "upgrades one minor at a time (skipping one is not supported): set "
            "gpu-cluster:kubernetesVersion to 1.36, pulumi up, then the next minor",
        ),
        (
            "1.34",
            "gpu-cluster:kubernetesVersion is 1.34 but the control plane runs 1.35; kubeadm "
            "does not downgrade: set gpu-cluster:kubernetesVersion to 1.35",
        ),
    ],
    ids=["skipped-minor", "downgrade"],
)
def test_control_plane_refuses_a_skipped_minor_or_a_downgrade_before_installing(
    tmp_path, wanted, message
):
    sb = control_plane(tmp_path)
    result = sb.run("upgrade-control-plane.sh", {"KUBERNETES_MINOR": wanted, **FAST})
    assert result.returncode != 0
    assert f"[upgrade-control-plane] FAILED: {message}" in result.stderr, result.stderr
    assert not result.called("apt-get") and not result.called("kubeadm"), result.commands()
    assert sb.state("kubectl/api") == "v1.35.1"


def test_a_failed_apply_says_so_and_a_rerun_finishes(tmp_path):
    sb = control_plane(tmp_path)
    sb.state("kubeadm.fail.upgrade", 1)  # the plan fails once
    failed = sb.run("upgrade-control-plane.sh", {"KUBERNETES_MINOR": "1.36", **FAST})
    assert failed.returncode != 0
    assert "kubeadm upgrade plan v1.36.0 refused the upgrade" in failed.stderr
    assert sb.state("kubectl/api") == "v1.35.1"
    rerun = sb.run("upgrade-control-plane.sh", {"KUBERNETES_MINOR": "1.36", **FAST})
    assert rerun.returncode == 0, rerun.stderr
    assert sb.state("kubectl/api") == "v1.36.0"


# ---------------------------------------------------------------- nodes


def test_node_upgrade_follows_kubeadms_worker_procedure(tmp_path):
    sb = node(tmp_path)
    result = sb.run("upgrade-node.sh", {"KUBERNETES_MINOR": "1.36", **FAST})
    assert result.returncode == 0, result.stderr
    steps = order(
        result,
        "kubeadm=1.36.*",
        "kubeadm upgrade node",
        "kubelet=1.36.* kubectl=1.36.*",
        "systemctl daemon-reload",
        "systemctl restart kubelet",
    )
    assert steps == sorted(steps), result.commands()
    assert {sb.installed(p) for p in KUBE_PACKAGES} == {"1.36.0-1.1"}
    again = sb.run("upgrade-node.sh", {"KUBERNETES_MINOR": "1.36", **FAST})
    assert again.returncode == 0 and "kubelet already 1.36" in again.stderr
    assert not again.called("kubeadm") and not again.called("apt-get"), again.commands()


def test_a_node_not_joined_yet_has_nothing_to_upgrade(tmp_path):
    sb = node(tmp_path, joined=False)
    result = sb.run("upgrade-node.sh", {"KUBERNETES_MINOR": "1.36", **FAST})
    assert result.returncode == 0, result.stderr
    assert "not joined yet" in result.stderr
    assert result.calls == [], result.commands()


def test_a_node_never_moves_past_its_api_server(tmp_path):
    sb = node(tmp_path, api="v1.35.1")  # the control plane was not upgraded
    result = sb.run("upgrade-node.sh", {"KUBERNETES_MINOR": "1.36", **FAST})
    assert result.returncode != 0
    assert (
        "[upgrade-node] FAILED: gpu-cluster:kubernetesVersion is 1.36 but the API server runs "
        "1.35; a kubelet must never be newer than its API server" in result.stderr
    ), result.stderr
    assert not result.called("apt-get") and not result.called("kubeadm"), result.commands()


def test_a_node_refuses_a_skipped_minor(tmp_path):
    sb = node(tmp_path, api="v1.37.0")
    result = sb.run("upgrade-node.sh", {"KUBERNETES_MINOR": "1.37", **FAST})
    assert result.returncode != 0
    assert "gpu-cluster:kubernetesVersion is 1.37 but this node's kubelet runs 1.35" in (
        result.stderr
    )
    assert not result.called("apt-get"), result.commands()

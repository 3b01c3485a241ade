"""Kubernetes minor upgrades, run for real in the sandbox: the managed control plane first
(upgrade-control-plane.sh), then each drained node (install-kube-tools.sh on a joined worker,
what upgrade-node.sh did), in the order kubeadm's upgrade procedure gives
(kubernetes.io/docs/tasks/administer-cluster/kubeadm/kubeadm-upgrade/: "Skipping MINOR versions
when upgrading is unsupported"; upgrade kubeadm, `kubeadm upgrade plan`/`apply` on the control
plane, then per node `kubeadm upgrade node`, then kubelet and kubectl, kubelet restarted).
"""

from __future__ import annotations

import pytest

from tests.sandbox import Sandbox, needs_sandbox

pytestmark = needs_sandbox

FAST = {"RETRY_BASE_SECONDS": "0.01", "POLL_SECONDS": "0.1"}
# The node's step: its kube tools, which move a joined worker to a new minor first.
KUBE_TOOLS = "install-kube-tools.sh"
KUBE_PACKAGES = ("kubelet", "kubeadm", "kubectl", "cri-tools")


def host(root, running: str = "1.35.1-1.1") -> Sandbox:
    """A host with kube tools of one minor installed and held; 1.34 to 1.37 in the repository."""
    sb = Sandbox(root)
    for pkg in KUBE_PACKAGES:
        sb.state(f"dpkg/{pkg}", running)
        sb.apt_available(pkg, "1.34.3-1.1", "1.35.1-1.1", "1.36.0-1.1", "1.37.0-1.1")
    sb.state("apt-mark.held", "kubelet\nkubeadm\nkubectl\ncri-tools\n")
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


def kube_installs(result) -> list[str]:
    return [c for c in result.commands() if c.startswith("apt-get") and " install " in c]


def test_node_upgrade_follows_kubeadms_worker_procedure(tmp_path):
    sb = node(tmp_path)
    result = sb.run(KUBE_TOOLS, {"KUBERNETES_MINOR": "1.36", **FAST})
    assert result.returncode == 0, result.stderr
    assert "kubelet 1.35 -> 1.36 (API server 1.36)" in result.stderr, result.stderr
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
    assert sb.held() >= set(KUBE_PACKAGES)
    assert sb.state("kubeadm.upgrades").splitlines() == ["node"]
    # Nothing on stdout: no time of the node's dates its join token (issue 41, finding 8).
    assert result.stdout == "", result.stdout
    again = sb.run(KUBE_TOOLS, {"KUBERNETES_MINOR": "1.36", **FAST})
    assert again.returncode == 0 and "kubelet already 1.36" in again.stderr, again.stderr
    assert not again.called("kubeadm", "upgrade") and not kube_installs(again), again.commands()
    assert not again.called("systemctl", "restart", "kubelet"), again.commands()


def test_a_node_not_joined_yet_has_nothing_to_upgrade(tmp_path):
    """kubeadm join configures the kubelet of the new minor: the packages are installed as on
    any first run, and no `kubeadm upgrade node` runs."""
    sb = node(tmp_path, joined=False)
    result = sb.run(KUBE_TOOLS, {"KUBERNETES_MINOR": "1.36", **FAST})
    assert result.returncode == 0, result.stderr
    assert "not joined yet" in result.stderr
    assert not result.called("kubeadm", "upgrade"), result.commands()
    assert {sb.installed(p) for p in KUBE_PACKAGES} == {"1.36.0-1.1"}


def test_a_control_plane_host_is_left_to_its_own_upgrade(tmp_path):
    """install-kube-tools.sh is the control plane's kube-tools step too: there
    upgrade-control-plane.sh, which runs before it, moves the host (kubeadm upgrade apply)."""
    sb = control_plane(tmp_path)
    sb.write("/etc/kubernetes/kubelet.conf", "apiVersion: v1\nkind: Config\n", 0o600)
    result = sb.run(KUBE_TOOLS, {"KUBERNETES_MINOR": "1.35", **FAST})
    assert result.returncode == 0, result.stderr
    assert "a control-plane host: upgrade-control-plane.sh moves it" in result.stderr
    assert not result.called("kubeadm", "upgrade"), result.commands()


def test_a_node_never_moves_past_its_api_server(tmp_path):
    sb = node(tmp_path, api="v1.35.1")  # the control plane was not upgraded
    result = sb.run(KUBE_TOOLS, {"KUBERNETES_MINOR": "1.36", **FAST})
    assert result.returncode != 0
    assert (
        "[kube-tools] FAILED: gpu-cluster:kubernetesVersion is 1.36 but the API server runs "
        "1.35; a kubelet must never be newer than its API server" in result.stderr
    ), result.stderr
    assert not kube_installs(result) and not result.called("kubeadm"), result.commands()
    assert {sb.installed(p) for p in KUBE_PACKAGES} == {"1.35.1-1.1"}


def test_a_node_refuses_a_skipped_minor(tmp_path):
    sb = node(tmp_path, api="v1.37.0")
    result = sb.run(KUBE_TOOLS, {"KUBERNETES_MINOR": "1.37", **FAST})
    assert result.returncode != 0
    assert "gpu-cluster:kubernetesVersion is 1.37 but this node's kubelet runs 1.35" in (
        result.stderr
    )
    assert not kube_installs(result), result.commands()


def test_a_failed_kubeadm_upgrade_node_keeps_the_kubelet_and_a_rerun_finishes(tmp_path):
    sb = node(tmp_path)
    sb.state("kubeadm.fail.upgrade", 1)
    failed = sb.run(KUBE_TOOLS, {"KUBERNETES_MINOR": "1.36", **FAST})
    assert failed.returncode == 1, failed.stderr
    assert (
        "[kube-tools] FAILED: kubeadm upgrade node failed (its output is above); the node stays "
        "drained" in failed.stderr
    ), failed.stderr
    assert sb.installed("kubelet") == "1.35.1-1.1", "the kubelet moved without its config"
    rerun = sb.run(KUBE_TOOLS, {"KUBERNETES_MINOR": "1.36", **FAST})
    assert rerun.returncode == 0, rerun.stderr
    assert {sb.installed(p) for p in KUBE_PACKAGES} == {"1.36.0-1.1"}
    assert sb.state("kubeadm.upgrades").splitlines() == ["node"]


# ---------------------------------------------------------------- failures met in the field


def test_an_answer_without_a_version_stops_before_upgrading(tmp_path):
    """admin.conf's server answers /version with something else (a proxy's page): the running
    minor is unknown, so nothing is installed and the message says where to look."""
    sb = control_plane(tmp_path)
    sb.state("kubectl/version-body", "<html><body>Proxy Authentication Required</body></html>")
    result = sb.run("upgrade-control-plane.sh", {"KUBERNETES_MINOR": "1.36", **FAST})
    assert result.returncode == 1, result.stderr
    assert (
        "[upgrade-control-plane] FAILED: no gitVersion in the API server's /version answer: the "
        "server /etc/kubernetes/admin.conf names is not this cluster's API server" in result.stderr
    ), result.stderr
    assert not result.called("apt-get") and not result.called("kubeadm"), result.commands()


def test_an_api_that_never_comes_back_after_apply_fails_the_upgrade(tmp_path):
    """kubeadm upgrade apply reported success, then the new kube-apiserver crash-loops: the
    control plane must not be reported upgraded (nodes would follow onto a dead API)."""
    sb = control_plane(tmp_path)
    sb.state("kubeadm.apply-api-never-ready", "yes")
    params = {"KUBERNETES_MINOR": "1.36", "API_WAIT_SECONDS": "1", **FAST}
    result = sb.run("upgrade-control-plane.sh", params)
    assert result.called("kubeadm", "upgrade", "apply"), result.commands()
    assert result.returncode == 1, result.stderr
    assert (
        "[upgrade-control-plane] FAILED: API server not ready 1s after kubeadm upgrade apply; "
        "look at 'journalctl -u kubelet' and 'crictl ps -a' on this host" in result.stderr
    ), result.stderr
    assert "control plane upgraded" not in result.stderr


def test_an_api_still_on_the_old_minor_after_apply_fails_the_upgrade(tmp_path):
    sb = control_plane(tmp_path)
    sb.state("kubeadm.apply-keeps-version", "yes")
    result = sb.run("upgrade-control-plane.sh", {"KUBERNETES_MINOR": "1.36", **FAST})
    assert result.returncode == 1, result.stderr
    assert (
        "[upgrade-control-plane] FAILED: API server reports 1.35 after the upgrade, 1.36 "
        "expected: the kubelet did not restart the kube-apiserver static pod" in result.stderr
    ), result.stderr
    assert "control plane upgraded" not in result.stderr


def test_a_kubeadm_binary_of_another_minor_stops_the_upgrade_before_kubeadm_runs(tmp_path):
    """The 1.36 package installed, but the kubeadm on PATH is another one (a binary left in
    /usr/local/bin by a manual install): its plan would upgrade to the wrong version."""
    sb = control_plane(tmp_path)
    sb.state("kubeadm.version", "v1.35.1")
    result = sb.run("upgrade-control-plane.sh", {"KUBERNETES_MINOR": "1.36", **FAST})
    assert result.returncode == 1, result.stderr
    assert sb.installed("kubeadm") == "1.36.0-1.1"
    assert (
        "[upgrade-control-plane] FAILED: kubeadm v1.36.x expected after the install, found "
        "v1.35.1" in result.stderr
    ), result.stderr
    assert not result.called("kubeadm", "upgrade"), result.commands()


def test_a_joined_node_without_a_kubelet_package_is_not_upgraded(tmp_path):
    """kubelet.conf says the node joined, but dpkg knows no kubelet (removed, or a binary
    install): the running minor is unknown, so the step refuses and says what to do."""
    sb = node(tmp_path)
    (sb.state_dir / "dpkg" / "kubelet").unlink()
    result = sb.run(KUBE_TOOLS, {"KUBERNETES_MINOR": "1.36", **FAST})
    assert result.returncode == 1, result.stderr
    assert (
        "[kube-tools] FAILED: joined (/etc/kubernetes/kubelet.conf) but no kubelet package "
        "installed: kubelet was removed or installed without apt" in result.stderr
    ), result.stderr
    assert not kube_installs(result) and not result.called("kubeadm"), result.commands()

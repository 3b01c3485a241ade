"""The existing kubeadm cluster of the end-to-end tests: the session's API server
(tests/helpers/cluster.py) made to look as `kubeadm init` leaves a cluster, and a lab host
(tests/helpers/lab.py) made its control-plane machine.

What kubeadm 1.35's init writes that joining and operating need (cmd/kubeadm/app/phases/...):
- bootstraptoken/clusterinfo `CreateBootstrapConfigMapIfNotExists`: the ConfigMap
  kube-public/cluster-info, a kubeconfig of the cluster's CA and endpoint (no user), which the
  bootstrap signer signs per token; `CreateClusterInfoRBACRules`: system:anonymous may get it;
- bootstraptoken/node `AllowBootstrapTokensToPostCSRs`, `AutoApproveNodeBootstrapTokens`,
  `AutoApproveNodeCertificateRotation`, `AllowBootstrapTokensToGetNodes`: the bindings that let a
  joining node's token file a CSR, have it approved, and read Nodes;
- markcontrolplane: its own Node, labelled node-role.kubernetes.io/control-plane and tainted
  NoSchedule for it (registered here as its kubelet would, tests/helpers/kubelet.py);
- kubeconfig: /etc/kubernetes/admin.conf (cluster "kubernetes", user "kubernetes-admin",
  certificates inline, the control plane's endpoint) and /etc/kubernetes/pki/ca.{crt,key}.
The host's packages are kubeadm's of the minor (the kubeadm stub answers its version from them);
kubectl there is the real one (lab.Lab.install_kubectl).
"""

from __future__ import annotations

import base64
from typing import Any

import yaml

from tests.helpers import kubelet
from tests.helpers.cluster import ApiError, Cluster
from tests.helpers.lab import API_PORT, Host

BOOTSTRAPPERS = "system:bootstrappers:kubeadm:default-node-token"
PACKAGE_VERSION = "1.35.4-1.1"  # pkgs.k8s.io's kubeadm, kubelet and kubectl of v1.35.4
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def admin_conf(cluster: Cluster, server: str) -> str:
    pki = cluster.pki
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "clusters": [
                {
                    "cluster": {
                        "certificate-authority-data": _b64((pki / "ca.crt").read_bytes()),
                        "server": server,
                    },
                    "name": "kubernetes",
                }
            ],
            "contexts": [
                {
                    "context": {"cluster": "kubernetes", "user": "kubernetes-admin"},
                    "name": "kubernetes-admin@kubernetes",
                }
            ],
            "current-context": "kubernetes-admin@kubernetes",
            "kind": "Config",
            "users": [
                {
                    "name": "kubernetes-admin",
                    "user": {
                        "client-certificate-data": _b64((pki / "admin.crt").read_bytes()),
                        "client-key-data": _b64((pki / "admin.key").read_bytes()),
                    },
                }
            ],
        },
        sort_keys=False,
    )


def _apply(api, path: str, body: dict[str, Any]) -> None:
    try:
        api.create(path, body)
    except ApiError as error:
        if error.status != 409:
            raise


def _binding(name: str, role: str, kind: str, subject: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": subject}],
    }


def bootstrap(cluster: Cluster, endpoint: str) -> None:
    """What kubeadm init writes into the cluster for nodes to join at `endpoint`."""
    api = cluster.api()
    info = yaml.safe_dump(
        {
            "apiVersion": "v1",
            "clusters": [
                {
                    "cluster": {
                        "certificate-authority-data": _b64((cluster.pki / "ca.crt").read_bytes()),
                        "server": f"https://{endpoint}",
                    },
                    "name": "",
                }
            ],
            "contexts": None,
            "current-context": "",
            "kind": "Config",
            "preferences": {},
            "users": None,
        }
    )
    _apply(
        api,
        "/api/v1/namespaces/kube-public/configmaps",
        {
            "metadata": {"name": "cluster-info", "namespace": "kube-public"},
            "data": {"kubeconfig": info},
        },
    )
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    _apply(
        api,
        f"{rbac}/namespaces/kube-public/roles",
        {
            "metadata": {
                "name": "kubeadm:bootstrap-signer-clusterinfo",
                "namespace": "kube-public",
            },
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "resourceNames": ["cluster-info"],
                    "verbs": ["get"],
                }
            ],
        },
    )
    _apply(
        api,
        f"{rbac}/namespaces/kube-public/rolebindings",
        {
            "metadata": {
                "name": "kubeadm:bootstrap-signer-clusterinfo",
                "namespace": "kube-public",
            },
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "kubeadm:bootstrap-signer-clusterinfo",
            },
            "subjects": [
                {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "User",
                    "name": "system:anonymous",
                }
            ],
        },
    )
    _apply(
        api,
        f"{rbac}/clusterroles",
        {
            "metadata": {"name": "kubeadm:get-nodes"},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}],
        },
    )
    for name, role, kind, subject in (
        ("kubeadm:kubelet-bootstrap", "system:node-bootstrapper", "Group", BOOTSTRAPPERS),
        (
            "kubeadm:node-autoapprove-bootstrap",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            "Group",
            BOOTSTRAPPERS,
        ),
        (
            "kubeadm:node-autoapprove-certificate-rotation",
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            "Group",
            "system:nodes",
        ),
        ("kubeadm:get-nodes", "kubeadm:get-nodes", "Group", BOOTSTRAPPERS),
    ):
        _apply(api, f"{rbac}/clusterrolebindings", _binding(name, role, kind, subject))


def control_plane_machine(cluster: Cluster, host: Host, node_name: str) -> None:
    """`host` as the cluster's control-plane machine: its files and packages, its Node."""
    endpoint = f"{host.address}:{API_PORT}"
    host.sandbox.write(
        "/etc/kubernetes/admin.conf", admin_conf(cluster, f"https://{endpoint}"), 0o600
    )
    host.sandbox.write("/etc/kubernetes/pki/ca.crt", (cluster.pki / "ca.crt").read_text())
    host.sandbox.write("/etc/kubernetes/pki/ca.key", (cluster.pki / "ca.key").read_text(), 0o600)
    for package in ("kubeadm", "kubelet", "kubectl"):
        host.state(f"dpkg/{package}", PACKAGE_VERSION)
    host.state("systemd/kubelet.active", "yes")
    host.state("cluster.api", "yes")
    host.state("sleep.scale", CLOCK_SCALE)
    kubelet.register_node(
        cluster.api(),
        node_name,
        address=host.address,
        labels={
            CONTROL_PLANE_LABEL: "",
            "node.kubernetes.io/exclude-from-external-load-balancers": "",
        },
        taints=[{"key": CONTROL_PLANE_LABEL, "effect": "NoSchedule"}],
    )


# The sleep stub's clock on the lab's hosts: a script's pause of 5 s between two looks at the API
# takes 1 s (the waits themselves stay real: the cluster answers in its own time).
CLOCK_SCALE = "0.2"


def gpu_server(host: Host, gpus: int) -> Host:
    """`host` as a GPU server on premises: Ubuntu 24.04 with `gpus` GPUs and nouveau loaded,
    whose archives offer what the pinned scripts install (tests/helpers/archive.py, the archive
    the pins were chosen against), in a cluster whose API is real (state cluster.api)."""
    from tests.helpers.archive import Archive, gpu_host

    gpu_host(host.sandbox, "24.04", gpus=gpus)
    Archive.today(host.sandbox)
    host.state("sleep.scale", CLOCK_SCALE)
    host.state("cluster.api", "yes")
    return host

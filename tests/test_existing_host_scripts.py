"""The host scripts on a node of a hosts pool, run for real in the sandbox: an existing server
registers its Node with its own identity (host-<hex>, from its host key: components/
node_machine.py), a host whose Node its join's leave hook deleted (its key changed: a new
machine) registers it again, and wait-ready holds a host to the Ubuntu release its pool names,
without touching its login keys. The leave hook itself, which takes only the Node that identity
registered, is tested in tests/test_node_api.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components.node_machine import host_id, host_provider_id
from tests.sandbox import Sandbox, needs_sandbox

pytestmark = needs_sandbox

NODE = "lab-gpu-hgx-10-8-0-21"
HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIxzbNGrjnR9LfxaeKBAqEKgaXRor8u7EZ2sDGH8iEhq"
NEW_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPJPpzakb+JfukwRkqHWiUt6mOGa+RlS36Y7NfJwNxsD"
HOST_ID = host_id(HOST_KEY)
ADMIN_CONF = "/etc/kubernetes/admin.conf"
JOIN = {
    "NODE_NAME": NODE,
    "API_ENDPOINT": "10.8.0.10:6443",
    "JOIN_TOKEN": "abcdef.0123456789abcdef",
    "CA_CERT_HASH": "sha256:" + "ab" * 32,
    "KUBERNETES_MINOR": "1.35",
    # What the program registers a Node with (node_inputs.join_params): the labels its
    # DaemonSets select on and the pool's taints with the proof taint; the control plane sets
    # the instance-id label once the node is proven.
    "NODE_LABELS": "nvidia.com/gpu.present=true",
    "NODE_TAINTS": "nvidia.com/gpu=true:NoSchedule,gpu-cluster.io/unproven:NoSchedule",
    "PROVIDER_ID": host_provider_id(HOST_ID),
    "EXPECTED_GPUS": "8",
    "READY_TIMEOUT_SECONDS": "0",
    "CAPACITY_TIMEOUT_SECONDS": "0",
    "POLL_SECONDS": "0",
    "RETRY_BASE_SECONDS": "0.01",
}


def test_a_host_id_is_the_digest_of_its_host_keys_blob_as_the_shell_prints_it():
    """`awk '{print $2}' key.pub | base64 -d | sha256sum | cut -c1-20`, as the docs say."""
    import base64
    import hashlib

    blob = base64.b64decode(HOST_KEY.split()[1])
    assert "host-" + hashlib.sha256(blob).hexdigest()[:20] == HOST_ID
    assert host_id(HOST_KEY + " root@gpu01") == HOST_ID, "the comment is no part of the key"
    assert host_id(NEW_KEY) != HOST_ID


@pytest.fixture
def gpu_host(tmp_path: Path) -> Sandbox:
    """An existing GPU server whose kube tools are installed, in a cluster whose API answers;
    its kubelet registers a Ready Node with 8 GPUs."""
    sb = Sandbox(tmp_path)
    sb.state("dpkg/kubeadm", "1.35.1-1.1")
    sb.state("dpkg/kubelet", "1.35.1-1.1")
    sb.state("systemd/kubelet.enabled", "yes")
    sb.state("kubectl/api", "v1.35.1")
    (sb.state_dir / "kubectl" / "nodes").mkdir(parents=True)
    sb.state("kubelet.gpus", "8")
    return sb


def test_an_existing_host_registers_with_its_host_id(gpu_host):
    result = gpu_host.run("join-node.sh", JOIN)
    assert result.returncode == 0, result.output
    node = json.loads(gpu_host.state(f"kubectl/nodes/{NODE}.json"))
    assert node["spec"]["providerID"] == f"gpu-cluster:///{HOST_ID}", node
    # Its identity is the providerID (what the node hooks read, nodes.machine_of); the
    # instance-id label is the control plane's to set once the node is proven (decision 059).
    assert "gpu-cluster.io/instance-id" not in node["metadata"].get("labels", {}), node
    taints = {(t["key"], t["effect"]) for t in node["spec"].get("taints", [])}
    assert ("gpu-cluster.io/unproven", "NoSchedule") in taints, node


@pytest.mark.parametrize(
    "provider_id",
    ["gpu-cluster:///i-0123456789abcdef0", "gpu-cluster://host-0a1b", "onprem:///host-0a1b"],
)
def test_a_provider_id_of_no_known_shape_is_refused_before_joining(gpu_host, provider_id):
    result = gpu_host.run("join-node.sh", {**JOIN, "PROVIDER_ID": provider_id})
    assert result.returncode == 1, result.output
    assert (
        "PROVIDER_ID must be aws:///<zone>/<instance id> or gpu-cluster:///host-<hex>, got "
        f"'{provider_id}'" in result.output
    ), result.output
    assert result.calls == [], result.commands()


def test_a_joined_host_whose_node_a_drain_deleted_registers_it_again(gpu_host):
    """A host whose key changed is a new machine: its old join's leave hook deletes its Node
    before the new join runs (delete_before_replace), on an OS that is still joined. The kubelet
    registers only when it starts, so the join restarts it; without that the Node never comes
    back and the join fails after its wait."""
    assert gpu_host.run("join-node.sh", JOIN).returncode == 0
    (gpu_host.state_dir / "kubectl" / "nodes" / f"{NODE}.json").unlink()  # the leave hook did it
    result = gpu_host.run("join-node.sh", JOIN)
    assert result.returncode == 0, result.output
    assert f"Node {NODE} is gone (deleted by a drain): restarting kubelet" in result.stderr
    assert ["systemctl", "restart", "kubelet"] in result.calls, result.commands()
    assert result.called("kubeadm", "join") == [], "joined again over a working join"
    node = json.loads(gpu_host.state(f"kubectl/nodes/{NODE}.json"))
    assert node["spec"]["providerID"] == f"gpu-cluster:///{HOST_ID}", node


def test_a_joined_host_with_its_node_restarts_nothing(gpu_host):
    assert gpu_host.run("join-node.sh", JOIN).returncode == 0
    result = gpu_host.run("join-node.sh", JOIN)
    assert result.returncode == 0, result.output
    assert result.called("systemctl", "restart") == [], result.commands()
    assert "already joined" in result.stderr

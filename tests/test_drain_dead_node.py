"""drain-node.sh against a Node whose machine is gone (issue 35, finding 4): kubectl drain waits
for every pod it deleted to disappear, and a dead kubelet never confirms one, so the drain would
sit out its whole --timeout and fail `destroy`/`up`. With --skip-wait-for-delete-timeout it stops
waiting for pods whose deletion is older than that (kubectl drain: "If pod
DeletionTimestamp older than N seconds, skip waiting for the pod"), as drain_node_bounded in
lib/common.sh does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.sandbox import Sandbox, needs_sandbox

NODE = "dev-gpu-a10g-0"
ADMIN_CONF = "/etc/kubernetes/admin.conf"


def node_json(ready: str) -> str:
    return json.dumps(
        {"metadata": {"name": NODE}, "status": {"conditions": [{"type": "Ready", "status": ready}]}}
    )


@pytest.fixture
def control_plane(tmp_path: Path) -> Sandbox:
    """A control-plane host with the API answering and the Node of a GPU node registered."""
    sb = Sandbox(tmp_path)
    sb.write(ADMIN_CONF, "apiVersion: v1\nkind: Config\n", 0o600)
    sb.state("kubectl/api", "v1.35.1")
    (sb.state_dir / "kubectl" / "nodes").mkdir(parents=True)
    return sb


def drain_call(result) -> list[str]:
    (drain,) = [call for call in result.calls if call[0] == "kubectl" and "drain" in call]
    return drain


@needs_sandbox
@pytest.mark.parametrize("ready", ["Unknown", "False"])
def test_a_dead_nodes_drain_does_not_wait_for_pods_no_kubelet_will_delete(control_plane, ready):
    control_plane.state(f"kubectl/nodes/{NODE}.json", node_json(ready))
    result = control_plane.run("drain-node.sh", {"NODE_NAME": NODE, "DRAIN_TIMEOUT_SECONDS": "300"})
    assert result.returncode == 0, result.stderr
    drain = drain_call(result)
    assert "--skip-wait-for-delete-timeout=1" in drain, drain
    assert {"--force", "--disable-eviction", "--timeout=300s"} <= set(drain), drain


@needs_sandbox
def test_a_ready_nodes_drain_waits_for_its_pods(control_plane):
    control_plane.state(f"kubectl/nodes/{NODE}.json", node_json("True"))
    result = control_plane.run("drain-node.sh", {"NODE_NAME": NODE})
    assert result.returncode == 0, result.stderr
    drain = drain_call(result)
    assert not any(arg.startswith("--skip-wait-for-delete-timeout") for arg in drain), drain

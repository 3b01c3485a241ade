"""The rolling scripts run for real in the sandbox: a disruptive change takes a pool slot (a Lease
on the control plane), cordons and drains the node, and gives both back once the node is Ready.

The kubectl stub keeps Leases like the API server does: create fails when the Lease exists,
replace fails when the resourceVersion sent is not the stored one, and every write is serialized,
so two runs racing for one slot meet what they would meet on a real control plane.
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.sandbox import Sandbox, needs_sandbox

pytestmark = needs_sandbox

POOL = "a10g"
NODE_A, NODE_B = "dev-gpu-a10g-0", "dev-gpu-a10g-1"
SLOT_0 = "gpu-cluster-slot-a10g-0"


def drain_params(node: str, max_unavailable: int = 1, wait: int = 120) -> dict[str, str]:
    return {
        "NODE_NAME": node,
        "POOL_NAME": POOL,
        "MAX_UNAVAILABLE": str(max_unavailable),
        "SLOT_SECONDS": "3600",
        "SLOT_WAIT_SECONDS": str(wait),
        "DRAIN_TIMEOUT_SECONDS": "60",
        "CHANGE": "driver:580->575",
        "SLOT_POLL_SECONDS": "0.2",
    }


def uncordon_params(node: str, max_unavailable: int = 1) -> dict[str, str]:
    return {
        "NODE_NAME": node,
        "POOL_NAME": POOL,
        "MAX_UNAVAILABLE": str(max_unavailable),
        "READY_TIMEOUT_SECONDS": "30",
        "CHANGE": "driver:580->575",
        # No kubelet serving certificate request to wait for here (tests/test_uncordon_script.py
        # has them).
        "CSR_WAIT_SECONDS": "0",
        "SERVING_NAMES": f"DNS:{node}\nIP Address:10.42.9.9",
    }


def node_json(name: str, ready: str = "True") -> str:
    return json.dumps(
        {
            "metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": ready}]},
        }
    )


def control_plane(root: Path, state: Path | None = None) -> Sandbox:
    """A control-plane host with an admin kubeconfig and a running API (v1.35.1)."""
    sb = Sandbox(root, state_dir=state)
    sb.write("/etc/kubernetes/admin.conf", "apiVersion: v1\nkind: Config\n", 0o600)
    sb.state("kubectl/api", "v1.35.1")
    return sb


def join(sb: Sandbox, *nodes: str, ready: str = "True") -> None:
    for node in nodes:
        sb.state(f"kubectl/nodes/{node}.json", node_json(node, ready))


def lease(sb: Sandbox, name: str = SLOT_0) -> dict | None:
    text = sb.state(f"kubectl/leases/kube-system/{name}.json")
    return json.loads(text) if text else None


def holders(sb: Sandbox) -> list[tuple[str, str]]:
    """Every write of a slot Lease, in order: (lease, holder)."""
    lines = (sb.state("kubectl/lease-history") or "").splitlines()
    return [tuple(line.split("\t")) for line in lines]  # type: ignore[misc]


def cordoned(sb: Sandbox, node: str) -> bool:
    return bool(
        json.loads(sb.state(f"kubectl/nodes/{node}.json")).get("spec", {}).get("unschedulable")
    )


def seed_lease(sb: Sandbox, holder: str, renewed: datetime, duration: int, name: str = SLOT_0):
    stamp = renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    sb.state(
        f"kubectl/leases/kube-system/{name}.json",
        json.dumps(
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "namespace": "kube-system", "resourceVersion": "7"},
                "spec": {
                    "holderIdentity": holder,
                    "leaseDurationSeconds": duration,
                    "acquireTime": stamp,
                    "renewTime": stamp,
                },
            }
        ),
    )


# ---------------------------------------------------------------- a node not joined yet


def test_a_host_without_a_cluster_yet_needs_no_slot(tmp_path):
    sb = Sandbox(tmp_path)  # first `up`: kubeadm init has not run on the control plane
    result = sb.run("roll-drain.sh", drain_params(NODE_A))
    assert result.returncode == 0, result.stderr
    assert "nothing to drain" in result.stderr
    assert result.called("kubectl") == [], result.commands()


def test_a_node_not_joined_yet_is_not_drained_and_takes_no_slot(tmp_path):
    sb = control_plane(tmp_path)
    join(sb, NODE_B)  # another node exists; this one has not joined
    result = sb.run("roll-drain.sh", drain_params(NODE_A))
    assert result.returncode == 0, result.stderr
    assert "not joined yet" in result.stderr
    assert lease(sb) is None, "a slot was taken for a node that is not in the cluster"
    for verb in ("create", "replace", "cordon", "drain"):
        assert result.called("kubectl", verb) == [], result.commands()


# ---------------------------------------------------------------- one node


def test_drain_takes_a_slot_then_cordons_then_drains_through_eviction(tmp_path):
    sb = control_plane(tmp_path)
    join(sb, NODE_A)
    result = sb.run("roll-drain.sh", drain_params(NODE_A))
    assert result.returncode == 0, result.stderr
    held = lease(sb)
    assert held and held["spec"]["holderIdentity"] == NODE_A, held
    assert held["spec"]["leaseDurationSeconds"] == 3600, held
    assert cordoned(sb, NODE_A)
    verbs = [next(a for a in c[1:] if not a.startswith("-")) for c in result.called("kubectl")]
    assert verbs.index("create") < verbs.index("cordon") < verbs.index("drain"), verbs
    (drain,) = [c for c in result.called("kubectl") if "drain" in c]
    assert "--force" not in drain and "--disable-eviction" not in drain, drain
    assert "--ignore-daemonsets" in drain and "--timeout=60s" in drain, drain


def test_a_rerun_keeps_its_own_slot_instead_of_taking_a_second(tmp_path):
    sb = control_plane(tmp_path)
    join(sb, NODE_A)
    assert sb.run("roll-drain.sh", drain_params(NODE_A, max_unavailable=2)).returncode == 0
    again = sb.run("roll-drain.sh", drain_params(NODE_A, max_unavailable=2))
    assert again.returncode == 0, again.stderr
    assert "already held by" in again.stderr
    assert lease(sb, "gpu-cluster-slot-a10g-1") is None, "a re-run took a second slot"


def test_uncordon_puts_the_node_back_and_releases_the_slot(tmp_path):
    sb = control_plane(tmp_path)
    join(sb, NODE_A)
    assert sb.run("roll-drain.sh", drain_params(NODE_A)).returncode == 0
    result = sb.run("roll-uncordon.sh", uncordon_params(NODE_A))
    assert result.returncode == 0, result.stderr
    assert not cordoned(sb, NODE_A)
    assert lease(sb)["spec"]["holderIdentity"] == "", lease(sb)
    assert holders(sb) == [(SLOT_0, NODE_A), (SLOT_0, "")]


def test_uncordon_on_a_first_up_changes_no_slot(tmp_path):
    sb = control_plane(tmp_path)
    join(sb, NODE_A)
    result = sb.run("roll-uncordon.sh", uncordon_params(NODE_A))
    assert result.returncode == 0, result.stderr
    assert "holds no slot" in result.stderr
    assert holders(sb) == []


def test_a_not_ready_node_is_drained_without_eviction(tmp_path):
    sb = control_plane(tmp_path)
    join(sb, NODE_A, ready="Unknown")  # kubelet gone: its pods can never stop gracefully
    result = sb.run("roll-drain.sh", drain_params(NODE_A))
    assert result.returncode == 0, result.stderr
    (drain,) = [c for c in result.called("kubectl") if "drain" in c]
    assert "--force" in drain and "--disable-eviction" in drain, drain


def test_a_drain_that_times_out_names_the_pods_that_block_it(tmp_path):
    sb = control_plane(tmp_path)
    join(sb, NODE_A)
    sb.state("kubectl.fail.drain", 1)  # a PodDisruptionBudget allows no eviction
    sb.state(
        f"kubectl/pods/spec.nodeName={NODE_A}",
        "ml train-0 StatefulSet\n"
        "kube-flannel kube-flannel-ds-x DaemonSet\n"
        "ml notebook-7 ReplicaSet\n",
    )
    result = sb.run("roll-drain.sh", drain_params(NODE_A))
    assert result.returncode != 0
    assert "[roll-drain] FAILED: drain of dev-gpu-a10g-0 did not finish in 60s" in result.stderr
    assert "pods still on it: ml/train-0 ml/notebook-7." in result.stderr, result.stderr
    assert "kube-flannel-ds-x" not in result.stderr.split("FAILED")[1], "DaemonSet pods stay"
    assert "kubectl get pdb -A" in result.stderr


# ---------------------------------------------------------------- slots shared by nodes


def _run_in_thread(sb: Sandbox, script: str, params: dict[str, str]):
    box: dict = {}
    thread = threading.Thread(target=lambda: box.update(result=sb.run(script, params, 120)))
    thread.start()
    return thread, box


def test_two_concurrent_changes_with_max_unavailable_1_never_hold_the_slot_at_once(tmp_path):
    state = tmp_path / "api"
    state.mkdir()
    hosts = {
        NODE_A: control_plane(tmp_path / "run-a", state),
        NODE_B: control_plane(tmp_path / "run-b", state),
    }
    join(hosts[NODE_A], NODE_A, NODE_B)
    runs = {
        node: _run_in_thread(sb, "roll-drain.sh", drain_params(node)) for node, sb in hosts.items()
    }
    # Exactly one wins the slot; the other keeps waiting for it (it cannot finish before the
    # winner gives the slot back, whatever the timing).
    while all(thread.is_alive() for thread, _ in runs.values()):
        threading.Event().wait(0.05)
    (winner,) = [node for node, (thread, _) in runs.items() if not thread.is_alive()]
    (loser,) = [node for node in runs if node != winner]
    assert runs[winner][1]["result"].returncode == 0, runs[winner][1]["result"].stderr
    assert lease(hosts[winner])["spec"]["holderIdentity"] == winner
    assert runs[loser][0].is_alive(), runs[loser][1]
    assert not cordoned(hosts[winner], loser)

    # The change on the winner is done: it gives the slot back, and only then the other goes.
    done = hosts[winner].run("roll-uncordon.sh", uncordon_params(winner))
    assert done.returncode == 0, done.stderr
    runs[loser][0].join(120)
    assert runs[loser][1]["result"].returncode == 0, runs[loser][1]["result"].stderr
    assert hosts[loser].run("roll-uncordon.sh", uncordon_params(loser)).returncode == 0

    assert holders(hosts[winner]) == [(SLOT_0, winner), (SLOT_0, ""), (SLOT_0, loser), (SLOT_0, "")]
    assert hosts[winner].state("kubectl/cordoned-max") == "1"
    history = hosts[winner].state("kubectl/cordon-history").split("\n")
    assert history[:4] == [
        f"cordon {winner}",
        f"uncordon {winner}",
        f"cordon {loser}",
        f"uncordon {loser}",
    ]


def test_max_unavailable_2_lets_two_nodes_change_at_once(tmp_path):
    state = tmp_path / "api"
    state.mkdir()
    a = control_plane(tmp_path / "run-a", state)
    b = control_plane(tmp_path / "run-b", state)
    join(a, NODE_A, NODE_B)
    runs = [
        _run_in_thread(a, "roll-drain.sh", drain_params(NODE_A, max_unavailable=2)),
        _run_in_thread(b, "roll-drain.sh", drain_params(NODE_B, max_unavailable=2)),
    ]
    for thread, box in runs:
        thread.join(120)
        assert box["result"].returncode == 0, box["result"].stderr
    slots = {lease(a, f"gpu-cluster-slot-a10g-{i}")["spec"]["holderIdentity"] for i in (0, 1)}
    assert slots == {NODE_A, NODE_B}
    assert a.state("kubectl/cordoned-max") == "2"


def test_an_expired_slot_is_taken_over(tmp_path):
    sb = control_plane(tmp_path)
    join(sb, NODE_A)
    crashed = datetime.now(UTC) - timedelta(hours=2)
    seed_lease(sb, "dev-gpu-a10g-9", crashed, duration=3600)  # its run died an hour ago
    result = sb.run("roll-drain.sh", drain_params(NODE_A, wait=0))
    assert result.returncode == 0, result.stderr
    assert "dev-gpu-a10g-9's hold expired" in result.stderr
    taken = lease(sb)
    assert taken["spec"]["holderIdentity"] == NODE_A
    assert taken["metadata"]["resourceVersion"] != "7"
    assert cordoned(sb, NODE_A)


def test_a_live_slot_is_not_taken_and_the_wait_is_bounded(tmp_path):
    sb = control_plane(tmp_path)
    join(sb, NODE_A)
    seed_lease(sb, "dev-gpu-a10g-9", datetime.now(UTC), duration=3600)
    result = sb.run("roll-drain.sh", drain_params(NODE_A, wait=1))
    assert result.returncode != 0
    assert (
        "no free slot for dev-gpu-a10g-0 in pool a10g after 1s (maxUnavailable 1)" in result.stderr
    )
    assert "held by: dev-gpu-a10g-9 (slot 0" in result.stderr
    assert lease(sb)["spec"]["holderIdentity"] == "dev-gpu-a10g-9"
    assert not cordoned(sb, NODE_A)


@pytest.mark.parametrize("seeded", [False, True], ids=["create-race", "replace-race"])
def test_a_write_that_lost_a_race_does_not_take_the_slot(tmp_path, seeded):
    """Between this run's read and its write another client takes the slot: the create meets
    AlreadyExists, the replace (of a free slot) a Conflict on its resourceVersion. The run must
    not hold the slot, and waits for it instead (here: gives up after 0s)."""
    sb = control_plane(tmp_path)
    join(sb, NODE_A)
    if seeded:
        seed_lease(sb, "", datetime.now(UTC), duration=1)  # released
    sb.state(f"kubectl/lease-race/{SLOT_0}", "dev-gpu-a10g-5")
    result = sb.run("roll-drain.sh", drain_params(NODE_A, wait=0))
    assert result.returncode != 0
    assert "another run wrote it first" in result.stderr
    assert "held by: dev-gpu-a10g-5 (slot 0" in result.stderr, result.stderr
    assert lease(sb)["spec"]["holderIdentity"] == "dev-gpu-a10g-5"
    assert (SLOT_0, NODE_A) not in holders(sb)
    assert not cordoned(sb, NODE_A)


def test_release_leaves_a_slot_another_node_took_over(tmp_path):
    sb = control_plane(tmp_path)
    join(sb, NODE_A)
    seed_lease(sb, NODE_B, datetime.now(UTC), duration=3600)
    result = sb.run("roll-uncordon.sh", uncordon_params(NODE_A))
    assert result.returncode == 0, result.stderr
    assert lease(sb)["spec"]["holderIdentity"] == NODE_B


def test_an_api_that_does_not_answer_is_not_taken_for_a_node_not_joined(tmp_path):
    sb = control_plane(tmp_path)
    join(sb, NODE_A)
    sb.state("kubectl/api-down", "yes")  # kubeadm init still starting, or an upgrade restarting it
    result = sb.run("roll-drain.sh", {**drain_params(NODE_A), "API_WAIT_SECONDS": "1"})
    assert result.returncode != 0
    assert "did not answer /readyz within 1s; cannot tell whether dev-gpu-a10g-0 has joined" in (
        result.stderr
    ), result.stderr


def test_a_node_that_completed_this_change_is_not_drained_again(tmp_path):
    """Other inputs of the drain step (slot bounds that follow the pool size) may change without
    any change for the host: the Node's record of the last completed change decides."""
    sb = control_plane(tmp_path)
    join(sb, NODE_A)
    assert sb.run("roll-drain.sh", drain_params(NODE_A)).returncode == 0
    assert sb.run("roll-uncordon.sh", uncordon_params(NODE_A)).returncode == 0
    node = json.loads(sb.state(f"kubectl/nodes/{NODE_A}.json"))
    assert node["metadata"]["annotations"] == {
        "gpu-cluster.io/node-change": "driver:580->575",
        # The pool's labels and taints this step reconciled (none here).
        "gpu-cluster.io/managed-labels": "",
        "gpu-cluster.io/managed-taints": "",
    }
    again = sb.run("roll-drain.sh", {**drain_params(NODE_A), "SLOT_WAIT_SECONDS": "7200"})
    assert again.returncode == 0, again.stderr
    assert "already has change driver:580->575: nothing to drain" in again.stderr
    assert not again.called(
        "kubectl", "--kubeconfig=/etc/kubernetes/admin.conf", "--request-timeout=30s", "cordon"
    )
    assert holders(sb) == [(SLOT_0, NODE_A), (SLOT_0, "")], "a slot was taken for nothing"
    assert not cordoned(sb, NODE_A)


def test_uncordon_leaves_a_node_an_operator_cordoned(tmp_path):
    sb = control_plane(tmp_path)
    join(sb, NODE_A)
    node = json.loads(node_json(NODE_A))
    node["spec"] = {"unschedulable": True}  # kubectl cordon by hand, for maintenance
    sb.state(f"kubectl/nodes/{NODE_A}.json", json.dumps(node))
    result = sb.run("roll-uncordon.sh", uncordon_params(NODE_A))
    assert result.returncode == 0, result.stderr
    assert "not cordoned by a roll" in result.stderr
    assert cordoned(sb, NODE_A)


# ---------------------------------------------------------------- failures met in the field


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("SLOT_SECONDS", "1h", "SLOT_SECONDS must be a whole number, got '1h'"),
        ("DRAIN_TIMEOUT_SECONDS", "-5", "DRAIN_TIMEOUT_SECONDS must be a whole number, got '-5'"),
        ("POOL_NAME", "A10G_pool", "POOL_NAME must be a lowercase DNS label, got 'A10G_pool'"),
    ],
)
def test_drain_refuses_malformed_inputs_before_touching_the_cluster(tmp_path, name, value, message):
    """A slot name or a bound the API server or `kubectl drain --timeout` would reject halfway
    (after the cordon) is refused before any call."""
    sb = control_plane(tmp_path)
    join(sb, NODE_A)
    result = sb.run("roll-drain.sh", {**drain_params(NODE_A), name: value})
    assert result.returncode == 1, result.stderr
    assert f"FAILED: {message}" in result.stderr, result.stderr
    assert result.calls == [], result.commands()


def test_a_slot_the_api_refuses_to_write_fails_the_drain_naming_the_lease(tmp_path):
    """The Lease write is refused for another reason than a lost race (RBAC, an admission
    webhook): the node must not be cordoned without a slot, and the error is shown."""
    sb = control_plane(tmp_path)
    join(sb, NODE_A)
    sb.state("kubectl/leases-forbidden", "yes")
    result = sb.run("roll-drain.sh", drain_params(NODE_A))
    assert result.returncode == 1, result.stderr
    assert (
        "FAILED: the API server refused to create the slot Lease "
        f"kube-system/{SLOT_0} (not a lost race): Error from server (Forbidden)" in result.stderr
    ), result.stderr
    assert not cordoned(sb, NODE_A)
    assert not result.called("kubectl", "drain"), result.commands()


def test_uncordon_on_a_host_that_is_not_the_control_plane_fails_before_acting(tmp_path):
    sb = Sandbox(tmp_path)  # no admin.conf: a node's host, not the control plane
    result = sb.run("roll-uncordon.sh", uncordon_params(NODE_A))
    assert result.returncode == 1, result.stderr
    assert (
        "FAILED: cannot read /etc/kubernetes/admin.conf: this step runs on a kubeadm "
        "control-plane node" in result.stderr
    ), result.stderr
    assert result.calls == [], result.commands()


def test_uncordon_of_a_node_that_left_the_cluster_fails_and_keeps_the_slot(tmp_path):
    """The Node object was deleted after the drain (instance replaced, `kubectl delete node`):
    nothing can be put back; the slot stays held until it expires, for an operator to see."""
    sb = control_plane(tmp_path)
    join(sb, NODE_A)
    assert sb.run("roll-drain.sh", drain_params(NODE_A)).returncode == 0
    (sb.state_dir / "kubectl" / "nodes" / f"{NODE_A}.json").unlink()
    result = sb.run("roll-uncordon.sh", uncordon_params(NODE_A))
    assert result.returncode == 1, result.stderr
    assert (
        f"FAILED: Node {NODE_A} is not registered; it must have joined before it is put back"
        in result.stderr
    ), result.stderr
    assert lease(sb)["spec"]["holderIdentity"] == NODE_A


def test_a_node_that_does_not_come_back_ready_stays_cordoned_and_keeps_its_slot(tmp_path):
    """After the driver change the kubelet never reports Ready (a module that does not load):
    the node is not put back into scheduling and the pool's slot stays taken, so the roll
    stops at this node instead of taking down the next one."""
    sb = control_plane(tmp_path)
    join(sb, NODE_A)
    assert sb.run("roll-drain.sh", drain_params(NODE_A)).returncode == 0
    node = json.loads(sb.state(f"kubectl/nodes/{NODE_A}.json"))
    node["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    sb.state(f"kubectl/nodes/{NODE_A}.json", json.dumps(node))
    result = sb.run("roll-uncordon.sh", uncordon_params(NODE_A))
    assert result.returncode == 1, result.stderr
    assert (
        f"FAILED: Node {NODE_A} not Ready after 30s; it stays cordoned. Look at "
        "'journalctl -u kubelet' on the node" in result.stderr
    ), result.stderr
    assert cordoned(sb, NODE_A)
    assert lease(sb)["spec"]["holderIdentity"] == NODE_A

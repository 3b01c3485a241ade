"""The Kubernetes side of a node, through the API (components/kube/api/, node_hooks.py): run
for real, over HTTPS with a client certificate, against a fake API server whose answers cite
kube-apiserver's source (tests/helpers/fake_kube_api.py). The hooks' callbacks are called as the
engine calls them (pulumi's mock monitor records hook bindings but never calls a hook), with the
inputs the program registered."""

from __future__ import annotations

import datetime
import json

import pulumi
import pytest
import yaml

from components.kube import node_hooks
from components.kube.api import drain, nodes, slots
from components.kube.api.client import ApiError, KubeApi, KubeconfigError, credential_of
from components.kube.node_hooks import ClusterAccess
from components.labels import UNPROVEN_TAINT_KEY
from tests.helpers.fake_kube_api import FakeApiServer, make_pki, run_async

MACHINE = "i-0a1b2c3d4e5f60718"
OTHER = "i-0ffffffffffffffff"
NODE = "dev-gpu-a10g-0"
UNPROVEN = {"key": UNPROVEN_TAINT_KEY, "effect": "NoSchedule"}
GPU = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}


class FakeClock(nodes.Clock):
    """A clock whose sleeps pass at once and move it on: a bounded wait of hours in no time."""

    def __init__(self):
        self.seconds = 0.0
        self.start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
        object.__setattr__(self, "now", lambda: self.seconds)
        object.__setattr__(
            self, "utc", lambda: self.start + datetime.timedelta(seconds=self.seconds)
        )

        async def sleep(seconds: float) -> None:
            self.seconds += seconds

        object.__setattr__(self, "sleep", sleep)


@pytest.fixture
def api():
    with FakeApiServer() as server:
        yield server


def said() -> tuple[list[str], nodes.Say]:
    lines: list[str] = []
    return lines, lines.append


def run(coroutine):
    return run_async(coroutine)


def access(server: FakeApiServer, **kw) -> ClusterAccess:
    return ClusterAccess(kubeconfig=server.kubeconfig(), clock=FakeClock(), **kw)


def hook_args(name: str, *, new=None, old=None) -> pulumi.ResourceHookArgs:
    return pulumi.ResourceHookArgs(
        urn=f"urn:pulumi:dev::gpu-cluster::x::{name}",
        id="id",
        name=name,
        type="command:remote:Command",
        new_inputs=new,
        old_inputs=old,
    )


# ---------------------------------------------------------------- the client and its credential


def test_a_kubeconfig_it_cannot_honour_is_refused_naming_the_field_never_the_value(api):
    config = yaml.safe_load(api.kubeconfig())
    config["users"][0]["user"] = {"exec": {"command": "aws", "args": ["eks", "get-token"]}}
    with pytest.raises(KubeconfigError, match="'exec' is not supported") as error:
        credential_of(json.dumps(config))
    assert "get-token" not in str(error.value)
    credential = credential_of(api.kubeconfig())
    assert "BEGIN" not in repr(credential), "the key must never be printed"


def test_calls_present_the_client_certificate_the_server_requires(api):
    client = KubeApi(credential_of(api.kubeconfig()))
    assert client.call("GET", "/readyz") == {}
    api.cluster.add_node(NODE, machine=MACHINE)
    assert client.call("GET", f"/api/v1/nodes/{NODE}")["metadata"]["name"] == NODE
    # The same server takes a caller without a certificate of its CA as whoever its token
    # proves: an unknown token is 401 Unauthorized, on every path.
    config = yaml.safe_load(api.kubeconfig())
    config["users"][0]["user"] = {"token": "not-a-certificate"}
    without = KubeApi(credential_of(json.dumps(config)))
    for path in ("/readyz", f"/api/v1/nodes/{NODE}"):
        with pytest.raises(ApiError) as refused:
            without.call("GET", path)
        assert (refused.value.code, refused.value.reason) == (401, "Unauthorized"), path
    # Another cluster's kubeconfig: this server's certificate is not of its CA, so the
    # handshake fails, naming neither key.
    other = KubeApi(credential_of(api.kubeconfig(pki=make_pki("another-cluster"))))
    with pytest.raises(ApiError, match="TLS failed") as failed:
        other.call("GET", "/readyz")
    assert failed.value.code == 0 and "BEGIN" not in str(failed.value)


def test_transient_answers_are_tried_again_and_an_evictions_429_is_not(api):
    """A 503 (an API server starting, apimachinery NewServiceUnavailable) is tried again, 1 s,
    2 s then 4 s later; an eviction's 429 is the disruption budget's verdict, answered at once
    for the drain to judge."""
    api.cluster.add_node(NODE, machine=MACHINE)
    api.cluster.add_pod("ml", "db-0", NODE)
    api.cluster.budgets["ml/db-0"] = ("db", 1, 1)
    pauses: list[float] = []
    client = KubeApi(credential_of(api.kubeconfig()), pause=pauses.append)
    eviction = "/api/v1/namespaces/ml/pods/db-0/eviction"
    answer = client.request("POST", eviction, {"apiVersion": "policy/v1", "kind": "Eviction"})
    assert answer.status == 429 and pauses == [], answer
    api.cluster.unavailable = 2
    assert client.call("GET", f"/api/v1/nodes/{NODE}")["metadata"]["name"] == NODE
    assert pauses == [1, 2], pauses
    api.cluster.unavailable = 10
    with pytest.raises(ApiError) as refused:
        client.call("GET", f"/api/v1/nodes/{NODE}")
    assert refused.value.code == 503 and pauses == [1, 2, 1, 2, 4], pauses


# ---------------------------------------------------------------- one owner of Node taints


def test_in_service_lifts_the_proof_taint_and_sets_the_control_planes_labels(api):
    api.cluster.add_node(NODE, machine=MACHINE, spec={"taints": [GPU, UNPROVEN]})
    inputs = node_hooks.InServiceInputs.of(
        {
            "NODE_NAME": NODE,
            "INSTANCE_ID": MACHINE,
            "NODE_LABELS": f"gpu-cluster.io/instance-id={MACHINE},gpu-cluster.io/pool=a10g,team=ml",
            "NODE_TAINTS": "nvidia.com/gpu=true:NoSchedule",
            "CHANGE": "c1",
            "POOL_NAME": "a10g",
            "MAX_UNAVAILABLE": "1",
            "READY_TIMEOUT_SECONDS": "600",
        }
    )
    _said, say = said()
    api_ = run(access(api).api())
    run(node_hooks.put_in_service(api_, inputs, FakeClock(), say))
    node = api.cluster.nodes[NODE]
    assert node["spec"]["taints"] == [GPU], node["spec"]
    assert node["metadata"]["labels"] == {
        # The kubelet's own labels stay.
        "kubernetes.io/hostname": NODE,
        "kubernetes.io/os": "linux",
        "gpu-cluster.io/instance-id": MACHINE,
        "gpu-cluster.io/pool": "a10g",
        "team": "ml",
    }
    assert node["metadata"]["annotations"][nodes.CHANGE_ANNOTATION] == "c1"
    # Written with a PUT of the whole Node (spec.taints is an atomic list), never a patch.
    writes = [r for r in api.cluster.requests if r[0] != "GET"]
    assert writes == [("PUT", f"/api/v1/nodes/{NODE}"), *writes[1:]], writes
    assert not [r for r in writes if r[0] == "PATCH"], writes


def test_a_write_that_meets_a_newer_node_is_made_again_and_keeps_the_other_writers_taint(api):
    """The node lifecycle controller taints a Node between the program's read and write: the
    stale write is refused (409), and the edit made again on a fresh read keeps that taint."""
    api.cluster.add_node(NODE, machine=MACHINE, spec={"taints": [UNPROVEN]})
    not_ready = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}

    def controller(method: str, path: str) -> None:
        node = api.cluster.nodes[NODE]
        node["spec"]["taints"] = [*node["spec"]["taints"], not_ready]
        api.cluster.stamp(node)

    api.cluster.race = controller
    wanted = nodes.InService(labels="", taints="", change="c")
    api_ = run(access(api).api())
    run(nodes.update_node(api_, NODE, lambda n: nodes.put_in_service(n, wanted)))
    assert api.cluster.nodes[NODE]["spec"]["taints"] == [not_ready]
    puts = [r for r in api.cluster.requests if r[0] == "PUT"]
    assert len(puts) == 2, f"the first PUT met the newer Node (409), the second won: {puts}"


def test_labels_and_taints_it_set_before_and_no_longer_wants_go_and_nobody_elses(api):
    node = {
        "metadata": {
            "labels": {"team": "ml", "gpu-cluster.io/pool": "a10g", "ops/keep": "yes"},
            "annotations": {
                nodes.LABELS_ANNOTATION: "gpu-cluster.io/pool=a10g,team=ml",
                nodes.TAINTS_ANNOTATION: "old=x:NoSchedule",
                nodes.ROLL_CORDON_ANNOTATION: "c0",
            },
        },
        "spec": {
            "unschedulable": True,
            "taints": [
                {"key": "old", "value": "x", "effect": "NoSchedule"},
                {"key": "ops", "effect": "NoExecute"},
            ],
        },
    }
    nodes.put_in_service(node, nodes.InService("gpu-cluster.io/pool=a10g", "", "c1"))
    assert node["metadata"]["labels"] == {"gpu-cluster.io/pool": "a10g", "ops/keep": "yes"}
    assert node["spec"] == {"taints": [{"key": "ops", "effect": "NoExecute"}]}
    assert nodes.ROLL_CORDON_ANNOTATION not in node["metadata"]["annotations"]


def test_an_operators_cordon_stays(api):
    node = {"metadata": {}, "spec": {"unschedulable": True}}
    nodes.put_in_service(node, nodes.InService("", "", "c1"))
    assert node["spec"]["unschedulable"] is True


# ---------------------------------------------------------------- a node leaves


def test_a_leaving_node_is_drained_through_evictions_then_deleted(api):
    api.cluster.add_node(NODE, machine=MACHINE)
    api.cluster.add_pod("ml", "train-0", NODE)
    api.cluster.add_pod("kube-system", "plugin-x", NODE, owner="DaemonSet")
    args = hook_args(f"{NODE}-join", old={"triggers": [MACHINE, "10.0.0.1:6443", "sha256:x"]})
    run(node_hooks.on_join_delete(access(api), args))
    assert NODE not in api.cluster.nodes
    assert ("POST", "/api/v1/namespaces/ml/pods/train-0/eviction") in api.cluster.requests
    assert ("kube-system", "plugin-x") in api.cluster.pods, "DaemonSet pods stay"


def test_a_budget_that_allows_no_eviction_fails_the_delete_naming_pod_and_budget(api):
    api.cluster.add_node(NODE, machine=MACHINE)
    api.cluster.add_pod("ml", "db-0", NODE, owner="StatefulSet")
    api.cluster.budgets["ml/db-0"] = ("db", 1, 1)
    _said, say = said()
    with pytest.raises(drain.DrainFailed) as error:
        run(node_hooks.leave(run(access(api).api()), NODE, MACHINE, FakeClock(), say))
    message = str(error.value)
    assert "ml/db-0" in message and "The disruption budget db needs 1 healthy pods" in message
    assert NODE in api.cluster.nodes, "a Node whose drain failed is not deleted"


def test_a_dead_nodes_pods_are_deleted_without_eviction(api):
    api.cluster.add_node(NODE, machine=MACHINE, ready=False)
    api.cluster.add_pod("ml", "bare", NODE, owner=None)
    api.cluster.budgets["ml/bare"] = ("b", 1, 1)
    _said, say = said()
    run(node_hooks.leave(run(access(api).api()), NODE, MACHINE, FakeClock(), say))
    assert not api.cluster.pods and NODE not in api.cluster.nodes
    assert not [r for r in api.cluster.requests if r[1].endswith("/eviction")]


def test_the_node_another_machine_registered_is_left_alone(api):
    api.cluster.add_node(NODE, machine=OTHER)
    args = hook_args(f"{NODE}-join", old={"triggers": [MACHINE, "e", "h"]})
    run(node_hooks.on_join_delete(access(api), args))
    assert NODE in api.cluster.nodes
    assert not [r for r in api.cluster.requests if r[0] != "GET"]


def test_an_unreachable_control_plane_is_not_dialled_on_delete(api):
    api.cluster.add_node(NODE, machine=MACHINE)
    args = hook_args(f"{NODE}-join", old={"triggers": [MACHINE, "e", "h"]})
    run(node_hooks.on_join_delete(access(api, unreachable=True), args))
    assert api.cluster.requests == [] and NODE in api.cluster.nodes


# ---------------------------------------------------------------- which machine a Node is


@pytest.mark.parametrize(
    ("label", "provider", "mine"),
    [
        (MACHINE, f"aws:///us-west-2a/{MACHINE}", True),
        (MACHINE, None, True),  # registered by a release that set the label only
        (None, f"aws:///us-west-2a/{MACHINE}", True),
        (None, None, True),  # registered before nodes carried an identity: taken by its name
        (OTHER, f"aws:///us-west-2a/{OTHER}", False),
        (OTHER, None, False),
        (None, f"aws:///us-west-2a/{OTHER}", False),
    ],
    ids=["both", "label", "provider-id", "neither", "other-both", "other-label", "other-id"],
)
def test_a_node_is_its_machines_by_provider_id_or_label(label, provider, mine):
    """One rule for the join token's mint and every node hook (nodes.registered_by)."""
    node = {"metadata": {"labels": {}}, "spec": {}}
    if label:
        node["metadata"]["labels"]["gpu-cluster.io/instance-id"] = label
    if provider:
        node["spec"]["providerID"] = provider
    assert nodes.registered_by(node, MACHINE) is mine


# An existing host's identity is its host key's (components/node_machine.py), which its kubelet
# registers as its provider id, gpu-cluster:///host-<hex>.
HOST = "host-0123456789abcdef0123"
NEW_KEY_HOST = "host-fedcba9876543210fedc"


def test_an_existing_hosts_leave_drains_and_deletes_the_node_its_key_registered(api):
    api.cluster.add_node(NODE, machine=HOST)
    assert api.cluster.nodes[NODE]["spec"]["providerID"] == f"gpu-cluster:///{HOST}"
    api.cluster.add_pod("ml", "train-0", NODE)
    args = hook_args(f"{NODE}-join", old={"triggers": [HOST, "e", "h"]})
    run(node_hooks.on_join_delete(access(api), args))
    assert NODE not in api.cluster.nodes and not api.cluster.pods
    assert ("POST", "/api/v1/namespaces/ml/pods/train-0/eviction") in api.cluster.requests


def test_an_existing_hosts_leave_leaves_the_node_a_new_key_registered(api):
    """The host came back with a new key (re-installed) and joined as the new machine before
    the old join's leave ran: that Node is not the old machine's to drain."""
    api.cluster.add_node(NODE, machine=NEW_KEY_HOST)
    args = hook_args(f"{NODE}-join", old={"triggers": [HOST, "e", "h"]})
    run(node_hooks.on_join_delete(access(api), args))
    assert NODE in api.cluster.nodes
    assert not [r for r in api.cluster.requests if r[0] != "GET"]


def test_a_hook_refuses_a_machine_id_of_no_known_shape_before_calling_the_api(api):
    api.cluster.add_node(NODE, machine=HOST)
    args = hook_args(f"{NODE}-join", old={"triggers": ["10.8.0.21", "e", "h"]})
    with pytest.raises(RuntimeError, match=r"an EC2 instance id \(i-...\) or an existing host's"):
        run(node_hooks.on_join_delete(access(api), args))
    assert api.cluster.requests == [] and NODE in api.cluster.nodes


# ---------------------------------------------------------------- a new machine joins


def test_a_dead_machines_node_of_the_name_makes_room_for_the_new_one(api):
    api.cluster.add_node(NODE, machine=OTHER, ready=False)
    args = hook_args(f"{NODE}-join", new={"triggers": [MACHINE, "e", "h"]})
    run(node_hooks.on_join_create(access(api), args))
    assert NODE not in api.cluster.nodes


def test_a_live_node_of_another_machine_stops_the_join_naming_both(api):
    api.cluster.add_node(NODE, machine=OTHER, ready=True)
    args = hook_args(f"{NODE}-join", new={"triggers": [MACHINE, "e", "h"]})
    with pytest.raises(RuntimeError, match=f"registered by {OTHER}, not by {MACHINE}"):
        run(node_hooks.on_join_create(access(api), args))
    assert NODE in api.cluster.nodes


# ---------------------------------------------------------------- the roll


def _roll(max_unavailable: int = 1, wait: int = 600) -> node_hooks.Roll:
    return node_hooks.Roll(
        node_name=NODE,
        slots=slots.Slots("a10g", max_unavailable, NODE, hold_seconds=3600, wait_seconds=wait),
        drain_seconds=900,
        change="c2",
    )


def test_a_joined_node_with_a_new_change_takes_a_slot_is_cordoned_and_drained(api):
    api.cluster.add_node(
        NODE, machine=MACHINE, metadata={"annotations": {nodes.CHANGE_ANNOTATION: "c1"}}
    )
    api.cluster.add_pod("ml", "train-0", NODE)
    args = hook_args(f"{NODE}-driver", new={"triggers": [MACHINE]})
    run(node_hooks.on_disruptive_update(access(api), _roll(), args))
    node = api.cluster.nodes[NODE]
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"][nodes.ROLL_CORDON_ANNOTATION] == "c2"
    assert api.cluster.leases["gpu-cluster-slot-a10g-0"]["spec"]["holderIdentity"] == NODE
    assert not api.cluster.pods


@pytest.mark.parametrize("annotations", [{nodes.CHANGE_ANNOTATION: "c2"}, None])
def test_a_node_that_has_the_change_or_has_not_joined_is_not_taken_out(api, annotations):
    if annotations is not None:
        api.cluster.add_node(NODE, machine=MACHINE, metadata={"annotations": annotations})
    args = hook_args(f"{NODE}-driver", new={"triggers": [MACHINE]})
    run(node_hooks.on_disruptive_update(access(api), _roll(), args))
    assert not [r for r in api.cluster.requests if r[0] != "GET"]


def test_a_full_pool_fails_after_its_wait_naming_the_holders(api):
    api.cluster.add_node(NODE, machine=MACHINE)
    clock = FakeClock()
    held = slots._lease("gpu-cluster-slot-a10g-0", "dev-gpu-a10g-1", 3600, clock.utc())
    api.cluster.leases["gpu-cluster-slot-a10g-0"] = api.cluster.stamp(held)
    _said, say = said()
    api_ = run(access(api).api())
    with pytest.raises(RuntimeError, match="held by: dev-gpu-a10g-1 "):
        run(node_hooks.take_out(api_, _roll(wait=120), MACHINE, clock, say))
    assert api.cluster.nodes[NODE]["spec"].get("unschedulable") is None, "not cordoned"


def test_an_expired_slot_is_taken_over_and_a_lost_race_waits(api):
    clock = FakeClock()
    stale = slots._lease("gpu-cluster-slot-a10g-0", "dev-gpu-a10g-1", 60, clock.utc())
    api.cluster.leases["gpu-cluster-slot-a10g-0"] = api.cluster.stamp(stale)
    clock.seconds += 61
    _said, say = said()
    api_ = run(access(api).api())
    assert run(slots.acquire(api_, _roll().slots, clock, say)) == 0
    assert api.cluster.leases["gpu-cluster-slot-a10g-0"]["spec"]["holderIdentity"] == NODE
    run(slots.release(api_, _roll().slots, clock, say))
    assert api.cluster.leases["gpu-cluster-slot-a10g-0"]["spec"]["holderIdentity"] == ""

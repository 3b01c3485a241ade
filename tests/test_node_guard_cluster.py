"""The node guard (components/kube/node_guard.py) on a real kube-apiserver v1.35 with the Node
authorizer and NodeRestriction, as kubeadm runs it: its CEL is compiled and judged by the API
server itself, for requests made with node client certificates (CN system:node:<name>, O
system:nodes: what kubeadm's auto-approved kubelet CSRs get, for any name a join token asks).
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from components.kube import node_guard
from components.kube.api import nodes
from components.labels import POOL_LABEL, UNPROVEN_TAINT_EFFECT, UNPROVEN_TAINT_KEY
from tests.helpers.cluster import Api, ApiError, Cluster

pytestmark = pytest.mark.engine

POLICY = "test-node-guard"
STACK = ("g-a-0", "g-a-1")
CONTROL_PLANE = "g-control-plane"
PROOF = {"key": UNPROVEN_TAINT_KEY, "effect": UNPROVEN_TAINT_EFFECT}
PROVIDER = "aws:///us-east-1a/i-0abc"
POLICY_SYNC_SECONDS = 60


def node_api(cluster: Cluster, name: str, directory: Path) -> Api:
    """A client with a node's certificate from the cluster CA (as kube-controller-manager's
    csrsigning signs an approved kubelet CSR)."""
    base = directory / name
    base.mkdir(parents=True, exist_ok=True)
    key, request, cert = (str(base / f) for f in ("k.pem", "r.csr", "c.pem"))
    subject = f"/O=system:nodes/CN=system:node:{name}"
    ca, ca_key = str(cluster.pki / "ca.crt"), str(cluster.pki / "ca.key")
    for argv in (
        ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", request, "-subj", subject],
        [
            "x509",
            "-req",
            "-in",
            request,
            "-CA",
            ca,
            "-CAkey",
            ca_key,
            "-CAcreateserial",
            "-out",
            cert,
        ],
    ):
        subprocess.run(["openssl", *argv], check=True, capture_output=True)
    api = cluster.api()
    api.session.cert = (cert, key)
    return api


def node_body(name: str, labels=None, taints=None, provider=None, annotations=None) -> dict:
    spec: dict = {}
    if taints is not None:
        spec["taints"] = taints
    if provider:
        spec["providerID"] = provider
    metadata = {"name": name, "labels": labels or {}, "annotations": annotations or {}}
    return {"apiVersion": "v1", "kind": "Node", "metadata": metadata, "spec": spec}


def refused(call) -> str:
    with pytest.raises(ApiError) as caught:
        call()
    assert caught.value.status in (403, 422), caught.value
    return str(caught.value)


@contextlib.contextmanager
def guard(api: Api, probe: Api) -> Iterator[None]:
    spec = node_guard.policy_spec(STACK, [POOL_LABEL, "team"], other_nodes=[CONTROL_PLANE])
    api.create(
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
        {"metadata": {"name": POLICY}, "spec": spec},
    )
    api.create(
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
        {
            "metadata": {"name": POLICY},
            "spec": {"policyName": POLICY, "validationActions": ["Deny"]},
        },
    )
    try:
        # The API server loads a new policy through an informer: wait (bounded) until it judges.
        deadline = time.monotonic() + POLICY_SYNC_SECONDS
        while True:
            try:
                probe.create("/api/v1/nodes", node_body("g-probe"))
            except ApiError as error:
                if "one of this stack's node names" in str(error):
                    break
                raise
            api.delete("/api/v1/nodes/g-probe")
            assert time.monotonic() < deadline, "the policy never took effect"
            time.sleep(1)
        yield
    finally:
        api.delete(
            f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/{POLICY}"
        )
        api.delete(f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{POLICY}")


@pytest.fixture(scope="module")
def guarded(kube_cluster, tmp_path_factory):
    directory = tmp_path_factory.mktemp("node-certs")
    api = kube_cluster.api()
    with guard(api, node_api(kube_cluster, "g-probe", directory)):
        yield kube_cluster, api, directory


def test_a_node_of_a_name_outside_the_stack_cannot_register(guarded):
    """A join token's certificate may name any node; only the stack's names may register."""
    cluster, _, directory = guarded
    evil = node_api(cluster, "evil-node", directory)
    body = node_body("evil-node", {"team": "x"}, [PROOF], PROVIDER)
    assert "one of this stack's node names" in refused(lambda: evil.create("/api/v1/nodes", body))


def test_a_gpu_node_registers_with_the_proof_taint_and_its_provider_id(guarded):
    cluster, api, directory = guarded
    own = node_api(cluster, "g-a-1", directory)
    message = refused(lambda: own.create("/api/v1/nodes", node_body("g-a-1", taints=[PROOF])))
    assert "providerID" in message
    message = refused(lambda: own.create("/api/v1/nodes", node_body("g-a-1", provider=PROVIDER)))
    assert UNPROVEN_TAINT_KEY in message
    ours = {nodes.TAINTS_ANNOTATION: "quarantine=x:NoExecute"}
    message = refused(
        lambda: own.create(
            "/api/v1/nodes", node_body("g-a-1", taints=[PROOF], provider=PROVIDER, annotations=ours)
        )
    )
    assert "gpu-cluster.io/ annotation" in message
    own.create("/api/v1/nodes", node_body("g-a-1", taints=[PROOF], provider=PROVIDER))
    api.delete("/api/v1/nodes/g-a-1")


def test_the_control_planes_own_node_may_register(guarded):
    cluster, api, directory = guarded
    control = node_api(cluster, CONTROL_PLANE, directory)
    control.create("/api/v1/nodes", node_body(CONTROL_PLANE))
    api.delete(f"/api/v1/nodes/{CONTROL_PLANE}")


def test_a_node_cannot_write_the_programs_record_or_uncordon_itself(guarded):
    """The program's record on the Node (managed labels and taints, the change, the roll's
    cordon) and its cordon are the control plane's: the node's own writes of them are refused,
    while its other writes (a label of its own) pass."""
    cluster, api, directory = guarded
    own = node_api(cluster, "g-a-0", directory)
    own.create("/api/v1/nodes", node_body("g-a-0", taints=[PROOF], provider=PROVIDER))
    try:
        path = "/api/v1/nodes/g-a-0"
        api.merge_patch(
            path,
            {
                "metadata": {"annotations": {nodes.ROLL_CORDON_ANNOTATION: "c2"}},
                "spec": {"unschedulable": True},
            },
        )
        for annotation in (
            nodes.TAINTS_ANNOTATION,
            nodes.LABELS_ANNOTATION,
            nodes.CHANGE_ANNOTATION,
            nodes.ROLL_CORDON_ANNOTATION,
        ):
            patch = {"metadata": {"annotations": {annotation: "c2-x"}}}
            assert "annotation" in refused(lambda p=patch: own.merge_patch(path, p)), annotation
        patch = {"metadata": {"annotations": {nodes.ROLL_CORDON_ANNOTATION: None}}}
        refused(lambda: own.merge_patch(path, patch))
        patch = {"metadata": {"labels": {"gpu-cluster.io/efa": "true"}}}
        assert "label" in refused(lambda: own.merge_patch(path, patch))
        message = refused(lambda: own.merge_patch(path, {"spec": {"unschedulable": False}}))
        assert "uncordon" in message
        own.merge_patch(path, {"metadata": {"labels": {"example.com/own": "yes"}}})
        assert api.get(path)["spec"]["unschedulable"] is True
        assert api.get(path)["metadata"]["annotations"][nodes.ROLL_CORDON_ANNOTATION] == "c2"
    finally:
        api.delete("/api/v1/nodes/g-a-0")

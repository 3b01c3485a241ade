"""No tenant touches a GPU before it is proven (issue 41, finding 5): a node registers with a
taint of its own, which only the per-node system workloads and its own checks tolerate, and the
control plane removes it through the API once those checks passed.

- The taint is there from the Node's first moment: kubeadm join hands the JoinConfiguration's
  `nodeRegistration.taints` to the kubelet as `--register-with-taints` (kubeadm
  cmd/kubeadm/app/phases/kubelet/flags.go, `registerTaintsUsingFlags` for a join), and the
  kubelet creates its Node with them (pkg/kubelet/kubelet_node_status.go `initialNode`).
- The node cannot lift it: NodeRestriction refuses a node's change of its taints after
  registration (plugin/pkg/admission/noderestriction/admission.go `admitNode`: "is not allowed
  to modify taints"), and the node guard refuses a registration without it and a node's delete
  of its own Node (components/kube/node_guard.py).
- Only `<node>-in-service` removes it, after the node's validation Job and NCCL Job passed
  (its dependencies), in the same write that brings the labels that steer tenants to it.
"""

from __future__ import annotations

import pytest

from components.kube import manifests, node_hooks
from components.kube.api import nodes
from components.labels import UNPROVEN_TAINT_EFFECT, UNPROVEN_TAINT_KEY
from components.settings import Taint
from tools import lifecycle
from tools.harness.graph import Graph, script_params, unwrap
from tools.harness.identity import VARIANTS
from tools.harness.stacks import STACKS, run_program

UNPROVEN = Taint(key=UNPROVEN_TAINT_KEY, value="", effect=UNPROVEN_TAINT_EFFECT)
WORKLOADS = (
    "kubernetes:apps/v1:DaemonSet",
    "kubernetes:apps/v1:Deployment",
    "kubernetes:apps/v1:StatefulSet",
    "kubernetes:batch/v1:Job",
)
# What may run on a GPU node before it is proven: its system DaemonSets and its own checks (and
# the spot termination handler, which tolerates everything as upstream ships it but selects on
# the pool label, which only the proof brings).
BEFORE_PROOF = {
    "nvidia-device-plugin",
    "gpu-feature-discovery",
    "dcgm-exporter",
    "aws-efa-k8s-device-plugin",
    "aws-node-termination-handler",
}


def _graphs() -> list[tuple[str, Graph]]:
    found = [(stack, run_program(stack)) for stack in STACKS]
    for name, (stack, config) in VARIANTS.items():
        found.append((name, run_program(stack, config=config)))
    return found


GRAPHS = _graphs()


def _pod_spec(resource) -> dict:
    return unwrap(resource.inputs)["spec"]["template"]["spec"]


@pytest.mark.parametrize(("stack", "graph"), GRAPHS, ids=[s for s, _ in GRAPHS])
def test_only_the_nodes_own_agents_and_checks_tolerate_the_proof_taint(stack, graph):
    tolerant, strict = set(), set()
    for resource in graph.find(lambda r: r.type in WORKLOADS):
        name = unwrap(resource.inputs)["metadata"]["name"]
        tolerates = manifests.tolerates(_pod_spec(resource).get("tolerations") or [], UNPROVEN)
        (tolerant if tolerates else strict).add((resource.type.rsplit(":", 1)[1], name))
    jobs = {name for kind, name in tolerant if kind == "Job"}
    checks = {name for name in jobs if name.endswith(("-validation", "-nccl", "-nccl-efa"))}
    assert jobs == checks, f"{stack}: Jobs that are no node check tolerate it: {jobs - checks}"
    agents = {name for kind, name in tolerant if kind != "Job"}
    assert agents <= BEFORE_PROOF, f"{stack}: {agents - BEFORE_PROOF} tolerate the proof taint"
    assert "nvidia-device-plugin" in agents, f"{stack}: the GPUs are never advertised"
    assert not {name for _, name in strict if name in BEFORE_PROOF}, f"{stack}: {strict}"
    assert ("Deployment", "nfd-master") not in tolerant, "nfd-master never goes to GPU nodes"


def test_a_tenant_that_tolerates_every_pool_taint_still_waits_for_the_proof():
    """The common GPU workload tolerates nvidia.com/gpu (finding 5): not the proof taint."""
    tenant = [manifests.GPU_TOLERATION, {"key": "team", "operator": "Exists"}]
    assert not manifests.tolerates(tenant, UNPROVEN)
    assert manifests.tolerates([{"operator": "Exists"}], UNPROVEN), "the matching rule is real"


@pytest.mark.parametrize(("stack", "graph"), GRAPHS, ids=[s for s, _ in GRAPHS])
def test_there_is_no_moment_a_tenant_can_schedule_before_the_proof(stack, graph):
    """The Node's states, from what the program registered: at registration (the join's
    taints), while its checks run (nothing writes its taints; the node may not), and after its
    put in service. A tenant that tolerates every pool taint meets the proof taint until the
    last state, and the taint goes only in the write that follows every check of the node."""
    tenant_tolerations = [manifests.toleration(t) for t in _every_pool_taint(graph)]
    for node in lifecycle.node_names(graph):
        join = graph.named(f"{node}-join")
        registered = nodes.parse_taints(script_params(join)["NODE_TAINTS"])
        assert _blocks(registered, tenant_tolerations), f"{node}: schedulable at registration"
        in_service = graph.named(f"{node}-in-service")
        checks = [graph.named(f"{node}-validation-job")] if _validated(graph, node) else []
        checks += graph.find(lambda r, n=node: r.name == f"{n}-nccl-job")
        for check in checks:
            assert graph.depends_on(in_service, check), f"{node}: in service before {check.name}"
        assert in_service.hooks["before_create"] == [node_hooks.IN_SERVICE], in_service.urn
        environment = unwrap(in_service.inputs)["environment"]
        node_object = {
            "metadata": {"labels": {}},
            "spec": {"taints": [dict(t) for t in registered]},
        }
        wanted = nodes.InService(
            environment["NODE_LABELS"], environment["NODE_TAINTS"], environment["CHANGE"]
        )
        nodes.put_in_service(node_object, wanted)
        after = node_object["spec"].get("taints", [])
        assert not _blocks(after, tenant_tolerations), f"{node}: still kept from tenants: {after}"
        assert "gpu-cluster.io/pool" in node_object["metadata"]["labels"], node_object


def _validated(graph: Graph, node: str) -> bool:
    return bool(graph.find(lambda r: r.name == f"{node}-validation-job"))


def _every_pool_taint(graph: Graph) -> list[Taint]:
    found = []
    for node in lifecycle.node_names(graph):
        for taint in nodes.parse_taints(script_params(graph.named(f"{node}-join"))["NODE_TAINTS"]):
            if taint["key"] != UNPROVEN_TAINT_KEY:
                found.append(
                    Taint(key=taint["key"], value=taint.get("value", ""), effect=taint["effect"])
                )
    return found


def _blocks(taints: list[dict], tolerations: list[dict]) -> bool:
    """The scheduler's TaintToleration filter: a NoSchedule or NoExecute taint no toleration
    tolerates keeps the pod off (pkg/scheduler/framework/plugins/tainttoleration)."""
    return any(
        t["effect"] in ("NoSchedule", "NoExecute")
        and not manifests.tolerates(
            tolerations, Taint(key=t["key"], value=t.get("value", ""), effect=t["effect"])
        )
        for t in taints
    )


def test_a_validation_that_fails_keeps_the_taint_and_says_why():
    """A failed check fails its Job's create (pulumi-kubernetes awaits a Job to Complete), so
    `<node>-in-service`, which depends on it, is never created and its hook never runs: the node
    keeps the taint, and the `up` names the Job, its node and its stage."""
    graph = GRAPHS[0][1]
    node = lifecycle.node_names(graph)[0]
    in_service = graph.named(f"{node}-in-service")
    job = graph.named(f"{node}-validation-job")
    assert graph.depends_on(in_service, job)
    assert not unwrap(job.inputs)["metadata"]["annotations"].get("pulumi.com/skipAwait")

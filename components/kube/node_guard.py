"""No GPU node steers workloads to itself: a ValidatingAdmissionPolicy (admissionregistration.
k8s.io/v1, GA since Kubernetes 1.30) refuses a request of one of the stack's GPU nodes (user
`system:node:<cluster>-<pool>-...`) that registers its Node without the proof taint or with a
label the control plane owns (the pools' `labels` keys, the pool and instance labels), changes
such a label, or deletes its own Node (to register again untainted). NodeRestriction refuses
only a node's taint change after registration and a few label namespaces. The program writes
with the admin credential, which is no node's. Why, with the sources: docs/decisions/
059-no-tenant-before-the-proof.md.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.control_plane import node_name as control_plane_node_name
from components.kube.manifests import MANAGED_BY
from components.labels import UNPROVEN_TAINT_EFFECT, UNPROVEN_TAINT_KEY
from components.node_inputs import managed_label_keys
from components.settings import Settings
from components.settings.hosts_pool import HostsNodePool

NODES_GROUP = "system:nodes"
# What the program keeps on a Node (components/kube/api/nodes.py) and the labels it sets: no
# node may write a key under it, lest it steer the control plane's next write.
PROGRAM_PREFIX = "gpu-cluster.io/"
# The providerID a stack's node registers with (components/node_machine.py, join-node.sh).
PROVIDER_ID = r"^(aws:///[a-z0-9-]+/i-[0-9a-f]+|gpu-cluster:///host-[0-9a-f]+)$"
_HAS_LABELS = "has(object.metadata.labels)"
_HAD_LABELS = "has(oldObject.metadata.labels)"


def _cel_list(values: Sequence[str]) -> str:
    """A CEL list of string literals (label keys and node names hold no character a JSON string
    literal would escape differently from CEL)."""
    return "[" + ", ".join(json.dumps(value) for value in values) + "]"


def _program_keys(which: str, field: str) -> str:
    """The keys under PROGRAM_PREFIX of `which` (object, oldObject) `metadata.<field>`."""
    return (
        f"has({which}.metadata.{field}) ? {which}.metadata.{field}.filter(k, "
        f"k.startsWith({json.dumps(PROGRAM_PREFIX)})) : []"
    )


def _unchanged(field: str) -> str:
    new, old = f"variables.new_{field}", f"variables.old_{field}"
    return (
        f"request.operation != 'UPDATE' || ({new}.size() == {old}.size() && {new}.all(k, "
        f"k in {old} && object.metadata.{field}[k] == oldObject.metadata.{field}[k]))"
    )


def policy_spec(
    node_names: Sequence[str],
    managed_keys: Sequence[str],
    *,
    other_nodes: Sequence[str] = (),
    guarded_prefixes: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The policy: every request of a node (group system:nodes) and the rules. A Node may be
    registered (created) by a node only under one of `node_names` (the stack's GPU nodes) or
    `other_nodes` (the managed control plane's); with `guarded_prefixes` (an existing cluster,
    whose own nodes the stack does not know) any name outside those prefixes too."""
    ours = _cel_list(node_names)
    allowed = f"request.name in {ours} || request.name in {_cel_list(other_nodes)}"
    if guarded_prefixes is not None:
        allowed += f" || !{_cel_list(guarded_prefixes)}.exists(p, request.name.startsWith(p))"
    has_new = f"({_HAS_LABELS} && k in object.metadata.labels)"
    had_old = f"({_HAD_LABELS} && k in oldObject.metadata.labels)"
    unproven = (
        f"t.key == {json.dumps(UNPROVEN_TAINT_KEY)} && t.effect == "
        f"{json.dumps(UNPROVEN_TAINT_EFFECT)}"
    )
    creates_ours = f"request.operation != 'CREATE' || !(request.name in {ours}) ||"
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE", "DELETE"],
                    "resources": ["nodes", "nodes/status"],
                }
            ]
        },
        "matchConditions": [
            {
                "name": "a-node",
                "expression": "has(request.userInfo.groups) && "
                f"{json.dumps(NODES_GROUP)} in request.userInfo.groups",
            }
        ],
        "variables": [
            {"name": "managed", "expression": _cel_list(managed_keys)},
            {"name": "new_annotations", "expression": _program_keys("object", "annotations")},
            {"name": "old_annotations", "expression": _program_keys("oldObject", "annotations")},
            {"name": "new_labels", "expression": _program_keys("object", "labels")},
            {"name": "old_labels", "expression": _program_keys("oldObject", "labels")},
        ],
        "validations": [
            {
                "expression": f"request.operation != 'CREATE' || {allowed}",
                "message": "a node may register only under one of this stack's node names",
                "reason": "Forbidden",
            },
            {
                "expression": f"{creates_ours} (has(object.spec.taints) && "
                f"object.spec.taints.exists(t, {unproven}))",
                "message": f"a GPU node registers with the taint {UNPROVEN_TAINT_KEY}:"
                f"{UNPROVEN_TAINT_EFFECT}; the control plane lifts it once its checks passed",
                "reason": "Forbidden",
            },
            {
                "expression": f"{creates_ours} (has(object.spec.providerID) && "
                f"object.spec.providerID.matches({json.dumps(PROVIDER_ID)}))",
                "message": "a GPU node registers with its machine's providerID (aws:///<zone>/"
                "i-... or gpu-cluster:///host-...)",
                "reason": "Forbidden",
            },
            {
                "expression": f"{creates_ours} !{_HAS_LABELS} || "
                "variables.managed.all(k, !(k in object.metadata.labels))",
                "message": "a GPU node may not register with a label the control plane owns",
                "reason": "Forbidden",
            },
            {
                "expression": "request.operation != 'CREATE' || "
                "variables.new_annotations.size() == 0",
                "message": f"a node may not register with a {PROGRAM_PREFIX} annotation",
                "reason": "Forbidden",
            },
            {
                "expression": "request.operation != 'UPDATE' || variables.managed.all(k, "
                f"{has_new} == {had_old} && (!{has_new} || "
                "object.metadata.labels[k] == oldObject.metadata.labels[k]))",
                "message": "a node may not change a label the control plane owns",
                "reason": "Forbidden",
            },
            {
                "expression": _unchanged("labels"),
                "message": f"a node may not change a {PROGRAM_PREFIX} label",
                "reason": "Forbidden",
            },
            {
                "expression": _unchanged("annotations"),
                "message": f"a node may not change a {PROGRAM_PREFIX} annotation: the control "
                "plane keeps its record of the node there",
                "reason": "Forbidden",
            },
            {
                "expression": "request.operation != 'UPDATE' || "
                "!(has(oldObject.spec.unschedulable) && oldObject.spec.unschedulable) || "
                "(has(object.spec.unschedulable) && object.spec.unschedulable)",
                "message": "a node may not uncordon itself",
                "reason": "Forbidden",
            },
            {
                "expression": f"request.operation != 'DELETE' || !(request.name in {ours})",
                "message": "a GPU node may not delete its own Node",
                "reason": "Forbidden",
            },
        ],
    }


@dataclass(frozen=True)
class NodeGuardArgs:
    """The stack's GPU node names, the managed control plane's node name (none for an existing
    cluster: then `guarded_prefixes`, `<cluster>-<pool>-`, bound the name rule), the label keys
    the control plane owns, the Kubernetes provider."""

    name: str
    node_names: tuple[str, ...]
    managed_keys: tuple[str, ...]
    provider: k8s.Provider
    other_nodes: tuple[str, ...] = ()
    guarded_prefixes: tuple[str, ...] | None = None

    @classmethod
    def of(cls, settings: Settings, *, provider: k8s.Provider) -> NodeGuardArgs:
        pools = list(settings.node_pools)
        cluster = settings.cluster_name
        names: list[str] = []
        for pool in pools:
            keys = (
                [host.key for host in pool.hosts]
                if isinstance(pool, HostsNodePool)
                else [str(index) for index in range(pool.count)]
            )
            names.extend(f"{cluster}-{pool.name}-{key}" for key in keys)
        managed = settings.control_plane.mode == "managed"
        return cls(
            name=f"gpu-cluster-{cluster}-gpu-nodes",
            node_names=tuple(sorted(names)),
            managed_keys=managed_label_keys(pools),
            provider=provider,
            other_nodes=(control_plane_node_name(cluster),) if managed else (),
            guarded_prefixes=None
            if managed
            else tuple(sorted(f"{cluster}-{pool.name}-" for pool in pools)),
        )


class NodeGuard(pulumi.ComponentResource):
    """The policy and its binding (Deny). Outputs: `policy`, `binding`."""

    def __init__(self, name: str, args: NodeGuardArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-cluster:index:NodeGuard", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        self.policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
            f"{name}-policy",
            metadata={"name": args.name, "labels": dict(MANAGED_BY)},
            spec=policy_spec(
                args.node_names,
                args.managed_keys,
                other_nodes=args.other_nodes,
                guarded_prefixes=args.guarded_prefixes,
            ),
            opts=child,
        )
        self.binding = k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
            f"{name}-binding",
            metadata={"name": args.name, "labels": dict(MANAGED_BY)},
            spec={"policyName": args.name, "validationActions": ["Deny"]},
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=[self.policy])
            ),
        )
        self.register_outputs({})

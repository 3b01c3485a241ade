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

from components.kube.manifests import MANAGED_BY
from components.labels import UNPROVEN_TAINT_EFFECT, UNPROVEN_TAINT_KEY
from components.node_inputs import managed_label_keys
from components.settings import Settings

_HAS_LABELS = "has(object.metadata.labels)"
_HAD_LABELS = "has(oldObject.metadata.labels)"


def _cel_list(values: Sequence[str]) -> str:
    """A CEL list of string literals (label keys and node name prefixes hold no character a
    JSON string literal would escape differently from CEL)."""
    return "[" + ", ".join(json.dumps(value) for value in values) + "]"


def policy_spec(node_prefixes: Sequence[str], managed_keys: Sequence[str]) -> dict[str, Any]:
    """The policy: which requests it judges and the four rules."""
    node_users = [f"system:node:{prefix}" for prefix in node_prefixes]
    has_new = f"({_HAS_LABELS} && k in object.metadata.labels)"
    had_old = f"({_HAD_LABELS} && k in oldObject.metadata.labels)"
    unproven = (
        f"t.key == {json.dumps(UNPROVEN_TAINT_KEY)} && t.effect == "
        f"{json.dumps(UNPROVEN_TAINT_EFFECT)}"
    )
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
                "name": "a-gpu-node-of-this-stack",
                "expression": f"{_cel_list(node_users)}.exists(p, "
                "request.userInfo.username.startsWith(p))",
            }
        ],
        "variables": [{"name": "managed", "expression": _cel_list(managed_keys)}],
        "validations": [
            {
                "expression": "request.operation != 'CREATE' || (has(object.spec.taints) && "
                f"object.spec.taints.exists(t, {unproven}))",
                "message": f"a GPU node registers with the taint {UNPROVEN_TAINT_KEY}:"
                f"{UNPROVEN_TAINT_EFFECT}; the control plane lifts it once its checks passed",
                "reason": "Forbidden",
            },
            {
                "expression": f"request.operation != 'CREATE' || !{_HAS_LABELS} || "
                "variables.managed.all(k, !(k in object.metadata.labels))",
                "message": "a GPU node may not register with a label the control plane owns",
                "reason": "Forbidden",
            },
            {
                "expression": "request.operation != 'UPDATE' || variables.managed.all(k, "
                f"{has_new} == {had_old} && (!{has_new} || "
                "object.metadata.labels[k] == oldObject.metadata.labels[k]))",
                "message": "a GPU node may not change a label the control plane owns",
                "reason": "Forbidden",
            },
            {
                "expression": "request.operation != 'DELETE'",
                "message": "a GPU node may not delete its own Node",
                "reason": "Forbidden",
            },
        ],
    }


@dataclass(frozen=True)
class NodeGuardArgs:
    """The stack's GPU node name prefixes (`<cluster>-<pool>-`), the label keys the control
    plane owns, the Kubernetes provider."""

    name: str
    node_prefixes: tuple[str, ...]
    managed_keys: tuple[str, ...]
    provider: k8s.Provider

    @classmethod
    def of(cls, settings: Settings, *, provider: k8s.Provider) -> NodeGuardArgs:
        pools = list(settings.node_pools)
        return cls(
            name=f"gpu-cluster-{settings.cluster_name}-gpu-nodes",
            node_prefixes=tuple(sorted(f"{settings.cluster_name}-{p.name}-" for p in pools)),
            managed_keys=managed_label_keys(pools),
            provider=provider,
        )


class NodeGuard(pulumi.ComponentResource):
    """The policy and its binding (Deny). Outputs: `policy`, `binding`."""

    def __init__(self, name: str, args: NodeGuardArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-cluster:index:NodeGuard", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        self.policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
            f"{name}-policy",
            metadata={"name": args.name, "labels": dict(MANAGED_BY)},
            spec=policy_spec(args.node_prefixes, args.managed_keys),
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

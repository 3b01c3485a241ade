"""The Kubernetes objects of GPU Feature Discovery (GFD) and the part of node-feature-discovery
(NFD) that turns its findings into node labels, as plain data (like components/kube/manifests.py).

- GFD runs from the device plugin's own image at its release, as NVIDIA's chart deploys it, and
  publishes through NFD's NodeFeature API: no NFD worker, no host directory.
- The NFD master (pinned to the release NVIDIA's chart depends on) labels the Nodes, admitting
  the `nvidia.com` namespace; it runs unprivileged at Pod Security `restricted`.
- The NFD API's three CustomResourceDefinitions, whose schemas accept any fields.

Why: docs/decisions/013-gpu-feature-discovery-through-the-nodefeature-api.md
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from components.kube.manifests import (
    CONFIG_HASH_ANNOTATION,
    CONFIG_KEY,
    CONFIG_MOUNT_PATH,
    DEVICE_PLUGIN_CONFIG_MAP,
    DEVICE_PLUGIN_SECURITY_CONTEXT,
    MANAGED_BY,
    daemon_set_spec,
    device_plugin_config,
    device_plugin_image,
    namespace,
    node_agent_tolerations,
    tolerations,
)
from components.labels import GPU_PRESENT_LABEL
from components.settings import DevicePlugin, Taint

GFD_NAME = "gpu-feature-discovery"
GFD_BINARY = "gpu-feature-discovery"
NFD_NAMESPACE = "node-feature-discovery"
NFD_MASTER_NAME = "nfd-master"
NFD_VERSION = "v0.19.0"
NFD_IMAGE = f"registry.k8s.io/nfd/node-feature-discovery:{NFD_VERSION}"
NFD_GROUP = "nfd.k8s-sigs.io"
NFD_API_VERSION = f"{NFD_GROUP}/v1alpha1"
NFD_HEALTH_PORT = 8080
# The label namespaces GFD writes (nvidia.com/gpu.product, nvidia.com/gpu.count, ...), which
# nfd-master drops unless they are allowed.
GFD_LABEL_NAMESPACES = ("nvidia.com",)
CONTROL_PLANE_TOLERATION = {
    "key": "node-role.kubernetes.io/control-plane",
    "operator": "Exists",
    "effect": "NoSchedule",
}
# The NFD API: (kind, plural, scope, status subresource). nfd-master patches the status of
# NodeFeatureGroups.
NFD_KINDS = (
    ("NodeFeature", "nodefeatures", "Namespaced", False),
    ("NodeFeatureGroup", "nodefeaturegroups", "Namespaced", True),
    ("NodeFeatureRule", "nodefeaturerules", "Cluster", False),
)


def _labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name}


# ---------------------------------------------------------------- GPU Feature Discovery


def gfd_labels() -> dict[str, str]:
    return _labels(GFD_NAME)


def gfd_rules() -> list[dict[str, Any]]:
    """What GFD needs in its namespace: its NodeFeature objects, and its own pod (to make the
    DaemonSet their owner, so deleting GFD deletes them)."""
    return [
        {
            "apiGroups": [NFD_GROUP],
            "resources": ["nodefeatures"],
            "verbs": ["get", "list", "watch", "create", "update"],
        },
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
    ]


def gfd_daemon_set_spec(
    settings: DevicePlugin, *, pool_taints: Iterable[Taint] | None = None
) -> dict[str, Any]:
    """One GFD pod per GPU node (the device plugin's selector and tolerations), the plugin's
    image and config."""
    config_hash = hashlib.sha256(device_plugin_config(settings).encode()).hexdigest()
    selector = gfd_labels()

    def field(path: str) -> dict[str, Any]:
        return {"valueFrom": {"fieldRef": {"fieldPath": path}}}

    return daemon_set_spec(
        selector,
        {
            "serviceAccountName": GFD_NAME,
            "priorityClassName": "system-node-critical",
            "nodeSelector": {GPU_PRESENT_LABEL: "true"},
            "tolerations": node_agent_tolerations(pool_taints),
            "containers": [
                {
                    "name": f"{GFD_NAME}-ctr",
                    "image": device_plugin_image(settings),
                    "command": [GFD_BINARY],
                    "env": [
                        {"name": "NODE_NAME", **field("spec.nodeName")},
                        {"name": "NAMESPACE", **field("metadata.namespace")},
                        {"name": "POD_NAME", **field("metadata.name")},
                        {"name": "USE_NODE_FEATURE_API", "value": "true"},
                        {"name": "CONFIG_FILE", "value": f"{CONFIG_MOUNT_PATH}/{CONFIG_KEY}"},
                        # Labels change only when the GPUs do: no timestamp label rewritten
                        # every minute.
                        {"name": "GFD_NO_TIMESTAMP", "value": "true"},
                    ],
                    "securityContext": DEVICE_PLUGIN_SECURITY_CONTEXT,
                    "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                    "volumeMounts": [
                        {"name": "host-sys", "mountPath": "/sys", "readOnly": True},
                        {"name": "config", "mountPath": CONFIG_MOUNT_PATH, "readOnly": True},
                    ],
                }
            ],
            "volumes": [
                {"name": "host-sys", "hostPath": {"path": "/sys", "type": "Directory"}},
                {"name": "config", "configMap": {"name": DEVICE_PLUGIN_CONFIG_MAP}},
            ],
        },
        annotations={CONFIG_HASH_ANNOTATION: config_hash},
    )


# ---------------------------------------------------------------- NFD master


def nfd_namespace() -> dict[str, Any]:
    return namespace(NFD_NAMESPACE, "restricted")


def nfd_master_labels() -> dict[str, str]:
    return _labels(NFD_MASTER_NAME)


def nfd_master_rules() -> list[dict[str, Any]]:
    return [
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["watch", "list"]},
        {
            "apiGroups": [""],
            "resources": ["nodes", "nodes/status"],
            "verbs": ["get", "patch", "update", "list"],
        },
        {
            "apiGroups": [NFD_GROUP],
            "resources": [plural for _, plural, _, _ in NFD_KINDS],
            "verbs": ["get", "list", "watch"],
        },
        {
            "apiGroups": [NFD_GROUP],
            "resources": ["nodefeaturegroups/status"],
            "verbs": ["patch", "update"],
        },
    ]


def nfd_master_args() -> list[str]:
    return [f"-extra-label-ns={','.join(GFD_LABEL_NAMESPACES)}", f"-port={NFD_HEALTH_PORT}"]


def nfd_master_deployment_spec(*, pool_taints: Iterable[Taint] | None = None) -> dict[str, Any]:
    """One unprivileged nfd-master, schedulable on the control plane and on every pool."""
    selector = nfd_master_labels()
    probe = {"httpGet": {"path": "/healthz", "port": "http"}}
    return {
        "replicas": 1,
        "selector": {"matchLabels": selector},
        "template": {
            "metadata": {"labels": {**selector, **MANAGED_BY}},
            "spec": {
                "serviceAccountName": NFD_MASTER_NAME,
                "enableServiceLinks": False,
                "tolerations": [CONTROL_PLANE_TOLERATION, *tolerations(pool_taints)],
                "securityContext": {
                    "runAsNonRoot": True,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "containers": [
                    {
                        "name": NFD_MASTER_NAME,
                        "image": NFD_IMAGE,
                        "command": ["nfd-master"],
                        "args": nfd_master_args(),
                        "ports": [{"name": "http", "containerPort": NFD_HEALTH_PORT}],
                        "readinessProbe": {**probe, "failureThreshold": 10},
                        "livenessProbe": probe,
                        "resources": {
                            "requests": {"cpu": "50m", "memory": "64Mi"},
                            "limits": {"memory": "512Mi"},
                        },
                        "securityContext": {
                            "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]},
                            "readOnlyRootFilesystem": True,
                            "runAsNonRoot": True,
                        },
                    }
                ],
            },
        },
    }


def nfd_crd_spec(kind: str, plural: str, scope: str, status: bool) -> dict[str, Any]:
    version: dict[str, Any] = {
        "name": "v1alpha1",
        "served": True,
        "storage": True,
        "schema": {
            "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        },
    }
    if status:
        version["subresources"] = {"status": {}}
    return {
        "group": NFD_GROUP,
        "names": {
            "kind": kind,
            "listKind": f"{kind}List",
            "plural": plural,
            "singular": kind.lower(),
        },
        "scope": scope,
        "versions": [version],
    }

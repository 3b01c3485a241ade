"""The Kubernetes objects of GPU Feature Discovery (GFD) and the part of node-feature-discovery
(NFD) that turns its findings into node labels, as plain data (like components/kube/manifests.py).

- GFD runs from the device plugin's own image at its release, as NVIDIA's chart deploys it, and
  publishes through NFD's NodeFeature API: no NFD worker, no host directory.
- The NFD master (pinned to the release NVIDIA's chart depends on) labels the Nodes, admitting
  `nvidia.com`; unprivileged, on the control plane only, reading GFD's namespace only.
- A ValidatingAdmissionPolicy lets a pod write only its own node's NodeFeature object.
- The NFD API's three CustomResourceDefinitions, whose schemas accept any fields.

Why: docs/decisions/013-gpu-feature-discovery-through-the-nodefeature-api.md
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from components.kube.manifests import (
    CONFIG_HASH_ANNOTATION,
    CONFIG_KEY,
    CONFIG_MOUNT_PATH,
    DEVICE_PLUGIN_CONFIG_MAP,
    DEVICE_PLUGIN_NAMESPACE,
    DEVICE_PLUGIN_SECURITY_CONTEXT,
    MANAGED_BY,
    daemon_set_spec,
    device_plugin_config,
    device_plugin_image,
    namespace,
    node_agent_tolerations,
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
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
CONTROL_PLANE_TOLERATION = {
    "key": CONTROL_PLANE_LABEL,
    "operator": "Exists",
    "effect": "NoSchedule",
}
# The label naming the Node a NodeFeature object is for (NFD pkg/apis/nfd/v1alpha1
# NodeFeatureObjNodeNameLabel; nfd-master nfd-api-controller.go reads it, GFD internal/lm/
# output.go sets it), and the user extra a pod's service account token carries its node's name
# in (kubernetes pkg/serviceaccount, ServiceAccountTokenPodNodeInfo: GA and locked on since 1.32).
NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"
TOKEN_NODE_NAME = "authentication.kubernetes.io/node-name"
NODEFEATURE_POLICY = "gpu-cluster-nodefeature-own-node"
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
    """What GFD does in its namespace: get, create and update its node's NodeFeature object
    (k8s-device-plugin internal/lm/output.go: no list, no watch, no delete), and read its own
    pod. Which node's object it may write is the NodeFeature policy's to say."""
    return [
        {
            "apiGroups": [NFD_GROUP],
            "resources": ["nodefeatures"],
            "verbs": ["get", "create", "update"],
        },
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
    ]


def nodefeature_policy() -> dict[str, Any]:
    """The ValidatingAdmissionPolicy's spec: a request made with a pod's service account token
    that creates, updates or deletes a NodeFeature object names (and, for an update or delete,
    found) the node that pod runs on in the object's node-name label. A token without a node
    (not bound to a scheduled pod) writes none. Other users (administrators) are not matched."""
    node = f"request.userInfo.extra['{TOKEN_NODE_NAME}'][0]"

    def names_node(obj: str) -> str:
        return (
            f"has({obj}.metadata.labels) && '{NODE_NAME_LABEL}' in {obj}.metadata.labels && "
            f"{obj}.metadata.labels['{NODE_NAME_LABEL}'] == {node}"
        )

    return {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [NFD_GROUP],
                    "apiVersions": ["*"],
                    "operations": ["CREATE", "UPDATE", "DELETE"],
                    "resources": ["nodefeatures"],
                }
            ]
        },
        "matchConditions": [
            {
                "name": "a-service-account",
                "expression": "request.userInfo.username.startsWith('system:serviceaccount:')",
            }
        ],
        "validations": [
            {
                "expression": f"'{TOKEN_NODE_NAME}' in request.userInfo.extra && "
                f"size(request.userInfo.extra['{TOKEN_NODE_NAME}']) == 1",
                "message": "a service account writes NodeFeature objects only with a token "
                "bound to a pod on a node",
            },
            {
                "expression": f"request.operation == 'DELETE' || ({names_node('object')})",
                "message": "a pod may write the NodeFeature object of its own node only "
                f"(label {NODE_NAME_LABEL})",
            },
            {
                "expression": f"request.operation == 'CREATE' || ({names_node('oldObject')})",
                "message": "a pod may change or delete the NodeFeature object of its own node only",
            },
        ],
    }


def nodefeature_policy_binding() -> dict[str, Any]:
    return {"policyName": NODEFEATURE_POLICY, "validationActions": ["Deny"]}


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


def nfd_master_options() -> dict[str, Any]:
    """nfd-master's configuration (`-options`, the config file's format; NFD v0.19
    pkg/nfd-master/nfd-master.go `Restrictions`): NodeFeature objects of GFD's namespace only
    (nodeFeatureNamespaceSelector, nfd-api-controller.go), and no overwriting of a label nfd-master
    did not set (allowOverwrite false: createPatches replaces only its own keys), so the pool's
    and team's labels stay the program's."""
    return {
        "restrictions": {
            "nodeFeatureNamespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": DEVICE_PLUGIN_NAMESPACE}
            },
            "allowOverwrite": False,
        }
    }


def nfd_master_args() -> list[str]:
    return [
        f"-extra-label-ns={','.join(GFD_LABEL_NAMESPACES)}",
        f"-port={NFD_HEALTH_PORT}",
        f"-options={json.dumps(nfd_master_options(), sort_keys=True, separators=(',', ':'))}",
    ]


def nfd_master_deployment_spec() -> dict[str, Any]:
    """One unprivileged nfd-master, on the control plane only: its token may patch every Node,
    so it never runs on a GPU node (no toleration of the pools' taints; a kubelet may not label
    itself node-role.kubernetes.io/control-plane: NodeRestriction)."""
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
                "nodeSelector": {CONTROL_PLANE_LABEL: ""},
                "tolerations": [CONTROL_PLANE_TOLERATION],
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

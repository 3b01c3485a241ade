"""The GPU node add-ons' Kubernetes objects as plain data (pure functions, as in
components/kube/manifests.py): the AWS EFA device plugin and the NVIDIA DCGM exporter with its
Service and optional ServiceMonitor. Each follows its upstream manifest with named changes.

Why: docs/decisions/012-manifests-follow-upstream-with-named-changes.md ("The add-ons")
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from components.kube.manifests import daemon_set_spec, node_agent_tolerations
from components.labels import EFA_LABEL, GPU_PRESENT_LABEL
from components.settings import DcgmExporter, Taint

DEVICE_PLUGINS_HOST_PATH = "/var/lib/kubelet/device-plugins"

EFA_PLUGIN_NAME = "aws-efa-k8s-device-plugin"
EFA_PLUGIN_IMAGE = "public.ecr.aws/eks/aws-efa-k8s-device-plugin:v0.5.7"
INFINIBAND_HOST_PATH = "/dev/infiniband"

DCGM_EXPORTER_NAME = "dcgm-exporter"
DCGM_EXPORTER_PORT = 9400
POD_RESOURCES_HOST_PATH = "/var/lib/kubelet/pod-resources"
SERVICE_MONITOR_API_VERSION = "monitoring.coreos.com/v1"


def _labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name}


# ---------------------------------------------------------------- EFA device plugin


def efa_plugin_labels() -> dict[str, str]:
    return _labels(EFA_PLUGIN_NAME)


def efa_plugin_daemon_set_spec(*, pool_taints: Iterable[Taint] | None = None) -> dict[str, Any]:
    """One plugin pod on each node labelled EFA_LABEL=true, tolerating the pools' taints."""
    selector = efa_plugin_labels()
    return daemon_set_spec(
        selector,
        {
            "automountServiceAccountToken": False,
            "priorityClassName": "system-node-critical",
            "nodeSelector": {EFA_LABEL: "true"},
            "tolerations": node_agent_tolerations(pool_taints),
            "hostNetwork": True,
            "containers": [
                {
                    "name": EFA_PLUGIN_NAME,
                    "image": EFA_PLUGIN_IMAGE,
                    # aws/eks-charts aws-efa-k8s-device-plugin values.yaml `securityContext`:
                    # what the chart gives every instance type but inf1 and trn.
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "resources": {"requests": {"cpu": "10m", "memory": "20Mi"}},
                    "volumeMounts": [
                        {"name": "device-plugin", "mountPath": DEVICE_PLUGINS_HOST_PATH},
                        {"name": "infiniband", "mountPath": INFINIBAND_HOST_PATH},
                    ],
                }
            ],
            "volumes": [
                {
                    "name": "device-plugin",
                    "hostPath": {"path": DEVICE_PLUGINS_HOST_PATH, "type": "Directory"},
                },
                {"name": "infiniband", "hostPath": {"path": INFINIBAND_HOST_PATH}},
            ],
        },
    )


# ---------------------------------------------------------------- DCGM exporter


def dcgm_exporter_labels() -> dict[str, str]:
    return _labels(DCGM_EXPORTER_NAME)


def dcgm_exporter_daemon_set_spec(
    settings: DcgmExporter, *, pool_taints: Iterable[Taint] | None = None
) -> dict[str, Any]:
    """One exporter pod on each GPU node (GPU_PRESENT_LABEL=true), tolerating the pools' taints."""
    selector = dcgm_exporter_labels()
    return daemon_set_spec(
        selector,
        {
            "automountServiceAccountToken": False,
            "nodeSelector": {GPU_PRESENT_LABEL: "true"},
            "tolerations": node_agent_tolerations(pool_taints),
            "containers": [
                {
                    "name": DCGM_EXPORTER_NAME,
                    "image": settings.image,
                    "env": [
                        {"name": "DCGM_EXPORTER_LISTEN", "value": f":{DCGM_EXPORTER_PORT}"},
                        {"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"},
                        {
                            "name": "NODE_NAME",
                            "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                        },
                    ],
                    "ports": [{"name": "metrics", "containerPort": DCGM_EXPORTER_PORT}],
                    "securityContext": {"privileged": True, "runAsUser": 0},
                    "resources": {
                        "limits": {"cpu": "200m", "memory": "256Mi"},
                        "requests": {"cpu": "100m", "memory": "128Mi"},
                    },
                    "volumeMounts": [
                        {
                            "name": "pod-gpu-resources",
                            "mountPath": POD_RESOURCES_HOST_PATH,
                            "readOnly": True,
                        }
                    ],
                }
            ],
            "volumes": [
                {
                    "name": "pod-gpu-resources",
                    "hostPath": {"path": POD_RESOURCES_HOST_PATH, "type": "Directory"},
                }
            ],
        },
    )


def dcgm_exporter_service_spec() -> dict[str, Any]:
    return {
        "selector": dcgm_exporter_labels(),
        "ports": [
            {
                "name": "metrics",
                "port": DCGM_EXPORTER_PORT,
                "targetPort": "metrics",
                "protocol": "TCP",
            }
        ],
    }


def dcgm_exporter_service_monitor_spec() -> dict[str, Any]:
    """A Prometheus operator ServiceMonitor (monitoring.coreos.com/v1) scraping the Service."""
    return {
        "selector": {"matchLabels": dcgm_exporter_labels()},
        "endpoints": [{"port": "metrics", "path": "/metrics"}],
    }

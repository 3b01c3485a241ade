"""The AWS Node Termination Handler in IMDS mode, as plain data: a DaemonSet on the nodes of spot
pools that watches the instance metadata for a spot interruption notice (two minutes ahead) or
a scheduled event, then cordons and drains the node, so its pods move before AWS reclaims it.

Upstream: aws/aws-node-termination-handler v1.25.6, chart 0.27.6
(`config/helm/aws-node-termination-handler`: templates/daemonset.linux.yaml, clusterrole.yaml,
serviceaccount.yaml, clusterrolebinding.yaml at their default values), with named changes:
only the nodes of spot pools (node affinity on the pool label), no ASG lifecycle draining (the
stack launches no Auto Scaling group), the device plugin's namespace (Pod Security
`privileged`: host network and a host path), and the image by digest where one is configured.
Why: docs/decisions/034-spot-nodes-drain-on-the-interruption-notice.md
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from components.labels import POOL_LABEL

NAME = "aws-node-termination-handler"
VERSION = "v1.25.6"  # the chart's appVersion 1.25.6
# By tag: the digest of this tag is set in configuration (nodeTerminationHandler.image); every
# preview warns until it is (components/kube/termination_handler.py).
IMAGE = f"public.ecr.aws/aws-ec2/aws-node-termination-handler:{VERSION}"
UPTIME_FILE = "/proc/uptime"
PROBES_PORT = 8080
PROMETHEUS_PORT = 9092


def labels() -> dict[str, str]:
    """The chart's selector labels (`selectorLabelsDaemonset`), with its OS label."""
    return {
        "app.kubernetes.io/name": NAME,
        "app.kubernetes.io/instance": NAME,
        "app.kubernetes.io/component": "daemonset",
        "kubernetes.io/os": "linux",
    }


def cluster_role_rules() -> list[dict[str, Any]]:
    """clusterrole.yaml without events (emitKubernetesEvents: false)."""
    return [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch", "update"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "get"]},
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
        {"apiGroups": ["extensions"], "resources": ["daemonsets"], "verbs": ["get"]},
        {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get"]},
    ]


def _env() -> list[dict[str, Any]]:
    """daemonset.linux.yaml's env at the chart's defaults, IMDS mode (SQS off)."""
    field = {
        "NODE_NAME": "spec.nodeName",
        "POD_NAME": "metadata.name",
        "NAMESPACE": "metadata.namespace",
    }
    values = {
        "ENABLE_PROBES_SERVER": "false",
        "PROBES_SERVER_PORT": str(PROBES_PORT),
        "PROBES_SERVER_ENDPOINT": "/healthz",
        "LOG_LEVEL": "info",
        "JSON_LOGGING": "false",
        "LOG_FORMAT_VERSION": "1",
        "ENABLE_PROMETHEUS_SERVER": "false",
        "PROMETHEUS_SERVER_PORT": str(PROMETHEUS_PORT),
        "METADATA_TRIES": "3",
        "DRY_RUN": "false",
        "CORDON_ONLY": "false",
        "TAINT_NODE": "false",
        "ENABLE_OUT_OF_SERVICE_TAINT": "false",
        "EXCLUDE_FROM_LOAD_BALANCERS": "false",
        "DELETE_LOCAL_DATA": "true",
        "IGNORE_DAEMON_SETS": "true",
        "POD_TERMINATION_GRACE_PERIOD": "-1",
        "NODE_TERMINATION_GRACE_PERIOD": "120",
        "EMIT_KUBERNETES_EVENTS": "false",
        "ENABLE_SPOT_INTERRUPTION_DRAINING": "true",
        # Named change: the chart's default is true; the stack launches no Auto Scaling group.
        "ENABLE_ASG_LIFECYCLE_DRAINING": "false",
        "ENABLE_SCHEDULED_EVENT_DRAINING": "true",
        "ENABLE_REBALANCE_MONITORING": "false",
        "ENABLE_REBALANCE_DRAINING": "false",
        "ENABLE_SQS_TERMINATION_DRAINING": "false",
        "UPTIME_FROM_FILE": UPTIME_FILE,
    }
    return [
        *({"name": k, "valueFrom": {"fieldRef": {"fieldPath": v}}} for k, v in field.items()),
        *({"name": k, "value": v} for k, v in values.items()),
    ]


def daemon_set_spec(spot_pools: Sequence[str], image: str) -> dict[str, Any]:
    """One handler pod on each node of the `spot_pools`, on the host network (it reads the
    instance metadata, which answers one hop away: the nodes keep IMDSv2's hop limit of 1)."""
    selector = labels()
    return {
        "selector": {"matchLabels": selector},
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%"}},
        "template": {
            "metadata": {"labels": {**selector, "k8s-app": NAME}},
            "spec": {
                "serviceAccountName": NAME,
                "securityContext": {"fsGroup": 1000},
                "priorityClassName": "system-node-critical",
                "hostNetwork": True,
                "dnsPolicy": "ClusterFirstWithHostNet",
                "containers": [
                    {
                        "name": NAME,
                        "securityContext": {
                            "readOnlyRootFilesystem": True,
                            "runAsNonRoot": True,
                            "allowPrivilegeEscalation": False,
                            "runAsUser": 1000,
                            "runAsGroup": 1000,
                        },
                        "image": image,
                        "imagePullPolicy": "IfNotPresent",
                        "env": _env(),
                        "volumeMounts": [
                            {"name": "uptime", "mountPath": UPTIME_FILE, "readOnly": True}
                        ],
                    }
                ],
                "volumes": [{"name": "uptime", "hostPath": {"path": UPTIME_FILE}}],
                "nodeSelector": {"kubernetes.io/os": "linux"},
                # Named change: the spot pools' nodes only (the chart: any node but Fargate).
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": POOL_LABEL,
                                            "operator": "In",
                                            "values": sorted(spot_pools),
                                        }
                                    ]
                                }
                            ]
                        }
                    }
                },
                "tolerations": [{"operator": "Exists"}],
            },
        },
    }

"""What a kubelet writes to the API server, written by the tests instead (no kubelet runs on
the test cluster, tests/helpers/cluster.py). Kubernetes v1.35.4's kubelet is the source:
- registration: pkg/kubelet/kubelet_node_status.go `initialNode` (labels, taints, providerID)
  and `tryRegisterWithAPIServer` (a create, status included: the Node strategy keeps status on
  create, pkg/registry/core/node/strategy.go `PrepareForCreate`);
- status: pkg/kubelet/nodestatus/setters.go `NodeAddress`, `MachineInfo` (capacity and
  allocatable, extended resources such as nvidia.com/gpu from the device plugin),
  `VersionInfo`, `ReadyCondition` (KubeletReady, last), the pressure conditions;
- a pod's end: pkg/kubelet/status/status_manager.go sends the pod's status with its phase and
  container statuses (pkg/kubelet/kubelet_pods.go `generateAPIPodStatus`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.helpers.cluster import Api, ApiError

KUBELET_VERSION = "v1.35.4"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
    now = _now()
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


def node_object(
    name: str,
    *,
    address: str = "127.0.0.1",
    gpus: int = 0,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    provider_id: str | None = None,
) -> dict[str, Any]:
    """The Node a v1.35 kubelet on linux/amd64 registers (initialNode + setNodeStatus), Ready."""
    capacity = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
                **(labels or {}),
            },
            "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        },
        "spec": {},
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": address},
                {"type": "Hostname", "address": name},
            ],
            "capacity": capacity,
            "allocatable": dict(capacity),
            "nodeInfo": {
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
                "containerRuntimeVersion": "containerd://2.1.4",
                "kernelVersion": "6.8.0-1021-aws",
                "osImage": "Ubuntu 24.04.2 LTS",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            # setNodeStatus order: pressure conditions, then Ready last (ReadyCondition's note).
            "conditions": [
                _condition(
                    "MemoryPressure",
                    "False",
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                ),
                _condition(
                    "DiskPressure",
                    "False",
                    "KubeletHasNoDiskPressure",
                    "kubelet has no disk pressure",
                ),
                _condition(
                    "PIDPressure",
                    "False",
                    "KubeletHasSufficientPID",
                    "kubelet has sufficient PID available",
                ),
                _condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
        },
    }
    if taints:
        node["spec"]["taints"] = taints
    if provider_id:
        node["spec"]["providerID"] = provider_id
    return node


def register_node(api: Api, name: str, **kwargs: Any) -> dict[str, Any]:
    return api.create("/api/v1/nodes", node_object(name, **kwargs))


def pods_on(api: Api, node: str, namespace: str | None = None) -> list[dict[str, Any]]:
    scope = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
    return api.get(f"{scope}?fieldSelector=spec.nodeName%3D{node}")["items"]


def finish_pod(api: Api, pod: dict[str, Any], exit_code: int = 0) -> dict[str, Any]:
    """Report a bound pod's containers as run to completion with `exit_code` (Succeeded or
    Failed; init containers, which ran first, exited 0), as the status manager would."""
    now = _now()
    spec = pod["spec"]

    def terminated(container: dict[str, Any], exit_code: int) -> dict[str, Any]:
        return {
            "name": container["name"],
            "image": container["image"],
            "imageID": "",
            "ready": False,
            "restartCount": 0,
            "started": False,
            "state": {
                "terminated": {
                    "exitCode": exit_code,
                    "reason": "Completed" if exit_code == 0 else "Error",
                    "startedAt": now,
                    "finishedAt": now,
                }
            },
        }

    status = {
        "phase": "Succeeded" if exit_code == 0 else "Failed",
        "hostIP": "127.0.0.1",
        "podIP": "10.244.0.10",
        "startTime": now,
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {
                "type": "Ready",
                "status": "False",
                "reason": "PodCompleted",
                "lastTransitionTime": now,
            },
            {
                "type": "ContainersReady",
                "status": "False",
                "reason": "PodCompleted",
                "lastTransitionTime": now,
            },
        ],
        "initContainerStatuses": [terminated(c, 0) for c in spec.get("initContainers", [])],
        "containerStatuses": [terminated(c, exit_code) for c in spec["containers"]],
    }
    meta = pod["metadata"]
    return api.merge_patch(
        f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status", {"status": status}
    )


def run_pod(api: Api, pod: dict[str, Any]) -> dict[str, Any]:
    """Report a bound pod's containers as started and ready (Running), as the status manager
    does once the containers run and their readiness probes pass (pkg/kubelet/prober: a
    container without a probe is ready once running)."""
    now = _now()
    spec = pod["spec"]

    def running(container: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": container["name"],
            "image": container["image"],
            "imageID": "",
            "ready": True,
            "restartCount": 0,
            "started": True,
            "state": {"running": {"startedAt": now}},
        }

    def done(container: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": container["name"],
            "image": container["image"],
            "imageID": "",
            "ready": True,
            "restartCount": 0,
            "started": False,
            "state": {
                "terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": now,
                    "finishedAt": now,
                }
            },
        }

    status = {
        "phase": "Running",
        "hostIP": "127.0.0.1",
        "podIP": "10.244.0.11",
        "startTime": now,
        "conditions": [
            {"type": kind, "status": "True", "lastTransitionTime": now}
            for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ],
        "initContainerStatuses": [done(c) for c in spec.get("initContainers", [])],
        "containerStatuses": [running(c) for c in spec["containers"]],
    }
    meta = pod["metadata"]
    return api.merge_patch(
        f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status", {"status": status}
    )


def remove_pod(api: Api, pod: dict[str, Any]) -> None:
    """A pod being deleted (an eviction, a drain) is gone once its kubelet stopped its
    containers: the status manager deletes it with a grace period of 0 and the pod's UID as
    precondition (pkg/kubelet/status/status_manager.go `syncPod`, `canBeDeleted`)."""
    meta = pod["metadata"]
    try:
        api.request(
            "DELETE",
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
            {
                "kind": "DeleteOptions",
                "apiVersion": "v1",
                "gracePeriodSeconds": 0,
                "preconditions": {"uid": meta["uid"]},
            },
        )
    except ApiError as error:
        if error.status not in (404, 409):
            raise


def report_devices(api: Api, node: str, resource: str, count: int) -> None:
    """The capacity and allocatable of a device plugin's resource on `node`, as the kubelet's
    node status reports the devices a plugin registered (pkg/kubelet/nodestatus/setters.go
    `MachineInfo`: capacity and allocatable from the device manager's `GetCapacity`)."""
    api.merge_patch(
        f"/api/v1/nodes/{node}/status",
        {"status": {"capacity": {resource: str(count)}, "allocatable": {resource: str(count)}}},
    )


def stop_posting(api: Api, node: str) -> None:
    """The Node of a kubelet that stopped (its machine gone), as the node lifecycle controller
    marks it once the grace period passes without a heartbeat: every condition Unknown
    (pkg/controller/nodelifecycle/node_lifecycle_controller.go `tryUpdateNodeHealth`: reason
    NodeStatusUnknown, "Kubelet stopped posting node status."). The test cluster's grace period
    is an hour (tests/helpers/cluster.py), so the tests mark it when the machine goes; the
    running controller then taints the Node unreachable, as it would."""
    current = api.get(f"/api/v1/nodes/{node}")
    now = _now()
    conditions = [
        {
            **condition,
            "status": "Unknown",
            "reason": "NodeStatusUnknown",
            "message": "Kubelet stopped posting node status.",
            "lastTransitionTime": now,
        }
        for condition in current["status"].get("conditions", [])
    ]
    api.request(
        "PATCH",
        f"/api/v1/nodes/{node}/status",
        {"status": {"conditions": conditions}},
        "application/strategic-merge-patch+json",
    )

"""The test control plane (tests/helpers/cluster.py) with the kubelet's part played by
tests/helpers/kubelet.py: a Job shaped like the program's validation Job (node affinity on the
Node's name, every nvidia.com/gpu) is scheduled onto the registered Node by the real scheduler,
and completed by the real Job controller once its pod is reported finished."""

from __future__ import annotations

import time

import pytest

from tests.helpers import kubelet

pytestmark = pytest.mark.engine

NAMESPACE = "engine-cluster"
WITHIN_SECONDS = 120


def _until(what: str, check, cluster):
    deadline = time.monotonic() + WITHIN_SECONDS
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {WITHIN_SECONDS} s\n{cluster.logs()}")


def _job(node: str, gpus: int) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"{node}-validation", "namespace": NAMESPACE},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchFields": [
                                            {
                                                "key": "metadata.name",
                                                "operator": "In",
                                                "values": [node],
                                            }
                                        ]
                                    }
                                ]
                            }
                        }
                    },
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                    "containers": [
                        {
                            "name": "validate",
                            "image": "nvcr.io/nvidia/k8s/cuda-sample:x",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                        }
                    ],
                }
            },
        },
    }


def test_a_validation_shaped_job_completes_on_a_registered_node(kube_cluster):
    api = kube_cluster.api()
    api.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    kubelet.register_node(
        api,
        "gpu-a",
        gpus=4,
        provider_id="aws:///us-west-2a/i-0abc",
        taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
    )
    kubelet.register_node(api, "gpu-b", gpus=4)
    node = api.get("/api/v1/nodes/gpu-a")
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert node["status"]["conditions"][-1]["type"] == "Ready"

    api.create(f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs", _job("gpu-a", 4))
    [pod] = _until(
        "the Job's pod bound to gpu-a",
        lambda: kubelet.pods_on(api, "gpu-a", NAMESPACE),
        kube_cluster,
    )
    assert kubelet.pods_on(api, "gpu-b", NAMESPACE) == []

    kubelet.finish_pod(api, pod, exit_code=0)
    path = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/gpu-a-validation"
    conditions = _until(
        "the Job's Complete condition",
        lambda: (
            {
                c["type"]: c["status"]
                for c in api.get(path).get("status", {}).get("conditions", [])
            }.get("Complete")
            == "True"
            and api.get(path)["status"]["conditions"]
        ),
        kube_cluster,
    )
    assert any(c["type"] == "Complete" for c in conditions)
    assert api.get(path)["status"]["succeeded"] == 1


def test_a_job_asking_more_gpus_than_allocatable_stays_pending(kube_cluster):
    """The scheduler's NodeResourcesFit filter compares the request with allocatable: a node
    whose device plugin advertises fewer GPUs never gets the pod."""
    api = kube_cluster.api()
    namespace = f"{NAMESPACE}-short"
    api.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
    kubelet.register_node(api, "gpu-short", gpus=2)
    job = _job("gpu-short", 4)
    job["metadata"]["namespace"] = namespace
    api.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job)
    [pod] = _until(
        "the pod's PodScheduled=False condition",
        lambda: [
            p
            for p in api.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
            if any(
                c["type"] == "PodScheduled" and c["status"] == "False"
                for c in p.get("status", {}).get("conditions", [])
            )
        ],
        kube_cluster,
    )
    assert "Insufficient nvidia.com/gpu" in pod["status"]["conditions"][0]["message"]
    assert not pod["spec"].get("nodeName")

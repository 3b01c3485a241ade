"""The kubelets of the end-to-end tests' machines, as one loop the tests run in the background
while the engine works (`with Kubelets(api, {...}):`): no kubelet runs on the lab's hosts, so
this loop does for the Nodes they registered what each one's kubelet would, through the API
(tests/helpers/kubelet.py says which kubelet code each answer stands for):
- a pod bound to one of its Nodes runs: a Job's pod to completion (exit 0: the CUDA and NCCL
  checks pass on these GPUs), any other pod to Running and Ready;
- a pod being deleted there (an eviction, a drain, a delete) is removed once "stopped";
- the NVIDIA device plugin's pod running on a Node makes its GPUs allocatable: the host's GPU
  count (its nvidia-smi) times the plugin's time-slicing replicas (k8s-device-plugin
  api/config/v1 `ReplicatedResources`: each GPU advertised as `replicas` devices);
- a machine that vanished (`stop`) no longer does any of that, and its Node is marked as the
  node lifecycle controller marks a silent kubelet's.
It records what it saw of each Node's cordon (spec.unschedulable) in order, and the most Nodes
cordoned at once, and the pods it removed. Each pass is bounded (the API client's timeouts);
the loop ends with the block.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from components.kube import manifests
from tests.helpers import kubelet
from tests.helpers.cluster import Api, ApiError

GPU = "nvidia.com/gpu"
PASS_SECONDS = 0.5


def advertised(config_yaml: str, gpus: int) -> int:
    """What the device plugin advertises for `gpus` GPUs under its config file."""
    config = yaml.safe_load(config_yaml) or {}
    for resource in (config.get("sharing") or {}).get("timeSlicing", {}).get("resources", []):
        if resource.get("name") == GPU:
            return gpus * int(resource.get("replicas", 1))
    return gpus


@dataclass
class Kubelets:
    api: Api
    gpus: Mapping[str, Callable[[], int]]  # node -> its host's GPU count, as nvidia-smi says
    cordons: list[tuple[str, bool]] = field(default_factory=list)  # (node, cordoned), in order
    removed: list[tuple[str, str]] = field(default_factory=list)  # (node, namespace/name)
    most_cordoned: int = 0
    errors: list[str] = field(default_factory=list)
    _stopped: set[str] = field(default_factory=set)
    _done: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _cordoned: dict[str, bool] = field(default_factory=dict)

    def __enter__(self) -> Kubelets:
        self._done.clear()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def stop(self, node: str) -> None:
        """The machine of `node` is gone: its kubelet does nothing more."""
        self._stopped.add(node)
        try:
            kubelet.stop_posting(self.api, node)
        except ApiError as error:
            if error.status != 404:
                raise

    def serves(self, node: str) -> bool:
        return node in self.gpus and node not in self._stopped

    def _loop(self) -> None:
        while not self._done.is_set():
            try:
                self.once()
            except Exception as error:
                self.errors.append(repr(error))
            self._done.wait(PASS_SECONDS)

    def once(self) -> None:
        nodes = {n["metadata"]["name"]: n for n in self.api.get("/api/v1/nodes")["items"]}
        self._watch_cordons(nodes)
        pods = self.api.get("/api/v1/pods")["items"]
        for pod in pods:
            node = pod["spec"].get("nodeName")
            if not node or node not in nodes or not self.serves(node):
                continue
            if pod["metadata"].get("deletionTimestamp"):
                kubelet.remove_pod(self.api, pod)
                meta = pod["metadata"]
                self.removed.append((node, f"{meta['namespace']}/{meta['name']}"))
            elif pod.get("status", {}).get("phase", "Pending") == "Pending":
                owners = {o["kind"] for o in pod["metadata"].get("ownerReferences", [])}
                if "Job" in owners:
                    kubelet.finish_pod(self.api, pod, exit_code=0)
                else:
                    kubelet.run_pod(self.api, pod)
        for name, node in nodes.items():
            if self.serves(name):
                self._report_gpus(name, node, pods)

    def _watch_cordons(self, nodes: Mapping[str, dict[str, Any]]) -> None:
        for name, node in nodes.items():
            if name not in self.gpus:
                continue
            cordoned = bool(node["spec"].get("unschedulable"))
            if self._cordoned.get(name, False) != cordoned:
                self.cordons.append((name, cordoned))
            self._cordoned[name] = cordoned
        self.most_cordoned = max(self.most_cordoned, sum(self._cordoned.values()))

    def _report_gpus(self, name: str, node: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        plugin = [
            pod
            for pod in pods
            if pod["spec"].get("nodeName") == name
            and pod["metadata"].get("labels", {}).get("app.kubernetes.io/name")
            == manifests.DEVICE_PLUGIN_NAME
            and pod.get("status", {}).get("phase") == "Running"
        ]
        if not plugin:
            return
        config = self.api.get(
            f"/api/v1/namespaces/{plugin[0]['metadata']['namespace']}/configmaps/"
            f"{manifests.DEVICE_PLUGIN_CONFIG_MAP}"
        )["data"][manifests.CONFIG_KEY]
        count = advertised(config, self.gpus[name]())
        if node["status"].get("allocatable", {}).get(GPU) != str(count):
            kubelet.report_devices(self.api, name, GPU, count)

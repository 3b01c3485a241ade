"""A bounded drain of one Node through the API, as `kubectl drain --ignore-daemonsets
--delete-emptydir-data` does it (k8s.io/kubectl `pkg/drain`): every pod on the Node but mirror
pods and DaemonSet pods is evicted (policy/v1 Eviction, so PodDisruptionBudgets hold), and the
drain waits until they are gone. A pod with no controller stops a drain of a Ready Node (it would
not come back), as kubectl refuses it without --force.

A Node that is not Ready has no kubelet to stop its pods or confirm it: they are deleted without
eviction and not waited for (`--force --disable-eviction --skip-wait-for-delete-timeout=1`).
The eviction answers it branches on (k8s.io/kubernetes `pkg/registry/core/pod/storage/
eviction.go`): 201 evicted, 429 a disruption budget allows none now (retried), 404 gone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from components.kube.api.client import ApiError
from components.kube.api.nodes import Api, Clock, Say

# kubectl retries a refused eviction every 5 s (pkg/drain/drain.go `evictPods`).
POLL_SECONDS = 5
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


class DrainFailed(RuntimeError):
    """The drain did not finish: the message names the pods left and why."""


def _finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _controller(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for owner in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("controller"):
            return owner
    return None


def _name(pod: Mapping[str, Any]) -> str:
    meta = pod["metadata"]
    return f"{meta['namespace']}/{meta['name']}"


def to_remove(pods: list[Mapping[str, Any]], *, force: bool) -> tuple[list, list[str]]:
    """kubectl's filters (pkg/drain/filters.go): mirror pods and running DaemonSet pods stay;
    a running pod without a controller is an error unless `force`; with `force`, pods already
    being deleted are left to finish. Returns (pods to remove, refusals)."""
    remove, refused = [], []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
            continue
        owner = _controller(pod)
        if owner is not None and owner.get("kind") == "DaemonSet" and not _finished(pod):
            continue
        if force and meta.get("deletionTimestamp"):
            continue
        if owner is None and not _finished(pod) and not force:
            refused.append(_name(pod))
            continue
        remove.append(pod)
    return remove, refused


async def pods_on(api: Api, node_name: str) -> list[dict[str, Any]]:
    answer = await api.call(
        "GET", "/api/v1/pods", query={"fieldSelector": f"spec.nodeName={node_name}"}
    )
    return list(answer.get("items") or [])


async def drain(
    api: Api, node_name: str, *, ready: bool, seconds: int, clock: Clock, say: Say
) -> None:
    """Drain `node_name` within `seconds`; DrainFailed names what is left."""
    pods, refused = to_remove(await pods_on(api, node_name), force=not ready)
    if refused:
        raise DrainFailed(
            f"Node {node_name}: pods without a controller would be lost, not moved: "
            f"{', '.join(refused)}; delete them, then run pulumi up again"
        )
    if not ready:
        for pod in pods:
            await _delete(api, pod)
        say(f"Node {node_name} is not Ready: {len(pods)} pod(s) deleted without eviction")
        return
    deadline = clock.now() + seconds
    waiting = {_name(pod): pod for pod in pods}
    evicted: set[str] = set()
    blocked: dict[str, str] = {}
    while True:
        for key, pod in waiting.items():
            if key in evicted:
                continue
            refusal = await _evict(api, pod)
            if refusal is None:
                evicted.add(key)
                blocked.pop(key, None)
            else:
                blocked[key] = refusal
        for key in sorted(evicted & waiting.keys()):
            if await _gone(api, waiting[key]):
                del waiting[key]
        if not waiting:
            say(f"Node {node_name} drained ({len(pods)} pod(s) evicted)")
            return
        if clock.now() >= deadline:
            why = "; ".join(f"{pod}: {reason}" for pod, reason in sorted(blocked.items()))
            raise DrainFailed(
                f"drain of {node_name} did not finish in {seconds}s; pods still on it: "
                f"{', '.join(sorted(waiting))}"
                + (f" (evictions refused: {why})" if why else " (evicted, not yet stopped)")
                + ". Look at 'kubectl get pdb -A' and 'kubectl get pods -A -o wide "
                f"--field-selector spec.nodeName={node_name}'"
            )
        await clock.sleep(POLL_SECONDS)


def _pod_path(pod: Mapping[str, Any]) -> str:
    meta = pod["metadata"]
    return f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"


async def _evict(api: Api, pod: Mapping[str, Any]) -> str | None:
    """None once evicted (or gone); the refusal's message while a budget holds it (429)."""
    meta = pod["metadata"]
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
    }
    try:
        await api.call("POST", _pod_path(pod) + "/eviction", body)
    except ApiError as error:
        if error.code == 404:
            return None
        if error.code == 429:
            return "; ".join([error.message, *error.causes])
        raise
    return None


async def _gone(api: Api, pod: Mapping[str, Any]) -> bool:
    """Deleted, or replaced by another pod of the same name (another uid), as kubectl's
    `waitForDelete` judges it."""
    try:
        found = await api.call("GET", _pod_path(pod))
    except ApiError as error:
        if error.code == 404:
            return True
        raise
    return found["metadata"].get("uid") != pod["metadata"].get("uid")


async def _delete(api: Api, pod: Mapping[str, Any]) -> None:
    try:
        await api.call("DELETE", _pod_path(pod))
    except ApiError as error:
        if error.code != 404:
            raise

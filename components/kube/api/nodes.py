"""The Node a machine registered, read and written through the API: found by the instance id it
carries, edited read-modify-write with its `resourceVersion`, deleted only if it is still the one
that was read.

`spec.taints` is an atomic list (`+listType=atomic`, k8s.io/api core/v1 `NodeSpec.Taints`): a
patch or an apply would replace the whole list, losing the node lifecycle controller's taints
written in between. So every write is a PUT of the whole Node as read, which the API server
refuses with 409 Conflict when anyone wrote it since (apiserver `storage.ErrCodeResourceVersion-
Conflicts`); the edit is then made again on a fresh read. The edits themselves are pure
functions of the Node (`put_in_service`, `cordon`), tested apart.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from components.kube.api.client import ApiError
from components.labels import INSTANCE_LABEL, UNPROVEN_TAINT_KEY

# What the program keeps on a Node: the labels and taints it set (to remove what it no longer
# wants, and nothing else), the roll's last completed change, and that a roll cordoned it.
LABELS_ANNOTATION = "gpu-cluster.io/managed-labels"
TAINTS_ANNOTATION = "gpu-cluster.io/managed-taints"
CHANGE_ANNOTATION = "gpu-cluster.io/node-change"
ROLL_CORDON_ANNOTATION = "gpu-cluster.io/roll-cordoned"
# A write that keeps meeting newer versions is an API server under a storm of writers.
WRITE_ATTEMPTS = 10


class Api(Protocol):
    async def call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        query: Mapping[str, str] | None = None,
    ) -> dict[str, Any]: ...


Say = Callable[[str], None]


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass(frozen=True)
class Clock:
    """Time for bounded waits (`now`, `sleep`) and for Lease times (`utc`): the real clocks, or
    a test's, which runs a wait of hours in no time."""

    now: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    utc: Callable[[], datetime.datetime] = _utc_now


def node_path(name: str) -> str:
    return f"/api/v1/nodes/{name}"


async def read_node(api: Api, name: str) -> dict[str, Any] | None:
    """The Node, or None when no Node has that name (404)."""
    try:
        return await api.call("GET", node_path(name))
    except ApiError as error:
        if error.code == 404:
            return None
        raise


def machine_of(node: Mapping[str, Any]) -> str | None:
    """The machine identity the Node carries: the end of its `spec.providerID` (aws:///<zone>/
    <instance id>, or an existing host's gpu-cluster:///host-<hex>, components/node_machine.py;
    the kubelet sets it at registration and the API server never lets it change: apiserver
    validation `ValidateNodeUpdate`), else its instance label (set by earlier releases); None
    when it has neither (registered before nodes carried one)."""
    provider = (node.get("spec") or {}).get("providerID") or ""
    if provider:
        return provider.rsplit("/", 1)[-1]
    return ((node.get("metadata") or {}).get("labels") or {}).get(INSTANCE_LABEL) or None


def registered_by(node: Mapping[str, Any], instance_id: str) -> bool:
    """The Node is the one `instance_id` registered (or carries no instance id at all: a Node
    registered before nodes carried one is taken as its machine's)."""
    owner = machine_of(node)
    return owner is None or owner == instance_id


def is_ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


async def update_node(
    api: Api, name: str, edit: Callable[[dict[str, Any]], None]
) -> dict[str, Any] | None:
    """Apply `edit` to the Node as read and PUT it with the `resourceVersion` read, again on a
    fresh read after a 409 Conflict; no write when the edit changes nothing. None when the Node
    is gone."""
    for _ in range(WRITE_ATTEMPTS):
        node = await read_node(api, name)
        if node is None:
            return None
        edited = copy.deepcopy(node)
        edit(edited)
        if edited == node:
            return node
        try:
            return await api.call("PUT", node_path(name), edited)
        except ApiError as error:
            if error.code != 409:
                raise
        await asyncio.sleep(0)
    raise RuntimeError(
        f"Node {name}: {WRITE_ATTEMPTS} writes in a row met a newer version (409 Conflict)"
    )


async def delete_node(api: Api, node: Mapping[str, Any], say: Say) -> None:
    """Delete exactly the Node that was read: its uid is the delete's precondition, so a Node
    registered again under the name since (by a new machine) is left (409)."""
    name = node["metadata"]["name"]
    body = {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "preconditions": {"uid": node["metadata"]["uid"]},
    }
    try:
        await api.call("DELETE", node_path(name), body)
    except ApiError as error:
        if error.code == 404:
            say(f"Node {name} already gone")
            return
        if error.code == 409:
            say(f"Node {name} was registered again since it was read: the new one is left")
            return
        raise
    say(f"Node {name} deleted")


# ---------------------------------------------------------------- edits (pure)


@dataclass(frozen=True)
class InService:
    """What the control plane sets on a Node it puts in service: its managed labels and taints
    (`key=value,...` and `key=value:Effect,...`, as the annotations keep them) and the roll's
    change it completed."""

    labels: str
    taints: str
    change: str


def parse_labels(text: str) -> dict[str, str]:
    pairs = (item.split("=", 1) for item in text.split(",") if item)
    return {key: value for key, value in pairs}


def parse_taints(text: str) -> list[dict[str, str]]:
    """`key=value:Effect` or `key:Effect` items as Taint objects (an empty value left out, as
    the API server stores it)."""
    found = []
    for item in text.split(","):
        if not item:
            continue
        key_value, effect = item.rsplit(":", 1)
        key, _, value = key_value.partition("=")
        taint = {"key": key, "effect": effect}
        if value:
            taint["value"] = value
        found.append(taint)
    return found


def _key_effect(taint: Mapping[str, Any]) -> tuple[str, str]:
    return (taint.get("key", ""), taint.get("effect", ""))


def put_in_service(node: dict[str, Any], wanted: InService) -> None:
    """The Node proven and steered by the control plane, in one write: its managed labels and
    taints set (those it set before and no longer wants removed, nobody else's touched), the
    proof taint off, the change recorded, and uncordoned if a roll cordoned it."""
    meta = node.setdefault("metadata", {})
    labels = meta.setdefault("labels", {})
    annotations = meta.setdefault("annotations", {})
    spec = node.setdefault("spec", {})
    want_labels = parse_labels(wanted.labels)
    for key in parse_labels(annotations.get(LABELS_ANNOTATION, "")).keys() - want_labels.keys():
        labels.pop(key, None)
    labels.update(want_labels)
    want_taints = {_key_effect(t): t for t in parse_taints(wanted.taints)}
    before = {_key_effect(t) for t in parse_taints(annotations.get(TAINTS_ANNOTATION, ""))}
    taints: list[dict[str, Any]] = []
    for taint in spec.get("taints") or []:
        key_effect = _key_effect(taint)
        if taint.get("key") == UNPROVEN_TAINT_KEY:
            continue
        if key_effect in want_taints:
            taint = _with_value(taint, want_taints.pop(key_effect).get("value"))
        elif key_effect in before:
            continue
        taints.append(taint)
    taints.extend(want_taints.values())
    if taints:
        spec["taints"] = taints
    else:
        spec.pop("taints", None)
    annotations[LABELS_ANNOTATION] = wanted.labels
    annotations[TAINTS_ANNOTATION] = wanted.taints
    annotations[CHANGE_ANNOTATION] = wanted.change
    if annotations.pop(ROLL_CORDON_ANNOTATION, None) is not None:
        spec.pop("unschedulable", None)


def _with_value(taint: dict[str, Any], value: str | None) -> dict[str, Any]:
    if taint.get("value") == value:
        return taint
    changed = {k: v for k, v in taint.items() if k != "value"}
    if value:
        changed["value"] = value
    return changed


def cordon(change: str) -> Callable[[dict[str, Any]], None]:
    """The edit that takes a Node out for `change`: unschedulable, marked as the roll's cordon
    (an operator's own cordon is never lifted by the roll)."""

    def edit(node: dict[str, Any]) -> None:
        node.setdefault("metadata", {}).setdefault("annotations", {})[ROLL_CORDON_ANNOTATION] = (
            change
        )
        node.setdefault("spec", {})["unschedulable"] = True

    return edit


def completed_change(node: Mapping[str, Any]) -> str:
    return ((node.get("metadata") or {}).get("annotations") or {}).get(CHANGE_ANNOTATION, "")

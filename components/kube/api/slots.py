"""A pool's roll slots: at most `maxUnavailable` nodes of a pool out at once, each holding one
coordination.k8s.io/v1 Lease `kube-system/gpu-cluster-slot-<pool>-<index>` (index below
maxUnavailable) whose holderIdentity is the node's name.

Taking a slot is atomic in the API server, never read-then-write: an absent Lease is created
(409 AlreadyExists when another node created it first); a released or expired one is replaced
with the resourceVersion read (409 Conflict when anyone wrote it since). A slot whose renewTime
+ leaseDurationSeconds has passed is expired and taken over, so a crashed `up` holds a pool for
one slot's duration at most. Released as client-go's leader election releases a Lease: no
holder, a 1 s duration. Why: docs/decisions/007-disruptive-steps-roll-through-a-lease.md.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from components.kube.api.client import ApiError
from components.kube.api.nodes import Api, Clock, Say

NAMESPACE = "kube-system"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
# A node waiting for a slot looks again this often.
POLL_SECONDS = 10


def lease_name(pool: str, index: int) -> str:
    return f"gpu-cluster-slot-{pool}-{index}"


@dataclass(frozen=True)
class Slots:
    """One pool's slots as one node asks for them: how many, who asks, how long a hold lasts
    and how long to wait for one (seconds)."""

    pool: str
    max_unavailable: int
    holder: str
    hold_seconds: int
    wait_seconds: int


def micro_time(moment: datetime.datetime) -> str:
    """A Lease MicroTime: RFC 3339 in UTC with microseconds (metav1.RFC3339Micro)."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _lease(name: str, holder: str, seconds: int, now: datetime.datetime, version: str = ""):
    meta: dict[str, Any] = {"name": name, "namespace": NAMESPACE}
    if version:
        meta["resourceVersion"] = version
    stamp = micro_time(now)
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": meta,
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": seconds,
            "acquireTime": stamp,
            "renewTime": stamp,
        },
    }


async def _read(api: Api, name: str) -> dict[str, Any] | None:
    try:
        return await api.call("GET", f"{LEASES}/{name}")
    except ApiError as error:
        if error.code == 404:
            return None
        raise


def _expired(lease: dict[str, Any], now: datetime.datetime) -> bool:
    spec = lease.get("spec") or {}
    renewed, seconds = spec.get("renewTime"), spec.get("leaseDurationSeconds")
    if not renewed or not isinstance(seconds, int):
        return True
    until = datetime.datetime.fromisoformat(renewed) + datetime.timedelta(seconds=seconds)
    return now > until


async def _write(api: Api, lease: dict[str, Any], *, create: bool) -> bool:
    """True when the API server took it; False when another writer came first (409)."""
    try:
        if create:
            await api.call("POST", LEASES, lease)
        else:
            await api.call("PUT", f"{LEASES}/{lease['metadata']['name']}", lease)
    except ApiError as error:
        if error.code == 409:
            return False
        raise
    return True


def _holder(lease: dict[str, Any] | None) -> str:
    return ((lease or {}).get("spec") or {}).get("holderIdentity") or ""


async def acquire(api: Api, slots: Slots, clock: Clock, say: Say) -> int:
    """The index of the slot `slots.holder` now holds: the one it held already (renewed, after
    an interrupted `up`), else a free or expired one; waits `wait_seconds` at most, then fails
    naming the holders."""
    deadline = clock.now() + slots.wait_seconds
    last = None
    while True:
        indices = range(slots.max_unavailable)
        for index in indices:
            lease = await _read(api, lease_name(slots.pool, index))
            if lease is not None and _holder(lease) == slots.holder:
                renewed = _lease(
                    lease_name(slots.pool, index),
                    slots.holder,
                    slots.hold_seconds,
                    clock.utc(),
                    lease["metadata"]["resourceVersion"],
                )
                if await _write(api, renewed, create=False):
                    say(f"slot {index} of pool {slots.pool} already held, renewed")
                    return index
        holders = []
        for index in indices:
            name = lease_name(slots.pool, index)
            lease = await _read(api, name)
            now = clock.utc()
            if lease is None or not _holder(lease) or _expired(lease, now):
                if lease is not None and _holder(lease):
                    say(f"slot {index} of pool {slots.pool}: {_holder(lease)}'s hold expired")
                version = lease["metadata"]["resourceVersion"] if lease else ""
                taken = _lease(name, slots.holder, slots.hold_seconds, now, version)
                if await _write(api, taken, create=lease is None):
                    say(f"slot {index} of pool {slots.pool} taken for {slots.hold_seconds}s")
                    return index
                lease = await _read(api, name)
            if _holder(lease):
                spec = (lease or {}).get("spec") or {}
                holders.append(f"{_holder(lease)} (slot {index}, renewed {spec.get('renewTime')})")
        if clock.now() >= deadline:
            raise RuntimeError(
                f"no free slot for {slots.holder} in pool {slots.pool} after "
                f"{slots.wait_seconds}s (maxUnavailable {slots.max_unavailable}); held by: "
                f"{', '.join(holders) or 'nobody (lost every race)'}. A hold expires on its own; "
                f"to end one now: kubectl -n {NAMESPACE} delete lease "
                f"{lease_name(slots.pool, 0).rsplit('-', 1)[0]}-<slot>"
            )
        if holders != last:
            say(f"waiting for a slot of pool {slots.pool}, held by: {', '.join(holders)}")
            last = holders
        await clock.sleep(POLL_SECONDS)


async def release(api: Api, slots: Slots, clock: Clock, say: Say) -> None:
    """Give back every slot of the pool `slots.holder` holds; one taken over by another node
    after it expired is that node's and stays."""
    released = 0
    for index in range(slots.max_unavailable):
        name = lease_name(slots.pool, index)
        while True:
            lease = await _read(api, name)
            if lease is None or _holder(lease) != slots.holder:
                break
            freed = _lease(name, "", 1, clock.utc(), lease["metadata"]["resourceVersion"])
            if await _write(api, freed, create=False):
                say(f"slot {index} of pool {slots.pool} released")
                released += 1
                break
    if not released:
        say(f"{slots.holder} holds no slot of pool {slots.pool}")

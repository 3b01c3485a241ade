"""One node's join token: a bootstrap-token Secret the program mints through the Kubernetes API
when the node must join, remembered in the state by `<node>-join-token` (a `pulumi.Stash`).

The Stash's `before_create` hook mints, so only a new machine or cluster (or `--replace`) gets
a token, and none when the cluster already has this machine's Node. The lifetime is the
program's clock at the mint plus JOIN_TOKEN_TTL, clamped by the API server's clock; the node's
clock plays no part. The value is an HMAC under the pool's own seed of the node, machine,
cluster and the run that registered it, carried from the state (`ignore_changes`), so a second
`up` and a refresh change nothing. The seed is a Stash too, of a fresh secret kept from its
create: no provider makes it. Pulumi never owns the Secret: the token cleaner deletes it.
Why: docs/decisions/057-a-join-token-is-minted-when-a-node-must-join.md
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import hashlib
import hmac
import secrets
import urllib.parse
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pulumi

from components.hosts import steps
from components.kube import manifests
from components.kube.api.client import AsyncKubeApi
from components.kube.api.nodes import registered_by
from components.kube.hook_errors import resource_hook

if TYPE_CHECKING:
    from components.kube.node_hooks import ClusterAccess

# As Holodeck mints them (pkg/provisioner/cluster.go: `kubeadm token create --ttl 2h`).
JOIN_TOKEN_TTL = datetime.timedelta(hours=2)
# The least a new token may leave its join (the join step's own bound): less means the runner's
# clock is that far behind the API server's.
MIN_LIFETIME = datetime.timedelta(seconds=steps.JOIN.timeout_seconds)
TOKEN_NAMESPACE = "kube-system"
TOKEN_TYPE = "bootstrap.kubernetes.io/token"
SECRET_PREFIX = "bootstrap-token-"
# kubeadm's group for joining nodes: its RBAC lets them post CSRs, have node certificates
# approved and read the kubeadm-config and kubelet-config ConfigMaps (kubeadm `token create`'s
# default --groups).
NODE_BOOTSTRAPPERS = "system:bootstrappers:kubeadm:default-node-token"
RFC3339 = "%Y-%m-%dT%H:%M:%SZ"
_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"

Clock = Callable[[], datetime.datetime]
Entropy = Callable[[str], str]  # a resource name -> a fresh secret for it


def system_clock() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)


_CLOCK: list[Clock] = [system_clock]


def now() -> datetime.datetime:
    """The program's clock (UTC, whole seconds): `__main__.py` reads it once per run."""
    return _CLOCK[0]()


@contextlib.contextmanager
def clock(fixed: Clock) -> Iterator[None]:
    """Runs of the program, and mints, inside read `fixed` instead (tests)."""
    _CLOCK.insert(0, fixed)
    try:
        yield
    finally:
        _CLOCK.remove(fixed)


def fresh_secret(name: str) -> str:
    """32 random bytes, hex: a seed's value when it is created (`name` plays no part)."""
    return secrets.token_hex(32)


_ENTROPY: list[Entropy] = [fresh_secret]


@contextlib.contextmanager
def entropy(fixed: Entropy) -> Iterator[None]:
    """Seeds made inside take `fixed(name)` instead of a fresh secret (tests: one value per
    name, as the mocks answer a generated key)."""
    _ENTROPY.insert(0, fixed)
    try:
        yield
    finally:
        _ENTROPY.remove(fixed)


class JoinTokenError(Exception):
    """A token that could not be minted; the message names the node and the fix, no secret."""


@dataclass(frozen=True)
class JoinToken:
    """A node's join token (`token`, id.secret, secret) and the Stash that remembers it."""

    token: pulumi.Output[str]
    record: pulumi.Stash


def seed(name: str, *, parent: pulumi.Resource) -> pulumi.Output[str]:
    """`<name>-join-token-seed`: a Stash of a fresh secret, used only as the HMAC key of join
    tokens (no SSH key is needed for them). The engine's Stash stores its input as `output` at
    create and keeps that `output` on every update and read (pulumi pkg/resource/deploy/
    builtins.go `builtinProvider.Create`, `Update`: `OldOutputs["output"]`, `Read`: the state);
    with the input ignored the next run's new secret is no change at all, so the seed is the
    one made at create until the pool is deleted (or `--replace`d)."""
    stash = pulumi.Stash(
        f"{name}-join-token-seed",
        input=pulumi.Output.secret(_ENTROPY[0](f"{name}-join-token-seed")),
        opts=pulumi.ResourceOptions(parent=parent, ignore_changes=["input"]),
    )
    return pulumi.Output.secret(stash.output)


def derive(
    seed_: str, *, node: str, machine: str, cluster: str, registered_at: str
) -> tuple[str, str]:
    """(token id, token secret): [a-z0-9]{6} and [a-z0-9]{16}, kubeadm's format, from an HMAC
    of what identifies this join under the pool's secret seed."""
    message = "\n".join(("gpu-cluster join token", node, machine, cluster, registered_at))
    digest = hmac.new(seed_.encode(), message.encode(), hashlib.sha256).digest()
    text = "".join(_ALPHABET[byte % len(_ALPHABET)] for byte in digest[:22])
    return text[:6], text[6:]


def join_token(
    name: str,
    *,
    node_name: str,
    seed_: pulumi.Input[str],
    cluster: Sequence[pulumi.Input[str]],
    machine: pulumi.Input[str],
    access: ClusterAccess,
    registered_at: datetime.datetime,
    parent: pulumi.Resource,
    after: Sequence[pulumi.Resource],
) -> JoinToken:
    """The Stash `name` of `node_name`'s token: replaced (and so minted anew) when its machine
    or `cluster` (endpoint, CA hash: the join's identity) changes, else kept as stored."""
    at = registered_at.strftime(RFC3339)

    def parts(values: list[Any]) -> tuple[str, str]:
        seed_value, machine_, *cluster_ = values
        cluster_name = "/".join(cluster_)
        return derive(
            seed_value, node=node_name, machine=machine_, cluster=cluster_name, registered_at=at
        )

    derived = pulumi.Output.all(seed_, machine, *cluster).apply(parts)
    record = pulumi.Stash(
        name,
        input={
            "node": node_name,
            "machine": machine,
            "registeredAt": at,
            "tokenId": pulumi.Output.unsecret(derived.apply(lambda d: d[0])),
            "tokenSecret": pulumi.Output.secret(derived.apply(lambda d: d[1])),
        },
        opts=pulumi.ResourceOptions(
            parent=parent,
            depends_on=list(after),
            # The program's clock and seed give another token on every run: only a new
            # record (a replacement) takes them.
            ignore_changes=["input"],
            replacement_trigger=[machine, *cluster],
            hooks=pulumi.ResourceHookBinding(before_create=[mint_hook(name, access)]),
        ),
    )
    token = record.output.apply(lambda kept: f"{kept['tokenId']}.{kept['tokenSecret']}")
    return JoinToken(token=pulumi.Output.secret(token), record=record)


def mint_hook(name: str, access: ClusterAccess) -> pulumi.ResourceHook:
    """`<record>-mint`, the record's `before_create` hook (`mint_callback`)."""
    return resource_hook(f"{name}-mint", mint_callback(access))


def mint_callback(
    access: ClusterAccess,
) -> Callable[[pulumi.ResourceHookArgs], Awaitable[None]]:
    """What `<record>-mint` runs before the record is created: the token it holds, minted with
    the credential the program holds when it runs (`access`, as the node hooks reach the API)."""

    async def mint_before_create(args: pulumi.ResourceHookArgs) -> None:
        record = await _resolved((args.new_inputs or {}).get("input"))
        minted = await mint(record, await access.api())
        pulumi.log.info(minted.summary)

    return mint_before_create


async def _resolved(value: Any) -> Any:
    """`value` with every Output in it (a hook's secrets arrive as Outputs) awaited."""
    if isinstance(value, pulumi.Output):
        return await _resolved(await value.future())
    if isinstance(value, Mapping):
        return {key: await _resolved(item) for key, item in value.items()}
    return value


@dataclass(frozen=True)
class Minted:
    """What a mint did: the expiry it wrote (None: the node was registered, nothing minted)."""

    node: str
    expires: datetime.datetime | None
    summary: str


async def mint(record: Mapping[str, str], api: AsyncKubeApi, clock_: Clock | None = None) -> Minted:
    """Mint the token `record` holds for its node, unless the cluster has the Node its machine
    registered (`nodes.registered_by`, as the node hooks judge it): GET the Node, then POST the
    Secret (an identical one already there is a mint of an earlier, interrupted run)."""
    node, machine = record["node"], record["machine"]
    look = await api.request("GET", f"/api/v1/nodes/{urllib.parse.quote(node)}")
    if look.status == 200 and registered_by(look.body, machine, record.get("registeredAt")):
        return Minted(node, None, f"{node}: registered already by {machine}, no token minted")
    if look.status not in (200, 404):
        raise JoinTokenError(
            f"{node}: cannot read its Node to tell whether it joined ({look.status} "
            f"{look.reason}: {look.message}); check the control plane's API, then pulumi up again"
        )
    expires = expiration((clock_ or now)(), look.date, node)
    secret = token_secret(record, expires)
    created = await api.request("POST", f"/api/v1/namespaces/{TOKEN_NAMESPACE}/secrets", secret)
    if created.status == 409:
        name = secret["metadata"]["name"]
        found = await api.request("GET", f"/api/v1/namespaces/{TOKEN_NAMESPACE}/secrets/{name}")
        if found.status == 200 and _same_token(found.body, secret):
            return Minted(node, expires, f"{node}: its join token was minted by an earlier run")
        raise JoinTokenError(
            f"{node}: a Secret {TOKEN_NAMESPACE}/{name} exists and is not this node's token; "
            f"delete it (kubectl -n {TOKEN_NAMESPACE} delete secret {name}), then pulumi up again"
        )
    if created.status != 201:
        raise JoinTokenError(
            f"{node}: the API refused its join token ({created.status} {created.reason}: "
            f"{created.message})"
        )
    return Minted(node, expires, f"{node}: join token minted, expires {expires:{RFC3339}}")


def expiration(
    program_now: datetime.datetime, server_now: datetime.datetime | None, node: str = "the node"
) -> datetime.datetime:
    """JOIN_TOKEN_TTL after the program's clock, never later than that after the API server's
    own (its `Date`: the token cleaner and the authenticator go by the cluster's clock). A runner
    clock so far behind that the join would have less than MIN_LIFETIME is an error."""
    reference = server_now or program_now
    start = min(program_now, reference)
    expires = (start + JOIN_TOKEN_TTL).astimezone(datetime.UTC).replace(microsecond=0)
    if expires - reference < MIN_LIFETIME:
        behind = reference - program_now
        raise JoinTokenError(
            f"{node}: this machine's clock is {behind} behind the API server's, so its join "
            f"token would expire before the join; set the clock right (NTP), then pulumi up again"
        )
    return expires


def token_secret(record: Mapping[str, str], expires: datetime.datetime) -> dict[str, Any]:
    """The Secret as `kubeadm token create` writes it (kubeadm `apis/bootstraptoken/v1`
    `BootstrapTokenToSecret`: base64 `data`, name bootstrap-token-<id>, in kube-system)."""
    data = {
        "token-id": record["tokenId"],
        "token-secret": record["tokenSecret"],
        "expiration": expires.strftime(RFC3339),
        "description": f"gpu-cluster: join of {record['node']}",
        "usage-bootstrap-authentication": "true",
        "usage-bootstrap-signing": "true",
        "auth-extra-groups": NODE_BOOTSTRAPPERS,
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": f"{SECRET_PREFIX}{record['tokenId']}",
            "namespace": TOKEN_NAMESPACE,
            "labels": dict(manifests.MANAGED_BY),
        },
        "type": TOKEN_TYPE,
        "data": {key: base64.b64encode(value.encode()).decode() for key, value in data.items()},
    }


def _same_token(found: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    data, ours = found.get("data") or {}, wanted["data"]
    return found.get("type") == TOKEN_TYPE and all(
        data.get(key) == ours[key] for key in ("token-id", "token-secret")
    )

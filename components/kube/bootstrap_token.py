"""One node's join token: a `bootstrap.kubernetes.io/token` Secret through the Kubernetes API,
as `kubeadm token create` writes one, with an expiry.

The token is derived (HMAC-SHA256) from the stack's SSH private key, the cluster, the machine and
the time its kube tools were ready, and expires JOIN_TOKEN_TTL after that time, which the
kube-tools step reports: stable from one `up` to the next, fresh for a new machine, a new cluster
or kube tools that ran again. Once expired, kube-controller-manager's token cleaner deletes it.
Why: docs/decisions/025-a-join-token-lives-two-hours.md.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pydantic import SecretStr

from components.kube import manifests

# As Holodeck mints them (pkg/provisioner/cluster.go: `kubeadm token create --ttl 2h`); a node
# joins minutes after its kube tools are ready.
JOIN_TOKEN_TTL = datetime.timedelta(hours=2)
TOKEN_NAMESPACE = "kube-system"
TOKEN_TYPE = "bootstrap.kubernetes.io/token"
# kubeadm's group for joining nodes: its RBAC lets them post CSRs, have node certificates
# approved and read the kubeadm-config and kubelet-config ConfigMaps (kubeadm `token create`'s
# default --groups).
NODE_BOOTSTRAPPERS = "system:bootstrappers:kubeadm:default-node-token"
_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
READY_KEY = "readyToJoinAt"
# The expiry again, in the clear (the Secret's data is secret in the state): the drift check
# leaves out tokens past it (tools/drift.py), which the token cleaner deletes by design.
EXPIRES_ANNOTATION = "gpu-cluster.io/expires"


@dataclass(frozen=True)
class JoinToken:
    """A node's bootstrap token: `token` (id.secret, secret), its public `token_id`, when it
    expires, and the Secret that holds it."""

    token: pulumi.Output[str]
    token_id: pulumi.Output[str]
    expiration: pulumi.Output[str]
    secret: k8s.core.v1.Secret


def derive(seed: str, *, cluster: str, machine: str, ready_at: str) -> tuple[str, str]:
    """(token id, token secret): [a-z0-9]{6} and [a-z0-9]{16}, kubeadm's format, from an HMAC of
    what identifies this join under the stack's secret `seed`."""
    message = "\n".join(("gpu-cluster join token", cluster, machine, ready_at)).encode()
    digest = hmac.new(seed.encode(), message, hashlib.sha256).digest()
    text = "".join(_ALPHABET[byte % len(_ALPHABET)] for byte in digest[:22])
    return text[:6], text[6:]


def ready_at(stdout: str) -> str:
    """The time install-kube-tools.sh reports, from its last JSON line on stdout."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            value = json.loads(line).get(READY_KEY)
            if isinstance(value, str):
                return value
    raise ValueError(f"install-kube-tools.sh printed no {{{READY_KEY!r}: ...}} line")


def expiration(ready: str) -> str:
    """RFC 3339 (UTC) JOIN_TOKEN_TTL after `ready`, as the token cleaner reads it."""
    start = datetime.datetime.strptime(ready, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    return (start + JOIN_TOKEN_TTL).strftime("%Y-%m-%dT%H:%M:%SZ")


def join_token(
    name: str,
    *,
    node_name: str,
    seed: SecretStr,
    cluster: pulumi.Input[str],
    machine: pulumi.Input[str],
    kube_tools_stdout: pulumi.Input[str],
    provider: k8s.Provider,
    parent: pulumi.Resource,
    after: list[pulumi.Resource],
) -> JoinToken:
    """The Secret `name` of `node_name`'s join token, through `provider`."""

    def parts(values: list[Any]) -> dict[str, str]:
        cluster_, machine_, stdout = values
        ready = ready_at(stdout)
        token_id, token_secret = derive(
            seed.get_secret_value(), cluster=cluster_, machine=machine_, ready_at=ready
        )
        return {"id": token_id, "secret": token_secret, "expiration": expiration(ready)}

    derived = pulumi.Output.all(cluster, machine, kube_tools_stdout).apply(parts)
    token_id = pulumi.Output.unsecret(derived.apply(lambda d: d["id"]))
    secret = k8s.core.v1.Secret(
        name,
        metadata={
            "name": token_id.apply(lambda i: f"bootstrap-token-{i}"),
            "namespace": TOKEN_NAMESPACE,
            "labels": dict(manifests.MANAGED_BY),
            "annotations": {
                EXPIRES_ANNOTATION: pulumi.Output.unsecret(derived.apply(lambda d: d["expiration"]))
            },
        },
        type=TOKEN_TYPE,
        string_data=pulumi.Output.secret(
            derived.apply(
                lambda d: {
                    "token-id": d["id"],
                    "token-secret": d["secret"],
                    "expiration": d["expiration"],
                    "description": f"gpu-cluster: join of {node_name}",
                    "usage-bootstrap-authentication": "true",
                    "usage-bootstrap-signing": "true",
                    "auth-extra-groups": NODE_BOOTSTRAPPERS,
                }
            )
        ),
        opts=pulumi.ResourceOptions(
            parent=parent,
            provider=provider,
            depends_on=after,
            additional_secret_outputs=["data", "stringData"],
        ),
    )
    return JoinToken(
        token=pulumi.Output.secret(derived.apply(lambda d: f"{d['id']}.{d['secret']}")),
        token_id=token_id,
        expiration=derived.apply(lambda d: d["expiration"]),
        secret=secret,
    )

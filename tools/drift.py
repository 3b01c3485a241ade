"""What the cluster (and AWS) delete or write on their own, so that neither a refresh nor the
scheduled drift check takes it for drift.

`python -m tools.drift state.json` reads a stack's `pulumi stack export` and prints one
`--exclude=<URN>` line per resource gone by design, for `pulumi preview --refresh
--expect-no-changes`. `owned_by_cluster` says why a registered resource is the cluster's to delete
or rewrite: the program registers none (tests/test_join_token.py), so a refresh of its state
changes nothing; what earlier releases registered (bootstrap-token Secrets) is still recognised
in their states. `refreshed` is that state after `pulumi refresh` at a given time.
Why: docs/decisions/040-drift-is-looked-for-daily.md, docs/decisions/
057-a-join-token-is-minted-when-a-node-must-join.md
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import datetime
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

SECRET = "kubernetes:core/v1:Secret"
JOB = "kubernetes:batch/v1:Job"
INSTANCE = "aws:ec2/instance:Instance"
TOKEN_TYPE = "bootstrap.kubernetes.io/token"
# The expiry the join-token Secrets of earlier releases carried in the clear.
EXPIRES_ANNOTATION = "gpu-cluster.io/expires"
# A Job's pod-template labels and selector that kube-apiserver writes itself
# (pkg/registry/batch/job/strategy.go `generateSelector`).
JOB_GENERATED_LABELS = frozenset(
    {
        "batch.kubernetes.io/controller-uid",
        "controller-uid",
        "batch.kubernetes.io/job-name",
        "job-name",
    }
)

# Objects the cluster creates and deletes itself: a registered one would drift by design.
# Kind: (who owns it, source).
CLUSTER_KINDS: Mapping[str, str] = {
    "kubernetes:core/v1:Node": "the kubelet registers it and controllers write its status, "
    "taints and labels (pkg/controller/nodelifecycle, NFD, GFD)",
    "kubernetes:coordination.k8s.io/v1:Lease": "kubelets renew their Lease every 10 s "
    "(pkg/kubelet/nodelease); the roll's slots are the roll scripts'",
    "kubernetes:core/v1:Pod": "controllers own them; the pod GC deletes finished ones "
    "(pkg/controller/podgc)",
    "kubernetes:core/v1:Event": "kube-apiserver deletes them after --event-ttl (1 h)",
    "kubernetes:events.k8s.io/v1:Event": "kube-apiserver deletes them after --event-ttl (1 h)",
    "kubernetes:certificates.k8s.io/v1:CertificateSigningRequest": "the CSR cleaner deletes "
    "them (pkg/controller/certificates/cleaner: decided after 1 h, pending after 24 h)",
    "kubernetes:discovery.k8s.io/v1:EndpointSlice": "the EndpointSlice controller writes them",
    "kubernetes:core/v1:Endpoints": "the Endpoints controller writes them",
}


def _props(resource: Mapping[str, Any]) -> dict[str, Any]:
    return {**(resource.get("inputs") or {}), **(resource.get("outputs") or {})}


def token_expiry(resource: Mapping[str, Any]) -> datetime.datetime | None:
    """A bootstrap-token Secret's expiry as its state shows it in the clear (the annotation of
    earlier releases, or a plain `data`/`stringData` expiration); None when unknown."""
    props = _props(resource)
    if resource.get("type") != SECRET or props.get("type") != TOKEN_TYPE:
        return None
    annotations = (props.get("metadata") or {}).get("annotations") or {}
    texts = [annotations.get(EXPIRES_ANNOTATION), (props.get("stringData") or {}).get("expiration")]
    encoded = (props.get("data") or {}).get("expiration")
    if isinstance(encoded, str):
        with contextlib.suppress(binascii.Error, UnicodeDecodeError):
            texts.append(base64.b64decode(encoded, validate=True).decode())
    for text in texts:
        if not isinstance(text, str):
            continue
        try:
            when = datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ")
        except ValueError:
            continue
        return when.replace(tzinfo=datetime.UTC)
    return None


def owned_by_cluster(resource: Mapping[str, Any], now: datetime.datetime) -> str | None:
    """Why the cluster deletes or rewrites this registered resource on its own by `now`
    (None: it does not, and a refresh of it finds what the program set)."""
    kind, props = resource.get("type"), _props(resource)
    if kind in CLUSTER_KINDS:
        return CLUSTER_KINDS[str(kind)]
    if kind == SECRET and props.get("type") == TOKEN_TYPE:
        expiry = token_expiry(resource)
        if expiry is None:
            return None  # no known expiry: checked like everything else
        if expiry <= now:
            return (
                "kube-controller-manager's token cleaner deletes an expired bootstrap token "
                "(pkg/controller/bootstrap/tokencleaner.go evalSecret)"
            )
        return None
    if kind == JOB:
        spec = props.get("spec") or {}
        if spec.get("ttlSecondsAfterFinished") is not None:
            return (
                "the TTL-after-finished controller deletes the finished Job "
                "(pkg/controller/ttlafterfinished)"
            )
        template = (spec.get("template") or {}).get("metadata") or {}
        written = sorted(JOB_GENERATED_LABELS & set(template.get("labels") or {}))
        if written or "selector" in spec:
            return (
                "kube-apiserver writes a Job's selector and its pod labels "
                f"{', '.join(written) or 'controller-uid'} (batch/job strategy.go generateSelector)"
            )
    return None


def _one_shot(resource: Mapping[str, Any]) -> bool:
    inputs = resource.get("inputs") or {}
    return (
        resource.get("type") == INSTANCE
        and inputs.get("instanceInitiatedShutdownBehavior") == "terminate"
    )


def excluded(
    resources: Iterable[Mapping[str, Any]], now: datetime.datetime | None = None
) -> list[str]:
    """The URNs the drift check leaves out, in state order: what the cluster deleted by `now`
    on its own, and one-shot image builders (they power off, and so terminate, once their image
    is made)."""
    now = now or datetime.datetime.now(datetime.UTC)
    return [
        str(resource["urn"])
        for resource in resources
        if _one_shot(resource) or owned_by_cluster(resource, now) is not None
    ]


def refreshed(
    resources: Iterable[Mapping[str, Any]], now: datetime.datetime
) -> list[Mapping[str, Any]]:
    """The resources `pulumi refresh` at `now` keeps: a Kubernetes object the cluster deleted
    reads as not found, which pulumi-kubernetes answers with an empty id (provider.go `Read`,
    `deleteResponse`) and the engine drops (step.go `RefreshStep.Apply`: "If the ID is blank
    treat this as a delete"). The rest keep their state: a Stash (builtins.go `Read`), a tls
    key (terraform-provider-tls: Read is a no-op) and a Command (pulumi-command has no Read:
    pulumi-go-provider infer/resource.go returns the state as is)."""
    return [
        resource
        for resource in resources
        if not (
            str(resource.get("type", "")).startswith("kubernetes:")
            and owned_by_cluster(resource, now) is not None
        )
    ]


def state_resources(export: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The resources of a `pulumi stack export` (deployment version 3)."""
    return list((export.get("deployment") or {}).get("resources") or [])


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print(
            "usage: python -m tools.drift STATE.json (from `pulumi stack export`)", file=sys.stderr
        )
        return 2
    export = json.loads(Path(args[0]).read_text())
    for urn in excluded(state_resources(export)):
        print(f"--exclude={urn}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

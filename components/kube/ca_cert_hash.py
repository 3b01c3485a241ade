"""The cluster's CA hash that `kubeadm join` pins (`--discovery-token-ca-cert-hash`): read from
the line read-kubeconfig.sh ends the admin kubeconfig with, and kept by `<cluster>-ca-cert-hash`
(a Stash) so a preview knows it while the kubeconfig step re-runs. Why:
docs/decisions/066-the-cas-hash-is-known-in-a-preview.md.
"""

from __future__ import annotations

import pulumi

# The line read-kubeconfig.sh ends the kubeconfig with: the CA public key's hash nodes pin.
CA_HASH_PREFIX = "# ca-cert-hash: "


def kept(
    cluster: str,
    kubeconfig: pulumi.Output[str],
    cluster_identifier: pulumi.Input[str],
    *,
    parent: pulumi.Resource,
) -> pulumi.Output[str]:
    """The CA hash the kubeconfig step read when the cluster was first seen, kept by
    `<cluster>-ca-cert-hash` (a Stash, `input` ignored after create) until the cluster's
    identity changes. The kubeconfig step re-runs on each renewal, and then its stdout is
    unknown in a preview (pulumi-go-provider `markComputed`): read from it, every join
    would show as replaced (an unknown trigger counts as changed, pulumi step_generator.go
    `shouldTriggerReplace`)."""
    record = pulumi.Stash(
        f"{cluster}-ca-cert-hash",
        input=pulumi.Output.unsecret(kubeconfig.apply(parse_ca_cert_hash)),
        opts=pulumi.ResourceOptions(
            parent=parent,
            ignore_changes=["input"],
            replacement_trigger=cluster_identifier,
        ),
    )
    return pulumi.Output.unsecret(record.output)


def parse_ca_cert_hash(kubeconfig: str) -> str:
    """The `sha256:<hex>` read-kubeconfig.sh writes after the kubeconfig. Errors never include
    the kubeconfig: it holds the admin's key."""
    for line in reversed(kubeconfig.splitlines()):
        if line.startswith(CA_HASH_PREFIX):
            value = line.removeprefix(CA_HASH_PREFIX).strip()
            if value.startswith("sha256:") and len(value) == len("sha256:") + 64:
                return value
    raise ValueError(
        "read-kubeconfig.sh printed no '# ca-cert-hash: sha256:<64 hex>' line (output not shown)"
    )

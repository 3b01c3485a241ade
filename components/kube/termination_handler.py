"""SpotTerminationHandler: the AWS Node Termination Handler (IMDS mode) on the nodes of spot
pools, so a spot node is cordoned and drained on its two-minute interruption notice instead of
vanishing under its pods (components/kube/termination_handler_manifests.py). Registered only
when a pool is `market: spot`; like the device plugin it depends on the Kubernetes provider
only, so each spot node gets its pod as it joins. The machine AWS then terminates is recovered
with `pulumi up --refresh` (docs/day-two.md). Why:
docs/decisions/034-spot-nodes-drain-on-the-interruption-notice.md
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.kube import termination_handler_manifests as manifests
from components.kube.manifests import BACKGROUND_DELETION, MANAGED_BY


@dataclass(frozen=True)
class SpotTerminationHandlerArgs:
    """The spot pools' names, the image (by digest when configured), the namespace (the device
    plugin's, Pod Security `privileged`), the cluster's provider."""

    spot_pools: Sequence[str]
    namespace: pulumi.Input[str]
    image: str
    provider: k8s.Provider


class SpotTerminationHandler(pulumi.ComponentResource):
    daemon_set: k8s.apps.v1.DaemonSet

    def __init__(
        self,
        name: str,
        args: SpotTerminationHandlerArgs,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("gpu-cluster:index:SpotTerminationHandler", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        metadata = {
            "name": manifests.NAME,
            "namespace": args.namespace,
            "labels": {**manifests.labels(), **MANAGED_BY},
        }
        account = k8s.core.v1.ServiceAccount(f"{name}-account", metadata=metadata, opts=child)
        cluster_wide = {"name": manifests.NAME, "labels": metadata["labels"]}
        role = k8s.rbac.v1.ClusterRole(
            f"{name}-role", metadata=cluster_wide, rules=manifests.cluster_role_rules(), opts=child
        )
        binding = k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-binding",
            metadata=cluster_wide,
            role_ref={
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role.metadata.name,
            },
            subjects=[
                {
                    "kind": "ServiceAccount",
                    "name": account.metadata.name,
                    "namespace": account.metadata.namespace,
                }
            ],
            opts=child,
        )
        self.daemon_set = k8s.apps.v1.DaemonSet(
            f"{name}-daemonset",
            metadata={**metadata, "annotations": BACKGROUND_DELETION},
            spec=manifests.daemon_set_spec(args.spot_pools, args.image),
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[binding])),
        )
        self.register_outputs({})


def handler_image(configured: str | None) -> str:
    """The configured image (pinned by digest), else upstream's tag, with a warning on every
    preview and up: what runs on the nodes is pinned by digest (DESIGN, trust boundaries)."""
    if configured is not None:
        return configured
    pulumi.log.warn(
        f"gpu-cluster:nodeTerminationHandler.image is not set: the spot pools' termination "
        f"handler runs {manifests.IMAGE} by tag. Pin it by digest: pulumi config set --path "
        f"'gpu-cluster:nodeTerminationHandler.image' '{manifests.IMAGE}@sha256:<digest>' (the "
        f"digest: crane digest {manifests.IMAGE}, or docker buildx imagetools inspect)."
    )
    return manifests.IMAGE

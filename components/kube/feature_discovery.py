"""GpuFeatureDiscovery: node labels that describe each GPU node's GPUs (`nvidia.com/gpu.product`,
`nvidia.com/gpu.memory`, `nvidia.com/gpu.count`, ...), for schedulers and dashboards.

GPU Feature Discovery runs at the device plugin's release, in its namespace, with its config;
the NFD master and the NFD API turn what it finds into labels
(components/kube/feature_discovery_manifests.py says what comes from where). Like the device
plugin, everything here depends on the Kubernetes provider only, never on a GPU node: each node
is labelled as it joins. `featureDiscovery.enabled: false` leaves it all out (a cluster that
already runs NFD).

Why: docs/decisions/013-gpu-feature-discovery-through-the-nodefeature-api.md
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.kube import feature_discovery_manifests as manifests
from components.kube.manifests import BACKGROUND_DELETION, MANAGED_BY
from components.settings import DevicePlugin, Taint


@dataclass(frozen=True)
class GpuFeatureDiscoveryArgs:
    """`device_plugin`: the devicePlugin section (GFD's release and config). `namespace`: the
    device plugin's. `pool_taints`: the taints of all node pools."""

    device_plugin: DevicePlugin
    namespace: pulumi.Input[str]
    provider: k8s.Provider
    pool_taints: tuple[Taint, ...]


class GpuFeatureDiscovery(pulumi.ComponentResource):
    """Outputs: `daemon_set` (GFD) and `master` (the NFD master Deployment)."""

    daemon_set: k8s.apps.v1.DaemonSet
    master: k8s.apps.v1.Deployment

    def __init__(
        self, name: str, args: GpuFeatureDiscoveryArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("gpu-cluster:index:GpuFeatureDiscovery", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        crds = [
            k8s.apiextensions.v1.CustomResourceDefinition(
                f"{name}-{plural}",
                metadata={"name": f"{plural}.{manifests.NFD_GROUP}", "labels": MANAGED_BY},
                spec=manifests.nfd_crd_spec(kind, plural, scope, status),
                opts=child,
            )
            for kind, plural, scope, status in manifests.NFD_KINDS
        ]
        after_crds = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=crds))
        self.master = self._master(name, args, child, after_crds)
        policy = self._nodefeature_policy(name, child)
        self.daemon_set = self._gfd(
            name, args, child, pulumi.ResourceOptions.merge(after_crds, policy)
        )
        self.register_outputs({"daemonSet": self.daemon_set.metadata.name})

    def _master(
        self,
        name: str,
        args: GpuFeatureDiscoveryArgs,
        child: pulumi.ResourceOptions,
        after_crds: pulumi.ResourceOptions,
    ) -> k8s.apps.v1.Deployment:
        namespace = k8s.core.v1.Namespace(
            f"{name}-nfd-namespace", metadata=manifests.nfd_namespace(), opts=child
        )
        metadata = {
            "name": manifests.NFD_MASTER_NAME,
            "namespace": namespace.metadata.name,
            "labels": {**manifests.nfd_master_labels(), **MANAGED_BY},
        }
        account = k8s.core.v1.ServiceAccount(
            f"{name}-nfd-master-account",
            metadata=metadata,
            opts=child,
        )
        role = k8s.rbac.v1.ClusterRole(
            f"{name}-nfd-master-role",
            metadata={"name": f"gpu-cluster-{manifests.NFD_MASTER_NAME}", "labels": MANAGED_BY},
            rules=manifests.nfd_master_rules(),
            opts=child,
        )
        binding = k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-nfd-master-binding",
            metadata={"name": f"gpu-cluster-{manifests.NFD_MASTER_NAME}", "labels": MANAGED_BY},
            role_ref={
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role.metadata.name,
            },
            subjects=[
                {
                    "kind": "ServiceAccount",
                    "name": account.metadata.name,
                    "namespace": namespace.metadata.name,
                }
            ],
            opts=child,
        )
        return k8s.apps.v1.Deployment(
            f"{name}-nfd-master",
            metadata=metadata,
            spec=manifests.nfd_master_deployment_spec(),
            opts=pulumi.ResourceOptions.merge(
                after_crds, pulumi.ResourceOptions(depends_on=[binding])
            ),
        )

    def _nodefeature_policy(
        self, name: str, child: pulumi.ResourceOptions
    ) -> pulumi.ResourceOptions:
        """The policy that keeps each GFD pod to its own node's NodeFeature object, and its
        binding: GFD starts after both (ResourceOptions to depend on them)."""
        policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
            f"{name}-nodefeature-policy",
            metadata={"name": manifests.NODEFEATURE_POLICY, "labels": MANAGED_BY},
            spec=manifests.nodefeature_policy(),
            opts=child,
        )
        binding = k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
            f"{name}-nodefeature-policy-binding",
            metadata={"name": manifests.NODEFEATURE_POLICY, "labels": MANAGED_BY},
            spec=manifests.nodefeature_policy_binding(),
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[policy])),
        )
        return pulumi.ResourceOptions(depends_on=[policy, binding])

    def _gfd(
        self,
        name: str,
        args: GpuFeatureDiscoveryArgs,
        child: pulumi.ResourceOptions,
        after_crds: pulumi.ResourceOptions,
    ) -> k8s.apps.v1.DaemonSet:
        metadata = {
            "name": manifests.GFD_NAME,
            "namespace": args.namespace,
            "labels": {**manifests.gfd_labels(), **MANAGED_BY},
        }
        account = k8s.core.v1.ServiceAccount(f"{name}-account", metadata=metadata, opts=child)
        role = k8s.rbac.v1.Role(
            f"{name}-role", metadata=metadata, rules=manifests.gfd_rules(), opts=child
        )
        binding = k8s.rbac.v1.RoleBinding(
            f"{name}-binding",
            metadata=metadata,
            role_ref={
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": role.metadata.name,
            },
            subjects=[
                {
                    "kind": "ServiceAccount",
                    "name": account.metadata.name,
                    "namespace": args.namespace,
                }
            ],
            opts=child,
        )
        return k8s.apps.v1.DaemonSet(
            f"{name}-daemonset",
            metadata={**metadata, "annotations": BACKGROUND_DELETION},
            spec=manifests.gfd_daemon_set_spec(args.device_plugin, pool_taints=args.pool_taints),
            opts=pulumi.ResourceOptions.merge(
                after_crds, pulumi.ResourceOptions(depends_on=[binding])
            ),
        )

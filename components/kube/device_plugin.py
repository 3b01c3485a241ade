"""NvidiaDevicePlugin: the DaemonSet that turns a joined GPU node into allocatable nvidia.com/gpu.

It depends on the Kubernetes provider only, never on a GPU node: with no GPU node joined yet the
DaemonSet wants zero pods and is ready at once (pulumi-kubernetes awaits the rollout), and each
node gets its plugin pod as soon as it joins with the GPU label. So node chains run in parallel
and every node's validation waits for the DaemonSet, not for the other nodes.

It also creates the `gpu-validation` namespace the per-node validation Jobs run in: one namespace
for all nodes, that (like the DaemonSet) needs only the provider.

Why: docs/decisions/014-gpu-validation-is-a-capacity-wait-and-an-awaited-job.md
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.kube import manifests
from components.settings import DevicePlugin, Taint


@dataclass(frozen=True)
class NvidiaDevicePluginArgs:
    """`settings`: the devicePlugin section. `provider`: the cluster's Kubernetes provider.
    `pool_taints`: the taints of all node pools. The plugin tolerates the GPU taint and each of
    these, else it would never land on a pool with an extra taint; when they are not given it
    tolerates every taint (it still runs only on nodes with the GPU label)."""

    settings: DevicePlugin
    provider: k8s.Provider
    pool_taints: tuple[Taint, ...] | None = None


class NvidiaDevicePlugin(pulumi.ComponentResource):
    """Outputs: `namespace`, `config_map` (plugin config: MIG strategy, time slicing),
    `daemon_set` (what a node's validation waits for) and `validation_namespace` (where the
    per-node validation Jobs run)."""

    namespace: k8s.core.v1.Namespace
    config_map: k8s.core.v1.ConfigMap
    daemon_set: k8s.apps.v1.DaemonSet
    validation_namespace: k8s.core.v1.Namespace

    def __init__(
        self,
        name: str,
        args: NvidiaDevicePluginArgs,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("gpu-cluster:index:NvidiaDevicePlugin", name, None, opts)
        settings, pool_taints = args.settings, args.pool_taints
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)

        self.namespace = k8s.core.v1.Namespace(
            f"{name}-namespace", metadata=manifests.device_plugin_namespace(), opts=child
        )
        namespace_name = self.namespace.metadata.name
        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-config",
            metadata={"name": manifests.DEVICE_PLUGIN_CONFIG_MAP, "namespace": namespace_name},
            data=manifests.device_plugin_config_map_data(settings),
            opts=child,
        )
        self.daemon_set = k8s.apps.v1.DaemonSet(
            f"{name}-daemonset",
            metadata={
                "name": manifests.DEVICE_PLUGIN_NAME,
                "namespace": namespace_name,
                "labels": {**manifests.device_plugin_labels(), **manifests.MANAGED_BY},
                "annotations": manifests.BACKGROUND_DELETION,
            },
            spec=manifests.device_plugin_daemon_set_spec(settings, pool_taints=pool_taints),
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=[self.config_map])
            ),
        )
        self.validation_namespace = k8s.core.v1.Namespace(
            f"{name}-validation-namespace",
            metadata=manifests.validation_namespace(),
            opts=child,
        )
        self.register_outputs(
            {
                "namespace": namespace_name,
                "image": manifests.device_plugin_image(settings),
                "daemonSet": self.daemon_set.metadata.name,
            }
        )

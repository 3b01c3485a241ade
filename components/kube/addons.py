"""GpuNodeAddons: the DaemonSets every GPU node gets besides the NVIDIA device plugin.

- `<name>-efa-device-plugin`: the AWS EFA device plugin, on EFA nodes only, so pods can request
  `vpc.amazonaws.com/efa` (created only when some pool uses EFA).
- `<name>-dcgm-exporter` + `-service` (+ `-service-monitor` with dcgmExporter.serviceMonitor):
  GPU metrics for Prometheus on every GPU node (dcgmExporter.enabled: false turns them off).

Like the device plugin they depend on the Kubernetes provider and the add-on namespace only,
never on a GPU node: each node gets its pods as it joins. They share the device plugin's
namespace, whose Pod Security level is already `privileged` (both need host paths). The
manifests and their sources: docs/decisions/012-manifests-follow-upstream-with-named-changes.md
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.kube import addon_manifests as manifests
from components.kube.manifests import BACKGROUND_DELETION, MANAGED_BY
from components.settings import DcgmExporter, Taint


@dataclass(frozen=True)
class GpuNodeAddonsArgs:
    """`namespace`: the device plugin's (Pod Security `privileged`). `efa`: some pool uses EFA.
    `pool_taints`: the taints of all node pools, tolerated like the device plugin does."""

    namespace: pulumi.Input[str]
    provider: k8s.Provider
    efa: bool
    dcgm_exporter: DcgmExporter
    pool_taints: tuple[Taint, ...]


class GpuNodeAddons(pulumi.ComponentResource):
    efa_device_plugin: k8s.apps.v1.DaemonSet | None
    dcgm_exporter: k8s.apps.v1.DaemonSet | None

    def __init__(
        self, name: str, args: GpuNodeAddonsArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("gpu-cluster:index:GpuNodeAddons", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        namespace, dcgm_exporter = args.namespace, args.dcgm_exporter
        taints = list(args.pool_taints)
        self.efa_device_plugin = None
        self.dcgm_exporter = None
        if args.efa:
            self.efa_device_plugin = k8s.apps.v1.DaemonSet(
                f"{name}-efa-device-plugin",
                metadata={
                    "name": manifests.EFA_PLUGIN_NAME,
                    "namespace": namespace,
                    "labels": {**manifests.efa_plugin_labels(), **MANAGED_BY},
                    "annotations": BACKGROUND_DELETION,
                },
                spec=manifests.efa_plugin_daemon_set_spec(pool_taints=taints),
                opts=child,
            )
        if dcgm_exporter.enabled:
            metadata = {
                "name": manifests.DCGM_EXPORTER_NAME,
                "namespace": namespace,
                "labels": {**manifests.dcgm_exporter_labels(), **MANAGED_BY},
            }
            self.dcgm_exporter = k8s.apps.v1.DaemonSet(
                f"{name}-dcgm-exporter",
                metadata={**metadata, "annotations": BACKGROUND_DELETION},
                spec=manifests.dcgm_exporter_daemon_set_spec(dcgm_exporter, pool_taints=taints),
                opts=child,
            )
            k8s.core.v1.Service(
                f"{name}-dcgm-exporter-service",
                metadata=metadata,
                spec=manifests.dcgm_exporter_service_spec(),
                opts=child,
            )
            if dcgm_exporter.service_monitor:
                k8s.apiextensions.CustomResource(
                    f"{name}-dcgm-exporter-service-monitor",
                    api_version=manifests.SERVICE_MONITOR_API_VERSION,
                    kind="ServiceMonitor",
                    metadata=metadata,
                    spec=manifests.dcgm_exporter_service_monitor_spec(),
                    opts=child,
                )
        self.register_outputs({})

"""gpu-cluster: AWS GPU machines -> joined Kubernetes nodes -> allocatable, validated GPUs.

Load the settings (bad config stops here, before any resource), wire the components in the
order of the chain, export what operators need.
"""

import pulumi

from components.aws.network import Network, NetworkArgs
from components.control_plane import ControlPlane, ControlPlaneArgs
from components.gpu_node import NVIDIA_CTK_VERSION, GpuNodePool, GpuNodePoolArgs
from components.images.control_plane_image import baked_control_plane_image
from components.images.gpu_image import baked_images
from components.kube import bootstrap_token
from components.kube.addons import GpuNodeAddons, GpuNodeAddonsArgs
from components.kube.device_plugin import NvidiaDevicePlugin, NvidiaDevicePluginArgs
from components.kube.feature_discovery import GpuFeatureDiscovery, GpuFeatureDiscoveryArgs
from components.kube.nccl_efa_validation import (
    NcclEfaValidation,
    NcclEfaValidationArgs,
    needs_efa_check,
)
from components.kube.nccl_validation import NcclValidation, NcclValidationArgs, needs_nccl_check
from components.kube.node_guard import NodeGuard, NodeGuardArgs
from components.kube.node_hooks import ClusterAccess, NodeHooks
from components.kube.termination_handler import (
    SpotTerminationHandler,
    SpotTerminationHandlerArgs,
    handler_image,
)
from components.kube.validation import validation_job
from components.node_inputs import install_steps
from components.settings.control_plane_size import warn_unchecked_size
from components.settings.load import load_settings

settings = load_settings()
# The program's clock, read once: a join token registered in this run is identified by it, and
# the control plane's certificates are checked once per renewal period it falls in.
run_at = bootstrap_token.now()
# A control plane whose size the sizing table cannot check: said on every preview and up.
warn_unchecked_size(settings)

# A stack that launches no EC2 machine (an existing control plane, pools of existing hosts) has
# no network of its own: it registers no AWS resource and calls no AWS API.
network = Network("network", NetworkArgs.of(settings)) if settings.launches_machines else None
control_plane = ControlPlane(
    settings.cluster_name,
    ControlPlaneArgs.of(
        settings,
        network,
        run_at=run_at,
        image_ami=baked_control_plane_image(settings, network),
    ),
)
device_plugin = NvidiaDevicePlugin(
    "nvidia-device-plugin",
    NvidiaDevicePluginArgs(
        settings=settings.device_plugin,
        provider=control_plane.provider,
        pool_taints=tuple(taint for pool in settings.node_pools for taint in pool.taints),
    ),
)
GpuNodeAddons(
    "gpu-node-addons",
    GpuNodeAddonsArgs(
        namespace=device_plugin.namespace.metadata.name,
        provider=control_plane.provider,
        efa=any(pool.uses_efa for pool in settings.node_pools),
        dcgm_exporter=settings.dcgm_exporter,
        pool_taints=tuple(taint for pool in settings.node_pools for taint in pool.taints),
    ),
)
spot_pools = [pool.name for pool in settings.instance_pools if pool.market == "spot" and pool.count]
if spot_pools:
    # Spot nodes are cordoned and drained on their two-minute interruption notice.
    SpotTerminationHandler(
        "spot-termination-handler",
        SpotTerminationHandlerArgs(
            spot_pools=spot_pools,
            namespace=device_plugin.namespace.metadata.name,
            image=handler_image(settings.node_termination_handler.image),
            provider=control_plane.provider,
        ),
    )
if settings.feature_discovery.enabled:
    GpuFeatureDiscovery(
        "gpu-feature-discovery",
        GpuFeatureDiscoveryArgs(
            device_plugin=settings.device_plugin,
            namespace=device_plugin.namespace.metadata.name,
            provider=control_plane.provider,
            pool_taints=tuple(taint for pool in settings.node_pools for taint in pool.taints),
        ),
    )
# The nodes' hooks (and the join tokens' mints) act through the API with the credential the
# program holds when they run; they are registered on every run, with or without nodes, so that
# a delete finds them by name.
node_hooks = NodeHooks(
    ClusterAccess(kubeconfig=control_plane.kubeconfig, unreachable=control_plane.unreachable)
)
# No node may write the labels that steer workloads, lift its proof taint or remove itself.
node_guard = NodeGuard(
    "gpu-node-guard", NodeGuardArgs.of(settings, provider=control_plane.provider)
)
images = (
    baked_images(
        settings, network, install_steps=install_steps, container_toolkit=NVIDIA_CTK_VERSION
    )
    if network is not None
    else {}
)
pools = [
    GpuNodePool(
        f"{settings.cluster_name}-{pool.name}",
        GpuNodePoolArgs.of(
            settings,
            pool,
            network=network,
            control_plane=control_plane,
            device_plugin=device_plugin.daemon_set,
            registered_at=run_at,
            hooks=node_hooks,
            guard=node_guard.binding,
            image_ami=images.get(pool.name),
        ),
    )
    for pool in settings.node_pools
]
validations = {
    node.node_name: validation_job(node, settings, device_plugin, control_plane)
    for pool in pools
    for node in pool.nodes
    if settings.validation.enabled
}
nccl_checks = {
    node.node_name: NcclValidation(
        f"{node.node_name}-nccl",
        NcclValidationArgs.of(node, settings, validations[node.node_name], control_plane),
    )
    for pool in pools
    for node in pool.nodes
    if node.node_name in validations and settings.validation.nccl and needs_nccl_check(node)
}
# Per EFA pool of two or more nodes: its first two nodes over EFA, after both nodes' own checks;
# no node's chain (its uncordon included) waits for it.
for pool in pools:
    if validations and settings.validation.nccl and needs_efa_check(pool):
        NcclEfaValidation(
            f"{settings.cluster_name}-{pool.pool.name}-nccl-efa",
            NcclEfaValidationArgs.of(
                pool,
                settings,
                validations=validations,
                nccl_checks=nccl_checks,
                device_plugin=device_plugin,
                control_plane=control_plane,
            ),
        )

# Each node goes in service after its own checks (the proof): labels, taints, the proof taint off,
# a roll's cordon and slot ended, through the API (components/kube/in_service.py).
for pool in pools:
    for node in pool.nodes:
        checks = [validations.get(node.node_name), nccl_checks.get(node.node_name)]
        node.put_in_service(after=[check.job for check in checks if check])

pulumi.export("endpoint", control_plane.endpoint)
# The operators' own identity (group, ClusterRole, bounded lifetime), not admin.conf.
pulumi.export("kubeconfig", pulumi.Output.secret(control_plane.operator_kubeconfig))
pulumi.export("kubernetesVersion", settings.kubernetes_version)
pulumi.export(
    "nodePools", {pool.pool.name: [node.node_name for node in pool.nodes] for pool in pools}
)
pulumi.export(
    "gpuNodes",
    {
        node.node_name: {
            "pool": pool.pool.name,
            # An EC2 node's instance type; an existing host's address and identity.
            **(
                {"instanceType": node.gpu_type.name}
                if node.instance is not None
                else {key: node.machine.outputs[key] for key in ("address", "hostId")}
            ),
            "gpuModel": node.gpu_type.gpu.name,
            "gpuCount": node.gpu_type.gpu_count,
            "validated": validations[node.node_name].passed
            if node.node_name in validations
            else "disabled",
        }
        for pool in pools
        for node in pool.nodes
    },
)

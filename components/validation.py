"""GpuValidation: proof, per node, that Kubernetes can hand out all of the node's GPUs and run CUDA.

Two steps, after the node's own chain (`<node>-node-ready`) and the device plugin DaemonSet, and
after nothing of any other node:

1. `<node>-gpu-capacity` (on the control plane, wait-gpu-capacity.sh): waits, bounded by
   validation.timeoutSeconds, until the Node's allocatable nvidia.com/gpu equals the catalog GPU
   count times the time-slicing replicas. Its failure message tells apart a node that is not
   Ready (kubelet), a Ready node with no GPUs (device plugin or container runtime) and one with
   too few (driver, MIG/time-slicing config).
2. `<node>-validation-job`: a Job pinned to the node that requests every nvidia.com/gpu the node
   advertises (with time slicing: every share of every GPU, so the pod surely sees each physical
   GPU; see `validation_job_spec`) and runs `nvidia-smi -L` (the physical GPU count checked) and
   the CUDA vectorAdd sample on each GPU.
   pulumi-kubernetes 4.x awaits a Job until its `Complete` condition and fails the resource (so
   `pulumi up`) on the `Failed` condition (backoffLimit 1, activeDeadlineSeconds) or at the custom
   create timeout; the Job must therefore not carry `pulumi.com/skipAwait`.

`validation.enabled: false` skips both (`__main__.py` then creates no GpuValidation): the switch is
for clusters where the checks cannot pass for reasons outside this stack (GPUs re-partitioned with
MIG by hand, no access to the sample image's registry), so it must turn off every check that could
fail `up`, the capacity wait included. The device plugin is deployed either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pulumi
import pulumi_kubernetes as k8s

from components import kubernetes_manifests as manifests
from components import steps
from components.remote import run_step
from components.settings import Settings

if TYPE_CHECKING:
    from components.control_plane import ControlPlane
    from components.device_plugin import NvidiaDevicePlugin
    from components.gpu_node import GpuNode

# Beyond the script's own bound: SSH dial and kubectl start-up on the control plane.
CAPACITY_STEP_MARGIN_SECONDS = 120
# Beyond activeDeadlineSeconds: the Job controller marks the Job Failed, then the await sees it.
JOB_AWAIT_MARGIN_SECONDS = 120


def expected_allocatable(gpu_count: int, time_slicing_replicas: int) -> int:
    """What the device plugin advertises: each physical GPU as `replicas` shares."""
    return gpu_count * time_slicing_replicas


class GpuValidation(pulumi.ComponentResource):
    capacity: pulumi.Resource
    job: k8s.batch.v1.Job
    passed: pulumi.Output[bool]

    def __init__(
        self,
        name: str,
        node: GpuNode,
        settings: Settings,
        device_plugin: NvidiaDevicePlugin,
        control_plane: ControlPlane,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("gpu-cluster:index:GpuValidation", name, None, opts)
        node_name = node.node_name
        gpu_count = node.gpu_type.gpu_count
        timeout = settings.validation.timeout_seconds
        expected = expected_allocatable(gpu_count, settings.device_plugin.time_slicing.replicas)

        self.capacity = run_step(
            steps.GPU_CAPACITY,
            node_name,
            host=control_plane.host,
            params={
                "NODE_NAME": node_name,
                "EXPECTED_GPUS": str(expected),
                "TIMEOUT_SECONDS": str(timeout),
                "DEVICE_PLUGIN_NAMESPACE": manifests.DEVICE_PLUGIN_NAMESPACE,
                "DEVICE_PLUGIN_NAME": manifests.DEVICE_PLUGIN_NAME,
                # A disruptive change of the node re-runs the check (components/rolling.py).
                "CHANGE": node.change,
            },
            identity={
                steps.Identity.HOST: node.instance.id,
                steps.Identity.ENDPOINT: control_plane.endpoint,
            },
            after=[node.node_ready, device_plugin.daemon_set],
            parent=self,
            timeout_seconds=timeout + CAPACITY_STEP_MARGIN_SECONDS,
        )

        job_timeout = f"{timeout + JOB_AWAIT_MARGIN_SECONDS}s"
        self.job = k8s.batch.v1.Job(
            f"{name}-job",
            metadata={
                **manifests.validation_job_metadata(node_name),
                "namespace": device_plugin.validation_namespace.metadata.name,
            },
            spec=manifests.validation_job_spec(
                node_name=node_name,
                gpu_count=gpu_count,
                image=settings.validation.image,
                timeout_seconds=timeout,
                taints=node.pool.taints,
                template_annotations={
                    manifests.CAPACITY_CHECK_ANNOTATION: self.capacity.id,
                    # ... and this Job (replaced), on the node still cordoned by the roll.
                    manifests.NODE_CHANGE_ANNOTATION: node.change,
                },
                shares_per_gpu=settings.device_plugin.time_slicing.replicas,
            ),
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=control_plane.provider,
                depends_on=[self.capacity, device_plugin.daemon_set],
                # A Job's pod template is immutable, and a changed Job must run again: any spec
                # change replaces it (pulumi-kubernetes forces that for .spec.template and
                # .spec.selector only; an in-place edit of, say, activeDeadlineSeconds would leave
                # the old run standing as the result), under the same name, so delete first.
                replace_on_changes=["spec"],
                delete_before_replace=True,
                custom_timeouts=pulumi.CustomTimeouts(
                    create=job_timeout, update=job_timeout, delete="10m"
                ),
            ),
        )
        self.passed = self.job.status.apply(_succeeded)
        self.register_outputs({"passed": self.passed, "expectedAllocatable": expected})


def _succeeded(status) -> bool:
    """True once the Job reports a succeeded pod (the await only returns for a complete Job)."""
    if status is None:
        return False
    succeeded = status.get("succeeded") if isinstance(status, dict) else status.succeeded
    return bool(succeeded)

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

   Before it, an init container of the same pod that requests no GPU but sets
   NVIDIA_VISIBLE_DEVICES=all (as every CUDA image does) must see no GPU: the toolkit ignores the
   variable in unprivileged containers and the device plugin hands GPUs out as volume mounts.
   The runtime decides per container, so one that requests nothing is the isolation check.

`validation.enabled: false` skips both (`__main__.py` then creates no GpuValidation): the switch is
for clusters where the checks cannot pass for reasons outside this stack (GPUs re-partitioned with
MIG by hand, no access to the sample image's registry), so it must turn off every check that could
fail `up`, the capacity wait included. The device plugin is deployed either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pulumi
import pulumi_kubernetes as k8s

from components.hosts import steps
from components.hosts.remote import Host, run_step
from components.kube import manifests
from components.settings import Settings, Taint, Validation

if TYPE_CHECKING:
    from components.control_plane import ControlPlane
    from components.gpu_node import GpuNode
    from components.kube.device_plugin import NvidiaDevicePlugin

# Beyond the script's own bound: SSH dial and kubectl start-up on the control plane.
CAPACITY_STEP_MARGIN_SECONDS = 120
# Beyond activeDeadlineSeconds: the Job controller marks the Job Failed, then the await sees it.
JOB_AWAIT_MARGIN_SECONDS = 120


def expected_allocatable(gpu_count: int, time_slicing_replicas: int) -> int:
    """What the device plugin advertises: each physical GPU as `replicas` shares."""
    return gpu_count * time_slicing_replicas


@dataclass(frozen=True)
class GpuValidationArgs:
    """What one node's validation uses: the node (name, GPUs, taints, the step it follows), the
    control plane (host that runs the capacity check, Kubernetes provider), the device plugin
    (DaemonSet to wait for, namespace of the Jobs) and the validation section."""

    node_name: str
    node_instance_id: pulumi.Input[str]
    node_change: str  # digest of the node's pinned versions (components/hosts/rolling.py)
    gpu_count: int
    taints: tuple[Taint, ...]
    node_ready: pulumi.Resource
    control_plane_host: Host
    cluster_endpoint: pulumi.Input[str]
    provider: k8s.Provider
    device_plugin: pulumi.Resource
    jobs_namespace: pulumi.Input[str]
    validation: Validation
    shares_per_gpu: int


def validation_args(
    node: GpuNode,
    settings: Settings,
    device_plugin: NvidiaDevicePlugin,
    control_plane: ControlPlane,
) -> GpuValidationArgs:
    """The args of `node`'s validation, from the components it follows."""
    return GpuValidationArgs(
        node_name=node.node_name,
        node_instance_id=node.instance.id,
        node_change=node.change,
        gpu_count=node.gpu_type.gpu_count,
        taints=tuple(node.pool.taints),
        node_ready=node.node_ready,
        control_plane_host=control_plane.host,
        cluster_endpoint=control_plane.endpoint,
        provider=control_plane.provider,
        device_plugin=device_plugin.daemon_set,
        jobs_namespace=device_plugin.validation_namespace.metadata.name,
        validation=settings.validation,
        shares_per_gpu=settings.device_plugin.time_slicing.replicas,
    )


class GpuValidation(pulumi.ComponentResource):
    """Outputs: `capacity` (the allocatable check on the control plane), `job` (the CUDA Job
    pinned to the node) and `passed` (true once the Job completed)."""

    capacity: pulumi.Resource
    job: k8s.batch.v1.Job
    passed: pulumi.Output[bool]

    def __init__(
        self,
        name: str,
        args: GpuValidationArgs,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("gpu-cluster:index:GpuValidation", name, None, opts)
        node_name = args.node_name
        gpu_count = args.gpu_count
        timeout = args.validation.timeout_seconds
        expected = expected_allocatable(gpu_count, args.shares_per_gpu)

        self.capacity = run_step(
            steps.GPU_CAPACITY,
            node_name,
            host=args.control_plane_host,
            params={
                "NODE_NAME": node_name,
                "EXPECTED_GPUS": str(expected),
                "TIMEOUT_SECONDS": str(timeout),
                "DEVICE_PLUGIN_NAMESPACE": manifests.DEVICE_PLUGIN_NAMESPACE,
                "DEVICE_PLUGIN_NAME": manifests.DEVICE_PLUGIN_NAME,
                # A disruptive change of the node re-runs the check (components/hosts/rolling.py).
                "CHANGE": args.node_change,
            },
            identity={
                steps.Identity.HOST: args.node_instance_id,
                steps.Identity.ENDPOINT: args.cluster_endpoint,
            },
            after=[args.node_ready, args.device_plugin],
            parent=self,
            timeout_seconds=timeout + CAPACITY_STEP_MARGIN_SECONDS,
        )

        job_timeout = f"{timeout + JOB_AWAIT_MARGIN_SECONDS}s"
        self.job = k8s.batch.v1.Job(
            steps.VALIDATION_JOB.resource_name(node_name),
            metadata={
                **manifests.validation_job_metadata(node_name),
                "namespace": args.jobs_namespace,
            },
            spec=manifests.validation_job_spec(
                node_name=node_name,
                gpu_count=gpu_count,
                image=args.validation.image,
                timeout_seconds=timeout,
                taints=args.taints,
                template_annotations={
                    manifests.CAPACITY_CHECK_ANNOTATION: self.capacity.id,
                    # ... and this Job (replaced), on the node still cordoned by the roll.
                    manifests.NODE_CHANGE_ANNOTATION: args.node_change,
                },
                shares_per_gpu=args.shares_per_gpu,
            ),
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=args.provider,
                depends_on=[self.capacity, args.device_plugin],
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

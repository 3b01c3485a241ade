"""Per node, proof that Kubernetes can hand out all of the node's GPUs and run CUDA: a Job pinned
to the node that requests every nvidia.com/gpu it advertises and runs `nvidia-smi -L` and the
CUDA vectorAdd sample on each GPU, after the node's join saw them all allocatable.
pulumi-kubernetes awaits a Job until Complete and fails `up` on Failed (so no `skipAwait`).

An init container that requests no GPU but sets NVIDIA_VISIBLE_DEVICES=all must see none: the
isolation check. `validation.enabled: false` registers no Job and no capacity wait.
Why: docs/decisions/014-gpu-validation-is-a-capacity-wait-and-an-awaited-job.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pulumi
import pulumi_kubernetes as k8s

from components.hosts import steps
from components.kube import manifests
from components.settings import Settings

if TYPE_CHECKING:
    from components.control_plane import ControlPlane
    from components.gpu_node import GpuNode
    from components.kube.device_plugin import NvidiaDevicePlugin

# Beyond activeDeadlineSeconds: the Job controller marks the Job Failed, then the await sees it.
JOB_AWAIT_MARGIN_SECONDS = 120


def expected_allocatable(gpu_count: int, time_slicing_replicas: int) -> int:
    """What the device plugin advertises: each physical GPU as `replicas` shares."""
    return gpu_count * time_slicing_replicas


@dataclass(frozen=True)
class ValidationJob:
    """A node's validation Job, and whether it passed (true once it completed)."""

    job: k8s.batch.v1.Job
    passed: pulumi.Output[bool]


def validation_job(
    node: GpuNode,
    settings: Settings,
    device_plugin: NvidiaDevicePlugin,
    control_plane: ControlPlane,
) -> ValidationJob:
    """`<node>-validation-job`, a child of the node, after its join and the device plugin.

    It is replaced (delete first: the same name) when its spec changes, when the node's disruptive
    steps change (the template's node-change annotation) and when the machine or the cluster is
    new (`replacement_trigger`): a new machine must prove its GPUs again."""
    validation = settings.validation
    node_name, timeout = node.node_name, validation.timeout_seconds
    job_timeout = f"{timeout + JOB_AWAIT_MARGIN_SECONDS}s"
    job = k8s.batch.v1.Job(
        steps.VALIDATION_JOB.resource_name(node_name),
        metadata={
            **manifests.validation_job_metadata(node_name),
            "namespace": device_plugin.validation_namespace.metadata.name,
        },
        spec=manifests.validation_job_spec(
            node_name=node_name,
            gpu_count=node.gpu_type.gpu_count,
            image=validation.image,
            timeout_seconds=timeout,
            taints=tuple(node.pool.taints),
            template_annotations={manifests.NODE_CHANGE_ANNOTATION: node.change},
            shares_per_gpu=settings.device_plugin.time_slicing.replicas,
        ),
        opts=pulumi.ResourceOptions(
            parent=node,
            provider=control_plane.provider,
            depends_on=[node.join, device_plugin.daemon_set],
            # A Job's pod template is immutable, and a changed Job must run again: any spec
            # change replaces it (pulumi-kubernetes forces that for .spec.template and
            # .spec.selector only; an in-place edit of, say, activeDeadlineSeconds would leave
            # the old run standing as the result), under the same name, so delete first.
            replace_on_changes=["spec"],
            delete_before_replace=True,
            replacement_trigger=pulumi.Output.all(node.machine.id, control_plane.endpoint),
            ignore_changes=manifests.JOB_IGNORED_CHANGES,
            # Until this release, the Job was a child of a GpuValidation component of its own.
            aliases=[_former_urn(node_name)],
            custom_timeouts=pulumi.CustomTimeouts(
                create=job_timeout, update=job_timeout, delete="10m"
            ),
        ),
    )
    return ValidationJob(job=job, passed=job.status.apply(_succeeded))


def _former_urn(node_name: str) -> str:
    """The Job's URN while it was a child of `<node>-validation` (gpu-cluster:index:GpuValidation)
    at the root of the stack."""
    return (
        f"urn:pulumi:{pulumi.get_stack()}::{pulumi.get_project()}::"
        f"gpu-cluster:index:GpuValidation$kubernetes:batch/v1:Job::"
        f"{steps.VALIDATION_JOB.resource_name(node_name)}"
    )


def _succeeded(status) -> bool:
    """True once the Job reports a succeeded pod (the await only returns for a complete Job)."""
    if status is None:
        return False
    succeeded = status.get("succeeded") if isinstance(status, dict) else status.succeeded
    return bool(succeeded)

"""NcclEfaValidation: proof, per EFA pool of two or more nodes, that two of its nodes reach each
other over EFA at the speed their instance type is built for: one Indexed Job between the pool's
first two nodes (components/kube/nccl_efa_manifests.py), after both nodes' own checks; no node
waits for it. A failure names the pool, both nodes, the stage and where to look.

Why: docs/decisions/011-two-node-nccl-as-one-indexed-job.md ("What the component registers")
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pulumi
import pulumi_kubernetes as k8s
import pulumi_tls as tls

from components.catalog import GpuInstanceType
from components.kube import manifests
from components.kube import nccl_efa_manifests as efa
from components.labels import POOL_LABEL
from components.settings import Settings, Taint

if TYPE_CHECKING:
    from components.control_plane import ControlPlane
    from components.gpu_node import GpuNode, GpuNodePool
    from components.kube.device_plugin import NvidiaDevicePlugin
    from components.kube.nccl_validation import NcclValidation
    from components.kube.validation import ValidationJob

# Beyond activeDeadlineSeconds: the Job controller marks the Job Failed, then the await sees it.
JOB_AWAIT_MARGIN_SECONDS = 120


def needs_efa_check(pool: GpuNodePool) -> bool:
    """A pool whose nodes have EFA, with two nodes to pair and a floor to compare with."""
    return pool.pool.uses_efa and len(pool.nodes) >= 2 and pool.pool.gpu_type.nccl_floor.efa > 0


@dataclass(frozen=True)
class NcclEfaValidationArgs:
    """What one pool's two-node check uses: the pool, its two nodes (names, the check each one
    finished with, the id of each one's capacity check and its change digest, which re-run this
    one), the type and taints of the pool, the validation namespace (an Output, so the Secret and
    Service follow it), the Kubernetes provider, the pinned nccl-tests image, the validation bound
    and the GPU shares per GPU."""

    pool: str
    pool_resource_name: str  # `<cluster>-<pool>`: the Job's name comes from it
    node_names: tuple[str, str]
    after: tuple[pulumi.Resource, pulumi.Resource]
    validation_jobs: tuple[pulumi.Resource, pulumi.Resource]
    node_changes: tuple[str, str]
    gpu_type: GpuInstanceType
    taints: tuple[Taint, ...]
    namespace: pulumi.Input[str]
    provider: k8s.Provider
    image: str
    timeout_seconds: int
    shares_per_gpu: int

    @classmethod
    def of(
        cls,
        pool: GpuNodePool,
        settings: Settings,
        *,
        validations: Mapping[str, ValidationJob],
        nccl_checks: Mapping[str, NcclValidation],
        device_plugin: NvidiaDevicePlugin,
        control_plane: ControlPlane,
    ) -> NcclEfaValidationArgs:
        """The pool's first two nodes, each after its per-node NCCL Job, else its CUDA Job."""
        first: tuple[GpuNode, GpuNode] = (pool.nodes[0], pool.nodes[1])

        def last_check(node: GpuNode) -> pulumi.Resource:
            check = nccl_checks.get(node.node_name)
            return check.job if check else validations[node.node_name].job

        return cls(
            pool=pool.pool.name,
            pool_resource_name=f"{settings.cluster_name}-{pool.pool.name}",
            node_names=(first[0].node_name, first[1].node_name),
            after=(last_check(first[0]), last_check(first[1])),
            validation_jobs=(
                validations[first[0].node_name].job,
                validations[first[1].node_name].job,
            ),
            node_changes=(first[0].change, first[1].change),
            gpu_type=pool.pool.gpu_type,
            taints=tuple(pool.pool.taints),
            namespace=device_plugin.validation_namespace.metadata.name,
            provider=control_plane.provider,
            image=settings.validation.nccl_image,
            timeout_seconds=settings.validation.timeout_seconds,
            shares_per_gpu=settings.device_plugin.time_slicing.replicas,
        )


class NcclEfaValidation(pulumi.ComponentResource):
    """Outputs: `job`, the two-node NCCL all-reduce Job over EFA (its success is the check)."""

    job: k8s.batch.v1.Job

    def __init__(
        self, name: str, args: NcclEfaValidationArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("gpu-cluster:index:NcclEfaValidation", name, None, opts)
        job = efa.job_name(args.pool_resource_name)
        pair = efa.EfaPair(pool=args.pool, nodes=args.node_names, gpu_type=args.gpu_type)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        labels = {**manifests.MANAGED_BY, POOL_LABEL: args.pool}

        client_key, host_key = (
            tls.PrivateKey(
                f"{name}-ssh-{role}-key",
                algorithm="ED25519",
                opts=pulumi.ResourceOptions(parent=self),
            )
            for role in ("client", "host")
        )
        string_data = pulumi.Output.all(
            client_key.private_key_openssh,
            client_key.public_key_openssh,
            host_key.private_key_openssh,
            host_key.public_key_openssh,
        ).apply(lambda keys: efa.secret_string_data(*keys))
        secret = k8s.core.v1.Secret(
            f"{name}-ssh",
            metadata={"name": efa.secret_name(job), "namespace": args.namespace, "labels": labels},
            string_data=pulumi.Output.secret(string_data),
            opts=child,
        )
        service = k8s.core.v1.Service(
            f"{name}-service",
            metadata={"name": job, "namespace": args.namespace, "labels": labels},
            spec=efa.service_spec(job),
            opts=child,
        )
        job_timeout = f"{args.timeout_seconds + JOB_AWAIT_MARGIN_SECONDS}s"
        self.job = k8s.batch.v1.Job(
            f"{name}-job",
            metadata={
                "name": job,
                "namespace": args.namespace,
                "labels": labels,
                "annotations": {manifests.REPLACE_UNREADY_ANNOTATION: "true"},
            },
            spec=efa.two_node_job_spec(
                pair,
                job=job,
                image=args.image,
                timeout_seconds=args.timeout_seconds,
                taints=args.taints,
                shares_per_gpu=args.shares_per_gpu,
                # Run again when either node's disruptive steps change (a roll).
                template_annotations={
                    manifests.NODE_CHANGE_ANNOTATION: " ".join(args.node_changes),
                },
            ),
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=args.provider,
                # The GPUs of both nodes are free once each node's own checks released them.
                depends_on=[secret, service, *args.after],
                replace_on_changes=["spec"],
                # Run again when either node's CUDA validation runs again (new machine, driver).
                replace_with=list(args.validation_jobs),
                ignore_changes=manifests.JOB_IGNORED_CHANGES,
                delete_before_replace=True,
                custom_timeouts=pulumi.CustomTimeouts(
                    create=job_timeout, update=job_timeout, delete="10m"
                ),
            ),
        )
        self.register_outputs({})

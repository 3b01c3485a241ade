"""NcclValidation: proof, per node with two or more GPUs, that its GPUs talk to each other at the
speed the instance type is built for.

One Job per node (`<node>-nccl-job`), after that node's CUDA validation Job: NCCL's
`all_reduce_perf` across every GPU of the node, one 1 GiB message, whose "Avg bus bandwidth"
must reach the type's floor (components/catalog.py `NcclFloor`). A node below it fails the Job,
and so `pulumi up`, with a message that names the node, the stage and where to look. Single-GPU
nodes have nothing to measure and get no Job. `validation.nccl: false` turns the check off;
`validation.enabled: false` turns off every check.

Why: docs/decisions/010-nccl-floors-are-half-the-link-rate.md
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pulumi
import pulumi_kubernetes as k8s

from components.catalog import GpuInstanceType
from components.kube import manifests
from components.settings import Settings, Taint

if TYPE_CHECKING:
    from components.control_plane import ControlPlane
    from components.gpu_node import GpuNode
    from components.kube.validation import ValidationJob

# Where the nccl-tests binaries live in the image (aws-samples awsome-distributed-training
# builds nccl-tests into /opt/nccl-tests/build).
ALL_REDUCE_PERF = "/opt/nccl-tests/build/all_reduce_perf"
MESSAGE_BYTES = "1G"
STAGE = "nccl-all-reduce"
NCCL_CONTAINER = "nccl-all-reduce"
# NCCL keeps its intra-node buffers in /dev/shm; a container's default 64 MiB is too small.
SHM_SIZE = "1Gi"
JOB_AWAIT_MARGIN_SECONDS = 120


def nccl_job_name(node_name: str) -> str:
    return manifests.validation_job_name(node_name).removesuffix("-validation") + "-nccl"


def all_reduce_command(*, node_name: str, gpu_type: GpuInstanceType) -> str:
    """POSIX sh: run all_reduce_perf over every GPU, compare its average bus bandwidth with the
    floor, fail naming node, stage and fix (also into the termination message)."""
    gpus = gpu_type.gpu_count
    floor = gpu_type.nccl_floor.node
    if gpu_type.nvlink:
        look = (
            "NVLink and the fabric manager: nvidia-smi nvlink -s, nvidia-smi topo -m, "
            "systemctl status nvidia-fabricmanager on the node"
        )
    else:
        look = "PCIe peer-to-peer between the GPUs: nvidia-smi topo -m, nvidia-smi topo -p2p r"
    where = f"node {node_name}, stage {STAGE}"
    return (
        "set -u\n"
        "fail() {\n"
        "  printf '%s\\n' \"$1\" >/dev/termination-log\n"
        "  printf '%s\\n' \"$1\" >&2\n"
        "  exit 1\n"
        "}\n"
        f'if ! out="$({ALL_REDUCE_PERF} -b {MESSAGE_BYTES} -e {MESSAGE_BYTES} -g {gpus} '
        '-c 1 -w 5 -n 20 2>&1)"; then\n'
        "  printf '%s\\n' \"$out\"\n"
        f'  fail "{where}: all_reduce_perf across {gpus} GPUs failed (its output is above); '
        f'{look}"\n'
        "fi\n"
        "printf '%s\\n' \"$out\"\n"
        'busbw="$(printf \'%s\\n\' "$out" | '
        'awk -F: \'/Avg bus bandwidth/ { gsub(/[ \\t]/, "", $2); print $2 }\')"\n'
        'if [ -z "$busbw" ]; then\n'
        f'  fail "{where}: all_reduce_perf printed no average bus bandwidth (output above)"\n'
        "fi\n"
        f"if ! awk -v got=\"$busbw\" -v floor={floor:g} 'BEGIN {{ exit !(got + 0 >= floor) }}'; "
        "then\n"
        f'  fail "{where}: bus bandwidth $busbw GB/s across {gpus} GPUs is below the floor '
        f"{floor:g} GB/s of {gpu_type.name} (components/catalog.py NcclFloor); look at "
        f'{look}"\n'
        "fi\n"
        f'echo "{where}: bus bandwidth $busbw GB/s across {gpus} GPUs, floor {floor:g} GB/s"\n'
    )


def nccl_job_spec(
    *,
    node_name: str,
    gpu_type: GpuInstanceType,
    image: str,
    timeout_seconds: int,
    taints: list[Taint],
    shares_per_gpu: int,
    template_annotations: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The validation Job's shape (pinned to the node, every GPU share, no privileges), running
    all_reduce_command with a memory-backed /dev/shm."""
    spec = manifests.validation_job_spec(
        node_name=node_name,
        gpu_count=gpu_type.gpu_count,
        image=image,
        timeout_seconds=timeout_seconds,
        taints=taints,
        template_annotations=template_annotations,
        shares_per_gpu=shares_per_gpu,
    )
    pod = spec["template"]["spec"]
    container = pod["containers"][0]
    container.update(
        name=NCCL_CONTAINER,
        command=["sh", "-c", all_reduce_command(node_name=node_name, gpu_type=gpu_type)],
        terminationMessagePolicy="FallbackToLogsOnError",
        volumeMounts=[{"name": "shm", "mountPath": "/dev/shm"}],
    )
    assert container["resources"]["limits"][manifests.GPU_EXTENDED_RESOURCE]
    pod["volumes"] = [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_SIZE}}]
    return spec


@dataclass(frozen=True)
class NcclValidationArgs:
    """What one node's NCCL check uses: the node (name, type, taints), the CUDA validation it
    follows (its Job, and its capacity check whose id re-runs this one), the Kubernetes
    provider, the pinned nccl-tests image, the validation bound and the GPU shares per GPU."""

    node_name: str
    gpu_type: GpuInstanceType
    taints: tuple[Taint, ...]
    validation: ValidationJob
    provider: k8s.Provider
    image: str
    timeout_seconds: int
    shares_per_gpu: int

    @classmethod
    def of(
        cls,
        node: GpuNode,
        settings: Settings,
        validation: ValidationJob,
        control_plane: ControlPlane,
    ) -> NcclValidationArgs:
        return cls(
            node_name=node.node_name,
            gpu_type=node.gpu_type,
            taints=tuple(node.pool.taints),
            validation=validation,
            provider=control_plane.provider,
            image=settings.validation.nccl_image,
            timeout_seconds=settings.validation.timeout_seconds,
            shares_per_gpu=settings.device_plugin.time_slicing.replicas,
        )


class NcclValidation(pulumi.ComponentResource):
    """Outputs: `job`, the node's NCCL all-reduce Job (its success is the check)."""

    job: k8s.batch.v1.Job

    def __init__(
        self, name: str, args: NcclValidationArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("gpu-cluster:index:NcclValidation", name, None, opts)
        job_timeout = f"{args.timeout_seconds + JOB_AWAIT_MARGIN_SECONDS}s"
        metadata = manifests.validation_job_metadata(args.node_name)
        self.job = k8s.batch.v1.Job(
            f"{name}-job",
            metadata={**metadata, "name": nccl_job_name(args.node_name)},
            spec=nccl_job_spec(
                node_name=args.node_name,
                gpu_type=args.gpu_type,
                image=args.image,
                timeout_seconds=args.timeout_seconds,
                taints=list(args.taints),
                shares_per_gpu=args.shares_per_gpu,
                template_annotations={},
            ),
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=args.provider,
                # One Job at a time on the node's GPUs: after the CUDA check released them.
                depends_on=[args.validation.job],
                replace_on_changes=["spec"],
                # Re-run when the node's CUDA validation runs again (new machine, new driver).
                replace_with=[args.validation.job],
                ignore_changes=manifests.JOB_IGNORED_CHANGES,
                delete_before_replace=True,
                custom_timeouts=pulumi.CustomTimeouts(
                    create=job_timeout, update=job_timeout, delete="10m"
                ),
            ),
        )
        self.register_outputs({})


def needs_nccl_check(node: GpuNode) -> bool:
    return node.gpu_type.nccl_floor.node > 0

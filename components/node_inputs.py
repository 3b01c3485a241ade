"""What each step of a GPU node is given: the install steps' parameters (the same for a baked
image's builder), and what the join registers the Node with and the uncordon reconciles (its
labels with the machine's identity, its taints, an EC2 machine's provider id). Pure functions of
the pool; components/gpu_node.py makes the steps. Why the labels and taints: docs/decisions/
028-the-kubernetes-side-of-a-node-through-the-api.md.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from components.hosts import pins, steps
from components.hosts.remote import Login
from components.images.builder import InstallStep
from components.labels import EFA_LABEL, GPU_PRESENT_LABEL, INSTANCE_LABEL, POOL_LABEL
from components.settings import NodePool
from components.settings.hosts_pool import HostsNodePool


def install_steps(
    pool: NodePool | HostsNodePool, kubernetes_version: str, login: Login
) -> tuple[InstallStep, ...]:
    """steps.INSTALL_STEPS, in that order, with their parameters: every node of a stock pool
    runs them; a baked image runs them once (components/images/gpu_image.py) and its nodes run them
    again only to verify."""
    gpu = pool.gpu_type
    params = {
        # No kernel arrives before the driver: docs/decisions/046-no-kernel-before-the-driver.md
        steps.WAIT_READY: {**_ready_params(pool, login), "KERNEL_WITH_DRIVER": "true"},
        # Its own step because it may reboot the host (nouveau in use, or a kernel without a
        # signed module of this driver replaced by the newest one with it): the driver step
        # then redials.
        steps.NOUVEAU: {
            "DRIVER_BRANCH": pool.driver_version,
            "KERNEL_MODULES": pool.kernel_module_type,
        },
        steps.DRIVER: pins.driver_params(
            gpu, pool.os_version, pool.driver_version, pool.kernel_module_type
        ),
        steps.RUNTIME: pins.runtime_params(pool.os_version, kubernetes_version, with_toolkit=True),
        steps.KUBE_TOOLS: {
            "KUBERNETES_MINOR": kubernetes_version,
            "SANDBOX_IMAGE": pins.PAUSE_IMAGES[kubernetes_version],
        },
    }
    return tuple(InstallStep(step, params[step]) for step in steps.INSTALL_STEPS)


def _ready_params(pool: NodePool | HostsNodePool, login: Login) -> dict[str, str]:
    """A launched machine's wait-ready writes the login user's authorized_keys (a rotated key
    reaches it). An existing host keeps the keys its owners gave it (every other login to it
    would be cut off), and is checked to run the Ubuntu release its pool names (its packages
    are pinned for that release)."""
    if isinstance(pool, HostsNodePool):
        return {"OS_VERSION": pool.os_version}
    return login.wait_ready_params()


def join_params(
    node_name: str,
    pool: NodePool | HostsNodePool,
    kubernetes_version: str,
    instance_id: pulumi.Input[str],
) -> dict[str, pulumi.Input[str]]:
    """What join-node.sh gets besides the cluster, the token and the checks."""
    return {
        "NODE_NAME": node_name,
        "KUBERNETES_MINOR": kubernetes_version,
        **labels_and_taints(pool, instance_id),
    }


def labels_and_taints(
    pool: NodePool | HostsNodePool, instance_id: pulumi.Input[str]
) -> dict[str, pulumi.Input[str]]:
    """NODE_LABELS (with the machine's identity: an instance id, or an existing host's id) and
    NODE_TAINTS: set at registration by the join, reconciled later by the uncordon step."""
    return {
        "NODE_LABELS": pulumi.Output.from_input(instance_id).apply(
            lambda machine: node_labels(pool, machine)
        ),
        "NODE_TAINTS": node_taints(pool),
    }


def provider_id(instance: aws.ec2.Instance) -> pulumi.Output[str]:
    """The kubelet's --provider-id, as AWS's cloud provider writes it: aws:///<zone>/<id>."""
    return pulumi.Output.concat("aws:///", instance.availability_zone, "/", instance.id)


def node_labels(pool: NodePool | HostsNodePool, instance_id: str) -> str:
    """NODE_LABELS for join-node.sh: the pool's labels plus the GPU, pool and instance labels
    (and the EFA label on pools that use EFA), sorted."""
    labels = {
        **pool.labels,
        GPU_PRESENT_LABEL: "true",
        POOL_LABEL: pool.name,
        INSTANCE_LABEL: instance_id,
    }
    if pool.uses_efa:
        labels[EFA_LABEL] = "true"
    return ",".join(f"{key}={labels[key]}" for key in sorted(labels))


def node_taints(pool: NodePool | HostsNodePool) -> str:
    """NODE_TAINTS for join-node.sh: key=value:Effect (key:Effect without a value)."""
    return ",".join(
        f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}" for t in pool.taints
    )

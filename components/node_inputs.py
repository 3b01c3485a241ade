"""What each step of a GPU node is given: the install steps' parameters (the same for a baked
image's builder), what the join registers the Node with (the labels the node's DaemonSets select
on, the pool's taints and the proof taint, its provider id) and what the control plane sets on
it once proven (the labels that steer workloads, with the machine's identity: an instance id,
or an existing host's id, and the pool's taints). Pure functions of the pool; components/
gpu_node.py makes the steps. Why: docs/decisions/059-no-tenant-before-the-proof.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pulumi
import pulumi_aws as aws

from components.hosts import pins, steps
from components.hosts.remote import Login
from components.hosts.roll_budget import READY_TIMEOUT_SECONDS
from components.images.builder import InstallStep
from components.labels import (
    EFA_LABEL,
    GPU_PRESENT_LABEL,
    INSTANCE_LABEL,
    POOL_LABEL,
    UNPROVEN_TAINT_EFFECT,
    UNPROVEN_TAINT_KEY,
)
from components.settings import NodePool, Taint
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


# The taint a Node registers with and keeps until its own checks passed.
UNPROVEN_TAINT = Taint(key=UNPROVEN_TAINT_KEY, value="", effect=UNPROVEN_TAINT_EFFECT)


def join_params(
    node_name: str, pool: NodePool | HostsNodePool, kubernetes_version: str
) -> dict[str, str]:
    """What join-node.sh gets besides the cluster, the token and the checks: what the kubelet
    registers the Node with."""
    return {
        "NODE_NAME": node_name,
        "KUBERNETES_MINOR": kubernetes_version,
        "NODE_LABELS": registration_labels(pool),
        "NODE_TAINTS": taint_list((*pool.taints, UNPROVEN_TAINT)),
    }


def in_service_environment(
    node_name: str,
    pool: NodePool | HostsNodePool,
    machine_id: pulumi.Input[str],
    change: str,
) -> dict[str, pulumi.Input[str]]:
    """What `<node>-in-service` carries for its hook (node_hooks.InServiceInputs reads it): the
    Node and its machine (an instance id, or an existing host's id), the labels and taints the
    control plane owns, the roll's change and the pool's slots."""
    return {
        "NODE_NAME": node_name,
        "INSTANCE_ID": machine_id,
        "POOL_NAME": pool.name,
        "MAX_UNAVAILABLE": str(pool.max_unavailable),
        "NODE_LABELS": pulumi.Output.from_input(machine_id).apply(
            lambda machine: managed_labels(pool, machine)
        ),
        "NODE_TAINTS": taint_list(pool.taints),
        "CHANGE": change,
        "READY_TIMEOUT_SECONDS": str(READY_TIMEOUT_SECONDS),
    }


def provider_id(instance: aws.ec2.Instance) -> pulumi.Output[str]:
    """The kubelet's --provider-id, as AWS's cloud provider writes it: aws:///<zone>/<id>."""
    return pulumi.Output.concat("aws:///", instance.availability_zone, "/", instance.id)


def registration_labels(pool: NodePool | HostsNodePool) -> str:
    """NODE_LABELS for join-node.sh: only what the node's DaemonSets select on before it is
    proven (the GPU label; the EFA label on pools that use EFA). Whatever a kubelet may set, a
    compromised one may set too, so no label that steers a tenant comes from here: the control
    plane sets those (`managed_labels`)."""
    labels = {GPU_PRESENT_LABEL: "true"}
    if pool.uses_efa:
        labels[EFA_LABEL] = "true"
    return label_list(labels)


def managed_labels(pool: NodePool | HostsNodePool, machine_id: str) -> str:
    """The labels the control plane sets once the node is proven: the pool's `labels` (the
    public contract), its pool and its machine's identity (an instance id, or host-<hex>)."""
    return label_list({**pool.labels, POOL_LABEL: pool.name, INSTANCE_LABEL: machine_id})


def managed_label_keys(pools: Sequence[NodePool | HostsNodePool]) -> tuple[str, ...]:
    """Every key the control plane owns on the stack's GPU nodes, which no node may write."""
    keys = {POOL_LABEL, INSTANCE_LABEL} | {key for pool in pools for key in pool.labels}
    return tuple(sorted(keys))


def label_list(labels: dict[str, str]) -> str:
    return ",".join(f"{key}={labels[key]}" for key in sorted(labels))


def taint_list(taints: Iterable[Taint]) -> str:
    """key=value:Effect (key:Effect without a value), comma-separated."""
    return ",".join(
        f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}" for t in taints
    )

"""GPU node pools: EC2 GPU instances bootstrapped over SSH, step by step, into joined Nodes.

Per node the chain is strict, one `remote.Command` per host script, each named after its step:

    <node> (EC2 instance) -> <node>-wait-ready -> <node>-nouveau -> <node>-driver -> <node>-runtime
      -> <node>-kube-tools -> <node>-join-token (control plane) -> <node>-join
      -> <node>-node-ready (control plane)

Nodes never wait on each other, so the time to a joined node does not grow with the pool size.
Teardown runs the chain backwards: the control plane drains and deletes the Node
(`<node>-node-ready`'s delete), then `kubeadm reset -f` runs on the host (`<node>-join`'s
delete), then the instance terminates. Each step's trigger is the digest of its script and
parameters plus the ids of the steps before it, so changing a pool's driver branch re-runs that
pool's driver step and everything after it, never the instance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pulumi
import pulumi_aws as aws
import pulumi_command as command

from components import host_pins, machines
from components.catalog import GpuInstanceType
from components.gpu_image import InstallStep
from components.host_scripts import script_digest
from components.labels import GPU_PRESENT_LABEL, POOL_LABEL
from components.network import KUBELET_PORT, Network, tcp_port_rule
from components.remote import Host, run_script, ssh_host
from components.settings import NodePool, Settings

if TYPE_CHECKING:
    from components.control_plane import ControlPlane

# Bounds on each host step (the SSH dial keeps retrying until these end the wait).
WAIT_READY_TIMEOUT = "20m"  # first boot: sshd, cloud-init, unattended upgrades
NOUVEAU_TIMEOUT = "20m"  # an initramfs rebuild, maybe a kernel to download
DRIVER_TIMEOUT = "45m"  # several GB of driver packages on p5
RUNTIME_TIMEOUT = "20m"
KUBE_TOOLS_TIMEOUT = "15m"
# The NVIDIA Container Toolkit the nodes get (a baked image is keyed by it too).
NVIDIA_CTK_VERSION = host_pins.NVIDIA_CTK_VERSION
JOIN_TIMEOUT = "20m"  # above join-node.sh's own bound (17m, kubeadm's phase timeouts + 2m)


class GpuNodePool(pulumi.ComponentResource):
    """`pool.count` GpuNodes of one instance type, spread over the network's subnets, sharing a
    key pair and a security group (kubelet only from the control plane)."""

    pool: NodePool
    nodes: list[GpuNode]

    def __init__(
        self,
        name: str,
        *,
        pool: NodePool,
        settings: Settings,
        network: Network,
        control_plane: ControlPlane,
        image_ami: pulumi.Input[str] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("gpu-cluster:index:GpuNodePool", name, None, opts)
        self.pool = pool
        if pool.image == "baked":
            if image_ami is None:
                raise ValueError(f"pool {pool.name}: image: baked needs the GpuImage's AMI id")
            ami = pulumi.Output.from_input(image_ami)
        else:
            ami = machines.ubuntu_ami(pool.os_version, pool.ami_id, parent=self)
        key = machines.key_pair(name, settings, parent=self)
        security_group = self._security_group(name, settings, network, control_plane)
        machine = _Machine(
            ami=ami,
            ami_pinned=pool.ami_id is not None,
            key_name=key.key_name,
            security_group_ids=[network.cluster_security_group_id, security_group.id],
        )
        self.nodes = [
            GpuNode(
                f"{settings.cluster_name}-{pool.name}-{index}",
                index=index,
                pool=pool,
                settings=settings,
                network=network,
                control_plane=control_plane,
                machine=machine,
                opts=pulumi.ResourceOptions(parent=self),
            )
            for index in range(pool.count)
        ]
        self.register_outputs({"nodeNames": [node.node_name for node in self.nodes]})

    def _security_group(
        self, name: str, settings: Settings, network: Network, control_plane: ControlPlane
    ) -> aws.ec2.SecurityGroup:
        """Kubelet (:10250) from the control plane only. SSH (from network.sshAllowedCidrs or the
        bastion), node-to-node CNI traffic and egress come from the shared cluster group."""
        return aws.ec2.SecurityGroup(
            f"{name}-nodes",
            description=f"{name}: kubelet API from the control plane",
            vpc_id=network.vpc_id,
            ingress=[
                tcp_port_rule(
                    "kubelet API from the control plane (logs, exec, metrics)",
                    KUBELET_PORT,
                    control_plane.kubelet_client_cidrs,
                )
            ],
            tags={**settings.stack_tags, "Name": f"{name}-nodes"},
            opts=pulumi.ResourceOptions(parent=self),
        )


@dataclass(frozen=True)
class _Machine:
    """What every instance of a pool shares."""

    ami: pulumi.Output[str]
    ami_pinned: bool
    key_name: pulumi.Output[str]
    security_group_ids: list[pulumi.Input[str]]


class GpuNode(pulumi.ComponentResource):
    """One GPU instance and its bootstrap chain, ending in a Ready Node named `node_name`.

    The component itself is registered as `<node>-node` so that `<node>` names exactly one
    resource, the instance (as the interface contract and the tests look it up).
    """

    node_name: str
    gpu_type: GpuInstanceType
    pool: NodePool
    instance: aws.ec2.Instance
    host: Host
    join: command.remote.Command
    node_ready: command.remote.Command

    def __init__(
        self,
        node_name: str,
        *,
        index: int,
        pool: NodePool,
        settings: Settings,
        network: Network,
        control_plane: ControlPlane,
        machine: _Machine,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("gpu-cluster:index:GpuNode", f"{node_name}-node", None, opts)
        self.node_name = node_name
        self.pool = pool
        self.gpu_type = pool.gpu_type
        self.instance = self._instance(index, settings, network, machine)
        address = (
            self.instance.public_ip
            if settings.network.connects_to_public_ips
            else self.instance.private_ip
        )
        self.host = ssh_host(node_name, address, settings)
        self.join, self.node_ready = self._bootstrap(settings, control_plane)
        self.register_outputs(
            {
                "nodeName": node_name,
                "instanceId": self.instance.id,
                "privateIp": self.instance.private_ip,
            }
        )

    def _instance(
        self, index: int, settings: Settings, network: Network, machine: _Machine
    ) -> aws.ec2.Instance:
        pool, name = self.pool, self.node_name
        tags = {**settings.stack_tags, POOL_LABEL: pool.name, "Name": name}
        market = None
        if pool.market == "spot":
            market = aws.ec2.InstanceInstanceMarketOptionsArgs(
                market_type="spot",
                spot_options=aws.ec2.InstanceInstanceMarketOptionsSpotOptionsArgs(
                    spot_instance_type="one-time",
                    instance_interruption_behavior="terminate",
                ),
            )
        root = machines.root_volume(pool.root_volume_gi_b)
        root.tags = tags
        return aws.ec2.Instance(
            name,
            ami=machine.ami,
            instance_type=pool.instance_type,
            subnet_id=network.subnet_ids[index % len(network.subnet_ids)],
            vpc_security_group_ids=machine.security_group_ids,
            key_name=machine.key_name,
            associate_public_ip_address=settings.network.assigns_public_ips,
            metadata_options=machines.metadata_options(pool.metadata_hop_limit),
            root_block_device=root,
            instance_market_options=market,
            tags=tags,
            opts=pulumi.ResourceOptions(
                parent=self,
                # A looked-up AMI moves with every Canonical release; a running node is not
                # replaced for that (a configured amiId still is).
                ignore_changes=[] if machine.ami_pinned else ["ami"],
            ),
        )

    def _bootstrap(
        self, settings: Settings, control_plane: ControlPlane
    ) -> tuple[command.remote.Command, command.remote.Command]:
        name, pool = self.node_name, self.pool

        def step(suffix: str, script: str, after: pulumi.Resource, timeout: str, **params):
            return run_script(
                f"{name}-{suffix}",
                host=self.host,
                script=script,
                params=params,
                after=[after],
                parent=self,
                timeout=timeout,
            )

        kube_tools: pulumi.Resource = self.instance
        for install in install_steps(pool, settings):
            kube_tools = step(
                install.suffix, install.script, kube_tools, install.timeout, **install.params
            )
        join_params = {
            "NODE_NAME": name,
            "KUBERNETES_MINOR": settings.kubernetes_version,
            "NODE_LABELS": node_labels(pool),
            "NODE_TAINTS": node_taints(pool),
        }
        credentials = control_plane.join_credentials(
            name,
            parent=self,
            after=[kube_tools],
            join_spec=script_digest("join-node.sh", join_params),
            node_ip=self.instance.private_ip,
        )
        join = run_script(
            f"{name}-join",
            host=self.host,
            script="join-node.sh",
            params={
                **join_params,
                "API_ENDPOINT": credentials.endpoint,
                "CA_CERT_HASH": credentials.ca_cert_hash,
            },
            secret_params={"JOIN_TOKEN": credentials.token},
            delete_script="reset-node.sh",
            after=[credentials.step],
            parent=self,
            timeout=JOIN_TIMEOUT,
        )
        node_ready = control_plane.register_node(name, parent=self, after=[join])
        return join, node_ready


def install_steps(pool: NodePool, settings: Settings) -> tuple[InstallStep, ...]:
    """The steps that make a booted Ubuntu a GPU host, in order, with their parameters: every
    node of a stock pool runs them; a baked image runs them once (components/gpu_image.py) and
    its nodes run them again only to verify."""
    gpu = pool.gpu_type
    return (
        InstallStep("wait-ready", "wait-ready.sh", WAIT_READY_TIMEOUT, {}),
        # Its own step because it may reboot the host (nouveau in use, or a kernel without a
        # signed module of this driver replaced by the newest one with it): the driver step
        # then redials.
        InstallStep(
            "nouveau",
            "disable-nouveau.sh",
            NOUVEAU_TIMEOUT,
            {"DRIVER_BRANCH": pool.driver_version, "KERNEL_MODULES": pool.kernel_module_type},
        ),
        InstallStep(
            "driver",
            "install-driver.sh",
            DRIVER_TIMEOUT,
            {
                "DRIVER_BRANCH": pool.driver_version,
                "GPU_COUNT": str(gpu.gpu_count),
                "NEEDS_FABRIC_MANAGER": "true" if gpu.needs_fabric_manager else "false",
                "KERNEL_MODULES": pool.kernel_module_type,
                "NVLINK_SUBNET_MANAGER": "true" if gpu.needs_nvlink_subnet_manager else "false",
            },
        ),
        InstallStep(
            "runtime",
            "install-runtime.sh",
            RUNTIME_TIMEOUT,
            host_pins.runtime_params(
                pool.os_version, settings.kubernetes_version, with_toolkit=True
            ),
        ),
        InstallStep(
            "kube-tools",
            "install-kube-tools.sh",
            KUBE_TOOLS_TIMEOUT,
            {
                "KUBERNETES_MINOR": settings.kubernetes_version,
                "SANDBOX_IMAGE": host_pins.PAUSE_IMAGES[settings.kubernetes_version],
            },
        ),
    )


def node_labels(pool: NodePool) -> str:
    """NODE_LABELS for join-node.sh: the pool's labels plus the GPU and pool labels, sorted."""
    labels = {**pool.labels, GPU_PRESENT_LABEL: "true", POOL_LABEL: pool.name}
    return ",".join(f"{key}={labels[key]}" for key in sorted(labels))


def node_taints(pool: NodePool) -> str:
    """NODE_TAINTS for join-node.sh: key=value:Effect (key:Effect without a value)."""
    return ",".join(
        f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}" for t in pool.taints
    )

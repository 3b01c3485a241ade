"""GPU node pools: EC2 GPU instances bootstrapped over SSH, step by step, into joined Nodes.

Per node the chain is strict, one `remote.Command` per host script, each named after its step:

    <node> (EC2 instance) -> <node>-wait-ready -> <node>-nouveau -> <node>-roll-drain (control
      plane) -> <node>-driver -> <node>-runtime -> <node>-kube-upgrade -> <node>-kube-tools
      -> <node>-join-token (control plane) -> <node>-join -> <node>-node-ready (control plane)
      ... -> <node>-uncordon (control plane, after the node's validation)

A disruptive change on a joined node rolls between roll-drain and uncordon (components/rolling.py).

Nodes never wait on each other, so the time to a joined node does not grow with the pool size.
The steps come from the step table (components/steps.py). Teardown: the control plane drains and
deletes the Node (`<node>-node-ready`'s delete, without eviction when the Node is not Ready),
then the instance terminates; nothing dials the node on delete, so a dead machine never blocks.
A step is replaced only when its identity changes (the instance id; for the join also the
cluster); changing a pool's driver branch is an update that re-runs that pool's driver step, rolled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pulumi
import pulumi_aws as aws
import pulumi_command as command

from components import fabric, host_pins, machines, rolling, steps
from components.catalog import GpuInstanceType
from components.gpu_image import InstallStep
from components.labels import EFA_LABEL, GPU_PRESENT_LABEL, POOL_LABEL
from components.network import KUBELET_PORT, Network, tcp_port_rule
from components.remote import Host, run_step, ssh_host
from components.settings import NodePool, Settings

if TYPE_CHECKING:
    from components.control_plane import ControlPlane

# The NVIDIA Container Toolkit the nodes get (a baked image is keyed by it too).
NVIDIA_CTK_VERSION = host_pins.NVIDIA_CTK_VERSION


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
        security_group_ids = [network.cluster_security_group_id, security_group.id]
        efa = None
        if pool.uses_efa:
            efa = fabric.pool_fabric(name, pool, settings, network, parent=self)
            security_group_ids.append(efa.security_group.id)
        machine = _Machine(
            ami=ami,
            ami_pinned=pool.ami_id is not None,
            key_name=key.key_name,
            security_group_ids=security_group_ids,
            efa=efa,
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
    efa: fabric.EfaFabric | None = None  # the pool uses EFA


class GpuNode(pulumi.ComponentResource):
    """One GPU instance and its bootstrap chain, ending in a Ready Node named `node_name`.

    The component itself is registered as `<node>-node` so that `<node>` names exactly one
    resource, the instance (as the interface contract and the tests look it up).
    """

    node_name: str
    gpu_type: GpuInstanceType
    pool: NodePool
    instance: aws.ec2.Instance
    efa_interfaces: list[aws.ec2.NetworkInterface]
    host: Host
    join: command.remote.Command
    node_ready: command.remote.Command
    change: str  # digest of the disruptive steps' programs (components/rolling.py)
    uncordon: command.remote.Command

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
        self.efa_interfaces = []
        if machine.efa is not None:
            self.efa_interfaces = fabric.node_interfaces(
                node_name, pool, settings, machine.efa, machine.security_group_ids, parent=self
            )
        self.instance = self._instance(index, settings, network, machine)
        public_ip = self.instance.public_ip
        if self.efa_interfaces and settings.network.assigns_public_ips:
            public_ip = fabric.public_address(
                node_name, pool, settings, self.efa_interfaces[0], self.instance, parent=self
            )
        address = public_ip if settings.network.connects_to_public_ips else self.instance.private_ip
        self.host = ssh_host(node_name, address, settings, identity=self.instance.id)
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
        # Only what a pool configures is passed: an input a running machine never had would
        # change it (and replace it, for network interfaces and the placement group).
        if machine.efa is None:
            placement: dict = {
                "subnet_id": network.subnet_ids[index % len(network.subnet_ids)],
                "vpc_security_group_ids": machine.security_group_ids,
                "associate_public_ip_address": settings.network.assigns_public_ips,
            }
        else:
            placement = fabric.efa_launch_args(machine.efa, self.efa_interfaces, pool.gpu_type)
        launch = {"instance_market_options": market, **placement, **fabric.reservation_args(pool)}
        return aws.ec2.Instance(
            name,
            ami=machine.ami,
            instance_type=pool.instance_type,
            key_name=machine.key_name,
            metadata_options=machines.metadata_options(pool.metadata_hop_limit),
            root_block_device=root,
            tags=tags,
            **launch,
            opts=pulumi.ResourceOptions(
                parent=self,
                ignore_changes=[
                    *machines.day_two_ignored(ami_pinned=machine.ami_pinned),
                    *fabric.LAUNCH_ONLY_INPUTS,
                ],
            ),
        )

    def _bootstrap(
        self, settings: Settings, control_plane: ControlPlane
    ) -> tuple[command.remote.Command, command.remote.Command]:
        name, pool = self.node_name, self.pool

        def step(row: steps.Step, after: pulumi.Resource, **params: str):
            return run_step(row, name, host=self.host, params=params, after=[after], parent=self)

        disruptive = {
            install.step.suffix: install.params
            for install in install_steps(pool, settings)
            if install.step.disruptive
        }
        disruptive[steps.KUBE_UPGRADE.suffix] = {"KUBERNETES_MINOR": settings.kubernetes_version}
        programs = rolling.disruptive_programs(disruptive)
        if pool.uses_efa:
            # Only EFA pools carry it: the digest of every other node stays what it was.
            programs[steps.EFA.script] = host_pins.efa_params(pool.gpu_type.efa_interfaces)
        self.change = rolling.change_digest(programs)
        timing = rolling.roll_timing(validation_seconds=settings.validation.timeout_seconds)
        kube_tools: pulumi.Resource = self.instance
        drained = False
        for install in install_steps(pool, settings):
            if install.step.disruptive and not drained:
                drained = True
                # Before the first disruptive step (nouveau may reboot into a new kernel for a
                # new driver): the roll takes the node out (if joined).
                kube_tools = run_step(
                    steps.ROLL_DRAIN,
                    name,
                    host=control_plane.host,
                    params=rolling.drain_params(name, pool, timing, self.change),
                    identity={steps.Identity.HOST: self.instance.id},
                    after=[kube_tools],
                    parent=self,
                    timeout_seconds=timing.drain_step_seconds,
                )
            if install.step is steps.KUBE_TOOLS:
                # The control plane moves to a new minor first (or, existing, is checked): no
                # kubelet of this node is ever newer than the API server.
                kube_tools = run_step(
                    steps.KUBE_UPGRADE,
                    name,
                    host=self.host,
                    params=disruptive[steps.KUBE_UPGRADE.suffix],
                    after=[kube_tools, control_plane.kubelet_gate],
                    parent=self,
                )
            kube_tools = step(install.step, kube_tools, **install.params)
            if install.step is steps.WAIT_READY:
                run_step(
                    steps.AUTHORIZED_KEYS,
                    name,
                    host=self.host,
                    params={
                        "SSH_USER": settings.ssh.user,
                        "AUTHORIZED_KEYS": machines.authorized_keys(settings),
                    },
                    after=[kube_tools],
                    parent=self,
                )
        if pool.uses_efa:
            kube_tools = step(
                steps.EFA, kube_tools, **host_pins.efa_params(pool.gpu_type.efa_interfaces)
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
            node_id=self.instance.id,
            node_ip=self.instance.private_ip,
        )
        join = run_step(
            steps.JOIN,
            name,
            host=self.host,
            params={
                **join_params,
                "API_ENDPOINT": credentials.endpoint,
                "CA_CERT_HASH": credentials.ca_cert_hash,
            },
            secret_params={"JOIN_TOKEN": credentials.token},
            identity={
                steps.Identity.ENDPOINT: credentials.endpoint,
                steps.Identity.CA_HASH: credentials.ca_cert_hash,
            },
            after=[credentials.step],
            parent=self,
        )
        node_ready = control_plane.register_node(
            name,
            node_id=self.instance.id,
            token_id=credentials.token_id,
            parent=self,
            after=[join],
        )
        control_plane.reconcile_labels(
            name,
            node_id=self.instance.id,
            labels=join_params["NODE_LABELS"],
            taints=join_params["NODE_TAINTS"],
            parent=self,
            after=[node_ready],
        )
        return join, node_ready

    def finish_roll(
        self, control_plane: ControlPlane, *, after: Sequence[pulumi.Resource]
    ) -> command.remote.Command:
        """`<node>-uncordon` on the control plane, after `after` (the node's validation Job, or
        node-ready without validation): uncordon the node and give its pool slot back once a
        disruptive change passed the checks again (components/rolling.py)."""
        self.uncordon = run_step(
            steps.ROLL_UNCORDON,
            self.node_name,
            host=control_plane.host,
            params=rolling.uncordon_params(self.node_name, self.pool, self.change),
            identity={steps.Identity.HOST: self.instance.id},
            after=[self.node_ready, *after],
            parent=self,
        )
        return self.uncordon


def install_steps(pool: NodePool, settings: Settings) -> tuple[InstallStep, ...]:
    """The steps that make a booted Ubuntu a GPU host, in order, with their parameters: every
    node of a stock pool runs them; a baked image runs them once (components/gpu_image.py) and
    its nodes run them again only to verify."""
    gpu = pool.gpu_type
    return (
        InstallStep(steps.WAIT_READY, {}),
        # Its own step because it may reboot the host (nouveau in use, or a kernel without a
        # signed module of this driver replaced by the newest one with it): the driver step
        # then redials.
        InstallStep(
            steps.NOUVEAU,
            {"DRIVER_BRANCH": pool.driver_version, "KERNEL_MODULES": pool.kernel_module_type},
        ),
        InstallStep(
            steps.DRIVER,
            {
                "DRIVER_BRANCH": pool.driver_version,
                "GPU_COUNT": str(gpu.gpu_count),
                "NEEDS_FABRIC_MANAGER": "true" if gpu.needs_fabric_manager else "false",
                "KERNEL_MODULES": pool.kernel_module_type,
                "NVLINK_SUBNET_MANAGER": "true" if gpu.needs_nvlink_subnet_manager else "false",
            },
        ),
        InstallStep(
            steps.RUNTIME,
            host_pins.runtime_params(
                pool.os_version, settings.kubernetes_version, with_toolkit=True
            ),
        ),
        InstallStep(
            steps.KUBE_TOOLS,
            {
                "KUBERNETES_MINOR": settings.kubernetes_version,
                "SANDBOX_IMAGE": host_pins.PAUSE_IMAGES[settings.kubernetes_version],
            },
        ),
    )


def node_labels(pool: NodePool) -> str:
    """NODE_LABELS for join-node.sh: the pool's labels plus the GPU and pool labels (and the EFA
    label on pools that use EFA), sorted."""
    labels = {**pool.labels, GPU_PRESENT_LABEL: "true", POOL_LABEL: pool.name}
    if pool.uses_efa:
        labels[EFA_LABEL] = "true"
    return ",".join(f"{key}={labels[key]}" for key in sorted(labels))


def node_taints(pool: NodePool) -> str:
    """NODE_TAINTS for join-node.sh: key=value:Effect (key:Effect without a value)."""
    return ",".join(
        f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}" for t in pool.taints
    )

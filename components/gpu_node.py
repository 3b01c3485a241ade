"""GPU node pools: EC2 GPU instances, or existing servers, bootstrapped over SSH, step by step,
into joined Nodes.

Each GpuNode builds its rows of the step table (components/hosts/steps.py, Part.NODE) in table
order, each after the rows it follows: a new step is a new row plus its script. Nodes never wait
on each other, so the time to a joined node does not grow with the pool size. A step is replaced
only when its identity changes (docs/decisions/ on day two); a disruptive change rolls
(components/hosts/rolling.py). The Node's side in the cluster (taken out, put in service,
drained and deleted before its machine goes) goes through the Kubernetes API from the rows'
hooks (components/kube/node_hooks.py); an existing host is left as it is, and nothing dials a
host on delete. What the chain needs of its machine: components/node_machine.py.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pulumi
import pulumi_aws as aws
import pulumi_command as command

from components.aws import fabric, machines
from components.aws.network import KUBELET_PORT, Network, tcp_port_rule
from components.catalog import GpuInstanceType
from components.hosts import pins, rolling, steps
from components.hosts.remote import Host, Login, run_step
from components.kube import bootstrap_token, node_hooks
from components.kube.api.slots import Slots
from components.kube.in_service import in_service
from components.kube.manifests import DEVICE_PLUGIN_NAMESPACE
from components.kube.validation import expected_allocatable
from components.node_inputs import in_service_environment, install_steps, join_params
from components.node_machine import Launch, NodeMachine, existing_host, launched
from components.settings import NodePool, Settings
from components.settings.hosts_pool import ExistingHost, HostsNodePool

if TYPE_CHECKING:
    from components.control_plane import ControlPlane

# The NVIDIA Container Toolkit the nodes get (a baked image is keyed by it too).
NVIDIA_CTK_VERSION = pins.NVIDIA_CTK_VERSION
# How long the join waits for the Node to register and be Ready.
NODE_READY_TIMEOUT_SECONDS = 600


@dataclass(frozen=True)
class NodeChecks:
    """What a node's join checks after it joined: the device plugin DaemonSet it waits for, and
    the allocatable GPUs it must reach (None: validation disabled, no capacity check); and what
    must be in the cluster before it registers (`guard`: the policy that holds nodes to their
    proof taint and the control plane's labels, components/kube/node_guard.py)."""

    device_plugin: pulumi.Resource
    shares_per_gpu: int  # time slicing: each GPU advertised as this many
    capacity_timeout_seconds: int
    enabled: bool = True
    guard: pulumi.Resource | None = None

    @classmethod
    def of(
        cls,
        settings: Settings,
        device_plugin: pulumi.Resource,
        guard: pulumi.Resource | None = None,
    ) -> NodeChecks:
        return cls(
            guard=guard,
            device_plugin=device_plugin,
            shares_per_gpu=settings.device_plugin.time_slicing.replicas,
            capacity_timeout_seconds=settings.validation.timeout_seconds,
            enabled=settings.validation.enabled,
        )

    def expected_gpus(self, pool: NodePool | HostsNodePool) -> str:
        """EXPECTED_GPUS for join-node.sh: every share of every GPU, or "" (no check)."""
        if not self.enabled:
            return ""
        return str(expected_allocatable(pool.gpu_type.gpu_count, self.shares_per_gpu))


@dataclass(frozen=True)
class GpuNodePoolArgs:
    """What a pool uses: its section, the cluster's name, Kubernetes minor and tags, the
    validation bound (a roll's slot outlasts it), the network (None when the stack launches no
    EC2 machine) and control plane, how steps log in, and the baked image's AMI id for
    `image: baked`."""

    pool: NodePool | HostsNodePool
    cluster_name: str
    kubernetes_version: str
    validation_timeout_seconds: int
    network: Network | None
    control_plane: ControlPlane
    login: Login
    assigns_public_ips: bool  # the instances get a public address (network.publicIps)
    dials_public_ips: bool  # steps dial public addresses (no bastion relays)
    tags: Mapping[str, str]
    checks: NodeChecks
    registered_at: datetime.datetime  # the program's clock, read once per run (join tokens)
    hooks: node_hooks.NodeHooks
    image_ami: pulumi.Input[str] | None = None

    @classmethod
    def of(
        cls,
        settings: Settings,
        pool: NodePool | HostsNodePool,
        *,
        network: Network | None,
        control_plane: ControlPlane,
        device_plugin: pulumi.Resource,
        registered_at: datetime.datetime,
        hooks: node_hooks.NodeHooks,
        guard: pulumi.Resource | None = None,
        image_ami: pulumi.Input[str] | None = None,
    ) -> GpuNodePoolArgs:
        return cls(
            pool=pool,
            cluster_name=settings.cluster_name,
            kubernetes_version=settings.kubernetes_version,
            validation_timeout_seconds=settings.validation.timeout_seconds,
            network=network,
            control_plane=control_plane,
            login=Login.of(settings),
            assigns_public_ips=settings.network.assigns_public_ips,
            dials_public_ips=settings.network.connects_to_public_ips,
            tags=settings.stack_tags,
            checks=NodeChecks.of(settings, device_plugin, guard),
            registered_at=registered_at,
            hooks=hooks,
            image_ami=image_ami,
        )


class GpuNodePool(pulumi.ComponentResource):
    """`pool.count` GpuNodes of one instance type, spread over the network's subnets, sharing a
    key pair and a security group (kubelet only from the control plane); or, for a pool of
    existing hosts, one GpuNode per host and nothing of AWS.

    Outputs: `pool` (its section) and `nodes` (its GpuNodes, in index order, or in the order of
    its hosts).
    """

    pool: NodePool | HostsNodePool
    nodes: list[GpuNode]

    def __init__(
        self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("gpu-cluster:index:GpuNodePool", name, None, opts)
        self.pool = args.pool
        token_seed = bootstrap_token.seed(name, parent=self)
        if isinstance(args.pool, HostsNodePool):
            self.nodes = self._host_nodes(args.pool, args, token_seed)
        else:
            self.nodes = self._instance_nodes(name, args.pool, args, token_seed)
        self.register_outputs({"nodeNames": [node.node_name for node in self.nodes]})

    def _host_nodes(
        self, pool: HostsNodePool, args: GpuNodePoolArgs, token_seed: pulumi.Output[str]
    ) -> list[GpuNode]:
        """One GpuNode per existing host, named by its key in the pool (never its position)."""
        return [
            GpuNode(
                f"{args.cluster_name}-{pool.name}-{host.key}",
                GpuNodeArgs.of(args, host, token_seed),
                pulumi.ResourceOptions(parent=self),
            )
            for host in pool.hosts
        ]

    def _instance_nodes(
        self,
        name: str,
        pool: NodePool,
        args: GpuNodePoolArgs,
        token_seed: pulumi.Output[str],
    ) -> list[GpuNode]:
        """`pool.count` EC2 machines with what they share: a key pair, security groups, the
        pool's EFA fabric and its image."""
        network = args.network
        assert network is not None  # a pool of instances: the stack has its network
        key = machines.key_pair(name, args.login.ssh.public_key, args.tags, parent=self)
        security_groups = [network.cluster_security_group_id, self._security_group(name, args).id]
        efa = None
        if pool.uses_efa:
            efa = fabric.pool_fabric(name, pool, args.tags, network, parent=self)
            security_groups.append(efa.security_group.id)
        nodes = []
        # An empty pool boots nothing, so it looks up no image (gpu_image.baked_images builds
        # none for it either): scaling a baked pool to 0 is a plan, not an error.
        if pool.count:
            image = self._image(pool, args)
            for index in range(pool.count):
                launch = Launch(
                    image=image,
                    key_name=key.key_name,
                    subnet_id=network.subnet_ids[index % len(network.subnet_ids)],
                    security_group_ids=security_groups,
                    assigns_public_ips=args.assigns_public_ips,
                    dials_public_ips=args.dials_public_ips,
                    tags=args.tags,
                    efa=efa,
                )
                node = GpuNode(
                    f"{args.cluster_name}-{pool.name}-{index}",
                    GpuNodeArgs.of(args, launch, token_seed),
                    pulumi.ResourceOptions(parent=self),
                )
                nodes.append(node)
        return nodes

    def _image(self, pool: NodePool, args: GpuNodePoolArgs) -> machines.MachineImage:
        """What the pool's machines boot from: its baked image, its amiId or Canonical's."""
        if pool.image != "baked":
            return machines.machine_image(pool.os_version, pool.ami_id, parent=self)
        if args.image_ami is None:
            raise ValueError(f"pool {pool.name}: image: baked needs the GpuImage's AMI id")
        return machines.MachineImage(
            pulumi.Output.from_input(args.image_ami), pinned=pool.ami_id is not None
        )

    def _security_group(self, name: str, args: GpuNodePoolArgs) -> aws.ec2.SecurityGroup:
        """Kubelet (:10250) from the control plane only. SSH (from network.sshAllowedCidrs or the
        bastion), node-to-node CNI traffic and egress come from the shared cluster group."""
        assert args.network is not None
        return aws.ec2.SecurityGroup(
            f"{name}-nodes",
            description=f"{name}: kubelet API from the control plane",
            vpc_id=args.network.vpc_id,
            ingress=[
                tcp_port_rule(
                    "kubelet API from the control plane (logs, exec, metrics)",
                    KUBELET_PORT,
                    args.control_plane.kubelet_client_cidrs,
                )
            ],
            tags={**args.tags, "Name": f"{name}-nodes"},
            opts=pulumi.ResourceOptions(parent=self),
        )


@dataclass(frozen=True)
class GpuNodeArgs:
    """What one node uses: its pool's section, its machine (launched, or an existing host), the
    Kubernetes minor, the validation bound, the control plane it joins, how steps log in and
    the stack's node hooks (which the join token's mint reaches the API with too)."""

    pool: NodePool | HostsNodePool
    machine: Launch | ExistingHost
    kubernetes_version: str
    validation_timeout_seconds: int
    control_plane: ControlPlane
    login: Login
    checks: NodeChecks
    token_seed: pulumi.Output[str]  # the pool's join-token seed (bootstrap_token.seed)
    registered_at: datetime.datetime  # the program's clock, read once per run
    hooks: node_hooks.NodeHooks

    @classmethod
    def of(
        cls,
        pool: GpuNodePoolArgs,
        machine: Launch | ExistingHost,
        token_seed: pulumi.Output[str],
    ) -> GpuNodeArgs:
        return cls(
            pool=pool.pool,
            machine=machine,
            kubernetes_version=pool.kubernetes_version,
            validation_timeout_seconds=pool.validation_timeout_seconds,
            control_plane=pool.control_plane,
            login=pool.login,
            checks=pool.checks,
            token_seed=token_seed,
            registered_at=pool.registered_at,
            hooks=pool.hooks,
        )


@dataclass(frozen=True)
class NodeChain:
    """What a node's bootstrap built: the join (the Node Ready, its GPUs allocatable) and
    `change`, the digest of what its disruptive steps install (components/hosts/rolling.py)."""

    join: command.remote.Command
    change: str


@dataclass(frozen=True)
class _ChainContext:
    """What the node's rows are built with: its args, each node step's parameters by suffix,
    the roll's `change` digest and the hook its disruptive steps take the node out with."""

    args: GpuNodeArgs
    params: Mapping[str, Mapping[str, str]]
    change: str
    take_out: pulumi.ResourceHookBinding


class GpuNode(pulumi.ComponentResource):
    """One GPU machine (an EC2 instance, or an existing host) and its bootstrap chain, ending in
    a Ready Node named `node_name`.

    The component itself is registered as `<node>-node` so that `<node>` names exactly one
    resource, the instance (as the interface contract and the tests look it up); an existing
    host has none.

    Outputs: `node_name`, `pool`, `gpu_type` (the catalog entry of its instance type, or its
    pool's GPUs), `machine` (its identity, how to reach it), `instance` (None for an existing
    host), `host` (SSH to it), `join` (joined, Ready, its GPUs allocatable), `change` (digest of
    what its disruptive steps install), and after `put_in_service`, `in_service`.
    """

    node_name: str
    gpu_type: GpuInstanceType
    pool: NodePool | HostsNodePool
    machine: NodeMachine
    instance: aws.ec2.Instance | None
    efa_interfaces: list[aws.ec2.NetworkInterface]
    host: Host
    join: command.remote.Command
    change: str  # digest of what the disruptive steps install (components/hosts/rolling.py)
    in_service: command.remote.Command
    _hooks: node_hooks.NodeHooks
    _token: bootstrap_token.JoinToken  # made with the join-token row

    def __init__(self, name: str, args: GpuNodeArgs, opts: pulumi.ResourceOptions | None = None):
        # `name` is the node's (its Kubernetes Node, its steps); the component is `<name>-node`.
        node_name = name
        super().__init__("gpu-cluster:index:GpuNode", f"{node_name}-node", None, opts)
        self.node_name = node_name
        self.pool = args.pool
        self.gpu_type = args.pool.gpu_type
        self._hooks = args.hooks
        if isinstance(args.machine, ExistingHost):
            self.machine = existing_host(node_name, args.machine, args.login, parent=self)
        else:
            assert isinstance(args.pool, NodePool)
            self.machine = launched(node_name, args.pool, args.machine, args.login, parent=self)
        self.instance = self.machine.instance
        self.efa_interfaces = list(self.machine.efa_interfaces)
        self.host = self.machine.host
        chain = self._bootstrap(args)
        self.join, self.change = chain.join, chain.change
        self.register_outputs({"nodeName": node_name, **self.machine.outputs})

    def _bootstrap(self, args: GpuNodeArgs) -> NodeChain:
        """The node's rows of the step table (Part.NODE), in table order, each after the rows
        it follows (the first of them after the host's first contact); `_step` says how each
        row is made."""
        pool, minor = self.pool, args.kubernetes_version
        installs = {
            install.step.suffix: install.params
            for install in install_steps(pool, minor, args.login)
        }
        efa = pins.efa_params(pool.gpu_type.efa_interfaces) if pool.uses_efa else None
        # The node's own root volume (its image builder's is another): wait-ready grows the
        # filesystem into a larger rootVolumeGiB, which the provider applies in place. An
        # existing host's disk is its own.
        wait_ready = dict(installs[steps.WAIT_READY.suffix])
        if isinstance(pool, NodePool):
            wait_ready["ROOT_VOLUME_GIB"] = str(pool.root_volume_gib)
        change = rolling.change_digest(rolling.pinned_programs(installs, minor, efa))
        timing = rolling.roll_timing(validation_seconds=args.validation_timeout_seconds)
        roll = node_hooks.Roll(
            node_name=self.node_name,
            slots=Slots(
                pool=pool.name,
                max_unavailable=pool.max_unavailable,
                holder=self.node_name,
                hold_seconds=timing.slot_seconds,
                wait_seconds=timing.slot_wait_seconds,
            ),
            drain_seconds=timing.drain_seconds,
            change=change,
        )
        context = _ChainContext(
            args=args,
            params={**installs, steps.WAIT_READY.suffix: wait_ready, steps.EFA.suffix: efa or {}},
            change=change,
            take_out=args.hooks.take_out(roll),
        )
        registered = steps.node_rows(efa=pool.uses_efa, validation=True)
        built: dict[str, pulumi.Resource] = {
            **self.machine.first,
            **self.host.first_contact(self),
        }
        for row in steps.node_rows(efa=pool.uses_efa, validation=True, part=steps.Part.NODE):
            after = [built[name] for name in steps.follows(row, registered)]
            built[row.suffix] = self._step(row, after, context)
        join = built[steps.JOIN.suffix]
        assert isinstance(join, command.remote.Command)
        return NodeChain(join=join, change=context.change)

    def _step(
        self,
        row: steps.Step,
        after: list[pulumi.Resource],
        context: _ChainContext,
    ) -> pulumi.Resource:
        """One node row of the step table as a resource: on the node, or through the Kubernetes
        API; a disruptive row takes a joined node out first (its hook)."""
        args, name, pool = context.args, self.node_name, self.pool
        control_plane = args.control_plane
        if row is steps.KUBE_TOOLS:
            # The control plane moves to a new minor first (or, existing, is checked): no
            # kubelet of this node is ever newer than the API server.
            after = [*after, control_plane.kubelet_gate]
        if row is steps.JOIN_TOKEN:
            self._token = bootstrap_token.join_token(
                row.resource_name(name),
                node_name=name,
                seed_=args.token_seed,
                cluster=[control_plane.endpoint, control_plane.ca_cert_hash],
                machine=self.machine.id,
                access=args.hooks.access,
                registered_at=args.registered_at,
                parent=self,
                after=after,
            )
            return self._token.record
        if row is steps.JOIN:
            checks = args.checks
            return run_step(
                row,
                name,
                host=self.host,
                params={
                    **join_params(name, pool, args.kubernetes_version),
                    "PROVIDER_ID": self.machine.provider_id,
                    "API_ENDPOINT": control_plane.endpoint,
                    "CA_CERT_HASH": control_plane.ca_cert_hash,
                    "EXPECTED_GPUS": checks.expected_gpus(pool),
                    "READY_TIMEOUT_SECONDS": str(NODE_READY_TIMEOUT_SECONDS),
                    "CAPACITY_TIMEOUT_SECONDS": str(checks.capacity_timeout_seconds),
                    "DEVICE_PLUGIN_NAMESPACE": DEVICE_PLUGIN_NAMESPACE,
                    # A disruptive change re-runs the checks, after the roll changed the host.
                    "CHANGE": context.change,
                },
                secret_params={"JOIN_TOKEN": self._token.token},
                identity={
                    steps.Identity.ENDPOINT: control_plane.endpoint,
                    steps.Identity.CA_HASH: control_plane.ca_cert_hash,
                },
                after=[*after, checks.device_plugin, *filter(None, [checks.guard])],
                parent=self,
                timeout_seconds=steps.JOIN.timeout_seconds + checks.capacity_timeout_seconds,
                # Before it registers a Node a dead machine's Node of the name goes; on its delete
                # its own Node is drained and deleted, before the new join (delete first).
                hooks=args.hooks.join_binding(),
                delete_before_replace=True,
            )
        if row.runs_on is not steps.Where.NODE:
            raise ValueError(f"{row.suffix}: no way to make a {row.runs_on.value} row of a node")
        params = context.params.get(row.suffix, {})
        hooks = context.take_out if row.disruptive else None
        return run_step(
            row, name, host=self.host, params=params, after=after, parent=self, hooks=hooks
        )

    def put_in_service(self, *, after: Sequence[pulumi.Resource]) -> command.remote.Command:
        """`<node>-in-service`, after `after` (the node's GPU Jobs) and its join: the control
        plane sets the pool's labels and taints, lifts the proof taint and ends a roll, through
        the API (components/kube/in_service.py)."""
        self.in_service = in_service(
            self.node_name,
            host=self.host,
            environment=in_service_environment(
                self.node_name, self.pool, self.machine.id, self.change
            ),
            hooks=self._hooks.in_service_binding(),
            after=[self.join, *after],
            parent=self,
        )
        return self.in_service

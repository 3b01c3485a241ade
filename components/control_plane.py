"""ControlPlane: the Kubernetes API the GPU nodes join, managed (a kubeadm control plane on
EC2 the stack creates, with a pinned CNI) or existing (a kubeadm cluster reached over SSH).

Both modes expose one interface, so node pools, the device plugin and validation never ask which
mode is in use: `endpoint`, `kubeconfig` (secret), `ca_cert_hash`, `provider`, `host`, `ready`,
`kubelet_gate`, `kubelet_client_cidrs` and `machine`. Per node, the Kubernetes side (its join
token through the provider; taking it out, putting it in service, its removal through the API
with `kubeconfig`, components/kube/node_hooks.py) never dials the control-plane host. What the
stack exports is `operator_kubeconfig`, an identity of its own. Why: docs/decisions/
019-one-control-plane-interface-for-both-modes.md and
020-the-exported-kubeconfig-is-its-own-certificate.md.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_command as command
import pulumi_kubernetes as k8s

from components.aws import machines
from components.aws.network import Network, tcp_port_rule
from components.hosts import fan_in, host_keys, pins, steps
from components.hosts.remote import Host, Login, machine_host, run_step, ssh_host
from components.images.control_plane_image import install_steps
from components.kube import ca_cert_hash, certificates, kubelet_serving, manifests
from components.settings import (
    SUPPORTED_KUBERNETES_MINORS,
    ExistingControlPlane,
    ManagedControlPlane,
    OperatorKubeconfig,
    Settings,
)

API_PORT = 6443
# etcd's client and peer ports (Kubernetes "Ports and Protocols": control plane, 2379-2380,
# used by kube-apiserver and etcd): from the control plane's own group only.
ETCD_PORTS = (2379, 2380)


def node_name(cluster_name: str) -> str:
    """The managed control plane's machine, host and Node name (kubeadm init's
    nodeRegistration.name, init-control-plane.sh)."""
    return f"{cluster_name}-control-plane"


@dataclass(frozen=True)
class ControlPlaneArgs:
    """What the control plane uses: its mode's section, the cluster's name, Kubernetes minor and
    tags, the network it sits in (None for an existing one in a stack that launches no EC2
    machine), how steps log in, the operators' kubeconfig identity, and the baked image's AMI id
    for a managed control plane with `image: baked`."""

    cluster_name: str
    kubernetes_version: str
    config: ManagedControlPlane | ExistingControlPlane
    network: Network | None
    login: Login
    assigns_public_ips: bool  # the managed machine gets a public address (network.publicIps)
    dials_public_ips: bool  # steps dial public addresses (no bastion relays)
    operators: OperatorKubeconfig
    tags: Mapping[str, str]
    run_at: datetime.datetime  # the program's clock this run: the certificates' renewal period
    image_ami: pulumi.Input[str] | None = None
    gpu_nodes: int = 0  # every pool's count: the SSH fan-in a managed sshd takes

    @classmethod
    def of(
        cls,
        settings: Settings,
        network: Network | None,
        *,
        run_at: datetime.datetime,
        image_ami: pulumi.Input[str] | None = None,
    ) -> ControlPlaneArgs:
        return cls(
            run_at=run_at,
            image_ami=image_ami,
            cluster_name=settings.cluster_name,
            kubernetes_version=settings.kubernetes_version,
            config=settings.control_plane,
            network=network,
            login=Login.of(settings),
            assigns_public_ips=settings.network.assigns_public_ips,
            dials_public_ips=settings.network.connects_to_public_ips,
            operators=settings.kubeconfig,
            tags=settings.stack_tags,
            gpu_nodes=sum(pool.count for pool in settings.node_pools),
        )


@dataclass(frozen=True)
class ControlPlaneCore:
    """What either mode builds: how to reach the API and the host, and the steps others wait on
    (`ready`: the API serves and the admin kubeconfig is read; `kubelet_gate`: nodes may install
    kubelets of the configured minor). `machine` is the managed control plane's instance."""

    host: Host
    endpoint: pulumi.Output[str]
    cluster_identifier: pulumi.Output[str]
    kubelet_client_cidrs: pulumi.Output[list[str]]
    kubelet_gate: pulumi.Resource
    kubeconfig_step: command.remote.Command
    api_server: pulumi.Output[str]
    ready: list[pulumi.Resource]
    machine: aws.ec2.Instance | None = None
    sshd_ready: pulumi.Resource | None = None


class ControlPlane(pulumi.ComponentResource):
    """The Kubernetes API the GPU nodes join (see the module docstring for the two modes).

    Outputs: `endpoint` (host:port nodes join), `kubeconfig` (admin, secret; only for the
    program's own `provider`), `ca_cert_hash` (the CA public key's, which joins pin),
    `operator_kubeconfig` (secret, the one the stack exports), `provider` (Kubernetes, replaced
    only with the cluster), `kubernetes_version`, `host` (SSH to the control-plane host),
    `ready`, `kubelet_gate`, `kubelet_client_cidrs`, `machine` (the managed instance, else
    None) and `sshd_ready` (managed: the step after which its sshd takes the fleet's SSH
    fan-in, components/hosts/fan_in.py; else None).
    """

    endpoint: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]
    ca_cert_hash: pulumi.Output[str]
    operator_kubeconfig: pulumi.Output[str]
    provider: k8s.Provider
    kubernetes_version: str
    host: Host
    ready: list[pulumi.Resource]
    # After it, nodes may install kubelets of the configured minor: the managed control
    # plane's upgrade step, an existing one's version-skew check.
    kubelet_gate: pulumi.Resource
    kubelet_client_cidrs: pulumi.Output[list[str]]
    machine: aws.ec2.Instance | None  # the managed control plane's instance
    # controlPlane.unreachable: no delete dials the control plane (docs/decisions/031-...)
    unreachable: bool
    sshd_ready: pulumi.Resource | None

    def __init__(
        self, name: str, args: ControlPlaneArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("gpu-cluster:index:ControlPlane", name, None, opts)
        self._name = name
        self._args = args
        self.kubernetes_version = args.kubernetes_version
        if isinstance(args.config, ManagedControlPlane):
            core = self._managed(args.config)
        else:
            core = self._existing(args.config)
        self.host = core.host
        self.endpoint = core.endpoint
        self.kubelet_client_cidrs = core.kubelet_client_cidrs
        self.kubelet_gate = core.kubelet_gate
        self.ready = core.ready
        self.machine = core.machine
        self.sshd_ready = core.sshd_ready
        self.kubeconfig = pulumi.Output.secret(core.kubeconfig_step.stdout)
        # Not a secret: the hash of the CA's public key identifies the cluster (nodes pin it).
        self.ca_cert_hash = ca_cert_hash.kept(
            name, core.kubeconfig_step.stdout, core.cluster_identifier, parent=self
        )
        # The provider is replaced (and every Kubernetes object with it) only when this changes:
        # pulumi-kubernetes `provider/pkg/provider/provider.go` DiffConfig replaces on an
        # updated clusterIdentifier and drops every other replacement while it stays the same,
        # also when the kubeconfig is unknown in a preview (a re-run of the kubeconfig step).
        # Adding it to a running stack replaces nothing ("we don't do this when adding or
        # removing the identifier").
        self.unreachable = args.config.unreachable
        if self.unreachable:
            warn_unreachable(args.config)
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.kubeconfig,
            cluster_identifier=core.cluster_identifier,
            enable_server_side_apply=True,
            # An update of the provider, not a replacement (pulumi-kubernetes provider.go
            # DiffConfig replaces only for the cluster's identity): a delete through it then
            # drops the object from the state when the API does not answer.
            delete_unreachable=True if self.unreachable else None,
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(self.ready)),
        )
        self.operator_kubeconfig = self._operator_access(core)
        if core.machine is not None:
            # The names its own kubelet renews its serving certificate for (the timer reads
            # them; init approved the first request with the same names).
            kubelet_serving.record(
                f"{name}-control-plane",
                f"{name}-control-plane",
                kubelet_serving.serving_names(
                    f"{name}-control-plane", core.machine.private_dns, core.machine.private_ip
                ),
                provider=self.provider,
                parent=self,
            )
        self.register_outputs(
            {
                "endpoint": self.endpoint,
                "kubeconfig": self.kubeconfig,
                "operatorKubeconfig": self.operator_kubeconfig,
                "kubernetesVersion": self.kubernetes_version,
            }
        )

    # ------------------------------------------------------------ managed

    def _managed(self, config: ManagedControlPlane) -> ControlPlaneCore:
        name, args, network = self._name, self._args, self._args.network
        assert network is not None  # a managed control plane launches a machine in it
        machine = node_name(name)
        api_group = self._api_security_group(config)
        image = self._machine_image(config)
        key = machines.key_pair(machine, args.login.ssh.public_key, args.tags, parent=self)
        instance, host_key = host_keys.launch(
            machine,
            machines.MachineArgs(
                image=image,
                instance_type=config.instance_type,
                key_name=key.key_name,
                placement=machines.Placement(
                    subnet_id=network.subnet_ids[0],
                    security_group_ids=[network.cluster_security_group_id, api_group.id],
                    public_ip=args.assigns_public_ips,
                ),
                root_volume_gib=config.root_volume_gib,
                tags={**args.tags, "Name": machine, "gpu-cluster:role": "control-plane"},
                # Its loss is a new cluster: every node would have to re-join.
                protect=config.protect,
            ),
            parent=self,
        )
        private_ip = instance.private_ip
        public_ip = instance.public_ip
        if args.assigns_public_ips:
            # An Elastic IP keeps the address in the API server's certificate and in the
            # kubeconfig valid when the machine is stopped and started again.
            address = aws.ec2.Eip(
                f"{machine}-ip",
                domain="vpc",
                instance=instance.id,
                tags={**args.tags, "Name": machine},
                opts=pulumi.ResourceOptions(parent=self),
            )
            public_ip = address.public_ip
        # The operator's machine reaches the public address unless a bastion relays to private ones.
        reachable = public_ip if args.dials_public_ips else private_ip
        host = machine_host(
            machine,
            instance,
            reachable,
            args.login,
            boot_key=host_key,
            parent=self,
            role=steps.Where.CONTROL_PLANE,
        )
        endpoint = pulumi.Output.concat(private_ip, f":{API_PORT}")
        minor = args.kubernetes_version

        def step(row: steps.Step, params=None, *, after: Sequence[pulumi.Resource] = ()):
            return self._step(host, row, params, after=after)

        wait, install_runtime, install_kube_tools = install_steps(config, minor, args.login)
        # Before any node's step dials this host: sshd takes every node's dial at once.
        sshd = {"SSHD_MAX_STARTUPS": str(fan_in.max_startups(args.gpu_nodes))}
        wait_ready = step(wait.step, {**wait.params, **sshd}, after=[instance])
        runtime = step(install_runtime.step, install_runtime.params, after=[wait_ready])
        # A new minor: kubeadm upgrade of the running cluster before its kubelet moves
        # (nothing on the first `up`); refuses a skipped minor before anything is installed.
        upgrade = step(steps.CP_UPGRADE, {"KUBERNETES_MINOR": minor}, after=[runtime])
        kube_tools = step(install_kube_tools.step, install_kube_tools.params, after=[upgrade])
        cert_sans = pulumi.Output.all(public_ip, private_ip, instance.private_dns).apply(
            lambda values: ",".join(v for v in values if v)
        )
        init = step(
            steps.CP_INIT,
            {
                "CLUSTER_NAME": args.cluster_name,
                "NODE_NAME": machine,
                "KUBERNETES_MINOR": minor,
                "CONTROL_PLANE_ENDPOINT": endpoint,
                "ADVERTISE_ADDRESS": private_ip,
                "POD_SUBNET": config.pod_cidr,
                "SERVICE_SUBNET": config.service_cidr,
                "CERT_SANS": cert_sans,
                "SERVING_NAMES": kubelet_serving.serving_names(
                    machine, instance.private_dns, private_ip
                ),
            },
            after=[kube_tools],
        )
        cni = step(
            steps.CP_CNI,
            {
                "FLANNEL_VERSION": pins.FLANNEL_VERSION,
                "FLANNEL_MANIFEST_SHA256": pins.FLANNEL_MANIFEST_SHA256,
                "FLANNEL_IMAGE": pins.FLANNEL_IMAGE,
                "FLANNEL_CNI_PLUGIN_IMAGE": pins.FLANNEL_CNI_PLUGIN_IMAGE,
                "POD_SUBNET": config.pod_cidr,
                "NODE_NAME": machine,
            },
            after=[init],
        )
        api_server = pulumi.Output.concat("https://", reachable, f":{API_PORT}")
        kubeconfig = self._admin_kubeconfig(host, api_server, after=[cni], manages=True)
        return ControlPlaneCore(
            host=host,
            endpoint=endpoint,
            # A new control-plane machine is a new cluster (kubeadm init makes a new CA).
            cluster_identifier=pulumi.Output.concat(args.cluster_name, "/", instance.id),
            kubelet_client_cidrs=private_ip.apply(lambda ip: [f"{ip}/32"]),
            kubelet_gate=upgrade,
            kubeconfig_step=kubeconfig,
            api_server=api_server,
            ready=[init, cni, kubeconfig],
            machine=instance,
            sshd_ready=wait_ready,
        )

    def _machine_image(self, config: ManagedControlPlane) -> machines.MachineImage:
        """The baked image with `image: baked` (not followed after create, like a looked-up
        Canonical image: a new image never replaces the cluster), else `amiId` or Canonical's."""
        if config.image != "baked":
            return machines.machine_image(config.os_version, config.ami_id, parent=self)
        if self._args.image_ami is None:
            raise ValueError("controlPlane image: baked needs the ControlPlaneImage's AMI id")
        return machines.MachineImage(pulumi.Output.from_input(self._args.image_ami), pinned=False)

    def _api_security_group(self, config: ManagedControlPlane) -> aws.ec2.SecurityGroup:
        """The API port from inside the VPC (nodes) and from `apiAllowedCidrs` (operators); etcd
        from this group itself, which only control-plane machines carry."""
        args, network = self._args, self._args.network
        assert network is not None
        ingress = [
            aws.ec2.SecurityGroupIngressArgs(
                description="etcd client and peer from the control plane only",
                protocol="tcp",
                from_port=ETCD_PORTS[0],
                to_port=ETCD_PORTS[1],
                self=True,
            ),
            tcp_port_rule(
                "Kubernetes API from the VPC (nodes joining, kubelets)",
                API_PORT,
                [network.vpc_cidr],
            ),
        ]
        if config.api_allowed_cidrs:
            ingress.append(
                tcp_port_rule(
                    "Kubernetes API from the operators (controlPlane.apiAllowedCidrs)",
                    API_PORT,
                    list(config.api_allowed_cidrs),
                )
            )
        return aws.ec2.SecurityGroup(
            f"{self._name}-api",
            description=f"{args.cluster_name}: Kubernetes API on {API_PORT}",
            vpc_id=network.vpc_id,
            ingress=ingress,
            tags={**args.tags, "Name": f"{self._name}-api"},
            opts=pulumi.ResourceOptions(parent=self),
        )

    # ------------------------------------------------------------ existing

    def _existing(self, config: ExistingControlPlane) -> ControlPlaneCore:
        args = self._args
        assert config.host is not None and config.endpoint is not None  # settings checks both
        # No instance of ours: the host's address is its identity.
        host = ssh_host(
            f"{self._name}-control-plane",
            config.host,
            args.login,
            identity=config.host,
            host_key=config.host_key,
            user=config.user,
            role=steps.Where.CONTROL_PLANE,
        )
        source = config.kubelet_client_address
        if source is not None:
            kubelet_client_cidrs = pulumi.Output.from_input([f"{source}/32"])
        elif args.network is not None:
            # Only DNS names: the control plane lives somewhere in the VPC.
            kubelet_client_cidrs = args.network.vpc_cidr.apply(lambda cidr: [cidr])
        else:
            # No EC2 pool, so no security group reads it: existing hosts' own firewalls admit
            # the control plane to their kubelets (docs/operations.md).
            kubelet_client_cidrs = pulumi.Output.from_input([])
        skew = self._step(
            host,
            steps.CP_VERSION_SKEW,
            {
                "KUBERNETES_MINOR": args.kubernetes_version,
                # Its advice names only a minor gpu-cluster:kubernetesVersion accepts.
                "SUPPORTED_MINORS": ",".join(SUPPORTED_KUBERNETES_MINORS),
            },
        )
        api_server = pulumi.Output.from_input(f"https://{config.endpoint}")
        kubeconfig = self._admin_kubeconfig(host, api_server, after=[skew], manages=False)
        return ControlPlaneCore(
            host=host,
            endpoint=pulumi.Output.from_input(config.endpoint),
            cluster_identifier=pulumi.Output.from_input(f"{args.cluster_name}/{config.endpoint}"),
            kubelet_client_cidrs=kubelet_client_cidrs,
            kubelet_gate=skew,
            kubeconfig_step=kubeconfig,
            api_server=api_server,
            ready=[skew, kubeconfig],
        )

    # ------------------------------------------------------------ shared

    def _step(
        self,
        host: Host,
        step: steps.Step,
        params: dict[str, pulumi.Input[str]] | None = None,
        *,
        after: Sequence[pulumi.Resource] = (),
    ) -> command.remote.Command:
        return run_step(step, self._name, host=host, params=params, after=after, parent=self)

    def _admin_kubeconfig(
        self,
        host: Host,
        api_server: pulumi.Input[str],
        *,
        after: Sequence[pulumi.Resource],
        manages: bool,
    ) -> command.remote.Command:
        """`<cluster>-certificates` (kubeadm's certificates renewed when they expire soon, once
        per renewal period of the program's clock), then `<cluster>-kubeconfig`, which reads
        admin.conf again whenever its certificate's expiry changed."""
        renewal = self._step(
            host,
            steps.CP_CERTIFICATES,
            certificates.renewal_params(self._args.run_at, manages_control_plane=manages),
            after=after,
        )
        params = {
            "API_SERVER": api_server,
            "ADMIN_CERT_NOT_AFTER": renewal.stdout.apply(certificates.admin_not_after),
        }
        return self._step(host, steps.CP_KUBECONFIG, params, after=[renewal])

    def _operator_access(self, core: ControlPlaneCore) -> pulumi.Output[str]:
        """The operators' kubeconfig: its own identity, group-bound, with a bounded lifetime."""
        access = self._args.operators
        k8s.rbac.v1.ClusterRoleBinding(
            f"{self._name}-operators",
            metadata={"name": "gpu-cluster-operators", "labels": dict(manifests.MANAGED_BY)},
            role_ref={
                "api_group": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": access.cluster_role,
            },
            subjects=[
                {"api_group": "rbac.authorization.k8s.io", "kind": "Group", "name": access.group}
            ],
            opts=pulumi.ResourceOptions(parent=self, provider=self.provider),
        )
        step = self._step(
            core.host,
            steps.CP_OPERATOR_KUBECONFIG,
            {
                "API_SERVER": core.api_server,
                "CLIENT_NAME": f"{self._args.cluster_name}-operator",
                "GROUP": access.group,
                "VALIDITY_HOURS": str(access.validity_hours),
            },
            after=[core.kubeconfig_step],
        )
        return pulumi.Output.secret(step.stdout)


def warn_unreachable(config: ManagedControlPlane | ExistingControlPlane) -> None:
    """controlPlane.unreachable is on: said loudly on every preview and up."""
    which = (
        f"the control plane at {config.host}"
        if isinstance(config, ExistingControlPlane)
        else ("the managed control plane")
    )
    pulumi.log.warn(
        f"gpu-cluster:controlPlane.unreachable is true ({which}): NO NODE IS DRAINED. Deleting "
        "a GPU machine (destroy, a smaller pool, a replacement) skips its drain on the control "
        "plane, and Kubernetes objects are dropped from the state without being deleted when "
        "the API does not answer. Run `pulumi up` once with it (it dials nothing), then "
        "`pulumi destroy` or the scale-down; remove it as soon as the control plane is back "
        '(docs/operations.md, "A control plane that is gone").'
    )

"""ControlPlane: the Kubernetes API the GPU nodes join, in one of two modes.

- `managed`: a CPU EC2 instance this stack creates and bootstraps with the same runtime and
  kube-tools scripts as the GPU nodes, then `kubeadm init` from an InitConfiguration, a pinned CNI,
  and the admin kubeconfig read back (a secret) with an address the operator's machine reaches.
  A `kubernetesVersion` one minor up upgrades it with kubeadm before any node moves.
- `existing`: a kubeadm cluster whose control-plane host answers over SSH (through the bastion
  when there is one). The stack checks version skew first, then reads the kubeconfig.

Both modes expose one interface, so node pools, the device plugin and validation never ask which
mode is in use: `endpoint`, `kubeconfig` (secret), `provider`, `kubernetes_version`, `host`,
`ready`, `kubelet_gate`, `kubelet_client_cidrs`, `join_credentials(...)` and
`register_node(...)`.

`kubeconfig` (admin) stays with the program's own provider. What the stack exports is
`operator_kubeconfig` (secret): a certificate of its own from `kubeadm kubeconfig user`, in the
configured group, bound to one ClusterRole by a ClusterRoleBinding (deleting it revokes the
access) and valid for `kubeconfig.validityHours`.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_command as command
import pulumi_kubernetes as k8s

from components import host_keys, host_pins, machines, steps
from components import kubernetes_manifests as manifests
from components.network import Network, tcp_port_rule
from components.remote import Host, run_step, ssh_host
from components.settings import ExistingControlPlane, ManagedControlPlane, Settings

API_PORT = 6443
# Each node gets its own bootstrap token, valid until the node has joined (its node-ready step
# deletes it then): a join retried at any time after a failure finds it valid, with no manual
# re-mint. kubeadm token create: "If set to '0', the token will never expire".
JOIN_TOKEN_TTL = "0s"
NODE_READY_TIMEOUT_SECONDS = 600
DRAIN_TIMEOUT_SECONDS = 300
# The CNI of the managed control plane: flannel, pinned to one release manifest.
FLANNEL_VERSION = "v0.27.4"


@dataclass(frozen=True)
class JoinCredentials:
    """What one `kubeadm join` needs: a fresh bootstrap token (secret), the CA public key hash
    that pins the API server's identity, and the endpoint. `step` is the minting command."""

    token: pulumi.Output[str]
    token_id: pulumi.Output[str]
    ca_cert_hash: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    step: command.remote.Command


def parse_join_token(stdout: str) -> dict[str, str]:
    """The JSON line mint-join-token.sh prints: {"token": ..., "caCertHash": "sha256:..."}.

    Errors never include the output: it holds the token."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            data = json.loads(line)
            if not isinstance(data.get("token"), str) or not str(
                data.get("caCertHash", "")
            ).startswith("sha256:"):
                raise ValueError("mint-join-token.sh printed JSON without token and caCertHash")
            return data
    raise ValueError("mint-join-token.sh printed no JSON line with the token (output not shown)")


def kubelet_client_address(config: ExistingControlPlane) -> str | None:
    """The address an existing control plane reaches node kubelets from: the API endpoint's
    private IP (what nodes join, so the VPC-side address), else the SSH host's private IP, else
    any IP given; None when both are DNS names."""
    assert config.host is not None and config.endpoint is not None  # settings checks both
    candidates = [config.endpoint.rpartition(":")[0].strip("[]"), config.host]
    addresses = []
    for candidate in candidates:
        try:
            addresses.append(ipaddress.ip_address(candidate))
        except ValueError:
            continue
    private = [a for a in addresses if a.is_private]
    chosen = (private or addresses or [None])[0]
    return None if chosen is None else str(chosen)


class ControlPlane(pulumi.ComponentResource):
    endpoint: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]
    provider: k8s.Provider
    kubernetes_version: str
    host: Host
    ready: list[pulumi.Resource]
    # After it, nodes may install kubelets of settings.kubernetes_version: the managed control
    # plane's upgrade step, an existing one's version-skew check.
    kubelet_gate: pulumi.Resource
    kubelet_client_cidrs: pulumi.Output[list[str]]
    machine: aws.ec2.Instance | None = None  # the managed control plane's instance

    def __init__(
        self,
        name: str,
        *,
        settings: Settings,
        network: Network,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("gpu-cluster:index:ControlPlane", name, None, opts)
        self._name = name
        self._settings = settings
        self.kubernetes_version = settings.kubernetes_version
        config = settings.control_plane
        if isinstance(config, ManagedControlPlane):
            self._managed(config, network)
        else:
            self._existing(config, network)
        # The provider is replaced (and every Kubernetes object with it) only when this changes:
        # pulumi-kubernetes `provider/pkg/provider/provider.go` DiffConfig replaces on an
        # updated clusterIdentifier and drops every other replacement while it stays the same,
        # also when the kubeconfig is unknown in a preview (a re-run of the kubeconfig step).
        # Adding it to a running stack replaces nothing ("we don't do this when adding or
        # removing the identifier").
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.kubeconfig,
            cluster_identifier=self.cluster_identifier,
            enable_server_side_apply=True,
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(self.ready)),
        )
        self.operator_kubeconfig = self._operator_access()
        self.register_outputs(
            {
                "endpoint": self.endpoint,
                "kubeconfig": self.kubeconfig,
                "operatorKubeconfig": self.operator_kubeconfig,
                "kubernetesVersion": self.kubernetes_version,
            }
        )

    # ------------------------------------------------------------ managed

    def _managed(self, config: ManagedControlPlane, network: Network) -> None:
        name, settings = self._name, self._settings
        machine = f"{name}-control-plane"
        api_group = self._api_security_group(config, network)
        host_key = host_keys.generate(machine, parent=self)
        instance = self.machine = aws.ec2.Instance(
            machine,
            ami=machines.ubuntu_ami(config.os_version, config.ami_id, parent=self),
            instance_type=config.instance_type,
            subnet_id=network.subnet_ids[0],
            vpc_security_group_ids=[network.cluster_security_group_id, api_group.id],
            key_name=machines.key_pair(machine, settings, parent=self).key_name,
            associate_public_ip_address=settings.network.assigns_public_ips,
            metadata_options=machines.metadata_options(),
            root_block_device=machines.root_volume(config.root_volume_gi_b),
            user_data=host_key.user_data,
            tags={**settings.stack_tags, "Name": machine, "gpu-cluster:role": "control-plane"},
            opts=pulumi.ResourceOptions(
                parent=self,
                ignore_changes=machines.day_two_ignored(ami_pinned=config.ami_id is not None),
                additional_secret_outputs=machines.SECRET_OUTPUTS,
                # Its loss is a new cluster: every node would have to re-join.
                protect=config.protect,
            ),
        )
        private_ip = instance.private_ip
        public_ip = instance.public_ip
        if settings.network.assigns_public_ips:
            # An Elastic IP keeps the address in the API server's certificate and in the
            # kubeconfig valid when the machine is stopped and started again.
            address = aws.ec2.Eip(
                f"{machine}-ip",
                domain="vpc",
                instance=instance.id,
                tags={**settings.stack_tags, "Name": machine},
                opts=pulumi.ResourceOptions(parent=self),
            )
            public_ip = address.public_ip
        # The operator's machine reaches the public address unless a bastion relays to private ones.
        reachable = public_ip if settings.network.connects_to_public_ips else private_ip
        self.host = ssh_host(
            machine,
            reachable,
            settings,
            identity=instance.id,
            host_key=host_keys.pinned(instance, host_key, settings),
        )
        self.endpoint = pulumi.Output.concat(private_ip, f":{API_PORT}")
        self.kubelet_client_cidrs = private_ip.apply(lambda ip: [f"{ip}/32"])
        # A new control-plane machine is a new cluster (kubeadm init makes a new CA).
        self.cluster_identifier = pulumi.Output.concat(settings.cluster_name, "/", instance.id)

        wait_ready = self._step(steps.CP_WAIT_READY, after=[instance])
        self._step(
            steps.CP_AUTHORIZED_KEYS,
            {
                "SSH_USER": settings.ssh.user,
                "AUTHORIZED_KEYS": machines.authorized_keys(settings),
            },
            after=[wait_ready],
        )
        runtime = self._step(
            steps.CP_RUNTIME,
            host_pins.runtime_params(
                config.os_version, settings.kubernetes_version, with_toolkit=False
            ),
            after=[wait_ready],
        )
        # A new minor: kubeadm upgrade of the running cluster before its kubelet moves
        # (nothing on the first `up`); refuses a skipped minor before anything is installed.
        upgrade = self._step(
            steps.CP_UPGRADE, {"KUBERNETES_MINOR": settings.kubernetes_version}, after=[runtime]
        )
        self.kubelet_gate = upgrade
        kube_tools = self._step(
            steps.CP_KUBE_TOOLS,
            {
                "KUBERNETES_MINOR": settings.kubernetes_version,
                "SANDBOX_IMAGE": host_pins.PAUSE_IMAGES[settings.kubernetes_version],
            },
            after=[upgrade],
        )
        cert_sans = pulumi.Output.all(public_ip, private_ip, instance.private_dns).apply(
            lambda values: ",".join(v for v in values if v)
        )
        init = self._step(
            steps.CP_INIT,
            {
                "CLUSTER_NAME": settings.cluster_name,
                "NODE_NAME": machine,
                "KUBERNETES_MINOR": settings.kubernetes_version,
                "CONTROL_PLANE_ENDPOINT": self.endpoint,
                "ADVERTISE_ADDRESS": private_ip,
                "POD_SUBNET": config.pod_cidr,
                "SERVICE_SUBNET": config.service_cidr,
                "CERT_SANS": cert_sans,
            },
            after=[kube_tools],
        )
        cni = self._step(
            steps.CP_CNI,
            {
                "FLANNEL_VERSION": FLANNEL_VERSION,
                "POD_SUBNET": config.pod_cidr,
                "NODE_NAME": machine,
            },
            after=[init],
        )
        kubeconfig = self._read_kubeconfig(
            pulumi.Output.concat("https://", reachable, f":{API_PORT}"), after=[cni]
        )
        self.ready = [init, cni, kubeconfig]

    def _api_security_group(
        self, config: ManagedControlPlane, network: Network
    ) -> aws.ec2.SecurityGroup:
        """The API port from inside the VPC (nodes) and from `apiAllowedCidrs` (operators)."""
        settings = self._settings
        ingress = [
            tcp_port_rule(
                "Kubernetes API from the VPC (nodes joining, kubelets)",
                API_PORT,
                [network.vpc_cidr],
            )
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
            description=f"{settings.cluster_name}: Kubernetes API on {API_PORT}",
            vpc_id=network.vpc_id,
            ingress=ingress,
            tags={**settings.stack_tags, "Name": f"{self._name}-api"},
            opts=pulumi.ResourceOptions(parent=self),
        )

    # ------------------------------------------------------------ existing

    def _existing(self, config: ExistingControlPlane, network: Network) -> None:
        settings = self._settings
        assert config.host is not None and config.endpoint is not None  # settings checks both
        # No instance of ours: the host's address is its identity.
        self.host = ssh_host(
            f"{self._name}-control-plane",
            config.host,
            settings,
            identity=config.host,
            host_key=config.host_key,
            user=config.user,
        )
        self.endpoint = pulumi.Output.from_input(config.endpoint)
        self.cluster_identifier = pulumi.Output.from_input(
            f"{settings.cluster_name}/{config.endpoint}"
        )
        source = kubelet_client_address(config)
        if source is not None:
            self.kubelet_client_cidrs = pulumi.Output.from_input([f"{source}/32"])
        else:
            # Only DNS names: the control plane lives somewhere in the VPC.
            self.kubelet_client_cidrs = network.vpc_cidr.apply(lambda cidr: [cidr])
        skew = self._step(steps.CP_VERSION_SKEW, {"KUBERNETES_MINOR": settings.kubernetes_version})
        kubeconfig = self._read_kubeconfig(
            pulumi.Output.from_input(f"https://{config.endpoint}"), after=[skew]
        )
        self.kubelet_gate = skew
        self.ready = [skew, kubeconfig]

    # ------------------------------------------------------------ shared

    def _step(
        self,
        step: steps.Step,
        params: dict[str, pulumi.Input[str]] | None = None,
        *,
        after: Sequence[pulumi.Resource] = (),
    ) -> command.remote.Command:
        return run_step(step, self._name, host=self.host, params=params, after=after, parent=self)

    def _read_kubeconfig(
        self, server: pulumi.Output[str], *, after: Sequence[pulumi.Resource]
    ) -> command.remote.Command:
        step = self._step(steps.CP_KUBECONFIG, {"API_SERVER": server}, after=after)
        self.kubeconfig = pulumi.Output.secret(step.stdout)
        self._api_server = server
        self._kubeconfig_step = step
        return step

    def _operator_access(self) -> pulumi.Output[str]:
        """The operators' kubeconfig: its own identity, group-bound, with a bounded lifetime."""
        access = self._settings.kubeconfig
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
            steps.CP_OPERATOR_KUBECONFIG,
            {
                "API_SERVER": self._api_server,
                "CLIENT_NAME": f"{self._settings.cluster_name}-operator",
                "GROUP": access.group,
                "VALIDITY_HOURS": str(access.validity_hours),
            },
            after=[self._kubeconfig_step],
        )
        return pulumi.Output.secret(step.stdout)

    def join_credentials(
        self,
        node_name: str,
        *,
        parent: pulumi.Resource,
        after: Sequence[pulumi.Resource],
        node_id: pulumi.Input[str],
        node_ip: pulumi.Input[str] | None = None,
    ) -> JoinCredentials:
        """Mint a fresh bootstrap token for one node (`<node>-join-token`, on the control plane).

        `node_id` (the joining machine's instance id) is the step's identity with the endpoint:
        a new machine or a new cluster gets a new token.
        `node_ip` (the joining machine's private address) lets the step remove a stale Node of
        the same name left by a replaced machine, which would make kubeadm join refuse.
        """
        params: dict[str, pulumi.Input[str]] = {"NODE_NAME": node_name, "TOKEN_TTL": JOIN_TOKEN_TTL}
        if node_ip is not None:
            params["NODE_IP"] = node_ip
        step = run_step(
            steps.JOIN_TOKEN,
            node_name,
            host=self.host,
            params=params,
            identity={steps.Identity.HOST: node_id, steps.Identity.ENDPOINT: self.endpoint},
            after=[*after, *self.ready],
            parent=parent,
        )
        parsed = step.stdout.apply(parse_join_token)
        return JoinCredentials(
            token=pulumi.Output.secret(parsed.apply(lambda d: d["token"])),
            # The token's id (before the dot) is its public half (kubeadm: "the token-id part is
            # public"); the node-ready step deletes the token by it once the node has joined.
            token_id=pulumi.Output.unsecret(parsed.apply(lambda d: d["token"].split(".")[0])),
            # A hash of the CA's public key identifies the cluster; it is not a secret.
            ca_cert_hash=pulumi.Output.unsecret(parsed.apply(lambda d: d["caCertHash"])),
            endpoint=self.endpoint,
            step=step,
        )

    def register_node(
        self,
        node_name: str,
        *,
        node_id: pulumi.Input[str],
        token_id: pulumi.Input[str],
        parent: pulumi.Resource,
        after: Sequence[pulumi.Resource],
    ) -> command.remote.Command:
        """`<node>-node-ready` on the control plane: create waits for the Node to be Ready, then
        deletes the node's bootstrap token; delete drains the Node (without eviction when it is
        not Ready: its host is gone) and deletes the Node object."""
        return run_step(
            steps.NODE_READY,
            node_name,
            host=self.host,
            params={
                "NODE_NAME": node_name,
                "READY_TIMEOUT_SECONDS": str(NODE_READY_TIMEOUT_SECONDS),
                "TOKEN_ID": token_id,
            },
            delete_params={
                "NODE_NAME": node_name,
                "DRAIN_TIMEOUT_SECONDS": str(DRAIN_TIMEOUT_SECONDS),
            },
            identity={steps.Identity.HOST: node_id, steps.Identity.ENDPOINT: self.endpoint},
            after=after,
            parent=parent,
            # Destroying the whole cluster: no Node to drain on a control plane going away.
            deleted_with=self.machine,
        )

    def reconcile_labels(
        self,
        node_name: str,
        *,
        node_id: pulumi.Input[str],
        labels: str,
        taints: str,
        parent: pulumi.Resource,
        after: Sequence[pulumi.Resource],
    ) -> command.remote.Command:
        """`<node>-labels` on the control plane: the pool's labels and taints through the API
        (`kubectl label/taint --overwrite`, the ones set before and no longer wanted removed), so
        a label change updates this step and never re-joins the node."""
        return run_step(
            steps.NODE_LABELS,
            node_name,
            host=self.host,
            params={"NODE_NAME": node_name, "NODE_LABELS": labels, "NODE_TAINTS": taints},
            identity={steps.Identity.HOST: node_id, steps.Identity.ENDPOINT: self.endpoint},
            after=after,
            parent=parent,
        )

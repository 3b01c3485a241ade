"""Rules that need more than one section of the stack configuration. Each is a named function of
the validated sections that returns its problems (key path from the top, given, accepted);
`Settings` runs `CROSS_SECTION_RULES` in order and reports every problem at once."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import TYPE_CHECKING

from components.settings import control_plane_size
from components.settings.addresses import PRIVATE_IPV4_BLOCKS
from components.settings.constants import (
    AWS_RESERVED_PER_SUBNET,
    DEVICE_PLUGIN_DIGESTS,
    MAX_NODE_NAME_LENGTH,
    NODE_POD_CIDR_PREFIX,
    SUBNET_PREFIX_DIFF,
    SUBNETS_IN_NEW_VPC,
)
from components.settings.fields import Found
from components.settings.hosts_pool import HostsNodePool
from components.settings.node_pool import NodePool
from components.settings.sections import ExistingControlPlane, ManagedControlPlane, Network

if TYPE_CHECKING:
    from components.settings.model import Settings


def node_names_fit(settings: Settings) -> list[Found]:
    """Node names <clusterName>-<pool>-<index> (or -<host name>) are label values: at most 63
    characters."""
    found: list[Found] = []
    for index, pool in enumerate(settings.node_pools):
        if isinstance(pool, HostsNodePool):
            found += _host_names_fit(settings.cluster_name, index, pool)
            continue
        longest = f"{settings.cluster_name}-{pool.name}-{pool.count - 1}"
        if pool.count and len(longest) > MAX_NODE_NAME_LENGTH:
            found.append(
                (
                    f"nodePools[{index}].name",
                    pool.name,
                    f"a shorter pool name: node names <clusterName>-<name>-<index> must fit "
                    f"in {MAX_NODE_NAME_LENGTH} characters (a Kubernetes label value), and "
                    f"{longest!r} has {len(longest)}",
                )
            )
    return found


def _host_names_fit(cluster: str, index: int, pool: HostsNodePool) -> list[Found]:
    found: list[Found] = []
    for position, host in enumerate(pool.hosts):
        node = f"{cluster}-{pool.name}-{host.key}"
        if len(node) > MAX_NODE_NAME_LENGTH:
            found.append(
                (
                    f"nodePools[{index}].hosts[{position}].name",
                    host.name,
                    f"a shorter name for the host: its node's name <clusterName>-<pool>-<name> "
                    f"must fit in {MAX_NODE_NAME_LENGTH} characters (a Kubernetes label value), "
                    f"and {node!r} has {len(node)}",
                )
            )
    return found


def cluster_blocks_outside_created_vpc(settings: Settings) -> list[Found]:
    """The managed control plane's pod and service blocks do not overlap a created VPC."""
    cp, network = settings.control_plane, settings.network
    if not isinstance(cp, ManagedControlPlane) or not network.creates_vpc:
        return []
    vpc = ipaddress.ip_network(network.cidr)
    return [
        (f"controlPlane.{key}", value, f"a block outside the VPC {network.cidr}")
        for key, value in (("podCidr", cp.pod_cidr), ("serviceCidr", cp.service_cidr))
        if ipaddress.ip_network(value).overlaps(vpc)
    ]


def node_ranges_in_pod_cidr(settings: Settings) -> list[Found]:
    """Each Node, the control plane included, takes one /NODE_POD_CIDR_PREFIX of podCidr; a node
    left without one never gets a pod network and never becomes Ready."""
    cp = settings.control_plane
    if not isinstance(cp, ManagedControlPlane):
        return []
    prefix = ipaddress.ip_network(cp.pod_cidr).prefixlen
    ranges = 2 ** (NODE_POD_CIDR_PREFIX - prefix) if prefix <= NODE_POD_CIDR_PREFIX else 0
    nodes = 1 + sum(pool.count for pool in settings.node_pools)
    if nodes <= ranges:
        return []
    needed = NODE_POD_CIDR_PREFIX - (nodes - 1).bit_length()
    return [
        (
            "controlPlane.podCidr",
            cp.pod_cidr,
            f"a block with a /{NODE_POD_CIDR_PREFIX} pod range for each of the {nodes} nodes "
            f"(control plane and every pool's count): it holds {ranges}, so later nodes "
            f"would never get a pod range or become Ready; use a /{needed} or larger",
        )
    ]


def _addresses_in_first_subnet(pool: NodePool, zones: int) -> int:
    """A pool's private addresses in the created VPC's first subnet. Its nodes go round-robin
    over the subnets from the first, one address each; an EFA pool's nodes all go into the
    first (a cluster placement group lives in one zone; components/aws/fabric.py), one address per
    `efa` interface (an `efa-only` one has none; catalog.GpuInstanceType.efa_layout)."""
    if pool.uses_efa:
        per_node = sum(1 for card in pool.gpu_type.efa_layout if card.interface_type == "efa")
        return pool.count * per_node
    return -(-pool.count // zones)


def room_in_created_subnets(settings: Settings) -> list[Found]:
    """The first subnet of a created VPC holds the managed control plane and the most nodes:
    it fills up first."""
    network = settings.network
    if not network.creates_vpc or not settings.launches_machines:
        return []
    zones = len(network.availability_zones) or SUBNETS_IN_NEW_VPC
    prefix = ipaddress.ip_network(network.cidr).prefixlen + SUBNET_PREFIX_DIFF
    usable = 2 ** (32 - prefix) - AWS_RESERVED_PER_SUBNET
    nodes = sum(pool.count for pool in settings.instance_pools)
    first = sum(
        _addresses_in_first_subnet(pool, zones) for pool in settings.instance_pools
    ) + isinstance(settings.control_plane, ManagedControlPlane)
    if first <= usable:
        return []
    efa = ""
    if any(pool.uses_efa and pool.count for pool in settings.instance_pools):
        efa = " (an EFA pool puts every node there, one address per EFA interface)"
    return [
        (
            "network.cidr",
            network.cidr,
            f"a block large enough for {nodes} node(s) and the control plane: it is split "
            f"into {zones} /{prefix} subnets of {usable} usable addresses each (AWS keeps "
            f"{AWS_RESERVED_PER_SUBNET} per subnet), and the first would need {first}{efa}; "
            "use a larger block (down to /16) or more availabilityZones",
        )
    ]


def canonical_machines_use_port_22(settings: Settings) -> list[Found]:
    """The Canonical Ubuntu AMI's sshd listens on 22: another ssh.port needs an own amiId."""
    port = settings.ssh.port
    canonical = [
        f"nodePools[{index}]"
        for index, pool in enumerate(settings.node_pools)
        if isinstance(pool, NodePool) and pool.count and pool.ami_id is None
    ]
    cp = settings.control_plane
    if isinstance(cp, ManagedControlPlane) and cp.ami_id is None:
        canonical.insert(0, "controlPlane")
    if port == 22 or not canonical:
        return []
    return [
        (
            "ssh.port",
            port,
            f"22 for machines booted from the Canonical Ubuntu AMI ({', '.join(canonical)}"
            "): its sshd listens on 22 and nothing here moves it, so every host step "
            f"would dial {port} until it times out; use 22, or an amiId whose "
            f"sshd listens on {port}",
        )
    ]


def public_hosts_name_ssh_sources(settings: Settings) -> list[Found]:
    """Hosts reached on public addresses need the operator's range in sshAllowedCidrs."""
    network = settings.network
    if (
        not settings.launches_machines
        or not network.connects_to_public_ips
        or network.ssh_allowed_cidrs
    ):
        return []
    return [
        (
            "network.sshAllowedCidrs",
            [],
            "the address range of the machine that runs pulumi up, like "
            "[203.0.113.0/24]: hosts are reached over SSH on their public addresses, "
            "so without it every host step would dial until it times out (or set "
            "network.bastion)",
        )
    ]


def public_api_names_its_sources(settings: Settings) -> list[Found]:
    """A managed control plane reached on its public address needs apiAllowedCidrs."""
    cp = settings.control_plane
    if (
        not isinstance(cp, ManagedControlPlane)
        or not settings.network.connects_to_public_ips
        or cp.api_allowed_cidrs
    ):
        return []
    return [
        (
            "controlPlane.apiAllowedCidrs",
            [],
            "the address range of the machine that runs pulumi up, like "
            "[203.0.113.0/24]: the Kubernetes provider reaches the API on the control "
            "plane's public address, which otherwise admits the VPC only",
        )
    ]


def created_vpc_gives_public_ips(settings: Settings) -> list[Found]:
    """A created VPC has no NAT gateway: its hosts need public addresses to download."""
    network = settings.network
    if not settings.launches_machines or not network.creates_vpc or network.public_ips is not False:
        return []
    return [
        (
            "network.publicIps",
            False,
            "true (or unset) with create: true: the new VPC has no NAT gateway, so hosts "
            "need public addresses to download packages; use vpcId + subnetIds of a VPC "
            "with NAT for private hosts",
        )
    ]


def existing_control_plane_reachable_from_created_vpc(settings: Settings) -> list[Found]:
    """Nodes in a VPC the stack creates reach the internet and their own VPC only (its one
    route table: the VPC's block, then the internet gateway; components/aws/network.py), so they
    cannot join an existing control plane at a private address."""
    cp, network = settings.control_plane, settings.network
    if (
        not isinstance(cp, ExistingControlPlane)
        or not settings.instance_pools
        or not network.creates_vpc
        or not cp.endpoint
    ):
        return []
    host = cp.endpoint_host
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return []  # a DNS name: where it points is not known here
    if not any(address in block for block in PRIVATE_IPV4_BLOCKS):
        return []
    if address in ipaddress.ip_network(network.cidr):
        return []  # in the created VPC itself: its local route reaches it
    return [
        (
            "controlPlane.endpoint",
            cp.endpoint,
            "an endpoint the nodes can reach: a VPC this stack creates has no route to the "
            f"private address {host}; give network.vpcId + subnetIds of the control plane's "
            "VPC (or one routed to it), or a public endpoint",
        )
    ]


def control_plane_sized_to_fleet(settings: Settings) -> list[Found]:
    """A managed control plane has the vCPUs and memory its GPU nodes need (published sizings,
    components/settings/control_plane_size.py); a family the table does not know is not refused
    (`warn_unchecked_size` says so instead)."""
    cp = settings.control_plane
    if not isinstance(cp, ManagedControlPlane):
        return []
    has = control_plane_size.instance_size(cp.instance_type)
    nodes = control_plane_size.gpu_nodes(settings)
    need = control_plane_size.needed(nodes)
    if has is None or has.holds(need):
        return []
    return [
        (
            "controlPlane.instanceType",
            cp.instance_type,
            f"an instance type with at least {need} for {nodes} GPU node(s), like "
            f"{control_plane_size.to_use(cp.instance_type, nodes)}: {cp.instance_type} has "
            f"{has} ({control_plane_size.why(nodes)}; scale the control plane up first)",
        )
    ]


# The device plugin releases the program can run: the DaemonSet passes --config-file, which the
# plugin takes since v0.12.0, and GPU Feature Discovery runs from the plugin's image, which
# holds its binary since v0.15.0 (NVIDIA/k8s-device-plugin CHANGELOG.md).
_PLUGIN_CONFIG_FILE = (0, 12, 0)
_PLUGIN_WITH_GFD = (0, 15, 0)


def device_plugin_release_runs_here(settings: Settings) -> list[Found]:
    """devicePlugin.version is new enough for the flags and binaries the program uses."""
    version = settings.device_plugin.version
    release = tuple(int(part) for part in version.removeprefix("v").split("."))
    floor, why = _PLUGIN_CONFIG_FILE, "the DaemonSet passes --config-file (since v0.12.0)"
    if settings.feature_discovery.enabled:
        floor = _PLUGIN_WITH_GFD
        why = (
            "GPU Feature Discovery runs from the plugin's image, which has its binary since "
            "v0.15.0 (or set featureDiscovery.enabled: false)"
        )
    if release >= floor:
        return []
    return [("devicePlugin.version", version, f"v{'.'.join(map(str, floor))} or newer: {why}")]


def device_plugin_digest_known(settings: Settings) -> list[Found]:
    """The device plugin and GFD run with SYS_ADMIN: pulled by digest, known or configured (a
    release too old to run here is reported by device_plugin_release_runs_here alone)."""
    plugin = settings.device_plugin
    if plugin.digest_known or device_plugin_release_runs_here(settings):
        return []
    return [
        (
            "devicePlugin.imageDigest",
            None,
            f"the digest of nvcr.io/nvidia/k8s-device-plugin:{plugin.version} (it runs with "
            "SYS_ADMIN, so it is pulled by digest; the program knows "
            f"{', '.join(DEVICE_PLUGIN_DIGESTS)}): `crane digest "
            f"nvcr.io/nvidia/k8s-device-plugin:{plugin.version}`",
        )
    ]


def a_roll_fits_the_deploy_job(settings: Settings) -> list[Found]:
    """One node's roll (every step at its bound, the checks twice) ends inside the deploy job,
    so an `up` that rolls ends by itself and the next one goes on
    (components/hosts/roll_budget.py)."""
    from components.hosts import roll_budget

    longest = roll_budget.longest_validation_seconds()
    given = settings.validation.timeout_seconds
    if given <= longest or not any(pool.count for pool in settings.node_pools):
        return []
    return [
        (
            "validation.timeoutSeconds",
            given,
            f"at most {longest}: a node's roll waits for its checks twice, and with every step "
            f"at its bound it must end inside the deploy job's "
            f"{roll_budget.DEPLOY_JOB_SECONDS // 60} minutes",
        )
    ]


def launched_machines_have_a_login_key(settings: Settings) -> list[Found]:
    """EC2 machines boot with ssh.publicKey (their key pair) and keep it in authorized_keys;
    existing hosts and an existing control plane keep the keys they have."""
    if not settings.launches_machines or settings.ssh.public_key is not None:
        return []
    return [
        (
            "ssh.publicKey",
            None,
            "an OpenSSH ED25519 or RSA public key line like 'ssh-ed25519 AAAA... ops@example' "
            "(the public half of sshPrivateKey): the EC2 machines the stack launches boot with it",
        )
    ]


def bastion_reaches_the_machines(settings: Settings) -> list[Found]:
    """A bastion relays to the EC2 machines in an existing VPC, whose security group admits
    it (network.Network.bastion_problems); with no machine launched it only relays."""
    if not settings.launches_machines:
        return []
    return [
        (("network", *key), given, accepted)
        for key, given, accepted in settings.network.bastion_problems()
    ]


# The network keys that shape what the stack creates in AWS (cidr, a default of Pulumi.yaml that
# the CLI hands every stack, and bastion, which relays to any host, are left out).
_AWS_NETWORK_KEYS = (
    "create",
    "vpc_id",
    "subnet_ids",
    "availability_zones",
    "ssh_allowed_cidrs",
    "public_ips",
)


# The existing control plane's keys that shape the EC2 nodes' security groups.
_AWS_CONTROL_PLANE_KEYS = ("security_group_id", "pod_network_ports")


def network_only_with_machines(settings: Settings) -> list[Found]:
    """A stack that launches no EC2 machine (an existing control plane, only hosts pools)
    creates and reads no network: a key that would shape one is a mistake, said."""
    if settings.launches_machines:
        return []
    why = (
        "unset: this stack launches no EC2 machine (its control plane is existing and its "
        "pools name hosts), so it creates and reads no network and no security group; the "
        "hosts are reached at their addresses (through network.bastion when set), and their "
        "own firewalls admit the cluster"
    )
    network, cp = settings.network, settings.control_plane
    found: list[Found] = [
        (f"network.{Network.model_fields[name].alias}", getattr(network, name), why)
        for name in _AWS_NETWORK_KEYS
        if name in network.model_fields_set
    ]
    found += [
        (f"controlPlane.{ExistingControlPlane.model_fields[name].alias}", getattr(cp, name), why)
        for name in _AWS_CONTROL_PLANE_KEYS
        if name in cp.model_fields_set
    ]
    return found


def host_pools_join_an_existing_cluster(settings: Settings) -> list[Found]:
    """Hosts pools join an existing control plane: a managed one's API, kubelet and pod
    network are open to its own VPC only (components/aws/network.py), which servers the stack
    did not create are not in."""
    if not isinstance(settings.control_plane, ManagedControlPlane):
        return []
    return [
        (
            f"nodePools[{index}].hosts",
            [host.address for host in pool.hosts],
            "hosts with controlPlane.mode: existing only: a managed control plane admits its "
            "nodes from its own VPC, where existing servers are not; join them to an existing "
            "kubeadm cluster (controlPlane.mode: existing), or use instanceType and count",
        )
        for index, pool in enumerate(settings.node_pools)
        if isinstance(pool, HostsNodePool)
    ]


def each_host_once(settings: Settings) -> list[Found]:
    """An existing server is in one pool once: its address and its host key (its identity:
    components/node_machine.py) name no other host, nor the existing control plane."""
    found: list[Found] = []
    cp = settings.control_plane
    seen_address: dict[str, str] = {}
    seen_key: dict[str, str] = {}
    if isinstance(cp, ExistingControlPlane) and cp.host and cp.host_key:
        seen_address[cp.host] = "controlPlane.host"
        seen_key[cp.host_key] = "controlPlane.hostKey"
    for index, pool in enumerate(settings.node_pools):
        if not isinstance(pool, HostsNodePool):
            continue
        for position, host in enumerate(pool.hosts):
            where = f"nodePools[{index}].hosts[{position}]"
            earlier = seen_address.setdefault(host.address, f"{where}.address")
            if earlier != f"{where}.address":
                found.append(
                    (
                        f"{where}.address",
                        host.address,
                        f"an address no other host has ({earlier} is also {host.address}): a "
                        "server joins one pool once",
                    )
                )
            if host.host_key is None:
                continue
            earlier = seen_key.setdefault(host.host_key, f"{where}.hostKey")
            if earlier != f"{where}.hostKey":
                found.append(
                    (
                        f"{where}.hostKey",
                        host.host_key,
                        f"the host's own key ({earlier} has this one): a host key is a "
                        "machine's identity; two machines with one key are clones, give each "
                        "its own (on the clone: remove /etc/ssh/ssh_host_*, ssh-keygen -A)",
                    )
                )
    return found


CROSS_SECTION_RULES: tuple[Callable[[Settings], list[Found]], ...] = (
    node_names_fit,
    cluster_blocks_outside_created_vpc,
    node_ranges_in_pod_cidr,
    room_in_created_subnets,
    canonical_machines_use_port_22,
    public_hosts_name_ssh_sources,
    public_api_names_its_sources,
    created_vpc_gives_public_ips,
    existing_control_plane_reachable_from_created_vpc,
    control_plane_sized_to_fleet,
    device_plugin_release_runs_here,
    device_plugin_digest_known,
    a_roll_fits_the_deploy_job,
    launched_machines_have_a_login_key,
    bastion_reaches_the_machines,
    network_only_with_machines,
    host_pools_join_an_existing_cluster,
    each_host_once,
)

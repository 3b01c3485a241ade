"""The guardrails of gpu-cluster as pure functions, testable without the policy runtime.

A resource check takes a `Resource` (what the engine shows a policy: type, inputs in the
engine's camelCase names, URN, name, additional secret outputs) and the policy's config, and
returns one message per problem. Each message names the resource and the fix. The stack check
takes every resource of the stack and returns (URN, message) pairs.

`gpu_cluster_policies.pack` adapts `pulumi_policy` arguments to these functions; the tests call
them directly with the resources recorded from a program run.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpu_cluster_policies import chain
from gpu_cluster_policies.access_rules import (
    DENIED_MANAGED_POLICIES,
    EVERYONE_GROUPS,
    POWERFUL_ROLES,
    check_iam_admin,
    check_rbac_everyone,
)
from gpu_cluster_policies.resources import (
    Config,
    Resource,
    ResourceCheck,
    StackCheck,
    get,
    items,
    known,
    known_field,
    label,
)
from gpu_cluster_policies.workloads import (
    PRIVILEGED_NAMESPACES,
    SYSTEM_WORKLOADS,
    check_inspectable,
    check_privileged_namespaces,
    containers,
    is_system_workload,
    pod_specs,
)

# Every EC2 GPU instance type in components/catalog.py (the pack runs on its own, without the
# program's modules; tests/test_policies.py keeps this list equal to the catalog).
CATALOG_INSTANCE_TYPES: tuple[str, ...] = (
    *(
        f"g4dn.{s}"
        for s in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge", "12xlarge", "metal")
    ),
    *(
        f"{family}.{size}"
        for family in ("g5", "g6", "g6e")
        for size in (
            "xlarge",
            "2xlarge",
            "4xlarge",
            "8xlarge",
            "16xlarge",
            "12xlarge",
            "24xlarge",
            "48xlarge",
        )
    ),
    "p3.2xlarge",
    "p3.8xlarge",
    "p3.16xlarge",
    "p3dn.24xlarge",
    "p4d.24xlarge",
    "p4de.24xlarge",
    "p5.48xlarge",
    "p5e.48xlarge",
    "p5en.48xlarge",
    "p6-b200.48xlarge",
)

# EC2 accelerated families with NVIDIA (or other) GPUs: g*, gr*, p*. Other types (the control
# plane's m7i) are not GPU types and are not limited by the allowlist.
GPU_FAMILY = re.compile(r"^(g|gr|p)[0-9][a-z0-9-]*\.")

INSTANCE = "aws:ec2/instance:Instance"
SPOT_REQUEST = "aws:ec2/spotInstanceRequest:SpotInstanceRequest"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
EBS_VOLUME = "aws:ebs/volume:Volume"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
SECURITY_GROUP_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
JOB = "kubernetes:batch/v1:Job"
CRON_JOB = "kubernetes:batch/v1:CronJob"
POD = "kubernetes:core/v1:Pod"
REMOTE_COMMAND = "command:remote:Command"
REMOTE_COPY = "command:remote:CopyToRemote"
LOCAL_COMMAND = "command:local:Command"

MACHINE_TYPES = (INSTANCE, SPOT_REQUEST)

# AWS types that accept `tags` (tests/test_policies.py checks that every taggable type the stacks
# register is listed here).
TAGGABLE_TYPES = frozenset(
    {
        INSTANCE,
        SPOT_REQUEST,
        LAUNCH_TEMPLATE,
        EBS_VOLUME,
        SECURITY_GROUP,
        "aws:ec2/vpc:Vpc",
        "aws:ec2/subnet:Subnet",
        "aws:ec2/internetGateway:InternetGateway",
        "aws:ec2/routeTable:RouteTable",
        "aws:ec2/keyPair:KeyPair",
        "aws:ec2/eip:Eip",
        "aws:ec2/natGateway:NatGateway",
        "aws:ec2/networkInterface:NetworkInterface",
        "aws:ec2/placementGroup:PlacementGroup",
        "aws:iam/role:Role",
        "aws:iam/instanceProfile:InstanceProfile",
        INGRESS_RULE,
    }
)

WORKLOAD_POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    POD: ("spec",),
    JOB: ("spec", "template", "spec"),
    CRON_JOB: ("spec", "jobTemplate", "spec", "template", "spec"),
    "kubernetes:apps/v1:DaemonSet": ("spec", "template", "spec"),
    "kubernetes:apps/v1:Deployment": ("spec", "template", "spec"),
    "kubernetes:apps/v1:StatefulSet": ("spec", "template", "spec"),
    "kubernetes:apps/v1:ReplicaSet": ("spec", "template", "spec"),
}

GPU_RESOURCE = "nvidia.com/gpu"
DAEMON_SET = "kubernetes:apps/v1:DaemonSet"
# Registries whose images the stacks run (NVIDIA's, Kubernetes', AWS's EKS, EC2 and HPC images).
TRUSTED_REGISTRIES = (
    "nvcr.io/nvidia/",
    "registry.k8s.io/",
    "public.ecr.aws/eks/",
    "public.ecr.aws/hpc-cloud/",
    "public.ecr.aws/aws-ec2/",
)
# What the two-node NCCL check's sshd needs besides nothing (components/kube/nccl_efa_manifests.py).
ALLOWED_CAPABILITIES = ("KILL", "SETGID", "SETUID", "SYS_CHROOT")
PORT_NAMES = {22: "SSH", 6443: "Kubernetes API", 10250: "kubelet API"}
WORLD = ("0.0.0.0/0", "::/0")

# What a command prints when its output is a credential: a bootstrap token, a join command, or
# the admin kubeconfig.
# What a command prints when its output is a credential: a bootstrap token or a join command, a
# kubeconfig (the admin's, one made for a user, or `config view --raw`, which prints its keys),
# a service account token (`kubectl create token`), or a private key of the cluster's PKI.
SECRET_OUTPUT_PATTERN = re.compile(
    r"kubeadm\s+token\s+create|print-join-command|cat\s+[^\n|;&]*admin\.conf|"
    r"kubeadm\s+kubeconfig\s+user|"
    r"kubectl\b[^\n|;&]*\bcreate\s+token\b|"
    r"\bconfig\s+view\b[^\n|;&]*--raw|--raw\b[^\n|;&]*\bconfig\s+view\b|"
    r"cat\s+[^\n|;&]*pki/[^\s|;&]*\.key\b"
)
# ssh and scp options that accept a host whatever key it shows (OpenSSH ssh_config(5):
# StrictHostKeyChecking no or off adds and accepts unknown keys, accept-new accepts unknown
# ones; a known_hosts of /dev/null knows no key, so every key is unknown).
NO_HOST_KEY_CHECK = re.compile(
    r"StrictHostKeyChecking\s*[= ]\s*[\"']?(no|off|accept-new)\b|"
    r"(User|Global)KnownHostsFile\s*[= ]\s*[\"']?/dev/null",
    re.IGNORECASE,
)
# IMDSv2's response hop limit (EC2 user guide, "Configure the instance metadata options"): 1 stops
# a response at the host; 2 lets it reach a container, and with it the instance role's
# credentials.
MAX_HOP_LIMIT = 1


_label = label
_get = get
_items = items
_known = known
_known_field = known_field


# ---------------------------------------------------------------- EC2 instances


def check_imdsv2(resource: Resource, config: Config) -> list[str]:
    """Instances and launch templates accept only IMDSv2 (session tokens): with IMDSv1 any SSRF
    in a pod or on the host can read the instance role's credentials."""
    if resource.resource_type not in (*MACHINE_TYPES, LAUNCH_TEMPLATE):
        return []
    tokens = _get(resource.props, "metadataOptions", "httpTokens")
    if tokens == "required":
        return []
    return [
        f"{_label(resource)}: metadataOptions.httpTokens is {tokens or 'unset'} (IMDSv1 allowed). "
        'Fix: set metadata_options with http_tokens="required" '
        "(components/aws/machines.py metadata_options())."
    ]


def check_imds_hop_limit(resource: Resource, config: Config) -> list[str]:
    """Instances, spot requests and launch templates answer instance metadata on the host only
    (hop limit 1, or the configured `maxHopLimit`): a pod would otherwise read the instance
    role's credentials."""
    if resource.resource_type not in (*MACHINE_TYPES, LAUNCH_TEMPLATE):
        return []
    limit = _get(resource.props, "metadataOptions", "httpPutResponseHopLimit")
    allowed = int(config.get("maxHopLimit") or MAX_HOP_LIMIT)
    if isinstance(limit, (int, float)) and not isinstance(limit, bool) and limit <= allowed:
        return []
    return [
        f"{_label(resource)}: metadataOptions.httpPutResponseHopLimit is "
        f"{'unset' if limit is None else limit}, more than {allowed}: containers reach instance "
        "metadata and the instance role's credentials. Fix: set http_put_response_hop_limit "
        f"to {allowed} (gpu-cluster:nodePools[].metadataHopLimit)."
    ]


def check_volumes_encrypted(resource: Resource, config: Config) -> list[str]:
    """Root and data EBS volumes are encrypted (a volume is unencrypted unless it says so)."""
    props, label = resource.props, _label(resource)
    fix = "Fix: set encrypted=True on it (components/aws/machines.py root_volume())."
    found: list[str] = []
    if resource.resource_type in MACHINE_TYPES:
        if _get(props, "rootBlockDevice", "encrypted") is not True:
            found.append(f"{label}: root volume (rootBlockDevice) is not encrypted. {fix}")
        for index, device in enumerate(_items(props.get("ebsBlockDevices"))):
            if _get(device, "encrypted") is not True:
                where = (
                    f"ebsBlockDevices[{index}] ({_get(device, 'deviceName') or 'no device name'})"
                )
                found.append(f"{label}: data volume {where} is not encrypted. {fix}")
    elif resource.resource_type == LAUNCH_TEMPLATE:
        for index, mapping in enumerate(_items(props.get("blockDeviceMappings"))):
            ebs = _get(mapping, "ebs")
            if ebs is not None and _get(ebs, "encrypted") not in (True, "true"):
                found.append(
                    f"{label}: blockDeviceMappings[{index}].ebs is not encrypted. "
                    'Fix: set encrypted="true" on it.'
                )
    elif resource.resource_type == EBS_VOLUME and props.get("encrypted") is not True:
        found.append(f"{label}: the volume is not encrypted. Fix: set encrypted=True.")
    return found


def check_gpu_instance_type(resource: Resource, config: Config) -> list[str]:
    """GPU instances use a type from the allowlist (default: every type in the catalog)."""
    if resource.resource_type not in (*MACHINE_TYPES, LAUNCH_TEMPLATE):
        return []
    instance_type = resource.props.get("instanceType")
    if not isinstance(instance_type, str) or not GPU_FAMILY.match(instance_type):
        return []
    allowed = list(config.get("allowedInstanceTypes") or CATALOG_INSTANCE_TYPES)
    if instance_type in allowed:
        return []
    return [
        f"{_label(resource)}: GPU instance type {instance_type} is not allowed. "
        f"Fix: use one of {', '.join(sorted(allowed))} in gpu-cluster:nodePools[].instanceType, "
        "or add it to the policy's allowedInstanceTypes."
    ]


# ---------------------------------------------------------------- network


def _ports_opened(protocol: Any, from_port: Any, to_port: Any, ports: Iterable[int]) -> list[int]:
    protocol = str(protocol).lower() if protocol is not None else ""
    if protocol in ("-1", "all"):
        return sorted(ports)
    if protocol not in ("tcp", "6"):
        return []
    try:
        low, high = int(from_port), int(to_port)
    except (TypeError, ValueError):
        return []
    if low == -1 and high == -1:
        return sorted(ports)
    return sorted(p for p in ports if low <= p <= high)


def _describe_ports(ports: list[int]) -> str:
    return ", ".join(f"{p} ({PORT_NAMES[p]})" if p in PORT_NAMES else str(p) for p in ports)


def world_covered(sources: Iterable[Any]) -> list[str]:
    """Which of 0.0.0.0/0 and ::/0 the union of these CIDR ranges covers: address ranges, not
    strings, so ["0.0.0.0/1", "128.0.0.0/1"] is the whole IPv4 internet (and so is
    "0.0.0.0/0" written with host bits, like "10.0.0.0/0"). Values that are no CIDR are ignored
    (the provider rejects them)."""
    networks: dict[int, list[ipaddress.IPv4Network | ipaddress.IPv6Network]] = {4: [], 6: []}
    for source in sources:
        if not isinstance(source, str):
            continue
        try:
            network = ipaddress.ip_network(source.strip(), strict=False)
        except ValueError:
            continue
        networks[network.version].append(network)
    covered = []
    for version, world in ((4, "0.0.0.0/0"), (6, "::/0")):
        merged = list(ipaddress.collapse_addresses(networks[version]))  # type: ignore[arg-type]
        if any(n.prefixlen == 0 for n in merged):
            covered.append(world)
    return covered


# Sources no internet packet carries (IANA's special-purpose IPv4 blocks that are not globally
# reachable; for IPv6 only 2000::/3 less 2001:db8::/32 is global unicast), and the most public
# addresses one rule set may admit: a /16 of IPv4, a /48 of IPv6. The same as the settings'
# (components/settings/addresses.py; tests/test_policy_ranges.py keeps them equal).
NOT_PUBLIC_V4 = (
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/4",
    "240.0.0.0/4",
)
GLOBAL_V6 = "2000::/3"
NOT_PUBLIC_V6 = ("2001:db8::/32",)
MAX_PUBLIC_SOURCES = {4: 2**16, 6: 2**80}
_PREFIX_OF_MAX = {4: "/16", 6: "/48"}


def _overlap(a: Any, b: Any) -> int:
    if a.version != b.version or not a.overlaps(b):
        return 0
    return min(a.num_addresses, b.num_addresses)


def public_addresses(sources: Iterable[Any]) -> dict[int, int]:
    """How many public addresses (IPv4, IPv6) the union of these CIDR ranges holds: merged
    first, so overlaps count once, without the addresses no internet packet comes from."""
    networks: dict[int, list[Any]] = {4: [], 6: []}
    for source in sources:
        if not isinstance(source, str):
            continue
        try:
            network = ipaddress.ip_network(source.strip(), strict=False)
        except ValueError:
            continue
        networks[network.version].append(network)
    not_public = [ipaddress.ip_network(b) for b in (*NOT_PUBLIC_V4, *NOT_PUBLIC_V6)]
    global_v6 = ipaddress.ip_network(GLOBAL_V6)
    counts = {}
    for version in (4, 6):
        total = 0
        for network in ipaddress.collapse_addresses(networks[version]):
            size = network.num_addresses if version == 4 else _overlap(network, global_v6)
            total += size - sum(_overlap(network, block) for block in not_public)
        counts[version] = total
    return counts


def too_open(sources: Iterable[Any]) -> list[str]:
    """What the union of these CIDR ranges admits beyond the bound, one phrase per IP version:
    "0.0.0.0/0" or "::/0" when it is the whole internet, else "N public IPv4 addresses (more
    than a /16's 65,536)"; [] when each version stays within MAX_PUBLIC_SOURCES. So the
    internet split in halves, or less one /32 in 32 pieces, is caught."""
    sources = list(sources)
    world = world_covered(sources)
    found = []
    for version, count in public_addresses(sources).items():
        whole = "0.0.0.0/0" if version == 4 else "::/0"
        if whole in world:
            found.append(whole)
        elif count > MAX_PUBLIC_SOURCES[version]:
            found.append(
                f"{count:,} public IPv{version} addresses (more than a "
                f"{_PREFIX_OF_MAX[version]}'s {MAX_PUBLIC_SOURCES[version]:,})"
            )
    return found


def _ingress_rules(resource: Resource) -> list[tuple[str, Any, Any, Any, list[str]]]:
    """(where, protocol, fromPort, toPort, CIDR sources) of each ingress rule a resource holds."""
    props = resource.props
    rules: list[tuple[str, Any, Any, Any, list[str]]] = []
    if resource.resource_type == SECURITY_GROUP:
        for index, rule in enumerate(_items(props.get("ingress"))):
            sources = [*_items(_get(rule, "cidrBlocks")), *_items(_get(rule, "ipv6CidrBlocks"))]
            rules.append(
                (
                    f"ingress[{index}]",
                    _get(rule, "protocol"),
                    _get(rule, "fromPort"),
                    _get(rule, "toPort"),
                    sources,
                )
            )
    elif resource.resource_type == SECURITY_GROUP_RULE and props.get("type") == "ingress":
        sources = [*_items(props.get("cidrBlocks")), *_items(props.get("ipv6CidrBlocks"))]
        rules.append(
            ("rule", props.get("protocol"), props.get("fromPort"), props.get("toPort"), sources)
        )
    elif resource.resource_type == INGRESS_RULE:
        sources = [s for s in (props.get("cidrIpv4"), props.get("cidrIpv6")) if s]
        rules.append(
            ("rule", props.get("ipProtocol"), props.get("fromPort"), props.get("toPort"), sources)
        )
    return rules


_WORLD_FIX = (
    "Fix: allow only the operators' ranges (gpu-cluster:network.sshAllowedCidrs, "
    "gpu-cluster:controlPlane.apiAllowedCidrs) or reach the hosts through a bastion."
)


def _protected_ports(config: Config) -> list[int]:
    return [int(p) for p in (config.get("protectedPorts") or PORT_NAMES)]


def check_no_world_ingress(resource: Resource, config: Config) -> list[str]:
    """No ingress to SSH, the Kubernetes API or the kubelet from ranges that together admit
    more public addresses than MAX_PUBLIC_SOURCES (the whole internet, however split, among
    them), within one security group or rule."""
    protected = _protected_ports(config)
    by_port: dict[int, list[tuple[str, list[str]]]] = {}
    for where, protocol, from_port, to_port, sources in _ingress_rules(resource):
        if not sources:
            continue
        for port in _ports_opened(protocol, from_port, to_port, protected):
            by_port.setdefault(port, []).append((where, sources))
    # Ports opened to the internet by the same rules are reported in one message.
    reports: dict[tuple[tuple[str, ...], tuple[str, ...]], list[int]] = {}
    for port, opened in sorted(by_port.items()):
        world = too_open(s for _where, sources in opened for s in sources)
        if world:
            reports.setdefault((tuple(w for w, _s in opened), tuple(world)), []).append(port)
    found = []
    for (wheres, world), ports in reports.items():
        ranges = sorted({s for w, sources in by_port[ports[0]] if w in wheres for s in sources})
        how = " and ".join(world)
        if not set(ranges) <= set(WORLD):
            how += f" (together {', '.join(ranges)} admit it)"
        found.append(
            f"{_label(resource)}: {' + '.join(wheres)} opens port {_describe_ports(ports)} "
            f"to {how}. {_WORLD_FIX}"
        )
    return found


def check_no_world_ingress_across_rules(
    resources: Sequence[Resource], config: Config
) -> list[tuple[str, str]]:
    """Standalone ingress rules of one security group whose ranges together admit too much of
    the internet (`too_open`) to an admin port, though no single rule does (each rule is its own
    resource, so the per-resource policy cannot see the union)."""
    protected = _protected_ports(config)
    groups: dict[str, dict[int, list[tuple[Resource, list[str]]]]] = {}
    for resource in resources:
        if resource.resource_type not in (SECURITY_GROUP_RULE, INGRESS_RULE):
            continue
        group = resource.props.get("securityGroupId")
        if not isinstance(group, str) or not group:
            continue
        for _where, protocol, from_port, to_port, sources in _ingress_rules(resource):
            for port in _ports_opened(protocol, from_port, to_port, protected):
                groups.setdefault(group, {}).setdefault(port, []).append((resource, sources))
    found = []
    for group, ports in sorted(groups.items()):
        for port, opened in sorted(ports.items()):
            if any(too_open(sources) for _r, sources in opened):
                continue  # a single rule already opens too much: reported by the resource policy
            world = too_open(s for _r, sources in opened for s in sources)
            if not world:
                continue
            rules = sorted({r.name for r, _s in opened})
            ranges = sorted({s for _r, sources in opened for s in sources})
            found.append(
                (
                    opened[0][0].urn,
                    f"security group {group}: the ingress rules {', '.join(rules)} together open "
                    f"port {_describe_ports([port])} to {' and '.join(world)} "
                    f"({', '.join(ranges)}). {_WORLD_FIX}",
                )
            )
    return found


def check_no_world_ingress_other_ports(resource: Resource, config: Config) -> list[str]:
    """No ingress rule whose ranges admit too much of the internet (`too_open`) on any other
    port or protocol either (the admin ports are the policy above's): the cluster opens nothing
    to the world.
    `allowedWorldPorts` lists TCP/UDP ports a stack may open on purpose."""
    skipped = {int(p) for p in (config.get("protectedPorts") or PORT_NAMES)}
    allowed = {int(p) for p in (config.get("allowedWorldPorts") or [])}
    found = []
    for where, protocol, from_port, to_port, sources in _ingress_rules(resource):
        world = too_open(sources)
        if not world:
            continue
        kind = str(protocol).lower() if protocol is not None else ""
        try:
            low, high = int(from_port), int(to_port)
        except (TypeError, ValueError):
            low, high = -1, -1
        if kind in ("tcp", "udp", "6", "17") and low >= 0:
            ports = set(range(low, high + 1)) - skipped - allowed
            if not ports:
                continue
            what = f"{kind} {low}-{high}" if low != high else f"{kind} {low}"
        else:
            what = f"protocol {protocol} (every port)"
        found.append(
            f"{_label(resource)}: {where} opens {what} to {' and '.join(world)}. "
            "Fix: admit cluster members by group and operators by their ranges "
            "(components/aws/network.py MEMBER_PORTS), or list the port in the policy's "
            "allowedWorldPorts if the whole internet must reach it."
        )
    return found


# ---------------------------------------------------------------- tags


def check_required_tags(resource: Resource, config: Config) -> list[str]:
    """Taggable AWS resources carry the required tags (default: env and owner) with a value."""
    props = resource.props
    if resource.resource_type not in TAGGABLE_TYPES and not (
        resource.resource_type.startswith("aws:") and "tags" in props
    ):
        return []
    required = list(config.get("requiredTags") or ["env", "owner"])
    tags: dict[str, Any] = {}
    for key in ("tagsAll", "tags"):
        value = props.get(key)
        if isinstance(value, Mapping):
            tags.update(value)
    missing = [key for key in required if not tags.get(key)]
    if not missing:
        return []
    return [
        f"{_label(resource)}: missing required tag(s) {', '.join(missing)}. "
        f"Fix: set them in gpu-cluster:tags of the stack file (every component tags its "
        "resources with settings.stack_tags)."
    ]


# ---------------------------------------------------------------- Kubernetes workloads


def _pod_spec(resource: Resource) -> Mapping[str, Any] | None:
    path = WORKLOAD_POD_SPEC_PATHS.get(resource.resource_type)
    spec = _get(resource.props, *path) if path else None
    return spec if isinstance(spec, Mapping) else None


_containers = containers


def _all_containers(resource: Resource) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every container of every pod spec the resource holds (workloads.pod_specs), named by
    where it is when the resource holds more than one."""
    specs = pod_specs(resource)
    for path, pod_spec in specs:
        for where, container in containers(pod_spec):
            yield (f"{path}: {where}" if len(specs) > 1 else where), container


def image_unpinned_reason(image: Any) -> str | None:
    """Why `image` is not pinned, or None when it names a version tag or a digest."""
    if not isinstance(image, str) or not image:
        return "no image"
    if "@sha256:" in image:
        return None
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return "untagged (means latest)"
    if last.rsplit(":", 1)[1] == "latest":
        return "tagged latest"
    return None


def check_images_pinned(resource: Resource, config: Config) -> list[str]:
    """Workload containers (device plugin, validation) use a version tag or digest."""
    found = []
    for where, container in _all_containers(resource):
        reason = image_unpinned_reason(container.get("image"))
        if reason:
            found.append(
                f"{_label(resource)}: {where} image {container.get('image')!r} is {reason}. "
                "Fix: pin a version tag or digest (gpu-cluster:devicePlugin.version, "
                "gpu-cluster:validation.image), like "
                "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0."
            )
    return found


def _registry_of(image: str) -> str:
    """`image` with its implicit registry spelled out (docker.io/library for a bare name)."""
    first, _, rest = image.partition("/")
    if not rest or ("." not in first and ":" not in first and first != "localhost"):
        return f"docker.io/{image if rest else 'library/' + image}"
    return image


def check_trusted_registries(resource: Resource, config: Config) -> list[str]:
    """Every workload container's image comes from a registry prefix the stack trusts."""
    trusted = tuple(config.get("trustedRegistries") or TRUSTED_REGISTRIES)
    found = []
    for where, container in _all_containers(resource):
        image = container.get("image")
        if not isinstance(image, str) or _registry_of(image).startswith(trusted):
            continue
        found.append(
            f"{_label(resource)}: {where} image {image!r} is not from a trusted registry "
            f"({', '.join(trusted)}). Fix: use an image from one of them, or add its registry "
            "to the policy's trustedRegistries after review."
        )
    return found


def check_host_access(resource: Resource, config: Config) -> list[str]:
    """Outside the system DaemonSets (workloads.is_system_workload: by namespace, exact name and
    image repository), no pod spec of any Kubernetes resource (a workload, a patch of one, a
    ReplicationController, a PodTemplate, a custom resource) is privileged, escalates
    privileges, adds a capability beyond `allowedCapabilities`, mounts a hostPath or shares the
    host's PID, IPC or network."""
    if is_system_workload(resource, config):
        return []
    allowed = set(config.get("allowedCapabilities") or ALLOWED_CAPABILITIES)
    specs = pod_specs(resource)
    problems = []
    for path, pod_spec in specs:
        at = f"{path}: " if len(specs) > 1 else ""
        problems += _host_access_problems(pod_spec, allowed, at)
    return [
        f"{_label(resource)}: {problem}. Fix: run it unprivileged (allowPrivilegeEscalation: "
        "false, capabilities drop ALL, no host namespaces or paths), or add its namespace, "
        "name and image repositories to the policy's systemWorkloads if it is a node agent "
        "that needs the host."
        for problem in problems
    ]


def _host_access_problems(pod_spec: Mapping[str, Any], allowed: set[str], at: str) -> list[str]:
    problems = [
        f"{at}spec.{key} is true"
        for key in ("hostPID", "hostIPC", "hostNetwork")
        if pod_spec.get(key) is True
    ]
    problems += [
        f"{at}volume {volume.get('name', 'unnamed')!r} is a hostPath "
        f"({_get(volume, 'hostPath', 'path')})"
        for volume in _items(pod_spec.get("volumes"))
        if isinstance(volume, Mapping) and "hostPath" in volume
    ]
    for where, container in containers(pod_spec):
        where = f"{at}{where}"
        context = container.get("securityContext") or {}
        if context.get("privileged") is True:
            problems.append(f"{where} is privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            problems.append(
                f"{where} may escalate privileges (allowPrivilegeEscalation unset or true)"
            )
        added = set(_items(_get(context, "capabilities", "add"))) - allowed
        if added:
            problems.append(f"{where} adds capabilities {', '.join(sorted(map(str, added)))}")
        if "ALL" not in _items(_get(context, "capabilities", "drop")):
            problems.append(f"{where} does not drop ALL capabilities")
    return problems


def _gpu_requested(pod_spec: Mapping[str, Any]) -> bool:
    return any(
        _get(container, "resources", "limits", GPU_RESOURCE) is not None
        or _get(container, "resources", "requests", GPU_RESOURCE) is not None
        for _, container in _containers(pod_spec)
    )


def check_gpu_jobs_bounded(resource: Resource, config: Config) -> list[str]:
    """Every Job that asks for GPUs, whatever its name, has a deadline: a stuck one would hold
    the node's GPUs forever (the validation Jobs' own policy checks only the names it knows)."""
    if resource.resource_type not in (JOB, CRON_JOB):
        return []
    pod_spec = _pod_spec(resource)
    if pod_spec is None or not _gpu_requested(pod_spec):
        return []
    path = ("spec", "activeDeadlineSeconds")
    if resource.resource_type == CRON_JOB:
        path = ("spec", "jobTemplate", "spec", "activeDeadlineSeconds")
    deadline = _get(resource.props, *path)
    if _positive_int(deadline):
        return []
    return [
        f"{_label(resource)}: asks for {GPU_RESOURCE} without activeDeadlineSeconds "
        f"({'unset' if deadline is None else deadline}). Fix: set a deadline (the validation "
        "Jobs take gpu-cluster:validation.timeoutSeconds)."
    ]


def _positive_int(value: Any) -> bool:
    """A positive whole number, as the engine sends it (numbers arrive as floats) or a quantity
    string ("1")."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return value > 0 and float(value).is_integer()
    return isinstance(value, str) and value.isascii() and value.isdigit() and int(value) > 0


def check_validation_job_bounded(resource: Resource, config: Config) -> list[str]:
    """The per-node validation Job has a deadline and requests the node's GPUs as limits."""
    suffix = config.get("validationJobSuffix") or f"-{chain.VALIDATION_JOB}"
    if resource.resource_type != JOB or not resource.name.endswith(suffix):
        return []
    found = []
    label = _label(resource)
    deadline = _get(resource.props, "spec", "activeDeadlineSeconds")
    if not _positive_int(deadline):
        found.append(
            f"{label}: spec.activeDeadlineSeconds is {'unset' if deadline is None else deadline}; "
            "a stuck validation would hold the node's GPUs forever. Fix: set it from "
            "gpu-cluster:validation.timeoutSeconds."
        )
    pod_spec = _pod_spec(resource) or {}
    gpu_limits = [
        _get(container, "resources", "limits", GPU_RESOURCE)
        for _, container in _containers(pod_spec)
    ]
    if not any(_positive_int(limit) for limit in gpu_limits):
        found.append(
            f"{label}: no container has resources.limits[{GPU_RESOURCE!r}]; the pod would run "
            "without GPUs and prove nothing. Fix: set the limit to the node's GPU count."
        )
    return found


# ---------------------------------------------------------------- remote commands

SECRET_OUTPUT_SUFFIXES = tuple(f"-{suffix}" for suffix in chain.SECRET_OUTPUT)


def carries_secret_output(resource: Resource, config: Config) -> bool:
    """A command whose stdout is a credential: named like one (`<node>-join-token`) or running a
    script that prints a token, a join command or the admin kubeconfig."""
    if resource.resource_type not in (REMOTE_COMMAND, LOCAL_COMMAND):
        return False
    suffixes = tuple(config.get("secretOutputCommandSuffixes") or SECRET_OUTPUT_SUFFIXES)
    if resource.name.endswith(suffixes):
        return True
    scripts = [_known(resource.props, key) for key in ("create", "update", "stdin")]
    return any(isinstance(s, str) and SECRET_OUTPUT_PATTERN.search(s) for s in scripts)


def check_secret_command_output(resource: Resource, config: Config) -> list[str]:
    """Commands whose output carries a secret mark stdout secret and do not log it."""
    if not carries_secret_output(resource, config):
        return []
    found = []
    label = _label(resource)
    if "stdout" not in resource.additional_secret_outputs:
        found.append(
            f"{label}: its stdout carries a credential but is not a secret output. "
            "Fix: run it with run_script(..., secret_stdout=True) "
            '(additional_secret_outputs=["stdout", "stderr"]).'
        )
    logging = resource.props.get("logging") or "stdoutAndStderr"
    if logging not in ("none", "stderr"):
        found.append(
            f"{label}: logging is {logging}, so the credential would be printed in the update "
            "log. Fix: run it with run_script(..., secret_stdout=True) (logging=Logging.NONE)."
        )
    return found


def check_ssh_host_key_checking(resource: Resource, config: Config) -> list[str]:
    """No command, local or remote, runs ssh, scp or sftp with host-key checking off: its
    command lines, stdin, interpreter and environment are read for the options that accept any
    key (NO_HOST_KEY_CHECK)."""
    if resource.resource_type not in (LOCAL_COMMAND, REMOTE_COMMAND):
        return []
    texts = {key: _known(resource.props, key) for key in ("create", "update", "delete", "stdin")}
    interpreter = _known(resource.props, "interpreter")
    texts["interpreter"] = " ".join(map(str, _items(interpreter)))
    environment = _known(resource.props, "environment")
    if isinstance(environment, Mapping):
        for name in list(environment):
            known, value = _known_field(environment, name)
            texts[f"environment.{name}"] = value if known else None
    found = []
    for where, text in texts.items():
        match = NO_HOST_KEY_CHECK.search(text) if isinstance(text, str) else None
        if match:
            found.append(
                f"{_label(resource)}: its {where} runs ssh with {match.group(0)!r}, which "
                "accepts any host key: whoever answers at that address receives what it sends. "
                "Fix: pin the host key (StrictHostKeyChecking=yes and a known_hosts with it, "
                "as components/hosts/local/rotate-host-key.sh does)."
            )
    return found


def check_remote_host_keys(resource: Resource, config: Config) -> list[str]:
    """Every remote command and copy pins the host key of the machine it dials, and of the
    bastion it hops through: without `hostKey` pulumi-command accepts any host
    (`ssh.InsecureIgnoreHostKey`), and whoever sits on the path receives what the step sends."""
    if resource.resource_type not in (REMOTE_COMMAND, REMOTE_COPY):
        return []
    connection = _known(resource.props, "connection")
    if connection is None:
        return []  # unknown in a preview (a machine not created yet): checked at `up`
    found = []
    label = _label(resource)
    for where, conn in (("connection", connection), ("connection.proxy", None)):
        if where == "connection.proxy":
            known, conn = _known_field(connection, "proxy")
            if not known or conn is None:
                continue
        known, key = _known_field(conn, "hostKey")
        if known and not key:
            found.append(
                f"{label}: {where} has no hostKey, so it would accept any host. Fix: pin it "
                "(components/hosts/remote.py ssh_host: a machine's own key, "
                "network.bastion.hostKey, controlPlane.hostKey or hostKeys.<instance id>)."
            )
    return found


# ---------------------------------------------------------------- stack: ordering


def check_control_plane_protected(resource: Resource, config: Config) -> list[str]:
    """The managed control-plane machine is protected: replacing it (a new AMI id, a new key
    pair name) or deleting it is a new cluster, and every node would have to re-join."""
    if resource.resource_type != "aws:ec2/instance:Instance" or resource.protect:
        return []
    tags = resource.props.get("tags") or {}
    role_tag = str(config.get("roleTag", "gpu-cluster:role"))
    if not isinstance(tags, Mapping) or tags.get(role_tag) != "control-plane":
        return []
    return [
        f"{_label(resource)}: the control-plane machine is not protected; its replacement or "
        "deletion is a new cluster. Fix: keep gpu-cluster:controlPlane.protect true (the "
        "default); set it false only for a deliberate rebuild or destroy."
    ]


def check_join_ordering(resources: Sequence[Resource], config: Config) -> list[tuple[str, str]]:
    """Every `<node>-join` waits, directly or through other steps, for the node's own steps
    before it in the chain (`chain.JOIN_FOLLOWS`: its host-key rotation, a local command, and
    its scripts' copy first, the driver and runtime among the rest): joining a node whose GPUs
    or runtime are not ready admits a broken node, and one whose boot host key is still in
    place hands the token to whoever holds that key. A node with no machine of its name (an
    existing host, `chain.LAUNCHED_ONLY` aside) booted with no key of the stack's: its key is
    pinned from config, which check_remote_host_keys holds every connection to."""
    by_urn = {r.urn: r for r in resources}
    commands = {
        r.name: r
        for r in resources
        if r.resource_type in (REMOTE_COMMAND, REMOTE_COPY, LOCAL_COMMAND)
    }

    def ancestors(resource: Resource) -> set[str]:
        seen: set[str] = set()
        stack = [resource]
        while stack:
            for urn in stack.pop().dependencies:
                if urn not in seen and urn in by_urn:
                    seen.add(urn)
                    stack.append(by_urn[urn])
        return seen

    # The machines the stack launched, by name: a GPU node's instance is named as its node.
    launched = {r.name for r in resources if r.resource_type == "aws:ec2/instance:Instance"}
    found = []
    for name, join in sorted(commands.items()):
        if join.resource_type != REMOTE_COMMAND or not name.endswith(f"-{chain.JOIN}"):
            continue
        node = name.removesuffix(f"-{chain.JOIN}")
        upstream = ancestors(join)
        follows = chain.JOIN_FOLLOWS
        if node not in launched:
            follows = tuple(step for step in follows if step not in chain.LAUNCHED_ONLY)
        absent = [step for step in follows if f"{node}-{step}" not in commands]
        early = [
            step
            for step in follows
            if f"{node}-{step}" in commands and commands[f"{node}-{step}"].urn not in upstream
        ]
        if absent:
            names = ", ".join(f"'{node}-{step}'" for step in absent)
            found.append(
                (
                    join.urn,
                    f"{_label(join)}: node {node} has no {names} step, so it would join "
                    "without them. Fix: create the missing steps and chain the join after them.",
                )
            )
        if early:
            names = ", ".join(f"'{node}-{step}'" for step in early)
            found.append(
                (
                    join.urn,
                    f"{_label(join)}: does not depend on {names}, so the node could join before "
                    "they ran. Fix: chain the join after the last of them "
                    "(components/hosts/steps.py, the row's `after`).",
                )
            )
    return found


# ---------------------------------------------------------------- the policies


@dataclass(frozen=True)
class PolicySpec:
    """One policy of the pack: a resource check or a stack check, with its config schema (JSON
    schema properties, each with its default) and enforcement level ("mandatory" unless the
    stack's policy config says otherwise)."""

    name: str
    description: str
    check: ResourceCheck | StackCheck
    stack: bool = False
    config_schema: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    enforcement_level: str = "mandatory"

    def defaults(self) -> dict[str, Any]:
        return {
            key: schema["default"]
            for key, schema in self.config_schema.items()
            if "default" in schema
        }

    def config(self, given: Config | None = None) -> dict[str, Any]:
        """The defaults, overridden by the given policy config."""
        return {**self.defaults(), **dict(given or {})}


_STRINGS = {"type": "array", "items": {"type": "string"}}

POLICIES: tuple[PolicySpec, ...] = (
    PolicySpec(
        "imdsv2-required",
        "EC2 instances and launch templates require IMDSv2 (metadataOptions.httpTokens: required).",
        check_imdsv2,
    ),
    PolicySpec(
        "ebs-volumes-encrypted",
        "Root and data EBS volumes of instances, launch templates and volumes are encrypted.",
        check_volumes_encrypted,
    ),
    PolicySpec(
        "no-world-ingress-to-admin-ports",
        "No security group ingress from ranges that together admit more than a /16 of public "
        "IPv4 or a /48 of IPv6 (the whole internet, however split, among them) to SSH (22), the "
        "Kubernetes API (6443) or the kubelet (10250).",
        check_no_world_ingress,
        config_schema={
            "protectedPorts": {
                "type": "array",
                "items": {"type": "integer", "minimum": 0, "maximum": 65535},
                "default": sorted(PORT_NAMES),
                "description": "TCP ports that must not be open to the whole internet.",
            }
        },
    ),
    PolicySpec(
        "no-world-ingress-across-rules",
        "No set of a security group's separate ingress rules whose ranges together admit more "
        "than a /16 of public IPv4 or a /48 of IPv6 to SSH (22), the Kubernetes API (6443) or "
        "the kubelet (10250).",
        check_no_world_ingress_across_rules,
        stack=True,
        config_schema={
            "protectedPorts": {
                "type": "array",
                "items": {"type": "integer", "minimum": 0, "maximum": 65535},
                "default": sorted(PORT_NAMES),
                "description": "TCP ports that must not be open to the whole internet.",
            }
        },
    ),
    PolicySpec(
        "no-world-ingress-to-any-port",
        "No security group ingress from ranges that together admit more than a /16 of public "
        "IPv4 or a /48 of IPv6 to any other port or protocol either, unless listed in "
        "allowedWorldPorts.",
        check_no_world_ingress_other_ports,
        config_schema={
            "protectedPorts": {
                "type": "array",
                "items": {"type": "integer", "minimum": 0, "maximum": 65535},
                "default": sorted(PORT_NAMES),
                "description": "Ports the admin-port policy reports (not reported twice).",
            },
            "allowedWorldPorts": {
                "type": "array",
                "items": {"type": "integer", "minimum": 0, "maximum": 65535},
                "default": [],
                "description": "TCP/UDP ports the whole internet may reach on purpose.",
            },
        },
    ),
    PolicySpec(
        "gpu-instance-type-allowed",
        "GPU instances (g*, gr*, p* families) use an instance type from the allowlist.",
        check_gpu_instance_type,
        config_schema={
            "allowedInstanceTypes": {
                **_STRINGS,
                "default": list(CATALOG_INSTANCE_TYPES),
                "description": "GPU instance types allowed (default: every type in the catalog).",
            }
        },
    ),
    PolicySpec(
        "required-tags",
        "Taggable AWS resources carry the required tags with a non-empty value.",
        check_required_tags,
        config_schema={
            "requiredTags": {
                **_STRINGS,
                "default": ["env", "owner"],
                "description": "Tag keys every taggable AWS resource must carry.",
            }
        },
    ),
    PolicySpec(
        "container-images-pinned",
        "Kubernetes workload containers (device plugin, validation) use a version tag or digest, "
        "not latest and not untagged.",
        check_images_pinned,
    ),
    PolicySpec(
        "trusted-registries",
        "Kubernetes workload containers pull from a trusted registry.",
        check_trusted_registries,
        config_schema={
            "trustedRegistries": {
                **_STRINGS,
                "default": list(TRUSTED_REGISTRIES),
                "description": "Image reference prefixes the stacks may pull from.",
            }
        },
    ),
    PolicySpec(
        "host-access-only-for-system-daemonsets",
        "Outside the system DaemonSets (by namespace, name and image repository) no pod spec of "
        "any Kubernetes resource is privileged, escalates privileges, keeps capabilities beyond "
        "the allowed ones, mounts a hostPath or shares host namespaces.",
        check_host_access,
        config_schema={
            "systemWorkloads": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "namespace": {"type": "string"},
                        "name": {"type": "string"},
                        "images": _STRINGS,
                    },
                    "required": ["namespace", "name", "images"],
                },
                "default": [dict(w) for w in SYSTEM_WORKLOADS],
                "description": "The DaemonSets that need the host: each one's namespace, "
                "metadata.name and the repositories of its images (all must match).",
            },
            "allowedCapabilities": {
                **_STRINGS,
                "default": list(ALLOWED_CAPABILITIES),
                "description": "Capabilities other workloads may add.",
            },
        },
    ),
    PolicySpec(
        "gpu-jobs-bounded",
        "Every Job or CronJob that asks for nvidia.com/gpu has activeDeadlineSeconds, whatever "
        "its name.",
        check_gpu_jobs_bounded,
    ),
    PolicySpec(
        "validation-job-bounded",
        "The per-node GPU validation Job has activeDeadlineSeconds and a nvidia.com/gpu limit.",
        check_validation_job_bounded,
        config_schema={
            "validationJobSuffix": {
                "type": "string",
                "default": f"-{chain.VALIDATION_JOB}",
                "description": "Resource-name suffix of the validation Jobs.",
            }
        },
    ),
    PolicySpec(
        "secret-command-output",
        "Remote commands whose output carries a credential (join token, kubeconfig) declare stdout "
        "secret and do not log it.",
        check_secret_command_output,
        config_schema={
            "secretOutputCommandSuffixes": {
                **_STRINGS,
                "default": list(SECRET_OUTPUT_SUFFIXES),
                "description": "Resource-name suffixes of commands whose stdout is a credential.",
            }
        },
    ),
    PolicySpec(
        "remote-commands-pin-host-keys",
        "Every remote command and copy pins the SSH host key of its host and of its bastion.",
        check_remote_host_keys,
    ),
    PolicySpec(
        "no-ssh-without-host-key-checking",
        "No local or remote command runs ssh, scp or sftp with StrictHostKeyChecking=no, "
        "accept-new or a known_hosts of /dev/null.",
        check_ssh_host_key_checking,
    ),
    PolicySpec(
        "imds-hop-limit",
        "Instances, spot requests and launch templates answer instance metadata on the host "
        "only (httpPutResponseHopLimit at most maxHopLimit).",
        check_imds_hop_limit,
        config_schema={
            "maxHopLimit": {
                "type": "integer",
                "minimum": 1,
                "maximum": 64,
                "default": MAX_HOP_LIMIT,
                "description": "The largest IMDS response hop limit allowed (2 lets containers "
                "reach instance metadata).",
            }
        },
    ),
    PolicySpec(
        "kubernetes-content-inspectable",
        "No Kubernetes resource whose content the pack cannot see (a helm v3 Release).",
        check_inspectable,
    ),
    PolicySpec(
        "no-privileged-pod-security-namespaces",
        "No namespace enforces Pod Security privileged but the node agents' own.",
        check_privileged_namespaces,
        config_schema={
            "privilegedNamespaces": {
                **_STRINGS,
                "default": list(PRIVILEGED_NAMESPACES),
                "description": "Namespaces that may enforce privileged (the node agents').",
            }
        },
    ),
    PolicySpec(
        "no-admin-rbac-for-everyone",
        "No binding of cluster-admin, admin, edit or a wildcard role to system:anonymous, "
        "system:unauthenticated, system:authenticated or system:serviceaccounts(:<ns>).",
        check_rbac_everyone,
        stack=True,
        config_schema={
            "powerfulRoles": {
                **_STRINGS,
                "default": list(POWERFUL_ROLES),
                "description": "Roles no group of every caller may hold (besides the stack's "
                "own roles with wildcard rules).",
            },
            "everyoneGroups": {
                **_STRINGS,
                "default": list(EVERYONE_GROUPS),
                "description": "Groups every caller (or every service account) is in.",
            },
        },
    ),
    PolicySpec(
        "no-iam-administrator",
        "No IAM role, user or group is given AdministratorAccess or IAMFullAccess, or a policy "
        "allowing every action on every resource.",
        check_iam_admin,
        config_schema={
            "deniedManagedPolicies": {
                **_STRINGS,
                "default": list(DENIED_MANAGED_POLICIES),
                "description": "AWS managed policies no principal of the stack may hold.",
            }
        },
    ),
    PolicySpec(
        "control-plane-protected",
        "The managed control-plane machine is protected from deletion and replacement.",
        check_control_plane_protected,
        config_schema={
            "roleTag": {
                "type": "string",
                "default": "gpu-cluster:role",
                "description": "Tag whose value control-plane marks the control-plane machine.",
            }
        },
    ),
    PolicySpec(
        "join-after-driver-and-runtime",
        "Every node's join step depends on that node's steps before it in the chain (the driver "
        "and the runtime among them).",
        check_join_ordering,
        stack=True,
    ),
)

RESOURCE_POLICIES = tuple(p for p in POLICIES if not p.stack)
STACK_POLICIES = tuple(p for p in POLICIES if p.stack)


def validate_resource(
    resource: Resource, config: Mapping[str, Config] | None = None
) -> dict[str, list[str]]:
    """Every resource policy's violations for one resource, by policy name (only policies that
    found something). `config` maps policy names to their config."""
    config = config or {}
    found = {}
    for policy in RESOURCE_POLICIES:
        messages = policy.check(resource, policy.config(config.get(policy.name)))
        if messages:
            found[policy.name] = messages
    return found


def validate_stack(
    resources: Sequence[Resource], config: Mapping[str, Config] | None = None
) -> list[tuple[str, str, str]]:
    """Every violation of every policy over a whole stack, as (policy, URN, message)."""
    config = config or {}
    found = [
        (name, resource.urn, message)
        for resource in resources
        for name, messages in validate_resource(resource, config).items()
        for message in messages
    ]
    for policy in STACK_POLICIES:
        found += [
            (policy.name, urn, message)
            for urn, message in policy.check(resources, policy.config(config.get(policy.name)))
        ]
    return found

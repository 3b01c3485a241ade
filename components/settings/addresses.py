"""Addresses judged by what they admit: how many public addresses a list of source ranges opens a
port to (not how it is spelled: 0.0.0.0/1 and 128.0.0.0/1, or the internet less one /32 as 32
ranges, are the internet), which blocks are private, and the pod-network ports an existing
cluster's CNI may use.

Why, and the sources: docs/decisions/060-addresses-are-judged-by-what-they-admit.md
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# Blocks only a private network routes: RFC 1918's three, RFC 6598's shared address space (which
# AWS accepts as a VPC block), and, for IPv6, RFC 4193's unique local addresses.
PRIVATE_BLOCKS: tuple[Network, ...] = tuple(
    ipaddress.ip_network(block)
    for block in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")
)
PRIVATE_IPV4_BLOCKS = tuple(b for b in PRIVATE_BLOCKS if b.version == 4)

# Sources no packet from the internet carries: IANA's IPv4 Special-Purpose Address Registry's
# blocks that are not globally reachable (RFC 6890 and its updates: "this network", RFC 1918,
# shared, loopback, link-local, IETF protocol assignments, the three documentation blocks,
# benchmarking, multicast, reserved and broadcast). For IPv6 only 2000::/3 is global unicast
# (RFC 4291, section 2.4), less its documentation block 2001:db8::/32 (RFC 3849).
_NOT_PUBLIC_V4 = tuple(
    ipaddress.IPv4Network(block)
    for block in (
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
)
_GLOBAL_V6 = ipaddress.IPv6Network("2000::/3")
_NOT_PUBLIC_V6 = (ipaddress.IPv6Network("2001:db8::/32"),)

# The most public addresses one key may open a port to: a /16 of IPv4 (65,536 addresses, the
# largest block an organisation's egress comes from: RIRs assign end users /24 to /20, and the
# last-/8 policies /22 at most), a /48 of IPv6 (one site, RFC 6177). More is someone else's
# internet: a cloud region, an ISP's customers, or the whole of it written in pieces.
MAX_PUBLIC_SOURCES = {4: 2**16, 6: 2**80}
_PREFIX_OF_MAX = {4: "/16", 6: "/48"}


def _networks(sources: Iterable[str]) -> dict[int, list[Network]]:
    found: dict[int, list[Network]] = {4: [], 6: []}
    for source in sources:
        try:
            network = ipaddress.ip_network(str(source).strip(), strict=False)
        except ValueError:
            continue  # not a range; the field's own type says so
        found[network.version].append(network)
    return found


def _overlap(a: Network, b: Network) -> int:
    """Addresses two CIDR blocks share: the smaller one's when one holds the other, else none
    (CIDR blocks nest or are disjoint)."""
    if a.version != b.version or not a.overlaps(b):
        return 0
    return min(a.num_addresses, b.num_addresses)


def public_addresses(sources: Iterable[str]) -> dict[int, int]:
    """How many public addresses (IPv4, IPv6) the union of `sources` holds: the blocks merged
    first, so overlaps and duplicates count once; addresses no internet packet comes from
    left out."""
    networks = _networks(sources)
    counts = {}
    v4 = list(ipaddress.collapse_addresses(networks[4]))  # type: ignore[arg-type]
    counts[4] = sum(n.num_addresses - sum(_overlap(n, p) for p in _NOT_PUBLIC_V4) for n in v4)
    v6 = list(ipaddress.collapse_addresses(networks[6]))  # type: ignore[arg-type]
    counts[6] = sum(
        _overlap(n, _GLOBAL_V6) - sum(_overlap(n, p) for p in _NOT_PUBLIC_V6) for n in v6
    )
    return counts


def too_public(sources: Iterable[str]) -> list[str]:
    """What in `sources` is too much, one phrase per IP version ("3,758,096,384 public IPv4
    addresses (more than a /16's 65,536)"), or [] when each version stays within its bound."""
    found = []
    for version, count in public_addresses(sources).items():
        bound = MAX_PUBLIC_SOURCES[version]
        if count > bound:
            found.append(
                f"{count:,} public IPv{version} addresses (more than a "
                f"{_PREFIX_OF_MAX[version]}'s {bound:,})"
            )
    return found


def is_private(network: Network) -> bool:
    """Inside one of PRIVATE_BLOCKS (so never link-local, loopback or public)."""
    same = (block for block in PRIVATE_BLOCKS if block.version == network.version)
    return any(network.subnet_of(block) for block in same)


# The pod-network ports an existing cluster's CNI may use between machines, each one port: what
# the CNIs' own documents list for traffic between nodes. flannel Documentation/backends.md
# (VXLAN "Port ... Defaults to kernel default, currently 8472"); Cilium Documentation/operations/
# system_requirements.rst (VXLAN 8472/udp, Geneve 6081/udp, health checks 4240/tcp, Hubble server
# 4244/tcp, WireGuard 51871/udp); Calico's "System requirements", Network requirements (BGP
# 179/tcp, VXLAN 4789/udp, Typha 5473/tcp, WireGuard 51820/udp and, for IPv6, 51821/udp).
CNI_PORTS: dict[str, str] = {
    "udp/8472": "VXLAN of flannel and Cilium",
    "udp/6081": "Cilium Geneve",
    "tcp/4240": "Cilium health checks",
    "tcp/4244": "Cilium Hubble server",
    "udp/51871": "Cilium WireGuard",
    "tcp/179": "Calico BGP",
    "udp/4789": "Calico VXLAN",
    "tcp/5473": "Calico Typha",
    "udp/51820": "Calico WireGuard (IPv4)",
    "udp/51821": "Calico WireGuard (IPv6)",
}

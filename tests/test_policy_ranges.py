"""The no-world-ingress policies reason about the public addresses rules admit, not strings:
ranges whose union is the whole internet (IPv4 or IPv6), or more than a /16 (a /48) of it, are
caught in one rule, across the rules of one security group, and across separate rule resources
of one group."""

from __future__ import annotations

import ipaddress

import pytest

from tests.helpers.policies import (
    MANDATORY,
    analyze,
    as_policy_input,
    assert_names_resource_and_fix,
    check,
    resource,
    security_group,
    ssh_rule,
    v,
)
from tools.harness.stacks import run_program

SPLIT_V4 = ["0.0.0.0/1", "128.0.0.0/1"]
SPLIT_V6 = ["::/1", "8000::/1"]


@pytest.mark.parametrize(
    ("sources", "world"),
    [
        (["0.0.0.0/0"], ["0.0.0.0/0"]),
        (SPLIT_V4, ["0.0.0.0/0"]),
        (["0.0.0.0/2", "64.0.0.0/2", "128.0.0.0/1"], ["0.0.0.0/0"]),
        (["10.1.2.3/0"], ["0.0.0.0/0"]),  # host bits set: still the whole internet
        (SPLIT_V6, ["::/0"]),
        ([*SPLIT_V4, *SPLIT_V6], ["0.0.0.0/0", "::/0"]),
        (["0.0.0.0/1", "128.0.0.0/2"], []),  # 192.0.0.0/2 missing
        (["203.0.113.0/24", "not-a-cidr"], []),
    ],
)
def test_world_covered_is_about_ranges(sources, world):
    assert v.world_covered(sources) == world, f"{sources}: covers {v.world_covered(sources)}"


def test_split_world_in_one_rule_is_a_violation():
    bad = security_group(ssh_rule(*SPLIT_V4))
    messages = check("no-world-ingress-to-admin-ports", bad)
    assert_names_resource_and_fix(messages, bad)
    assert "0.0.0.0/1" in messages[0] and "128.0.0.0/1" in messages[0], messages


def test_split_world_across_two_rules_of_one_group_is_one_violation():
    bad = security_group(ssh_rule(SPLIT_V4[0]), ssh_rule(SPLIT_V4[1]))
    messages = check("no-world-ingress-to-admin-ports", bad)
    assert_names_resource_and_fix(messages, bad)
    assert "ingress[0] + ingress[1] opens port 22 (SSH)" in messages[0], messages


def test_split_ipv6_world_is_a_violation():
    rule = ssh_rule(port=6443)
    rule["ipv6CidrBlocks"] = SPLIT_V6
    bad = security_group(rule)
    messages = check("no-world-ingress-to-admin-ports", bad)
    assert_names_resource_and_fix(messages, bad)
    assert "::/0" in messages[0], messages


def test_narrow_ranges_pass():
    good = security_group(ssh_rule("203.0.113.0/24", "198.51.100.0/24"))
    assert check("no-world-ingress-to-admin-ports", good) == []


def _ingress_rule(name: str, cidr: str, group: str = "sg-0123456789abcdef0") -> v.Resource:
    return resource(
        v.INGRESS_RULE,
        name,
        {
            "securityGroupId": group,
            "ipProtocol": "tcp",
            "fromPort": 22,
            "toPort": 22,
            "cidrIpv4": cidr,
        },
    )


def test_ranges_across_separate_rule_resources_are_summed_by_the_stack_policy():
    """Three /17s of public addresses, one rule each: each within the bound, together not."""
    spec = next(p for p in v.POLICIES if p.name == "no-world-ingress-across-rules")
    pieces = ["52.0.0.0/17", "52.0.128.0/17", "52.1.0.0/17"]
    rules = [_ingress_rule(f"ssh-{i}", cidr) for i, cidr in enumerate(pieces)]
    assert all(check("no-world-ingress-to-admin-ports", r) == [] for r in rules)
    found = spec.check(rules, spec.config())
    assert len(found) == 1, found
    urn, message = found[0]
    assert urn == rules[0].urn and "ssh-0" in message and "ssh-2" in message, message
    assert "98,304 public IPv4 addresses" in message and "Fix:" in message, message
    other_group = [*rules[:2], _ingress_rule("ssh-2", pieces[2], group="sg-0fedcba987654321f")]
    assert spec.check(other_group, spec.config()) == [], "rules of two groups were merged"


def test_half_the_world_in_one_rule_resource_is_a_violation():
    (message,) = check("no-world-ingress-to-admin-ports", _ingress_rule("ssh", "0.0.0.0/1"))
    assert "public IPv4 addresses (more than a /16's 65,536)" in message, message


# The internet less one /32, in the 32 ranges that leave it out.
WORLD_LESS_ONE = [
    str(n)
    for n in ipaddress.ip_network("0.0.0.0/0").address_exclude(
        ipaddress.ip_network("203.0.113.7/32")
    )
]


@pytest.mark.parametrize(
    ("sources", "too_much"),
    [
        (WORLD_LESS_ONE, True),
        (["0.0.0.0/1"], True),
        (["52.0.0.0/8"], True),
        (["52.0.0.0/16"], False),  # exactly the bound
        (["52.0.0.0/16", "52.0.0.0/17"], False),  # an overlap counts once
        (["52.0.0.0/16", "52.1.0.0/24"], True),
        (["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"], False),
        (["169.254.0.0/16", "224.0.0.0/3"], False),  # no internet packet comes from these
        (["2600:1f00::/32"], True),  # 2**96 global IPv6 addresses
        (["2600:1f00::/48"], False),
        (["fc00::/7", "fe80::/10", "2001:db8::/32"], False),
    ],
)
def test_rules_are_judged_by_the_public_addresses_they_admit(sources, too_much):
    rule = ssh_rule()
    rule["cidrBlocks"] = [s for s in sources if ":" not in s]
    rule["ipv6CidrBlocks"] = [s for s in sources if ":" in s]
    messages = check("no-world-ingress-to-admin-ports", security_group(rule))
    assert bool(messages) == too_much, (sources, messages)


def test_the_pack_counts_as_the_settings_do():
    """The pack runs without the program's modules: its copy of the bound and of the blocks
    that are not public is the settings' own."""
    from components.settings import addresses

    assert v.MAX_PUBLIC_SOURCES == addresses.MAX_PUBLIC_SOURCES
    for sources in (WORLD_LESS_ONE, ["52.0.0.0/16", "10.0.0.0/8"], ["2600::/20", "fc00::/7"]):
        assert v.public_addresses(sources) == addresses.public_addresses(sources), sources


def test_dev_with_ssh_open_to_the_split_world_fails_the_pack():
    """Settings refuse such sshAllowedCidrs; the pack refuses the resource too, as a changed
    program would send it."""
    resources = [as_policy_input(r) for r in run_program("dev")]
    (group,) = [r for r in resources if r.name == "network-cluster"]
    (rule,) = [r for r in group.props["ingress"] if r["fromPort"] == 22]
    rule["cidrBlocks"] = SPLIT_V4
    found = analyze(resources)
    world = [f for f in found if f[0] == "no-world-ingress-to-admin-ports"]
    assert len(world) == 1 and world[0][3] == MANDATORY, found
    assert "22 (SSH)" in world[0][2] and "0.0.0.0/0" in world[0][2], world

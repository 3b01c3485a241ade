"""The no-world-ingress policies reason about address ranges, not strings: ranges whose union
is the whole internet (IPv4 or IPv6) are the internet, in one rule, across the rules of one
security group, and across separate rule resources of one group."""

from __future__ import annotations

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


def test_split_world_across_separate_rule_resources_is_caught_by_the_stack_policy():
    spec = next(p for p in v.POLICIES if p.name == "no-world-ingress-across-rules")
    rules = [_ingress_rule("ssh-low", SPLIT_V4[0]), _ingress_rule("ssh-high", SPLIT_V4[1])]
    assert all(check("no-world-ingress-to-admin-ports", r) == [] for r in rules)
    found = spec.check(rules, spec.config())
    assert len(found) == 1, found
    urn, message = found[0]
    assert urn == rules[0].urn and "ssh-high" in message and "ssh-low" in message, message
    assert "Fix:" in message, message
    other_group = [rules[0], _ingress_rule("ssh-high", SPLIT_V4[1], group="sg-0fedcba987654321f")]
    assert spec.check(other_group, spec.config()) == [], "rules of two groups were merged"


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

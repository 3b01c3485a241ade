"""Zones are identities, list positions are not: a created VPC's subnets are keyed by zone name
(aliases keep the subnets of running stacks), each keeps the block and zone it was created with,
and machines keep the subnet they were launched in. Adding a zone at the end, or reordering
them, moves no machine and replaces no subnet; what AWS would refuse, the plan says.

Provider rules (tools/lifecycle.py): a subnet's `cidrBlock`, `availabilityZone` and `vpcId` and an
instance's or interface's `subnetId` are ForceNew (terraform-provider-aws vpc_subnet.go,
ec2_instance.go, eni.go); `ignoreChanges` keeps a kept resource's stored value.
"""

from __future__ import annotations

import pytest

from tests.helpers import graphs as shared
from tools import lifecycle, recovery
from tools.harness.graph import unwrap
from tools.harness.identity import match, read_snapshot
from tools.harness.stacks import run_program, stack_file
from tools.lifecycle import Action

SUBNET = "aws:ec2/subnet:Subnet"
INSTANCE = "aws:ec2/instance:Instance"
ZONES = ["us-east-2a", "us-east-2b"]  # Pulumi.staging.yaml


@pytest.fixture(scope="module")
def staging():
    return shared.stack_graph("staging")


def _with_zones(zones: list[str], **config):
    network = dict(stack_file("staging")["gpu-cluster:network"], availabilityZones=zones)
    return run_program("staging", config={"network": network, **config})


def _subnet_id(graph, zone: str) -> str:
    return next(r.id for r in graph.of_type(SUBNET) if r.name == f"network-{zone}")


def _moved(plan: lifecycle.Plan) -> list[str]:
    return [
        f"{c.name}: {c.action.value}"
        for c in plan.changes
        if c.action is not Action.UNCHANGED and c.type != SUBNET and "routeTable" not in c.type
    ]


def test_subnets_are_named_by_zone_and_running_stacks_keep_theirs(staging):
    assert stack_file("staging")["gpu-cluster:network"]["availabilityZones"] == ZONES
    names = sorted(r.name for r in staging.of_type(SUBNET))
    assert names == [f"network-{zone}" for zone in ZONES], names
    old = [urn for urn in read_snapshot("staging").live if "-public-" in urn and "ec2/" in urn]
    assert len(old) == 4, old  # two subnets, two route table associations, by position
    result = match(staging, old, "staging")
    assert not result.deleted, f"a running stack would lose {result.deleted}"


def test_the_default_zones_keep_their_names(staging):
    dev = run_program("dev")
    assert sorted(r.name for r in dev.of_type(SUBNET)) == ["network-public-0", "network-public-1"]


def test_a_zone_added_at_the_end_adds_its_subnet_and_moves_nothing(staging):
    plan = lifecycle.plan(staging, _with_zones([*ZONES, "us-east-2c"]))
    created = sorted((c.name, c.type) for c in plan.by_action(Action.CREATE))
    assert [name for name, _ in created] == ["network-us-east-2c"] * 2, created
    assert not plan.by_action(Action.REPLACE, Action.UPDATE, Action.DELETE, Action.RERUN)
    assert not plan.refused, plan.refused


def test_reordered_zones_change_nothing_and_each_keeps_its_block(staging):
    after = _with_zones(list(reversed(ZONES)))
    computed = {r.name: unwrap(r.inputs["cidrBlock"]) for r in after.of_type(SUBNET)}
    before = {r.name: unwrap(r.inputs["cidrBlock"]) for r in staging.of_type(SUBNET)}
    assert computed != before, "the reorder gives no zone another block: the test is vacuous"
    plan = lifecycle.plan(staging, after)
    assert plan.counts() == {"unchanged": len(after)}, lifecycle.render(plan)
    kept = recovery.state_after(plan, staging, after)
    assert {r.name: unwrap(r.inputs["cidrBlock"]) for r in kept.of_type(SUBNET)} == before


def test_a_zone_added_before_the_others_is_said_to_fail(staging):
    plan = lifecycle.plan(staging, _with_zones(["us-east-2c", *ZONES]))
    assert any("network-us-east-2c: its block" in line for line in plan.refused), plan.refused
    assert "add new zones at the end" in lifecycle.render(plan)
    assert not _moved(plan), _moved(plan)


def test_a_removed_zone_with_machines_in_it_fails_unless_they_are_replaced(staging):
    after = _with_zones(ZONES[:1])
    plan = lifecycle.plan(staging, after)
    (refusal,) = plan.refused
    assert refusal.startswith("network-us-east-2b: AWS refuses to delete"), refusal
    inside = [
        r.name
        for r in staging.of_type(INSTANCE)
        if unwrap(r.inputs["subnetId"]) == _subnet_id(staging, "us-east-2b")
    ]
    assert inside and all(name in refusal for name in inside), (inside, refusal)
    replaced = lifecycle.plan(staging, after, replace=inside)
    assert not replaced.refused, replaced.refused
    launched = recovery.state_after(replaced, staging, after)
    for name in inside:
        subnet = unwrap(launched.named(name).inputs["subnetId"])
        assert subnet == _subnet_id(staging, "us-east-2a"), f"{name} launched in {subnet}"


def test_a_subnet_id_added_to_an_existing_vpc_moves_no_machine():
    prod = run_program("prod")
    network = dict(stack_file("prod")["gpu-cluster:network"])
    network["subnetIds"] = ["subnet-0a1b2c3d4e5f60700", *network["subnetIds"]]
    plan = lifecycle.plan(prod, run_program("prod", config={"network": network}))
    assert plan.counts() == {"unchanged": len(prod)}, lifecycle.render(plan)

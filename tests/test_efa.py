"""EFA on the registered graph: interfaces per network card, placement group, the security
group that admits itself, and pools without EFA left exactly as they were.

The layout rules come from the AWS EFA user guide (efa-acc-inst-types: primary `efa` interface on
network card 0 / device 0, one interface per further card at device index 1; `efa-only` on the
P5 class); the launch-time shape from terraform-provider-aws `ec2_instance.go` (`network_interface`
ForceNew, exclusive with subnet_id / vpc_security_group_ids / associate_public_ip_address).
"""

from __future__ import annotations

from functools import cache

import pytest
import yaml

from components.catalog import CATALOG
from components.hosts.pins import EFA_INSTALLER_VERSION
from tools.harness.graph import Graph, Resource, script_params
from tools.harness.stacks import STACKS, run_program, stack_file

INSTANCE = "aws:ec2/instance:Instance"
INTERFACE = "aws:ec2/networkInterface:NetworkInterface"
PLACEMENT_GROUP = "aws:ec2/placementGroup:PlacementGroup"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
EIP = "aws:ec2/eip:Eip"

# Launch-time inputs of aws.ec2.Instance that replace a running machine when they change
# (terraform-provider-aws ec2_instance.go: ForceNew), and the update that stops one.
FORCE_NEW_OR_STOPPING = (
    "networkInterfaces",
    "placementGroup",
    "placementGroupId",
    "subnetId",
    "capacityReservationSpecification",
    "associatePublicIpAddress",
)

P5_POOL = {
    "name": "h100",
    "instanceType": "p5.48xlarge",
    "count": 2,
    "driverVersion": "580",
}


@cache
def graph(stack: str, pools_yaml: str = "") -> Graph:
    config = {"nodePools": yaml.safe_load(pools_yaml)} if pools_yaml else None
    return run_program(stack, config=config)


def with_pools(*pools: dict) -> str:
    return yaml.safe_dump(list(pools), sort_keys=True)


def interfaces_of(g: Graph, node: str) -> list[Resource]:
    return sorted(
        (r for r in g.of_type(INTERFACE) if r.name.startswith(f"{node}-efa-")),
        key=lambda r: int(r.name.rsplit("-", 1)[1]),
    )


def self_rules(group: Resource) -> list[dict]:
    """Rules of a group that admit all traffic of the group itself."""
    inputs = group.plain_inputs()
    return [
        rule
        for rule in inputs.get("ingress", []) + inputs.get("egress", [])
        if rule.get("self") and rule.get("protocol") == "-1"
    ]


def test_p5_node_has_32_efa_interfaces_and_sits_in_its_pools_placement_group():
    g = graph(
        "staging", with_pools(P5_POOL, {"name": "l4", "instanceType": "g6.xlarge", "count": 1})
    )
    groups = [r for r in g.of_type(PLACEMENT_GROUP)]
    assert [r.name for r in groups] == ["staging-gpu-h100-placement"]
    assert groups[0].plain_inputs()["strategy"] == "cluster"
    for node in ("staging-gpu-h100-0", "staging-gpu-h100-1"):
        instance = g.named(node)
        inputs = instance.plain_inputs()
        interfaces = interfaces_of(g, node)
        assert len(interfaces) == 32, f"{instance.urn}: {len(interfaces)} EFA interfaces"
        types = [i.plain_inputs()["interfaceType"] for i in interfaces]
        assert types == ["efa"] + ["efa-only"] * 31, f"{instance.urn}: {types}"
        attached = inputs["networkInterfaces"]
        assert [(a["networkCardIndex"], a["deviceIndex"]) for a in attached] == [(0, 0)] + [
            (card, 1) for card in range(1, 32)
        ], f"{instance.urn}: {attached}"
        for interface, attachment in zip(interfaces, attached, strict=True):
            assert interface.urn in instance.property_dependencies["networkInterfaces"], (
                f"{instance.urn} does not attach {interface.urn}"
            )
            assert attachment["networkInterfaceId"], f"{instance.urn}: {attachment}"
        assert groups[0].urn in instance.property_dependencies["placementGroup"], (
            f"{instance.urn} is not in {groups[0].urn}"
        )
        # Several interfaces at launch exclude the single-interface inputs (provider schema).
        for key in ("subnetId", "vpcSecurityGroupIds", "associatePublicIpAddress"):
            assert key not in inputs, f"{instance.urn}: {key} with networkInterfaces"
    # Both nodes in one subnet: a cluster placement group is in one Availability Zone.
    subnets = {
        str(i.plain_inputs()["subnetId"])
        for n in ("staging-gpu-h100-0", "staging-gpu-h100-1")
        for i in interfaces_of(g, n)
    }
    assert len(subnets) == 1, subnets


def test_efa_nodes_in_a_public_subnet_get_an_elastic_ip_on_their_primary_interface():
    # EC2 assigns no public address to an instance launched with several interfaces.
    g = graph("staging", with_pools(P5_POOL))
    for node in ("staging-gpu-h100-0", "staging-gpu-h100-1"):
        eip = g.named(f"{node}-ip")
        primary = interfaces_of(g, node)[0]
        assert eip.type == EIP
        assert primary.urn in eip.property_dependencies["networkInterface"], eip.urn


def test_g6_node_has_no_efa_interface_and_no_placement_group():
    g = graph(
        "staging", with_pools(P5_POOL, {"name": "l4", "instanceType": "g6.xlarge", "count": 1})
    )
    instance = g.named("staging-gpu-l4-0")
    inputs = instance.plain_inputs()
    assert not interfaces_of(g, "staging-gpu-l4-0")
    for key in ("networkInterfaces", "placementGroup", "capacityReservationSpecification"):
        assert key not in inputs, f"{instance.urn}: {key}"
    assert inputs["subnetId"] and inputs["associatePublicIpAddress"] is True


def test_self_referencing_rule_only_where_efa_is_used():
    g = graph(
        "staging", with_pools(P5_POOL, {"name": "l4", "instanceType": "g6.xlarge", "count": 1})
    )
    with_self = {r.name for r in g.of_type(SECURITY_GROUP) if self_rules(r)}
    assert with_self == {"staging-gpu-h100-efa"}
    efa_group = g.named("staging-gpu-h100-efa")
    assert len(self_rules(efa_group)) == 2  # ingress and egress
    for interface in interfaces_of(g, "staging-gpu-h100-0"):
        assert efa_group.urn in interface.property_dependencies["securityGroups"], interface.urn
    for stack in STACKS:
        plain = graph(stack)
        assert not [r.name for r in plain.of_type(SECURITY_GROUP) if self_rules(r)], stack


@pytest.mark.parametrize("efa", [None, False])
def test_efa_is_switchable_per_pool(efa):
    pool = {**P5_POOL, "count": 1} if efa is None else {**P5_POOL, "count": 1, "efa": efa}
    g = graph("staging", with_pools(pool))
    assert bool(interfaces_of(g, "staging-gpu-h100-0")) is (efa is None)
    assert bool(g.of_type(PLACEMENT_GROUP)) is (efa is None)


@pytest.mark.parametrize(
    ("instance_type", "types"),
    [
        ("p4d.24xlarge", ["efa"] * 4),
        ("p5en.48xlarge", ["efa"] + ["efa-only"] * 15),
        ("p6-b200.48xlarge", ["efa"] + ["efa-only"] * 7),
        ("g6e.48xlarge", None),  # EFA-capable, off unless the pool opts in
    ],
)
def test_efa_layout_per_type(instance_type, types):
    pool = {"name": "x", "instanceType": instance_type, "count": 1}
    g = graph("staging", with_pools(pool))
    found = [i.plain_inputs()["interfaceType"] for i in interfaces_of(g, "staging-gpu-x-0")]
    assert found == (types or []), instance_type
    assert len(CATALOG[instance_type].efa_layout) == CATALOG[instance_type].efa_interfaces


def test_opting_in_gives_an_efa_capable_g_type_its_interfaces():
    pool = {"name": "x", "instanceType": "g6e.48xlarge", "count": 1, "efa": True}
    g = graph("staging", with_pools(pool))
    assert [i.plain_inputs()["interfaceType"] for i in interfaces_of(g, "staging-gpu-x-0")] == [
        "efa"
    ] * 4


def test_capacity_reservation_and_capacity_block_target_the_given_reservation():
    reservation = "cr-0123456789abcdef0"
    pools = with_pools(
        {**P5_POOL, "count": 1, "capacityReservationId": reservation},
        {
            **P5_POOL,
            "name": "block",
            "count": 1,
            "market": "capacity-block",
            "capacityReservationId": reservation,
        },
    )
    g = graph("staging", pools)
    for node in ("staging-gpu-h100-0", "staging-gpu-block-0"):
        spec = g.named(node).plain_inputs()["capacityReservationSpecification"]
        assert spec["capacityReservationTarget"]["capacityReservationId"] == reservation, node
    market = g.named("staging-gpu-block-0").plain_inputs()["instanceMarketOptions"]
    assert market == {"marketType": "capacity-block"}


def test_a_reservation_set_later_never_stops_a_running_machine():
    """terraform-provider-aws stops an instance to change its capacity reservation
    (ec2_instance.go, resourceInstanceUpdate): the input applies at launch only."""
    reservation = "cr-0123456789abcdef0"
    g = graph("staging", with_pools({**P5_POOL, "count": 1, "capacityReservationId": reservation}))
    instance = g.named("staging-gpu-h100-0")
    assert "capacityReservationSpecification" in instance.ignore_changes, instance.urn


@pytest.mark.parametrize("stack", STACKS)
def test_running_machines_of_the_stack_files_get_no_launch_time_input(stack):
    """No instance of a stack file gets networkInterfaces, a placement group or a capacity
    reservation: each would replace (or stop) a running machine."""
    pools = {p["name"]: p for p in stack_file(stack)["gpu-cluster:nodePools"]}
    g = graph(stack)
    for instance in g.of_type(INSTANCE):
        inputs = instance.plain_inputs()
        for key in ("networkInterfaces", "placementGroup", "capacityReservationSpecification"):
            assert key not in inputs, f"{instance.urn}: {key}"
    assert not g.of_type(INTERFACE) and not g.of_type(PLACEMENT_GROUP), stack
    assert pools  # the stack file has pools to check


@pytest.mark.parametrize(
    ("pool", "key", "says"),
    [
        ({"instanceType": "g6.xlarge", "efa": True}, "nodePools[0].efa", "no EFA interface"),
        ({"market": "capacity-block"}, "nodePools[0].capacityReservationId", "Capacity Block"),
        (
            {"market": "spot", "capacityReservationId": "cr-0123456789abcdef0"},
            "nodePools[0].capacityReservationId",
            "unset with market: spot",
        ),
        ({"capacityReservationId": "cr-12"}, "nodePools[0].capacityReservationId", "cr-"),
    ],
)
def test_bad_efa_and_reservation_config_names_the_key(pool, key, says):
    from components.settings.load import ConfigError
    from tools.harness.stacks import load_stack_settings

    pools = [{**P5_POOL, "count": 1, **pool}]
    with pytest.raises(ConfigError) as raised:
        load_stack_settings("staging", config={"nodePools": pools})
    message = str(raised.value)
    assert f"gpu-cluster:{key}" in message and says in message, message


def test_efa_nodes_install_the_efa_software_after_kube_tools_and_before_the_join():
    g = graph(
        "staging", with_pools(P5_POOL, {"name": "l4", "instanceType": "g6.xlarge", "count": 1})
    )
    for node in ("staging-gpu-h100-0", "staging-gpu-h100-1"):
        efa = g.named(f"{node}-efa")
        params = script_params(efa)
        assert params["EFA_INTERFACES"] == "32", efa.urn
        assert params["EFA_INSTALLER_VERSION"] == EFA_INSTALLER_VERSION, efa.urn
        assert g.named(f"{node}-kube-tools").urn in g.direct_dependencies(efa), efa.urn
        token = g.named(f"{node}-join-token")
        assert efa.urn in g.direct_dependencies(token), token.urn
    assert not g.find(lambda r: r.name == "staging-gpu-l4-0-efa")


def test_a_new_efa_release_rolls_efa_nodes_only():
    """The EFA step is disruptive: its pin is part of the roll's change digest on EFA nodes
    (a new release drains them first), and absent from every other node's digest."""
    mixed = with_pools(P5_POOL, {"name": "l4", "instanceType": "g6.xlarge", "count": 1})
    without = with_pools(
        {**P5_POOL, "efa": False}, {"name": "l4", "instanceType": "g6.xlarge", "count": 1}
    )

    def change(g: Graph, node: str) -> str:
        return g.named(f"{node}-in-service").plain_inputs()["environment"]["CHANGE"]

    with_efa, no_efa = graph("staging", mixed), graph("staging", without)
    assert change(with_efa, "staging-gpu-h100-0") != change(no_efa, "staging-gpu-h100-0")
    assert change(with_efa, "staging-gpu-l4-0") == change(no_efa, "staging-gpu-l4-0")

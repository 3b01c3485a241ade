"""A boot key per launch (issue 40, finding 3): the private half of a machine's boot key sits in
its user data, which anyone with ec2:DescribeInstanceAttribute reads, so no launch may boot with
a key an earlier launch exposed. A replacement the program decides replaces the key with the
machine (the key's `replacement_trigger` is the instance's replacing inputs); `pulumi up
--replace <machine>-host-key` replaces both (the instance's `replace_with`); a `--replace` of the
instance alone, or a machine created again after a refresh, is flagged by tools.recovery with
the `--replace` that fixes it. Planned with the engine's rules (tools/lifecycle.py:
step_generator.go `shouldTriggerReplace`, ReplaceWith in `diff`)."""

from __future__ import annotations

import pytest

from components.aws import machines
from tools import lifecycle, recovery
from tools.harness.graph import Graph, unwrap
from tools.harness.stacks import STACKS, run_program, stack_file

INSTANCE = "aws:ec2/instance:Instance"
KEY = "tls:index/privateKey:PrivateKey"
REPLACE, CREATE, UNCHANGED = (
    lifecycle.Action.REPLACE,
    lifecycle.Action.CREATE,
    lifecycle.Action.UNCHANGED,
)


@pytest.fixture(scope="module", params=STACKS)
def stack_graph(request) -> tuple[str, Graph]:
    return request.param, run_program(request.param)


def _replacing(instance) -> dict:
    """The inputs of a registered instance whose change replaces it, by the planner's rules:
    the provider's ForceNew inputs and replaceOnChanges, less what it ignores."""
    forcing = set(lifecycle.FORCE_NEW[INSTANCE]) | set(instance.replace_on_changes)
    return {
        name: value
        for name, value in unwrap(instance.inputs).items()
        if name in forcing and name not in instance.ignore_changes
    }


def test_every_boot_key_is_replaced_with_the_inputs_that_replace_its_machine(stack_graph):
    stack, graph = stack_graph
    instances = graph.of_type(INSTANCE)
    assert instances, stack
    for instance in instances:
        key = graph.named(f"{instance.name}-host-key")
        trigger = unwrap(key.replacement_trigger)
        replacing = _replacing(instance)
        # The planner's ForceNew set less what machines.py adds with its own source.
        extra = set(trigger) - set(replacing)
        assert extra <= machines.FORCE_NEW_INPUTS - lifecycle.FORCE_NEW[INSTANCE], extra
        assert {k: trigger[k] for k in replacing} == replacing, key.urn
        assert instance.replace_with == [key.urn], instance.urn


def test_the_inputs_the_provider_forces_a_new_machine_for_are_the_planners():
    """The top-level ones (a root volume's encryption, fixed at True here, is nested)."""
    top_level = {name for name in lifecycle.FORCE_NEW[INSTANCE] if "." not in name}
    assert top_level <= machines.FORCE_NEW_INPUTS


def _first_node(graph: Graph) -> str:
    return lifecycle.node_names(graph)[0]


def test_a_new_instance_type_replaces_the_machine_and_its_boot_key():
    before = run_program("staging")
    pools = [dict(p) for p in stack_file("staging")["gpu-cluster:nodePools"]]
    pools[0]["instanceType"] = "g6.xlarge"
    after = run_program("staging", config={"nodePools": pools})
    plan = lifecycle.plan(before, after)
    node = next(n for n in lifecycle.node_names(after) if f"-{pools[0]['name']}-" in n)
    assert plan.named(node).action is REPLACE, lifecycle.render(plan)
    assert plan.named(f"{node}-host-key").action is REPLACE, plan.named(f"{node}-host-key")
    assert not recovery.exposed_boot_keys(plan)
    # Machines of the other pool keep their keys.
    other = next(n for n in lifecycle.node_names(after) if f"-{pools[0]['name']}-" not in n)
    assert plan.named(f"{other}-host-key").action is UNCHANGED


def test_replacing_the_boot_key_replaces_its_machine():
    graph = run_program("staging")
    node = _first_node(graph)
    plan = lifecycle.plan(graph, graph, replace=[f"{node}-host-key"])
    assert plan.named(node).action is REPLACE and "replaceWith" in plan.named(node).reason
    assert not recovery.exposed_boot_keys(plan)


def test_a_machine_replaced_or_recovered_without_its_key_is_flagged_with_the_fix():
    graph = run_program("staging")
    node = _first_node(graph)
    key_urn = graph.named(f"{node}-host-key").urn
    replaced = lifecycle.plan(graph, graph, replace=[node])
    recovered = lifecycle.plan(recovery.refreshed(graph, [node]), graph)
    for plan in (replaced, recovered):
        assert plan.named(node).action in (REPLACE, CREATE)
        (message,) = recovery.exposed_boot_keys(plan)
        assert node in message and f"--replace '{key_urn}'" in message, message
    fixed = lifecycle.plan(recovery.refreshed(graph, [node]), graph, replace=[key_urn])
    assert fixed.named(node).action is CREATE
    assert not recovery.exposed_boot_keys(fixed)


def test_the_upgrade_that_adds_the_triggers_replaces_no_key():
    """The engine replaces nothing for a trigger that was null (`shouldTriggerReplace`): the
    first `up` after the upgrade keeps every key and machine."""
    after = run_program("prod")
    before = Graph([_without_trigger(r) for r in after], after.outputs)
    plan = lifecycle.plan(before, after)
    for change in plan.changes:
        if change.type in (KEY, INSTANCE):
            assert change.action is UNCHANGED, change


def _without_trigger(resource):
    from copy import copy

    old = copy(resource)
    if resource.type == KEY:
        old.replacement_trigger = None
    if resource.type == INSTANCE:
        old.replace_with = []
    return old

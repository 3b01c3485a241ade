"""What the engine receives of the node hooks, on the real registered graph (the SDK's mock
monitor records a hook's registration and a resource's binding, and never calls a hook): each
hook a delete may need is registered under its fixed name on every run, with zero nodes too, or a
delete of a node the state still holds would fail ("hook ... was not registered", pulumi
deployment.go `RunHooks`); no hook runs in a preview (`on_dry_run` off: RunHooks skips it)."""

from __future__ import annotations

import pytest

from components.hosts import steps
from components.kube import node_guard, node_hooks
from tools import lifecycle
from tools.harness.graph import unwrap
from tools.harness.stacks import STACKS, run_program, stack_file

FIXED = {node_hooks.JOINS, node_hooks.LEAVES, node_hooks.IN_SERVICE}


@pytest.mark.parametrize("stack", STACKS)
def test_the_node_hooks_are_registered_with_zero_nodes(stack):
    pools = [dict(pool, count=0) for pool in stack_file(stack)["gpu-cluster:nodePools"]]
    graph = run_program(stack, config={"nodePools": pools})
    assert not lifecycle.node_names(graph), "the test needs a stack without nodes"
    assert set(graph.hooks) >= FIXED, graph.hooks


@pytest.mark.parametrize("stack", STACKS)
def test_each_node_binds_the_hooks_its_rows_name(stack):
    graph = run_program(stack)
    assert len(graph.hooks) == len(set(graph.hooks)), f"a hook name twice: {graph.hooks}"
    for node in lifecycle.node_names(graph):
        assert f"{node}-take-out" in graph.hooks, node
        for row in steps.NODE_ROWS:
            name = row.resource_name(node)
            if name not in {r.name for r in graph}:
                continue
            resource = graph.named(name)
            names = {hook for hooks in resource.hooks.values() for hook in hooks}
            assert names <= set(graph.hooks), f"{resource.urn}: binds unregistered {names}"
            assert bool(resource.hooks) == bool(row.hooks), f"{resource.urn}: {resource.hooks}"


def test_no_hook_runs_in_a_preview():
    """pulumi `RunHooks` skips a hook registered without `on_dry_run` in a dry run: a preview
    drains and writes nothing. The SDK sends the option with the registration."""
    graph = run_program("dev")
    assert graph.hooks and not graph.dry_run_hooks, graph.dry_run_hooks


@pytest.mark.parametrize("stack", STACKS)
def test_the_node_guard_holds_the_control_planes_label_keys_for_this_stacks_nodes(stack):
    graph = run_program(stack)
    (policy,) = graph.of_type(
        "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"
    )
    spec = unwrap(policy.inputs)["spec"]
    pools = stack_file(stack)["gpu-cluster:nodePools"]
    cluster = stack_file(stack)["gpu-cluster:clusterName"]
    (condition,) = spec["matchConditions"]
    for pool in pools:
        assert f'"system:node:{cluster}-{pool["name"]}-"' in condition["expression"], condition
    (managed,) = spec["variables"]
    for key in ("gpu-cluster.io/pool", "gpu-cluster.io/instance-id"):
        assert f'"{key}"' in managed["expression"], managed
    for pool in pools:
        for key in pool.get("labels", {}):
            assert f'"{key}"' in managed["expression"], managed
    for key in ("nvidia.com/gpu.present", "gpu-cluster.io/efa"):
        assert f'"{key}"' not in managed["expression"], "a label the kubelet registers with"
    operations = spec["matchConstraints"]["resourceRules"][0]["operations"]
    assert set(operations) == {"CREATE", "UPDATE", "DELETE"}, operations
    (binding,) = graph.of_type(
        "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding"
    )
    assert unwrap(binding.inputs)["spec"] == {
        "policyName": unwrap(policy.inputs)["metadata"]["name"],
        "validationActions": ["Deny"],
    }
    # Every node waits for it before it registers.
    for node in lifecycle.node_names(graph):
        assert graph.depends_on(graph.named(f"{node}-join"), binding), node


def test_the_guards_rules_read_what_they_must():
    """Each rule as the policy states it (CEL, evaluated by the API server: the expressions are
    checked against a real kube-apiserver where one runs; here, their shape)."""
    spec = node_guard.policy_spec(["c-a-"], ["gpu-cluster.io/pool", "team"])
    rules = [v["expression"] for v in spec["validations"]]
    assert 't.key == "gpu-cluster.io/unproven" && t.effect == "NoSchedule"' in rules[0]
    assert rules[0].startswith("request.operation != 'CREATE' ||")
    assert rules[1].startswith("request.operation != 'CREATE' ||")
    assert rules[2].startswith("request.operation != 'UPDATE' ||")
    assert rules[3] == "request.operation != 'DELETE'"

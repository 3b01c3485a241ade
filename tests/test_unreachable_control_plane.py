"""An unreachable control plane has one switch, `controlPlane.unreachable`: with it no delete
dials the control plane, so the GPU machines of a cluster whose control plane is gone can still
be destroyed, and an `up` that sets it dials nothing.

A node's drain on delete is a hook the program runs (pulumi deployment.go `RunHooks` calls the
program's callback by the name the state stored): it reads the switch from the program that
runs, so the `up` (or `destroy --run-program`) that sets it already drains nothing. The
Kubernetes provider's `deleteUnreachable` is an input of the provider, which an `up` or a
`destroy --run-program` registers before any delete.
"""

from __future__ import annotations

import logging

import pytest

from tests.helpers import graphs as shared
from tools import lifecycle, recovery
from tools.harness.graph import Graph, unwrap
from tools.harness.stacks import load_stack_settings, run_program, stack_file
from tools.lifecycle import Action

COMMAND = "command:remote:Command"
PROVIDER = "pulumi:providers:kubernetes"


def _switched(stack: str) -> Graph:
    control_plane = dict(stack_file(stack)["gpu-cluster:controlPlane"], unreachable=True)
    return run_program(stack, config={"controlPlane": control_plane})


@pytest.fixture(scope="module", params=["dev", "prod"])
def graphs(request):
    """(stack, before: the stack as deployed, after: the same stack with the switch on)."""
    return request.param, shared.stack_graph(request.param), _switched(request.param)


def test_the_up_that_sets_the_switch_dials_nothing(graphs):
    _, before, after = graphs
    plan = lifecycle.plan(before, after)
    changed = [c for c in plan.changes if c.action is not Action.UNCHANGED]
    assert [(c.type, c.action, c.changed) for c in changed] == [
        (PROVIDER, Action.UPDATE, ("deleteUnreachable",))
    ], lifecycle.render(plan)


def test_no_step_stores_a_delete_that_dials_the_control_plane(graphs):
    stack, _, after = graphs
    hooked = [r.name for r in after.of_type(COMMAND) if unwrap(r.inputs.get("delete"))]
    assert hooked == [], f"{stack}: {hooked}"
    (provider,) = after.of_type(PROVIDER)
    assert unwrap(provider.inputs["deleteUnreachable"]) in (True, "true"), provider.inputs


def _scaled_to_zero(stack: str, *, unreachable: bool) -> Graph:
    pools = [dict(pool, count=0) for pool in stack_file(stack)["gpu-cluster:nodePools"]]
    control_plane = dict(stack_file(stack)["gpu-cluster:controlPlane"], unreachable=unreachable)
    return run_program(stack, config={"nodePools": pools, "controlPlane": control_plane})


def test_the_up_that_sets_the_switch_and_scales_down_drains_nothing(graphs):
    stack, before, _ = graphs
    gone = _scaled_to_zero(stack, unreachable=True)
    plan = lifecycle.plan(before, gone)
    runs = recovery.hook_runs(plan, before, gone)
    assert runs and all(run.idle for run in runs), runs
    assert not any(impact.drained for impact in plan.nodes.values()), lifecycle.render(plan)
    # A destroy with the switch in the program (`pulumi destroy --run-program`) likewise.
    destroyed = recovery.destroyed(before)
    runs = recovery.hook_runs(destroyed, before, Graph([], {}), unreachable=True)
    assert runs and all(run.idle for run in runs), runs


def test_without_the_switch_a_scale_down_drains_every_node_through_the_api(graphs):
    stack, before, _ = graphs
    gone = _scaled_to_zero(stack, unreachable=False)
    drained = recovery.hook_runs(lifecycle.plan(before, gone), before, gone)
    nodes = lifecycle.node_names(before)
    assert sorted(run.params["NODE_NAME"] for run in drained) == sorted(nodes), drained
    assert {run.credential for run in drained} == {recovery.Credential.LIVE_API}, drained
    assert not any(run.idle or run.fails for run in drained), drained


def test_the_switch_is_said_loudly(caplog):
    with caplog.at_level(logging.WARNING):
        _switched("prod")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("NO NODE IS DRAINED" in w and "10.20.1.10" in w for w in warnings), warnings


def test_the_switch_off_changes_nothing_in_a_running_stack():
    assert load_stack_settings("dev").control_plane.unreachable is False
    before = run_program("dev")
    control_plane = dict(stack_file("dev")["gpu-cluster:controlPlane"], unreachable=False)
    plan = lifecycle.plan(before, run_program("dev", config={"controlPlane": control_plane}))
    assert plan.counts() == {"unchanged": len(before)}, lifecycle.render(plan)


def test_a_switch_that_is_not_a_boolean_is_refused_naming_it():
    from components.settings.load import ConfigError

    control_plane = dict(stack_file("dev")["gpu-cluster:controlPlane"], unreachable="maybe")
    with pytest.raises(ConfigError) as error:
        load_stack_settings("dev", config={"controlPlane": control_plane})
    assert "gpu-cluster:controlPlane.unreachable" in str(error.value), error.value

"""The step table (components/steps.py) is what the program runs: every row names a real script,
the registered graph has exactly the table's steps per node and control plane, in table order,
each with the row's script, bound and delete hook."""

from __future__ import annotations

import pytest

from components import steps
from components.host_scripts import available_scripts
from tools.harness.graph import script_params, unwrap
from tools.harness.stacks import run_program

STACKS = ("dev", "staging", "prod")


def script_of(resource) -> str:
    stdin = unwrap(resource.inputs["stdin"])
    return stdin.splitlines()[1].split(",", 1)[0].removeprefix("# ")


def test_every_row_names_a_script_that_exists():
    scripts = set(available_scripts())
    for step in steps.ALL_STEPS:
        assert step.script in scripts, f"{step.suffix}: no components/scripts/{step.script}"
        if step.delete_script is not None:
            assert step.delete_script in scripts, f"{step.suffix}: {step.delete_script} missing"
        assert step.timeout_seconds > 0, f"{step.suffix}: unbounded"


def test_only_nouveau_driver_runtime_and_kubelet_steps_disrupt_gpu_work():
    """nouveau counts: for a new driver branch it may install a kernel with a signed module and
    reboot the host, so on a joined node it must run inside the roll (after the drain)."""
    assert [s.suffix for s in steps.disruptive_steps()] == [
        "nouveau",
        "driver",
        "runtime",
        "kube-upgrade",
        "kube-tools",
    ]
    assert all(s.runs_on is steps.Where.NODE for s in steps.disruptive_steps())


def test_only_the_join_is_about_the_cluster_it_joins():
    join = steps.node_step("join")
    assert join.identity == (steps.Identity.HOST, steps.Identity.ENDPOINT, steps.Identity.CA_HASH)
    with pytest.raises(KeyError, match="known: wait-ready"):
        steps.node_step("no-such-step")


@pytest.mark.parametrize("stack", STACKS)
def test_registered_steps_are_the_tables_rows(stack):
    graph = run_program(stack)
    nodes = [name for pool in unwrap(graph.outputs["nodePools"]).values() for name in pool]
    assert nodes, f"{stack}: no nodes"
    for node in nodes:
        for step in steps.NODE_STEPS:
            resource = graph.named(step.resource_name(node))
            assert script_of(resource) == step.script, f"{resource.urn}: {script_of(resource)}"
            delete = unwrap(resource.inputs.get("delete")) or ""
            if step.delete_script is None:
                assert not delete, f"{resource.urn}: delete hook not in the table"
            else:
                assert f"# {step.delete_script}," in delete, f"{resource.urn}: {delete[:200]}"
            assert resource.custom_timeouts.get("create"), f"{resource.urn}: no bound"
        assert script_params(graph.named(steps.DRIVER.resource_name(node)))["DRIVER_BRANCH"]

"""The step table (components/hosts/steps.py) is what the program runs: every row names a real
script, the registered graph has exactly the table's steps per node and control plane, in table
order, each with the row's script, bound and delete hook."""

from __future__ import annotations

import dataclasses
import re
import sys

import pytest

from components.hosts import steps
from components.hosts.rendering import available_scripts
from tools import step_table
from tools.harness.graph import program_script, script_params, unwrap
from tools.harness.stacks import ROOT, run_program

sys.path.insert(0, str(ROOT / "policies"))
from gpu_cluster_policies import chain as pack_chain

STACKS = ("dev", "staging", "prod")


def script_of(resource) -> str:
    """The script a step runs: the program its stdin sources by digest."""
    return program_script(unwrap(resource.inputs["stdin"]))


def test_every_row_names_a_script_that_exists():
    scripts = set(available_scripts())
    for step in steps.ALL_STEPS:
        if step.runs_on is steps.Where.KUBERNETES or step is steps.SCRIPTS:
            assert step.script is None, f"{step.suffix}: runs no script (an object, a copy)"
            continue
        assert step.script in scripts, f"{step.suffix}: no components/hosts/scripts/{step.script}"
        assert step.timeout_seconds > 0, f"{step.suffix}: unbounded"


def test_every_row_follows_rows_before_it():
    seen = {steps.INSTANCE}
    for row in (*steps.FIRST_CONTACT, *steps.NODE_ROWS):
        assert row.after, f"{row.suffix}: follows nothing"
        unknown = [name for name in row.after if name not in seen]
        assert not unknown, f"{row.suffix}: follows {unknown}, not rows before it"
        seen.add(row.suffix)


def test_a_row_that_is_not_registered_is_skipped_to_what_it_follows():
    stock = steps.node_rows(efa=False, validation=True)
    assert steps.follows(steps.JOIN_TOKEN, stock) == ("kube-tools",)
    with_efa = steps.node_rows(efa=True, validation=True)
    assert steps.follows(steps.JOIN_TOKEN, with_efa) == ("efa",)
    unvalidated = steps.node_rows(efa=False, validation=False)
    assert steps.follows(steps.IN_SERVICE, unvalidated) == ("join",)


@pytest.mark.parametrize("stack", STACKS)
def test_each_node_waits_for_the_rows_the_table_says(stack):
    """The registered graph is the table: each row's resource depends on the resources of the
    rows it follows (the instance, for the first)."""
    graph = run_program(stack)
    nodes = [
        (pool, name) for pool, names in unwrap(graph.outputs["nodePools"]).items() for name in names
    ]
    for _, node in nodes:
        efa = any(r.name == steps.EFA.resource_name(node) for r in graph)
        registered = steps.node_rows(efa=efa, validation=True)
        for row in registered:
            resource = graph.named(row.resource_name(node))
            for name in steps.follows(row, registered):
                before = graph.named(node if name == steps.INSTANCE else f"{node}-{name}")
                assert before.urn in graph.direct_dependencies(resource), (
                    f"{resource.urn}: does not wait for {before.name} (the table's `after`)"
                )


def test_a_new_row_is_a_new_step_of_every_node(monkeypatch):
    """A new step is a new row plus its script: the nodes run it where the table puts it."""
    check = steps.Step("driver-check", "wait-ready.sh", steps.Where.NODE, 60, after=("driver",))
    runtime = dataclasses.replace(steps.RUNTIME, after=(check.suffix,))
    rows = list(steps.NODE_ROWS)
    rows[rows.index(steps.RUNTIME)] = runtime
    rows.insert(rows.index(runtime), check)
    monkeypatch.setattr(steps, "NODE_ROWS", tuple(rows))
    graph = run_program("dev")
    node = unwrap(graph.outputs["nodePools"])["a10g"][0]
    added = graph.named(f"{node}-driver-check")
    assert graph.depends_on(added, graph.named(f"{node}-driver"))
    assert graph.depends_on(graph.named(f"{node}-runtime"), added)


def test_the_generated_copies_are_the_tables():
    assert step_table.stale() == [], "run: python -m tools.step_table --write"


def test_the_pack_joins_after_the_install_steps_the_table_has():
    assert set(pack_chain.JOIN_FOLLOWS) >= {steps.DRIVER.suffix, steps.RUNTIME.suffix}
    assert steps.JOIN.suffix == pack_chain.JOIN


def test_only_nouveau_driver_runtime_and_kubelet_steps_disrupt_gpu_work():
    """nouveau counts: for a new driver branch it may install a kernel with a signed module and
    reboot the host, so on a joined node it must run inside the roll (after the drain)."""
    assert [s.suffix for s in steps.disruptive_steps()] == [
        "nouveau",
        "driver",
        "runtime",
        # It also moves a joined node's kubelet to a new minor (what kube-upgrade did).
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
            if step.script is None:  # through the Kubernetes API (the join token: its hook)
                assert step.runs_on is steps.Where.KUBERNETES, step
                assert resource.type.startswith("kubernetes:") or resource.hooks, (
                    f"{resource.urn}: a host step"
                )
                continue
            assert script_of(resource) == step.script, f"{resource.urn}: {script_of(resource)}"
            assert not unwrap(resource.inputs.get("delete")), f"{resource.urn}: dials on delete"
            assert resource.custom_timeouts.get("create"), f"{resource.urn}: no bound"
            kinds = {
                steps.Hook.TAKE_OUT: ["before_update"],
                steps.Hook.JOINS: ["before_create"],
                steps.Hook.LEAVES: ["before_delete"],
            }
            bound = sorted(kind for hook in step.hooks for kind in kinds[hook])
            assert sorted(resource.hooks) == bound, f"{resource.urn}: hooks {resource.hooks}"
        assert script_params(graph.named(steps.DRIVER.resource_name(node)))["DRIVER_BRANCH"]


README = (ROOT / "README.md").read_text()


def _readme_chain_block() -> str:
    start = README.index("```\nGPU EC2 instance")
    return README[start : README.index("```", start + 3)]


def test_readme_chain_is_the_tables_first_up_chain():
    """The README's chain is written out for readers; the table is what runs: they agree, in
    order, the node's put in service last."""
    written = re.findall(r"<node>-([a-z-]+)", _readme_chain_block())
    expected = [
        *(s.suffix for s in steps.node_steps_in_first_up()),
        *steps.validation_chain(),
        steps.IN_SERVICE.suffix,
    ]
    assert written == expected, f"README.md chain {written} != step table {expected}"


def test_readme_architecture_lists_node_steps_in_table_order():
    line = next(line for line in README.splitlines() if "GpuNode x count" in line)
    label = line.split('node["', 1)[1].split('"]', 1)[0].replace("<br/>", " ")
    written = re.findall(r"-> ([a-z-]+)", label)
    chain = steps.node_chain()
    assert written and all(name in chain for name in written), f"README.md: {written}"
    assert [chain.index(name) for name in written] == sorted(
        chain.index(name) for name in written
    ), f"README.md architecture: {written} not in the table's order {chain}"


def test_the_readme_check_sees_a_reordered_chain():
    swapped = (
        _readme_chain_block()
        .replace("<node>-driver", "<node>-swap")
        .replace("<node>-runtime", "<node>-driver")
        .replace("<node>-swap", "<node>-runtime")
    )
    expected = [
        *(s.suffix for s in steps.node_steps_in_first_up()),
        *steps.validation_chain(),
        steps.IN_SERVICE.suffix,
    ]
    assert re.findall(r"<node>-([a-z-]+)", swapped) != expected


def test_every_step_is_bounded_on_its_host():
    """The bound is `timeout -k 30 <seconds>` on the host: 0 would disable timeout(1) (coreutils:
    "a duration of 0 disables the associated timeout"), and a bound under a minute cannot hold
    even an apt call. The engine's own timeout stays above it (dial margin)."""
    for step in steps.ALL_STEPS:
        assert 60 <= step.timeout_seconds <= 60 * 60, f"{step.suffix}: {step.timeout_seconds}s"


def test_no_step_stores_an_undo_that_dials():
    """pulumi-command's `Delete` runs the stored `delete` over the stored connection
    (remote/commandController.go): a key rotated since, a host gone, and the stack is stuck. So
    no Command stores one; what a node's removal undoes in the cluster, its hooks do through the
    API (components/kube/node_hooks.py)."""
    for stack in STACKS:
        graph = run_program(stack)
        commands = graph.of_type("command:remote:Command") + graph.of_type("command:local:Command")
        undoing = [r.name for r in commands if unwrap(r.inputs).get("delete")]
        assert not undoing, f"{stack}: {undoing}"

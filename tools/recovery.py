"""What the engine does around an unplanned change: a refresh that found a machine gone
(`refreshed`), a forced replacement (`lifecycle.plan(..., replace=...)`), the order in which the
stored delete hooks of an `up` run against its creates (`hook_runs`), the state an `up` leaves
for the next one (`state_after`: a replacement launches with the program's inputs, a kept
resource keeps its ignored ones), and a destroy (`destroyed`).

Why, with the engine's and the providers' source:
docs/decisions/029-a-lost-machine-is-recovered-without-harm.md and
docs/decisions/030-a-replacement-launches-with-the-programs-inputs.md
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass

from tools import lifecycle
from tools.harness.graph import Graph, Resource, program_params, unwrap
from tools.lifecycle import Action, Plan, property_path


def refreshed(state: Graph, lost: Iterable[str]) -> Graph:
    """`state` after `pulumi refresh` read the resources named `lost` (names or URNs) as gone.

    terraform-provider-aws reads a terminated instance as not found and clears its id
    (ec2_instance.go `resourceInstanceRead`: `tfresource.NotFound(err)` -> `d.SetId("")`), and
    the engine drops a resource whose refresh returns a blank id (pulumi step.go
    `RefreshStep.Apply`: "If the ID is blank treat this as a delete"). Everything else keeps its
    stored inputs: the next `up` diffs against them."""
    gone = set(lost)
    missing = gone - {r.name for r in state} - {r.urn for r in state}
    if missing:
        raise KeyError(f"no resources named {sorted(missing)} in the state")
    kept = [r for r in state if r.name not in gone and r.urn not in gone]
    return Graph(kept, state.outputs)


@dataclass(frozen=True)
class HookRun:
    """A stored delete hook an `up` runs: the step whose state holds it, the program it runs
    and the parameters it was stored with, and what waits for it (`before`: resources created
    or deleted only after it ran; empty when it runs at the end, after every create)."""

    name: str
    program: str
    params: dict[str, str]
    before: tuple[str, ...]


def hook_runs(plan: Plan, before: Graph, after: Graph) -> list[HookRun]:
    """Every stored delete hook the `up` planned in `plan` runs, in no particular order, each
    with what waits for it.

    The engine runs a Command's delete from its stored state (pulumi step.go `DeleteStep.Apply`
    sends `s.old.Inputs`; pulumi-command commandController.go `Delete` runs `props.Delete`), and
    skips it when its stored `deletedWith` resource is deleted by the same operation
    (`isDeletedWith`). A delete-before-replace resource is deleted before its replacement is
    created, so before everything that waits for the replacement; its dependents that are
    replaced too are deleted before it (step_generator.go `calculateDependentReplacements`:
    "Deletions must occur in reverse dependency order"). Any other delete runs after the
    creates and updates ("the delete step is generated later on, after all creates/updates
    finish")."""
    taken = {c.urn: c for c in plan.changes}
    ended = {c.urn for c in plan.changes if c.action in (Action.REPLACE, Action.DELETE)}
    old_of = _old_urns(plan, before, after)
    ended_old = {old_of.get(urn, urn) for urn in ended}
    dependents = _dependents(after)
    order = {urn: index for index, urn in enumerate(after.topological())}
    runs = []
    for change in plan.changes:
        if change.action not in (Action.REPLACE, Action.DELETE):
            continue
        old = before.by_urn.get(old_of.get(change.urn, change.urn))
        if old is None:
            continue
        hook = unwrap(old.inputs.get("delete"))
        if not isinstance(hook, str) or not hook:
            continue
        if old.deleted_with is not None and old.deleted_with in ended_old:
            continue
        waiting: list[str] = []
        new = after.by_urn.get(change.urn)
        if change.action is Action.REPLACE and new is not None and new.delete_before_replace:
            waiting.append(new.name)
            waiting += [
                after.by_urn[urn].name
                for urn in sorted(dependents.get(change.urn, ()), key=order.__getitem__)
                if taken.get(urn) is not None
                and taken[urn].action in (Action.CREATE, Action.REPLACE)
            ]
        # A delete-before-replace resource this step depends on is deleted after it.
        for urn in before.ancestors(old):
            ancestor = next((c for c in plan.changes if old_of.get(c.urn, c.urn) == urn), None)
            if ancestor is None or ancestor.action is not Action.REPLACE:
                continue
            replacement = after.by_urn.get(ancestor.urn)
            if replacement is not None and replacement.delete_before_replace:
                waiting.append(replacement.name)
        runs.append(
            HookRun(
                name=change.name,
                program=_program_of(hook),
                params=program_params(hook),
                before=tuple(dict.fromkeys(waiting)),
            )
        )
    return runs


def _program_of(hook: str) -> str:
    """The script a stored hook runs: named on its program's first line."""
    body = hook.split("<<'GPU_CLUSTER_SCRIPT'\n", 1)[-1]
    first = body.lstrip("# ").split(",", 1)[0].split("\n", 1)[0]
    return first.strip()


def _old_urns(plan: Plan, before: Graph, after: Graph) -> dict[str, str]:
    """New URN -> the old URN it continues (aliases), as lifecycle.plan matched them."""
    from tools.harness import identity

    stack = lifecycle._stack_of(after) or lifecycle._stack_of(before)
    return identity.match(after, [r.urn for r in before], stack).taken_over


def _dependents(graph: Graph) -> dict[str, set[str]]:
    """URN -> the URNs that wait for it, directly or not."""
    found: dict[str, set[str]] = {}
    for resource in graph:
        for ancestor in graph.ancestors(resource):
            found.setdefault(ancestor, set()).add(resource.urn)
    return found


def state_after(plan: Plan, before: Graph, after: Graph) -> Graph:
    """The state the planned `up` leaves, to plan the next one against.

    A created or replaced resource is stored with the inputs the program registered: on a
    replacement the engine checks the program's inputs again, without `ignoreChanges`
    (step_generator.go `continueStepsFromDiff`: "If we are going to perform a replacement, we
    need to recompute the default values", `prov.Check` of `goal.Properties`; a targeted
    `--replace` and a resource a refresh dropped are checked the same way in
    `continueStepsFromImport`). A kept resource keeps the stored value of every input it
    ignores (`processIgnoreChanges`), with the options of the new registration."""
    old_of = _old_urns(plan, before, after)
    by_urn = {c.urn: c for c in plan.changes}
    kept: list[Resource] = []
    for resource in after:
        change = by_urn[resource.urn]
        stored = copy.copy(resource)
        old = before.by_urn.get(old_of.get(resource.urn, ""))
        if change.action not in (Action.CREATE, Action.REPLACE) and old is not None:
            inputs = resource.inputs
            for path in resource.ignore_changes:
                inputs = lifecycle._with_old_value(inputs, old.inputs, property_path(path))
            stored.inputs = inputs
            stored.outputs = old.outputs or resource.outputs
        kept.append(stored)
    return Graph(kept, after.outputs)


def destroyed(state: Graph) -> Plan:
    """`pulumi destroy` of `state`: every resource deleted, with its stored inputs and options
    (the program does not run)."""
    return lifecycle.plan(state, Graph([], {}))


# ---------------------------------------------------------------- boot keys of new launches


HOST_KEY_TYPE = "tls:index/privateKey:PrivateKey"


def exposed_boot_keys(plan: Plan) -> list[str]:
    """Machines the planned `up` launches (created, or replaced) with a boot key it keeps: the
    key an earlier launch of that machine exposed in its user data (readable with
    ec2:DescribeInstanceAttribute). A replacement the program decides replaces the key too (its
    `replacement_trigger`, components/aws/machines.py `replacing_inputs`); a `--replace` of the
    instance alone, or a machine created again after a refresh, does not: the engine cannot
    replace what the instance's inputs were computed from before the instance was registered.
    Each message names the `--replace` that gives the launch a key of its own (the instance
    follows its key: `replace_with`)."""
    launched = {
        c.name
        for c in plan.changes
        if c.type == "aws:ec2/instance:Instance" and c.action in (Action.CREATE, Action.REPLACE)
    }
    found = []
    for change in plan.changes:
        machine = change.name.removesuffix("-host-key")
        if change.type != HOST_KEY_TYPE or machine not in launched:
            continue
        if change.action in (Action.CREATE, Action.REPLACE):
            continue
        found.append(
            f"{machine} launches with the boot key {change.name} an earlier launch exposed in "
            f"its user data: add `--replace '{change.urn}'` (the machine is replaced with it)"
        )
    return found

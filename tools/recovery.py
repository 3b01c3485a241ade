"""What the engine does around an unplanned change: a refresh that found a machine gone
(`refreshed`), a forced replacement (`lifecycle.plan(..., replace=...)`), what each delete or
create that reaches the cluster or a host runs, with which credential, and in what order
against the `up`'s creates (`hook_runs`), the state an `up` leaves for the next one
(`state_after`: a replacement launches with the program's inputs, a kept resource keeps its
ignored ones), and a destroy (`destroyed`).

Why, with the engine's and the providers' source:
docs/decisions/029-a-lost-machine-is-recovered-without-harm.md and
docs/decisions/030-a-replacement-launches-with-the-programs-inputs.md
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

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
    return Graph(kept, state.outputs, state.hooks)


# The join's before-create hook: a dead machine's Node of its name goes first
# (components/kube/node_hooks.py).
JOINS_HOOK = "gpu-cluster-node-joins"


class Credential(enum.Enum):
    """What a delete (or a create's hook) that reaches the cluster or a host runs with."""

    # pulumi step.go `DeleteStep.Apply` sends the stored inputs; pulumi-command
    # commandController.go `Delete` runs the stored `delete` over the stored `connection`.
    STORED_CONNECTION = "the SSH connection stored at its resource's last create or update"
    # A resource hook runs in the program (pulumi deployment.go `RunHooks`, the SDK's callback
    # server): it reads the credential the program holds when it runs.
    LIVE_API = "the Kubernetes API, with the credential the program holds when it runs"


@dataclass(frozen=True)
class HookRun:
    """Something an `up` runs for a resource it deletes, replaces or creates, beyond the
    provider's own work: a stored delete (`program`: the script it runs, `params`: stored with
    it) or a resource hook (`program`: its name, `params`: the Node and machine it acts on);
    what waits for it (`before`: resources created or deleted only after it ran; empty when it
    runs at the end, after every create); its `credential`; `fails`, why it cannot succeed, and
    `idle`, why it acts on nothing ("" when it does)."""

    name: str
    program: str
    params: dict[str, str]
    before: tuple[str, ...]
    credential: Credential = Credential.STORED_CONNECTION
    fails: str = ""
    idle: str = ""


def hook_runs(
    plan: Plan, before: Graph, after: Graph, *, unreachable: bool | None = None
) -> list[HookRun]:
    """Every stored delete and every node hook the `up` planned in `plan` runs, in no
    particular order, each with what waits for it. The hooks read controlPlane.unreachable
    from the program that runs (`after`'s, or `unreachable` for a `destroy --run-program`).

    The engine runs a Command's delete from its stored state (pulumi step.go `DeleteStep.Apply`
    sends `s.old.Inputs`; pulumi-command commandController.go `Delete` runs `props.Delete`), and
    skips it when its stored `deletedWith` resource is deleted by the same operation
    (`isDeletedWith`); it runs the stored before-delete hooks first, whatever the options, by
    the names the state stored (`RunHooks`: "hook %q was not registered" otherwise). A
    delete-before-replace resource is deleted before its replacement is created, so before
    everything that waits for the replacement; its dependents that are replaced too are deleted
    before it (step_generator.go `calculateDependentReplacements`: "Deletions must occur in
    reverse dependency order"). Any other delete runs after the creates and updates ("the
    delete step is generated later on, after all creates/updates finish"). A before-create hook
    runs with the create (step.go `CreateStep.Apply`)."""
    ended = {c.urn for c in plan.changes if c.action in (Action.REPLACE, Action.DELETE)}
    old_of = _old_urns(plan, before, after)
    ended_old = {old_of.get(urn, urn) for urn in ended}
    if unreachable is None:
        unreachable = lifecycle.skips_api_drains(after)
    runs = []
    for change in plan.changes:
        new = after.by_urn.get(change.urn)
        if change.action in (Action.CREATE, Action.REPLACE) and new is not None:
            for hook in new.hooks.get("before_create", []):
                if hook == JOINS_HOOK:
                    runs.append(_api_run(change.name, hook, new.inputs, (), unreachable=False))
        if change.action not in (Action.REPLACE, Action.DELETE):
            continue
        old = before.by_urn.get(old_of.get(change.urn, change.urn))
        if old is None:
            continue
        waiting = _waiting(plan, change, old, before, after, old_of)
        for hook in old.hooks.get("before_delete", []):
            runs.append(_api_run(change.name, hook, old.inputs, waiting, unreachable))
        stored = unwrap(old.inputs.get("delete"))
        if not isinstance(stored, str) or not stored:
            continue
        if old.deleted_with is not None and old.deleted_with in ended_old:
            continue
        runs.append(
            HookRun(
                name=change.name,
                program=_program_of(stored),
                params=program_params(stored),
                before=waiting,
                credential=Credential.STORED_CONNECTION,
                fails=stale_connection(old, after),
            )
        )
    return runs


def render_runs(runs: list[HookRun]) -> str:
    """The runs as the day-two plan prints them: what, with which credential, when, and what
    fails."""
    if not runs:
        return ""
    lines = ["Deletes and creates that reach the cluster or a host:"]
    for run in sorted(runs, key=lambda r: (r.name, r.program)):
        what = f"hook {run.program}" if run.credential is Credential.LIVE_API else run.program
        params = " ".join(f"{k}={v}" for k, v in sorted(run.params.items()))
        when = f"before {', '.join(run.before)}" if run.before else "after every create"
        idle = f" ({run.idle})" if run.idle else ""
        lines.append(
            f"    {run.name}: {what} ({params}), {when}; with {run.credential.value}{idle}"
        )
    lines += [f"Fails: {run.name}: {run.fails}" for run in runs if run.fails]
    return "\n".join(lines) + "\n"


def _api_run(
    name: str, hook: str, inputs: Mapping[str, Any], before: tuple[str, ...], unreachable: bool
) -> HookRun:
    """A node hook: it acts on the Node of the step's machine (the first of its `triggers`);
    controlPlane.unreachable makes the leave hook drain nothing."""
    triggers = unwrap(inputs.get("triggers")) or [""]
    node = name.rsplit("-", 1)[0]
    params = {"NODE_NAME": node, "INSTANCE_ID": str(triggers[0])}
    idle = "controlPlane.unreachable: it drains and deletes nothing" if unreachable else ""
    return HookRun(name, hook, params, before, Credential.LIVE_API, idle=idle)


def _waiting(
    plan: Plan,
    change: lifecycle.Change,
    old: Resource,
    before: Graph,
    after: Graph,
    old_of: Mapping[str, str],
) -> tuple[str, ...]:
    """What waits for the delete of `old`: the replacement and its replaced dependents when it
    is delete-before-replace, and the replacement of a delete-before-replace ancestor."""
    taken = {c.urn: c for c in plan.changes}
    dependents = _dependents(after)
    order = {urn: index for index, urn in enumerate(after.topological())}
    waiting: list[str] = []
    new = after.by_urn.get(change.urn)
    if change.action is Action.REPLACE and new is not None and new.delete_before_replace:
        waiting.append(new.name)
        waiting += [
            after.by_urn[urn].name
            for urn in sorted(dependents.get(change.urn, ()), key=order.__getitem__)
            if taken.get(urn) is not None and taken[urn].action in (Action.CREATE, Action.REPLACE)
        ]
    for urn in before.ancestors(old):
        ancestor = next((c for c in plan.changes if old_of.get(c.urn, c.urn) == urn), None)
        if ancestor is None or ancestor.action is not Action.REPLACE:
            continue
        replacement = after.by_urn.get(ancestor.urn)
        if replacement is not None and replacement.delete_before_replace:
            waiting.append(replacement.name)
    return tuple(dict.fromkeys(waiting))


# What a stored connection must still match for its dial to work after this `up`: the login
# key (the program's current one is the only one its hosts' authorized_keys keep once their
# wait-ready step ran, before any delete) and the host key the host presents.
_MUST_MATCH = {
    "privateKey": "its stored login key is no longer authorized (sshPrivateKey changed)",
    "hostKey": "the host presents another host key than the one stored (a host-key rotation)",
}


def stale_connection(old: Resource, after: Graph) -> str:
    """Why the stored connection of `old` no longer dials its host after this `up`, compared
    with the connection the program itself uses for that host now ("" when it matches, or when
    the program dials that host no more: nothing to compare with)."""
    stored = unwrap(old.inputs.get("connection")) or {}
    host = stored.get("host")
    current = next(
        (
            unwrap(r.inputs["connection"])
            for r in after.of_type(lifecycle.COMMAND)
            if "create" in r.inputs
            and (unwrap(r.inputs.get("connection")) or {}).get("host") == host
        ),
        None,
    )
    if current is None:
        return ""
    for key, why in _MUST_MATCH.items():
        if stored.get(key) != current.get(key):
            return f"{why}: the delete fails at every retry and the stack is stuck"
    return ""


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
    return Graph(kept, after.outputs, after.hooks)


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

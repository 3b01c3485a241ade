"""The Pulumi Python SDK's walks through the dependency graph, replaced (by
components/sdk_fixes.py, over the exact source each was written against) by ones that answer
the same and cost less.

- `resource_cycle_breaker.declare_dependency` is asked, for every property of every resource
  that carries a dependency, whether that dependency closes a cycle: it walks (`_reachable`,
  through nested generators, one per level) from the dependency through everything it depends
  on, looking for the resource being registered. Every step of a node walks the chain before
  it, its machine, the network and the control plane. The replacement keeps the resources in a
  topological order of the declared edges as it goes (Pearce and Kelly's dynamic topological
  sort, "A Dynamic Topological Sort Algorithm for Directed Acyclic Graphs", ACM JEA 11, 2006):
  a dependency placed before the resource cannot close a cycle, which answers nearly every
  question without a walk; the rest walk only the resources placed between the two, and
  reorder those. A dependency already declared answers True at once.
- `rpc._expand_dependencies` turns the resources each input depends on into URNs, for every
  input of every registration: a coroutine per dependency (`_add_dependency`), which runs two
  `from ... import` statements each time, and the SDK keeps the resources of each input apart,
  so a step's machine is expanded once per input that carries it (about a hundred expansions
  per node). The replacement walks the same resources in the same order with the same checks
  in one coroutine, with the classes imported once.
- `_depends_on._resolve_depends_on` reads a resource's `depends_on` by wrapping the list in an
  Output and then each resource in it in another, and awaiting each: a Task per item. The
  replacement answers a plain list of resources (what `ResourceOptions._depends_on_list` makes
  of a `depends_on` without Outputs, every step's) with the set of them, which is what the SDK
  reads back from those Outputs, and hands anything else to the SDK. (That `Output.from_input`
  of a resource holds no other resource is `output.py`'s word, which its digest cannot pin.)
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable
from typing import Any

from pulumi import ComponentResource, CustomResource, Output, Resource
from pulumi.runtime import resource_cycle_breaker, rpc

# The module, which `pulumi.runtime`'s attribute of that name (a function) hides.
_depends_on = importlib.import_module("pulumi.runtime._depends_on")


# Where `resource_cycle_breaker` keeps a resource's declared dependencies (read by its `_deps`).
_DECLARED = resource_cycle_breaker._DEPENDENCIES_PROPERTY
# A resource's dependents: the resources whose declared dependencies point at it directly.
_DEPENDENTS = "_gpu_cluster_dependents"
# A resource's place in a topological order of the declared edges: every resource is placed
# after the resources it depends on. A resource in no declared edge has no place yet.
_PLACE = "_gpu_cluster_place"


class _Ends:
    """The lowest and the highest place given so far (a resource new to the order goes below or
    above every other, where no edge can constrain it)."""

    lowest = 0
    highest = 0


def declare_dependency(from_resource: Any, to_resource: Any) -> bool:
    """The SDK's `resource_cycle_breaker.declare_dependency`: remembers that `from_resource`
    depends on `to_resource` (the SDK's `_add_dep`), unless that closes a cycle (False).

    The SDK walks everything `to_resource` depends on, transitively, looking for
    `from_resource`: a dependency on a step's machine walks the network and the control plane,
    and a step on the step before it walks the whole chain before that. Here, a dependency
    placed before the resource in the order of the edges declared so far cannot close a cycle,
    whatever their paths (every edge points back in the order). Otherwise a resource nothing
    depends on yet cannot be reached from another either, and moves above every other;
    else `_reorder` walks the resources placed between the two, finds the cycle or places the
    dependency and what it depends on before the resource and what depends on it. Every edge
    is declared here (`rpc`'s copy of the function is this one too), so every resource in one
    is placed, and each edge is also kept the other way round, on its target. A dependency
    already declared answers True at once (the graph has no cycle, so it cannot close one)."""
    # `_deps(from_resource)`, read here: a call less on every declaration.
    declared = getattr(from_resource, _DECLARED, None)
    if declared is not None and to_resource in declared:
        return True
    to_place = getattr(to_resource, _PLACE, None)
    if to_place is None:
        _Ends.lowest -= 1
        to_place = _Ends.lowest
        setattr(to_resource, _PLACE, to_place)
    from_place = getattr(from_resource, _PLACE, None)
    if from_place is None:
        _Ends.highest += 1
        from_place = _Ends.highest
        setattr(from_resource, _PLACE, from_place)
    if to_place >= from_place:
        if to_resource is not from_resource and not getattr(from_resource, _DEPENDENTS, None):
            # Nothing depends on it yet (most: the resource being registered), so nothing it
            # depends on reaches it: it moves above every other, where all its edges point
            # back, without a walk.
            _Ends.highest += 1
            setattr(from_resource, _PLACE, _Ends.highest)
        elif not _reorder(from_resource, to_resource, from_place, to_place):
            return False
    # `_add_dep`: a new set, as the SDK's (the old one may be in someone's hands).
    added = set(declared) if declared else set()
    added.add(to_resource)
    setattr(from_resource, _DECLARED, added)
    dependents = getattr(to_resource, _DEPENDENTS, None)
    if dependents is None:
        dependents = set()
        setattr(to_resource, _DEPENDENTS, dependents)
    dependents.add(from_resource)
    return True


def _reorder(from_resource: Any, to_resource: Any, lowest: int, highest: int) -> bool:
    """For a dependency placed at or after the resource that declares it: False when it closes
    a cycle; else True, with the places of the resources between them exchanged so that
    `to_resource` and what it depends on come before `from_resource` and what depends on it.

    What depends on `from_resource` and is placed up to `to_resource` (every resource on a path
    between the two is placed between them): `to_resource` among them is a cycle. Else, what
    `to_resource` depends on placed from `from_resource` on cannot depend on those, and the
    places of both sets, sorted, go to the second set first, then to the first, each in its
    own order (Pearce and Kelly, 2006). `lowest` and `highest` are the places of the two."""
    after = _within(from_resource, lambda r: getattr(r, _DEPENDENTS, ()), lowest, highest)
    if to_resource in after:
        return False
    before = _within(to_resource, resource_cycle_breaker._deps, lowest, highest)
    moved = [*sorted(before, key=_place), *sorted(after, key=_place)]
    for resource, place in zip(moved, sorted(map(_place, moved)), strict=True):
        setattr(resource, _PLACE, place)
    return True


def _place(resource: Any) -> int:
    return getattr(resource, _PLACE)


def _within(
    start: Any, neighbours: Callable[[Any], Iterable[Any]], lowest: int, highest: int
) -> set[Any]:
    """`start` and what is reached from it through `neighbours` of places from `lowest` to
    `highest` (walked with a list, not recursion: a chain may be longer than Python's limit)."""
    reached = {start}
    pending = [start]
    while pending:
        for neighbour in neighbours(pending.pop()):
            if neighbour not in reached and lowest <= _place(neighbour) <= highest:
                reached.add(neighbour)
                pending.append(neighbour)
    return reached


async def expand_dependencies(deps: Iterable[Any], from_resource: Any | None) -> dict[str, Any]:
    """The SDK's `rpc._expand_dependencies`: each of `deps` (a local component resource stands
    for its descendants, as `_add_dependency` walks them) by its URN, in the same order, with
    the same checks and errors, the dependencies declared and the URNs awaited at the same
    points. One coroutine for all of `deps`, not one per dependency, and no imports per
    dependency."""
    expanded: dict[str, Any] = {}
    for dependency in deps:
        if isinstance(dependency, CustomResource):
            # What `_aggregated` answers without a walk: a custom resource stands for itself,
            # declared as a dependency of `from_resource` unless it already is (most: a step's
            # machine, met again for each input that carries it).
            found_resources: Iterable[Any] = (dependency,)
            if (
                from_resource
                and dependency not in getattr(from_resource, _DECLARED, ())
                and not rpc.declare_dependency(from_resource, dependency)
                and _skips_cycle(dependency)
            ):
                found_resources = ()
        else:
            found_resources = _aggregated(dependency, from_resource)
        for found in found_resources:
            # What `await found.urn.future()` answers, read without awaiting once the URN
            # Output's data is done (awaiting a done future returns at once, without yielding
            # to the loop, or raises what it failed with, as `result()` does): its value, None
            # where that holds an unknown (pulumi/output.py `Output.future`; a URN is a string
            # once known, which `contains_unknowns` answers False for at once).
            output = found.urn
            data = output._data if type(output) is Output else None
            if data is not None and data.done():
                urn = data.result().value
                if type(urn) is not str and rpc.contains_unknowns(urn):
                    urn = None
            else:
                urn = await output.future()
            if urn:
                expanded[urn] = found
    return expanded


def _aggregated(dependency: Any, from_resource: Any | None) -> list[Any]:
    """`_add_dependency`'s walk, which must not await: the custom and remote resources that
    `dependency` stands for, breadth first, each declared as a dependency of `from_resource`."""
    found: list[Any] = []
    pending = [dependency]
    index = 0
    while index < len(pending):
        res = pending[index]
        index += 1
        if not isinstance(res, Resource):
            raise TypeError(f"'depends_on' was passed a value {res} that was not a Resource.")
        # Through `rpc`'s global, as the SDK's: the installed `declare_dependency`.
        if from_resource and not rpc.declare_dependency(from_resource, res) and _skips_cycle(res):
            continue
        if isinstance(res, ComponentResource) and not res._remote:
            pending.extend(res._childResources)
        else:
            found.append(res)
    return found


def _skips_cycle(res: Any) -> bool:
    """For a dependency on `res` that would close a cycle: True when the SDK skips it (the
    environment says cycles do not fail), else the SDK's error."""
    cycles_fail = os.getenv(rpc.ERROR_ON_DEPENDENCY_CYCLES_VAR, "true").lower() == "true"
    if not cycles_fail:
        return True
    raise RuntimeError(
        "We have detected a circular dependency involving a resource of type"
        + f" {res._type} named {res._name}.\n"
        + "Please review any `depends_on`, `parent` or other dependency relationships "
        + "between your resources to ensure no cycles have been introduced in your program."
    )


SDK_RESOLVE_DEPENDS_ON = _depends_on._resolve_depends_on


async def resolve_depends_on(depends_on: Any) -> set[Any]:
    """The SDK's `_depends_on._resolve_depends_on`: for a list of resources (what
    `ResourceOptions._depends_on_list` makes of every `depends_on` a program gives without an
    Output), the set of them at once, where the SDK wraps the list and then each resource in an
    Output to read it back; anything else by the SDK."""
    if type(depends_on) is list and all(isinstance(d, Resource) for d in depends_on):
        return set(depends_on)
    return await SDK_RESOLVE_DEPENDS_ON(depends_on)

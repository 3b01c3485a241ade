"""What a policy sees of a resource, and the small readers every check shares: a path into its
inputs, a list that may be missing, a value the policy runtime may hold unknown during a
preview (`pulumi_policy.proxy`: reading one raises its UnknownValueError)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Resource:
    """What a policy sees of one resource (the same fields as pulumi_policy's arguments)."""

    resource_type: str
    props: Mapping[str, Any]
    urn: str
    name: str
    additional_secret_outputs: tuple[str, ...] = ()
    # URNs this resource waits for: its dependencies and property dependencies.
    dependencies: frozenset[str] = field(default_factory=frozenset)
    protect: bool = False


Config = Mapping[str, Any]
ResourceCheck = Callable[[Resource, Config], list[str]]
StackCheck = Callable[[Sequence[Resource], Config], list[tuple[str, str]]]


def label(resource: Resource) -> str:
    return f"{resource.resource_type} '{resource.name}'"


def get(value: Any, *path: str | int) -> Any:
    """`value[path[0]][path[1]]...`, or None where a step is missing."""
    for key in path:
        if isinstance(key, int):
            if not isinstance(value, Sequence) or isinstance(value, str) or key >= len(value):
                return None
        elif not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return value


def items(value: Any) -> list[Any]:
    if value is None or isinstance(value, (str, Mapping)):
        return []
    return list(value)


def known(props: Mapping[str, Any], key: str) -> Any:
    """`props[key]`, or None while it is unknown (a script rendered from another resource's
    output, during preview). The policy runtime raises its UnknownValueError on reading such a
    value, which would turn the whole check into a "can't run during preview" notice."""
    try:
        return props.get(key)
    except Exception as error:
        if type(error).__name__ == "UnknownValueError":
            return None
        raise


def known_field(value: Any, key: str) -> tuple[bool, Any]:
    """(known, value[key]) of a mapping the policy runtime may hold unknowns in."""
    try:
        if not isinstance(value, Mapping):
            return True, None
        return True, value.get(key)
    except Exception as error:
        if type(error).__name__ == "UnknownValueError":
            return False, None
        raise


def walk(value: Any, path: str = "", depth: int = 0) -> Iterator[tuple[str, Any]]:
    """(path, value) of `value` and of everything inside it, depth first; values the runtime
    holds unknown are left out (they cannot be judged before `up`)."""
    yield path, value
    if depth > 16:
        return
    if isinstance(value, Mapping):
        for key in list(value):
            try:
                child = value[key]
            except Exception as error:
                if type(error).__name__ == "UnknownValueError":
                    continue
                raise
            yield from walk(child, f"{path}.{key}" if path else str(key), depth + 1)
    elif isinstance(value, Sequence) and not isinstance(value, str):
        for index in range(len(value)):
            try:
                child = value[index]
            except Exception as error:
                if type(error).__name__ == "UnknownValueError":
                    continue
                raise
            yield from walk(child, f"{path}[{index}]", depth + 1)

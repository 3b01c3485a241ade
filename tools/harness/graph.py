"""The registered resources of one program run, and questions about their order.

`Resource` holds the fields of a `RegisterResourceRequest` the real engine receives (type, name,
URN, parent, dependencies, property dependencies, provider, inputs with their secret-ness, custom
timeouts, additional secret outputs, replace-on-changes, aliases), so assertions on them hold for
real deployments.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from components.hosts import steps

# What every machine the stack creates runs first, after its instance (resource
# `<machine>-<step>`), then the steps of every GPU node, in contract order, then the validation
# steps when validation is enabled: from the step table.
FIRST_CONTACT_CHAIN = steps.first_contact_chain()
HOST_CHAIN = steps.node_chain()
VALIDATION_CHAIN = steps.validation_chain()


@dataclass(frozen=True)
class Secret:
    """An input the program marked secret; `value` is what it wraps."""

    value: Any


@dataclass
class Resource:
    type: str
    name: str
    urn: str
    parent: str | None
    custom: bool
    dependencies: set[str]
    property_dependencies: dict[str, set[str]]
    provider: str | None
    inputs: dict[str, Any]
    custom_timeouts: dict[str, str]
    additional_secret_outputs: list[str]
    replace_on_changes: list[str]
    delete_before_replace: bool
    ignore_changes: list[str]
    protect: bool
    aliases: list[dict[str, Any]] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    replace_with: list[str] = field(default_factory=list)  # URNs whose replacement replaces it
    replacement_trigger: Any = None  # a value whose change replaces it (None: none)
    deleted_with: str | None = None
    retain_on_delete: bool = False
    id: str = ""  # what the provider (the mocks) answered
    # Its resource hooks by lifecycle point (`before_delete`: [hook names]), as the state stores
    # them.
    hooks: dict[str, list[str]] = field(default_factory=dict)

    @property
    def provider_urn(self) -> str | None:
        return self.provider.rsplit("::", 1)[0] if self.provider else None

    def plain_inputs(self) -> dict[str, Any]:
        """The inputs with secret wrappers removed (for asserting on values)."""
        return unwrap(self.inputs)


def unwrap(value: Any) -> Any:
    if isinstance(value, Secret):
        return unwrap(value.value)
    if isinstance(value, dict):
        return {k: unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap(v) for v in value]
    return value


def secret_paths(value: Any, path: str = "") -> list[str]:
    """Paths (like `connection.privateKey`) of the values that are marked secret."""
    if isinstance(value, Secret):
        return [path or "."]
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            found += secret_paths(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += secret_paths(item, f"{path}[{index}]")
    return found


def plain_strings(value: Any) -> Iterator[str]:
    """Every string NOT under a secret marker: where a leaked secret would show up."""
    if isinstance(value, Secret):
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from plain_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from plain_strings(item)


def script_params(resource: Resource) -> dict[str, str]:
    """The NAME='value' inputs of the script a host step renders on stdin (secrets unwrapped);
    none for a Command that sends no stdin (`<node>-in-service` runs nothing)."""
    if "stdin" not in resource.inputs:
        return {}
    return program_params(unwrap(resource.inputs["stdin"]))


def program_params(program: str) -> dict[str, str]:
    """The NAME='value' inputs at the head of a step's program: its stdin, or the heredoc of a
    stored delete hook (components/hosts/remote.py step_program)."""
    # The parameters come first: before the shared library (a whole program) or the run of a
    # bundled program by digest.
    header = program.split("# ---- lib/common.sh", 1)[0].split("STEP_BUNDLE=", 1)[0]
    header = header.split("<<'GPU_CLUSTER_SCRIPT'", 1)[-1]
    # A quoted value may span lines (AUTHORIZED_KEYS holds one key a line): read the header as
    # bash words, comments dropped, and keep the NAME=value words.
    found = {}
    for word in shlex.split(header, comments=True):
        match = re.fullmatch(r"([A-Z][A-Z0-9_]*)=(.*)", word, re.S)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def program_script(program: str) -> str:
    """The host script a step's program runs: the one it sources by digest (a step's stdin or
    stored delete hook), or the one a whole rendered program names in its header."""
    from components.hosts import bundle
    from components.hosts.rendering import available_scripts

    sourced = re.search(rf"^source {bundle.INSTALLED_DIR}/([0-9a-f]{{64}})\.sh$", program, re.M)
    if sourced is None:
        return program.split("\n", 2)[1].removeprefix("# ").split(",", 1)[0]
    by_digest = {bundle.digest(script): script for script in available_scripts()}
    return by_digest[sourced.group(1)]


class Graph:
    """The registered resources of one program run, and questions about their order."""

    def __init__(
        self,
        resources: list[Resource],
        stack_outputs: dict[str, Any],
        hooks: tuple[str, ...] = (),
    ):
        self.resources = resources
        self.by_urn = {r.urn: r for r in resources}
        self.outputs = stack_outputs
        # The names of the resource hooks the program registered (RegisterResourceHook), and of
        # those that also run in a preview (`on_dry_run`).
        self.hooks = hooks
        self.dry_run_hooks: tuple[str, ...] = ()

    def __iter__(self) -> Iterator[Resource]:
        return iter(self.resources)

    def __len__(self) -> int:
        return len(self.resources)

    def of_type(self, type_: str) -> list[Resource]:
        return [r for r in self.resources if r.type == type_]

    def named(self, name: str) -> Resource:
        found = [r for r in self.resources if r.name == name]
        if len(found) != 1:
            names = sorted(r.name for r in self.resources)
            raise KeyError(f"{len(found)} resources named {name!r}; names: {names}")
        return found[0]

    def find(self, predicate: Callable[[Resource], bool]) -> list[Resource]:
        return [r for r in self.resources if predicate(r)]

    def children(self, parent: Resource) -> list[Resource]:
        return [r for r in self.resources if r.parent == parent.urn]

    def direct_dependencies(self, resource: Resource) -> set[str]:
        """URNs the engine waits for before this resource: explicit and property dependencies,
        and the provider it is created with."""
        deps = set(resource.dependencies)
        for urns in resource.property_dependencies.values():
            deps |= urns
        if resource.provider_urn and resource.provider_urn in self.by_urn:
            deps.add(resource.provider_urn)
        return deps & self.by_urn.keys()

    def depends_on(self, a: Resource, b: Resource) -> bool:
        """True when `a` waits, directly or transitively, for `b`."""
        return b.urn in self.ancestors(a)

    def ancestors(self, resource: Resource) -> set[str]:
        seen: set[str] = set()
        stack = [resource.urn]
        while stack:
            for dep in self.direct_dependencies(self.by_urn[stack.pop()]):
                if dep not in seen:
                    seen.add(dep)
                    stack.append(dep)
        return seen

    def topological(self, urns: Iterable[str] | None = None) -> list[str]:
        """`urns` (default: every resource) ordered so each comes after its dependencies among
        them (direct_dependencies: explicit, property and provider edges). Iterative DFS."""
        members = list(self.by_urn) if urns is None else list(urns)
        scope = set(members)
        done: set[str] = set()
        order: list[str] = []
        for start in members:
            stack = [(start, False)]
            while stack:
                urn, expanded = stack.pop()
                if urn in done:
                    continue
                if expanded:
                    done.add(urn)
                    order.append(urn)
                    continue
                stack.append((urn, True))
                deps = self.direct_dependencies(self.by_urn[urn]) & scope
                stack.extend((d, False) for d in deps if d not in done)
        return order

    def longest_paths(self, resources: Iterable[Resource] | None = None) -> dict[str, list[str]]:
        """URN -> the URNs of the longest dependency chain ending there, for `resources` (default:
        all) and everything they depend on. Iterative post-order DFS with one shared memo, so
        1,000-node graphs take one pass and never hit the recursion limit."""
        memo: dict[str, list[str]] = {}
        for start in self.resources if resources is None else resources:
            stack: list[tuple[str, bool]] = [(start.urn, False)]
            while stack:
                urn, done = stack.pop()
                if urn in memo:
                    continue
                deps = self.direct_dependencies(self.by_urn[urn])
                if done:
                    best = max((memo[d] for d in deps), key=len, default=[])
                    memo[urn] = [*best, urn]
                    continue
                stack.append((urn, True))
                stack.extend((d, False) for d in deps if d not in memo)
        return memo

    def longest_path(self, resource: Resource) -> list[Resource]:
        """The longest chain of dependencies that ends at `resource` (its depth in the plan)."""
        return [self.by_urn[u] for u in self.longest_paths([resource])[resource.urn]]

    def depth(self) -> int:
        """Resources on the longest dependency chain of the whole graph."""
        return max((len(path) for path in self.longest_paths().values()), default=0)

    def secret_inputs(self, resource: Resource) -> list[str]:
        return secret_paths(resource.inputs)

"""Resource identity across program versions: which old URN each registered resource takes over.

The engine knows a resource by its URN; when a later program registers it under another URN,
the engine deletes the old one and creates a new one (for a GPU instance: terminate; for a join:
`kubeadm reset`), unless one of its aliases resolves to the old URN. `match(graph, olds)`
applies the engine's own alias rules. Snapshot files (`tests/identity/<stack>.urns`) list the
URNs each stack file registers, one a line; a line `retired <urn>` records a resource a running
stack loses on purpose, which CHANGELOG.md must name.

Why: docs/decisions/018-resource-identity-follows-the-engines-alias-rules.md
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tools.harness.graph import Graph, Resource
from tools.harness.recorder import ROOT_STACK_TYPE, engine_urn
from tools.harness.stacks import PROJECT, ROOT

SNAPSHOT_DIR = ROOT / "tests" / "identity"

# Stacks unlike the three files, pinned the same way: what the files do not use has running
# stacks too. `dev-baked`: dev's pool on a baked image (the image's name, and so its URN, comes
# from the digest of what it holds: a change there rebuilds it and rolls the pool). `prod-efa`:
# an EFA pool of two nodes with its placement group and its two-node NCCL check.
VARIANTS: dict[str, tuple[str, dict]] = {
    "dev-baked": (
        "dev",
        {
            "nodePools": [
                {"name": "a10g", "instanceType": "g5.xlarge", "count": 2, "image": "baked"}
            ]
        },
    ),
    "prod-efa": (
        "prod",
        {"nodePools": [{"name": "h100", "instanceType": "p5.48xlarge", "count": 2, "efa": True}]},
    ),
}
RETIRED = "retired "


def split_urn(urn: str) -> tuple[str, str, str, str, str]:
    """urn:pulumi:<stack>::<project>::<qualified type>::<name> -> its five parts."""
    prefix, project, qualified_type, name = urn.split("::", 3)
    stack = prefix.removeprefix("urn:pulumi:")
    own_type = qualified_type.rsplit("$", 1)[-1]
    return stack, project, qualified_type, own_type, name


def create_urn(name: str, type_: str, parent: str | None, project: str, stack: str) -> str:
    """resource.CreateURN, as the engine builds a URN from an alias spec."""
    return engine_urn(parent, type_, name, project=project, stack=stack)


@dataclass(frozen=True)
class Match:
    """The outcome of registering `graph` against the old state `olds`."""

    taken_over: dict[str, str]  # new URN -> the old URN it continues (itself when unchanged)
    created: list[str]  # registered URNs that continue nothing: new resources
    deleted: list[str]  # old URNs nothing continues: the engine deletes them


def _candidates(resource: Resource, stack: str, matched: dict[str, str]) -> list[str]:
    """The resource's URN, then its aliases in the engine's order (generateAliases)."""
    _, project, _, own_type, own_name = split_urn(resource.urn)

    def collapse(alias: dict) -> str:
        if alias.get("urn"):
            return alias["urn"]
        given = alias.get("parentUrn")
        # A given parent that was itself aliased stands for its old URN.
        parent = matched.get(given, given) if given else (resource.parent or "")
        if alias.get("noParent") or (parent and split_urn(parent)[2] == ROOT_STACK_TYPE):
            parent = ""
        return create_urn(
            alias.get("name") or own_name,
            alias.get("type") or own_type,
            parent or None,
            alias.get("project") or project,
            alias.get("stack") or stack,
        )

    found = [resource.urn]

    def add(urn: str) -> None:
        if urn not in found:
            found.append(urn)

    direct = [collapse(alias) for alias in resource.aliases]
    for urn in direct:
        add(urn)
    parent = resource.parent
    if parent and parent in matched and matched[parent] != parent:
        parent_alias = matched[parent]
        parent_name = split_urn(parent)[4]
        for child_type, child_name in [(own_type, own_name)] + [
            (split_urn(u)[3], split_urn(u)[4]) for u in direct
        ]:
            name = child_name
            if child_name.startswith(parent_name):
                name = split_urn(parent_alias)[4] + child_name[len(parent_name) :]
            add(create_urn(name, child_type, parent_alias, project, stack))
    return found


def match(graph: Graph, olds: Iterable[str], stack: str) -> Match:
    """Which old URN each resource of `graph` takes over, in registration order (parents are
    registered before their children, so a parent's match is known when its children need it)."""
    old_set = set(olds)
    matched: dict[str, str] = {}
    created: list[str] = []
    claimed: set[str] = set()
    for resource in graph:
        for urn in _candidates(resource, stack, matched):
            if urn in old_set and urn not in claimed:
                matched[resource.urn] = urn
                claimed.add(urn)
                break
        else:
            created.append(resource.urn)
    deleted = sorted(old_set - claimed)
    return Match(taken_over=matched, created=created, deleted=deleted)


@dataclass(frozen=True)
class Snapshot:
    live: list[str]
    retired: list[str]


def snapshot_path(stack: str) -> Path:
    return SNAPSHOT_DIR / f"{stack}.urns"


def parse_snapshot(text: str) -> Snapshot:
    live, retired = [], []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(RETIRED):
            retired.append(line.removeprefix(RETIRED).strip())
        else:
            live.append(line)
    return Snapshot(live=live, retired=retired)


def read_snapshot(stack: str) -> Snapshot:
    return parse_snapshot(snapshot_path(stack).read_text(encoding="utf-8"))


def render_snapshot(
    stack: str, urns: Iterable[str], retired: Iterable[str] = (), described: str | None = None
) -> str:
    """The snapshot file of a stack file, or of `described` (a variant of it)."""
    header = (
        f"# Every URN `pulumi up` registers for {described or f'Pulumi.{stack}.yaml'} "
        f"({PROJECT}).\n"
        "# A URN that changes is a resource the next `up` deletes and creates anew: keep it, give\n"
        "# the moved resource an alias, or retire it here (`retired <urn>`) and name it in\n"
        "# CHANGELOG.md. Regenerate: UPDATE_IDENTITY=1 python -m pytest tests/test_identity.py\n"
    )
    lines = sorted(set(urns))
    retired_lines = [f"{RETIRED}{urn}" for urn in sorted(set(retired))]
    return header + "".join(f"{line}\n" for line in [*lines, *retired_lines])

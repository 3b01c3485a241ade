"""Running stacks keep every resource: the URNs each stack file registers are pinned.

A changed URN is a delete plus a create for the engine: a terminated GPU instance, a `kubeadm
reset` node, a security group deleted under running machines. Every URN in the committed snapshot
(tests/identity/<stack>.urns) must be registered again or reached by an alias, resolved the way
the engine resolves them (tools/harness/identity.py cites the engine source).
"""

from __future__ import annotations

import os
import subprocess

import pulumi
import pytest

from tools.harness.identity import (
    RETIRED,
    VARIANTS,
    match,
    parse_snapshot,
    read_snapshot,
    render_snapshot,
    snapshot_path,
)
from tools.harness.stacks import ROOT, STACKS, run_program

CHANGELOG = ROOT / "CHANGELOG.md"
UPDATE = os.environ.get("UPDATE_IDENTITY") == "1"

PINNED = [*STACKS, *VARIANTS]


def _run(pinned: str):
    stack, config = VARIANTS.get(pinned, (pinned, None))
    return stack, run_program(stack, config=config)


@pytest.mark.parametrize("pinned", PINNED)
def test_every_running_resource_keeps_its_identity(pinned):
    stack, graph = _run(pinned)
    described = f"Pulumi.{stack}.yaml with {VARIANTS[pinned][1]}" if pinned in VARIANTS else None
    snapshot = read_snapshot(pinned) if snapshot_path(pinned).exists() else None
    if UPDATE:
        olds = snapshot.live if snapshot else []
        result = match(graph, olds, stack)
        kept = [urn for urn in olds if urn not in result.deleted]
        retired = [*(snapshot.retired if snapshot else []), *result.deleted]
        snapshot_path(pinned).parent.mkdir(exist_ok=True)
        snapshot_path(pinned).write_text(
            render_snapshot(stack, [*kept, *result.created], retired, described), encoding="utf-8"
        )
        snapshot = read_snapshot(pinned)
    assert snapshot is not None, (
        f"no identity snapshot for {pinned}: UPDATE_IDENTITY=1 python -m pytest "
        "tests/test_identity.py"
    )
    result = match(graph, snapshot.live, stack)
    assert not result.deleted, (
        f"{described or f'Pulumi.{stack}.yaml'}: the next `pulumi up` of a running stack would "
        "DELETE these "
        "resources (their URN is no longer registered and no alias resolves to it): "
        f"{result.deleted}. Give the moved resource `aliases=[pulumi.Alias(...)]`, or retire "
        "the URN (UPDATE_IDENTITY=1) and name it in CHANGELOG.md."
    )
    assert not result.created, (
        f"{described or f'Pulumi.{stack}.yaml'} registers resources the snapshot does not know: "
        f"{result.created}. "
        "New resources are fine: record them with UPDATE_IDENTITY=1 python -m pytest "
        "tests/test_identity.py"
    )


@pytest.mark.parametrize("stack", PINNED)
def test_retired_resources_are_named_in_the_changelog(stack):
    retired = read_snapshot(stack).retired
    changelog = CHANGELOG.read_text(encoding="utf-8") if CHANGELOG.exists() else ""
    unnamed = [urn for urn in retired if urn not in changelog]
    assert not unnamed, (
        f"tests/identity/{stack}.urns retires {unnamed}, which CHANGELOG.md does not name: a "
        "running stack loses these resources on its next `up`; say so in the changelog."
    )


@pytest.mark.parametrize("stack", PINNED)
def test_a_pinned_urn_is_never_just_deleted_from_the_snapshot(stack):
    """Deleting a snapshot line would hide a lost resource: compared with the committed file."""
    path = snapshot_path(stack).relative_to(ROOT)
    shown = subprocess.run(
        ["git", "show", f"HEAD:{path.as_posix()}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if shown.returncode != 0:
        pytest.skip(f"no committed {path} to compare with (not a git checkout, or a new file)")
    committed = parse_snapshot(shown.stdout)
    now = read_snapshot(stack)
    dropped = sorted(set(committed.live) - set(now.live) - set(now.retired))
    assert not dropped, (
        f"{path} drops {dropped} without retiring them: use a `{RETIRED}<urn>` line and a "
        "CHANGELOG.md entry"
    )


# ------------------------------------------------------------- the resolver, on the real SDK


def _program(version: str):
    """A tiny program in two versions: v2 renames a component, moves a child to the stack root
    and retypes another, each with the alias that keeps its old URN (or not, for `bare`)."""

    def program() -> None:
        if version == "v1":
            pool = pulumi.ComponentResource("gpu-cluster:index:GpuNodePool", "pool", None)
            pulumi.ComponentResource(
                "gpu-cluster:index:GpuNode",
                "pool-node",
                None,
                pulumi.ResourceOptions(parent=pool),
            )
            pulumi.ComponentResource(
                "gpu-cluster:index:Moved", "moved", None, pulumi.ResourceOptions(parent=pool)
            )
            pulumi.ComponentResource("gpu-cluster:index:Old", "retyped", None)
            pulumi.ComponentResource("gpu-cluster:index:Gone", "bare", None)
            return
        pool = pulumi.ComponentResource(
            "gpu-cluster:index:GpuNodePool",
            "fleet",
            None,
            pulumi.ResourceOptions(aliases=[pulumi.Alias(name="pool")]),
        )
        # No alias of its own: the parent's alias carries it (name prefix rewritten).
        pulumi.ComponentResource(
            "gpu-cluster:index:GpuNode", "fleet-node", None, pulumi.ResourceOptions(parent=pool)
        )
        pulumi.ComponentResource(
            "gpu-cluster:index:Moved",
            "moved",
            None,
            pulumi.ResourceOptions(aliases=[pulumi.Alias(parent=pool)]),
        )
        pulumi.ComponentResource(
            "gpu-cluster:index:New",
            "retyped",
            None,
            pulumi.ResourceOptions(aliases=[pulumi.Alias(type_="gpu-cluster:index:Old")]),
        )
        pulumi.ComponentResource("gpu-cluster:index:Renamed", "bare", None)

    return program


def test_aliases_resolve_to_old_urns_as_the_engine_resolves_them():
    old = run_program("dev", program=_program("v1"))
    new = run_program("dev", program=_program("v2"))
    result = match(new, [r.urn for r in old], "dev")
    old_by_name = {r.name: r.urn for r in old}
    new_by_name = {r.name: r.urn for r in new}
    assert result.taken_over[new_by_name["fleet"]] == old_by_name["pool"]
    assert result.taken_over[new_by_name["fleet-node"]] == old_by_name["pool-node"]
    assert result.taken_over[new_by_name["moved"]] == old_by_name["moved"]
    assert result.taken_over[new_by_name["retyped"]] == old_by_name["retyped"]
    # A retype without an alias is a delete and a create, as the engine does it.
    assert result.created == [new_by_name["bare"]]
    assert result.deleted == [old_by_name["bare"]]


def test_a_changed_parent_without_alias_is_a_delete_and_create():
    old = run_program("dev", program=_program("v1"))
    moved_old = next(r.urn for r in old if r.name == "moved")
    assert "GpuNodePool$gpu-cluster:index:Moved" in moved_old, moved_old

    def program() -> None:
        _program("v1")()

    same = run_program("dev", program=program)
    assert not match(same, [r.urn for r in old], "dev").deleted
    snapshot_only_moved = [moved_old]

    def moved_to_root() -> None:
        pulumi.ComponentResource("gpu-cluster:index:Moved", "moved", None)

    result = match(run_program("dev", program=moved_to_root), snapshot_only_moved, "dev")
    assert result.deleted == [moved_old], f"{moved_old} should be lost without an alias"

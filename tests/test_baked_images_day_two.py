"""Images that hold no node hostage: once a baked image exists it is read by reference, so a
refresh that dropped its terminated builder brings nothing back; while a new key's image is
built, new machines boot the newest earlier image, so no node (and no roll) waits for a build
the running machines will not use. Only a stack's very first image is waited for."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from tools import lifecycle, recovery
from tools.harness import mocks
from tools.harness.graph import Graph, unwrap
from tools.harness.stacks import run_program, stack_file

IMAGE_TYPE = "gpu-cluster:index:GpuImage"
AMI_TYPE = "aws:ec2/amiFromInstance:AmiFromInstance"
INSTANCE = "aws:ec2/instance:Instance"


def _baked(driver: str = "580") -> dict:
    pool = {**stack_file("dev")["gpu-cluster:nodePools"][0], "image": "baked", "count": 2}
    return {"nodePools": [{**pool, "driverVersion": driver}]}


@contextlib.contextmanager
def _account_holds(*images: tuple[str, dict[str, str]]) -> Iterator[None]:
    saved = list(mocks.EXISTING_IMAGES)
    mocks.EXISTING_IMAGES[:] = list(images)
    try:
        yield
    finally:
        mocks.EXISTING_IMAGES[:] = saved


def _built(graph: Graph) -> tuple[str, dict[str, str]]:
    """The image a first build made, as the account then holds it (its id and tags)."""
    (ami,) = graph.of_type(AMI_TYPE)
    return ami.id, dict(unwrap(ami.inputs["tags"]))


def _nodes(graph: Graph) -> list:
    return [r for r in graph.of_type(INSTANCE) if r.name.startswith("dev-gpu-a10g-")]


def test_the_first_image_is_built_and_waited_for():
    first = run_program("dev", config=_baked())
    (ami,) = first.of_type(AMI_TYPE)
    for node in _nodes(first):
        assert first.depends_on(node, ami), f"{node.urn} boots before its only image exists"


def test_after_a_refresh_drops_the_builder_the_next_up_launches_no_builder():
    first = run_program("dev", config=_baked())
    (builder,) = [r for r in first.of_type(INSTANCE) if r.name.endswith("-builder")]
    state = recovery.refreshed(first, [builder.name])  # it powered off: terminated
    with _account_holds(_built(first)):
        after = run_program("dev", config=_baked())
    assert not after.of_type(IMAGE_TYPE), [r.name for r in after.of_type(IMAGE_TYPE)]
    plan = lifecycle.plan(state, after)
    created = [c.name for c in plan.by_action(lifecycle.Action.CREATE)]
    assert not created, created
    # What the first build left in the state goes; the image itself is kept (retain_on_delete).
    (ami,) = state.of_type(AMI_TYPE)
    (forgotten,) = [c for c in plan.changes if c.urn == ami.urn]
    assert forgotten.action is lifecycle.Action.DELETE and ami.retain_on_delete, forgotten
    for node in lifecycle.node_names(after):
        assert plan.nodes[node].summary() == "untouched", plan.nodes[node]


def test_a_new_key_is_built_while_nodes_boot_the_earlier_image():
    first = run_program("dev", config=_baked("580"))
    earlier_id, tags = _built(first)
    with _account_holds((earlier_id, tags)):
        after = run_program("dev", config=_baked("570"))
    (ami,) = after.of_type(AMI_TYPE)  # the new key's image is built
    for node in _nodes(after):
        assert not after.depends_on(node, ami), f"{node.urn} waits for a build it will not use"
        assert unwrap(node.inputs["ami"]) == earlier_id, node.inputs["ami"]
    # Running nodes roll to the new driver through their own steps, not through the image.
    plan = lifecycle.plan(first, after)
    for node in lifecycle.node_names(after):
        assert plan.named(node).action is lifecycle.Action.UNCHANGED, lifecycle.render(plan)
        assert "driver" in plan.nodes[node].disrupted, plan.nodes[node]


def test_an_earlier_image_of_another_kind_is_not_booted():
    first = run_program("dev", config=_baked("580"))
    earlier_id, tags = _built(first)
    control_plane_like = {k: v for k, v in tags.items() if k != "gpu-cluster.io/driver_branch"}
    with _account_holds((earlier_id, control_plane_like)):
        after = run_program("dev", config=_baked("570"))
    (ami,) = after.of_type(AMI_TYPE)
    assert all(after.depends_on(node, ami) for node in _nodes(after))

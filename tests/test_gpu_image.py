"""Baked GPU images (`nodePools[].image: baked`): one GpuImage per distinct image key, built by
the same install steps a stock node runs, snapshotted, the builder powered off (terminated), the
pool's nodes booted from it; an image another stack built is reused; stock stays the default."""

from __future__ import annotations

import pytest

from components import gpu_node
from components.images import builder as image_builder
from components.images import gpu_image
from components.settings.load import ConfigError
from tools.harness import mocks
from tools.harness.graph import Graph, Resource, script_params
from tools.harness.stacks import load_stack_settings, run_program, stack_file

IMAGE_TYPE = "gpu-cluster:index:GpuImage"
AMI_TYPE = "aws:ec2/amiFromInstance:AmiFromInstance"
INSTANCE_TYPE = "aws:ec2/instance:Instance"
INSTALL = ("wait-ready", "nouveau", "driver", "runtime", "kube-tools")


def dev_pool(**changes) -> dict:
    return {**stack_file("dev")["gpu-cluster:nodePools"][0], **changes}


def baked(*pools: dict) -> Graph:
    return run_program("dev", config={"nodePools": list(pools)})


def children(graph: Graph, image: Resource) -> dict[str, Resource]:
    return {r.name.removeprefix(image.name + "-"): r for r in graph if r.parent == image.urn}


@pytest.fixture(scope="module")
def one_image() -> Graph:
    return baked(dev_pool(image="baked", count=2))


def test_stock_is_the_default_and_builds_nothing():
    graph = run_program("dev")
    assert not graph.of_type(IMAGE_TYPE)
    assert not graph.of_type(AMI_TYPE)


def test_builder_runs_the_nodes_install_steps_then_snapshot_then_power_off(one_image):
    [image] = one_image.of_type(IMAGE_TYPE)
    parts = children(one_image, image)
    node = "dev-gpu-a10g-0"
    for suffix in INSTALL:
        built, on_node = parts[suffix], one_image.named(f"{node}-{suffix}")
        # The very program with the very parameters: only the copy of the scripts it runs
        # from is the builder's own (its bundle holds the image steps too), and the node's
        # wait-ready alone grows its own root volume (rootVolumeGiB).
        node_stdin = on_node.inputs["stdin"]
        if suffix == "wait-ready":
            grow = f"ROOT_VOLUME_GIB={script_params(on_node)['ROOT_VOLUME_GIB']}\n"
            assert grow in node_stdin, on_node.urn
            node_stdin = node_stdin.replace(grow, "", 1)
        assert (
            built.inputs["stdin"].replace(
                "STEP_BUNDLE=.gpu-cluster/image-builder\n", "STEP_BUNDLE=.gpu-cluster/node\n"
            )
            == node_stdin
        ), f"{built.urn}: the builder's {suffix} differs from what a node runs"
    builder = parts["builder"]
    assert builder.inputs["instanceInitiatedShutdownBehavior"] == "terminate", builder.urn
    ami = next(r for r in one_image.of_type(AMI_TYPE) if r.parent == image.urn)
    assert ami.inputs["snapshotWithoutReboot"] is True, ami.urn
    assert one_image.depends_on(ami, parts["prepare"]), f"{ami.urn}: snapshot before prepare"
    assert one_image.depends_on(parts["prepare"], parts["kube-tools"])
    assert one_image.depends_on(parts["prepare"], parts["pull-images"])
    assert one_image.depends_on(parts["power-off"], ami), "builder powered off before its image"
    assert "sourceInstanceId" in ami.ignore_changes, ami.urn


def test_pool_nodes_boot_from_the_image_and_never_follow_a_new_one(one_image):
    [ami] = one_image.of_type(AMI_TYPE)
    nodes = [r for r in one_image.of_type(INSTANCE_TYPE) if r.name.startswith("dev-gpu-a10g-")]
    assert len(nodes) == 2
    for node in nodes:
        assert node.inputs["ami"].startswith(f"{ami.name}-"), f"{node.urn}: {node.inputs['ami']}"
        assert one_image.depends_on(node, ami), f"{node.urn} boots before its image exists"
        assert "ami" in node.ignore_changes, f"{node.urn}: a new image would replace it at once"


def test_image_is_tagged_with_what_it_holds(one_image):
    [ami] = one_image.of_type(AMI_TYPE)
    tags = ami.plain_inputs()["tags"]
    settings = load_stack_settings("dev", config={"nodePools": [dev_pool(image="baked")]})
    key = gpu_image.image_key(settings.node_pools[0], settings, gpu_node.NVIDIA_CTK_VERSION)
    assert tags[image_builder.IMAGE_TAG] == key.digest
    assert tags["gpu-cluster.io/driver_branch"] == "580"
    assert tags["gpu-cluster.io/kubernetes_minor"] == settings.kubernetes_version
    assert tags["gpu-cluster.io/container_toolkit"] == gpu_node.NVIDIA_CTK_VERSION
    assert tags[image_builder.BUILT_BY_TAG] == "gpu-cluster/dev"
    assert "k8s-device-plugin" in tags["gpu-cluster.io/images"]


def test_pools_with_the_same_key_share_one_image_and_a_different_driver_builds_another():
    same = baked(
        dev_pool(image="baked"), dev_pool(name="more", image="baked", instanceType="g5.2xlarge")
    )
    assert len(same.of_type(IMAGE_TYPE)) == 1
    other = baked(dev_pool(image="baked"), dev_pool(name="old", image="baked", driverVersion="570"))
    assert len(other.of_type(IMAGE_TYPE)) == 2


def test_a_baked_pool_scaled_to_zero_builds_no_image_and_plans():
    """An empty pool boots nothing, so it gets no image (baked_images skips it), and the pool
    itself must not ask for one: the plan goes on, the other pool's image is built."""
    graph = baked(
        dev_pool(name="idle", image="baked", count=0),
        dev_pool(name="old", image="baked", driverVersion="570", count=1),
    )
    [ami] = graph.of_type(AMI_TYPE)
    assert ami.plain_inputs()["tags"]["gpu-cluster.io/driver_branch"] == "570", ami.urn
    assert graph.named("dev-gpu-idle").type == "gpu-cluster:index:GpuNodePool"
    nodes = [r.name for r in graph.of_type(INSTANCE_TYPE) if r.name.startswith("dev-gpu-")]
    assert "dev-gpu-old-0" in nodes
    assert not [name for name in nodes if name.startswith("dev-gpu-idle-")]


def test_an_image_the_account_holds_is_reused_whoever_built_it():
    settings = load_stack_settings("dev", config={"nodePools": [dev_pool(image="baked")]})
    key = gpu_image.image_key(settings.node_pools[0], settings, gpu_node.NVIDIA_CTK_VERSION)
    saved = list(mocks.EXISTING_IMAGES)
    try:
        mocks.EXISTING_IMAGES[:] = [
            (
                "ami-0fromanotherstack",
                {**key.tags(), image_builder.BUILT_BY_TAG: "gpu-cluster/prod"},
            )
        ]
        reused = baked(dev_pool(image="baked"))
        assert not reused.of_type(IMAGE_TYPE)
        assert reused.named("dev-gpu-a10g-0").inputs["ami"] == "ami-0fromanotherstack"
        mocks.EXISTING_IMAGES[:] = [
            ("ami-0builtbydev", {**key.tags(), image_builder.BUILT_BY_TAG: "gpu-cluster/dev"})
        ]
        # This stack's own image too: read by reference, its builder not registered again
        # (docs/decisions/035-an-image-once-built-is-read-by-reference.md).
        own = baked(dev_pool(image="baked"))
        assert not own.of_type(IMAGE_TYPE), "a refresh would bring the builder back"
        assert own.named("dev-gpu-a10g-0").inputs["ami"] == "ami-0builtbydev"
    finally:
        mocks.EXISTING_IMAGES[:] = saved


def test_a_changed_input_is_a_new_image_name():
    settings = load_stack_settings("dev", config={"nodePools": [dev_pool(image="baked")]})
    pool = settings.node_pools[0]
    key = gpu_image.image_key(pool, settings, gpu_node.NVIDIA_CTK_VERSION)
    newer = gpu_image.image_key(pool, settings, "9.9.9-1")
    assert gpu_image.image_name("c", key) != gpu_image.image_name("c", newer)


@pytest.mark.parametrize(
    ("edit", "new_image"),
    [
        (lambda text: text + "\n# a note for readers\n\n", False),
        (lambda text: text.replace("\n", "\n  # indented note\n", 1), False),
        (lambda text: text + "\ntrue\n", True),
    ],
    ids=["comment", "indented-comment", "command"],
)
def test_only_what_hosts_run_makes_a_new_image(monkeypatch, tmp_path, edit, new_image):
    """An install script's comment is not part of the image (hosts never run it): editing one
    must not build a new image on the next `up`; a changed command must."""
    import shutil

    from components.hosts import rendering

    settings = load_stack_settings("dev", config={"nodePools": [dev_pool(image="baked")]})
    key = gpu_image.image_key(settings.node_pools[0], settings, gpu_node.NVIDIA_CTK_VERSION)
    before = key.digest
    scripts = tmp_path / "scripts"
    shutil.copytree(rendering.SCRIPTS_DIR, scripts)
    driver = scripts / "install-driver.sh"
    driver.write_text(edit(driver.read_text()))
    caches = (rendering.script_text, rendering.stripped_script)
    monkeypatch.setattr(rendering, "SCRIPTS_DIR", scripts)
    for cache in caches:
        cache.cache_clear()
    try:
        assert (key.digest != before) is new_image
    finally:
        monkeypatch.undo()
        for cache in caches:
            cache.cache_clear()


def test_baked_with_an_ami_id_is_a_config_error():
    with pytest.raises(ConfigError, match=r"nodePools\[0\]\.image"):
        load_stack_settings(
            "dev", config={"nodePools": [dev_pool(image="baked", amiId="ami-0123456789abcdef0")]}
        )

"""Baked control-plane images (`controlPlane.image: baked`): a ControlPlaneImage built by the
control plane's own install steps on a builder of its instance type and root volume, with
kubeadm's and flannel's images pulled, snapshotted and powered off; the control plane boots from
it and never follows a new one; an image another stack built is reused; stock stays the default
and builds nothing."""

from __future__ import annotations

import re

import pytest

from components import gpu_node
from components.hosts import pins
from components.images import builder, control_plane_image, gpu_image
from components.settings.load import ConfigError
from tests.helpers.policies import analyze, as_policy_input
from tools.harness import mocks
from tools.harness.graph import Graph, Resource, script_params
from tools.harness.stacks import load_stack_settings, run_program, stack_file

IMAGE_TYPE = "gpu-cluster:index:ControlPlaneImage"
GPU_IMAGE_TYPE = "gpu-cluster:index:GpuImage"
AMI_TYPE = "aws:ec2/amiFromInstance:AmiFromInstance"
CONTROL_PLANE = "dev-gpu-control-plane"
INSTALL = ("wait-ready", "runtime", "kube-tools")


def dev_control_plane(**changes) -> dict:
    return {**stack_file("dev")["gpu-cluster:controlPlane"], **changes}


def children(graph: Graph, image: Resource) -> dict[str, Resource]:
    return {r.name.removeprefix(image.name + "-"): r for r in graph if r.parent == image.urn}


def param_line(resource: Resource, name: str) -> str:
    [line] = [x for x in resource.inputs["stdin"].splitlines() if x.startswith(f"{name}=")]
    return line


@pytest.fixture(scope="module")
def baked() -> Graph:
    return run_program(
        "dev", config={"controlPlane": dev_control_plane(image="baked", rootVolumeGiB=64)}
    )


# ---------------------------------------------------------------- settings


def test_stock_is_the_default():
    settings = load_stack_settings("dev")
    assert settings.control_plane.image == "stock"


def test_baked_is_accepted_in_the_managed_section():
    settings = load_stack_settings("dev", config={"controlPlane": dev_control_plane(image="baked")})
    assert settings.control_plane.image == "baked"


def test_baked_with_an_ami_id_is_a_config_error():
    with pytest.raises(ConfigError, match=r"controlPlane\.image") as error:
        load_stack_settings(
            "dev",
            config={
                "controlPlane": dev_control_plane(image="baked", amiId="ami-0123456789abcdef0")
            },
        )
    assert "remove amiId or image" in str(error.value)


def test_an_existing_control_plane_has_no_image_key():
    existing = {**stack_file("prod")["gpu-cluster:controlPlane"], "image": "baked"}
    with pytest.raises(ConfigError, match=r"controlPlane\.image") as error:
        load_stack_settings("prod", config={"controlPlane": existing})
    assert "'image' is a key of mode: managed only" in str(error.value), str(error.value)


# ---------------------------------------------------------------- the graph


def test_stock_builds_no_control_plane_image():
    graph = run_program("dev")
    assert not graph.of_type(IMAGE_TYPE)
    assert graph.named(CONTROL_PLANE).inputs["ami"].startswith("ami-"), "Canonical's, looked up"


def test_builder_runs_the_control_planes_install_steps_then_pull_snapshot_power_off(baked):
    [image] = baked.of_type(IMAGE_TYPE)
    parts = children(baked, image)
    for suffix in INSTALL:
        built, on_control_plane = parts[suffix], baked.named(f"dev-gpu-{suffix}")
        # The very program with the very parameters: only the copy of the scripts it runs
        # from is the builder's own (its bundle holds the image steps too), and the control
        # plane's wait-ready alone sets its sshd for the fleet's fan-in.
        cp_stdin, cp_params = on_control_plane.inputs["stdin"], script_params(on_control_plane)
        if suffix == "wait-ready":
            fan_in = f"SSHD_MAX_STARTUPS={cp_params.pop('SSHD_MAX_STARTUPS')}\n"
            assert fan_in in cp_stdin, on_control_plane.urn
            cp_stdin = cp_stdin.replace(fan_in, "", 1)
        assert (
            built.inputs["stdin"].replace(
                "STEP_BUNDLE=.gpu-cluster/image-builder\n",
                "STEP_BUNDLE=.gpu-cluster/control-plane\n",
            )
            == cp_stdin
        ), f"{built.urn}: the builder's {suffix} differs from what the control plane runs"
        assert script_params(built) == cp_params, built.urn
    order = [parts[s] for s in (*INSTALL, "pull-images", "prepare")]
    for later, earlier in zip(order[1:], order, strict=False):
        assert baked.depends_on(later, earlier), f"{later.urn} runs before {earlier.urn}"
    runtime = parts["runtime"]
    assert param_line(runtime, "WITH_NVIDIA_TOOLKIT") == "WITH_NVIDIA_TOOLKIT=false", runtime.urn
    pull = parts["pull-images"]
    assert param_line(pull, "KUBEADM_IMAGES") == "KUBEADM_IMAGES=true", pull.urn
    for ref in pins.FLANNEL_IMAGES:
        assert ref in param_line(pull, "IMAGES"), f"{pull.urn}: {ref} not pulled"
    ami = next(r for r in baked.of_type(AMI_TYPE) if r.parent == image.urn)
    assert ami.inputs["snapshotWithoutReboot"] is True, ami.urn
    assert baked.depends_on(ami, parts["prepare"]), f"{ami.urn}: snapshot before prepare"
    assert baked.depends_on(parts["power-off"], ami), "builder powered off before its image"
    assert "sourceInstanceId" in ami.ignore_changes, ami.urn


def test_builder_is_the_control_planes_machine_type_on_the_smallest_root_volume(baked):
    [image] = baked.of_type(IMAGE_TYPE)
    builder = children(baked, image)["builder"]
    control_plane = baked.named(CONTROL_PLANE)
    assert builder.inputs["instanceType"] == control_plane.inputs["instanceType"], builder.urn
    assert builder.inputs["rootBlockDevice"]["volumeSize"] == control_plane_image.IMAGE_ROOT_GIB
    assert control_plane.inputs["rootBlockDevice"]["volumeSize"] == 64
    assert builder.inputs["instanceInitiatedShutdownBehavior"] == "terminate", builder.urn


def test_control_plane_boots_from_the_image_and_never_follows_a_new_one(baked):
    [ami] = baked.of_type(AMI_TYPE)
    control_plane = baked.named(CONTROL_PLANE)
    assert control_plane.inputs["ami"].startswith(f"{ami.name}-"), control_plane.inputs["ami"]
    assert baked.depends_on(control_plane, ami), "the control plane boots before its image"
    assert "ami" in control_plane.ignore_changes, "a new image would replace the cluster"


def test_image_is_tagged_with_what_it_holds(baked):
    [ami] = baked.of_type(AMI_TYPE)
    tags = ami.plain_inputs()["tags"]
    settings = load_stack_settings(
        "dev", config={"controlPlane": dev_control_plane(image="baked", rootVolumeGiB=64)}
    )
    key = control_plane_image.image_key(settings.control_plane, settings.kubernetes_version)
    assert tags[builder.IMAGE_TAG] == key.digest
    assert tags[builder.BUILT_BY_TAG] == "gpu-cluster/dev"
    assert tags["gpu-cluster.io/kubernetes_minor"] == settings.kubernetes_version
    assert "gpu-cluster.io/root_volume_gib" not in tags
    assert ami.name == control_plane_image.image_name("dev-gpu", key)


def test_another_minor_is_another_image_and_another_root_volume_is_not():
    settings = load_stack_settings("dev", config={"controlPlane": dev_control_plane()})
    config = settings.control_plane
    key = control_plane_image.image_key(config, "1.35")
    assert key == control_plane_image.image_key(
        config.model_copy(update={"root_volume_gib": 80}), "1.35"
    )
    assert key.digest != control_plane_image.image_key(config, "1.34").digest


def test_every_control_plane_the_settings_accept_can_boot_the_image():
    """EC2 refuses a root volume smaller than the AMI's snapshot: the image's root is the
    smallest rootVolumeGiB the settings accept, and a smaller one is a config error."""
    smallest = dev_control_plane(image="baked", rootVolumeGiB=control_plane_image.IMAGE_ROOT_GIB)
    graph = run_program("dev", config={"controlPlane": smallest})
    [image] = graph.of_type(IMAGE_TYPE)
    builder = children(graph, image)["builder"]
    booted = graph.named(CONTROL_PLANE).inputs["rootBlockDevice"]["volumeSize"]
    assert booted >= builder.inputs["rootBlockDevice"]["volumeSize"], (booted, builder.urn)
    with pytest.raises(ConfigError, match="rootVolumeGiB"):
        load_stack_settings(
            "dev",
            config={
                "controlPlane": {
                    **smallest,
                    "rootVolumeGiB": control_plane_image.IMAGE_ROOT_GIB - 1,
                }
            },
        )


def test_an_image_another_stack_built_is_reused():
    config = dev_control_plane(image="baked")
    settings = load_stack_settings("dev", config={"controlPlane": config})
    key = control_plane_image.image_key(settings.control_plane, settings.kubernetes_version)
    saved = list(mocks.EXISTING_IMAGES)
    try:
        mocks.EXISTING_IMAGES[:] = [
            ("ami-0fromanotherstack", {**key.tags(), builder.BUILT_BY_TAG: "gpu-cluster/x"})
        ]
        reused = run_program("dev", config={"controlPlane": config})
        assert not reused.of_type(IMAGE_TYPE)
        assert reused.named(CONTROL_PLANE).inputs["ami"] == "ami-0fromanotherstack"
    finally:
        mocks.EXISTING_IMAGES[:] = saved


def test_gpu_images_of_a_managed_stack_hold_flannel_and_of_an_existing_one_not():
    for stack, holds in (("dev", True), ("prod", False)):
        settings = load_stack_settings(stack)
        key = gpu_image.image_key(settings.node_pools[0], settings, gpu_node.NVIDIA_CTK_VERSION)
        assert all((ref in key.images) is holds for ref in pins.FLANNEL_IMAGES), (stack, key)


def test_flannel_images_are_the_pinned_release_by_digest():
    """Issue 41, finding 6: what the control plane's CNI runs (and the images hold) is named by
    digest, the flannel image at the release whose manifest is pinned."""
    assert pins.FLANNEL_IMAGE.startswith(f"ghcr.io/flannel-io/flannel:{pins.FLANNEL_VERSION}@")
    assert pins.FLANNEL_CNI_PLUGIN_IMAGE.startswith("ghcr.io/flannel-io/flannel-cni-plugin:")
    for ref in pins.FLANNEL_IMAGES:
        assert re.fullmatch(r"[a-z0-9./-]+:[A-Za-z0-9._-]+@sha256:[0-9a-f]{64}", ref), ref


def test_the_control_planes_cni_step_gets_flannels_digests():
    graph = run_program("dev")
    (cni,) = [r for r in graph.of_type("command:remote:Command") if r.name.endswith("-cni")]
    assert param_line(cni, "FLANNEL_IMAGE") == f"FLANNEL_IMAGE={pins.FLANNEL_IMAGE}", cni.urn
    assert param_line(cni, "FLANNEL_CNI_PLUGIN_IMAGE") == (
        f"FLANNEL_CNI_PLUGIN_IMAGE={pins.FLANNEL_CNI_PLUGIN_IMAGE}"
    ), cni.urn


def test_both_images_pass_the_policy_pack():
    graph = run_program(
        "dev",
        config={
            "controlPlane": dev_control_plane(image="baked"),
            "nodePools": [{**stack_file("dev")["gpu-cluster:nodePools"][0], "image": "baked"}],
        },
    )
    assert graph.of_type(IMAGE_TYPE) and graph.of_type(GPU_IMAGE_TYPE)
    found = analyze([as_policy_input(r) for r in graph])
    assert found == [], "\n".join(f"{p} {u}: {m}" for p, u, m, _ in found)

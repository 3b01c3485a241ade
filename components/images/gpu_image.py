"""Baked GPU images: the driver, container runtime and kube tools installed once, on a builder
instance, and snapshotted into an AMI that the pools with `image: baked` boot from.

One image per distinct `GpuImageKey` (Ubuntu release, architecture, driver branch and kernel
module type, fabric manager, NVIDIA Container Toolkit, kubelet minor, pre-pulled container
images) and install-script contents: pools that share a key share the image, across the stacks
of the account. The build is components/images/builder.py, shared with the control plane's
image. A node booted from it runs the same install steps, which only verify. Instances never
follow a new image on their own: new nodes boot from it.

Why: docs/decisions/008-baked-images-from-the-same-steps.md
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pulumi

from components.aws.network import Network
from components.hosts import steps
from components.hosts.pins import FLANNEL_IMAGES
from components.hosts.remote import Login
from components.images.builder import (
    ARCHITECTURE,
    BUILD_SCRIPTS,
    Build,
    BuildSite,
    ImageKey,
    InstallStep,
    build_image,
    earlier_image,
    existing_image,
)
from components.kube.manifests import device_plugin_image
from components.settings import ManagedControlPlane, NodePool, Settings

# The scripts whose work an image holds; a change to one of them is a new image.
INSTALL_SCRIPTS = (*(step.script for step in steps.INSTALL_STEPS), *BUILD_SCRIPTS)
IMAGE_ROOT_GIB = 50  # the image's root volume; nodes grow it to their pool's rootVolumeGiB


@dataclass(frozen=True)
class GpuImageKey(ImageKey):
    """What a baked GPU image contains; equal keys share one image."""

    SCRIPTS = INSTALL_SCRIPTS

    ubuntu: str
    architecture: str
    driver_branch: str
    kernel_modules: str
    fabric_manager: bool
    container_toolkit: str
    kubernetes_minor: str
    # The driver step's other inputs that change what the image holds.
    gsp_firmware: bool = True
    nvlink_subnet_manager: bool = False
    # Container images pulled into the image (the device plugin, the validation Job, and with a
    # managed control plane the CNI's), so a node starts them without a download.
    images: tuple[str, ...] = ()


def image_key(pool: NodePool, settings: Settings, container_toolkit: str) -> GpuImageKey:
    gpu = pool.gpu_type
    images = [device_plugin_image(settings.device_plugin)]
    if settings.validation.enabled:
        images.append(settings.validation.image)
    if isinstance(settings.control_plane, ManagedControlPlane):
        # The CNI this stack installs runs on every node before it is Ready.
        images.extend(FLANNEL_IMAGES)
    return GpuImageKey(
        images=tuple(images),
        ubuntu=pool.os_version,
        architecture=ARCHITECTURE,
        driver_branch=pool.driver_version,
        kernel_modules=kernel_modules(pool),
        fabric_manager=gpu.needs_fabric_manager,
        gsp_firmware=gpu.gsp_firmware,
        nvlink_subnet_manager=gpu.needs_nvlink_subnet_manager,
        container_toolkit=container_toolkit,
        kubernetes_minor=settings.kubernetes_version,
    )


def kernel_modules(pool: NodePool) -> str:
    """The pool's kernel module type: nodePools[].kernelModules, else the catalog's default for
    the GPU's architecture (open on Turing and newer, proprietary on Volta)."""
    return pool.kernel_module_type


def image_name(cluster_name: str, key: GpuImageKey) -> str:
    return f"{cluster_name}-gpu-image-{key.digest[:12]}"


@dataclass(frozen=True)
class GpuImageArgs:
    """What building one image needs: its key, the install steps exactly as the pool's nodes run
    them, where the builder runs (a GPU instance type of that pool: the driver step checks the
    GPUs it sees) and how steps reach it."""

    key: GpuImageKey
    install_steps: tuple[InstallStep, ...]
    builder_instance_type: str
    site: BuildSite


class GpuImage(pulumi.ComponentResource):
    """Builds one baked GPU image (see the module docstring).

    Outputs: `ami_id`, the image to boot."""

    ami_id: pulumi.Output[str]

    def __init__(self, name: str, args: GpuImageArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-cluster:index:GpuImage", name, None, opts)
        images = args.key.images
        image = build_image(
            name,
            Build(
                key=args.key,
                kind="GPU",
                install_steps=args.install_steps,
                pull_params={"IMAGES": " ".join(images)} if images else None,
                builder_instance_type=args.builder_instance_type,
                root_volume_gib=IMAGE_ROOT_GIB,
                site=args.site,
            ),
            parent=self,
        )
        self.ami_id = image.id
        self.register_outputs({"amiId": self.ami_id, "digest": args.key.digest})


def baked_images(
    settings: Settings,
    network: Network,
    *,
    install_steps: Callable[[NodePool, str, Login], tuple[InstallStep, ...]],
    container_toolkit: str,
) -> dict[str, pulumi.Output[str]]:
    """Pool name -> the AMI id its nodes boot from, for every pool with `image: baked`: the
    image of its key when the account has it (read by reference), else one GpuImage per
    distinct key (built on the first pool's instance type), with new nodes booting the newest
    earlier image meanwhile when there is one."""
    site = BuildSite.of(settings, network)
    by_key: dict[GpuImageKey, list[NodePool]] = {}
    for pool in settings.instance_pools:
        if pool.image == "baked" and pool.count:
            by_key.setdefault(image_key(pool, settings, container_toolkit), []).append(pool)
    amis: dict[str, pulumi.Output[str]] = {}
    for key, pools in by_key.items():
        found = existing_image(key)
        if found is not None:
            ami = pulumi.Output.from_input(found)
        else:
            first = pools[0]
            image = GpuImage(
                image_name(settings.cluster_name, key),
                GpuImageArgs(
                    key=key,
                    install_steps=install_steps(
                        first, settings.kubernetes_version, Login.of(settings)
                    ),
                    builder_instance_type=first.instance_type,
                    site=site,
                ),
            )
            # Booted from an earlier image, new machines do not wait for this build (nor does
            # a roll of running ones, which keep their image).
            earlier = earlier_image(key)
            ami = pulumi.Output.from_input(earlier) if earlier else image.ami_id
        amis.update({pool.name: ami for pool in pools})
    return amis

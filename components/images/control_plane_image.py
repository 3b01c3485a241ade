"""A baked control-plane image (`controlPlane.image: baked`): the managed control plane's
runtime and kube tools installed once, kubeadm's and the CNI's images pulled, snapshotted into
the AMI the control plane boots from, so `kubeadm init` and the CNI start without a download.
Built by the shared build (components/images/builder.py) with the control plane's own install
steps; one image per `ControlPlaneImageKey`.

Why: docs/decisions/008-baked-images-from-the-same-steps.md ("The control-plane image")
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components.aws.network import Network
from components.hosts import pins, steps
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
from components.settings import ManagedControlPlane, Settings

# The image's root volume: the smallest controlPlane.rootVolumeGiB (settings), so that every
# control plane boots it; Ubuntu with containerd, the kube tools and kubeadm's and flannel's
# images takes well under half of it.
IMAGE_ROOT_GIB = 20
# The scripts whose work the image holds; a change to one of them is a new image.
INSTALL_SCRIPTS = (
    steps.CP_WAIT_READY.script,
    steps.CP_RUNTIME.script,
    steps.CP_KUBE_TOOLS.script,
    *BUILD_SCRIPTS,
)


@dataclass(frozen=True)
class ControlPlaneImageKey(ImageKey):
    """What a baked control-plane image contains; equal keys share one image."""

    SCRIPTS = INSTALL_SCRIPTS

    ubuntu: str
    architecture: str
    containerd: str
    sandbox_image: str
    kubernetes_minor: str
    # Container images pulled besides kubeadm's own (those follow kubernetes_minor): the CNI's.
    images: tuple[str, ...]


def install_steps(config: ManagedControlPlane, minor: str, login: Login) -> tuple[InstallStep, ...]:
    """What makes a booted Ubuntu a control-plane host before `kubeadm init` (wait-ready with
    the login's keys, the runtime without the NVIDIA toolkit, the kube tools): the managed
    control plane runs these (components/control_plane.py), and the image's builder the same."""
    return (
        InstallStep(steps.CP_WAIT_READY, login.wait_ready_params()),
        InstallStep(
            steps.CP_RUNTIME,
            pins.runtime_params(config.os_version, minor, with_toolkit=False),
        ),
        InstallStep(
            steps.CP_KUBE_TOOLS,
            {"KUBERNETES_MINOR": minor, "SANDBOX_IMAGE": pins.PAUSE_IMAGES[minor]},
        ),
    )


def image_key(config: ManagedControlPlane, kubernetes_minor: str) -> ControlPlaneImageKey:
    return ControlPlaneImageKey(
        ubuntu=config.os_version,
        architecture=ARCHITECTURE,
        containerd=pins.CONTAINERD_VERSIONS[config.os_version],
        sandbox_image=pins.PAUSE_IMAGES[kubernetes_minor],
        kubernetes_minor=kubernetes_minor,
        images=pins.FLANNEL_IMAGES,
    )


def image_name(cluster_name: str, key: ControlPlaneImageKey) -> str:
    return f"{cluster_name}-cp-image-{key.digest[:12]}"


@dataclass(frozen=True)
class ControlPlaneImageArgs:
    """What building the image needs: its key, the managed control plane's section (its instance
    type and install parameters) and where the builder runs."""

    key: ControlPlaneImageKey
    config: ManagedControlPlane
    site: BuildSite


class ControlPlaneImage(pulumi.ComponentResource):
    """Builds one baked control-plane image (see the module docstring).

    Outputs: `ami_id`, the image to boot."""

    ami_id: pulumi.Output[str]

    def __init__(
        self, name: str, args: ControlPlaneImageArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("gpu-cluster:index:ControlPlaneImage", name, None, opts)
        key = args.key
        image = build_image(
            name,
            Build(
                key=key,
                kind="control-plane",
                install_steps=install_steps(args.config, key.kubernetes_minor, args.site.login),
                pull_params={"IMAGES": " ".join(key.images), "KUBEADM_IMAGES": "true"},
                builder_instance_type=args.config.instance_type,
                root_volume_gib=IMAGE_ROOT_GIB,
                site=args.site,
            ),
            parent=self,
        )
        self.ami_id = image.id
        self.register_outputs({"amiId": self.ami_id, "digest": key.digest})


def baked_control_plane_image(settings: Settings, network: Network) -> pulumi.Output[str] | None:
    """The AMI id the managed control plane boots from with `image: baked`: the image of its
    key when the account has it, else a ControlPlaneImage built here (and meanwhile the newest
    earlier control-plane image, when there is one); None otherwise."""
    config = settings.control_plane
    if not isinstance(config, ManagedControlPlane) or config.image != "baked":
        return None
    site = BuildSite.of(settings, network)
    key = image_key(config, settings.kubernetes_version)
    found = existing_image(key)
    if found is not None:
        return pulumi.Output.from_input(found)
    image = ControlPlaneImage(
        image_name(settings.cluster_name, key),
        ControlPlaneImageArgs(key=key, config=config, site=site),
    )
    earlier = earlier_image(key)
    return pulumi.Output.from_input(earlier) if earlier else image.ami_id

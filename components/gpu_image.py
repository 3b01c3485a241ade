"""Baked GPU images: the driver, container runtime and kube tools installed once, on a builder
instance, and snapshotted into an AMI that the pools with `image: baked` boot from.

One image per distinct `ImageKey` (Ubuntu release, architecture, driver branch and kernel module
type, fabric manager, NVIDIA Container Toolkit, kubelet minor) and install-script contents: pools
that share a key share the image. The builder runs the very scripts a stock node runs, with the
same parameters, then `prepare-image.sh` (fresh machine-id, cloud-init state and SSH host keys
for every clone); `aws.ec2.AmiFromInstance` snapshots it without a reboot (pulumi-aws
AmiFromInstance: `snapshotWithoutReboot` is safe when no writes are under way: the services are
stopped and the disks synced first), and `power-off-builder.sh` powers the builder off, which
terminates it (`instanceInitiatedShutdownBehavior: terminate`): no GPU instance keeps running.

The AMI carries its key as tags (`gpu-cluster.io/image` = the digest, one tag per field) and is
kept when the stack is destroyed (`retain_on_delete`), so another stack of the same account and
region that needs the same image finds it (`existing_image`) and builds nothing. A node booted
from it runs the same install steps, which find everything in place and only verify.

A changed input is a new digest, so a new image. Instances never follow it on their own (their
`ami` is ignored after create): new nodes boot from the new image; existing nodes move onto it
only by being replaced one at a time.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

import pulumi
import pulumi_aws as aws

from components import host_keys, machines, steps
from components.host_scripts import stripped_script
from components.kubernetes_manifests import device_plugin_image
from components.network import Network
from components.remote import Login, run_step, ssh_host
from components.settings import NodePool, Settings
from components.steps import Step

IMAGE_TAG = "gpu-cluster.io/image"
BUILT_BY_TAG = "gpu-cluster.io/built-by"
# The scripts whose work an image holds; a change to one of them is a new image.
INSTALL_SCRIPTS = (
    *(step.script for step in steps.INSTALL_STEPS),
    steps.IMAGE_PULL.script,
    steps.IMAGE_PREPARE.script,
    "lib/common.sh",
)
IMAGE_ROOT_GIB = 50  # the image's root volume; nodes grow it to their pool's rootVolumeGiB
ARCHITECTURE = "x86_64"  # the Canonical images the program looks up (components/machines.py)


@dataclass(frozen=True)
class ImageKey:
    """What a baked image contains; equal keys share one image."""

    ubuntu: str
    architecture: str
    driver_branch: str
    kernel_modules: str
    fabric_manager: bool
    container_toolkit: str
    kubernetes_minor: str
    # Container images pulled into the image (the device plugin, the validation Job), so a node
    # starts them without a download.
    images: tuple[str, ...] = ()

    @property
    def digest(self) -> str:
        """The key and the install scripts as hosts run them (without comments and blank
        lines, `host_scripts.stripped_script`), hashed: the image's identity. Editing a comment
        builds no new image, as it re-runs no step."""
        scripts = {name: stripped_script(name) for name in INSTALL_SCRIPTS}
        payload = json.dumps({"key": asdict(self), "scripts": scripts}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()

    def tags(self) -> dict[str, str]:
        return {
            IMAGE_TAG: self.digest,
            **{f"gpu-cluster.io/{field}": str(value) for field, value in asdict(self).items()},
        }


def image_key(pool: NodePool, settings: Settings, container_toolkit: str) -> ImageKey:
    gpu = pool.gpu_type
    images = [device_plugin_image(settings.device_plugin)]
    if settings.validation.enabled:
        images.append(settings.validation.image)
    return ImageKey(
        images=tuple(images),
        ubuntu=pool.os_version,
        architecture=ARCHITECTURE,
        driver_branch=pool.driver_version,
        kernel_modules=kernel_modules(pool),
        fabric_manager=gpu.needs_fabric_manager,
        container_toolkit=container_toolkit,
        kubernetes_minor=settings.kubernetes_version,
    )


def kernel_modules(pool: NodePool) -> str:
    """The pool's kernel module type: nodePools[].kernelModules, else the catalog's default for
    the GPU's architecture (open on Turing and newer, proprietary on Volta)."""
    return pool.kernel_module_type


def image_name(cluster_name: str, key: ImageKey) -> str:
    return f"{cluster_name}-gpu-image-{key.digest[:12]}"


def existing_image(key: ImageKey, built_by: str) -> str | None:
    """The id of an available image of this account and region holding `key` that another stack
    built (this stack's own image stays under its own resources), or None."""
    filters = [
        aws.ec2.GetAmiIdsFilterArgs(name=f"tag:{IMAGE_TAG}", values=[key.digest]),
        aws.ec2.GetAmiIdsFilterArgs(name="state", values=["available"]),
    ]
    found = aws.ec2.get_ami_ids(owners=["self"], filters=filters)
    own = aws.ec2.get_ami_ids(
        owners=["self"],
        filters=[
            *filters,
            aws.ec2.GetAmiIdsFilterArgs(name=f"tag:{BUILT_BY_TAG}", values=[built_by]),
        ],
    )
    if own.ids or not found.ids:
        return None
    return sorted(found.ids)[0]


@dataclass(frozen=True)
class InstallStep:
    """One install step as a node runs it: its row of the step table, its parameters."""

    step: Step
    params: dict[str, str]


@dataclass(frozen=True)
class GpuImageArgs:
    """What building one image needs: its key, the install steps exactly as the pool's nodes run
    them, where the builder runs (a GPU instance type of that pool: the driver step checks the
    GPUs it sees), how steps log in, and the tags of what it creates."""

    key: ImageKey
    install_steps: tuple[InstallStep, ...]
    builder_instance_type: str
    subnet_id: pulumi.Input[str]
    security_group_ids: list[pulumi.Input[str]]
    login: Login
    assigns_public_ips: bool  # the builder gets a public address (network.publicIps)
    dials_public_ips: bool  # steps dial the public address (no bastion relays)
    tags: Mapping[str, str]
    built_by: str


class GpuImage(pulumi.ComponentResource):
    """Builds one baked image (see the module docstring).

    Outputs: `ami_id`, the image to boot."""

    ami_id: pulumi.Output[str]

    def __init__(self, name: str, args: GpuImageArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-cluster:index:GpuImage", name, None, opts)
        tags = {**args.tags, **args.key.tags(), BUILT_BY_TAG: args.built_by}
        key = machines.key_pair(name, args.login.ssh.public_key, args.tags, parent=self)
        host_key = host_keys.generate(f"{name}-builder", parent=self)
        builder = machines.machine(
            f"{name}-builder",
            machines.MachineArgs(
                image=machines.machine_image(args.key.ubuntu, None, parent=self),
                instance_type=args.builder_instance_type,
                key_name=key.key_name,
                placement=machines.Placement(
                    subnet_id=args.subnet_id,
                    security_group_ids=args.security_group_ids,
                    public_ip=args.assigns_public_ips,
                ),
                root_volume_gib=IMAGE_ROOT_GIB,
                user_data=host_key.user_data,
                tags={**tags, "Name": f"{name}-builder"},
                # Powering off terminates it (power-off-builder.sh ends the build that way).
                one_shot=True,
            ),
            parent=self,
        )
        address = machines.ssh_address(builder, public=args.dials_public_ips)
        host = ssh_host(
            f"{name}-builder",
            address,
            args.login,
            identity=builder.id,
            host_key=host_keys.pinned(builder, host_key, args.login.host_keys),
        )
        after: pulumi.Resource = builder
        for install in args.install_steps:
            after = run_step(
                install.step, name, host=host, params=install.params, after=[after], parent=self
            )
        if args.key.images:
            after = run_step(
                steps.IMAGE_PULL,
                name,
                host=host,
                params={"IMAGES": " ".join(args.key.images)},
                after=[after],
                parent=self,
            )
        prepared = run_step(
            steps.IMAGE_PREPARE,
            name,
            host=host,
            params={"IMAGE_DIGEST": args.key.digest},
            after=[after],
            parent=self,
        )
        image = aws.ec2.AmiFromInstance(
            name,
            name=name,
            description=f"gpu-cluster GPU image {args.key.digest[:12]}: "
            + ", ".join(f"{k}={v}" for k, v in asdict(args.key).items()),
            source_instance_id=builder.id,
            # The services are stopped and the disks synced (prepare-image.sh): no reboot needed,
            # and the builder keeps its address for the power-off step.
            snapshot_without_reboot=True,
            tags={**tags, "Name": name},
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[prepared],
                # Other stacks of the account may boot from it: destroying this stack keeps it.
                retain_on_delete=True,
                # A builder gone from the state (a refresh after it terminated) is rebuilt by the
                # next up; the image it made stays the image.
                ignore_changes=["sourceInstanceId"],
            ),
        )
        run_step(steps.IMAGE_POWER_OFF, name, host=host, after=[image], parent=self)
        self.ami_id = image.id
        self.register_outputs({"amiId": self.ami_id, "digest": args.key.digest})


def baked_images(
    settings: Settings,
    network: Network,
    *,
    install_steps: Callable[[NodePool, str], tuple[InstallStep, ...]],
    container_toolkit: str,
) -> dict[str, pulumi.Output[str]]:
    """Pool name -> the AMI id its nodes boot from, for every pool with `image: baked`: one
    GpuImage per distinct key (built on the first pool's instance type), or the image another
    stack of the account already built."""
    built_by = f"{pulumi.get_project()}/{pulumi.get_stack()}"
    by_key: dict[ImageKey, list[NodePool]] = {}
    for pool in settings.node_pools:
        if pool.image == "baked" and pool.count:
            by_key.setdefault(image_key(pool, settings, container_toolkit), []).append(pool)
    amis: dict[str, pulumi.Output[str]] = {}
    for key, pools in by_key.items():
        found = existing_image(key, built_by)
        if found is not None:
            ami = pulumi.Output.from_input(found)
        else:
            first = pools[0]
            image = GpuImage(
                image_name(settings.cluster_name, key),
                GpuImageArgs(
                    key=key,
                    install_steps=install_steps(first, settings.kubernetes_version),
                    builder_instance_type=first.instance_type,
                    subnet_id=network.subnet_ids[0],
                    security_group_ids=[network.cluster_security_group_id],
                    login=Login.of(settings),
                    assigns_public_ips=settings.network.assigns_public_ips,
                    dials_public_ips=settings.network.connects_to_public_ips,
                    tags=settings.stack_tags,
                    built_by=built_by,
                ),
            )
            ami = image.ami_id
        amis.update({pool.name: ami for pool in pools})
    return amis

"""How a baked image is made, for every kind (`GpuImage`, `ControlPlaneImage`): a builder machine
runs the very install steps the hosts run, pulls their first images, clears its identity, is
snapshotted (`aws.ec2.AmiFromInstance`) and powers itself off. An image is named by its key and
its scripts' digest (`digest_of`), kept on destroy and read by reference once it exists.

Why: docs/decisions/008-baked-images-from-the-same-steps.md ("How an image is built")
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import pulumi
import pulumi_aws as aws

from components.aws import machines
from components.aws.network import Network
from components.hosts import host_keys, steps
from components.hosts.remote import Login, machine_host, run_step
from components.hosts.rendering import stripped_script
from components.hosts.steps import Step
from components.settings import Settings

IMAGE_TAG = "gpu-cluster.io/image"
BUILT_BY_TAG = "gpu-cluster.io/built-by"
ARCHITECTURE = "x86_64"  # the Canonical images the program looks up (components/aws/machines.py)
# The scripts every image runs besides its install steps.
BUILD_SCRIPTS = (steps.IMAGE_PULL.script, steps.IMAGE_PREPARE.script, "lib/common.sh")


class ImageKey:
    """What a baked image contains; equal keys share one image. A frozen dataclass subclasses
    it with the key's fields and names the install scripts whose work the image holds."""

    SCRIPTS: ClassVar[tuple[str, ...]]

    @property
    def digest(self) -> str:
        """The key and the install scripts as hosts run them (without comments and blank
        lines, `host_scripts.stripped_script`), hashed: the image's identity. Editing a comment
        builds no new image, as it re-runs no step."""
        scripts = {name: stripped_script(name) for name in self.SCRIPTS}
        payload = json.dumps({"key": self.fields(), "scripts": scripts}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()

    def fields(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    def tags(self) -> dict[str, str]:
        return {
            IMAGE_TAG: self.digest,
            **{f"gpu-cluster.io/{field}": str(value) for field, value in self.fields().items()},
        }

    def description(self, kind: str) -> str:
        return f"gpu-cluster {kind} image {self.digest[:12]}: " + ", ".join(
            f"{k}={v}" for k, v in self.fields().items()
        )


def existing_image(key: ImageKey) -> str | None:
    """The id of an available image of this account and region that holds `key`, whoever built
    it, this stack included: once an image exists it is read by reference and no builder is
    registered again (a refresh drops the builder that terminated itself; registered, the next
    `up` would launch it again and re-run its installs)."""
    found = aws.ec2.get_ami_ids(
        owners=["self"],
        filters=[
            aws.ec2.GetAmiIdsFilterArgs(name=f"tag:{IMAGE_TAG}", values=[key.digest]),
            aws.ec2.GetAmiIdsFilterArgs(name="state", values=["available"]),
        ],
    )
    return sorted(found.ids)[0] if found.ids else None


def earlier_image(key: ImageKey) -> str | None:
    """The newest available image of the same kind (the same key fields), Ubuntu release and
    architecture as `key`, built for another key (an older driver, toolkit or pre-pull list):
    what new machines boot while the image of `key` is built, so no machine waits for a build
    it will not use (running machines keep their image: `ami` is ignored after launch). Their
    install steps bring them to `key`, as they do on every host."""
    fields = key.fields()
    filters = [
        aws.ec2.GetAmiIdsFilterArgs(name="tag-key", values=[f"gpu-cluster.io/{name}"])
        for name in sorted(fields)
    ]
    filters += [
        aws.ec2.GetAmiIdsFilterArgs(name=f"tag:gpu-cluster.io/{name}", values=[str(fields[name])])
        for name in ("ubuntu", "architecture")
    ]
    filters.append(aws.ec2.GetAmiIdsFilterArgs(name="state", values=["available"]))
    found = aws.ec2.get_ami_ids(owners=["self"], filters=filters, sort_ascending=False)
    return found.ids[0] if found.ids else None


@dataclass(frozen=True)
class InstallStep:
    """One install step as a host runs it: its row of the step table, its parameters."""

    step: Step
    params: dict[str, str]


@dataclass(frozen=True)
class BuildSite:
    """Where builders run and how steps reach them: the stack's first subnet and cluster
    security group, its login, its tags, and who builds (`project/stack`)."""

    subnet_id: pulumi.Input[str]
    security_group_ids: list[pulumi.Input[str]]
    login: Login
    assigns_public_ips: bool  # the builder gets a public address (network.publicIps)
    dials_public_ips: bool  # steps dial the public address (no bastion relays)
    tags: Mapping[str, str]
    built_by: str

    @classmethod
    def of(cls, settings: Settings, network: Network) -> BuildSite:
        return cls(
            subnet_id=network.subnet_ids[0],
            security_group_ids=[network.cluster_security_group_id],
            login=Login.of(settings),
            assigns_public_ips=settings.network.assigns_public_ips,
            dials_public_ips=settings.network.connects_to_public_ips,
            tags=settings.stack_tags,
            built_by=f"{pulumi.get_project()}/{pulumi.get_stack()}",
        )


@dataclass(frozen=True)
class Build:
    """One image to make: its key, the install steps exactly as its hosts run them, what the
    pull step gets (nothing to pull: no step), the builder's instance type and root volume."""

    key: ImageKey
    kind: str  # "GPU", "control-plane": in the AMI's description
    install_steps: tuple[InstallStep, ...]
    pull_params: Mapping[str, str] | None
    builder_instance_type: str
    root_volume_gib: int
    site: BuildSite


def build_image(name: str, build: Build, *, parent: pulumi.Resource) -> aws.ec2.AmiFromInstance:
    """The builder machine `f"{name}-builder"`, its install steps, the pull and prepare steps,
    the AMI `name` and the power-off step, all children of `parent`; returns the AMI."""
    site = build.site
    tags = {**site.tags, **build.key.tags(), BUILT_BY_TAG: site.built_by}
    key = machines.key_pair(name, site.login.ssh.public_key, site.tags, parent=parent)
    ubuntu = build.key.fields()["ubuntu"]
    builder, host_key = host_keys.launch(
        f"{name}-builder",
        machines.MachineArgs(
            image=machines.machine_image(ubuntu, None, parent=parent),
            instance_type=build.builder_instance_type,
            key_name=key.key_name,
            placement=machines.Placement(
                subnet_id=site.subnet_id,
                security_group_ids=site.security_group_ids,
                public_ip=site.assigns_public_ips,
            ),
            root_volume_gib=build.root_volume_gib,
            tags={**tags, "Name": f"{name}-builder"},
            # Powering off terminates it (power-off-builder.sh ends the build that way).
            one_shot=True,
        ),
        parent=parent,
    )
    address = machines.ssh_address(builder, public=site.dials_public_ips)
    host = machine_host(
        f"{name}-builder",
        builder,
        address,
        site.login,
        boot_key=host_key,
        parent=parent,
        # Its bundle holds the image steps' programs too (pull, prepare, power off).
        role=steps.Where.IMAGE_BUILDER,
    )
    after: pulumi.Resource = builder
    for install in build.install_steps:
        after = run_step(
            install.step, name, host=host, params=install.params, after=[after], parent=parent
        )
    if build.pull_params:
        after = run_step(
            steps.IMAGE_PULL,
            name,
            host=host,
            params=dict(build.pull_params),
            after=[after],
            parent=parent,
        )
    prepared = run_step(
        steps.IMAGE_PREPARE,
        name,
        host=host,
        params={"IMAGE_DIGEST": build.key.digest, "SSH_USER": build.site.login.ssh.user},
        after=[after],
        parent=parent,
    )
    image = aws.ec2.AmiFromInstance(
        name,
        name=name,
        description=build.key.description(build.kind),
        source_instance_id=builder.id,
        # The services are stopped and the disks synced (prepare-image.sh): no reboot needed,
        # and the builder keeps its address for the power-off step.
        snapshot_without_reboot=True,
        tags={**tags, "Name": name},
        opts=pulumi.ResourceOptions(
            parent=parent,
            depends_on=[prepared],
            # Other stacks of the account may boot from it: destroying this stack keeps it.
            retain_on_delete=True,
            # A builder gone from the state (a refresh after it terminated) is rebuilt by the
            # next up; the image it made stays the image.
            ignore_changes=["sourceInstanceId"],
        ),
    )
    run_step(steps.IMAGE_POWER_OFF, name, host=host, after=[image], parent=parent)
    return image

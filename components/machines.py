"""EC2 building blocks shared by every machine the stack creates (the managed control plane and
the GPU nodes): the Canonical Ubuntu AMI lookup, the SSH key pair, and the hardened instance
options (IMDSv2 only, encrypted gp3 root volume).

Import these instead of repeating them: `ubuntu_ami(...)`, `key_pair(...)`, `metadata_options()`,
`root_volume(...)`.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from components.settings import Settings

CANONICAL_OWNER = "099720109477"
# Ubuntu server images for amd64 by release; gp3 images first (24.04), gp2-era names as fallback.
UBUNTU_IMAGE_NAMES = {
    "24.04": "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-*",
    "22.04": "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-*",
}


def ubuntu_ami(
    os_version: str, ami_id: str | None, *, parent: pulumi.Resource
) -> pulumi.Output[str]:
    """The AMI id to boot: `ami_id` when configured, else the newest Canonical Ubuntu image of
    `os_version` ("24.04" or "22.04") for amd64 in the stack's region."""
    if ami_id is not None:
        return pulumi.Output.from_input(ami_id)
    if os_version not in UBUNTU_IMAGE_NAMES:
        raise ValueError(
            f"Ubuntu {os_version!r} unsupported; expected one of {sorted(UBUNTU_IMAGE_NAMES)}"
        )
    image = aws.ec2.get_ami_output(
        most_recent=True,
        owners=[CANONICAL_OWNER],
        filters=[
            aws.ec2.GetAmiFilterArgs(name="name", values=[UBUNTU_IMAGE_NAMES[os_version]]),
            aws.ec2.GetAmiFilterArgs(name="architecture", values=["x86_64"]),
            aws.ec2.GetAmiFilterArgs(name="virtualization-type", values=["hvm"]),
            aws.ec2.GetAmiFilterArgs(name="root-device-type", values=["ebs"]),
        ],
        opts=pulumi.InvokeOutputOptions(parent=parent),
    )
    return image.id


def key_pair(name: str, settings: Settings, *, parent: pulumi.Resource) -> aws.ec2.KeyPair:
    """An EC2 key pair `f"{name}-key"` from `ssh.publicKey` (AWS names it uniquely), tagged."""
    return aws.ec2.KeyPair(
        f"{name}-key",
        public_key=settings.ssh.public_key,
        tags={**settings.stack_tags, "Name": f"{name}-key"},
        opts=pulumi.ResourceOptions(parent=parent),
    )


def metadata_options(hop_limit: int = 1) -> aws.ec2.InstanceMetadataOptionsArgs:
    """IMDSv2 only; with one hop (the default) containers on the host cannot reach the
    instance credentials."""
    return aws.ec2.InstanceMetadataOptionsArgs(
        http_endpoint="enabled",
        http_tokens="required",
        http_put_response_hop_limit=hop_limit,
    )


def root_volume(size_gib: int) -> aws.ec2.InstanceRootBlockDeviceArgs:
    """An encrypted gp3 root volume that goes with the instance."""
    return aws.ec2.InstanceRootBlockDeviceArgs(
        volume_type="gp3",
        volume_size=size_gib,
        encrypted=True,
        delete_on_termination=True,
    )

"""EC2 building blocks shared by every machine the stack creates (the managed control plane and
the GPU nodes): the Canonical Ubuntu AMI lookup, the SSH key pair, and the hardened instance
options (IMDSv2 only, encrypted gp3 root volume).

Import these instead of repeating them: `ubuntu_ami(...)`, `key_pair(...)`, `metadata_options()`,
`root_volume(...)`.
"""

from __future__ import annotations

import base64
import binascii
import re

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


# The instance input that carries the generated host key (components/host_keys.py).
USER_DATA = "userData"
# Instance outputs that hold a secret: the provider stores the SHA-1 of the user data, which
# holds the private host key.
SECRET_OUTPUTS = [USER_DATA]


def day_two_ignored(*, ami_pinned: bool) -> list[str]:
    """Instance inputs a later `pulumi up` must not act on, since a change replaces the machine
    or stops it (terraform-provider-aws internal/service/ec2/ec2_instance.go: `ami` and
    `key_name` are ForceNew; a `user_data` change runs `modifyInstanceAttributeWithStopStart`):
    - `ami`: a looked-up AMI moves with every Canonical release; a running machine does not
      follow it (a configured amiId still does: changing it is a deliberate rebuild).
    - `keyName`: the key pair is auto-named, and a new `ssh.publicKey` replaces it under a new
      name (ec2_key_pair.go: `public_key` is ForceNew). The key reaches running machines through
      their `authorized-keys` step instead; new machines boot with the new pair.
    - `userData`: the host key a machine booted with (components/host_keys.py) is read once, at
      first boot; a machine created before it existed is not stopped to receive it."""
    ignored = ["keyName", USER_DATA]
    return ignored if ami_pinned else ["ami", *ignored]


def authorized_keys(settings: Settings) -> str:
    """AUTHORIZED_KEYS for authorize-ssh-keys.sh: `ssh.publicKey`, then the public half of
    `sshPrivateKey` (the key every step logs in with) when it differs. Rotating is two `up`s:
    set the new publicKey (both keys are authorized), then the new sshPrivateKey (only it is)."""
    keys = [settings.ssh.public_key.strip()]
    login = public_key_of(settings.ssh_private_key.get_secret_value())
    if login is not None and _key_body(login) != _key_body(keys[0]):
        keys.append(login)
    return "\n".join(keys)


def _key_body(line: str) -> str:
    return " ".join(line.split()[:2])


def public_key_of(private_key: str) -> str | None:
    """The OpenSSH public key line of an OpenSSH private key, read from the key file's own
    public section (openssh PROTOCOL.key: magic, cipher, kdf, kdf options, key count, then the
    public key blob, in the clear even for encrypted keys); None for other formats."""
    match = re.search(
        r"-----BEGIN OPENSSH PRIVATE KEY-----(.+?)-----END OPENSSH PRIVATE KEY-----",
        private_key,
        re.S,
    )
    if not match:
        return None
    try:
        blob = base64.b64decode("".join(match.group(1).split()), validate=True)
    except (binascii.Error, ValueError):
        return None
    magic = b"openssh-key-v1\0"
    if not blob.startswith(magic):
        return None
    offset = len(magic)
    for _ in range(3):  # cipher name, kdf name, kdf options
        _, offset = _ssh_string(blob, offset)
    if offset + 4 > len(blob) or int.from_bytes(blob[offset : offset + 4], "big") < 1:
        return None
    public, _ = _ssh_string(blob, offset + 4)
    key_type, _ = _ssh_string(public, 0)
    if not public or not key_type:
        return None
    return f"{key_type.decode('ascii', 'replace')} {base64.b64encode(public).decode()}"


def _ssh_string(blob: bytes, offset: int) -> tuple[bytes, int]:
    """One length-prefixed string of the SSH wire format at `offset`, and the offset after it
    (b"" past the end)."""
    if offset + 4 > len(blob):
        return b"", len(blob)
    length = int.from_bytes(blob[offset : offset + 4], "big")
    start = offset + 4
    return blob[start : start + length], start + length


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

"""SSH host keys: each machine boots with a key the program generated (user data), which only its
first contact accepts; that contact replaces it on the host and every later step pins the new one.

The boot key (`<machine>-host-key`, pulumi-tls) travels in user data, which others can read, so
`<machine>-host-key-rotation` (a local Command: its update dials nothing) dials the machine
checking that key alone, makes a new key there and reads back its public half (`rotated`).
Machines created before the keys existed start from `hostKeys.<instance id>` instead. The
bastion and an existing control plane are pinned from config (settings refuse them unpinned).

Why: docs/decisions/002-ssh-host-keys-are-generated-and-pinned.md,
041-a-host-key-only-its-host-can-use.md
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_command as command
import pulumi_tls as tls
import yaml

from components.hosts import steps
from components.hosts.rendering import SCRIPTS_DIR, strip_comments

# What the provider stores as `userData` for a machine booted without user data: nothing, or the
# SHA-1 of the empty string (ec2_instance.go treats the two as equal in its DiffSuppressFunc).
_NO_USER_DATA = {"", hashlib.sha1(b"").hexdigest()}


@dataclass(frozen=True)
class HostKey:
    """One machine's generated host key and the user data that installs it."""

    name: str
    public_key: pulumi.Output[str]  # an authorized_keys line: "ssh-ed25519 AAAA...\n"
    user_data: pulumi.Output[str]  # secret: it holds the private key


def generate(machine: str, *, parent: pulumi.Resource) -> HostKey:
    """`<machine>-host-key`: a new ED25519 key, and the cloud-config that installs it."""
    key = tls.PrivateKey(
        f"{machine}-host-key",
        algorithm="ED25519",
        opts=pulumi.ResourceOptions(parent=parent),
    )
    user_data = pulumi.Output.all(key.private_key_openssh, key.public_key_openssh).apply(
        lambda halves: cloud_config(halves[0], halves[1])
    )
    return HostKey(
        name=machine,
        public_key=key.public_key_openssh,
        user_data=pulumi.Output.secret(user_data),
    )


class _LiteralDumper(yaml.SafeDumper):
    """Multi-line strings (the private key) as YAML literal blocks, as cloud-init's docs show."""


def _literal_str(dumper: Any, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_LiteralDumper.add_representer(str, _literal_str)


def cloud_config(private_key_openssh: str, public_key_openssh: str) -> str:
    """The user data that makes cloud-init install this host key and only it: a `#cloud-config`
    document with `ssh_keys` (ed25519_private, ed25519_public), `ssh_deletekeys: true` (the
    image's keys are removed first) and no key types to generate."""
    document = {
        "ssh_deletekeys": True,
        "ssh_genkeytypes": [],
        "ssh_keys": {
            "ed25519_private": private_key_openssh.strip() + "\n",
            "ed25519_public": public_key_openssh.strip(),
        },
    }
    body = yaml.dump(document, Dumper=_LiteralDumper, sort_keys=True, default_flow_style=False)
    return "#cloud-config\n" + body


def booted_with_user_data(stored: str | None) -> bool:
    """Whether an instance's stored `userData` (the SHA-1 the provider keeps) shows it booted
    with user data: every machine this program creates does, an older one does not."""
    return (stored or "") not in _NO_USER_DATA


def pinned(
    instance: aws.ec2.Instance, key: HostKey, configured_keys: Mapping[str, str]
) -> pulumi.Output[str | None]:
    """The host key a connection to `instance` passes: the generated one when the machine booted
    with it. A machine created before host keys were generated never received it: its key from
    `hostKeys.<instance id>` (read by the operator out of band), else None (unpinned, with a
    warning). Keyed by instance id, not by name: Pulumi gives a replacement the ignored
    `userData` of the machine it replaces (pulumi `pkg/resource/deploy/step_generator.go`: "Set
    inputs back to their old values (if any) for any 'ignored' properties"), so a replaced old
    machine boots without it again, with new keys of its own that an entry for the name would
    not match."""

    def choose(values: list) -> pulumi.Input[str | None]:
        stored, instance_id = values
        configured = configured_keys.get(instance_id)
        if booted_with_user_data(stored):
            if configured is not None:
                pulumi.log.warn(
                    f"gpu-cluster:hostKeys.{instance_id} is not used: {key.name} booted with its "
                    "generated host key, which its steps check; remove the entry.",
                    resource=instance,
                )
            # Only here do the steps depend on the key: on an older machine they stay as they
            # were, so adding the keys to a running stack changes none of its steps.
            return key.public_key
        if configured is not None:
            return configured
        pulumi.log.warn(
            f"{key.name} ({instance_id}) was created before the program generated SSH host "
            f"keys: its steps accept any host key. Set gpu-cluster:hostKeys.{instance_id} to its "
            "key from its first-boot console output (README, SSH host keys).",
            resource=instance,
        )
        return None

    # The choice is public (a public key, or none): unsecret what the secret userData tainted.
    return pulumi.Output.unsecret(pulumi.Output.all(instance.user_data, instance.id).apply(choose))


# The step table's first row of every machine the stack creates (components/hosts/steps.py).
ROTATION = steps.HOST_KEY_ROTATION.suffix
# The host half of a rotation, and its local half (where `pulumi up` runs), of the same name.
HOST_SCRIPT = steps.HOST_KEY_ROTATION.script
assert HOST_SCRIPT is not None
LOCAL_SCRIPT = SCRIPTS_DIR.parent / "local" / HOST_SCRIPT
# A fresh GPU machine can take many minutes to open SSH (the local script's dial budget).
ROTATION_TIMEOUT_SECONDS = steps.HOST_KEY_ROTATION.timeout_seconds


@dataclass(frozen=True)
class Reach:
    """How the local rotation reaches a machine: as every step does (ssh section, login key,
    bastion), at `address`."""

    address: pulumi.Input[str]
    user: str
    port: int
    private_key: pulumi.Input[str]
    bastion: Any = None  # settings.Bastion


@dataclass(frozen=True)
class Rotation:
    """`<machine>-host-key-rotation` and the public host key it read back."""

    command: command.local.Command
    public_key: pulumi.Output[str]


def rotated(
    machine: str,
    instance: aws.ec2.Instance,
    boot_key: pulumi.Input[str | None],
    reach: Reach,
    *,
    parent: pulumi.Resource,
) -> Rotation:
    """`<machine>-host-key-rotation`: dial `instance` pinning `boot_key` (the generated key it
    booted with, or `hostKeys.<instance id>`), replace its host key there, and read back the new
    public key, which every later step pins. Replaced with the machine (its instance id); its
    update only repeats what it read (PULUMI_COMMAND_STDOUT), so no change of address, login
    key or bastion ever offers the boot key to anyone again."""
    environment: dict[str, pulumi.Input[str]] = {
        "SSH_HOST": reach.address,
        "SSH_PORT": str(reach.port),
        "SSH_USER": reach.user,
        "SSH_PRIVATE_KEY": reach.private_key,
        "BOOT_HOST_KEY": pulumi.Output.from_input(boot_key).apply(_key_line),
        "DIAL_SECONDS": str(ROTATION_TIMEOUT_SECONDS - 300),
    }
    bastion = reach.bastion
    if bastion is not None:
        environment.update(
            PROXY_HOST=bastion.host,
            PROXY_PORT=str(bastion.port),
            PROXY_USER=bastion.user or reach.user,
            PROXY_HOST_KEY=bastion.host_key or "",
        )
    rotation = command.local.Command(
        steps.HOST_KEY_ROTATION.resource_name(machine),
        create=f"bash {LOCAL_SCRIPT.relative_to(SCRIPTS_DIR.parents[2])}",
        update="printf '%s\\n' \"$PULUMI_COMMAND_STDOUT\"",
        stdin=strip_comments((SCRIPTS_DIR / HOST_SCRIPT).read_text()),
        environment=pulumi.Output.secret(environment),
        triggers=[instance.id],
        add_previous_output_in_env=True,
        logging=command.local.Logging.STDOUT_AND_STDERR,
        opts=pulumi.ResourceOptions(
            parent=parent,
            depends_on=[instance],
            custom_timeouts=pulumi.CustomTimeouts(
                create=f"{ROTATION_TIMEOUT_SECONDS}s", update="60s"
            ),
        ),
    )
    return Rotation(rotation, pulumi.Output.unsecret(rotation.stdout.apply(_last_key_line)))


def _key_line(value: str | None) -> str:
    """The `type base64` of an authorized_keys line; empty when no key is known (the local
    script then refuses to dial)."""
    return " ".join((value or "").split()[:2])


def _last_key_line(stdout: str) -> str:
    lines = [line.strip() for line in (stdout or "").splitlines() if line.strip()]
    return _key_line(lines[-1]) if lines else ""

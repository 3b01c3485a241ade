"""SSH host keys the program generates, installs through user data and pins on every connection.

Each machine the stack creates gets its own ED25519 host key (`<machine>-host-key`, pulumi-tls;
the private halves are secret outputs) in a cloud-config its user data carries, and every step's
connection passes the public half as `host_key`, so no machine in the middle can receive a join
token or hand back a kubeconfig. Machines created before the keys existed keep the key they made
themselves (their `userData` is ignored after create and their stored SHA-1 of it tells them
apart): their steps pin `hostKeys.<instance id>` when set, else they are not pinned and every
preview and up says so (docs/ssh-keys.md). No private host key ever travels over SSH.

Why: docs/decisions/002-ssh-host-keys-are-generated-and-pinned.md
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_tls as tls
import yaml

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

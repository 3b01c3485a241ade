"""SSH host keys of the machines the stack creates. Each launch boots with a key of its own
(`<machine>-host-key`, pulumi-tls, in user data others can read; replaced with the machine), which
admits its first contact only. That contact has two phases, local Commands run where `pulumi up`
runs, each completed by the next `up` wherever it was cut off: `<machine>-host-key-rotation`
checks the boot key (or `hostKeys.<instance id>`) and stages a new key on the host;
`<machine>-host-key-switch` makes it the live one and sees it served. Every later step pins that
key; a machine with no key to pin stops the `up`.

Why: docs/decisions/002-ssh-host-keys-are-generated-and-pinned.md,
041-a-host-key-only-its-host-can-use.md, 064-a-first-contact-that-can-be-redone.md
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_command as command
import pulumi_tls as tls
import yaml

from components.aws import machines
from components.hosts import steps
from components.hosts.rendering import SCRIPTS_DIR, render_inputs, stripped_script

# What the provider stores as `userData` for a machine booted without user data: nothing, or the
# SHA-1 of the empty string (ec2_instance.go treats the two as equal in its DiffSuppressFunc).
_NO_USER_DATA = {"", hashlib.sha1(b"").hexdigest()}
# One public host key of a type pulumi-command can pin (components/settings/fields.py).
_KEY_LINE = re.compile(r"(ssh-ed25519|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/]+={0,2}")


class UnpinnedHost(pulumi.RunError):
    """A host the program would dial with no host key to check: the `up` stops (the CLI prints
    a RunError's message alone, pulumi-language-python-exec)."""


@dataclass(frozen=True)
class HostKey:
    """One machine's generated host key and the user data that installs it."""

    name: str
    public_key: pulumi.Output[str]  # an authorized_keys line: "ssh-ed25519 AAAA...\n"
    user_data: pulumi.Output[str]  # secret: it holds the private key
    resource: tls.PrivateKey


def generate(
    machine: str, *, parent: pulumi.Resource, replacement_trigger: pulumi.Input[Any] = None
) -> HostKey:
    """`<machine>-host-key`: a new ED25519 key, and the cloud-config that installs it; a new key
    whenever `replacement_trigger` changes."""
    key = tls.PrivateKey(
        f"{machine}-host-key",
        algorithm="ED25519",
        opts=pulumi.ResourceOptions(parent=parent, replacement_trigger=replacement_trigger),
    )
    user_data = pulumi.Output.all(key.private_key_openssh, key.public_key_openssh).apply(
        lambda halves: cloud_config(halves[0], halves[1])
    )
    return HostKey(
        name=machine,
        public_key=key.public_key_openssh,
        user_data=pulumi.Output.secret(user_data),
        resource=key,
    )


def launch(
    name: str, args: machines.MachineArgs, *, parent: pulumi.Resource
) -> tuple[aws.ec2.Instance, HostKey]:
    """The machine `name` booting with a host key of its own: the key is replaced when an input
    that replaces the machine changes (`machines.replacing_inputs`), and the machine whenever the
    key is (`pulumi up --replace <name>-host-key` replaces both), so no launch boots with a key
    an earlier one exposed in its user data."""
    key = generate(name, parent=parent, replacement_trigger=machines.replacing_inputs(args))
    with_key = dataclasses.replace(args, user_data=key.user_data)
    return machines.machine(name, with_key, parent=parent, boot_key=key.resource), key


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


def first_keys(
    instance: aws.ec2.Instance, key: HostKey, configured_keys: Mapping[str, str]
) -> pulumi.Output[list[str]]:
    """The host keys the first contact with `instance` accepts: the generated key it booted with
    (when its stored userData shows it did), and `hostKeys.<instance id>`, a key the operator
    read out of band (a machine older than the generated keys, or one whose switched key must be
    pinned by hand). None: the `up` stops, naming the machine and the key to set. Keyed by
    instance id: a new launch is a new machine (a replacement takes the program's inputs,
    docs/decisions/030-a-replacement-launches-with-the-programs-inputs.md)."""

    def choose(values: list) -> list[str]:
        stored, instance_id, generated = values
        keys = [key_line(generated)] if booted_with_user_data(stored) else []
        configured = configured_keys.get(instance_id)
        if configured is not None and key_line(configured) not in keys:
            keys.append(key_line(configured))
        if not keys:
            raise UnpinnedHost(
                f"{key.name} ({instance_id}) booted without a host key generated by the "
                f"program, and gpu-cluster:hostKeys.{instance_id} is not set: there is no key "
                "to check its first contact with, so nothing dials it. Read its host key out "
                "of band (docs/ssh-keys.md, 'SSH host keys') and set it: pulumi config set "
                f"--path 'gpu-cluster:hostKeys.{instance_id}' 'ssh-ed25519 AAAA...'"
            )
        return keys

    # The choice is public (public keys): unsecret what the secret userData tainted.
    chosen = pulumi.Output.all(instance.user_data, instance.id, key.public_key).apply(choose)
    return pulumi.Output.unsecret(chosen)


# The step table's first rows of every machine the stack creates (components/hosts/steps.py).
ROTATION = steps.HOST_KEY_ROTATION.suffix
SWITCH = steps.HOST_KEY_SWITCH.suffix
# The host half of a first contact, and its local half (where `pulumi up` runs), of one name.
HOST_SCRIPT = steps.HOST_KEY_ROTATION.script
assert HOST_SCRIPT is not None
LOCAL_SCRIPT = SCRIPTS_DIR.parent / "local" / HOST_SCRIPT
# A fresh GPU machine can take many minutes to open SSH (the local script's dial budget).
ROTATION_TIMEOUT_SECONDS = steps.HOST_KEY_ROTATION.timeout_seconds
SWITCH_TIMEOUT_SECONDS = steps.HOST_KEY_SWITCH.timeout_seconds
# Of each phase's bound, what is left for the host program once sshd answers.
DIAL_MARGIN_SECONDS = 300
# The local script starts from an empty environment and the runner's PATH alone: pulumi-command
# starts a local command with the provider's whole environment (local/commandOutputs.go `run`:
# `cmd.Env = os.Environ()`), the deploy job's AWS and Pulumi credentials included. A constant:
# no value of the stack reaches this shell line (they travel on stdin).
LOCAL_CREATE = (
    f'exec /usr/bin/env -i PATH="$PATH" bash {LOCAL_SCRIPT.relative_to(SCRIPTS_DIR.parents[2])}'
)
# An update dials nothing: it repeats what the create read (pulumi-command puts the last stdout
# in PULUMI_COMMAND_STDOUT), so no change of address, login key or bastion ever offers the boot
# key to anyone again.
REPEAT_LAST_KEY = "printf '%s\\n' \"$PULUMI_COMMAND_STDOUT\""
END_OF_INPUTS = "---"


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
class FirstContact:
    """`<machine>-host-key-rotation` and `<machine>-host-key-switch`, and the public host key the
    switch saw the machine serve, which every later step pins."""

    rotation: command.local.Command
    switch: command.local.Command
    public_key: pulumi.Output[str]


def first_contact(
    machine: str,
    instance: aws.ec2.Instance,
    accepted: pulumi.Input[list[str]],
    reach: Reach,
    *,
    parent: pulumi.Resource,
) -> FirstContact:
    """The two phases of `machine`'s first contact, the first accepting the keys of
    `accepted` (`first_keys`). Each is replaced with the machine (its instance id), the switch
    also with a new staged key; neither update dials (`REPEAT_LAST_KEY`)."""
    first = pulumi.Output.from_input(accepted)
    named = pulumi.Output.concat(machine, " (", instance.id, ")")
    stage_stdin = pulumi.Output.all(named, reach.address, reach.private_key, first).apply(
        lambda v: local_stdin(
            v[0],
            v[1],
            reach,
            v[2],
            host_keys=v[3],
            program=host_program("stage"),
            dial_seconds=ROTATION_TIMEOUT_SECONDS - DIAL_MARGIN_SECONDS,
        )
    )
    rotation = _local_command(
        steps.HOST_KEY_ROTATION.resource_name(machine),
        stage_stdin,
        triggers=[instance.id],
        timeout_seconds=ROTATION_TIMEOUT_SECONDS,
        after=instance,
        parent=parent,
    )
    staged = pulumi.Output.unsecret(
        pulumi.Output.all(named, rotation.stdout).apply(lambda v: pinned_key(v[0], v[1]))
    )
    switch_stdin = pulumi.Output.all(named, reach.address, reach.private_key, first, staged).apply(
        lambda v: local_stdin(
            v[0],
            v[1],
            reach,
            v[2],
            host_keys=[*v[3], v[4]],
            verify=v[4],
            program=host_program("switch", v[4]),
            dial_seconds=SWITCH_TIMEOUT_SECONDS - DIAL_MARGIN_SECONDS,
        )
    )
    switch = _local_command(
        steps.HOST_KEY_SWITCH.resource_name(machine),
        switch_stdin,
        triggers=[instance.id, staged],
        timeout_seconds=SWITCH_TIMEOUT_SECONDS,
        after=rotation,
        parent=parent,
    )
    public_key = pulumi.Output.unsecret(
        pulumi.Output.all(named, switch.stdout).apply(lambda v: pinned_key(v[0], v[1]))
    )
    return FirstContact(rotation, switch, public_key)


def _local_command(
    name: str,
    stdin: pulumi.Output[str],
    *,
    triggers: Sequence[pulumi.Input[str]],
    timeout_seconds: int,
    after: pulumi.Resource,
    parent: pulumi.Resource,
) -> command.local.Command:
    return command.local.Command(
        name,
        create=LOCAL_CREATE,
        update=REPEAT_LAST_KEY,
        # Secret: it holds the login key.
        stdin=pulumi.Output.secret(stdin),
        triggers=list(triggers),
        add_previous_output_in_env=True,
        logging=command.local.Logging.STDOUT_AND_STDERR,
        opts=pulumi.ResourceOptions(
            parent=parent,
            depends_on=[after],
            custom_timeouts=pulumi.CustomTimeouts(create=f"{timeout_seconds}s", update="60s"),
        ),
    )


def host_program(phase: str, new_host_key: str | None = None) -> str:
    """What the host runs (`sudo bash -s`): scripts/rotate-host-key.sh with its inputs."""
    params = {"PHASE": phase}
    if new_host_key is not None:
        params["NEW_HOST_KEY"] = new_host_key
    return render_inputs(params) + stripped_script(HOST_SCRIPT)


def local_stdin(
    machine: str,
    address: str,
    reach: Reach,
    private_key: str,
    *,
    host_keys: Sequence[str],
    program: str,
    dial_seconds: int,
    verify: str | None = None,
) -> str:
    """The local script's stdin: its inputs as NAME=value lines (data: the script reads them,
    no shell parses them), the line `---`, then the host program."""
    bastion = reach.bastion
    lines: list[tuple[str, str]] = [
        ("MACHINE", machine),
        ("SSH_HOST", address),
        ("SSH_PORT", str(reach.port)),
        ("SSH_USER", reach.user),
        ("LOGIN_KEY", base64.b64encode(private_key.encode()).decode()),
        *(("HOST_KEY", key) for key in host_keys),
        ("DIAL_SECONDS", str(dial_seconds)),
    ]
    if verify is not None:
        lines.append(("VERIFY_HOST_KEY", verify))
    if bastion is not None:
        lines += [
            ("PROXY_HOST", bastion.host),
            ("PROXY_PORT", str(bastion.port)),
            ("PROXY_USER", bastion.user or reach.user),
            ("PROXY_HOST_KEY", bastion.host_key or ""),
        ]
    rendered = []
    for name, value in lines:
        # A key line may end in a newline (key_line keeps its first two words); any other value
        # is written as it is, so its own text decides: a leading newline would add an input.
        text = value.strip() if name.endswith("HOST_KEY") else value
        if any(c in text for c in "\n\r\0"):
            raise ValueError(f"{machine}: the first contact's {name} must be one line")
        rendered.append(f"{name}={key_line(value) if name.endswith('HOST_KEY') else value}\n")
    return "".join(rendered) + f"{END_OF_INPUTS}\n" + program


def key_line(value: str | None) -> str:
    """The `type base64` of an authorized_keys line ("" for none)."""
    return " ".join((value or "").split()[:2])


def pinned_key(machine: str, stdout: str | None) -> str:
    """The host key a first contact printed (its last line), refusing anything that is not one
    key line: a connection built without a host key would accept any host (pulumi-command
    remote/connection.go `SSHConfig`: no `hostKey`, `ssh.InsecureIgnoreHostKey()`)."""
    lines = [line.strip() for line in (stdout or "").splitlines() if line.strip()]
    found = key_line(lines[-1]) if lines else ""
    if not _KEY_LINE.fullmatch(found):
        raise UnpinnedHost(
            f"{machine}: its first contact recorded no host key (it printed "
            f"{found or 'nothing'!r}), and no step dials a host it cannot check. Run `pulumi up` "
            "again: the first contact finishes where it stopped. If the machine's key was "
            "switched by a contact whose record is lost, read the key it serves from its "
            "console and set gpu-cluster:hostKeys.<instance id> (docs/ssh-keys.md), then "
            "`pulumi up --replace` its <machine>-host-key-rotation."
        )
    return found

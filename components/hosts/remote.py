"""Run a host step over SSH as one Pulumi resource: the one way every component does it.

A host's scripts arrive once, with its `<host>-scripts` copy (components/hosts/bundle.py); each
step's stdin carries its parameters and the digest of the program it runs (`sudo bash -s`: sshd
drops the environment, and a secret never reaches argv). `triggers` hold only the step's identity
(its host, for the join the cluster), so a script or parameter change is an update that re-runs
the idempotent script, never a replacement. Why, with the providers' source: docs/decisions/
004-steps-are-replaced-only-by-identity.md, 003-host-steps-run-on-stdin.md and
026-scripts-travel-once-per-host.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_command as command
from pydantic import SecretStr

from components.aws.machines import authorized_keys
from components.hosts import bundle, host_keys
from components.hosts.rendering import render_inputs, stripped_script
from components.hosts.steps import (
    SCRIPTS,
    Identity,
    OnUpdate,
    Step,
    Where,
    host_scripts,
)
from components.settings import Bastion, Settings, Ssh

# Fresh GPU instances can take minutes before sshd answers; a step keeps dialling until its own
# timeout (custom_timeouts) ends the wait. No step dials on delete (none stores a `delete`).
DIAL_FOREVER = -1
PER_DIAL_TIMEOUT = 30
# The SSH dial and session set-up on top of a step's bound on the host.
DIAL_MARGIN_SECONDS = 10 * 60
# After the bound, `timeout` sends TERM; KILL follows this many seconds later.
KILL_AFTER_SECONDS = 30
NO_OP = "true"
# The copy of a host's scripts (its first dial, on a host the stack did not create).
COPY_TIMEOUT_SECONDS = SCRIPTS.timeout_seconds


@dataclass(frozen=True)
class Host:
    """How to reach one machine over SSH (through the bastion when the stack has one), and what
    identifies it: a step on it is replaced only when `identity` (its instance id) changes."""

    name: str
    identity: pulumi.Input[str]
    _connection: dict[str, Any] = field(repr=False)
    _proxy: dict[str, Any] | None = field(default=None, repr=False)
    role: Where = Where.NODE
    # The first contact of a machine the stack created (its resources by row suffix, in
    # order); empty for a host pinned from config.
    contact: Mapping[str, pulumi.Resource] = field(default_factory=dict, repr=False, compare=False)
    # The host's copy of its scripts, made with its first step (`scripts`).
    _copy: list[command.remote.CopyToRemote] = field(
        default_factory=list, repr=False, compare=False
    )
    # One connection per dial limit, shared by every step on the host: a machine's key is
    # known only once it exists, and one Output per host (not per step) waits for it.
    _built: dict[int, pulumi.Output[Mapping[str, Any]]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def connection(self, dial_error_limit: int = DIAL_FOREVER) -> pulumi.Output[Mapping[str, Any]]:
        """The connection settings, resolved once per host and dial limit (a machine's host key
        is known only once the machine is): every step on the host sends this one Output.

        In a preview of a machine not yet created its connection is unknown as a whole; a host
        key (or the bastion's) that resolves to none stops the `up` (`_settled`)."""
        if dial_error_limit not in self._built:
            self._built[dial_error_limit] = _settled(self.name, self.args(dial_error_limit))
        return self._built[dial_error_limit]

    @property
    def bundle(self) -> bundle.Bundle:
        return bundle.Bundle(self.role.value, host_scripts(self.role))

    def scripts(self, parent: pulumi.Resource) -> command.remote.CopyToRemote:
        """`<host>-scripts`: the host's bundle, copied once (as the login user, over SFTP) by
        the first step that needs it, with that step's parent; every later step waits for it.
        A new bundle is an update that copies again (pulumi-command copyController.go `Update`:
        a new source hash copies); nothing dials the host on delete. A new machine (a
        replacement, or one recreated after a refresh) gets a new copy: its id is the
        copy's `replacement_trigger`, since an `Update` for a new connection alone copies
        nothing (docs/decisions/029-a-lost-machine-is-recovered-without-harm.md)."""
        if not self._copy:
            files = self.bundle
            self._copy.append(
                command.remote.CopyToRemote(
                    SCRIPTS.resource_name(self.name),
                    connection=self.connection(DIAL_FOREVER),
                    source=pulumi.FileArchive(files.local_dir()),
                    remote_path=bundle.REMOTE_DIR,
                    opts=pulumi.ResourceOptions(
                        parent=parent,
                        custom_timeouts=pulumi.CustomTimeouts(
                            create=duration(COPY_TIMEOUT_SECONDS),
                            update=duration(COPY_TIMEOUT_SECONDS),
                        ),
                        # Null in the state of earlier releases: the engine replaces nothing
                        # for that (step_generator.go `shouldTriggerReplace`).
                        replacement_trigger=self.identity,
                    ),
                )
            )
        return self._copy[0]

    def first_contact(self, parent: pulumi.Resource) -> dict[str, pulumi.Resource]:
        """The resources of the step table's first-contact rows on this host, by suffix: its
        host-key rotation and switch (a machine the stack created) and the copy of its scripts
        (made now with `parent` if no step made it yet)."""
        return {**self.contact, SCRIPTS.suffix: self.scripts(parent)}

    def without_credential(self) -> pulumi.Output[Mapping[str, Any]]:
        """Where the host is and the key it must present, no login key: the connection of a
        Command that runs no command (pulumi-command dials only to run one), so its state holds
        no credential (components/kube/in_service.py)."""
        named = {k: v for k, v in self._connection.items() if k != "private_key"}
        proxy = None
        if self._proxy is not None:
            proxy = command.remote.ProxyConnectionArgs(
                **{k: v for k, v in self._proxy.items() if k != "private_key"}
            )
        return _settled(self.name, command.remote.ConnectionArgs(**named, proxy=proxy))

    def args(self, dial_error_limit: int) -> command.remote.ConnectionArgs:
        """The connection as pulumi-command's `ConnectionArgs` (its defaults filled in), Outputs
        among its fields: the address, the private key, a host key generated with the machine."""
        proxy = None
        if self._proxy is not None:
            proxy = command.remote.ProxyConnectionArgs(
                **self._proxy, dial_error_limit=dial_error_limit
            )
        return command.remote.ConnectionArgs(
            **self._connection, dial_error_limit=dial_error_limit, proxy=proxy
        )


def _settled(host: str, args: command.remote.ConnectionArgs) -> pulumi.Output[Mapping[str, Any]]:
    """`args` as a mapping by field name once every Output among its fields (its proxy's too)
    has resolved: one `Output.all`, carrying their secrecy, dependencies and unknowns. Fails
    closed: a host key (the host's, or its bastion's) that resolves to nothing stops the `up`
    naming `host`, since pulumi-command accepts any host key without one (remote/connection.go
    `SSHConfig`: `ssh.InsecureIgnoreHostKey()`)."""
    paths: list[tuple[str, ...]] = []
    outputs: list[pulumi.Output[Any]] = []

    def find(args: Any, path: tuple[str, ...]) -> None:
        for name, value in vars(args).items():
            if _is_args(value):
                find(value, (*path, name))
            elif isinstance(value, pulumi.Output):
                paths.append((*path, name))
                outputs.append(value)

    find(args, ())

    def frozen(values: list[Any]) -> Mapping[str, Any]:
        mapping = as_mapping(args, dict(zip(paths, values, strict=True)))
        for hop in (mapping, mapping.get("proxy")):
            if hop is not None and not host_keys.key_line(hop.get("host_key")):
                raise host_keys.UnpinnedHost(
                    f"{host}: no host key to pin for {hop.get('host')}; nothing dials a host it "
                    "cannot check (docs/ssh-keys.md, 'SSH host keys')."
                )
        return mapping

    return pulumi.Output.all(*outputs).apply(frozen)


@dataclass(frozen=True)
class Login:
    """How every step logs in: the `ssh` section (user, port, publicKey), `sshPrivateKey`, the
    bastion that relays to private addresses, if any, and the host keys the operator pinned for
    machines older than their generated key (`hostKeys`, by instance id)."""

    ssh: Ssh
    private_key: SecretStr = field(repr=False)
    bastion: Bastion | None = None
    host_keys: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, settings: Settings) -> Login:
        return cls(
            settings.ssh, settings.ssh_private_key, settings.network.bastion, settings.host_keys
        )

    def wait_ready_params(self) -> dict[str, str]:
        """What wait-ready.sh writes into the login user's authorized_keys: ssh.publicKey and
        the key the steps log in with, so a rotated key reaches running machines."""
        assert self.ssh.public_key is not None  # settings: required with machines launched
        return {
            "SSH_USER": self.ssh.user,
            "AUTHORIZED_KEYS": authorized_keys(self.ssh.public_key, self.private_key),
        }


def as_mapping(
    args: Any,
    resolved: Mapping[tuple[str, ...], Any] | None = None,
    path: tuple[str, ...] = (),
) -> Mapping[str, Any]:
    """The fields an args object (ConnectionArgs, ProxyConnectionArgs: the ones it was given and
    its defaults) holds, as a mapping by their Python names, nested args likewise. With
    `resolved`, the value of each Output among them, by its path of names."""
    items = {}
    for name, value in vars(args).items():
        here = (*path, name)
        if _is_args(value):
            value = as_mapping(value, resolved, here)
        elif resolved is not None and here in resolved:
            value = resolved[here]
        items[name] = value
    return items


def _is_args(value: Any) -> bool:
    return isinstance(value, command.remote.ConnectionArgs | command.remote.ProxyConnectionArgs)


def ssh_host(
    name: str,
    address: pulumi.Input[str],
    login: Login,
    *,
    identity: pulumi.Input[str],
    host_key: pulumi.Input[str],
    user: str | None = None,
    role: Where = Where.NODE,
    contact: Mapping[str, pulumi.Resource] | None = None,
    port: int | None = None,
) -> Host:
    """How to reach `name` at `address`, a host of `role` (which scripts it gets); `host_key`
    (an authorized_keys line) is the key it must present; `contact`: the first contact that
    read that key, by row suffix, if any; `user` and `port` when the host has its own (else
    ssh.user, ssh.port)."""
    if host_key is None:
        raise ValueError(f"{name}: a host is reached only with its host key pinned")
    ssh = login.ssh
    private_key = pulumi.Output.secret(login.private_key.get_secret_value())
    bastion = login.bastion
    proxy = None
    if bastion is not None:
        if bastion.host_key is None:
            raise ValueError(f"{name}: the bastion {bastion.host} is reached only with its key")
        proxy = {
            "host": bastion.host,
            "port": bastion.port,
            "user": bastion.user or ssh.user,
            "private_key": private_key,
            "host_key": bastion.host_key,
        }
    connection = {
        "host": address,
        "port": ssh.port if port is None else port,
        "user": user or ssh.user,
        "private_key": private_key,
        "per_dial_timeout": PER_DIAL_TIMEOUT,
        "host_key": host_key,
    }
    return Host(
        name=name,
        identity=identity,
        _connection=connection,
        _proxy=proxy,
        role=role,
        contact=dict(contact or {}),
    )


def machine_host(
    name: str,
    instance: Any,
    address: pulumi.Input[str],
    login: Login,
    *,
    boot_key: host_keys.HostKey,
    parent: pulumi.Resource,
    role: Where = Where.NODE,
) -> Host:
    """How to reach a machine the stack created: its first contact (`<name>-host-key-rotation`,
    `<name>-host-key-switch`) checks the key it booted with (or `hostKeys.<instance id>`) and
    replaces it; every step after it pins the key the switch saw served, never the boot key."""
    reach = host_keys.Reach(
        address=address,
        user=login.ssh.user,
        port=login.ssh.port,
        private_key=pulumi.Output.secret(login.private_key.get_secret_value()),
        bastion=login.bastion,
    )
    accepted = host_keys.first_keys(instance, boot_key, login.host_keys)
    contact = host_keys.first_contact(name, instance, accepted, reach, parent=parent)
    return ssh_host(
        name,
        address,
        login,
        identity=instance.id,
        host_key=contact.public_key,
        role=role,
        contact={
            host_keys.ROTATION: contact.rotation,
            host_keys.SWITCH: contact.switch,
        },
    )


def bounded(command_line: str, seconds: int) -> str:
    """`command_line` (a `bash -s`) as root, killed on the host after `seconds`."""
    return f"sudo timeout -k {KILL_AFTER_SECONDS} {seconds} {command_line}"


def step_program(script: str, params: Mapping[str, str], host: Host) -> str:
    """What a step sends on stdin: its parameters, then the run of its bundled program by
    digest (lib/run-by-digest.sh), after checking it against its digest. Deterministic: the
    same inputs, the same bytes."""
    digests = [bundle.digest(script)]
    return "".join(
        [
            f"# {script}, by digest; runs as `sudo bash -s`.\n",
            "set +x  # the inputs may hold a secret: keep them out of any trace\n",
            render_inputs(params),
            f"STEP_BUNDLE={host.bundle.remote_dir}\n",
            stripped_script(bundle.RUNNER),
            *(f"by_digest {d}\n" for d in digests),
            f"source {bundle.INSTALLED_DIR}/{digests[0]}.sh\n",
        ]
    )


def _stdin(
    script: str,
    host: Host,
    params: dict[str, pulumi.Input[str]],
    secret_params: dict[str, pulumi.Input[str]],
) -> pulumi.Input[str]:
    """stdin now when every input is known, else once Output parameters resolve; secret
    parameters make it a secret."""
    if not secret_params and all(isinstance(v, str) for v in params.values()):
        return step_program(script, params, host)  # type: ignore[arg-type]
    names, secret_names = sorted(params), sorted(secret_params)

    def render(values: list[str]) -> str:
        rendered = dict(zip(names + secret_names, values, strict=True))
        return step_program(script, rendered, host)

    stdin = pulumi.Output.all(
        *[params[n] for n in names], *[secret_params[n] for n in secret_names]
    ).apply(render)
    return pulumi.Output.secret(stdin) if secret_params else stdin


def run_step(
    step: Step,
    owner: str,
    *,
    host: Host,
    params: Mapping[str, pulumi.Input[str]] | None = None,
    secret_params: Mapping[str, pulumi.Input[str]] | None = None,
    identity: Mapping[Identity, pulumi.Input[str]] | None = None,
    after: Sequence[pulumi.Resource] = (),
    parent: pulumi.Resource,
    timeout_seconds: int | None = None,
    hooks: pulumi.ResourceHookBinding | None = None,
    delete_before_replace: bool = False,
) -> command.remote.Command:
    """The `remote.Command` of one row of the step table (components/hosts/steps.py), named
    `<owner>-<suffix>`, run on `host` after the host's scripts arrived, chained `after`
    (ordering only, not identity).

    `identity` gives the values of the row's identity (Identity.HOST defaults to the host's own;
    a control-plane step about a node passes the node's). `secret_params` are rendered into stdin
    only and make it a secret. `hooks`: the row's resource hooks (components/kube/node_hooks.py),
    which act through the Kubernetes API; no step dials anything on delete.
    """
    if step.script is None:
        raise ValueError(f"{step.suffix}: a {step.runs_on.value} row runs no script on a host")
    values: dict[Identity, pulumi.Input[str]] = {Identity.HOST: host.identity, **(identity or {})}
    missing = [i.value for i in step.identity if i not in values]
    if missing:
        raise ValueError(f"{step.resource_name(owner)}: identity {missing} not given")
    stdin = _stdin(step.script, host, dict(params or {}), dict(secret_params or {}))
    seconds = step.timeout_seconds if timeout_seconds is None else timeout_seconds
    create = bounded("bash -s", seconds)
    step_timeout = duration(seconds + DIAL_MARGIN_SECONDS)
    return command.remote.Command(
        step.resource_name(owner),
        connection=host.connection(DIAL_FOREVER),
        create=create,
        update=create if step.on_update is OnUpdate.RERUN else NO_OP,
        stdin=stdin,
        triggers=[values[i] for i in step.identity],
        add_previous_output_in_env=False,
        logging=command.remote.Logging.NONE
        if step.secret_stdout
        else command.remote.Logging.STDOUT_AND_STDERR,
        opts=pulumi.ResourceOptions(
            parent=parent,
            depends_on=[host.scripts(parent), *after],
            custom_timeouts=pulumi.CustomTimeouts(create=step_timeout, update=step_timeout),
            additional_secret_outputs=["stdout", "stderr"] if step.secret_stdout else [],
            # A step whose delete hook takes the Node away is replaced delete-first, so the old
            # Node is gone before the new work registers one under the same name.
            delete_before_replace=delete_before_replace,
            hooks=hooks,
        ),
    )


def duration(seconds: int) -> str:
    """A Pulumi custom timeout string ("1200s")."""
    return f"{seconds}s"

"""Run a host script over SSH as one Pulumi resource: the one way every component does it.

A step's script and parameters travel on stdin to `sudo bash -s` (sshd drops the environment of
`remote.Command`), so a secret parameter (a join token) never appears in a process list or in the
`create` string. The digest of the rendered script is the step's trigger: change the script or a
parameter and the step, and every step chained after it, runs again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_command as command

from components.host_scripts import program_digest, render_script, script_digest
from components.settings import Settings
from components.steps import Step

# Fresh GPU instances can take minutes before sshd answers; keep dialling until the step's own
# timeout (custom_timeouts) ends the wait instead of the provider's default of 10 dials.
DIAL_FOREVER = -1
DELETE_MARKER = "GPU_CLUSTER_SCRIPT"


@dataclass(frozen=True)
class Host:
    """How to reach one machine over SSH, through the bastion when the stack has one."""

    name: str
    connection: command.remote.ConnectionArgs


def ssh_host(
    name: str, address: pulumi.Input[str], settings: Settings, user: str | None = None
) -> Host:
    ssh = settings.ssh
    private_key = pulumi.Output.secret(settings.ssh_private_key.get_secret_value())
    bastion = settings.network.bastion
    proxy = None
    if bastion is not None:
        proxy = command.remote.ProxyConnectionArgs(
            host=bastion.host,
            port=bastion.port,
            user=bastion.user or ssh.user,
            private_key=private_key,
            dial_error_limit=DIAL_FOREVER,
        )
    connection = command.remote.ConnectionArgs(
        host=address,
        port=ssh.port,
        user=user or ssh.user,
        private_key=private_key,
        dial_error_limit=DIAL_FOREVER,
        per_dial_timeout=30,
        proxy=proxy,
    )
    return Host(name=name, connection=connection)


def _identity(resource: pulumi.Resource) -> pulumi.Output[str]:
    """What changes when `resource` is replaced: a custom resource's id (a new instance, a re-run
    command), so that a step re-runs whenever a step before it did."""
    if isinstance(resource, pulumi.CustomResource):
        return resource.id
    return resource.urn


def _render_later(
    script: str,
    params: dict[str, pulumi.Input[str]],
    secret_params: dict[str, pulumi.Input[str]],
) -> tuple[pulumi.Output[str], pulumi.Output[str]]:
    """stdin and trigger once Output parameters resolve. The trigger covers the script and its
    public parameters only: a secret (a fresh join token) must not force a re-run of a step that
    already succeeded. Secret parameters make stdin a secret."""
    names, secret_names = sorted(params), sorted(secret_params)

    def render(values: list[str]) -> str:
        return render_script(script, dict(zip(names + secret_names, values, strict=True)))

    stdin = pulumi.Output.all(
        *[params[n] for n in names], *[secret_params[n] for n in secret_names]
    ).apply(render)
    trigger = pulumi.Output.all(*[params[n] for n in names]).apply(
        lambda values: script_digest(script, dict(zip(names, values, strict=True)))
    )
    return (pulumi.Output.secret(stdin) if secret_params else stdin), trigger


def run_script(
    resource_name: str,
    *,
    host: Host,
    script: str,
    params: Mapping[str, pulumi.Input[str]] | None = None,
    secret_params: Mapping[str, pulumi.Input[str]] | None = None,
    delete_script: str | None = None,
    delete_params: Mapping[str, str] | None = None,
    after: Sequence[pulumi.Resource] = (),
    parent: pulumi.Resource,
    timeout: str = "30m",
    secret_stdout: bool = False,
    rerun_when: Sequence[pulumi.Input[str]] = (),
) -> command.remote.Command:
    """One host step: `script` on create, `delete_script` (if any) on delete, chained `after`.

    `secret_params` are rendered into stdin only, and make stdin a secret. With `secret_stdout`
    the command's output is a secret and is not logged (it carries a token or a kubeconfig).
    A step that undoes itself on delete is replaced delete-first, so a re-run never undoes the
    new work (a `kubeadm reset` after the new join). `rerun_when` adds values whose change must
    re-run this step although its own script and parameters did not change.
    """
    params = dict(params or {})
    secret_params = dict(secret_params or {})
    if not secret_params and all(isinstance(v, str) for v in params.values()):
        # Every input is known now (most steps): render at once, no Output machinery per step.
        stdin: pulumi.Input[str] = render_script(script, params)
        trigger: pulumi.Input[str] = program_digest(stdin)
    else:
        stdin, trigger = _render_later(script, params, secret_params)
    delete = None
    if delete_script is not None:
        delete = (
            f"sudo bash -s <<'{DELETE_MARKER}'\n"
            f"{render_script(delete_script, dict(delete_params or {}))}\n{DELETE_MARKER}"
        )
    secret_outputs = ["stdout", "stderr"] if secret_stdout else []
    return command.remote.Command(
        resource_name,
        connection=host.connection,
        create="sudo bash -s",
        stdin=stdin,
        delete=delete,
        triggers=[trigger, *rerun_when, *[_identity(a) for a in after]],
        logging=command.remote.Logging.NONE
        if secret_stdout
        else command.remote.Logging.STDOUT_AND_STDERR,
        opts=pulumi.ResourceOptions(
            parent=parent,
            depends_on=list(after),
            custom_timeouts=pulumi.CustomTimeouts(create=timeout, update=timeout, delete=timeout),
            additional_secret_outputs=secret_outputs,
            delete_before_replace=delete is not None,
        ),
    )


def run_step(
    step: Step,
    owner: str,
    *,
    host: Host,
    params: Mapping[str, pulumi.Input[str]] | None = None,
    secret_params: Mapping[str, pulumi.Input[str]] | None = None,
    delete_params: Mapping[str, str] | None = None,
    after: Sequence[pulumi.Resource] = (),
    parent: pulumi.Resource,
    timeout_seconds: int | None = None,
    rerun_when: Sequence[pulumi.Input[str]] = (),
) -> command.remote.Command:
    """The `remote.Command` of one row of the step table (components/steps.py), named
    `<owner>-<suffix>`: its script, delete hook, bound and secrecy come from the row."""
    return run_script(
        step.resource_name(owner),
        host=host,
        script=step.script,
        params=params,
        secret_params=secret_params,
        delete_script=step.delete_script,
        delete_params=delete_params,
        after=after,
        parent=parent,
        timeout=duration(step.timeout_seconds if timeout_seconds is None else timeout_seconds),
        secret_stdout=step.secret_stdout,
        rerun_when=rerun_when,
    )


def duration(seconds: int) -> str:
    """A Pulumi custom timeout string ("1200s")."""
    return f"{seconds}s"

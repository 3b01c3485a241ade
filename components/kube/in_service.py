"""`<node>-in-service`, the last row of a node: after its own checks (the join saw it Ready with
every GPU, its validation Job and one-node NCCL Job passed), the control plane puts it in
service through the API, in its hooks (components/kube/node_hooks.py `put_in_service`): the
pool's labels and taints, the proof taint off, the roll's change recorded, uncordoned, the slot
back. Its `environment` is what it sets, so `pulumi preview` shows a label change as a diff here.

It is a `command:remote:Command` that runs no command: pulumi-command dials only to run one
(remote/commandController.go: `Create` returns at once without `create`, `Update` runs `update`
or else `create`, `Delete` runs `delete` if stored), so it never dials and its connection holds
no login key. Why a Command: it continues the state of `<node>-drain` (an alias), and an update
of that state stores it without the `drain-node.sh` delete the state holds, dialling nothing
(`triggers` ignored: a changed trigger would replace it and run that stored delete). Why:
docs/decisions/052-a-node-leaves-through-the-api.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pulumi
import pulumi_command as command

from components.hosts import steps
from components.hosts.remote import Host

# Earlier names of this row's state: `<node>-drain` (until this release), which continued
# `<node>-node-ready` (decision 027).
FORMER_NAMES = ("drain", "node-ready")


def in_service(
    node_name: str,
    *,
    host: Host,
    environment: Mapping[str, pulumi.Input[str]],
    hooks: pulumi.ResourceHookBinding,
    after: Sequence[pulumi.Resource],
    parent: pulumi.Resource,
) -> command.remote.Command:
    """The node's in-service row; `environment` as node_hooks.InServiceInputs reads it."""
    return command.remote.Command(
        steps.IN_SERVICE.resource_name(node_name),
        connection=host.without_credential(),
        environment=dict(environment),
        add_previous_output_in_env=False,
        opts=pulumi.ResourceOptions(
            parent=parent,
            depends_on=list(after),
            hooks=hooks,
            ignore_changes=["triggers"],
            aliases=[pulumi.Alias(name=f"{node_name}-{former}") for former in FORMER_NAMES],
        ),
    )

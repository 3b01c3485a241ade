"""`<node>-in-service`, the last row of a node: after its own checks passed, its hooks put it in
service through the API (components/kube/node_hooks.py `put_in_service`): the pool's labels and
taints, the proof taint off, the roll's change recorded, uncordoned, the slot back. Its
`environment` is what it sets, so a preview shows a label change as a diff here.

A `command:remote:Command` that runs no command (pulumi-command dials only to run one), so it
never dials and holds no login key. A Command because it continues `<node>-drain`'s state (an
alias; `triggers` ignored): its update drops the stored `drain-node.sh` delete, dialling
nothing. Why, with the sources: docs/decisions/058-a-node-leaves-through-the-api.md.
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

"""The machine under a GPU node, as its chain sees it: an EC2 instance the stack launches, or an
existing server a hosts pool names. GpuNode builds the same rows of the step table on either.

What the chain needs of a machine (`NodeMachine`): its identity (the value of `Identity.HOST`
in every trigger, the join token's machine, the Node's instance label and the drain's check),
how steps reach it, the kubelet's `--provider-id`, what its first row follows, and what is
deleted with it. An EC2 machine's identity is its instance id. An existing host's is its host
key's (`host_id`): the key every connection pins is what makes it that machine, so a new key
is a new machine (drained, joined and proven again), a new address the same one.
Why: docs/decisions/052-machines-the-stack-did-not-create.md
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi

from components.hosts import steps
from components.hosts.remote import Host, Login, ssh_host
from components.settings.hosts_pool import ExistingHost

# An existing host's identity: this prefix and the first hex digits of the SHA-256 of its host
# key's blob (a Kubernetes label value, as an EC2 instance id is: gpu-cluster.io/instance-id).
HOST_ID_PREFIX = "host-"
HOST_ID_HEX_DIGITS = 20
# The kubelet's --provider-id of an existing host. Free-form for the kubelet ("Unique identifier
# for identifying the node in a machine database", kubernetes cmd/kubelet/app/options/options.go
# AddKubeletConfigFlags), set once (pkg/apis/core/validation ValidateNodeUpdate: "node updates
# may not change providerID except from "" to valid"), and, as AWS's aws:///<zone>/<id>, it ends
# with the machine's identity, which drain-node.sh compares.
HOST_PROVIDER_ID_PREFIX = "gpu-cluster:///"


@dataclass(frozen=True)
class NodeMachine:
    """What a node's chain needs of its machine (see the module docstring).

    `first` maps step-table names to what the first rows follow (`steps.INSTANCE`: the EC2
    instance; nothing for an existing host); `deleted_with` goes when the node goes (a drain's
    delete hook is skipped with it while the control plane is unreachable); `outputs` are what
    GpuNode registers about it."""

    id: pulumi.Input[str]
    host: Host
    provider_id: pulumi.Input[str]
    deleted_with: pulumi.Resource
    first: Mapping[str, pulumi.Resource] = field(default_factory=dict)
    outputs: Mapping[str, Any] = field(default_factory=dict)


def host_id(host_key: str) -> str:
    """An existing host's identity: `host-` and the first digits of the SHA-256 of its host key's
    blob (the key's base64 field, decoded), the same for the same key on every run.
    `awk '{print $2}' key.pub | base64 -d | sha256sum | cut -c1-20` prints its digits."""
    blob = base64.b64decode(host_key.split()[1])
    return HOST_ID_PREFIX + hashlib.sha256(blob).hexdigest()[:HOST_ID_HEX_DIGITS]


def host_provider_id(identity: str) -> str:
    return f"{HOST_PROVIDER_ID_PREFIX}{identity}"


def existing_host(
    node_name: str, host: ExistingHost, login: Login, *, parent: pulumi.Resource
) -> NodeMachine:
    """The machine of a node of a hosts pool: reached at its address (through the bastion when
    the stack has one) as its own user and port, pinning its configured host key on every
    connection (no rotation: the stack did not give it that key). Its first contact is the copy
    of its scripts, made here with `parent`."""
    assert host.host_key is not None  # settings: required
    identity = host_id(host.host_key)
    reach = ssh_host(
        node_name,
        host.address,
        login,
        identity=identity,
        host_key=host.host_key,
        user=host.user,
        port=host.port,
        role=steps.Where.NODE,
    )
    return NodeMachine(
        id=identity,
        host=reach,
        provider_id=host_provider_id(identity),
        deleted_with=reach.scripts(parent),
        outputs={"hostId": identity, "address": host.address},
    )

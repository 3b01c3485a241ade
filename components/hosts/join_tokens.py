"""The bootstrap token of one node's join: how long it lives, what the minting step prints and
what the join gets from it (`ControlPlane.join_credentials` runs the step)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_command as command

# Each node gets its own bootstrap token, valid until the node has joined (its node-ready step
# deletes it then): a join retried at any time after a failure finds it valid, with no manual
# re-mint. kubeadm token create: "If set to '0', the token will never expire".
JOIN_TOKEN_TTL = "0s"


@dataclass(frozen=True)
class JoinCredentials:
    """What one `kubeadm join` needs: a fresh bootstrap token (secret), the CA public key hash
    that pins the API server's identity, and the endpoint. `step` is the minting command."""

    token: pulumi.Output[str]
    token_id: pulumi.Output[str]
    ca_cert_hash: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    step: command.remote.Command


def parse_join_token(stdout: str) -> dict[str, str]:
    """The JSON line mint-join-token.sh prints: {"token": ..., "caCertHash": "sha256:..."}.

    Errors never include the output: it holds the token."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            data = json.loads(line)
            if not isinstance(data.get("token"), str) or not str(
                data.get("caCertHash", "")
            ).startswith("sha256:"):
                raise ValueError("mint-join-token.sh printed JSON without token and caCertHash")
            return data
    raise ValueError("mint-join-token.sh printed no JSON line with the token (output not shown)")

"""How many SSH connections a control plane's sshd takes at once: `MaxStartups`, which a managed
control plane's wait-ready step sets for its fleet (an existing one keeps OpenSSH's default).

Sized for one dial per node at once, plus the control plane's own chain: sshd drops
unauthenticated connections past `start` at random and all of them at `full`. Since decision 058
no node step dials the control plane (a node's Kubernetes side goes through the API), so this is
margin; it stays sized as before so that no running control plane's wait-ready re-runs for it.
Why, with sshd's and pulumi-command's source: docs/decisions/050-sshd-takes-the-fleets-fan-in.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class MaxStartups:
    """sshd_config(5) `MaxStartups start:rate:full`."""

    start: int
    rate: int
    full: int

    def __str__(self) -> str:
        return f"{self.start}:{self.rate}:{self.full}"


# sshd_config(5): "The default is 10:30:100".
OPENSSH_DEFAULT = MaxStartups(10, 30, 100)
# Dials that are not a node's: the control plane's own chain (one step at a time), the copy of
# its scripts, an operator's session; the rest is margin.
CONTROL_PLANE_DIALS = 16
# sshd's listener keeps one pipe per unauthenticated connection (sshd.c, startup pipes), and
# systemd starts ssh.service with a soft limit of 1024 open files: `full` stays under it.
MOST = 1000
# `start` moves in steps of this many, so a pool that grows by a few nodes re-runs nothing.
STEP = 50


def max_startups(nodes: int) -> MaxStartups:
    """MaxStartups for a control plane of `nodes` GPU nodes: never below OpenSSH's default."""
    wanted = math.ceil((nodes + CONTROL_PLANE_DIALS) / STEP) * STEP
    start = min(max(wanted, OPENSSH_DEFAULT.start), MOST)
    full = min(max(2 * start, OPENSSH_DEFAULT.full), MOST)
    return MaxStartups(start, OPENSSH_DEFAULT.rate, max(full, start))

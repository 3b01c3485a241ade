"""The first contact against a real sshd (Debian's openssh-server, tests/helpers/sshd.py): both
phases as the program registers them (their stdin from components/hosts/host_keys.py, their
command line as pulumi-command runs it), the real OpenSSH client and sudo, a connection dropped
at each point of the rotation (issue 40, finding 2), and the next `up` completing it.

An `up` is modelled as the engine keeps its records: a local Command whose create failed is not
in the state (pulumi-go-provider v1.3.0 `infer/resource.go`, derivedResourceController.Create:
an error returns an empty CreateResponse, no id), so the next `up` creates it again; one in the
state is not dialled again (its update repeats its stdout). A drop is a stand-in `ssh` first on
PATH that runs the real client (or not) and then kills the phase, as a cancelled `up` or a
broken connection does: the host did what it did, the answer is lost.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from components.hosts import host_keys
from components.hosts.host_keys import LOCAL_CREATE, Reach
from tests.helpers import sshd
from tools.harness.mocks import ed25519_key
from tools.harness.stacks import ROOT

LIVE_PUB = "/etc/ssh/ssh_host_ed25519_key.pub"
STAGED_PUB = "/etc/ssh/gpu-cluster-staged/ssh_host_ed25519_key.pub"
USER_DATA = "/var/lib/cloud/instance/user-data.txt"


@dataclass
class Machine:
    host: sshd.SshdHost
    boot: str  # the boot key's public line
    login: str  # the login key (OpenSSH private key)
    work: Path


@pytest.fixture
def machine(tmp_path) -> Iterator[Machine]:
    sshd.require()
    boot = ed25519_key(f"boot key {tmp_path.name}")
    login = ed25519_key(f"login key {tmp_path.name}")
    with sshd.running(
        tmp_path / "host",
        boot_key=boot["privateKeyOpenssh"],
        authorized_keys=[login["publicKeyOpenssh"].strip()],
    ) as host:
        # cloud-init's copy of the user data that carried the boot key.
        host.in_host(
            ["sh", "-c", f"mkdir -p /var/lib/cloud/instance && echo '#cloud-config' > {USER_DATA}"],
            check=True,
        )
        yield Machine(host, boot["publicKeyOpenssh"].strip(), login["privateKeyOpenssh"], tmp_path)


# Stands in for ssh on PATH: the n-th call of a phase (DROP_CALL) is dropped, before it
# dials (DROP_WHEN=before) or once the real client has finished (after: its answer is lost);
# then the phase is killed, as a cancelled `up` kills it.
DROPPING_SSH = """#!/usr/bin/env bash
state={state}
n=$(( $(cat "$state/calls" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$state/calls"
if [[ "$n" == "{call}" && "{when}" == before ]]; then kill -TERM "$PPID"; exit 255; fi
if [[ "$n" == "{call}" && "{when}" == after ]]; then
  /usr/bin/ssh "$@" >/dev/null 2>&1 || true
  kill -TERM "$PPID"
  exit 255
fi
exec /usr/bin/ssh "$@"
"""


@dataclass
class Up:
    """One stack's records of the two phases, across `up`s."""

    machine: Machine
    bastion: object = None
    state: dict[str, str] = field(default_factory=dict)
    runs: list[subprocess.CompletedProcess] = field(default_factory=list)

    def reach(self) -> Reach:
        host = self.machine.host
        return Reach(host.address, host.user, host.port, self.machine.login, self.bastion)

    def stdin(self, phase: str) -> str:
        host, reach = self.machine.host, self.reach()
        named = f"{host.name} (i-0test)"
        if phase == host_keys.ROTATION:
            return host_keys.local_stdin(
                named,
                host.address,
                reach,
                self.machine.login,
                host_keys=[self.machine.boot],
                program=host_keys.host_program("stage"),
                dial_seconds=60,
            )
        staged = self.state[host_keys.ROTATION]
        return host_keys.local_stdin(
            named,
            host.address,
            reach,
            self.machine.login,
            host_keys=[self.machine.boot, staged],
            verify=staged,
            program=host_keys.host_program("switch", staged),
            dial_seconds=60,
        )

    def run(self, phase: str, drop: tuple[int, str] | None) -> bool:
        path = os.environ["PATH"]
        if drop is not None:
            bin_dir = self.machine.work / f"drop-{len(self.runs)}"
            bin_dir.mkdir()
            (bin_dir / "ssh").write_text(
                DROPPING_SSH.format(state=bin_dir, call=drop[0], when=drop[1])
            )
            (bin_dir / "ssh").chmod(0o755)
            path = f"{bin_dir}:{path}"
        result = subprocess.run(
            ["/bin/sh", "-c", LOCAL_CREATE],
            input=self.stdin(phase),
            cwd=ROOT,
            env={"PATH": path, "AWS_SECRET_ACCESS_KEY": "deploy-role-secret"},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        self.runs.append(result)
        if result.returncode == 0:
            self.state[phase] = host_keys.pinned_key(phase, result.stdout)
        return result.returncode == 0

    def up(self, drop: tuple[str, int, str] | None = None) -> bool:
        """A `pulumi up`: each phase not in the state is created, in order; a failed one ends
        the `up` (what depends on it waits). `drop`: (phase, call, before | after)."""
        for phase in (host_keys.ROTATION, host_keys.SWITCH):
            if phase in self.state:
                continue
            phase_drop = drop[1:] if drop is not None and drop[0] == phase else None
            if not self.run(phase, phase_drop):
                return False
        return True


def pinned_connection_works(machine: Machine, key: str) -> bool:
    """A later step's dial: pinning `key` alone, as pulumi-command pins `hostKey`."""
    known = machine.work / "pinned_known_hosts"
    known.write_text(f"{machine.host.address} {key}\n")
    identity = machine.work / "login"
    identity.write_text(machine.login)
    identity.chmod(0o600)
    dial = subprocess.run(
        [
            *("ssh", "-F", "/dev/null", "-i", str(identity), "-o", "IdentitiesOnly=yes"),
            *("-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"),
            *("-o", f"UserKnownHostsFile={known}", "-o", "GlobalKnownHostsFile=/dev/null"),
            f"{machine.host.user}@{machine.host.address}",
            "true",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return dial.returncode == 0


def assert_completed(up: Up) -> None:
    machine, host = up.machine, up.machine.host
    key = up.state[host_keys.SWITCH]
    assert key == up.state[host_keys.ROTATION], up.state
    assert key != machine.boot
    assert host.read(LIVE_PUB).split()[:2] == key.split(), "the host serves another key"
    assert host.served_host_keys() == [key], "the boot key (or another) is still served"
    assert pinned_connection_works(machine, key)
    assert not pinned_connection_works(machine, machine.boot)
    assert not host.exists(STAGED_PUB) and not host.exists(USER_DATA)
    for run in up.runs:
        assert "PRIVATE KEY" not in run.stdout + run.stderr


def test_the_first_contact_replaces_the_boot_key_and_pins_what_the_host_serves(machine):
    up = Up(machine)
    assert up.up(), up.runs[-1].stderr
    assert_completed(up)
    assert "gpu-cluster host key: " + up.state[host_keys.SWITCH] in machine.host.console()
    # The phases' updates dial nothing: a second `up` runs nothing.
    assert up.up() and len(up.runs) == 2


@pytest.mark.parametrize(
    ("drop", "left"),
    [
        # Where the drop leaves the host: is a key staged, which key does sshd serve.
        pytest.param((host_keys.ROTATION, 1, "before"), ("none", "boot"), id="before staging"),
        pytest.param((host_keys.ROTATION, 1, "after"), ("staged", "boot"), id="after staging"),
        pytest.param((host_keys.SWITCH, 1, "before"), ("staged", "boot"), id="before the switch"),
        pytest.param((host_keys.SWITCH, 1, "after"), ("none", "new"), id="after the switch"),
        pytest.param((host_keys.SWITCH, 2, "after"), ("none", "new"), id="after the read"),
    ],
)
def test_a_rotation_dropped_at_any_point_is_completed_by_the_next_up(machine, drop, left):
    up = Up(machine)
    assert not up.up(drop=drop), "the dropped up succeeded"
    assert drop[0] not in up.state, "a dropped phase was recorded"
    host = machine.host
    staged_before = host.read(STAGED_PUB).strip() if host.exists(STAGED_PUB) else ""
    (served,) = host.served_host_keys()
    assert (
        "staged" if staged_before else "none",
        "boot" if served == machine.boot else "new",
    ) == left
    assert up.up(), up.runs[-1].stderr
    assert_completed(up)
    if drop[:2] == (host_keys.ROTATION, 1) and drop[2] == "after":
        # The key staged by the dropped run is the one the next run records.
        assert up.state[host_keys.SWITCH] == " ".join(staged_before.split()[:2])


def test_a_machine_rotated_by_the_one_phase_release_is_switched_in_place(machine):
    """The upgrade: a machine whose key the earlier release replaced in one phase (its record,
    the rotation's stdout, is the live key) gets its switch; nothing is rotated again."""
    up = Up(machine)
    assert up.up()
    live = up.state[host_keys.ROTATION]
    upgraded = Up(machine, state={host_keys.ROTATION: live})
    assert upgraded.up(), upgraded.runs[-1].stderr
    assert upgraded.state[host_keys.SWITCH] == live
    assert machine.host.served_host_keys() == [live]


def test_a_host_serving_a_key_it_may_not_have_is_not_dialled_on(machine):
    """A machine whose key moved on without a record (or another machine at its address):
    the rotation stops naming `hostKeys.<instance id>`, and the host keeps its key."""
    other = ed25519_key("another machine")
    machine.host.in_host(
        [
            "sh",
            "-c",
            "cat > /etc/ssh/ssh_host_ed25519_key && "
            f"ssh-keygen -y -f /etc/ssh/ssh_host_ed25519_key > {LIVE_PUB}",
        ],
        stdin=other["privateKeyOpenssh"],
        check=True,
    )
    up = Up(machine)
    assert not up.up()
    assert "gpu-cluster:hostKeys.<instance id>" in up.runs[-1].stderr, up.runs[-1].stderr
    assert not machine.host.exists(STAGED_PUB)


def test_through_a_bastion_the_hop_pins_the_bastions_key(machine):
    """network.bastion: the hop is `ssh -W` from the local script itself (`--hop`), pinned to
    the bastion's key. Here the bastion is the machine's own sshd, and it relays to itself."""

    class Bastion:
        host, port, user, host_key = machine.host.address, 22, machine.host.user, machine.boot

    up = Up(machine, bastion=Bastion)
    # The machine as the bastion reaches it.
    machine.host = dataclasses.replace(machine.host, address="127.0.0.1")
    assert up.run(host_keys.ROTATION, None), up.runs[-1].stderr
    assert machine.host.exists(STAGED_PUB)


def test_as_a_normal_user_the_real_sshd_tests_skip_saying_why_and_fail_in_ci(monkeypatch):
    """A network namespace and a veth need root: a normal user's run skips these tests naming
    why; with CI=true they fail instead (CI runs as root, .ci/run installs sshd and sudo)."""
    from _pytest.outcomes import Failed, Skipped

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert sshd.problem() == "a real sshd in a network namespace needs root"
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(Skipped, match="needs root"):
        sshd.require()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(Failed, match="CI must run this test"):
        sshd.require()

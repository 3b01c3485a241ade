"""The day-two host scripts, run for real in the sandbox: wait-ready.sh (what
authorize-ssh-keys.sh did, now in the node's first step) writes exactly the stack's keys into
the login user's authorized_keys (a rotated ssh.publicKey reaches a running machine, the login
key is never dropped while it logs in), and a second run changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sandbox import Sandbox, needs_sandbox

pytestmark = needs_sandbox

SCRIPT = "wait-ready.sh"
OLD = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOldOldOldOldOldOldOldOldOldOldOldOldOldOldOld ops@old"
NEW = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINewNewNewNewNewNewNewNewNewNewNewNewNewNewNew ops@new"
HOME = "/var/lib/gpu-cluster-test-home"
KEYS = f"{HOME}/.ssh/authorized_keys"
UBUNTU = 'NAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\n'
FAST = {"RETRY_BASE_SECONDS": "0.01"}


def keys(user: str, *lines: str) -> dict[str, str]:
    return {**FAST, "SSH_USER": user, "AUTHORIZED_KEYS": "\n".join(lines)}


@pytest.fixture
def host(tmp_path) -> Sandbox:
    sb = Sandbox(tmp_path)
    base = Path("/etc/passwd").read_text(encoding="utf-8")
    groups = Path("/etc/group").read_text(encoding="utf-8")
    sb.write("/etc/passwd", base + f"opsuser:x:4242:4242::{HOME}:/bin/bash\n")
    sb.write("/etc/group", groups + "opsuser:x:4242:\n")
    sb.write("/etc/os-release", UBUNTU)
    sb.write(KEYS, f"{OLD}\n", mode=0o600)
    return sb


def written(host: Sandbox) -> list[str]:
    return [line for line in host.host_path(KEYS).read_text().splitlines() if line[:1] != "#"]


def test_rotation_authorizes_both_keys_then_only_the_new_one(host):
    both = host.run(SCRIPT, keys("opsuser", NEW, OLD))
    assert both.returncode == 0, both.stderr
    assert written(host) == [NEW, OLD]
    assert oct(host.host_path(KEYS).stat().st_mode & 0o777) == "0o600"
    # The owner the script asked for, from the recorded calls: without root the sandbox maps no
    # user but root, so the files themselves cannot belong to opsuser (tests/stubs/install).
    assert both.called("install", "-d", "-m", "0700", "-o", "opsuser", "-g", "opsuser"), (
        both.commands()
    )
    assert both.called("chown", "opsuser:opsuser", KEYS), both.commands()
    assert "authorized_keys of opsuser now holds 2 key(s)" in both.stderr, both.stderr
    again = host.run(SCRIPT, keys("opsuser", NEW, OLD))
    assert again.returncode == 0 and "no change" in again.stderr, again.stderr
    only_new = host.run(SCRIPT, keys("opsuser", NEW))
    assert only_new.returncode == 0, only_new.stderr
    assert written(host) == [NEW]


def test_the_same_key_twice_is_written_once(host):
    """ssh.publicKey and the key derived from sshPrivateKey are one key once a rotation is
    done."""
    result = host.run(SCRIPT, keys("opsuser", NEW, NEW))
    assert result.returncode == 0, result.stderr
    assert written(host) == [NEW]


def test_a_line_that_is_no_key_is_refused_before_touching_anything(host):
    result = host.run(SCRIPT, keys("opsuser", "not a key"))
    assert result.returncode != 0
    assert "is not an OpenSSH public key" in result.stderr, result.stderr
    assert host.host_path(KEYS).read_text() == f"{OLD}\n"
    assert result.calls == [], f"waited for the host before refusing: {result.commands()}"


def test_a_user_the_host_does_not_have_is_refused_before_writing_keys(host):
    """ssh.user names a user the image does not have (ubuntu on an image whose user is
    ec2-user): no authorized_keys is written, and the message names the user and the key to
    set (getent's exit 2 for an unknown user used to stop the step with only its command line)."""
    result = host.run(SCRIPT, keys("ec2-user", NEW))
    assert result.returncode == 1, result.stderr
    assert (
        "FAILED: user ec2-user expected with a home directory, getent finds ''" in result.stderr
    ), result.stderr
    assert host.host_path(KEYS).read_text() == f"{OLD}\n"
    assert result.calls == [], result.commands()


def test_keys_without_a_user_or_a_user_without_keys_is_refused(host):
    for params in ({**FAST, "SSH_USER": "opsuser"}, {**FAST, "AUTHORIZED_KEYS": NEW}):
        result = host.run(SCRIPT, params)
        assert result.returncode == 1, result.stderr
        missing = "AUTHORIZED_KEYS" if "SSH_USER" in params else "SSH_USER"
        assert f"missing required input(s): {missing}" in result.stderr, result.stderr
        assert host.host_path(KEYS).read_text() == f"{OLD}\n"


def test_without_keys_the_file_is_left_alone(host):
    """Neither input (the script run by hand to check a host): no keys written or removed."""
    result = host.run(SCRIPT, FAST)
    assert result.returncode == 0, result.stderr
    assert "no keys to write" in result.stderr
    assert host.host_path(KEYS).read_text() == f"{OLD}\n"

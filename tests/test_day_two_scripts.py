"""The day-two host scripts, run for real in the sandbox: authorize-ssh-keys.sh writes exactly
the stack's keys (a rotated ssh.publicKey reaches a running machine, the login key is never
dropped while it logs in), and a second run changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sandbox import Sandbox, needs_sandbox

OLD = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOldOldOldOldOldOldOldOldOldOldOldOldOldOldOld ops@old"
NEW = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINewNewNewNewNewNewNewNewNewNewNewNewNewNewNew ops@new"
HOME = "/var/lib/gpu-cluster-test-home"
KEYS = f"{HOME}/.ssh/authorized_keys"
BOTH = {"SSH_USER": "opsuser", "AUTHORIZED_KEYS": f"{NEW}\n{OLD}"}


@pytest.fixture
def host(tmp_path) -> Sandbox:
    sb = Sandbox(tmp_path)
    base = Path("/etc/passwd").read_text(encoding="utf-8")
    groups = Path("/etc/group").read_text(encoding="utf-8")
    sb.write("/etc/passwd", base + f"opsuser:x:4242:4242::{HOME}:/bin/bash\n")
    sb.write("/etc/group", groups + "opsuser:x:4242:\n")
    sb.write(KEYS, f"{OLD}\n", mode=0o600)
    return sb


@needs_sandbox
def test_rotation_authorizes_both_keys_then_only_the_new_one(host):
    both = host.run(
        "authorize-ssh-keys.sh", {"SSH_USER": "opsuser", "AUTHORIZED_KEYS": f"{NEW}\n{OLD}"}
    )
    assert both.returncode == 0, both.stderr
    lines = [line for line in host.host_path(KEYS).read_text().splitlines() if line[:1] != "#"]
    assert lines == [NEW, OLD], lines
    assert oct(host.host_path(KEYS).stat().st_mode & 0o777) == "0o600"
    # The owner the script asked for, from the recorded calls: without root the sandbox maps no
    # user but root, so the files themselves cannot belong to opsuser (tests/stubs/install).
    assert both.called("install", "-d", "-m", "0700", "-o", "opsuser", "-g", "opsuser"), (
        both.commands()
    )
    assert both.called("chown", "opsuser:opsuser", KEYS), both.commands()
    again = host.run(
        "authorize-ssh-keys.sh", {"SSH_USER": "opsuser", "AUTHORIZED_KEYS": f"{NEW}\n{OLD}"}
    )
    assert again.returncode == 0 and "no change" in again.stderr, again.stderr
    only_new = host.run("authorize-ssh-keys.sh", {"SSH_USER": "opsuser", "AUTHORIZED_KEYS": NEW})
    assert only_new.returncode == 0, only_new.stderr
    lines = [line for line in host.host_path(KEYS).read_text().splitlines() if line[:1] != "#"]
    assert lines == [NEW], lines


@needs_sandbox
def test_a_line_that_is_no_key_is_refused_before_touching_the_file(host):
    result = host.run(
        "authorize-ssh-keys.sh", {"SSH_USER": "opsuser", "AUTHORIZED_KEYS": "not a key"}
    )
    assert result.returncode != 0
    assert "is not an OpenSSH public key" in result.stderr, result.stderr
    assert host.host_path(KEYS).read_text() == f"{OLD}\n"


@needs_sandbox
def test_a_user_the_host_does_not_have_is_refused_before_writing_keys(host):
    """ssh.user names a user the image does not have (ubuntu on an image whose user is
    ec2-user): no authorized_keys is written, and the message names the user and the key to
    set (getent's exit 2 for an unknown user used to stop the step with only its command line)."""
    result = host.run("authorize-ssh-keys.sh", {"SSH_USER": "ec2-user", "AUTHORIZED_KEYS": NEW})
    assert result.returncode == 1, result.stderr
    assert (
        "FAILED: user ec2-user expected with a home directory, getent finds ''" in result.stderr
    ), result.stderr
    assert host.host_path(KEYS).read_text() == f"{OLD}\n"

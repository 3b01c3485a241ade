"""A dpkg killed in the middle of a transaction (a step's timeout) is finished before apt runs
again (issue 39, finding 5). apt refuses every install while dpkg's journal holds an entry
(apt-pkg/deb/debsystem.cc, debSystem::Lock and CheckUpdates); each step that runs apt runs
`dpkg --configure -a` first, as apt asks, and only then."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.hosts import pins
from tests.helpers.archive import Archive, gpu_host, install_steps
from tests.sandbox import Sandbox, needs_sandbox

JOURNAL = "/var/lib/dpkg/updates/0004"
STEPS = dict(install_steps("g5.xlarge", "24.04"))


@pytest.fixture
def host(tmp_path: Path) -> Sandbox:
    sb = gpu_host(Sandbox(tmp_path), gpus=1)  # a g5.xlarge
    Archive.today(sb)
    return sb


def interrupt_dpkg(host: Sandbox) -> None:
    """What a killed dpkg leaves: a journal entry named by digits (and a tmp file it ignores)."""
    host.write(JOURNAL, "Package: nvidia-utils-580-server\nStatus: install ok unpacked\n")
    host.write("/var/lib/dpkg/updates/tmp.i", "")


@needs_sandbox
@pytest.mark.parametrize("sudo_user", [None, "ubuntu"])
def test_apt_refuses_as_apt_does_while_dpkg_is_interrupted(host, sudo_user):
    interrupt_dpkg(host)
    env = f"SUDO_USER={sudo_user} " if sudo_user else ""
    result = host.run_text(f"{env}DEBIAN_FRONTEND=noninteractive apt-get -y install nvlsm\n")
    assert result.returncode == 100
    command = f"{'sudo ' if sudo_user else ''}dpkg --configure -a"
    assert result.stderr == (
        f"E: dpkg was interrupted, you must manually run '{command}' to correct the problem. \n"
    )
    assert host.run_text("apt-get update\n").returncode == 0, "update takes no dpkg lock"


@needs_sandbox
@pytest.mark.parametrize(
    "script", ["install-driver.sh", "install-runtime.sh", "install-kube-tools.sh"]
)
def test_each_step_that_installs_finishes_the_interrupted_dpkg_first(host, script):
    interrupt_dpkg(host)
    result = host.run(script, STEPS[script])
    assert result.returncode == 0, result.stderr
    commands = result.commands()
    repair = "dpkg --force-confdef --force-confold --configure -a"
    assert repair in commands, commands
    first_apt = next(i for i, c in enumerate(commands) if c.startswith("apt-get"))
    assert commands.index(repair) < first_apt
    assert f"dpkg was interrupted ({JOURNAL} left behind): running dpkg --configure -a" in (
        result.stderr
    )
    assert not host.exists(JOURNAL)
    again = host.run(script, STEPS[script])
    assert again.returncode == 0 and not again.called("dpkg"), again.commands()


@needs_sandbox
def test_wait_ready_finishes_it_before_the_lists(host):
    interrupt_dpkg(host)
    result = host.run("wait-ready.sh", STEPS["wait-ready.sh"])
    assert result.returncode == 0, result.stderr
    assert result.called("dpkg", "--force-confdef", "--force-confold", "--configure", "-a")
    assert not host.exists(JOURNAL)


RUNTIME = {
    **pins.runtime_params("24.04", "1.35", with_toolkit=True),
    "RETRY_BASE_SECONDS": "0.01",
    "DPKG_LOCK_POLL_SECONDS": "0.2",
}


@needs_sandbox
def test_a_dpkg_lock_held_by_another_apt_is_waited_out(host):
    """dpkg takes no lock timeout: held by unattended-upgrades it fails at once; tried again."""
    interrupt_dpkg(host)
    host.state("dpkg.fail.configure", 1)
    result = host.run("install-runtime.sh", RUNTIME)
    assert result.returncode == 0, result.stderr
    assert len(result.called("dpkg")) == 2
    assert "dpkg frontend lock was locked by another process" in result.stderr


@needs_sandbox
def test_the_repair_waits_for_the_lock_as_long_as_apt_would(host):
    """unattended-upgrades holds dpkg's lock for longer than a few retries last (3 s here, with
    retries of 10 ms), well inside apt's 600 s: the repair waits for it, as apt would."""
    interrupt_dpkg(host)
    host.hold_apt_lock(3)
    result = host.run("install-runtime.sh", RUNTIME)
    assert result.returncode == 0, result.stderr
    assert "another package manager holds dpkg's lock: waiting for it (at most 600s)" in (
        result.stderr
    )
    assert not host.exists(JOURNAL)


@needs_sandbox
def test_a_repair_that_fails_stops_the_step_with_dpkgs_error(host):
    """A maintainer script that fails: the step stops at the repair, naming dpkg's error and the
    way out, and runs apt no more."""
    interrupt_dpkg(host)
    host.state("dpkg.half-configured/nvidia-utils-580-server", "")
    host.state("dpkg.postinst-fails/nvidia-utils-580-server", "")
    result = host.run("install-runtime.sh", RUNTIME)
    assert result.returncode == 1
    assert (
        "FAILED: dpkg --configure -a failed (exit 1) finishing an interrupted dpkg: dpkg: error "
        "processing package nvidia-utils-580-server (--configure):  installed "
        "nvidia-utils-580-server package post-installation script subprocess returned error exit "
        "status 1. Fix what dpkg reports above" in result.stderr
    ), result.stderr
    assert "run 'sudo dpkg --configure -a' until it succeeds, then pulumi up again" in (
        result.stderr
    )
    assert len(result.called("dpkg")) == 1
    assert not any("install" in c for c in result.called("apt-get"))

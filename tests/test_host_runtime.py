"""install-runtime.sh's containerd against archives that move (issue 35, finding 1): the pin
installs from Docker's repository, which keeps every containerd.io it published, on the day
Ubuntu's archive replaces 2.2.1 with 2.2.2; a pin nobody offers fails naming what is offered,
never by taking the newest. Why: docs/decisions/042-containerd-from-a-repository-that-keeps-
every-version.md."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from components.hosts import pins
from tests.helpers.archive import DOCKER_LIST, Archive, gpu_host, installed
from tests.sandbox import Sandbox, needs_sandbox

FAST = {"RETRY_BASE_SECONDS": "0.01"}
KEYRING = "/etc/apt/keyrings/docker.gpg"


def runtime(release: str = "24.04") -> dict[str, str]:
    return {**pins.runtime_params(release, "1.35", with_toolkit=True), **FAST}


@pytest.fixture
def host(tmp_path: Path) -> Sandbox:
    return gpu_host(Sandbox(tmp_path))


def containerd_installs(result) -> list[list[str]]:
    return [
        call
        for call in result.called("apt-get")
        if "install" in call and any(arg.startswith("containerd") for arg in call)
    ]


@needs_sandbox
@pytest.mark.parametrize("release", ["24.04", "22.04"])
def test_the_pin_installs_from_dockers_repository_and_is_held(tmp_path, release):
    host = gpu_host(Sandbox(tmp_path), release)
    Archive.today(host, release)
    result = host.run("install-runtime.sh", runtime(release))
    assert result.returncode == 0, result.stderr
    assert host.installed("containerd.io") == pins.CONTAINERD_VERSIONS[release]
    assert host.installed("containerd") is None
    assert "containerd.io" in host.held()
    codename = pins.UBUNTU_CODENAMES[release]
    assert host.read(DOCKER_LIST) == (
        f"deb [signed-by={KEYRING}] https://download.docker.com/linux/ubuntu {codename} stable\n"
    )
    assert host.read(KEYRING).startswith("dearmored keyring")


@needs_sandbox
def test_the_pin_still_installs_when_ubuntu_replaced_it_with_a_newer_containerd(host):
    """Next month's archive: Ubuntu's -updates has 2.2.2 only, Docker's has 2.2.1 and 2.2.2."""
    Archive.next_month(host)
    result = host.run("install-runtime.sh", runtime())
    assert result.returncode == 0, result.stderr
    assert host.installed("containerd.io") == pins.CONTAINERD_VERSIONS["24.04"]
    assert not any("2.2.2" in version for version in installed(host).values())


@needs_sandbox
def test_a_pin_the_repository_does_not_offer_fails_before_installing_anything(host):
    Archive.today(host)
    result = host.run(
        "install-runtime.sh", {**runtime(), "CONTAINERD_VERSION": "2.2.9-1~ubuntu.24.04~noble"}
    )
    assert result.returncode == 1
    assert (
        "[runtime] FAILED: containerd.io 2.2.9-1~ubuntu.24.04~noble wanted "
        "(components/hosts/pins.py), Docker's repository offers "
        "2.2.1-1~ubuntu.24.04~noble,2.2.0-2~ubuntu.24.04~noble" in result.stderr
    ), result.stderr
    assert containerd_installs(result) == []
    assert "containerd.io" not in installed(host)


@needs_sandbox
def test_a_running_node_moves_from_ubuntus_containerd_in_one_transaction(host):
    """A node of an earlier release: Ubuntu's containerd 2.2.1 installed and held. containerd.io
    conflicts with it (and replaces it): one install takes it over, the hold moves with it."""
    Archive.today(host)
    host.state("dpkg/containerd", "2.2.1-0ubuntu1~24.04.2")
    host.state("dpkg/runc", "1.3.3-0ubuntu1~24.04.2")
    host.state("apt-mark.held", "containerd\n")
    result = host.run("install-runtime.sh", runtime())
    assert result.returncode == 0, result.stderr
    (install,) = containerd_installs(result)
    assert "--allow-change-held-packages" in install
    assert host.installed("containerd.io") == pins.CONTAINERD_VERSIONS["24.04"]
    assert host.installed("containerd") is None and host.installed("runc") is None
    again = host.run("install-runtime.sh", runtime())
    assert again.returncode == 0, again.stderr
    assert containerd_installs(again) == []


@needs_sandbox
def test_a_key_that_is_not_dockers_is_never_trusted(host):
    Archive.today(host)
    host.state("curl.body.gpg", "stub key fingerprint 0123456789ABCDEF0123456789ABCDEF01234567\n")
    result = host.run("install-runtime.sh", runtime())
    assert result.returncode == 1
    assert (
        "[runtime] FAILED: the key at https://download.docker.com/linux/ubuntu/gpg has "
        "fingerprint 0123456789ABCDEF0123456789ABCDEF01234567, "
        "9DC858229FC7DD38854AE2D88D81803C0EBFCD88 expected: not trusting it" in result.stderr
    ), result.stderr
    assert not host.exists(KEYRING) and not host.exists(DOCKER_LIST)


@needs_sandbox
def test_crictl_talks_to_containerd(host):
    """Issue 35, finding 8: without /etc/crictl.yaml crictl probes deprecated endpoints."""
    Archive.today(host)
    result = host.run("install-runtime.sh", runtime())
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(host.read("/etc/crictl.yaml"))
    socket = "unix:///run/containerd/containerd.sock"
    assert config == {"runtime-endpoint": socket, "image-endpoint": socket, "timeout": 10}
    again = host.run("install-runtime.sh", runtime())
    assert "/etc/crictl.yaml: no change" in again.stderr

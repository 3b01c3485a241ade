"""The host steps against an archive that moved on since the pins were chosen (issue 35): a new
containerd (2.2.2 replaced 2.2.1 in Ubuntu's -updates), a driver point release (580.105.08
replaced 580.95.05), a newer kernel whose module is built for it, while the AMI's kernel left the
pocket with its modules; a newer toolkit and Kubernetes patch too (tests/helpers/archive.py
`Archive.next_month`). A new node still installs, at the pins; a node installed before is not
upgraded by a re-run of its steps (an update of a script, a roll for another change)."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.hosts import pins
from tests.helpers.archive import (
    KERNEL,
    NEWER_KERNEL,
    POINT_RELEASE,
    Archive,
    gpu_host,
    installed,
    run_install_steps,
)
from tests.sandbox import Sandbox, needs_sandbox

NODES = [
    ("g6.48xlarge", "24.04"),
    ("g5.xlarge", "22.04"),
    ("p5.48xlarge", "24.04"),
    ("p6-b200.48xlarge", "22.04"),
]


def host_of(tmp_path: Path, instance_type: str, release: str) -> Sandbox:
    from components.catalog import CATALOG

    return gpu_host(Sandbox(tmp_path), release, gpus=CATALOG[instance_type].gpu_count)


def succeeded(results) -> None:
    failed = [r for r in results if r.returncode != 0]
    assert not failed and len(results) == 5, failed[0].stderr if failed else results


def installs(results) -> list[list[str]]:
    return [c for r in results for c in r.called("apt-get") if "install" in c]


@needs_sandbox
@pytest.mark.parametrize(("instance_type", "release"), NODES)
def test_a_new_node_still_installs_from_next_months_archive(tmp_path, instance_type, release):
    host = host_of(tmp_path, instance_type, release)
    Archive.next_month(host, release)
    results = run_install_steps(host, instance_type, release)
    succeeded(results)
    # The pinned containerd, not Ubuntu's newer one or Docker's newest.
    assert host.installed("containerd.io") == pins.CONTAINERD_VERSIONS[release]
    assert host.installed("containerd") is None
    # The toolkit at its pin; kubelet at the newest patch of the pinned minor.
    assert host.installed("nvidia-container-toolkit") == pins.NVIDIA_CTK_VERSION
    assert host.installed("kubelet") == "1.35.2-1.1"
    # The AMI's kernel has no module left: the node moved once, to the newer kernel, and runs
    # the driver its module is built for.
    assert host.state("uname.r") == NEWER_KERNEL
    assert host.installed(f"linux-headers-{NEWER_KERNEL}")
    assert host.installed("nvidia-utils-580-server").startswith(f"{POINT_RELEASE}-")
    assert host.state("nvidia.loaded-version").strip() == POINT_RELEASE


@needs_sandbox
@pytest.mark.parametrize(("instance_type", "release"), NODES)
def test_an_installed_node_is_not_upgraded_by_next_months_archive(tmp_path, instance_type, release):
    host = host_of(tmp_path, instance_type, release)
    Archive.today(host, release)
    succeeded(run_install_steps(host, instance_type, release))
    before, held = installed(host), host.held()
    assert host.state("uname.r") in (None, KERNEL)

    Archive.next_month(host, release)
    results = run_install_steps(host, instance_type, release)
    succeeded(results)
    assert installs(results) == [], "a re-run installed something"
    assert installed(host) == before
    assert host.held() == held
    assert (host.state("uname.r") or KERNEL) == KERNEL, "the node moved to another kernel"
    assert all(r.called("systemd-run") == [] for r in results), "a reboot was scheduled"
    assert all(r.called("modprobe", "-r", "nvidia") == [] for r in results)

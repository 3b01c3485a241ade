"""No kernel arrives between first boot and the driver without its NVIDIA module (issue 35,
finding 3): the first-boot unattended-upgrades run (apt-daily-upgrade.timer is Persistent) may
install a newer kernel before the driver step, which then installed the module for `uname -r`
only, and the next boot came up with no GPUs, Ready all the same. Why and how:
docs/decisions/046-no-kernel-before-the-driver.md."""

from __future__ import annotations

import configparser
from pathlib import Path

import pytest

from components.catalog import CATALOG
from components.hosts import pins
from tests.helpers.archive import (
    DRIVER,
    KERNEL,
    NEWER_KERNEL,
    POINT_RELEASE,
    Archive,
    gpu_host,
    ubuntu_version,
)
from tests.sandbox import Sandbox, needs_sandbox

FAST = {"RETRY_BASE_SECONDS": "0.01"}
DRIVER_PARAMS = {**pins.driver_params(CATALOG["g6.48xlarge"], "24.04", "580", "open"), **FAST}
NOUVEAU = {"DRIVER_BRANCH": "580", "KERNEL_MODULES": "open", "REBOOT_DELAY_SECONDS": "5"}
READY = {"KERNEL_WITH_DRIVER": "true", **FAST}
UU_CONF = "/etc/apt/apt.conf.d/51gpu-cluster-kernel-and-driver"


def module(kernel: str) -> str:
    return f"linux-modules-nvidia-580-server-open-{kernel}"


def installed_by_unattended_upgrades(sb: Sandbox, kernel: str) -> None:
    """What the first-boot apt-daily-upgrade run leaves: a newer kernel image, not running."""
    abi = kernel.rsplit("-", 1)[0]
    for part in ("image", "modules"):
        sb.state(f"dpkg/linux-{part}-{kernel}", f"{abi}.23")


def reboot_into(sb: Sandbox, kernel: str) -> None:
    """The reboot the nouveau step scheduled: the newest kernel runs, nothing is loaded."""
    sb.state("uname.r", kernel)
    sb.state("modules", "")


@pytest.fixture
def host(tmp_path: Path) -> Sandbox:
    """A g6.48xlarge on its first boot; the archive has modules for the AMI's kernel and for a
    newer one, both built for the same driver."""
    sb = gpu_host(Sandbox(tmp_path))
    archive = Archive.today(sb)
    archive.kernel(NEWER_KERNEL)
    archive.modules_for(NEWER_KERNEL, DRIVER)
    for package in ("linux-aws", "linux-image-aws", "linux-headers-aws"):
        sb.state(f"dpkg/{package}", "6.8.0.1021.23")
    return sb


@needs_sandbox
def test_a_kernel_installed_on_first_boot_is_the_one_the_driver_goes_in_for(host):
    installed_by_unattended_upgrades(host, NEWER_KERNEL)
    assert host.run("wait-ready.sh", READY).returncode == 0
    nouveau = host.run("disable-nouveau.sh", NOUVEAU)
    assert nouveau.returncode == 0, nouveau.stderr
    assert f"kernel {KERNEL} -> {NEWER_KERNEL} (installed since boot)" in nouveau.stderr
    assert nouveau.called("systemd-run"), "no reboot into the kernel the host boots next"
    assert host.installed(f"linux-headers-{NEWER_KERNEL}"), "a kernel move brings its headers"
    reboot_into(host, NEWER_KERNEL)
    driver = host.run("install-driver.sh", DRIVER_PARAMS)
    assert driver.returncode == 0, driver.stderr
    assert host.installed(module(NEWER_KERNEL)), "the kernel that boots has no NVIDIA module"


@needs_sandbox
def test_the_kernel_that_boots_next_gets_its_module_in_the_drivers_transaction(host):
    """A newer kernel installed after the nouveau step ran (by hand, or an earlier release's
    unattended-upgrades): the driver step installs the module for it as well."""
    installed_by_unattended_upgrades(host, NEWER_KERNEL)
    result = host.run("install-driver.sh", DRIVER_PARAMS)
    assert result.returncode == 0, result.stderr
    (install,) = [c for c in result.called("apt-get") if "install" in c]
    assert f"{module(KERNEL)}=6.8.0-1021.23" in install
    assert f"{module(NEWER_KERNEL)}=6.8.0-1030.23" in install
    assert f"kernel {NEWER_KERNEL} is installed and boots next: its module goes in too" in (
        result.stderr
    )


@needs_sandbox
def test_a_kernel_that_boots_next_without_a_module_of_this_driver_stops_the_driver(host):
    Archive(host).modules_for(NEWER_KERNEL, POINT_RELEASE, rebuild=True)
    host.apt_available(module(NEWER_KERNEL), "6.8.0-1030.23+1")
    installed_by_unattended_upgrades(host, NEWER_KERNEL)
    result = host.run("install-driver.sh", DRIVER_PARAMS)
    assert result.returncode == 1
    assert (
        f"[driver] FAILED: kernel {NEWER_KERNEL} is installed and boots next, but the archive's "
        f"{module(NEWER_KERNEL)} is built for driver {POINT_RELEASE}, not {DRIVER}: the node "
        "would boot it without GPUs" in result.stderr
    ), result.stderr
    assert [c for c in result.called("apt-get") if "install" in c] == []


@needs_sandbox
def test_a_first_boot_kernel_without_a_module_stops_the_nouveau_step(host):
    installed_by_unattended_upgrades(host, "6.8.0-1040-aws")
    result = host.run("disable-nouveau.sh", NOUVEAU)
    assert result.returncode == 1
    assert (
        "[nouveau] FAILED: kernel 6.8.0-1040-aws was installed since boot and boots next, but the "
        f"archive has no {module('6.8.0-1040-aws')}" in result.stderr
    ), result.stderr
    assert result.called("systemd-run") == []


@needs_sandbox
def test_gpu_nodes_keep_unattended_upgrades_off_kernels_from_their_first_step(host):
    result = host.run("wait-ready.sh", READY)
    assert result.returncode == 0, result.stderr
    conf = host.read(UU_CONF)
    assert "Unattended-Upgrade::Package-Blacklist {" in conf
    for prefix in ('"linux-";', '"nvidia-";', '"libnvidia-";'):
        assert prefix in conf
    assert {"linux-aws", "linux-image-aws", "linux-headers-aws"} <= host.held()


@needs_sandbox
def test_other_hosts_keep_their_kernel_updates(host):
    result = host.run("wait-ready.sh", FAST)
    assert result.returncode == 0, result.stderr
    assert not host.exists(UU_CONF) and host.held() == set()


@needs_sandbox
def test_a_kernel_move_brings_its_headers_and_modules_extra(host):
    """The AMI's kernel has no signed module any more: the nouveau step moves to the newest
    kernel that has one, with headers (DKMS builds EFA's driver against them) and, as the
    running kernel has it, modules-extra."""
    host.state(f"apt.available/{module(KERNEL)}", "")
    host.state(f"dpkg/linux-modules-extra-{KERNEL}", "6.8.0-1021.23")
    result = host.run("disable-nouveau.sh", NOUVEAU)
    assert result.returncode == 0, result.stderr
    for part in ("image", "modules", "headers", "modules-extra"):
        assert host.installed(f"linux-{part}-{NEWER_KERNEL}"), part


@needs_sandbox
def test_kubelet_requires_the_boot_check(host):
    """Before=kubelet alone orders the check; RequiredBy=kubelet makes kubelet not start when
    it fails (systemd.unit(5)), so a kernel without a module leaves the node NotReady instead
    of Ready with no GPUs."""
    result = host.run("install-driver.sh", DRIVER_PARAMS)
    assert result.returncode == 0, result.stderr
    unit = configparser.ConfigParser(strict=False)
    unit.read_string(host.read("/etc/systemd/system/gpu-cluster-nvidia-boot-check.service"))
    assert "kubelet.service" in unit["Unit"]["Before"].split()
    assert "kubelet.service" in unit["Install"]["RequiredBy"].split()
    assert result.called("systemctl", "enable", "gpu-cluster-nvidia-boot-check")


# The only upload of the userspace -updates keeps once the driver moved on (580.105.08's).
OFFERED = ubuntu_version(POINT_RELEASE, "24.04")


@needs_sandbox
def test_a_module_that_outlived_its_drivers_userspace_moves_the_kernel(tmp_path):
    """Issue 39, finding 2: a new node on an older image after Ubuntu updated the driver. The
    AMI kernel's module is still offered, built for 580.95.05, but -updates keeps only 580.105.08
    of the userspace: the nouveau step moves to the newest kernel whose module is built for a
    driver the archive offers, and the driver step installs it after the reboot."""
    host = gpu_host(Sandbox(tmp_path), gpus=8)
    Archive.after_a_driver_update(host)
    assert host.state(f"apt.available/{module(KERNEL)}"), "the AMI kernel's module is offered"
    assert host.run("wait-ready.sh", READY).returncode == 0
    nouveau = host.run("disable-nouveau.sh", NOUVEAU)
    assert nouveau.returncode == 0, nouveau.stderr
    assert (
        f"the archive's {module(KERNEL)} is built for driver {DRIVER}, whose userspace it no "
        f"longer offers (nvidia-kernel-common-580-server: {OFFERED}): "
        f"installing kernel {NEWER_KERNEL}" in nouveau.stderr
    ), nouveau.stderr
    assert host.installed(f"linux-image-{NEWER_KERNEL}")
    reboot_into(host, NEWER_KERNEL)
    driver = host.run("install-driver.sh", DRIVER_PARAMS)
    assert driver.returncode == 0, driver.stderr
    assert host.installed(module(NEWER_KERNEL))
    assert host.installed("nvidia-kernel-common-580-server").startswith(f"{POINT_RELEASE}-")
    assert f"driver {POINT_RELEASE} for kernel {NEWER_KERNEL}" in driver.stderr


@needs_sandbox
def test_no_kernel_with_a_usable_module_stops_the_nouveau_step_naming_why(tmp_path):
    host = gpu_host(Sandbox(tmp_path), gpus=8)
    archive = Archive.after_a_driver_update(host)
    archive.drop_kernel(NEWER_KERNEL)
    result = host.run("disable-nouveau.sh", NOUVEAU)
    assert result.returncode == 1
    assert (
        f"[nouveau] FAILED: the archive's {module(KERNEL)} is built for driver {DRIVER}, whose "
        f"userspace it no longer offers (nvidia-kernel-common-580-server: {OFFERED}), and no "
        "linux-modules-nvidia-580-server-open-* of another aws kernel is built for a driver it "
        "offers" in result.stderr
    ), result.stderr
    assert result.called("systemd-run") == []

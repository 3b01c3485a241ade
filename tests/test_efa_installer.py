"""install-efa.sh runs only an installer AWS signed, and is done only when the running kernel
loads the installer's efa driver (issue 35, finding 6): after a kernel move without headers
DKMS cannot build it and the kernel's in-tree efa loaded silently, while the step looked at the
installer's version record. Why: docs/decisions/047-efa-verified-and-checked-by-its-loaded-
module.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.hosts import pins
from tests.helpers.archive import (
    KERNEL,
    NEWER_KERNEL,
    Archive,
    efa_installer_archive,
    gpu_host,
    serve_efa_installer,
    stub_signature,
)
from tests.sandbox import Sandbox, needs_sandbox

EFA = {**pins.efa_params(32), "RETRY_BASE_SECONDS": "0.01"}
VERSION = pins.EFA_INSTALLER_VERSION
DRIVER = pins.EFA_DRIVER_VERSION
URL = f"https://efa-installer.amazonaws.com/aws-efa-installer-{VERSION}.tar.gz"


@pytest.fixture
def host(tmp_path: Path) -> Sandbox:
    """A p5.48xlarge with its 32 EFA devices, containerd running, no EFA software yet."""
    sb = gpu_host(Sandbox(tmp_path))
    archive = Archive.today(sb)
    archive.kernel(NEWER_KERNEL)
    sb.state("efa.devices", 32)
    sb.state("dpkg/containerd.io", pins.CONTAINERD_VERSIONS["24.04"])
    serve_efa_installer(sb)
    return sb


def installer_runs(result) -> list[list[str]]:
    return result.called("efa_installer.sh")


@needs_sandbox
def test_the_installer_runs_after_its_signature_checks_out_against_awss_key(host):
    result = host.run("install-efa.sh", EFA)
    assert result.returncode == 0, result.stderr
    urls = [call[-1] for call in result.called("curl")]
    assert urls == [
        "https://efa-installer.amazonaws.com/aws-efa-installer.key",
        URL,
        f"{URL}.sig",
    ], urls
    (verify,) = result.called("gpgv")
    assert verify[1] == "--keyring" and verify[-2:][0].endswith(".sig"), verify
    assert installer_runs(result)
    commands = result.commands()
    assert commands.index(" ".join(verify)) < commands.index(" ".join(installer_runs(result)[0]))
    assert f"the EFA installer {VERSION} is signed by AWS's key" in result.stderr


@needs_sandbox
def test_an_installer_whose_bytes_differ_from_what_aws_signed_never_runs(host):
    signed = efa_installer_archive(VERSION, DRIVER)
    serve_efa_installer(host, signature=stub_signature(signed + b"\0"))
    result = host.run("install-efa.sh", EFA)
    assert result.returncode == 1
    assert (
        f"[efa] FAILED: the EFA installer {VERSION} ({URL}) does not carry a good signature of "
        "AWS's key 4E9091BCBB97A96B26B15E59A05480B1DD2D3CCC: not running it" in result.stderr
    ), result.stderr
    assert installer_runs(result) == []


@needs_sandbox
def test_an_installer_signed_by_another_key_never_runs(host):
    archive = efa_installer_archive(VERSION, DRIVER)
    serve_efa_installer(host, signature=stub_signature(archive, "C0FFEE" * 6 + "C0FF"))
    result = host.run("install-efa.sh", EFA)
    assert result.returncode == 1
    assert "does not carry a good signature of AWS's key" in result.stderr
    assert installer_runs(result) == []


@needs_sandbox
def test_a_key_that_is_not_awss_is_never_trusted(host):
    host.state("curl.body.aws-efa-installer.key", "stub key fingerprint " + "12" * 20 + "\n")
    result = host.run("install-efa.sh", EFA)
    assert result.returncode == 1
    assert (
        "[efa] FAILED: the key at https://efa-installer.amazonaws.com/aws-efa-installer.key has "
        "fingerprint "
        + "12" * 20 + ", 4E9091BCBB97A96B26B15E59A05480B1DD2D3CCC expected"
        in result.stderr
    ), result.stderr
    assert installer_runs(result) == [] and result.called("gpgv") == []


@needs_sandbox
def test_after_a_kernel_move_without_headers_the_installers_driver_is_built_again(host):
    """Installed on the AMI's kernel; the host then moved to a newer kernel whose headers were
    not installed, so DKMS built no efa for it and the kernel's own loads. The record still
    says the installer is there: the step installs the headers and runs it again."""
    assert host.run("install-efa.sh", EFA).returncode == 0
    assert host.state(f"modinfo/{KERNEL}/efa") == f"{DRIVER}g"
    host.state("uname.r", NEWER_KERNEL)
    host.state("modules", "")
    result = host.run("install-efa.sh", EFA)
    assert result.returncode == 0, result.stderr
    assert "but the running kernel loads efa '', not its driver" in result.stderr
    assert host.installed(f"linux-headers-{NEWER_KERNEL}")
    assert installer_runs(result), "the in-tree efa was left in place"
    assert host.state(f"modinfo/{NEWER_KERNEL}/efa") == f"{DRIVER}g"
    assert f"efa driver {DRIVER}g loaded" in result.stderr


@needs_sandbox
def test_an_efa_loaded_before_the_installer_built_its_driver_is_loaded_again(host):
    host.state("modules", "efa\n")  # the kernel's own, loaded at boot
    result = host.run("install-efa.sh", EFA)
    assert result.returncode == 0, result.stderr
    commands = result.commands()
    assert commands.index("modprobe -r efa") < commands.index("modprobe efa"), commands
    assert "efa was loaded before the installer built driver" in result.stderr


@needs_sandbox
def test_a_driver_dkms_could_not_build_fails_the_step(host):
    host.state("efa-installer.dkms-fails", 1)
    result = host.run("install-efa.sh", EFA)
    assert result.returncode == 1
    assert (
        f"[efa] FAILED: the running kernel {KERNEL} loads efa '', not the EFA installer's driver "
        f"{DRIVER}: DKMS did not build it" in result.stderr
    ), result.stderr
    assert result.called("modprobe", "efa") == []


@needs_sandbox
def test_an_efa_in_use_that_must_be_loaded_again_asks_for_a_drain_and_reboot(host):
    host.state("modules", "efa\n")
    host.state("modprobe.busy.efa", 1)
    result = host.run("install-efa.sh", EFA)
    assert result.returncode == 1
    assert (
        f"[efa] FAILED: efa is in use and cannot be loaded again with driver {DRIVER}: drain and "
        "reboot the node" in result.stderr
    ), result.stderr

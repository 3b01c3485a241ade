"""install-efa.sh, run for real with bash in the sandbox (tests/sandbox.py): the EFA installer
archive is served by the curl stub and holds tests/stubs/_efa_installer.sh, which installs like
the real one (/opt/amazon/efa_installed_packages, fi_info, the aws-ofi-nccl plugin)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from components.hosts.pins import EFA_DRIVER_VERSION, EFA_INSTALLER_VERSION
from tests.helpers.archive import stub_signature
from tests.sandbox import STUBS_DIR, Sandbox, needs_sandbox

VERSION = EFA_INSTALLER_VERSION
EFA = {
    "EFA_INSTALLER_VERSION": VERSION,
    "EFA_DRIVER_VERSION": EFA_DRIVER_VERSION,
    "EFA_INTERFACES": "32",
    "RETRY_BASE_SECONDS": "0.01",
}
ARCHIVE = f"aws-efa-installer-{VERSION}.tar.gz"
MEMLOCK = "/etc/systemd/system/containerd.service.d/50-efa-memlock.conf"


def installer_archive(version: str) -> bytes:
    """aws-efa-installer/efa_installer.sh as AWS packs it, our stand-in inside."""
    script = (STUBS_DIR / "_efa_installer.sh").read_text()
    script = script.replace(
        ': "${EFA_STUB_VERSION:?', f'EFA_STUB_VERSION={version}\n: "${{EFA_STUB_VERSION:?', 1
    )
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        data = script.encode()
        info = tarfile.TarInfo("aws-efa-installer/efa_installer.sh")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    """A p5.48xlarge with its 32 EFA devices, containerd running, no EFA software yet."""
    sb = Sandbox(tmp_path)
    sb.state("efa.devices", 32)
    (sb.state_dir / f"curl.body.{ARCHIVE}").write_bytes(installer_archive(VERSION))
    # Signed by AWS's key (tests/test_efa_installer.py); its DKMS build of the efa driver needs
    # the running kernel's headers.
    sb.state(f"curl.body.{ARCHIVE}.sig", stub_signature(installer_archive(VERSION)))
    sb.state("efa.driver-version", EFA_DRIVER_VERSION)
    sb.state("dpkg/linux-headers-6.8.0-1021-aws", "6.8.0-1021.23")
    sb.state("dpkg/containerd", "1.7.28-0ubuntu1~24.04.1")  # the runtime step ran before
    return sb


@needs_sandbox
def test_first_run_installs_the_pinned_installer_and_proves_every_interface(sandbox):
    result = sandbox.run("install-efa.sh", EFA)
    assert result.returncode == 0, result.stderr
    downloads = [call[-1] for call in result.called("curl")]  # the key, the archive, its .sig
    assert f"https://efa-installer.amazonaws.com/{ARCHIVE}" in downloads, downloads
    assert result.called("efa_installer.sh", "-y"), result.commands()
    assert result.called("modprobe", "efa")
    assert result.called("fi_info", "-p", "efa", "-t", "FI_EP_RDM")
    assert sandbox.read(MEMLOCK).splitlines() == ["[Service]", "LimitMEMLOCK=infinity"]
    assert result.called("systemctl", "restart", "containerd")
    assert "32 EFA interface(s), NCCL plugin /opt/amazon/ofi-nccl/lib" in result.stderr


@needs_sandbox
def test_second_run_installs_nothing_and_restarts_nothing(sandbox):
    first = sandbox.run("install-efa.sh", EFA)
    assert first.returncode == 0, first.stderr
    second = sandbox.run("install-efa.sh", EFA)
    assert second.returncode == 0, second.stderr
    assert second.called("curl") == []
    assert second.called("efa_installer.sh") == []
    assert second.called("systemctl", "restart") == []
    assert second.called("systemctl", "daemon-reload") == []
    assert f"EFA installer {VERSION} already installed, skipping" in second.stderr
    # Still proven on every run: the interfaces are checked again.
    assert second.called("fi_info", "-p", "efa", "-t", "FI_EP_RDM")


@needs_sandbox
def test_a_missing_interface_fails_naming_expected_and_found(sandbox):
    sandbox.state("efa.devices", 31)
    result = sandbox.run("install-efa.sh", EFA)
    assert result.returncode != 0
    assert "[efa] FAILED: 32 EFA interface(s) expected, fi_info -p efa lists 31" in result.stderr
    assert "network interfaces in EC2" in result.stderr


@needs_sandbox
def test_no_efa_device_at_all_says_what_to_check(sandbox):
    sandbox.state("efa.devices", 0)
    result = sandbox.run("install-efa.sh", EFA)
    assert result.returncode != 0
    assert "fi_info -p efa finds no EFA device" in result.stderr
    assert "nodePools[].efa" in result.stderr


@needs_sandbox
def test_another_installed_version_is_replaced_by_the_pinned_one(sandbox):
    sandbox.write("/opt/amazon/efa_installed_packages", "# EFA installer version: 1.42.0\n")
    result = sandbox.run("install-efa.sh", EFA)
    assert result.returncode == 0, result.stderr
    assert f"EFA installer 1.42.0 installed, {VERSION} wanted" in result.stderr
    assert result.called("efa_installer.sh", "-y")
    assert sandbox.read("/opt/amazon/efa_installed_packages").startswith(
        f"# EFA installer version: {VERSION}"
    )


@needs_sandbox
def test_a_failing_installer_names_the_step(sandbox):
    sandbox.state("efa-installer.fail", 1)
    result = sandbox.run("install-efa.sh", EFA)
    assert result.returncode != 0
    assert f"[efa] FAILED: the EFA installer {VERSION} failed" in result.stderr


@needs_sandbox
def test_an_installer_without_the_nccl_plugin_fails_naming_where_it_looked(sandbox):
    sandbox.state("efa-installer.skip-ofi-nccl", 1)
    result = sandbox.run("install-efa.sh", EFA)
    assert result.returncode != 0
    assert (
        "[efa] FAILED: no NCCL network plugin (libnccl-net*.so) under /opt/amazon/ofi-nccl"
        in result.stderr
    ), result.stderr


@needs_sandbox
@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"EFA_INTERFACES": "32"}, "missing required input(s): EFA_INSTALLER_VERSION"),
        ({**EFA, "EFA_INSTALLER_VERSION": "latest"}, "a release like 1.51.0"),
        ({**EFA, "EFA_INTERFACES": "0"}, "positive whole number"),
    ],
)
def test_bad_inputs_fail_before_touching_anything(sandbox, params, says):
    result = sandbox.run("install-efa.sh", params)
    assert result.returncode != 0 and says in result.stderr, result.stderr
    assert result.calls == []


def test_the_installer_is_bounded_inside_its_step():
    """The installer's own bound (and its kill grace) ends before the step's host-side bound, so
    a hung installer fails naming the installer instead of being killed with the whole step."""
    from components.hosts import pins, steps

    passed = int(pins.efa_params(1)["EFA_INSTALLER_TIMEOUT_SECONDS"])
    assert passed + 30 < steps.EFA.timeout_seconds


@needs_sandbox
def test_an_interrupted_dpkg_is_finished_before_the_installer_runs_apt(sandbox):
    """Issue 39, finding 5: the installer runs apt itself, which refuses every install while
    dpkg's journal holds an entry; the step finishes it first (headers installed: the step's
    own apt has nothing to do)."""
    sandbox.write("/var/lib/dpkg/updates/0002", "Package: efa\nStatus: install ok unpacked\n")
    result = sandbox.run("install-efa.sh", EFA)
    assert result.returncode == 0, result.stderr
    commands = result.commands()
    repair = "dpkg --force-confdef --force-confold --configure -a"
    installer = next(i for i, c in enumerate(commands) if c.startswith("efa_installer.sh"))
    assert repair in commands and commands.index(repair) < installer, commands
    assert not sandbox.exists("/var/lib/dpkg/updates/0002")

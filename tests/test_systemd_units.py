"""Every systemd unit and drop-in the scripts write, checked by systemd itself (Debian's
systemd 252; Ubuntu's are 249 on jammy and 255 on noble): a GPU node's steps (p5.48xlarge: the
driver's boot check and persistence-mode drop-in, fabric manager, EFA's containerd drop-in) and
a managed control plane's init (the serving-certificate approver's service and timer) run in the
script sandbox; what they left under /etc/systemd/system and /usr/local goes into a root with the
units of the packages they extend (tests/helpers/units.py), real `systemctl --root enable` makes
the [Install] links, and `systemd-analyze verify --root` must find nothing wrong with any of
them, nor with the units they extend or bind to (kubelet.service requires the boot check)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from components.hosts import pins
from tests.helpers.archive import Archive, gpu_host, run_install_steps, serve_efa_installer
from tests.helpers.control_plane_host import INIT
from tests.helpers.tools import require_tool
from tests.helpers.units import INSTALL, build_root, written_units
from tests.sandbox import Sandbox, needs_sandbox

NODE = "p5.48xlarge"
EFA_INTERFACES = 32


def node_uppers(tmp: Path) -> dict[str, Path]:
    sb = gpu_host(Sandbox(tmp), "24.04", gpus=8)
    Archive.today(sb, "24.04")
    results = run_install_steps(sb, NODE, "24.04")
    assert all(r.returncode == 0 for r in results), results[-1].stderr
    serve_efa_installer(sb)
    sb.state("efa.devices", EFA_INTERFACES)
    sb.state("efa.driver-version", pins.EFA_DRIVER_VERSION)
    efa = sb.run(
        "install-efa.sh", {**pins.efa_params(EFA_INTERFACES), "RETRY_BASE_SECONDS": "0.01"}
    )
    assert efa.returncode == 0, efa.stderr
    return efa.uppers


def control_plane_uppers(tmp: Path) -> dict[str, Path]:
    sb = Sandbox(tmp)
    for package in ("kubelet", "kubeadm", "kubectl"):
        sb.state(f"dpkg/{package}", "1.35.1-1.1")
    (sb.state_dir / "kubectl" / "nodes").mkdir(parents=True)
    result = sb.run("init-control-plane.sh", INIT)
    assert result.returncode == 0, result.stderr
    return result.uppers


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> tuple[Path, list[str]]:
    """The verify root and the units the scripts wrote or extended."""
    require_tool("systemd-analyze", INSTALL)
    require_tool("systemctl", INSTALL)
    uppers = [
        node_uppers(tmp_path_factory.mktemp("node")),
        control_plane_uppers(tmp_path_factory.mktemp("control-plane")),
    ]
    root = tmp_path_factory.mktemp("root")
    build_root(root, uppers)
    units = sorted({unit for u in uppers for unit in written_units(u)})
    return root, units


def systemd(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


@needs_sandbox
def test_the_scripts_write_the_units_this_test_verifies(root):
    """The list is the sandbox's, not ours: a new unit a script writes is verified too."""
    _, units = root
    assert units == [
        "containerd.service",
        "gpu-cluster-approve-kubelet-serving.service",
        "gpu-cluster-approve-kubelet-serving.timer",
        "gpu-cluster-nvidia-boot-check.service",
        "nvidia-persistenced.service",
    ]


@needs_sandbox
def test_every_unit_the_scripts_write_verifies(root):
    path, units = root
    files = [path / "etc/systemd/system" / u for u in units]
    installable = [f.name for f in files if f.is_file() and "[Install]" in f.read_text()]
    for unit in installable:
        enabled = systemd("systemctl", f"--root={path}", "enable", unit)
        assert enabled.returncode == 0, f"systemctl enable {unit}: {enabled.stderr}"
    verify = systemd(
        "systemd-analyze",
        "verify",
        f"--root={path}",
        "--man=no",
        "--generators=no",
        "--recursive-errors=no",
        *units,
        "kubelet.service",
    )
    assert verify.returncode == 0 and not verify.stderr.strip(), verify.stderr


@needs_sandbox
def test_kubelet_requires_the_boot_check_once_it_is_enabled(root):
    """RequiredBy=kubelet.service: `enable` links it into kubelet.service.requires/, so kubelet
    does not start on a kernel without a working NVIDIA module (install-driver.sh)."""
    path, _ = root
    systemd("systemctl", f"--root={path}", "enable", "gpu-cluster-nvidia-boot-check.service")
    link = (
        path / "etc/systemd/system/kubelet.service.requires/gpu-cluster-nvidia-boot-check.service"
    )
    assert link.is_symlink()


@needs_sandbox
def test_verify_here_reports_what_systemd_refuses(root):
    """The check can fail: systemd-analyze, in this root, rejects the persistence-mode drop-in
    without its `ExecStart=` reset line (a second ExecStart= on a Type=forking service)."""
    path, _ = root
    drop_in = path / "etc/systemd/system/nvidia-persistenced.service.d/99-typo.conf"
    drop_in.write_text("[Service]\nExecStart=/usr/bin/nvidia-persistenced --persistence-mode\n")
    try:
        verify = systemd(
            "systemd-analyze",
            "verify",
            f"--root={path}",
            "--man=no",
            "--generators=no",
            "--recursive-errors=no",
            "nvidia-persistenced.service",
        )
    finally:
        drop_in.unlink()
    assert verify.returncode != 0
    assert "more than one ExecStart=" in verify.stderr, verify.stderr

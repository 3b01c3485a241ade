"""The scripts against each variant a real tool answers with, as the stubs now give them
(their headers name the sources): cloud-init's status after recoverable errors on each Ubuntu
release, sysctl's missing keys before their module, systemctl's static units."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.archive import Archive, gpu_host
from tests.sandbox import Sandbox, needs_sandbox

FAST = {"RETRY_BASE_SECONDS": "0.01"}
pytestmark = needs_sandbox


@pytest.mark.parametrize(("release", "status"), [("22.04", 0), ("24.04", 2)])
def test_cloud_init_done_with_recoverable_errors_passes_on_both_releases(tmp_path, release, status):
    """canonical/cloud-init: 'status: done' either way; exit 0 on 22.04 (Ubuntu's
    status-retain-recoverable-error-exit-code.patch), 2 on 24.04. Neither stops the node."""
    sb = gpu_host(Sandbox(tmp_path), release)
    sb.state("cloud-init.status", "degraded")
    run = sb.run_text('cloud-init status --wait; echo "exit $?"\n')
    assert run.stdout.splitlines() == ["status: done", f"exit {status}"]
    result = sb.run("wait-ready.sh", FAST)
    assert result.returncode == 0, result.stderr
    assert ("recoverable errors" in result.stderr) == (status == 2)


def test_bridge_sysctls_exist_only_once_br_netfilter_is_loaded(tmp_path: Path):
    """procps sysctl: net.bridge.* have no /proc/sys file before br_netfilter; the kube-tools
    step loads the module first, so its sysctls take."""
    sb = gpu_host(Sandbox(tmp_path))
    sb.state("modules", "")
    before = sb.run_text('sysctl -n net.bridge.bridge-nf-call-iptables; echo "exit $?"\n')
    assert "cannot stat /proc/sys/net/bridge/bridge-nf-call-iptables" in before.stderr
    assert before.stdout.strip().endswith("exit 255")
    Archive.today(sb)
    result = sb.run("install-kube-tools.sh", {"KUBERNETES_MINOR": "1.35", **FAST})
    assert result.returncode == 0, result.stderr
    assert sb.state("sysctl/net.bridge.bridge-nf-call-iptables") == "1"


def test_a_static_unit_is_enabled_as_systemctl_says_it_is(tmp_path: Path):
    """Ubuntu's nvidia-persistenced.service has no [Install]: is-enabled says static (exit 0)
    and enable only prints a notice; the driver step's persistence mode still takes."""
    sb = gpu_host(Sandbox(tmp_path))
    run = sb.run_text('systemctl is-enabled nvidia-persistenced; echo "exit $?"\n')
    assert run.stdout.splitlines() == ["static", "exit 0"]
    enable = sb.run_text("systemctl enable nvidia-persistenced\n")
    assert enable.returncode == 0 and "no installation config" in enable.stderr

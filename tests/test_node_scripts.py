"""The node scripts, run for real with bash in the sandbox (tests/sandbox.py)."""

from __future__ import annotations

import time
import tomllib
from pathlib import Path

import pytest
import yaml

from components.host_scripts import render_script, script_digest
from tests.sandbox import STUBS_DIR, Sandbox, needs_sandbox

FAST = {"RETRY_BASE_SECONDS": "0.01"}
DRIVER = {"DRIVER_BRANCH": "580", "GPU_COUNT": "4", "NEEDS_FABRIC_MANAGER": "false", **FAST}
RUNTIME = {"NVIDIA_CTK_VERSION": "1.17.8-1", **FAST}
KUBE = {"KUBERNETES_MINOR": "1.35", **FAST}
TOKEN = "abcdef.0123456789abcdef"
JOIN = {
    "NODE_NAME": "a10g-0",
    "API_ENDPOINT": "10.42.1.10:6443",
    "JOIN_TOKEN": TOKEN,
    "CA_CERT_HASH": "sha256:" + "ab" * 32,
    "KUBERNETES_MINOR": "1.35",
    "NODE_LABELS": "team=ml,gpu-cluster/pool=a10g",
    "NODE_TAINTS": "nvidia.com/gpu=true:NoSchedule,dedicated:NoExecute",
    **FAST,
}

UBUNTU_2404 = 'NAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\nID_LIKE=debian\n'
FSTAB = (
    "LABEL=cloudimg-rootfs\t/\text4\tdiscard,errors=remount-ro\t0 1\n"
    "# /swapfile none swap sw 0 0 (an old comment)\n"
    "/swapfile none swap sw 0 0\n"
    "/dev/nvme1n1 /mnt/swap-archive ext4 defaults 0 2\n"
)
DRIVER_VERSION = "580.95.05-0ubuntu0.24.04.2"
RUNNING_KERNEL = "6.8.0-1021-aws"  # the uname stub's default
CTK_PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    """A fresh Ubuntu 24.04 GPU host on AWS with 4 GPUs and nouveau loaded."""
    sb = Sandbox(tmp_path)
    sb.write("/etc/os-release", UBUNTU_2404)
    sb.write("/etc/fstab", FSTAB)
    sb.state("modules", "nouveau\n")
    sb.state("nvidia-smi.gpus", 4)
    for flavor in ("server", "server-open"):
        for pkg in (
            f"linux-modules-nvidia-580-{flavor}-{RUNNING_KERNEL}",
            f"linux-modules-nvidia-580-{flavor}-aws",
            f"nvidia-headless-no-dkms-580-{flavor}",
        ):
            sb.apt_available(pkg, DRIVER_VERSION)
    # One utils package for both flavours: Ubuntu has no nvidia-utils-<branch>-server-open.
    sb.apt_available("nvidia-utils-580-server", DRIVER_VERSION)
    sb.apt_available("nvidia-fabricmanager-580", "580.95.05-0ubuntu0.24.04.1")
    sb.apt_available("libnvidia-nscq-580", "580.95.05-0ubuntu0.24.04.1")
    sb.apt_available("containerd", "1.7.28-0ubuntu1~24.04.1")
    for pkg in CTK_PACKAGES:
        sb.apt_available(pkg, "1.17.7-1", "1.17.8-1", "1.17.9-1")
    for pkg in ("kubelet", "kubeadm", "kubectl"):
        sb.apt_available(pkg, "1.35.0-1.1", "1.35.1-1.1")
    return sb


def installs(result) -> list[list[str]]:
    return result.called("apt-get") and [c for c in result.called("apt-get") if "install" in c]


def restarts(result) -> list[list[str]]:
    return result.called("systemctl", "restart")


# ---- the renderer -------------------------------------------------------------------


def test_render_is_deterministic_sorted_and_quoted():
    params = {"NODE_NAME": "n'1", "API_ENDPOINT": "10.0.0.1:6443", "JOIN_TOKEN": TOKEN}
    text = render_script("join-node.sh", params)
    assert text == render_script("join-node.sh", dict(reversed(params.items())))
    assert text.startswith("#!/usr/bin/env bash\n")
    assert text.index("set +x") < text.index("JOIN_TOKEN=")
    assert text.count("#!/usr/bin/env bash") == 1
    inputs = text.split("# ---- inputs\n", 1)[1].split("# ----", 1)[0]
    assert inputs.splitlines() == [
        "API_ENDPOINT=10.0.0.1:6443",
        f"JOIN_TOKEN={TOKEN}",
        "NODE_NAME='n'\"'\"'1'",
    ]
    assert script_digest("join-node.sh", params) == script_digest("join-node.sh", params)
    assert script_digest("join-node.sh", params) != script_digest("join-node.sh", {})


@pytest.mark.parametrize("name", ["lower", "1ABC", "A-B", "A B", ""])
def test_render_rejects_names_that_are_not_shell_variables(name):
    with pytest.raises(ValueError, match="not a shell variable name"):
        render_script("wait-ready.sh", {name: "x"})


def test_render_rejects_unknown_scripts_and_the_library():
    with pytest.raises(ValueError, match="unknown host script"):
        render_script("nope.sh", {})
    with pytest.raises(ValueError, match="unknown host script"):
        render_script("../host_scripts.py", {})
    with pytest.raises(ValueError, match="library"):
        render_script("lib/common.sh", {})


# ---- behaviour shared by every node script ----------------------------------------

REQUIRED = {
    "install-driver.sh": ["DRIVER_BRANCH", "GPU_COUNT", "NEEDS_FABRIC_MANAGER"],
    "install-runtime.sh": ["NVIDIA_CTK_VERSION"],
    "install-kube-tools.sh": ["KUBERNETES_MINOR"],
    "join-node.sh": ["NODE_NAME", "API_ENDPOINT", "JOIN_TOKEN", "CA_CERT_HASH", "KUBERNETES_MINOR"],
}
PARAMS = {
    "wait-ready.sh": FAST,
    "install-driver.sh": DRIVER,
    "install-runtime.sh": RUNTIME,
    "install-kube-tools.sh": KUBE,
}


@needs_sandbox
@pytest.mark.parametrize("script", sorted(REQUIRED))
def test_missing_inputs_fail_at_once_naming_them(sandbox, script):
    result = sandbox.run(script, FAST)
    assert result.returncode == 1
    assert f"FAILED: missing required input(s): {' '.join(REQUIRED[script])}" in result.stderr
    assert result.calls == []


@needs_sandbox
@pytest.mark.parametrize("script", sorted(REQUIRED))
def test_one_empty_input_is_named(sandbox, script):
    params = {**PARAMS.get(script, JOIN), REQUIRED[script][0]: ""}
    result = sandbox.run(script, params)
    assert result.returncode == 1
    assert f"missing required input(s): {REQUIRED[script][0]}\n" in result.stderr
    assert result.calls == []


@needs_sandbox
@pytest.mark.parametrize("script", sorted(PARAMS))
def test_second_run_installs_nothing_and_restarts_nothing(sandbox, script):
    first = sandbox.run(script, PARAMS[script])
    assert first.returncode == 0, first.stderr
    second = sandbox.run(script, PARAMS[script])
    assert second.returncode == 0, second.stderr
    assert installs(second) == []
    assert restarts(second) == []
    assert second.called("systemctl", "enable") == []
    assert second.called("apt-mark", "hold") == []
    assert second.called("curl") == []
    assert second.called("update-initramfs") == []


@needs_sandbox
@pytest.mark.parametrize("script", sorted(PARAMS))
def test_waits_for_the_apt_lock_then_succeeds(sandbox, script):
    sandbox.hold_apt_lock(1.0)
    started = time.monotonic()
    result = sandbox.run(script, PARAMS[script])
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started >= 0.9
    assert "Waiting for cache lock" in result.stderr
    apt_calls = result.called("apt-get")
    assert apt_calls and all("DPkg::Lock::Timeout=600" in c for c in apt_calls)


@needs_sandbox
def test_apt_lock_held_past_the_timeout_fails_naming_the_step(sandbox):
    sandbox.hold_apt_lock(60)
    result = sandbox.run(
        "install-runtime.sh", {**RUNTIME, "APT_LOCK_TIMEOUT_SECONDS": "1", "APT_RETRIES": "2"}
    )
    assert result.returncode != 0
    assert "Could not get lock /var/lib/dpkg/lock-frontend" in result.stderr
    assert "[runtime] FAILED at step 1/5 (install containerd), in apt_install" in result.stderr
    assert "[runtime 1/5] install containerd" in result.stderr


@needs_sandbox
@pytest.mark.parametrize("script", ["install-runtime.sh", "install-kube-tools.sh"])
def test_download_that_fails_twice_then_works(sandbox, script):
    sandbox.state("curl.fail", 2)
    result = sandbox.run(script, PARAMS[script])
    assert result.returncode == 0, result.stderr
    assert len(result.called("curl")) == 3
    assert result.stderr.count("retrying in") == 2


@needs_sandbox
def test_download_that_keeps_failing_fails_the_step(sandbox):
    sandbox.state("curl.fail", 99)
    result = sandbox.run("install-kube-tools.sh", {**KUBE, "DOWNLOAD_RETRIES": "3"})
    assert result.returncode != 0
    assert len(result.called("curl")) == 3
    assert "giving up after 3 attempts" in result.stderr
    assert "[kube-tools] FAILED at step 4/6 (add kubernetes apt repo), in download" in result.stderr
    assert result.called("apt-get", "install") == []


# ---- wait-ready.sh ---------------------------------------------------------------------


@needs_sandbox
@pytest.mark.parametrize("version", ["22.04", "24.04"])
def test_wait_ready_accepts_supported_ubuntu(sandbox, version):
    sandbox.write("/etc/os-release", UBUNTU_2404.replace("24.04", version))
    result = sandbox.run("wait-ready.sh", FAST)
    assert result.returncode == 0, result.stderr
    assert result.commands()[0] == "cloud-init status --wait"
    assert f"Ubuntu {version}" in result.stderr
    assert result.stdout == ""


@needs_sandbox
@pytest.mark.parametrize(
    ("os_release", "found"),
    [
        ('ID=debian\nVERSION_ID="12"\n', "debian 12"),
        ('ID=ubuntu\nVERSION_ID="20.04"\n', "ubuntu 20.04"),
    ],
)
def test_wait_ready_rejects_other_systems(sandbox, os_release, found):
    sandbox.write("/etc/os-release", os_release)
    result = sandbox.run("wait-ready.sh", FAST)
    assert result.returncode == 1
    assert f"unsupported OS: {found}; expected Ubuntu 22.04 or 24.04" in result.stderr
    assert result.called("apt-get") == []


@needs_sandbox
def test_wait_ready_bounds_cloud_init(sandbox):
    sandbox.state("cloud-init.seconds", 30)
    started = time.monotonic()
    result = sandbox.run("wait-ready.sh", {**FAST, "CLOUD_INIT_TIMEOUT_SECONDS": "1"})
    assert time.monotonic() - started < 15
    assert result.returncode == 1
    assert "cloud-init still running after 1s" in result.stderr


@needs_sandbox
def test_wait_ready_reports_failed_cloud_init(sandbox):
    sandbox.state("cloud-init.status", "error")
    result = sandbox.run("wait-ready.sh", FAST)
    assert result.returncode == 1
    assert "[ready] FAILED: cloud-init failed (exit 1)" in result.stderr


# ---- install-driver.sh --------------------------------------------------------------------


@needs_sandbox
def test_driver_happy_path(sandbox):
    result = sandbox.run("install-driver.sh", DRIVER)
    assert result.returncode == 0, result.stderr
    packages = [
        f"linux-modules-nvidia-580-server-{RUNNING_KERNEL}",
        "linux-modules-nvidia-580-server-aws",
        "nvidia-headless-no-dkms-580-server",
        "nvidia-utils-580-server",
    ]
    for pkg in packages:
        assert sandbox.installed(pkg) == DRIVER_VERSION, f"install-driver.sh: {pkg} not installed"
    assert sandbox.held() == set(packages)
    assert sandbox.state("apt-get.needrestart-mode") == "l", (
        "install-driver.sh: apt-get must run with NEEDRESTART_MODE=l (list only, no restarts)"
    )
    blocklist = sandbox.read("/etc/modprobe.d/blacklist-nouveau.conf")
    assert "blacklist nouveau\n" in blocklist
    assert "options nouveau modeset=0\n" in blocklist
    commands = result.commands()
    assert commands.index("update-initramfs -u") < commands.index("modprobe -r nouveau")
    assert commands.index("modprobe -r nouveau") < commands.index("modprobe nvidia")
    assert sandbox.state("modules").split() == ["nvidia"]
    assert "[driver 5/6] driver 580.95.05, 4 GPU(s)" in result.stderr
    assert "[driver 2/6] install driver packages" in result.stderr
    assert not any("fabricmanager" in c for c in commands)


@needs_sandbox
def test_driver_open_kernel_modules_flavor(sandbox):
    result = sandbox.run("install-driver.sh", {**DRIVER, "DRIVER_FLAVOR": "server-open"})
    assert result.returncode == 0, result.stderr
    for pkg in (
        f"linux-modules-nvidia-580-server-open-{RUNNING_KERNEL}",
        "linux-modules-nvidia-580-server-open-aws",
        "nvidia-headless-no-dkms-580-server-open",
        "nvidia-utils-580-server",
    ):
        assert sandbox.installed(pkg) == DRIVER_VERSION, f"install-driver.sh: {pkg} not installed"
    assert sandbox.installed("linux-modules-nvidia-580-server-aws") is None


@needs_sandbox
def test_driver_installs_the_module_of_the_running_kernel_not_only_the_flavour_meta(sandbox):
    """The flavour metapackage follows the archive's newest kernel; on an AMI whose kernel is
    older, only linux-modules-nvidia-<suffix>-$(uname -r) has a module modprobe can load."""
    sandbox.state("uname.r", "6.8.0-1015-aws")
    sandbox.apt_available("linux-modules-nvidia-580-server-6.8.0-1015-aws", DRIVER_VERSION)
    result = sandbox.run("install-driver.sh", DRIVER)
    assert result.returncode == 0, result.stderr
    assert sandbox.installed("linux-modules-nvidia-580-server-6.8.0-1015-aws") == DRIVER_VERSION
    assert sandbox.installed(f"linux-modules-nvidia-580-server-{RUNNING_KERNEL}") is None
    assert sandbox.state("modules").split() == ["nvidia"]


@needs_sandbox
def test_driver_without_a_module_for_the_running_kernel_fails_naming_the_package(sandbox):
    sandbox.state("uname.r", "6.8.0-1001-aws")
    result = sandbox.run("install-driver.sh", DRIVER)
    assert result.returncode != 0
    assert "linux-modules-nvidia-580-server-6.8.0-1001-aws" in result.stderr
    assert "[driver] FAILED at step 2/6 (install driver packages)" in result.stderr


@needs_sandbox
def test_driver_kernel_flavour_follows_the_running_kernel(sandbox):
    sandbox.state("uname.r", "6.8.0-60-generic")
    sandbox.apt_available("linux-modules-nvidia-580-server-generic", DRIVER_VERSION)
    sandbox.apt_available("linux-modules-nvidia-580-server-6.8.0-60-generic", DRIVER_VERSION)
    result = sandbox.run("install-driver.sh", DRIVER)
    assert result.returncode == 0, result.stderr
    assert sandbox.installed("linux-modules-nvidia-580-server-generic") == DRIVER_VERSION


@needs_sandbox
def test_fabric_manager_installed_and_started_on_nvswitch_types(sandbox):
    result = sandbox.run("install-driver.sh", {**DRIVER, "NEEDS_FABRIC_MANAGER": "true"})
    assert result.returncode == 0, result.stderr
    assert sandbox.installed("nvidia-fabricmanager-580") is not None
    assert {"nvidia-fabricmanager-580", "libnvidia-nscq-580"} <= sandbox.held()
    assert result.called("systemctl", "enable", "--now", "nvidia-fabricmanager")
    assert sandbox.service_active("nvidia-fabricmanager")
    again = sandbox.run("install-driver.sh", {**DRIVER, "NEEDS_FABRIC_MANAGER": "true"})
    assert again.returncode == 0, again.stderr
    assert again.called("systemctl", "enable") == [] and installs(again) == []


@needs_sandbox
def test_fabric_manager_of_another_driver_build_fails(sandbox):
    sandbox.apt_available("nvidia-fabricmanager-580", "580.65.06-0ubuntu0.24.04.1")
    result = sandbox.run("install-driver.sh", {**DRIVER, "NEEDS_FABRIC_MANAGER": "true"})
    assert result.returncode == 1
    assert (
        "[driver] FAILED: fabric manager must match driver 580.95.05, "
        "nvidia-fabricmanager-580 is 580.65.06-0ubuntu0.24.04.1" in result.stderr
    )


@needs_sandbox
def test_no_fabric_manager_without_nvswitch(sandbox):
    result = sandbox.run("install-driver.sh", DRIVER)
    assert result.returncode == 0, result.stderr
    assert sandbox.installed("nvidia-fabricmanager-580") is None
    assert "fabric manager not needed" in result.stderr


@needs_sandbox
def test_driver_version_other_than_the_branch_fails(sandbox):
    sandbox.state("nvidia-smi.driver", "575.51.03")
    result = sandbox.run("install-driver.sh", DRIVER)
    assert result.returncode == 1
    assert "[driver] FAILED: driver 580 wanted, nvidia-smi reports 575.51.03" in result.stderr


OLD_BRANCH = {**DRIVER, "DRIVER_BRANCH": "570"}
OLD_VERSION = "570.195.03-0ubuntu0.24.04.1"


def _on_branch_570(sandbox: Sandbox) -> None:
    """A host that ran the driver step for branch 570 (its module loaded), now asked for 580."""
    for pkg in (
        f"linux-modules-nvidia-570-server-{RUNNING_KERNEL}",
        "linux-modules-nvidia-570-server-aws",
        "nvidia-headless-no-dkms-570-server",
        "nvidia-utils-570-server",
    ):
        sandbox.apt_available(pkg, OLD_VERSION)
    first = sandbox.run("install-driver.sh", OLD_BRANCH)
    assert first.returncode == 0, first.stderr
    assert sandbox.state("nvidia.loaded-version").strip() == "570.195.03"


@needs_sandbox
def test_branch_change_reloads_the_kernel_module(sandbox):
    _on_branch_570(sandbox)
    result = sandbox.run("install-driver.sh", DRIVER)
    assert result.returncode == 0, result.stderr
    commands = result.commands()
    assert "modprobe -r nvidia" in commands, commands
    assert commands.index("modprobe -r nvidia") < len(commands) - commands[::-1].index(
        "modprobe nvidia"
    ), f"module not loaded again after unloading: {commands}"
    assert sandbox.state("nvidia.loaded-version").strip() == "580.95.05"
    assert "older kernel module is loaded: reloading it" in result.stderr
    assert "[driver 5/6] driver 580.95.05, 4 GPU(s)" in result.stderr


@needs_sandbox
def test_branch_change_on_a_busy_gpu_asks_for_drain_and_reboot(sandbox):
    _on_branch_570(sandbox)
    sandbox.state("modprobe.busy.nvidia", 1)
    result = sandbox.run("install-driver.sh", DRIVER)
    assert result.returncode == 3, result.stderr
    assert "REBOOT_REQUIRED: the loaded nvidia kernel module is older than driver 580" in (
        result.stderr
    )
    assert "kubectl drain" in result.stderr


@needs_sandbox
def test_fewer_gpus_than_the_catalog_says_fails(sandbox):
    sandbox.state("nvidia-smi.gpus", 2)
    result = sandbox.run("install-driver.sh", DRIVER)
    assert result.returncode == 1
    assert (
        "[driver] FAILED: 4 GPUs expected for this instance type, nvidia-smi lists 2"
        in result.stderr
    )


# ---- disable-nouveau.sh -------------------------------------------------------------------


@needs_sandbox
def test_nouveau_step_blocklists_and_unloads_without_a_reboot(sandbox):
    result = sandbox.run("disable-nouveau.sh", FAST)
    assert result.returncode == 0, result.stderr
    blocklist = sandbox.read("/etc/modprobe.d/blacklist-nouveau.conf")
    assert "blacklist nouveau\n" in blocklist and "options nouveau modeset=0\n" in blocklist
    commands = result.commands()
    assert commands.index("update-initramfs -u") < commands.index("modprobe -r nouveau")
    assert "nouveau" not in (sandbox.state("modules") or "").split()
    assert sandbox.state("systemd-run.scheduled") is None, "rebooted although nouveau unloaded"
    assert result.called("reboot") == []


@needs_sandbox
def test_nouveau_in_use_reboots_after_the_step_and_refuses_new_ssh_until_then(sandbox):
    sandbox.state("modprobe.busy.nouveau", "1")
    sandbox.state("systemd/ssh.socket.active", "yes")
    result = sandbox.run("disable-nouveau.sh", {**FAST, "REBOOT_DELAY_SECONDS": "7"})
    assert result.returncode == 0, result.stderr
    commands = result.commands()
    assert "systemctl stop ssh.socket" in commands, commands
    scheduled = [c for c in commands if c.startswith("systemd-run")]
    assert scheduled == [
        "systemd-run --on-active=7 --unit=gpu-cluster-nouveau-reboot systemctl reboot"
    ], commands
    assert commands.index("systemctl stop ssh.socket") < commands.index(scheduled[0])
    assert "rebooting in 7s" in result.stderr
    assert sandbox.exists("/etc/modprobe.d/blacklist-nouveau.conf")


@needs_sandbox
def test_nouveau_step_after_the_reboot_changes_nothing(sandbox):
    first = sandbox.run("disable-nouveau.sh", FAST)
    assert first.returncode == 0, first.stderr
    again = sandbox.run("disable-nouveau.sh", FAST)
    assert again.returncode == 0, again.stderr
    commands = again.commands()
    assert not any(
        c.startswith(("update-initramfs", "modprobe", "systemd-run")) for c in commands
    ), f"second run acted: {commands}"
    assert "nouveau not loaded" in again.stderr


@needs_sandbox
def test_nouveau_step_rejects_a_bad_delay_before_acting(sandbox):
    result = sandbox.run("disable-nouveau.sh", {**FAST, "REBOOT_DELAY_SECONDS": "soon"})
    assert result.returncode == 1
    assert "REBOOT_DELAY_SECONDS must be a positive number of seconds, got 'soon'" in result.stderr
    assert result.calls == []


@needs_sandbox
def test_nouveau_that_cannot_be_unloaded_asks_for_a_reboot(sandbox):
    sandbox.state("modprobe.busy.nouveau", "1")
    result = sandbox.run("install-driver.sh", DRIVER)
    assert result.returncode == 3
    assert "REBOOT_REQUIRED: nouveau is loaded and could not be unloaded" in result.stderr
    assert sandbox.exists("/etc/modprobe.d/blacklist-nouveau.conf")
    assert installs(result) == []
    assert result.called("reboot") == []


@needs_sandbox
def test_failing_package_install_names_the_step(sandbox):
    sandbox.state("apt-get.fail.install", 99)
    result = sandbox.run("install-driver.sh", {**DRIVER, "APT_RETRIES": "2"})
    assert result.returncode != 0
    assert len(installs(result)) == 2
    assert "[driver 2/6] install driver packages" in result.stderr
    assert "[driver] FAILED at step 2/6 (install driver packages), in apt_install" in result.stderr
    assert result.called("modprobe", "nvidia") == []


@needs_sandbox
@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("DRIVER_BRANCH", "580.95", "DRIVER_BRANCH must be a driver branch like 580"),
        ("GPU_COUNT", "four", "GPU_COUNT must be a positive integer, got 'four'"),
        ("NEEDS_FABRIC_MANAGER", "yes", "NEEDS_FABRIC_MANAGER must be true or false"),
        ("DRIVER_FLAVOR", "desktop", "DRIVER_FLAVOR must be server or server-open"),
    ],
)
def test_driver_rejects_malformed_inputs_before_acting(sandbox, name, value, message):
    result = sandbox.run("install-driver.sh", {**DRIVER, name: value})
    assert result.returncode == 1
    assert message in result.stderr
    assert result.calls == []


# ---- install-runtime.sh -------------------------------------------------------------------


@needs_sandbox
def test_runtime_happy_path(sandbox):
    result = sandbox.run("install-runtime.sh", RUNTIME)
    assert result.returncode == 0, result.stderr
    for pkg in CTK_PACKAGES:
        assert sandbox.installed(pkg) == "1.17.8-1"
    assert sandbox.held() == {"containerd", *CTK_PACKAGES}
    config = tomllib.loads(sandbox.read("/etc/containerd/config.toml"))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    assert cri["default_runtime_name"] == "nvidia"
    assert cri["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
    assert "nvidia" in cri["runtimes"]
    assert config["grpc"]["address"] == "/run/containerd/containerd.sock"  # the full default
    keyring = "/etc/apt/keyrings/nvidia-container-toolkit.gpg"
    assert sandbox.read(keyring).startswith("dearmored keyring")
    assert sandbox.read("/etc/apt/sources.list.d/nvidia-container-toolkit.list") == (
        f"deb [signed-by={keyring}] "
        "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /\n"
    )
    assert restarts(result) == [["systemctl", "restart", "containerd"]]
    assert sandbox.service_active("containerd")
    assert "containerd active, nvidia is the default runtime" in result.stderr


@needs_sandbox
def test_runtime_changes_only_the_systemd_cgroup_key_of_the_default(sandbox):
    result = sandbox.run("install-runtime.sh", RUNTIME)
    assert result.returncode == 0, result.stderr
    written = sandbox.read("/etc/containerd/config.toml").splitlines()
    default = (STUBS_DIR / "containerd").read_text().split("<<'TOML'\n")[1].split("TOML\n")[0]
    default_lines = default.splitlines()
    head, added = written[: len(default_lines)], written[len(default_lines) :]
    assert all("nvidia" in line for line in added if line.startswith("["))
    changed = [(a, b) for a, b in zip(default_lines, head, strict=True) if a != b]
    assert changed == [
        (
            '      default_runtime_name = "runc"',
            '      default_runtime_name = "nvidia"',
        ),
        ("            SystemdCgroup = false", "            SystemdCgroup = true"),
    ]


@needs_sandbox
def test_runtime_restarts_containerd_only_when_its_config_changed(sandbox):
    assert sandbox.run("install-runtime.sh", RUNTIME).returncode == 0
    again = sandbox.run("install-runtime.sh", RUNTIME)
    assert "containerd: no change, not restarting" in again.stderr
    assert restarts(again) == []
    sandbox.write("/etc/containerd/config.toml", "version = 2\n")  # someone edited it
    third = sandbox.run("install-runtime.sh", RUNTIME)
    assert third.returncode == 0, third.stderr
    assert restarts(third) == [["systemctl", "restart", "containerd"]]


@needs_sandbox
def test_runtime_without_the_toolkit_for_control_plane_hosts(sandbox):
    params = {"WITH_NVIDIA_TOOLKIT": "false", **FAST}
    result = sandbox.run("install-runtime.sh", params)
    assert result.returncode == 0, result.stderr
    assert sandbox.held() == {"containerd"}
    assert result.called("curl") == [] and result.called("nvidia-ctk") == []
    config = tomllib.loads(sandbox.read("/etc/containerd/config.toml"))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    assert cri["default_runtime_name"] == "runc"
    assert cri["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
    again = sandbox.run("install-runtime.sh", params)
    assert restarts(again) == [] and installs(again) == []


@needs_sandbox
def test_runtime_fails_when_containerd_does_not_come_back(sandbox):
    sandbox.state("systemctl.fail.restart.containerd", 1)
    result = sandbox.run("install-runtime.sh", RUNTIME)
    assert result.returncode != 0
    assert (
        "[runtime] FAILED at step 4/5 (configure containerd), in restart_if_changed"
        in result.stderr
    )
    assert "[runtime 4/5] configure containerd" in result.stderr


@needs_sandbox
def test_runtime_nvidia_runtime_without_systemd_cgroups_fails(sandbox):
    """nvidia is containerd's default runtime: without SystemdCgroup = true in its own options
    kubelet (cgroupDriver: systemd) cannot run pods, even though runc's options have it."""
    sandbox.state("nvidia-ctk.no-runc-options", 1)
    result = sandbox.run("install-runtime.sh", RUNTIME)
    assert result.returncode == 1, f"install-runtime.sh accepted it: {result.stderr}"
    assert (
        "[runtime] FAILED: SystemdCgroup = true expected in the nvidia runtime options of "
        "/etc/containerd/config.toml, found 'none'" in result.stderr
    )


@needs_sandbox
def test_runtime_toolkit_version_not_in_the_repository_fails(sandbox):
    result = sandbox.run("install-runtime.sh", {**RUNTIME, "NVIDIA_CTK_VERSION": "1.99.0-1"})
    assert result.returncode != 0
    assert "Version '1.99.0-1' for 'nvidia-container-toolkit' was not found" in result.stderr
    assert "[runtime] FAILED" in result.stderr


# ---- install-kube-tools.sh ----------------------------------------------------------------


@needs_sandbox
def test_kube_tools_happy_path(sandbox):
    sandbox.apt_available("kubeadm", "1.35.0-1.1", "1.35.1-1.1", "1.36.0-1.1")
    result = sandbox.run("install-kube-tools.sh", KUBE)
    assert result.returncode == 0, result.stderr
    for pkg in ("kubelet", "kubeadm", "kubectl"):
        assert sandbox.installed(pkg) == "1.35.1-1.1"
    assert sandbox.held() == {"kubelet", "kubeadm", "kubectl"}
    assert sandbox.read("/etc/apt/sources.list.d/kubernetes.list") == (
        "deb [signed-by=/etc/apt/keyrings/kubernetes-apt-keyring.gpg] "
        "https://pkgs.k8s.io/core:/stable:/v1.35/deb/ /\n"
    )
    assert result.called("curl")[0][-1] == "https://pkgs.k8s.io/core:/stable:/v1.35/deb/Release.key"
    assert result.called("swapoff", "-a")
    assert sandbox.read("/etc/modules-load.d/kubernetes.conf") == "overlay\nbr_netfilter\n"
    assert {"overlay", "br_netfilter"} <= set(sandbox.state("modules").split())
    sysctl_conf = sandbox.read("/etc/sysctl.d/99-kubernetes.conf")
    assert "net.ipv4.ip_forward = 1\n" in sysctl_conf
    assert "net.bridge.bridge-nf-call-iptables = 1\n" in sysctl_conf
    assert sandbox.state("sysctl/net.ipv4.ip_forward") == "1"
    assert sandbox.state("sysctl/net.bridge.bridge-nf-call-iptables") == "1"
    assert result.called("systemctl", "enable", "kubelet")
    assert "[kube-tools 6/6] kubeadm v1.35.1" in result.stderr


@needs_sandbox
def test_kube_tools_comment_out_only_swap_entries(sandbox):
    result = sandbox.run("install-kube-tools.sh", KUBE)
    assert result.returncode == 0, result.stderr
    before, after = FSTAB.splitlines(), sandbox.read("/etc/fstab").splitlines()
    assert [(a, b) for a, b in zip(before, after, strict=True) if a != b] == [
        (
            "/swapfile none swap sw 0 0",
            "# /swapfile none swap sw 0 0 # disabled by gpu-cluster: kubelet",
        )
    ]


@needs_sandbox
def test_kube_tools_wrong_kubeadm_version_fails_with_expected_and_found(sandbox):
    sandbox.state("kubeadm.version", "v1.34.2")
    result = sandbox.run("install-kube-tools.sh", KUBE)
    assert result.returncode == 1
    assert "[kube-tools] FAILED: kubeadm v1.35.x expected, found v1.34.2" in result.stderr


@needs_sandbox
def test_kube_tools_minor_missing_from_the_repository_fails(sandbox):
    result = sandbox.run("install-kube-tools.sh", {**KUBE, "KUBERNETES_MINOR": "1.36"})
    assert result.returncode != 0
    assert "Version '1.36.*' for 'kubelet' was not found" in result.stderr
    assert "https://pkgs.k8s.io/core:/stable:/v1.36/deb/" in sandbox.read(
        "/etc/apt/sources.list.d/kubernetes.list"
    )


# ---- join-node.sh --------------------------------------------------------------------------


@pytest.fixture
def kube_host(sandbox: Sandbox) -> Sandbox:
    """A host where install-kube-tools.sh ran: kubeadm 1.35 installed, kubelet enabled."""
    sandbox.state("dpkg/kubeadm", "1.35.1-1.1")
    sandbox.state("dpkg/kubelet", "1.35.1-1.1")
    sandbox.state("systemd/kubelet.enabled", "yes")
    return sandbox


@needs_sandbox
def test_join_writes_the_join_configuration_and_removes_it(kube_host):
    result = kube_host.run("join-node.sh", JOIN)
    assert result.returncode == 0, result.stderr
    assert TOKEN not in result.output
    assert result.called("kubeadm", "join", "--config")
    config = yaml.safe_load(kube_host.state("kubeadm-join-config.yaml"))
    assert config == {
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "JoinConfiguration",
        "discovery": {
            "bootstrapToken": {
                "apiServerEndpoint": "10.42.1.10:6443",
                "token": TOKEN,
                "caCertHashes": [JOIN["CA_CERT_HASH"]],
            }
        },
        "nodeRegistration": {
            "name": "a10g-0",
            "criSocket": "unix:///run/containerd/containerd.sock",
            "kubeletExtraArgs": [{"name": "node-labels", "value": "team=ml,gpu-cluster/pool=a10g"}],
            "taints": [
                {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
                {"key": "dedicated", "value": "", "effect": "NoExecute"},
            ],
        },
    }
    assert kube_host.state("kubeadm-join-config.mode").strip() == "600"
    assert list(kube_host.tmp_dir.iterdir()) == []  # the file with the token is gone
    assert kube_host.service_active("kubelet")
    assert "a10g-0 joined 10.42.1.10:6443" in result.stderr


@needs_sandbox
def test_join_without_labels_or_taints(kube_host):
    result = kube_host.run("join-node.sh", {**JOIN, "NODE_LABELS": "", "NODE_TAINTS": ""})
    assert result.returncode == 0, result.stderr
    registration = yaml.safe_load(kube_host.state("kubeadm-join-config.yaml"))["nodeRegistration"]
    assert registration["kubeletExtraArgs"] == []
    assert registration["taints"] == []


@needs_sandbox
def test_failed_join_names_the_step_and_keeps_the_token_secret(kube_host):
    kube_host.state("kubeadm.fail.join", 1)
    result = kube_host.run("join-node.sh", JOIN)
    assert result.returncode != 0
    assert "[join] FAILED: kubeadm join 10.42.1.10:6443 failed (exit 1)" in result.stderr
    assert "--target-replace <urn of a10g-0-join-token>" in result.stderr
    assert TOKEN not in result.output
    assert list(kube_host.tmp_dir.iterdir()) == []
    # The half-done join is undone so the next `pulumi up` can join again.
    assert result.called("kubeadm", "reset", "-f"), result.commands()


@needs_sandbox
def test_malformed_token_is_rejected_without_showing_it(kube_host):
    bad = "NOT-A-TOKEN-but-secret"
    result = kube_host.run("join-node.sh", {**JOIN, "JOIN_TOKEN": bad})
    assert result.returncode == 1
    assert "JOIN_TOKEN is not a bootstrap token" in result.stderr
    assert bad not in result.output
    assert result.calls == []


@needs_sandbox
@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("NODE_TAINTS", "gpu=true:Sometimes", "NODE_TAINTS: 'gpu=true:Sometimes' is not"),
        ("NODE_LABELS", "team", "NODE_LABELS: 'team' is not key=value"),
        ("CA_CERT_HASH", "sha1:abc", "CA_CERT_HASH must be sha256:<64 hex digits>"),
        ("API_ENDPOINT", "https://10.0.0.1", "API_ENDPOINT must be host:port"),
    ],
)
def test_join_rejects_malformed_inputs_before_acting(kube_host, name, value, message):
    result = kube_host.run("join-node.sh", {**JOIN, name: value})
    assert result.returncode == 1
    assert message in result.stderr
    assert result.calls == []


@needs_sandbox
def test_join_twice_joins_once(kube_host):
    assert kube_host.run("join-node.sh", JOIN).returncode == 0
    again = kube_host.run("join-node.sh", JOIN)
    assert again.returncode == 0, again.stderr
    assert again.called("kubeadm", "join") == []
    assert "already joined" in again.stderr


@needs_sandbox
def test_join_of_a_joined_host_with_kubelet_stopped_starts_kubelet(kube_host):
    assert kube_host.run("join-node.sh", JOIN).returncode == 0
    kube_host.state("systemd/kubelet.active", "no")
    again = kube_host.run("join-node.sh", JOIN)
    assert again.returncode == 0, again.stderr
    assert again.called("kubeadm", "join") == []
    assert again.called("systemctl", "start", "kubelet")
    assert kube_host.service_active("kubelet")


@needs_sandbox
def test_join_refuses_a_kubeadm_of_another_minor(kube_host):
    kube_host.state("kubeadm.version", "v1.34.2")
    result = kube_host.run("join-node.sh", JOIN)
    assert result.returncode == 1
    assert "kubeadm v1.35.x expected, found v1.34.2" in result.stderr
    assert result.called("kubeadm", "join") == []


# ---- reset-node.sh -------------------------------------------------------------------------


@needs_sandbox
def test_reset_on_a_clean_host_succeeds_and_does_nothing(sandbox):
    result = sandbox.run("reset-node.sh")
    assert result.returncode == 0, result.stderr
    assert result.called("kubeadm", "reset") == []
    assert "nothing to reset" in result.stderr


@needs_sandbox
def test_reset_after_join_resets_and_cleans_cni_config(kube_host):
    assert kube_host.run("join-node.sh", JOIN).returncode == 0
    kube_host.write("/etc/cni/net.d/10-calico.conflist", "{}\n")
    result = kube_host.run("reset-node.sh")
    assert result.returncode == 0, result.stderr
    assert result.called("kubeadm", "reset", "-f")
    assert not kube_host.exists("/etc/kubernetes/kubelet.conf")
    assert not kube_host.exists("/etc/cni/net.d/10-calico.conflist")
    assert not kube_host.service_active("kubelet")
    again = kube_host.run("reset-node.sh")
    assert again.returncode == 0, again.stderr
    assert again.called("kubeadm", "reset") == []

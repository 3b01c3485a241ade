"""The node scripts, run for real with bash in the sandbox (tests/sandbox.py)."""

from __future__ import annotations

import re
import subprocess
import time
import tomllib
from pathlib import Path

import pytest
import yaml

from components.hosts import bundle, pins
from components.hosts.rendering import render_script, script_digest
from tests.helpers.archive_packages import NVLSM_VERSION
from tests.helpers.gpu_host import (
    CONTAINERD,
    CTK_PACKAGES,
    DRIVER,
    DRIVER_UPSTREAM,
    DRIVER_VERSION,
    FABRIC,
    FAST,
    FSTAB,
    NEWER_DRIVER,
    RUNNING_KERNEL,
    RUNTIME,
    UBUNTU_2404,
    new_gpu_host,
    offer_module,
)
from tests.sandbox import STUBS_DIR, Sandbox, needs_sandbox, step_stdin

UPSTREAM = STUBS_DIR.parent / "upstream"

CONTROL_PLANE_RUNTIME = {**pins.runtime_params("24.04", "1.35", with_toolkit=False), **FAST}
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
    # The Node's checks after the join look once (tests/test_join_checks.py has the waits).
    "READY_TIMEOUT_SECONDS": "0",
    "CAPACITY_TIMEOUT_SECONDS": "0",
    "POLL_SECONDS": "0",
    **FAST,
}


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    """A fresh Ubuntu 24.04 GPU host on AWS with 4 GPUs and nouveau loaded."""
    return new_gpu_host(tmp_path)


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
        render_script("../rendering.py", {})
    with pytest.raises(ValueError, match="library"):
        render_script("lib/common.sh", {})


@pytest.mark.parametrize("value", [1, None, ["x"]], ids=repr)
def test_render_rejects_a_value_that_is_not_a_string(value):
    # The whole program the script tests run, and the stdin a registered step sends: the same
    # refusal (an unhashable value included).
    with pytest.raises(TypeError, match="KUBERNETES_MINOR must be a string"):
        render_script("install-kube-tools.sh", {"KUBERNETES_MINOR": value})
    with pytest.raises(TypeError, match="KUBERNETES_MINOR must be a string"):
        step_stdin("install-kube-tools.sh", {"KUBERNETES_MINOR": value})


def test_a_steps_stdin_carries_its_parameters_and_the_digest_of_its_program():
    """What a step sends: the parameters (sorted, quoted, after `set +x`), then the run of its
    bundled program by digest; never the script's text."""
    params = {"NODE_NAME": "n'1", "API_ENDPOINT": "10.0.0.1:6443", "JOIN_TOKEN": TOKEN}
    stdin = step_stdin("join-node.sh", params)
    assert stdin == step_stdin("join-node.sh", dict(reversed(params.items())))
    assert stdin.index("set +x") < stdin.index("JOIN_TOKEN=")
    digest = bundle.digest("join-node.sh")
    assert stdin.endswith(f"by_digest {digest}\nsource {bundle.INSTALLED_DIR}/{digest}.sh\n"), stdin
    assert "kubeadm join" not in stdin and "log()" not in stdin, "the script travelled on stdin"
    assert "NODE_NAME='n'\"'\"'1'\n" in stdin


# ---- behaviour shared by every node script ----------------------------------------

REQUIRED = {
    "install-driver.sh": ["DRIVER_BRANCH", "GPU_COUNT", "NEEDS_FABRIC_MANAGER", "KERNEL_MODULES"],
    "install-runtime.sh": [
        "NVIDIA_CTK_VERSION",
        "CONTAINERD_VERSION",
        "CONTAINERD_REPOSITORY",
        "SANDBOX_IMAGE",
    ],
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
    # Docker's repository is added first: its apt-get update is the first to wait. The failure
    # names the step, the command and what to look at, not a line of the rendered program.
    assert (
        "[runtime] FAILED: step 1/7 (install containerd): 'apt_get update --error-on=any' failed "
        "2 times (last exit 100); apt's errors are above: check that this host reaches the "
        "repositories in /etc/apt/sources.list.d and Ubuntu's archive, then pulumi up again"
    ) in result.stderr, result.stderr
    assert 'return "${rc}"' not in result.stderr
    assert "[runtime 1/7] install containerd" in result.stderr


@needs_sandbox
@pytest.mark.parametrize("script", ["install-runtime.sh", "install-kube-tools.sh"])
def test_download_that_fails_twice_then_works(sandbox, script):
    sandbox.state("curl.fail", 2)
    result = sandbox.run(script, PARAMS[script])
    assert result.returncode == 0, result.stderr
    # The runtime fetches two keys (Docker's, NVIDIA's): 2 failures, then each key once.
    assert len(result.called("curl")) == {"install-runtime.sh": 4}.get(script, 3)
    assert result.stderr.count("retrying in") == 2


@needs_sandbox
def test_download_that_keeps_failing_fails_the_step(sandbox):
    sandbox.state("curl.fail", 99)
    result = sandbox.run("install-kube-tools.sh", {**KUBE, "DOWNLOAD_RETRIES": "3"})
    assert result.returncode != 0
    assert len(result.called("curl")) == 3
    assert "giving up after 3 attempts" in result.stderr
    assert (
        "[kube-tools] FAILED: step 4/7 (add kubernetes apt repo): 'curl -fsSL --proto =https "
    ) in result.stderr, result.stderr
    assert (
        "failed 3 times (last exit 6); check that this host reaches "
        "https://pkgs.k8s.io/core:/stable:/v1.35/deb/Release.key (its errors are above), then "
        "pulumi up again"
    ) in result.stderr, result.stderr
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
def test_wait_ready_holds_a_host_to_its_pools_release(sandbox):
    """An existing host whose pool names another release stops before apt touches it (keyrings,
    lists): the packages of the next steps are pinned for the pool's release."""
    result = sandbox.run("wait-ready.sh", {**FAST, "OS_VERSION": "22.04"})  # the host: 24.04
    assert result.returncode == 1, result.stderr
    assert (
        "Ubuntu 22.04 expected (the pool's osVersion, whose packages the next steps install), "
        'this host runs Ubuntu 24.04; set osVersion: "24.04" on its pool' in result.stderr
    ), result.stderr
    assert result.called("apt-get") == [], result.commands()
    assert result.called("gpg") == [], result.commands()


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


# A step's first line, "[ready 4/8] wait for apt and refresh lists" (lib/common.sh run_steps
# logs its function's name): its title and its number.
STEP_LINE = re.compile(r"^\[ready ([0-9]+/[0-9]+)\] ([a-z][a-z ]*)$", re.MULTILINE)


@needs_sandbox
def test_wait_ready_waits_for_first_boot_apt_daily_and_the_lists_lock(sandbox):
    """apt-daily-upgrade (unattended-upgrade) still running for two looks, then apt-daily's
    `apt-get update` holding /var/lib/apt/lists/lock for two more attempts."""
    sandbox.state("systemd/apt-daily-upgrade.running-checks", 2)
    sandbox.state("apt.lists-lock", 2)
    result = sandbox.run("wait-ready.sh", {**FAST, "APT_DAILY_POLL_SECONDS": "0.01"})
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("waiting for apt-daily-upgrade.service") == 2
    assert "Could not get lock /var/lib/apt/lists/lock" in result.stderr
    assert len(result.called("apt-get")) == 3
    # The update runs in its own step, after the apt-daily wait, whatever the step's number.
    steps = {title: number for number, title in STEP_LINE.findall(result.stderr)}
    wait, refresh = steps["wait for apt daily"], steps["wait for apt and refresh lists"]
    assert int(wait.split("/")[0]) < int(refresh.split("/")[0]), steps
    assert f"[ready {refresh}] apt-get update" in result.stderr


@needs_sandbox
def test_wait_ready_bounds_the_apt_daily_wait(sandbox):
    sandbox.state("systemd/apt-daily.running-checks", 1000)
    params = {**FAST, "APT_DAILY_POLL_SECONDS": "0.01", "APT_DAILY_TIMEOUT_SECONDS": "0.03"}
    result = sandbox.run("wait-ready.sh", params)
    assert result.returncode == 1
    assert "apt-daily.service still running after 0.03s (first-boot package updates)" in (
        result.stderr
    )
    assert result.called("apt-get") == []


DRIVER_SET = {
    f"linux-modules-nvidia-580-server-{RUNNING_KERNEL}": "6.8.0-1021.23",
    "nvidia-kernel-common-580-server": DRIVER_VERSION,
    "nvidia-headless-no-dkms-580-server": DRIVER_VERSION,
    "nvidia-utils-580-server": DRIVER_VERSION,
}


@needs_sandbox
def test_driver_happy_path(sandbox):
    result = sandbox.run("install-driver.sh", DRIVER)
    assert result.returncode == 0, result.stderr
    for pkg, version in DRIVER_SET.items():
        assert sandbox.installed(pkg) == version, f"install-driver.sh: {pkg}"
    assert set(DRIVER_SET) <= sandbox.held()
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
    assert "[driver 7/9] driver 580.95.05, 4 GPU(s)" in result.stderr
    assert "[driver 4/9] install driver packages" in result.stderr
    assert not any("fabricmanager" in c for c in commands)


@needs_sandbox
def test_driver_is_one_transaction_at_the_version_the_running_kernels_module_was_built_for(
    sandbox,
):
    """The archive's userspace (580.105.08) is ahead of the signed module for the running kernel
    (built for 580.95.05): everything goes in at 580.95.05, in one apt-get install, without the
    flavour metapackage that would pull the newest kernel."""
    result = sandbox.run("install-driver.sh", DRIVER)
    assert result.returncode == 0, result.stderr
    (install,) = installs(result)
    # The module at its own version, the rest at the driver's (any revision: apt picks it).
    wanted = {f"{pkg}={DRIVER_UPSTREAM}-*" for pkg in DRIVER_SET if "linux-modules" not in pkg}
    wanted |= {f"{pkg}={v}" for pkg, v in DRIVER_SET.items() if "linux-modules" in pkg}
    assert wanted <= set(install), install
    assert not any(arg.startswith("linux-modules-nvidia-580-server-aws") for arg in install)
    assert not any(NEWER_DRIVER in arg for arg in install), install


@needs_sandbox
def test_unpinned_userspace_beside_the_module_is_what_apt_refuses(sandbox):
    """The stub's resolver in the archive's shape: the module beside the newest userspace is
    the unmet dependency a one-call unpinned install hits on real hosts."""
    program = "\n".join(
        [
            "export DEBIAN_FRONTEND=noninteractive NEEDRESTART_MODE=l",
            f"apt-get install -y linux-modules-nvidia-580-server-{RUNNING_KERNEL} "
            "nvidia-headless-no-dkms-580-server nvidia-utils-580-server",
        ]
    )
    result = sandbox.run_text(program)
    assert result.returncode == 100
    assert "Depends: nvidia-kernel-common-580-server (<= 580.95.05-1) but 580.105.08" in (
        result.stderr
    )


@needs_sandbox
def test_driver_open_kernel_modules(sandbox):
    result = sandbox.run("install-driver.sh", {**DRIVER, "KERNEL_MODULES": "open"})
    assert result.returncode == 0, result.stderr
    for pkg in (
        f"linux-modules-nvidia-580-server-open-{RUNNING_KERNEL}",
        "nvidia-headless-no-dkms-580-server-open",
        "nvidia-utils-580-server",
    ):
        assert sandbox.installed(pkg), f"install-driver.sh: {pkg} not installed"
    assert sandbox.installed(f"linux-modules-nvidia-580-server-{RUNNING_KERNEL}") is None


@needs_sandbox
def test_module_built_for_another_driver_version_sets_the_version(sandbox):
    """A module rebuilt for 580.105.08: userspace follows it, not the other way round."""
    offer_module(sandbox, "580-server", RUNNING_KERNEL, built_for="580.105.08")
    result = sandbox.run("install-driver.sh", DRIVER)
    assert result.returncode == 0, result.stderr
    assert sandbox.installed("nvidia-utils-580-server") == NEWER_DRIVER
    assert "[driver 7/9] driver 580.105.08, 4 GPU(s)" in result.stderr


@needs_sandbox
def test_module_built_for_a_version_the_archive_lacks_fails_before_installing(sandbox):
    offer_module(sandbox, "580-server", RUNNING_KERNEL, built_for="580.82.07")
    result = sandbox.run("install-driver.sh", DRIVER)
    assert result.returncode != 0
    assert (
        "nvidia-kernel-common-580-server 580.82.07 wanted (the driver the running kernel's "
        "signed module is built for), the archive has "
        f"{NEWER_DRIVER},{DRIVER_VERSION}" in result.stderr
    )
    assert installs(result) == []


@needs_sandbox
def test_driver_without_a_module_for_the_running_kernel_fails_naming_the_package(sandbox):
    sandbox.state("uname.r", "6.8.0-1001-aws")
    result = sandbox.run("install-driver.sh", DRIVER)
    assert result.returncode != 0
    assert "the archive has no linux-modules-nvidia-580-server-6.8.0-1001-aws" in result.stderr
    assert "[driver] FAILED" in result.stderr and installs(result) == []


@needs_sandbox
@pytest.mark.parametrize("script", ["install-driver.sh", "disable-nouveau.sh"])
def test_transitional_branch_fails_before_downloading_naming_its_target(sandbox, script):
    """On noble an end-of-life branch's -server names are transitional packages: a newer
    branch's version, depending on that branch's package."""
    pkg = "nvidia-headless-no-dkms-575-server"
    sandbox.apt_available(pkg, DRIVER_VERSION)
    sandbox.state(f"apt.depends/{pkg}", "nvidia-headless-no-dkms-580-server")
    sandbox.state(f"apt.description/{pkg}", "Transitional package for nvidia-headless-no-dkms-580")
    result = sandbox.run(script, {**DRIVER, "DRIVER_BRANCH": "575"})
    assert result.returncode == 1, result.stderr
    assert (
        f"driver branch 575 is transitional on this Ubuntu release: {pkg} {DRIVER_VERSION} "
        "installs branch 580" in result.stderr
    )
    assert "set the pool's driverVersion to 580" in result.stderr
    assert installs(result) == []


@needs_sandbox
def test_a_branch_turned_transitional_leaves_a_node_that_has_it_alone(sandbox):
    """Ubuntu's -updates turns the installed branch's headless package into a transitional one
    for a newer branch (as it did to older branches on noble): the nodes that run the branch,
    held, re-run every step (a login-key rotation, a roll) without being told to move branch."""
    assert sandbox.run("install-driver.sh", DRIVER).returncode == 0
    pkg = "nvidia-headless-no-dkms-580-server"
    sandbox.state(f"apt.available/{pkg}", "590.44.01-0ubuntu0.24.04.1\n")
    sandbox.state(f"apt.depends/{pkg}", "nvidia-headless-no-dkms-590-server")
    sandbox.state(f"apt.description/{pkg}", "Transitional package for nvidia-headless-no-dkms-590")
    nouveau = sandbox.run("disable-nouveau.sh", NOUVEAU_KERNEL)
    assert nouveau.returncode == 0, nouveau.stderr
    again = sandbox.run("install-driver.sh", DRIVER)
    assert again.returncode == 0, again.stderr
    assert "is transitional" not in again.stderr + nouveau.stderr
    assert installs(again) == []
    assert sandbox.installed(pkg) == DRIVER_SET[pkg]


@needs_sandbox
def test_kernel_and_driver_move_together(sandbox):
    for pkg in ("linux-aws", "linux-image-aws", "linux-headers-aws"):
        sandbox.apt_available(pkg, "6.8.0.1021.23")
    sandbox.run_text(
        "DEBIAN_FRONTEND=noninteractive NEEDRESTART_MODE=l "
        "apt-get install -y linux-aws linux-image-aws linux-headers-aws"
    )
    result = sandbox.run("install-driver.sh", DRIVER)
    assert result.returncode == 0, result.stderr
    assert {"linux-aws", "linux-image-aws", "linux-headers-aws"} <= sandbox.held()
    blacklist = sandbox.read("/etc/apt/apt.conf.d/51gpu-cluster-kernel-and-driver")
    assert "Unattended-Upgrade::Package-Blacklist {" in blacklist
    for prefix in ('"linux-";', '"nvidia-";', '"libnvidia-";'):
        assert prefix in blacklist
    unit = sandbox.read("/etc/systemd/system/gpu-cluster-nvidia-boot-check.service")
    assert "ExecStart=/usr/local/sbin/gpu-cluster-nvidia-boot-check" in unit
    assert "Before=kubelet.service" in unit and "WantedBy=multi-user.target" in unit
    assert result.called("systemctl", "enable", "gpu-cluster-nvidia-boot-check")


@needs_sandbox
def test_boot_check_fails_loudly_on_a_kernel_without_a_module(sandbox, tmp_path):
    """After an unattended kernel upgrade the next boot has no nvidia.ko: the check fails and
    records it for the node's validation."""
    assert sandbox.run("install-driver.sh", DRIVER).returncode == 0
    check = sandbox.read("/usr/local/sbin/gpu-cluster-nvidia-boot-check")
    modinfo = tmp_path / "bin" / "modinfo"
    modinfo.parent.mkdir()
    # modinfo -k <kernel> nvidia: found only for the kernel the driver was installed for.
    modinfo.write_text(
        f'#!/bin/sh\n[ "$2" = "{RUNNING_KERNEL}" ] && exit 0\n'
        'echo "modinfo: ERROR: Module nvidia not found." >&2; exit 1\n'
    )
    modinfo.chmod(0o755)
    sandbox.state("uname.r", "6.8.0-1031-aws")
    result = sandbox.run_text(f'export PATH="{modinfo.parent}:$PATH"\n{check}')
    assert result.returncode == 1
    assert "no NVIDIA kernel module for the running kernel 6.8.0-1031-aws" in result.stderr
    status = sandbox.read("/var/lib/gpu-cluster/nvidia-boot-check")
    assert status.startswith("failed 6.8.0-1031-aws")
    sandbox.state("uname.r", RUNNING_KERNEL)
    result = sandbox.run_text(f'export PATH="{modinfo.parent}:$PATH"\n{check}')
    assert result.returncode == 0, result.stderr
    assert sandbox.read("/var/lib/gpu-cluster/nvidia-boot-check") == f"ok {RUNNING_KERNEL}\n"


@needs_sandbox
def test_persistence_mode_on_through_a_drop_in(sandbox):
    result = sandbox.run("install-driver.sh", DRIVER)
    assert result.returncode == 0, result.stderr
    drop_in = sandbox.read(
        "/etc/systemd/system/nvidia-persistenced.service.d/50-gpu-cluster-persistence-mode.conf"
    )
    assert "ExecStart=\nExecStart=/usr/bin/nvidia-persistenced" in drop_in
    assert "--persistence-mode" in drop_in and "--no-persistence-mode" not in drop_in
    assert sandbox.service_active("nvidia-persistenced")
    assert "[driver 8/9] persistence mode on" in result.stderr


@needs_sandbox
def test_persistence_mode_needs_the_daemon_started_on_the_drop_in(sandbox):
    """systemd runs a drop-in only after a daemon-reload: nvidia-persistenced restarted without
    one keeps Ubuntu's --no-persistence-mode (the nvidia-smi stub reads what it was started
    with, not the file)."""
    assert sandbox.run("install-driver.sh", DRIVER).returncode == 0
    drop_in = (
        "/etc/systemd/system/nvidia-persistenced.service.d/50-gpu-cluster-persistence-mode.conf"
    )
    sandbox.write(
        drop_in, sandbox.read(drop_in).replace("--persistence-mode", "--no-persistence-mode")
    )
    assert sandbox.run_text("systemctl restart nvidia-persistenced").returncode == 0
    modes = sandbox.run_text("nvidia-smi --query-gpu=persistence_mode --format=csv,noheader")
    assert modes.stdout.split() == ["Enabled"] * 4, "restarted on the unit as loaded"
    assert sandbox.run_text("systemctl daemon-reload").returncode == 0
    assert sandbox.run_text("systemctl restart nvidia-persistenced").returncode == 0
    modes = sandbox.run_text("nvidia-smi --query-gpu=persistence_mode --format=csv,noheader")
    assert modes.stdout.split() == ["Disabled"] * 4


@needs_sandbox
def test_a_persistenced_restart_lost_to_a_failed_run_is_done_by_the_next(sandbox):
    """The run wrote the drop-in and ended before nvidia-persistenced restarted on it (the restart
    failed, the step was killed): the daemon keeps --no-persistence-mode. The next run finds
    the drop-in as it wants it and still reloads and restarts."""
    sandbox.state("systemctl.fail.restart.nvidia-persistenced", 1)
    assert sandbox.run("install-driver.sh", DRIVER).returncode != 0
    again = sandbox.run("install-driver.sh", DRIVER)
    assert again.returncode == 0, again.stderr
    assert ["systemctl", "daemon-reload"] in again.calls
    assert restarts(again) == [["systemctl", "restart", "nvidia-persistenced"]], again.stderr
    assert "persistence mode on" in again.stderr
    third = sandbox.run("install-driver.sh", DRIVER)
    assert restarts(third) == [] and ["systemctl", "daemon-reload"] not in third.calls


@needs_sandbox
def test_an_initramfs_rebuild_killed_halfway_is_done_by_the_next_run(sandbox):
    sandbox.state("update-initramfs.killed", 1)
    first = sandbox.run("disable-nouveau.sh", FAST)
    assert first.returncode != 0
    again = sandbox.run("disable-nouveau.sh", FAST)
    assert again.returncode == 0, again.stderr
    assert again.called("update-initramfs", "-u"), again.stderr
    assert sandbox.run("disable-nouveau.sh", FAST).called("update-initramfs") == []


@needs_sandbox
def test_fabric_manager_installed_and_started_on_nvswitch_types(sandbox):
    result = sandbox.run("install-driver.sh", {**FABRIC})
    assert result.returncode == 0, result.stderr
    (install,) = installs(result)
    assert "nvidia-fabricmanager=580.95.05-*" in install
    assert "libnvidia-nscq=580.95.05-*" in install
    assert {"nvidia-fabricmanager", "libnvidia-nscq"} <= sandbox.held()
    assert result.called("systemctl", "enable", "--now", "nvidia-fabricmanager")
    assert sandbox.service_active("nvidia-fabricmanager")
    assert not any("nvlsm" in c for c in result.commands())
    again = sandbox.run("install-driver.sh", {**FABRIC})
    assert again.returncode == 0, again.stderr
    assert again.called("systemctl", "enable") == [] and installs(again) == []


@needs_sandbox
def test_fabric_manager_without_the_drivers_version_fails_before_installing(sandbox):
    sandbox.apt_available("nvidia-fabricmanager", "580.65.06-1")
    result = sandbox.run("install-driver.sh", {**FABRIC})
    assert result.returncode != 0
    assert (
        "nvidia-fabricmanager 580.95.05 wanted (the driver the running kernel's signed "
        "module is built for), the archive has 580.65.06-1" in result.stderr
    )
    assert installs(result) == []


@needs_sandbox
def test_fabric_manager_that_does_not_start_prints_its_journal(sandbox):
    sandbox.state("systemctl.fail.enable.nvidia-fabricmanager", 1)
    sandbox.state(
        "journal/nvidia-fabricmanager",
        "nv-fabricmanager[2071]: fabric manager NVLink training failed: NVLSM not reachable\n",
    )
    result = sandbox.run("install-driver.sh", {**FABRIC})
    assert result.returncode == 1
    assert "NVLink training failed: NVLSM not reachable" in result.stderr
    assert "nvidia-fabricmanager did not start (its journal is above)" in result.stderr


@needs_sandbox
def test_nvswitch_gen4_gets_nvlsm_libnvsdm_and_ib_umad_before_fabric_manager(sandbox):
    params = {**FABRIC, "NVLINK_SUBNET_MANAGER": "true"}
    result = sandbox.run("install-driver.sh", {**params, "KERNEL_MODULES": "open"})
    assert result.returncode == 0, result.stderr
    (install,) = [c for c in installs(result) if any(a.startswith("nvlsm") for a in c)]
    assert "libnvsdm=580.95.05-*" in install and f"nvlsm={NVLSM_VERSION}" in install
    assert {"libnvsdm", "nvlsm"} <= sandbox.held()
    assert "ib_umad\n" in sandbox.read("/etc/modules-load.d/gpu-cluster-nvlsm.conf")
    # Issue 39, finding 7: the InfiniBand diagnostics and umad library beside nvlsm, as NVIDIA's
    # Ubuntu driver container and EKS's AL2023 image install them.
    assert sandbox.installed("infiniband-diags") == "50.0-2build2"
    assert sandbox.installed("libibumad3") == "50.0-2build2"
    commands = result.commands()
    assert commands.index("modprobe ib_umad") < commands.index(
        "systemctl enable --now nvidia-fabricmanager"
    )


@needs_sandbox
def test_no_fabric_manager_without_nvswitch(sandbox):
    result = sandbox.run("install-driver.sh", DRIVER)
    assert result.returncode == 0, result.stderr
    assert sandbox.installed("nvidia-fabricmanager-580") is None
    assert "[driver 9/9] not needed" in result.stderr


@needs_sandbox
def test_driver_version_other_than_the_installed_one_fails(sandbox):
    sandbox.state("nvidia-smi.driver", "575.51.03")
    result = sandbox.run("install-driver.sh", DRIVER)
    assert result.returncode == 1
    assert (
        "[driver] FAILED: driver 580.95.05 (branch 580) wanted, nvidia-smi reports 575.51.03"
        in result.stderr
    )


OLD_BRANCH = {**DRIVER, "DRIVER_BRANCH": "570"}
OLD_VERSION = "570.195.03-0ubuntu0.24.04.1"


def _on_branch_570(sandbox: Sandbox) -> None:
    """A host that ran the driver step for branch 570 (its module loaded), now asked for 580."""
    offer_module(sandbox, "570-server", RUNNING_KERNEL, built_for="570.195.03", branch="570")
    for pkg in (
        "nvidia-kernel-common-570-server",
        "nvidia-headless-no-dkms-570-server",
        "nvidia-utils-570-server",
        "libnvidia-decode-570-server",
        "libnvidia-encode-570-server",
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
    assert "[driver 7/9] driver 580.95.05, 4 GPU(s)" in result.stderr


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
    assert "nouveau and nova not loaded" in again.stderr


@needs_sandbox
def test_nova_gets_nouveaus_treatment_and_the_driver_loads(sandbox):
    """Issue 39, finding 4: an HWE kernel of Linux 6.15+ may bind the GPUs with nova_core (and
    its DRM driver nova) at first boot; Canonical's 580-server packages blacklist nova only once
    installed. The nouveau step blocklists and unloads them, users first, so nvidia loads."""
    sandbox.state("modules", "nova_core\nnova\n")
    result = sandbox.run("disable-nouveau.sh", FAST)
    assert result.returncode == 0, result.stderr
    blocklist = sandbox.read("/etc/modprobe.d/blacklist-nouveau.conf").splitlines()
    for module in ("nova_core", "nova", "nova_drm"):
        assert f"blacklist {module}" in blocklist and f"alias {module} off" in blocklist
    commands = result.commands()
    assert commands.index("modprobe -r nova") < commands.index("modprobe -r nova_core")
    assert (sandbox.state("modules") or "").split() == []
    assert sandbox.state("systemd-run.scheduled") is None
    driver = sandbox.run("install-driver.sh", DRIVER)
    assert driver.returncode == 0, driver.stderr
    assert "nvidia" in sandbox.state("modules").split()


@needs_sandbox
def test_nova_core_in_use_reboots_the_host(sandbox):
    sandbox.state("modules", "nova_core\nnouveau\n")
    sandbox.state("modprobe.busy.nova_core", "1")
    result = sandbox.run("disable-nouveau.sh", FAST)
    assert result.returncode == 0, result.stderr
    assert "nova_core in use and cannot be unloaded (blocklisted)" in result.stderr
    assert "rebooting in 5s (nova_core in use)" in result.stderr
    assert [c for c in result.commands() if c.startswith("systemd-run")], result.commands()


@needs_sandbox
def test_the_driver_step_alone_asks_for_a_reboot_while_nova_core_is_bound(sandbox):
    sandbox.state("modules", "nova_core\n")
    sandbox.state("modprobe.busy.nova_core", "1")
    result = sandbox.run("install-driver.sh", DRIVER)
    assert result.returncode == 3, result.stderr
    assert "REBOOT_REQUIRED: nova_core loaded and could not be unloaded" in result.stderr


NOUVEAU_KERNEL = {**FAST, "DRIVER_BRANCH": "580", "KERNEL_MODULES": "proprietary"}
NEW_KERNEL = "6.8.0-1031-aws"


def _ami_kernel_without_a_module(sandbox: Sandbox) -> None:
    """The AMI boots 6.8.0-1015-aws; the archive has modules for 6.8.0-1021 and -1031 only
    (and for a -generic kernel, another flavour), plus both kernels' packages."""
    sandbox.state("modules", "")
    sandbox.state("uname.r", "6.8.0-1015-aws")
    for kernel in (NEW_KERNEL, "6.8.0-1040-generic"):
        offer_module(sandbox, "580-server", kernel)
    for kernel in (RUNNING_KERNEL, NEW_KERNEL):
        sandbox.apt_available(f"linux-image-{kernel}", f"{kernel.rsplit('-', 1)[0]}.23")
        sandbox.apt_available(f"linux-modules-{kernel}", f"{kernel.rsplit('-', 1)[0]}.23")
        sandbox.apt_available(f"linux-headers-{kernel}", f"{kernel.rsplit('-', 1)[0]}.23")


@needs_sandbox
def test_nouveau_step_moves_to_the_newest_kernel_with_a_module_and_reboots(sandbox):
    _ami_kernel_without_a_module(sandbox)
    sandbox.state("systemd/ssh.socket.active", "yes")
    result = sandbox.run("disable-nouveau.sh", NOUVEAU_KERNEL)
    assert result.returncode == 0, result.stderr
    (install,) = installs(result)
    # With its headers: DKMS (EFA's driver) builds against them (tests/test_kernel_before_driver).
    kernel = [f"linux-{part}-{NEW_KERNEL}" for part in ("image", "modules", "headers")]
    assert install[-3:] == kernel, install
    assert "the archive has no linux-modules-nvidia-580-server-6.8.0-1015-aws: installing" in (
        result.stderr
    )
    assert f"rebooting in 5s (kernel 6.8.0-1015-aws -> {NEW_KERNEL})" in result.stderr
    commands = result.commands()
    assert "systemctl stop ssh.socket" in commands
    assert sandbox.state("systemd-run.scheduled").strip() == "systemctl reboot"
    # After the reboot into the new kernel: the driver step finds its module, nothing moves.
    sandbox.state("uname.r", NEW_KERNEL)
    again = sandbox.run("disable-nouveau.sh", NOUVEAU_KERNEL)
    assert again.returncode == 0, again.stderr
    assert installs(again) == [] and "no reboot needed" in again.stderr
    driver = sandbox.run("install-driver.sh", DRIVER)
    assert driver.returncode == 0, driver.stderr
    assert sandbox.installed(f"linux-modules-nvidia-580-server-{NEW_KERNEL}") == "6.8.0-1031.23"


@needs_sandbox
def test_reboot_into_a_kernel_without_a_module_is_caught_by_the_next_driver_run(sandbox):
    """unattended-upgrades-style kernel move: the host comes back on 6.8.0-1031-aws and the
    archive has no module for it; the driver step refuses instead of reporting GPUs it lacks."""
    assert sandbox.run("install-driver.sh", DRIVER).returncode == 0
    sandbox.state("uname.r", "6.8.0-1099-aws")
    result = sandbox.run("install-driver.sh", DRIVER)
    assert result.returncode == 1
    assert "the archive has no linux-modules-nvidia-580-server-6.8.0-1099-aws" in result.stderr


@needs_sandbox
def test_nouveau_step_never_moves_to_an_older_kernel(sandbox):
    _ami_kernel_without_a_module(sandbox)
    sandbox.state("uname.r", "6.8.0-1050-aws")
    result = sandbox.run("disable-nouveau.sh", NOUVEAU_KERNEL)
    assert result.returncode == 1
    assert f"the newest kernel with a usable one is {NEW_KERNEL}, older than the running" in (
        result.stderr
    )
    assert installs(result) == [] and sandbox.state("systemd-run.scheduled") is None


@needs_sandbox
def test_nouveau_step_keeps_a_kernel_that_has_a_module(sandbox):
    result = sandbox.run("disable-nouveau.sh", NOUVEAU_KERNEL)
    assert result.returncode == 0, result.stderr
    assert installs(result) == [] and sandbox.state("systemd-run.scheduled") is None
    assert f"the archive has linux-modules-nvidia-580-server-{RUNNING_KERNEL}" in result.stderr


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
    assert "REBOOT_REQUIRED: nouveau loaded and could not be unloaded" in result.stderr
    assert sandbox.exists("/etc/modprobe.d/blacklist-nouveau.conf")
    assert installs(result) == []
    assert result.called("reboot") == []


@needs_sandbox
def test_failing_package_install_names_the_step(sandbox):
    sandbox.state("apt-get.fail.install", 99)
    result = sandbox.run("install-driver.sh", {**DRIVER, "APT_RETRIES": "2"})
    assert result.returncode != 0
    assert len(installs(result)) == 2
    assert "[driver 4/9] install driver packages" in result.stderr
    assert "[driver] FAILED: step 4/9 (install driver packages): 'apt_get install" in result.stderr
    assert result.called("modprobe", "nvidia") == []


@needs_sandbox
@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("DRIVER_BRANCH", "580.95", "DRIVER_BRANCH must be a driver branch like 580"),
        ("GPU_COUNT", "four", "GPU_COUNT must be a positive integer, got 'four'"),
        ("NEEDS_FABRIC_MANAGER", "yes", "NEEDS_FABRIC_MANAGER must be true or false"),
        ("KERNEL_MODULES", "server-open", "KERNEL_MODULES must be open or proprietary"),
    ],
)
def test_driver_rejects_malformed_inputs_before_acting(sandbox, name, value, message):
    result = sandbox.run("install-driver.sh", {**DRIVER, name: value})
    assert result.returncode == 1
    assert message in result.stderr
    assert result.calls == []


# ---- install-runtime.sh -------------------------------------------------------------------


CRI_RUNTIME = "io.containerd.cri.v1.runtime"
CRI_IMAGES = "io.containerd.cri.v1.images"
NVIDIA_DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
TOOLKIT_CONFIG = "/etc/nvidia-container-runtime/config.toml"


def containerd_dump(sandbox: Sandbox) -> dict:
    """What containerd reads: config.toml with its imports merged (`containerd config dump`)."""
    result = sandbox.run_text("containerd config dump")
    assert result.returncode == 0, result.stderr
    return tomllib.loads(result.stdout)


@needs_sandbox
def test_runtime_happy_path(sandbox):
    result = sandbox.run("install-runtime.sh", RUNTIME)
    assert result.returncode == 0, result.stderr
    assert sandbox.installed("containerd.io") == CONTAINERD
    for pkg in CTK_PACKAGES:
        assert sandbox.installed(pkg) == pins.NVIDIA_CTK_VERSION
    assert sandbox.held() == {"containerd.io", *CTK_PACKAGES}
    config = tomllib.loads(sandbox.read("/etc/containerd/config.toml"))
    assert config["version"] == 3
    assert config["imports"] == ["/etc/containerd/conf.d/*.toml"]
    cri = config["plugins"][CRI_RUNTIME]["containerd"]
    assert cri["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
    assert config["plugins"][CRI_IMAGES]["pinned_images"]["sandbox"] == (
        "registry.k8s.io/pause:3.10.1"
    )
    # The toolkit (>= 1.18) puts its runtime in the drop-in; only the dump shows it as default.
    assert "nvidia" not in cri["runtimes"]
    assert 'default_runtime_name = "nvidia"' in sandbox.read(NVIDIA_DROP_IN)
    merged = containerd_dump(sandbox)["plugins"][CRI_RUNTIME]["containerd"]
    assert merged["default_runtime_name"] == "nvidia"
    assert merged["runtimes"]["nvidia"]["options"]["SystemdCgroup"] is True
    keyring = "/etc/apt/keyrings/nvidia-container-toolkit.gpg"
    assert sandbox.read(keyring).startswith("dearmored keyring")
    assert sandbox.read("/etc/apt/sources.list.d/nvidia-container-toolkit.list") == (
        f"deb [signed-by={keyring}] "
        "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /\n"
    )
    assert restarts(result) == [["systemctl", "restart", "containerd"]]
    assert sandbox.service_active("containerd")
    assert "containerd active, nvidia is the default runtime, GPUs only on request" in (
        result.stderr
    )
    assert result.called("containerd", "config", "dump")


@needs_sandbox
def test_runtime_never_edits_what_containerd_config_default_prints(sandbox):
    """containerd's default config is its release's (2.2.1 prints runc's options with
    SystemdCgroup = false, in go-toml v2's spelling: tests/upstream/): the config is written
    whole instead of edited from it."""
    default = (UPSTREAM / "containerd-2.2.1/config-default.toml").read_text()
    runc = tomllib.loads(default)["plugins"][CRI_RUNTIME]["containerd"]["runtimes"]["runc"]
    assert runc["options"]["SystemdCgroup"] is False
    result = sandbox.run("install-runtime.sh", RUNTIME)
    assert result.returncode == 0, result.stderr
    assert result.called("containerd", "config", "default") == []
    assert "SystemdCgroup = true" in sandbox.read("/etc/containerd/config.toml")


@needs_sandbox
def test_runtime_toolkit_refuses_gpus_requested_by_environment_variable(sandbox):
    result = sandbox.run("install-runtime.sh", RUNTIME)
    assert result.returncode == 0, result.stderr
    toolkit = tomllib.loads(sandbox.read(TOOLKIT_CONFIG))
    assert toolkit["accept-nvidia-visible-devices-envvar-when-unprivileged"] is False
    assert toolkit["accept-nvidia-visible-devices-as-volume-mounts"] is True
    assert toolkit["nvidia-container-runtime"]["mode"] == "auto", "other keys kept"


@needs_sandbox
def test_runtime_with_a_toolkit_config_that_accepts_the_variable_fails(sandbox):
    """A toolkit whose `nvidia-ctk config` does not write the file (it prints the changed config,
    as without --in-place) leaves the default: the step must fail, not leave every GPU to every
    pod that sets NVIDIA_VISIBLE_DEVICES=all."""
    sandbox.state("nvidia-ctk.config-to-stdout", "yes")
    result = sandbox.run("install-runtime.sh", RUNTIME)
    assert result.called("nvidia-ctk", "config"), result.commands()
    assert result.returncode == 1, result.stderr
    assert (
        "[runtime] FAILED: nvidia-ctk config did not set "
        f"accept-nvidia-visible-devices-envvar-when-unprivileged = false in {TOOLKIT_CONFIG} "
        "(found 'true'): without it containers see GPUs they did not request" in result.stderr
    ), result.stderr
    assert "nvidia is the default runtime" not in result.stderr


@needs_sandbox
def test_runtime_pins_containerd_of_this_release(sandbox):
    result = sandbox.run("install-runtime.sh", RUNTIME)
    assert result.returncode == 0, result.stderr
    (install,) = [c for c in installs(result) if any(a.startswith("containerd") for a in c)]
    assert f"containerd.io={CONTAINERD}" in install
    assert sandbox.installed("containerd.io") == CONTAINERD, "the 2.3 upload was taken"


@needs_sandbox
def test_runtime_refuses_a_containerd_1x(sandbox):
    old = "1.7.28-1~ubuntu.24.04~noble"
    result = sandbox.run("install-runtime.sh", {**RUNTIME, "CONTAINERD_VERSION": old})
    assert result.returncode == 1
    assert f"containerd 2.x expected (containerd.io={old}), found 'containerd " in result.stderr


@needs_sandbox
def test_runtime_restarts_containerd_only_when_what_it_reads_changed(sandbox):
    """Issue 39, finding 3: nvidia-ctk 1.20.0 rewrites config.toml in go-toml v1's spelling on
    every run (tests/upstream/nvidia-ctk-1.20.0/config-after.toml), so its bytes change on every
    run; containerd restarts only when `containerd config dump`, parsed, changed."""
    first = sandbox.run("install-runtime.sh", RUNTIME)
    assert first.returncode == 0, first.stderr
    assert restarts(first) == [["systemctl", "restart", "containerd"]]
    rewritten = (UPSTREAM / "nvidia-ctk-1.20.0/config-after.toml").read_text()
    assert sandbox.read("/etc/containerd/config.toml") == rewritten, "not the toolkit's spelling"
    again = sandbox.run("install-runtime.sh", RUNTIME)
    assert again.returncode == 0, again.stderr
    assert "/etc/containerd/config.toml: updated" in again.stderr, "the toolkit rewrote it"
    assert restarts(again) == [], again.stderr
    assert "containerd: configuration unchanged (`containerd config dump`), not restarting" in (
        again.stderr
    )
    new_image = {**RUNTIME, "SANDBOX_IMAGE": "registry.k8s.io/pause:3.11"}
    third = sandbox.run("install-runtime.sh", new_image)
    assert third.returncode == 0, third.stderr
    assert restarts(third) == [["systemctl", "restart", "containerd"]]


# config.toml as someone might edit it on a node: runc as the default, the toolkit's drop-in
# no longer imported.
HAND_EDIT = """version = 3

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"
"""


@needs_sandbox
def test_runtime_restarts_containerd_running_a_config_edited_by_hand(sandbox):
    """Someone edits config.toml by hand and restarts containerd: containerd runs the edit. The
    next run puts the step's config back and restarts containerd, though what it reads then is
    what the step last restarted it with (the record)."""
    assert sandbox.run("install-runtime.sh", RUNTIME).returncode == 0
    written = sandbox.read("/etc/containerd/config.toml")
    sandbox.write("/etc/containerd/config.toml", HAND_EDIT)
    assert sandbox.run_text("systemctl restart containerd").returncode == 0
    edited = containerd_dump(sandbox)["plugins"][CRI_RUNTIME]["containerd"]
    assert edited["default_runtime_name"] == "runc", "the edit is not what containerd reads"
    again = sandbox.run("install-runtime.sh", RUNTIME)
    assert again.returncode == 0, again.stderr
    assert sandbox.read("/etc/containerd/config.toml") == written
    assert restarts(again) == [["systemctl", "restart", "containerd"]], (
        "containerd keeps running the hand-edited config"
    )
    assert restarts(sandbox.run("install-runtime.sh", RUNTIME)) == []


@needs_sandbox
def test_runtime_restarts_containerd_when_its_config_was_edited_on_disk_only(sandbox):
    """An edit on disk that containerd may or may not run (nothing tells whether it restarted
    since): the step puts its config back and restarts containerd rather than leave it on a
    config nobody reviewed."""
    assert sandbox.run("install-runtime.sh", RUNTIME).returncode == 0
    sandbox.write("/etc/containerd/config.toml", HAND_EDIT)
    again = sandbox.run("install-runtime.sh", RUNTIME)
    assert again.returncode == 0, again.stderr
    assert restarts(again) == [["systemctl", "restart", "containerd"]]


@needs_sandbox
def test_runtime_repairs_a_config_containerd_cannot_read(sandbox):
    """A config.toml broken by hand: containerd cannot dump it before the run; the step writes
    its own whole and restarts containerd."""
    assert sandbox.run("install-runtime.sh", RUNTIME).returncode == 0
    sandbox.write("/etc/containerd/config.toml", "version = 3\n[plugins\n")
    again = sandbox.run("install-runtime.sh", RUNTIME)
    assert again.returncode == 0, again.stderr
    assert "containerd cannot read /etc/containerd/config.toml as found" in again.stderr
    assert restarts(again) == [["systemctl", "restart", "containerd"]]
    assert containerd_dump(sandbox)["version"] == 3


@needs_sandbox
def test_runtime_killed_before_the_restart_restarts_on_the_next_run(sandbox):
    """A run that changed the config and stopped before restarting containerd (its timeout, a
    failed restart) leaves containerd on the old config: the next run restarts it."""
    assert sandbox.run("install-runtime.sh", RUNTIME).returncode == 0
    new_image = {**RUNTIME, "SANDBOX_IMAGE": "registry.k8s.io/pause:3.11"}
    sandbox.state("systemctl.fail.restart.containerd", 1)
    assert sandbox.run("install-runtime.sh", new_image).returncode == 1
    again = sandbox.run("install-runtime.sh", new_image)
    assert again.returncode == 0, again.stderr
    assert restarts(again) == [["systemctl", "restart", "containerd"]]
    assert restarts(sandbox.run("install-runtime.sh", new_image)) == []


def updates(result) -> list[list[str]]:
    return [c for c in result.called("apt-get") if "update" in c]


@needs_sandbox
def test_an_update_that_reaches_no_source_fails_instead_of_leaving_no_lists(sandbox):
    """apt-get exits 0 when a source cannot be reached ("W: Failed to fetch", apt-pkg/update.cc
    `AcquireUpdate`) unless --error-on=any: the update of a repository added on this run is
    retried until apt read its lists, never taken for done."""
    sandbox.state("apt-get.fail.update", 1)
    result = sandbox.run("install-runtime.sh", RUNTIME)
    assert result.returncode == 0, result.stderr
    assert "W: Failed to fetch" not in result.stderr
    assert "E: Failed to fetch https://download.docker.com/linux/ubuntu/dists/noble/InRelease" in (
        result.stderr
    )
    assert all("--error-on=any" in c for c in updates(result)), updates(result)
    assert sandbox.installed("containerd.io") == CONTAINERD


@needs_sandbox
def test_an_update_that_failed_after_a_repository_was_added_runs_on_the_next_run(sandbox):
    """The sources list and keyring are written, then every apt-get update fails (or the step is
    killed during it): the next run finds both files as it wants them and still owes the
    update, so it runs it instead of failing on a pin apt has no lists for."""
    sandbox.state("apt-get.fail.update", 3)
    first = sandbox.run("install-runtime.sh", RUNTIME)
    assert first.returncode != 0
    assert "apt-get update" in first.stderr
    again = sandbox.run("install-runtime.sh", RUNTIME)
    assert again.returncode == 0, again.stderr
    assert updates(again), "the owed update did not run"
    assert sandbox.installed("containerd.io") == CONTAINERD
    assert updates(sandbox.run("install-runtime.sh", RUNTIME)) == [], "settled once it succeeded"


@needs_sandbox
def test_runtime_first_run_killed_before_the_restart_restarts_on_the_next_run(sandbox):
    """The first run wrote the config and stopped before containerd restarted (its timeout, a
    failed restart): containerd still runs containerd.io's config (CRI disabled). The next run
    finds the files as it wants them and no record of a restart, and still restarts."""
    sandbox.state("systemctl.fail.restart.containerd", 1)
    assert sandbox.run("install-runtime.sh", RUNTIME).returncode != 0
    again = sandbox.run("install-runtime.sh", RUNTIME)
    assert again.returncode == 0, again.stderr
    assert restarts(again) == [["systemctl", "restart", "containerd"]], again.stderr
    assert restarts(sandbox.run("install-runtime.sh", RUNTIME)) == []


@needs_sandbox
def test_runtime_without_the_toolkit_for_control_plane_hosts(sandbox):
    result = sandbox.run("install-runtime.sh", CONTROL_PLANE_RUNTIME)
    assert result.returncode == 0, result.stderr
    assert sandbox.held() == {"containerd.io"}
    assert result.called("nvidia-ctk") == []
    assert [c[-1] for c in result.called("curl")] == [
        "https://download.docker.com/linux/ubuntu/gpg"
    ]
    cri = containerd_dump(sandbox)["plugins"][CRI_RUNTIME]["containerd"]
    assert cri["default_runtime_name"] == "runc"
    assert cri["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
    assert not sandbox.exists(NVIDIA_DROP_IN)
    again = sandbox.run("install-runtime.sh", CONTROL_PLANE_RUNTIME)
    assert restarts(again) == [] and installs(again) == []


@needs_sandbox
def test_runtime_fails_when_containerd_does_not_come_back(sandbox):
    sandbox.state("systemctl.fail.restart.containerd", 1)
    result = sandbox.run("install-runtime.sh", RUNTIME)
    assert result.returncode != 0
    assert (
        "[runtime] FAILED at step 5/7 (configure containerd), in configure_containerd"
        in result.stderr
    )
    assert "[runtime 5/7] configure containerd" in result.stderr


@needs_sandbox
def test_runtime_nvidia_runtime_without_systemd_cgroups_fails(sandbox):
    """nvidia is containerd's default runtime: without SystemdCgroup = true in its own options
    kubelet (cgroupDriver: systemd) cannot run pods, even though runc's options have it."""
    sandbox.state("nvidia-ctk.no-runc-options", 1)
    result = sandbox.run("install-runtime.sh", RUNTIME)
    assert result.returncode == 1, f"install-runtime.sh accepted it: {result.stderr}"
    assert (
        "[runtime] FAILED: nvidia runtime SystemdCgroup: true expected in `containerd config "
        "dump`, found 'nothing'" in result.stderr
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
    assert sandbox.held() == {"kubelet", "kubeadm", "kubectl", "cri-tools"}
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
    assert "[kube-tools 7/7] kubeadm v1.35.1" in result.stderr


@needs_sandbox
def test_kube_tools_install_crictl_at_the_minor(sandbox):
    """Issue 39, finding 6: kubeadm >= 1.32 no longer pulls cri-tools in (kubernetes/release
    cmd/krel/templates/latest/metadata.yaml), yet every failure hint names crictl: the step
    installs it from the minor's repository and holds it."""
    result = sandbox.run("install-kube-tools.sh", KUBE)
    assert result.returncode == 0, result.stderr
    assert sandbox.installed("cri-tools") == "1.35.0-1.1"
    assert "cri-tools" in sandbox.held()
    (install,) = installs(result)
    assert "cri-tools=1.35.*" in install


@needs_sandbox
def test_kube_tools_reports_no_time_of_the_node(sandbox):
    """Issue 41, finding 8: the node's clock never dates its join token. The script prints
    nothing on stdout (its progress goes to stderr), on the first run or a later one: the
    program mints with its own clock (components/kube/bootstrap_token.py)."""
    for _ in range(2):
        result = sandbox.run("install-kube-tools.sh", KUBE)
        assert result.returncode == 0, result.stderr
        assert result.stdout == "", result.stdout


@needs_sandbox
def test_kube_tools_checks_the_sandbox_image_against_kubeadms(sandbox):
    params = {**KUBE, "SANDBOX_IMAGE": pins.PAUSE_IMAGES["1.35"]}
    result = sandbox.run("install-kube-tools.sh", params)
    assert result.returncode == 0, result.stderr
    assert "sandbox image registry.k8s.io/pause:3.10.1 as kubeadm expects" in result.stderr
    sandbox.state("kubeadm.pause", "3.11")
    result = sandbox.run("install-kube-tools.sh", params)
    assert result.returncode == 1
    assert (
        "kubeadm v1.35.1 expects the sandbox image registry.k8s.io/pause:3.11, containerd has "
        "registry.k8s.io/pause:3.10.1" in result.stderr
    )


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
        "timeouts": {
            "discovery": "5m0s",
            "tlsBootstrap": "5m0s",
            "kubeletHealthCheck": "4m0s",
            "kubernetesAPICall": "1m0s",
        },
    }
    # The script's bound is above the phase timeouts it writes, so kubeadm, not `timeout`, ends
    # a stuck join and names the phase.
    phases = sum(int(v.split("m")[0]) * 60 for v in config["timeouts"].values())
    text = render_script("join-node.sh", JOIN)
    bounds = [line for line in text.splitlines() if line.startswith(("JOIN_PHASE", "DEFAULT_JOIN"))]
    shown = subprocess.run(
        [
            "bash",
            "-c",
            "\n".join(
                [*bounds, 'echo "$JOIN_PHASE_TIMEOUTS_SECONDS $DEFAULT_JOIN_TIMEOUT_SECONDS"']
            ),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert int(shown[0]) == phases and int(shown[1]) > phases, (phases, shown)
    assert (
        'timeout -k 30 "${JOIN_TIMEOUT_SECONDS:-${DEFAULT_JOIN_TIMEOUT_SECONDS}}" kubeadm join'
        in text
    )
    assert kube_host.state("kubeadm-join-config.mode").strip() == "600"
    assert list(kube_host.tmp_dir.iterdir()) == []  # the file with the token is gone
    assert kube_host.service_active("kubelet")
    assert "a10g-0 joined 10.42.1.10:6443" in result.stderr


@needs_sandbox
def test_join_registers_the_node_with_its_machines_provider_id(kube_host):
    """The kubelet's --provider-id: the Node's spec.providerID, which the join's delete hook
    checks it acts on (components/kube/node_hooks.py), beside the labels."""
    provider = "aws:///us-west-2a/i-0123456789abcdef0"
    result = kube_host.run("join-node.sh", {**JOIN, "PROVIDER_ID": provider})
    assert result.returncode == 0, result.stderr
    registration = yaml.safe_load(kube_host.state("kubeadm-join-config.yaml"))["nodeRegistration"]
    assert registration["kubeletExtraArgs"] == [
        {"name": "node-labels", "value": JOIN["NODE_LABELS"]},
        {"name": "provider-id", "value": provider},
    ]


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
    # A retry within the token's two hours needs nothing by hand; after them, a new token
    # comes with a new record of it (docs/decisions/
    # 057-a-join-token-is-minted-when-a-node-must-join.md).
    assert "run pulumi up again" in result.stderr, result.stderr
    assert "valid for 2 hours after it was minted" in result.stderr, result.stderr
    assert "pulumi up --replace the URN of a10g-0-join-token for a new one" in result.stderr
    assert "--target-replace" not in result.stderr
    assert "stays valid until the node has joined" not in result.stderr, "no token lives that long"
    assert TOKEN not in result.output
    assert list(kube_host.tmp_dir.iterdir()) == []
    # The half-done join is undone so the next `pulumi up` can join again.
    assert result.called("kubeadm", "reset", "-f"), result.commands()


@needs_sandbox
def test_a_join_retried_with_an_expired_token_succeeds_with_the_new_one(kube_host):
    """The token's two hours are over when the join is retried: the join fails cleanly; a new
    record of the token (`pulumi up --replace` of it) mints a new one, and the retried join
    succeeds with it."""
    kube_host.state("kubeadm.expired-tokens", TOKEN)
    failed = kube_host.run("join-node.sh", JOIN)
    assert failed.returncode != 0 and "could not find a JWS signature" in failed.stderr
    assert TOKEN not in failed.output
    fresh = "zyxwvu.0123456789zyxwvu"
    retried = kube_host.run("join-node.sh", {**JOIN, "JOIN_TOKEN": fresh})
    assert retried.returncode == 0, retried.stderr
    assert "a10g-0 joined 10.42.1.10:6443" in retried.stderr
    config = yaml.safe_load(kube_host.state("kubeadm-join-config.yaml"))
    assert config["discovery"]["bootstrapToken"]["token"] == fresh


@needs_sandbox
def test_a_host_joined_to_another_cluster_leaves_it_before_joining(kube_host):
    """A new control plane (another endpoint) re-joins a kept host: reset first, no delete
    hook on the node (a dead node would block every later up)."""
    assert kube_host.run("join-node.sh", JOIN).returncode == 0
    kube_host.write(
        "/etc/kubernetes/kubelet.conf",
        "apiVersion: v1\nclusters:\n- cluster:\n    server: https://10.9.9.9:6443\n",
    )
    result = kube_host.run("join-node.sh", JOIN)
    assert result.returncode == 0, result.stderr
    assert "joined to another cluster (https://10.9.9.9:6443" in result.stderr, result.stderr
    reset, join = result.called("kubeadm", "reset", "-f"), result.called("kubeadm", "join")
    assert reset and join, result.commands()
    commands = result.commands()
    assert commands.index("kubeadm reset -f") < commands.index(" ".join(join[0])), commands


@needs_sandbox
def test_a_host_joined_to_this_cluster_is_left_alone(kube_host):
    assert kube_host.run("join-node.sh", JOIN).returncode == 0
    kube_host.write(
        "/etc/kubernetes/kubelet.conf",
        f"apiVersion: v1\n    server: https://{JOIN['API_ENDPOINT']}\n",
    )
    result = kube_host.run("join-node.sh", JOIN)
    assert result.returncode == 0, result.stderr
    assert not result.called("kubeadm", "reset"), result.commands()
    assert not result.called("kubeadm", "join"), result.commands()


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
    # flannel's host-local IPAM state and devices, holding the old pod range.
    kube_host.write("/var/lib/cni/networks/cbr0/10.244.3.7", "containerd-sandbox-id\n")
    kube_host.state("links", "lo\nens5\ncni0\nflannel.1\n")
    result = kube_host.run("reset-node.sh")
    assert result.returncode == 0, result.stderr
    assert result.called("kubeadm", "reset", "-f")
    assert not kube_host.exists("/etc/kubernetes/kubelet.conf")
    assert not kube_host.exists("/etc/cni/net.d/10-calico.conflist")
    assert not kube_host.exists("/var/lib/cni/networks/cbr0/10.244.3.7")
    assert kube_host.state("links").split() == ["lo", "ens5"]
    assert result.called("ip", "link", "delete", "cni0") and result.called(
        "ip", "link", "delete", "flannel.1"
    )
    assert not kube_host.service_active("kubelet")
    again = kube_host.run("reset-node.sh")
    assert again.returncode == 0, again.stderr
    assert again.called("kubeadm", "reset") == []


# ---- failures met in the field --------------------------------------------------------------


@needs_sandbox
def test_nouveau_step_on_a_kernel_flavour_with_no_module_anywhere_fails_naming_the_way_out(
    sandbox,
):
    """The AMI boots an aws kernel the archive has no signed module for, and no other aws kernel
    has one either (only another flavour): nothing to move to, so the step fails before
    installing or rebooting anything."""
    sandbox.state("modules", "")
    sandbox.state("uname.r", "6.8.0-1015-aws")
    for path in (sandbox.state_dir / "apt.available").glob("linux-modules-nvidia-*-aws"):
        path.unlink()
    offer_module(sandbox, "580-server", "6.8.0-1040-generic")
    result = sandbox.run("disable-nouveau.sh", NOUVEAU_KERNEL)
    assert result.returncode == 1, result.stderr
    assert (
        "[nouveau] FAILED: the archive has no linux-modules-nvidia-580-server-6.8.0-1015-aws, "
        "and no linux-modules-nvidia-580-server-* of another aws kernel is built for a driver "
        "it offers; use another driverVersion or amiId" in result.stderr
    ), result.stderr
    assert installs(result) == [] and sandbox.state("systemd-run.scheduled") is None


@needs_sandbox
def test_driver_branch_without_packages_for_this_release_fails_before_installing(sandbox):
    """driverVersion names a branch this Ubuntu release has no -server packages for."""
    result = sandbox.run("install-driver.sh", {**DRIVER, "DRIVER_BRANCH": "560"})
    assert result.returncode == 1, result.stderr
    assert (
        "FAILED: nvidia-headless-no-dkms-560-server is not in this host's package archive: "
        "driver branch 560 (proprietary kernel modules) has no Ubuntu packages for this release"
        in result.stderr
    ), result.stderr
    assert installs(result) == []


@needs_sandbox
def test_driver_whose_module_is_built_for_another_branch_fails_before_installing(sandbox):
    """The running kernel's 580 module package depends on another branch's kernel common (an
    archive in the middle of a branch move): installing it would load a module userspace does
    not match."""
    offer_module(sandbox, "580-server", RUNNING_KERNEL, built_for="575.64.05", branch="575")
    result = sandbox.run("install-driver.sh", DRIVER)
    assert result.returncode == 1, result.stderr
    assert (
        f"[driver] FAILED: linux-modules-nvidia-580-server-{RUNNING_KERNEL} is not built for a "
        "580 driver (Depends: " in result.stderr
    ), result.stderr
    assert "nvidia-kernel-common-575-server (>= 575.64.05)" in result.stderr
    assert installs(result) == []


@needs_sandbox
def test_nvswitch_gen4_without_nvlsm_in_the_archive_fails_before_installing(sandbox):
    (sandbox.state_dir / "apt.available" / "nvlsm").unlink()
    params = {**FABRIC, "NVLINK_SUBNET_MANAGER": "true"}
    result = sandbox.run("install-driver.sh", params)
    assert result.returncode == 1, result.stderr
    assert "[driver] FAILED: nvlsm is not in NVIDIA's CUDA repository" in result.stderr
    assert installs(result) == []


@needs_sandbox
def test_a_gpu_left_without_persistence_mode_fails_the_driver_step(sandbox):
    """nvidia-persistenced runs but could not open one GPU: that GPU re-initialises on every
    CUDA context (slow first kernels, lost state between pods)."""
    sandbox.state("nvidia-smi.persistence-stuck", 1)
    result = sandbox.run("install-driver.sh", DRIVER)
    assert result.returncode == 1, result.stderr
    assert (
        "[driver] FAILED: persistence mode Enabled on 4 GPU(s) expected, nvidia-smi reports "
        "1 Disabled,3 Enabled" in result.stderr
    ), result.stderr
    assert "persistence mode on" not in result.stderr

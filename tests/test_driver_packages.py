"""What install-driver.sh installs and loads, per instance type, against archives that move
(issue 35): the module type and GSP firmware of g4dn and g5 (finding 5), driver packages pinned
by the driver's version rather than one Ubuntu revision, with the video libraries (findings 7
and 8), and the NVSwitch fabric packages from NVIDIA's CUDA repository (finding 2). The sandbox
and its archive: tests/sandbox.py, tests/helpers/archive.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.catalog import CATALOG
from components.hosts import pins
from components.settings.load import ConfigError
from tests.helpers.archive import (
    CUDA_LIST,
    DRIVER,
    KERNEL,
    Archive,
    cuda_version,
    gpu_host,
    source_of,
    ubuntu_version,
)
from tests.helpers.archive_packages import NVLSM_VERSION
from tests.sandbox import Sandbox, needs_sandbox
from tools.harness.stacks import load_stack_settings

FAST = {"RETRY_BASE_SECONDS": "0.01"}
GSP_OPTIONS = "/etc/modprobe.d/gpu-cluster-nvidia-gsp.conf"


def driver(instance_type: str, kernel_modules: str | None = None) -> dict[str, str]:
    """The driver step's parameters for a pool of this type, as the program renders them."""
    gpu = CATALOG[instance_type]
    modules = kernel_modules or gpu.default_kernel_modules
    return {**pins.driver_params(gpu, "24.04", "580", modules), **FAST}


@pytest.fixture
def host(tmp_path: Path) -> Sandbox:
    sb = gpu_host(Sandbox(tmp_path), gpus=1)
    Archive.today(sb)
    return sb


def module_package(kernel_modules: str) -> str:
    suffix = "580-server-open" if kernel_modules == "open" else "580-server"
    return f"linux-modules-nvidia-{suffix}-{KERNEL}"


# ---- finding 5: g4dn and g5 run the proprietary module without GSP firmware ---------------


@pytest.mark.parametrize(
    ("instance_type", "modules", "gsp"),
    [
        ("g4dn.xlarge", "proprietary", "off"),
        ("g5.xlarge", "proprietary", "off"),
        ("g6.xlarge", "open", "on"),
        ("g6e.xlarge", "open", "on"),
        ("p4d.24xlarge", "open", "on"),
        ("p5.48xlarge", "open", "on"),
        ("p6-b200.48xlarge", "open", "on"),
        ("p3.2xlarge", "proprietary", "on"),  # Volta: no open module at all
    ],
)
def test_each_family_gets_the_module_type_and_gsp_firmware_aws_runs_it_with(
    instance_type, modules, gsp
):
    """amazon-eks-ami templates/al2023/runtime/gpu/nvidia-kmod-load.sh: g4dn.*, g5.* and g5g.*
    get the proprietary module with NVreg_EnableGpuFirmware=0; every other type keeps the
    module its GPU's architecture defaults to."""
    pool = {"name": "a", "instanceType": instance_type, "count": 1}
    settings = load_stack_settings(config={"nodePools": [pool]})
    assert settings.node_pools[0].kernel_module_type == modules
    params = pins.driver_params(CATALOG[instance_type], "24.04", "580", modules)
    assert params["KERNEL_MODULES"] == modules and params["GSP_FIRMWARE"] == gsp


@pytest.mark.parametrize("instance_type", ["g4dn.xlarge", "g5.12xlarge"])
def test_the_open_module_is_refused_where_gsp_firmware_is_off(instance_type):
    pool = {"name": "a", "instanceType": instance_type, "count": 1, "kernelModules": "open"}
    with pytest.raises(ConfigError) as raised:
        load_stack_settings(config={"nodePools": [pool]})
    (problem,) = raised.value.problems
    assert problem.key == "gpu-cluster:nodePools[0].kernelModules"
    assert "runs with GSP firmware off, which only the proprietary modules can" in str(problem)


@needs_sandbox
def test_gsp_firmware_is_off_before_the_module_first_loads(host):
    result = host.run("install-driver.sh", driver("g5.xlarge"))
    assert result.returncode == 0, result.stderr
    assert host.installed(module_package("proprietary"))
    assert host.installed(module_package("open")) is None
    assert "options nvidia NVreg_EnableGpuFirmware=0\n" in host.read(GSP_OPTIONS)
    assert host.state("nvidia.loaded-gsp") == "off"
    assert result.called("nvidia-smi", "-q"), result.commands()
    again = host.run("install-driver.sh", driver("g5.xlarge"))
    assert again.returncode == 0, again.stderr
    assert again.called("modprobe", "-r", "nvidia") == []


@needs_sandbox
def test_a_g5_node_on_the_open_module_moves_to_the_proprietary_one_without_gsp(host):
    """A g5 node of an earlier release runs the open module with GSP: the step (inside its roll,
    drained) installs the proprietary module, sets the option and loads the module again."""
    before = {k: v for k, v in driver("g5.xlarge", "open").items() if k != "GSP_FIRMWARE"}
    first = host.run("install-driver.sh", before)
    assert first.returncode == 0, first.stderr
    assert host.state("nvidia.loaded-gsp") == "on"
    result = host.run("install-driver.sh", driver("g5.xlarge"))
    assert result.returncode == 0, result.stderr
    assert host.installed(module_package("proprietary"))
    assert host.installed(module_package("open")) is None
    commands = result.commands()
    assert "modprobe -r nvidia" in commands, commands
    assert commands[-1 - commands[::-1].index("modprobe nvidia")] == "modprobe nvidia"
    assert commands.index("modprobe -r nvidia") < len(commands) - commands[::-1].index(
        "modprobe nvidia"
    )
    assert host.state("nvidia.loaded-gsp") == "off"
    assert "GSP firmware off" in result.stderr and "reloading it" in result.stderr


@needs_sandbox
def test_a_busy_module_that_must_lose_gsp_asks_for_a_drain_and_reboot(host):
    before = {k: v for k, v in driver("g5.xlarge", "open").items() if k != "GSP_FIRMWARE"}
    assert host.run("install-driver.sh", before).returncode == 0
    host.state("modprobe.busy.nvidia", 1)
    result = host.run("install-driver.sh", driver("g5.xlarge"))
    assert result.returncode == 3, result.stderr
    assert "REBOOT_REQUIRED: the loaded nvidia kernel module must be loaded again" in (
        result.stderr
    )


@needs_sandbox
def test_gsp_still_running_after_the_step_fails_it(host):
    """The option was written but the module it reached was loaded before it (nvidia-smi -q
    still lists GSP firmware): the step says so instead of passing."""
    host.state("modules", "nvidia\n")
    host.state("nvidia.loaded-gsp", "on")
    host.state("dpkg/" + module_package("proprietary"), "6.8.0-1021.23")
    host.state("nvidia.loaded-version", DRIVER)
    params = driver("g5.xlarge")
    result = host.run("install-driver.sh", {**params})
    # The module package was already installed and the option is new: it is reloaded.
    assert result.returncode == 0, result.stderr
    assert host.state("nvidia.loaded-gsp") == "off"
    host.state("nvidia.loaded-gsp", "on")  # someone loaded it again by hand without the option
    again = host.run("install-driver.sh", params)
    assert again.returncode == 1
    assert (
        "[driver] FAILED: GSP firmware off expected (/etc/modprobe.d/gpu-cluster-nvidia-gsp.conf),"
        " nvidia-smi -q reports it running on 1 GPU(s)" in again.stderr
    ), again.stderr


# ---- findings 7 and 8: the driver's version, not one revision; the video libraries --------


def userspace(kernel_modules: str) -> tuple[str, ...]:
    """Ubuntu's driver packages besides the module, the headless one of the module's type."""
    headless = "nvidia-headless-no-dkms-580-server" + ("-open" if kernel_modules == "open" else "")
    return (
        "nvidia-kernel-common-580-server",
        headless,
        "nvidia-utils-580-server",
        "libnvidia-decode-580-server",
        "libnvidia-encode-580-server",
    )


def driver_install(result) -> list[str]:
    (install,) = [
        c
        for c in result.called("apt-get")
        if "install" in c and any(arg.startswith("linux-modules-nvidia-") for arg in c)
    ]
    return install


@needs_sandbox
def test_every_driver_package_is_pinned_by_the_drivers_version_in_one_transaction(host):
    result = host.run("install-driver.sh", driver("g5.xlarge"))
    assert result.returncode == 0, result.stderr
    install = driver_install(result)
    assert f"{module_package('proprietary')}=6.8.0-1021.23" in install, install
    for package in userspace("proprietary"):
        assert f"{package}={DRIVER}-*" in install, install
        assert host.installed(package) == ubuntu_version(DRIVER, "24.04", 2), package
    assert set(userspace("proprietary")) <= host.held()


@needs_sandbox
def test_the_video_libraries_are_installed_with_the_driver(host):
    """NVDEC and NVENC: gpu-driver-container installs libnvidia-decode and libnvidia-encode of
    the branch beside the driver (ubuntu24.04/precompiled/nvidia-driver, _install_driver)."""
    result = host.run("install-driver.sh", driver("g6.xlarge"))
    assert result.returncode == 0, result.stderr
    for package in ("libnvidia-decode-580-server", "libnvidia-encode-580-server"):
        assert host.installed(package) == ubuntu_version(DRIVER, "24.04", 2)


def recranked(host: Sandbox) -> None:
    """A node the earlier release installed at 580.95.05-0ubuntu0.24.04.2 (no video libraries),
    then Ubuntu recranked the same driver as .3 (LP #2129682, "Fix dependencies between
    packages": each userspace package names nvidia-kernel-common's own build) and the pocket
    kept only .3."""
    old, new = ubuntu_version(DRIVER, "24.04", 2), ubuntu_version(DRIVER, "24.04", 3)
    common = "nvidia-kernel-common-580-server"
    packages = userspace("open")
    for package in packages[:3]:
        host.state(f"dpkg/{package}", old)
    host.state(f"dpkg/{module_package('open')}", "6.8.0-1021.23")
    host.state("apt-mark.held", "\n".join([*packages[:3], module_package("open")]) + "\n")
    host.state("modules", "nvidia\n")
    host.state("nvidia.loaded-version", DRIVER)
    host.state("systemd/nvidia-persistenced.active", "yes")
    for package in packages:
        host.apt_available(package, new)
    for package in packages[1:]:
        host.state(f"apt.depends/{package}={new}", f"{common} (= {new})")
    host.state(f"apt.depends/nvidia-utils-580-server={old}", f"{common} (= {old})")


@needs_sandbox
def test_a_node_installed_before_a_recrank_takes_the_new_packages_with_the_same_driver(host):
    """Pinned per revision, the step would ask apt for the installed .2 beside the new video
    libraries at .3, which need nvidia-kernel-common .3: apt refuses. Pinned by the driver's
    version, in one transaction, apt moves the whole set to .3; the module stays as it is."""
    recranked(host)
    result = host.run("install-driver.sh", driver("g6.xlarge"))
    assert result.returncode == 0, result.stderr
    new = ubuntu_version(DRIVER, "24.04", 3)
    packages = userspace("open")
    assert {p: host.installed(p) for p in packages} == dict.fromkeys(packages, new)
    assert host.installed(module_package("open")) == "6.8.0-1021.23"
    assert result.called("modprobe", "-r", "nvidia") == [], "the module was not touched"


# ---- finding 2: the fabric packages from NVIDIA's CUDA repository -------------------------

CUDA_KEYRING = "/etc/apt/keyrings/cuda.gpg"
PREFERENCES = "/etc/apt/preferences.d/gpu-cluster-cuda"


def preferences(host: Sandbox) -> list[dict[str, str]]:
    """The apt preferences file as its stanzas (apt_preferences(5))."""
    stanzas = []
    for block in host.read(PREFERENCES).split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.splitlines() if line and not line.startswith("#")
        )
        stanzas.append(fields)
    return stanzas


@needs_sandbox
@pytest.mark.parametrize("release", ["24.04", "22.04"])
def test_b200_gets_nvlsm_and_nvsdm_from_the_cuda_repository(tmp_path, release):
    """p6-b200 stopped at "nvlsm is not in this host's package archive": nvlsm and libnvsdm are
    in NVIDIA's CUDA repository only, as are, from branch 580, the unsuffixed fabric manager,
    NSCQ and NVSDM (gpu-driver-container ubuntu24.04/precompiled/nvidia-driver)."""
    host = gpu_host(Sandbox(tmp_path), release)
    Archive.today(host, release)
    params = {**pins.driver_params(CATALOG["p6-b200.48xlarge"], release, "580", "open"), **FAST}
    result = host.run("install-driver.sh", params)
    assert result.returncode == 0, result.stderr
    repository = pins.CUDA_REPOSITORIES[release]
    assert host.read(CUDA_LIST) == f"deb [signed-by={CUDA_KEYRING}] {repository} /\n"
    install = driver_install(result)
    for package in ("nvidia-fabricmanager", "libnvidia-nscq", "libnvsdm"):
        assert f"{package}={DRIVER}-*" in install, install
        assert host.installed(package) == cuda_version(DRIVER, release)
        assert source_of(host, package) == "NVIDIA CUDA repository"
    assert f"nvlsm={NVLSM_VERSION}" in install
    assert {"nvidia-fabricmanager", "libnvidia-nscq", "libnvsdm", "nvlsm"} <= host.held()
    assert host.installed(f"linux-modules-extra-{KERNEL}")
    assert host.read("/etc/modules-load.d/gpu-cluster-nvlsm.conf").split() == [
        "mlx5_core",
        "mlx5_ib",
        "ib_umad",
    ]
    commands = result.commands()
    start = commands.index("systemctl enable --now nvidia-fabricmanager")
    for module in ("mlx5_core", "mlx5_ib", "ib_umad"):
        assert commands.index(f"modprobe {module}") < start, commands
    assert host.service_active("nvidia-fabricmanager")


@needs_sandbox
def test_the_cuda_repository_serves_only_the_fabric_packages_at_the_drivers_version(host):
    host.state("nvidia-smi.gpus", 8)
    params = driver("p5.48xlarge")
    result = host.run("install-driver.sh", params)
    assert result.returncode == 0, result.stderr
    # apt_preferences(5): a package version takes the priority of the first specific stanza
    # that matches it, else of the first general one (Package: *): so the fabric packages at
    # the driver's version get 600, nvlsm from that origin too, every other package and
    # version of the CUDA repository -1 (never installed).
    assert preferences(host) == [
        {
            "Package": "nvidia-fabricmanager libnvidia-nscq",
            "Pin": f"version {DRIVER}-*",
            "Pin-Priority": "600",
        },
        {
            "Package": "nvlsm",
            "Pin": "origin developer.download.nvidia.com",
            "Pin-Priority": "600",
        },
        {"Package": "*", "Pin": "origin developer.download.nvidia.com", "Pin-Priority": "-1"},
    ]
    assert host.installed("libnvsdm") is None and host.installed("nvlsm") is None
    assert result.called("modprobe", "ib_umad") == []
    assert {"nvidia-fabricmanager", "libnvidia-nscq"} <= host.held()


@needs_sandbox
def test_a_p5_node_moves_from_ubuntus_fabric_packages_in_one_transaction(host):
    """A p5 node of an earlier release: Ubuntu's nvidia-fabricmanager-580 and libnvidia-nscq-580,
    held. The CUDA repository's unsuffixed packages ship the same files: the old ones leave in
    the transaction that installs the new ones (inside the node's roll)."""
    host.state("nvidia-smi.gpus", 8)
    old = ubuntu_version(DRIVER, "24.04", 1)
    for package in ("nvidia-fabricmanager-580", "libnvidia-nscq-580"):
        host.state(f"dpkg/{package}", old)
    host.state("apt-mark.held", "nvidia-fabricmanager-580\nlibnvidia-nscq-580\n")
    result = host.run("install-driver.sh", driver("p5.48xlarge"))
    assert result.returncode == 0, result.stderr
    install = driver_install(result)
    assert {"nvidia-fabricmanager-580-", "libnvidia-nscq-580-"} <= set(install), install
    assert "--allow-change-held-packages" in install
    assert host.installed("nvidia-fabricmanager-580") is None
    assert host.installed("nvidia-fabricmanager") == cuda_version(DRIVER, "24.04")
    again = host.run("install-driver.sh", driver("p5.48xlarge"))
    assert again.returncode == 0, again.stderr
    assert [c for c in again.called("apt-get") if "install" in c] == []


@needs_sandbox
def test_a_cuda_key_that_is_not_nvidias_is_never_trusted(host):
    host.state("curl.body.3bf863cc.pub", "stub key fingerprint " + "AB" * 20 + "\n")
    result = host.run("install-driver.sh", driver("p5.48xlarge"))
    assert result.returncode == 1
    assert (
        "the key at https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/"
        "3bf863cc.pub has fingerprint " + "AB" * 20 + ", EB693B3035CD5710E231E123A4B469963BF863CC "
        "expected: not trusting it" in result.stderr
    ), result.stderr
    assert not host.exists(CUDA_KEYRING) and not host.exists(CUDA_LIST)


@needs_sandbox
def test_without_modules_extra_in_the_archive_nvlink5_fails_naming_the_module(host):
    host.state("nvidia-smi.gpus", 8)
    host.state(f"apt.available/linux-modules-extra-{KERNEL}", "")
    result = host.run("install-driver.sh", driver("p6-b200.48xlarge"))
    assert result.returncode == 1
    assert (
        f"[driver] FAILED: kernel module mlx5_core (NVLink 5 subnet manager) does not load on "
        f"{KERNEL}: its package (linux-modules-extra-{KERNEL}) is not in the archive"
        in result.stderr
    ), result.stderr
    assert not host.service_active("nvidia-fabricmanager")


@needs_sandbox
def test_a_fabric_manager_dpkg_left_half_configured_fails_the_step(host):
    """Fabric manager must equal the driver or CUDA fails with error 802 while nvidia-smi looks
    fine: one that dpkg could not configure is not taken as installed."""
    host.state("nvidia-smi.gpus", 8)
    host.state("dpkg.half-configured/nvidia-fabricmanager", 1)
    result = host.run("install-driver.sh", driver("p5.48xlarge"))
    assert result.returncode == 1
    assert (
        f"[driver] FAILED: fabric manager must match driver {DRIVER}, nvidia-fabricmanager is "
        "not installed" in result.stderr
    ), result.stderr

"""The scripts' apt invocations against real apt: Debian's apt-get, apt-cache, apt-mark and dpkg
on repositories shaped like the real archives (tests/helpers/real_apt.py), with the packages'
real names, versions and relations (tests/helpers/archive_packages.py, which names the source of
each). What the stubs answer is our model of apt; this is apt.

Each test runs the scripts' own functions (lib/common.sh `apt_install_held`, `apt_install`,
`apt_hold`, `require_apt_version`, `add_kubernetes_apt_repo`, `add_signed_apt_repo`;
install-driver.sh's steps; install-runtime.sh's) and asserts what apt resolved, installed, held
or refused. Debian 12's apt is 2.6, Ubuntu's 2.4 (jammy) and 2.7 (noble): where a result could
differ between them, the test says so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from components.catalog import CATALOG
from components.hosts import pins
from tests.helpers import archive
from tests.helpers import archive_packages as data
from tests.helpers.real_apt import AptHost, machine_dpkg_fingerprint, require_real_apt
from tests.sandbox import Sandbox

RELEASES = ("24.04", "22.04")
FAST = "RETRY_BASE_SECONDS=0.01\n"


@pytest.fixture
def host(tmp_path: Path, request) -> AptHost:
    """A 24.04 host (or the release a test's `release` parameter names) with today's archive,
    its lists updated; the machine's own dpkg database is checked untouched afterwards."""
    require_real_apt()
    release = getattr(request, "param", None) or "24.04"
    before = machine_dpkg_fingerprint()
    apt = AptHost(tmp_path, release)
    apt.publish(data.today(release))
    apt.update()
    yield apt
    assert machine_dpkg_fingerprint() == before, "the machine's /var/lib/dpkg or dpkg.log changed"


def republish(apt: AptHost, snapshot: data.Snapshot) -> None:
    apt.publish(snapshot)
    apt.update()


def ok(result) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


# ---- Kubernetes packages (install-kube-tools.sh, lib/common.sh) ----------------------------

KUBE = "install-kube-tools.sh"
# The step's install_kube_packages; enabling the kubelet is systemd's part, left out here.
KUBE_INSTALL = FAST + "enable_kubelet() { :; }\nadd_kubernetes_apt_repo\ninstall_kube_packages\n"
KUBE_HELD = {"kubelet", "kubeadm", "kubectl", "cri-tools"}


def test_kube_tools_take_the_newest_patch_of_the_minor_and_hold_it(host):
    """`kubelet=1.35.*`: apt's version glob picks the newest 1.35 patch, and cri-tools' release
    of the minor (1.35.0) for `cri-tools=1.35.*`; the four are held."""
    ok(host.bash(KUBE, KUBE_INSTALL, {"KUBERNETES_MINOR": "1.35"}))
    installed = host.installed()
    for name in ("kubelet", "kubeadm", "kubectl"):
        assert installed[name] == data.KUBE_VERSIONS[-1], name
    assert installed["kubernetes-cni"] == "1.8.0-1.1"
    assert installed["cri-tools"] == "1.35.0-1.1"
    assert host.held() == KUBE_HELD
    again = ok(host.bash(KUBE, KUBE_INSTALL, {"KUBERNETES_MINOR": "1.35"}))
    assert "already installed" in again and "installing" not in again


def test_held_kube_tools_stay_when_the_repository_moves_on(host):
    ok(host.bash(KUBE, KUBE_INSTALL, {"KUBERNETES_MINOR": "1.35"}))
    snapshot = data.next_month()
    # A later cri-tools release of the minor (cri-tools has had them: v1.30.1, v1.31.1).
    snapshot.add(
        data.kubernetes_repository("1.35"), [data.Package("cri-tools", "1.35.1-1.1", "pkgs.k8s.io")]
    )
    republish(host, snapshot)
    upgrade = ok(host.apt_get("-s", "upgrade"))
    assert "kept back" in upgrade and "Inst kubelet" not in upgrade, upgrade
    assert "Inst cri-tools" not in upgrade, upgrade
    again = ok(host.bash(KUBE, KUBE_INSTALL, {"KUBERNETES_MINOR": "1.35"}))
    assert "already installed" in again
    assert host.installed()["kubelet"] == data.KUBE_VERSIONS[-1]


def test_a_minor_the_repository_does_not_have_is_refused_by_apt(host):
    """The glob of another minor in this minor's repository: apt says the version was not found
    (the step fails after its retries, naming apt's words)."""
    ok(host.bash(KUBE, "add_kubernetes_apt_repo\n", {"KUBERNETES_MINOR": "1.35"}))
    result = host.bash(
        KUBE, FAST + 'apt_install_held "1.36.*" kubeadm\n', {"KUBERNETES_MINOR": "1.35"}
    )
    assert result.returncode != 0
    assert "E: Version '1.36.*' for 'kubeadm' was not found" in result.stderr


def test_an_upgrade_moves_a_held_kubeadm_to_the_next_minor_and_leaves_kubelet(host):
    """upgrade_kubeadm_package's apt part: the 1.36 repository replaces 1.35's, kubeadm moves
    (it is held: `--allow-change-held-packages`), kubelet stays until its own step."""
    ok(host.bash(KUBE, KUBE_INSTALL, {"KUBERNETES_MINOR": "1.35"}))
    snapshot = data.next_month()
    repository, packages = data.kubernetes_minor("1.36", ("1.36.0-1.1", "1.36.1-1.1"))
    snapshot.add(repository, packages)
    republish(host, snapshot)
    ok(
        host.bash(
            KUBE,
            FAST + 'add_kubernetes_apt_repo\napt_install_held "${KUBERNETES_MINOR}.*" kubeadm\n',
            {"KUBERNETES_MINOR": "1.36"},
        )
    )
    installed = host.installed()
    assert installed["kubeadm"] == "1.36.1-1.1"
    assert installed["kubelet"] == data.KUBE_VERSIONS[-1]
    assert installed["cri-tools"] == "1.35.0-1.1", "held, and enough for kubeadm 1.36"
    assert host.held() == KUBE_HELD
    # upgrade_kubelet_package's apt part (the kubelet's restart is systemd's): cri-tools moves
    # to the new minor's release with kubelet and kubectl.
    ok(
        host.bash(
            KUBE,
            FAST + "systemctl() { :; }\nupgrade_kubelet_package\n",
            {"KUBERNETES_MINOR": "1.36"},
        )
    )
    installed = host.installed()
    assert installed["kubelet"] == installed["kubectl"] == "1.36.1-1.1"
    assert installed["cri-tools"] == "1.36.0-1.1"
    assert host.held() == KUBE_HELD


def test_kubeadm_built_after_krel_0ffd6e1f_brings_no_crictl(host):
    """kubernetes/release 0ffd6e1f (2026-04-24) ended kubeadm's cri-tools dependency for 1.32
    and later: a kubeadm built since installs no crictl, so the step asks for cri-tools itself
    (issue 39, finding 6) and gets the minor's release."""
    snapshot = data.today()
    repository, packages = data.kubernetes_minor(
        "1.36", ("1.36.5-1.1",), kubeadm_needs_cri_tools=False
    )
    snapshot.add(repository, packages)
    republish(host, snapshot)
    kubeadm_alone = 'add_kubernetes_apt_repo\napt_install_held "${KUBERNETES_MINOR}.*" kubeadm\n'
    ok(host.bash(KUBE, FAST + kubeadm_alone, {"KUBERNETES_MINOR": "1.36"}))
    installed = host.installed()
    assert installed["kubeadm"] == "1.36.5-1.1"
    assert "cri-tools" not in installed
    ok(host.bash(KUBE, KUBE_INSTALL, {"KUBERNETES_MINOR": "1.36"}))
    assert host.installed()["cri-tools"] == "1.36.0-1.1"
    assert host.held() == KUBE_HELD


# ---- containerd and the toolkit (install-runtime.sh) -------------------------------------------

RUNTIME = "install-runtime.sh"
# `containerd --version` as containerd 2.2.1 prints it (cmd/containerd/command/main.go sets
# cli.VersionPrinter: App.Name, version.Package, App.Version, version.Revision; containerd.io
# links Package=containerd.io and Version without its v, docker/containerd-packaging
# debian/rules and scripts/build-deb): the one seam of install_containerd here.
CONTAINERD_VERSION_OUTPUT = (
    "containerd() { echo 'containerd containerd.io 2.2.1 "
    "dea7da592f5d1d2b7755e3a161be07f43fad8f75'; }\n"
)


def runtime(release: str) -> dict[str, str]:
    return pins.runtime_params(release, "1.35", with_toolkit=True)


def install_containerd(apt: AptHost) -> str:
    """install_containerd as the step runs it."""
    program = FAST + CONTAINERD_VERSION_OUTPUT + "install_containerd\n"
    return ok(apt.bash(RUNTIME, program, runtime(apt.release)))


@pytest.mark.parametrize("host", RELEASES, indirect=True)
def test_containerd_io_replaces_ubuntus_containerd_and_runc_in_one_transaction(host):
    """A host that had Ubuntu's containerd: containerd.io Conflicts/Replaces/Provides
    containerd and runc (docker/containerd-packaging debian/control), so apt removes them in the
    same transaction the pin installs it."""
    ok(host.apt_get("install", "-y", "containerd"))
    assert {"containerd", "runc"} <= set(host.installed())
    install_containerd(host)
    installed = host.installed()
    assert installed["containerd.io"] == pins.CONTAINERD_VERSIONS[host.release]
    assert "containerd" not in installed and "runc" not in installed
    assert host.held() == {"containerd.io"}


def test_the_containerd_pin_still_installs_and_holds_next_month(host):
    install_containerd(host)
    republish(host, data.next_month())
    upgrade = ok(host.apt_get("-s", "upgrade"))
    assert "Inst containerd" not in upgrade, upgrade
    # A new host a month on: Docker's repository still has the pin (Ubuntu's moved to 2.2.2).
    fresh = AptHost(host.root.parent / "fresh", "24.04")
    fresh.publish(data.next_month())
    fresh.update()
    install_containerd(fresh)
    assert fresh.installed()["containerd.io"] == pins.CONTAINERD_VERSIONS["24.04"]
    assert fresh.candidate("containerd") == "2.2.2-0ubuntu1~24.04.1"


def test_the_toolkit_installs_its_four_packages_at_the_pin_when_a_newer_one_exists(host):
    republish(host, data.next_month())
    ok(
        host.bash(
            RUNTIME, FAST + "add_nvidia_apt_repo\ninstall_container_toolkit\n", runtime("24.04")
        )
    )
    installed = host.installed()
    for name in data.TOOLKIT_PACKAGES:
        assert installed[name] == pins.NVIDIA_CTK_VERSION, name
    assert set(data.TOOLKIT_PACKAGES) <= host.held()


def test_the_toolkit_alone_at_the_pin_is_refused_once_a_newer_one_exists(host):
    """Why the step pins all four: nvidia-container-toolkit 1.20.0-1 Depends
    libnvidia-container-tools (= 1.20.0-1), and apt resolves a dependency from the candidate
    (1.21.0-1) only; it does not go back to an older version of a package nobody asked for.
    Ubuntu's apt 2.4 and 2.7 resolve with the same classic resolver (apt-pkg/depcache.cc
    `MarkInstall`) as Debian 12's 2.6; apt 3's new solver could differ."""
    republish(host, data.next_month())
    ok(host.bash(RUNTIME, "add_nvidia_apt_repo\n", runtime("24.04")))
    alone = host.apt_get("-s", "install", f"nvidia-container-toolkit={pins.NVIDIA_CTK_VERSION}")
    assert alone.returncode != 0
    assert f"libnvidia-container-tools (= {pins.NVIDIA_CTK_VERSION})" in alone.stdout


@pytest.mark.parametrize("host", RELEASES, indirect=True)
def test_the_toml_parser_is_python3_tomli_of_the_release_where_tomllib_is_missing(host):
    """ensure_toml_parser on 22.04, whose python3 (3.10) imports neither tomllib nor, before
    python3-tomli, tomli: apt installs jammy's python3-tomli (universe). On 24.04 (python3 3.12)
    the same call installs nothing."""
    jammy_python3 = "python3() { return 1; }\n" if host.release == "22.04" else ""
    ok(host.bash(RUNTIME, FAST + jammy_python3 + "ensure_toml_parser\n", runtime(host.release)))
    installed = host.installed()
    if host.release == "22.04":
        assert (
            installed["python3-tomli"] == data.base_version("python3-tomli", "22.04") == "1.2.2-2"
        )
    else:
        assert "python3-tomli" not in installed


# ---- the driver (install-driver.sh) ------------------------------------------------------------

DRIVER = "install-driver.sh"
DRIVER_STEPS = (
    FAST + "run_steps refuse_transitional_branch choose_driver_version install_driver_packages\n"
)


def driver(instance_type: str, release: str) -> dict[str, str]:
    gpu = CATALOG[instance_type]
    return pins.driver_params(gpu, release, "580", gpu.default_kernel_modules)


def install_driver(apt: AptHost, instance_type: str) -> str:
    return apt.bash(DRIVER, DRIVER_STEPS, driver(instance_type, apt.release))


@pytest.mark.parametrize("host", RELEASES, indirect=True)
@pytest.mark.parametrize("instance_type", ["g5.xlarge", "g6.xlarge"])
def test_the_driver_installs_at_the_version_its_module_was_built_for(host, instance_type):
    ok(install_driver(host, instance_type))
    suffix = "580-server" + (
        "-open" if CATALOG[instance_type].default_kernel_modules == "open" else ""
    )
    installed = host.installed()
    version = data.ubuntu_version(data.DRIVER, host.release)
    assert installed[f"linux-modules-nvidia-{suffix}-{data.KERNEL}"] == data.kernel_version(
        data.KERNEL
    )
    for name in (
        "nvidia-kernel-common-580-server",
        f"nvidia-headless-no-dkms-{suffix}",
        "nvidia-utils-580-server",
        "libnvidia-decode-580-server",
        "libnvidia-encode-580-server",
    ):
        assert installed[name] == version, name
    assert f"linux-modules-nvidia-{suffix}-{data.KERNEL}" in host.held()
    again = ok(install_driver(host, instance_type))
    assert "already installed" in again


def test_a_driver_recrank_leaves_an_installed_node_alone_and_gives_a_new_one_the_fix(host):
    """LP #2129682: Ubuntu re-uploaded 580.95.05 (.3) with its userspace depending on a virtual
    package of the driver's version instead of kernel common's exact revision. An installed node
    keeps its .2 set (the pins are the driver's version, any revision); a new node gets .3."""
    ok(install_driver(host, "g6.xlarge"))
    republish(host, data.recrank())
    again = ok(install_driver(host, "g6.xlarge"))
    assert "already installed" in again
    assert host.installed()["nvidia-utils-580-server"] == data.ubuntu_version(data.DRIVER, "24.04")
    fresh = AptHost(host.root.parent / "fresh", "24.04")
    fresh.publish(data.recrank())
    fresh.update()
    ok(install_driver(fresh, "g6.xlarge"))
    recranked = data.ubuntu_version(data.DRIVER, "24.04", data.RECRANK)
    assert fresh.installed()["nvidia-utils-580-server"] == recranked


def test_held_driver_and_kernel_stay_when_the_archive_moves_on(host):
    """After the driver step and `keep_kernel_with_the_driver`: a month on, `apt-get upgrade`
    (what unattended-upgrades would do within its origins) installs neither the newer kernel
    nor the point release, and a re-run installs nothing."""
    ok(install_driver(host, "g6.xlarge"))
    ok(host.bash(DRIVER, "keep_kernel_with_the_driver\n", driver("g6.xlarge", "24.04")))
    assert {"linux-aws", "linux-image-aws", "linux-headers-aws"} <= host.held()
    republish(host, data.next_month())
    upgrade = ok(host.apt_get("-s", "upgrade"))
    assert "Inst linux-image" not in upgrade and "Inst nvidia" not in upgrade, upgrade
    assert "already installed" in ok(install_driver(host, "g6.xlarge"))


def test_a_new_host_on_a_kernel_that_left_the_archive_has_no_module_to_install(host):
    """Next month the AMI's kernel and its modules are gone from the pockets: apt cannot locate
    the module, and the step says the nouveau step must move the kernel."""
    republish(host, data.next_month())
    module = f"linux-modules-nvidia-580-server-open-{data.KERNEL}"
    located = host.apt_get("-s", "install", module)
    assert located.returncode != 0 and f"Unable to locate package {module}" in located.stderr
    result = install_driver(host, "g6.xlarge")
    assert result.returncode != 0 and f"the archive has no {module}" in result.stderr


def test_a_module_that_outlived_its_driver_cannot_be_installed(host):
    """Issue 39, finding 2: the pocket keeps the AMI kernel's module built for 580.95.05 (a
    name of its own) beside the 580.105.08 userspace. Real apt refuses the module: its
    nvidia-kernel-common-580-server (<= 580.95.05-1) cannot be met by the only version left, so
    only a kernel whose module is built for the offered driver can take the driver."""
    republish(host, data.module_outlives_driver())
    module = f"linux-modules-nvidia-580-server-open-{data.KERNEL}"
    refused = host.apt_get("-s", "install", module)
    assert refused.returncode != 0
    assert "nvidia-kernel-common-580-server (<= 580.95.05-1)" in refused.stdout, refused.stdout
    assert install_driver(host, "g6.xlarge").returncode != 0
    newer = f"linux-modules-nvidia-580-server-open-{data.NEWER_KERNEL}"
    ok(host.apt_get("-s", "install", newer))


@pytest.mark.parametrize("host", RELEASES, indirect=True)
def test_fabric_packages_come_from_cuda_at_the_drivers_version_and_nothing_else_does(host):
    """p5: the preferences install-driver.sh writes (apt_preferences(5)): the fabric packages at
    the driver's version from NVIDIA's CUDA repository (600), everything else of that origin at
    -1, so CUDA's driver packages (Ubuntu's names without -server, higher versions) never win."""
    snapshot = data.today(host.release)
    snapshot.add(data.cuda_repository(host.release), data.cuda_packages(data.POINT_RELEASE))
    republish(host, snapshot)
    ok(install_driver(host, "p5.48xlarge"))
    installed = host.installed()
    for name in ("nvidia-fabricmanager", "libnvidia-nscq"):
        assert installed[name] == data.cuda_version(data.DRIVER), name
    assert {"nvidia-fabricmanager", "libnvidia-nscq"} <= host.held()
    priorities = host.priorities("nvidia-fabricmanager")
    assert priorities[data.cuda_version(data.DRIVER)] == 600, priorities
    assert priorities[data.cuda_version(data.POINT_RELEASE)] == -1, priorities
    assert set(host.priorities("nvidia-driver-580-open").values()) == {-1}
    refused = host.apt_get("-s", "install", "nvidia-driver-580-open")
    assert refused.returncode != 0


@pytest.mark.parametrize("host", RELEASES, indirect=True)
def test_the_nvlink5_packages_resolve_with_nvlsm_held_at_its_own_version(host):
    """p6-b200: NVSDM at the driver's version and nvlsm at its own from CUDA's repository, then
    load_nvlink5_modules' packages from Ubuntu's: the InfiniBand diagnostics, umad and the
    kernel's modules-extra (loading the modules is kmod's part, left out here)."""
    ok(install_driver(host, "p6-b200.48xlarge"))
    installed = host.installed()
    assert installed["libnvsdm"] == data.cuda_version(data.DRIVER)
    assert installed["nvlsm"] == data.NVLSM_VERSION
    assert "nvlsm" in host.held()
    seams = 'NVLSM_MODULES_CONF="${TMPDIR}/nvlsm.conf"\nmodprobe() { :; }\n'
    params = driver("p6-b200.48xlarge", host.release)
    ok(host.bash(DRIVER, FAST + seams + "load_nvlink5_modules\n", params))
    installed = host.installed()
    for name in ("infiniband-diags", "libibumad3"):
        assert installed[name] == data.base_version(name, host.release), name
    assert installed[f"linux-modules-extra-{data.KERNEL}"] == data.kernel_version(data.KERNEL)


NOUVEAU = "disable-nouveau.sh"


@pytest.mark.parametrize("host", RELEASES, indirect=True)
def test_a_module_that_outlived_its_driver_moves_the_kernel_to_one_the_driver_installs_on(host):
    """Issue 39, finding 2, as real apt resolves it: the nouveau step sees the AMI kernel's
    module built for a driver whose userspace the pockets replaced, installs the newest kernel
    whose module is built for the offered driver (image, modules, headers) and asks for the
    reboot; on that kernel the driver step installs."""
    republish(host, data.module_outlives_driver(host.release))
    params = {"DRIVER_BRANCH": "580", "KERNEL_MODULES": "open"}
    program = FAST + 'move_to_a_kernel_with_an_nvidia_module\necho "reboot: ${REBOOT_REASONS[*]}"\n'
    moved = ok(host.bash(NOUVEAU, program, params))
    assert f"is built for driver {data.DRIVER}, whose userspace it no longer offers" in moved
    assert f"reboot: kernel {data.KERNEL} -> {data.NEWER_KERNEL}" in moved, moved
    installed = host.installed()
    for part in ("image", "modules", "headers"):
        assert installed[f"linux-{part}-{data.NEWER_KERNEL}"] == data.kernel_version(
            data.NEWER_KERNEL
        ), part
    host.kernel = data.NEWER_KERNEL  # the host rebooted into it
    ok(install_driver(host, "g6.xlarge"))
    installed = host.installed()
    module = f"linux-modules-nvidia-580-server-open-{data.NEWER_KERNEL}"
    assert installed[module] == data.kernel_version(data.NEWER_KERNEL)
    point = data.ubuntu_version(data.POINT_RELEASE, host.release)
    assert installed["nvidia-utils-580-server"] == point


# ---- the sandbox's archive agrees with this one ----------------------------------------------


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("day", ["today", "next_month"])
def test_the_sandbox_archive_offers_what_the_real_one_does(tmp_path, release, day):
    """tests/helpers/archive.py (what the apt stubs serve) and archive_packages.py (what real
    apt is given) offer the same versions of every package the sandbox's archive models."""
    sb = Sandbox(tmp_path)
    getattr(archive.Archive, day)(sb, release)
    real = getattr(data, day)(release).packages()
    offered = {
        path.name: set(path.read_text().split())
        for path in (sb.state_dir / "apt.available").glob("*")
    }
    differ = {
        name: (versions, real.get(name, set()))
        for name, versions in offered.items()
        if versions != real.get(name, set())
    }
    assert not differ, f"sandbox archive vs real archive (name: (sandbox, real)): {differ}"

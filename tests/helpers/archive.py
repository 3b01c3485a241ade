"""A GPU host on AWS and the package archives its steps install from, for the script sandbox
(tests/sandbox.py): Ubuntu's archive (per-kernel signed NVIDIA modules, the driver's userspace,
kernels), Docker's containerd.io repository, NVIDIA's CUDA and container toolkit repositories and
pkgs.k8s.io, in the shapes the stubs read (tests/stubs/apt-get, apt-cache).

`Archive.today()` is the archive the pins were chosen against; `Archive.next_month()` the same
archive after it moved on as Ubuntu's does: a new containerd, a driver point release, a newer
kernel whose module is built for it (tests/test_archive_drift.py); `after_a_driver_update()` the
archive a new node on an older image meets (tests/test_kernel_before_driver.py). The EFA
installer as AWS serves it, signed, is here too.

Where the names, versions and dependencies come from: Ubuntu's driver packages and their
bounds on nvidia-kernel-common, Canonical's nvidia-graphics-drivers 580-server
(debian/templates/control.in, debian/rules `debian_version`, debian/changelog for the uploads
580.95.05-0ubuntu0.24.04.2 and 580.105.08); the per-kernel module packages, versioned like their
kernel and depending on nvidia-kernel-common "(<= X-1), (>= X)", linux-restricted-modules as
gpu-driver-container's ubuntu24.04/precompiled/nvidia-driver installs them; the fabric packages'
names by branch, the same script; pkgs.k8s.io's packages, kubernetes/release
cmd/krel/templates/latest (cri-tools released per minor); the toolkit's versions, NVIDIA's
CHANGELOG.md; python3-tomli, infiniband-diags and libibumad3, packages.ubuntu.com.
Versions and version formats come from tests/helpers/archive_packages.py, the package data
the real-apt tests build real repositories from (tests/test_real_apt.py checks both offer the
same versions).
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from dataclasses import dataclass

from components.catalog import CATALOG
from components.hosts import pins
from tests.helpers import archive_packages as data
from tests.helpers.archive_packages import (
    BRANCH,
    CONTAINERD_IO,
    CONTAINERD_IO_NEXT,
    DRIVER,
    KERNEL,  # the uname stub's default: the AMI's kernel
    KUBE_NEXT,
    KUBE_VERSIONS,
    NEWER_KERNEL,
    POINT_RELEASE,
    TOOLKIT_NEXT,
    TOOLKIT_PACKAGES,
    TOOLKIT_VERSIONS,
)
from tests.sandbox import STUBS_DIR, Sandbox

# Ubuntu's driver packages besides the headless metapackage (one per module type).
USERSPACE = ("nvidia-kernel-common", "nvidia-utils", "libnvidia-decode", "libnvidia-encode")
# pkgs.k8s.io's core:/stable:/v<minor> repository: cri-tools is released per minor beside the
# kubelet (v1.35.0 there as 1.35.0-1.1; one glob pins all four).
KUBE_PACKAGES = ("kubelet", "kubeadm", "kubectl", "cri-tools")

# Ubuntu 22.04's python3 is 3.10.12 (jammy-updates python3.10), without tomllib (3.11+).
PYTHON3_WITHOUT_TOMLLIB = {"22.04"}

# The sources lists the steps write, by what a package came from (the apt-get stub installs a
# package of a list only after an `apt-get update` read that list).
DOCKER_LIST = "/etc/apt/sources.list.d/docker.list"
CUDA_LIST = "/etc/apt/sources.list.d/cuda.list"
TOOLKIT_LIST = "/etc/apt/sources.list.d/nvidia-container-toolkit.list"
KUBERNETES_LIST = "/etc/apt/sources.list.d/kubernetes.list"
SOURCES = {
    DOCKER_LIST: "Docker (download.docker.com)",
    CUDA_LIST: "NVIDIA CUDA repository",
    TOOLKIT_LIST: "NVIDIA container toolkit repository",
    KUBERNETES_LIST: "pkgs.k8s.io",
}
UBUNTU = "Ubuntu archive"


def os_release(release: str) -> str:
    codename = pins.UBUNTU_CODENAMES[release]
    return (
        f'NAME="Ubuntu"\nVERSION_ID="{release}"\nID=ubuntu\nID_LIKE=debian\n'
        f"VERSION_CODENAME={codename}\n"
    )


def ubuntu_version(upstream: str, release: str, revision: int | None = None) -> str:
    """An upload of NVIDIA's driver to Ubuntu's archive: 580.95.05-0ubuntu0.24.04.2 (without a
    revision, the upload the archive of `today`/`next_month` offers)."""
    return data.ubuntu_version(upstream, release, revision)


def cuda_version(upstream: str, release: str) -> str:
    """A package of NVIDIA's CUDA repository: 580.95.05-1, the same for every release."""
    return data.cuda_version(upstream)


@dataclass
class Archive:
    """What the archives offer one host (an Ubuntu release), written into its sandbox."""

    sb: Sandbox
    release: str = "24.04"

    # ---- the whole archive, as of a day ------------------------------------------------

    @classmethod
    def today(cls, sb: Sandbox, release: str = "24.04") -> Archive:
        """The archive the pins were chosen against: driver 580.95.05 with a signed module for
        the AMI's kernel, containerd 2.2.1 in Ubuntu's -updates and Docker's repository."""
        archive = cls(sb, release)
        archive.driver(DRIVER)
        archive.fabric(DRIVER)
        for kernel in (KERNEL,):
            archive.kernel(kernel)
            archive.modules_for(kernel, DRIVER)
        archive.ubuntu_containerd(data.UBUNTU_CONTAINERD["today"])
        archive.containerd_io(*CONTAINERD_IO)
        archive.toolkit()
        archive.kubernetes()
        archive.python3_tomli()
        archive.infiniband_tools()
        return archive

    @classmethod
    def next_month(cls, sb: Sandbox, release: str = "24.04") -> Archive:
        """The same archive a month on, as Ubuntu's moves (each pocket keeps only its newest
        version): containerd 2.2.2 replaced 2.2.1 in -updates (Docker's repository adds it and
        keeps 2.2.1), driver point release 580.105.08 replaced 580.95.05, a newer kernel
        arrived with its module built for that release, and the AMI's kernel left the pocket
        with its modules (binaries no longer built from the kernel's current source)."""
        archive = cls(sb, release)
        archive.driver(POINT_RELEASE, replace=True)
        archive.fabric(DRIVER)
        archive.fabric(POINT_RELEASE)
        archive.drop_kernel(KERNEL)
        archive.kernel(NEWER_KERNEL)
        archive.modules_for(NEWER_KERNEL, POINT_RELEASE)
        archive.ubuntu_containerd(data.UBUNTU_CONTAINERD["next_month"])
        archive.containerd_io(*CONTAINERD_IO, CONTAINERD_IO_NEXT)
        archive.toolkit(*TOOLKIT_VERSIONS, TOOLKIT_NEXT)
        archive.kubernetes(*KUBE_VERSIONS, KUBE_NEXT)
        archive.python3_tomli()
        archive.infiniband_tools()
        return archive

    @classmethod
    def after_a_driver_update(cls, sb: Sandbox, release: str = "24.04") -> Archive:
        """The archive a new node on an older image meets once Ubuntu updated the driver:
        -updates keeps only the newest version of each package name, so the userspace
        (nvidia-kernel-common, the headless metapackage, utils) is 580.105.08 only, while the
        AMI kernel's per-ABI module package, a name of its own, is still there, built for
        580.95.05 (its Depends bound nvidia-kernel-common to that version); a newer kernel's
        module is built for 580.105.08."""
        archive = cls.today(sb, release)
        archive.driver(POINT_RELEASE, replace=True)
        archive.fabric(POINT_RELEASE)
        archive.kernel(NEWER_KERNEL)
        archive.modules_for(NEWER_KERNEL, POINT_RELEASE)
        return archive

    # ---- pieces ----------------------------------------------------------------------------

    def offer(self, package: str, *versions: str, source: str | None = None) -> None:
        self.sb.apt_available(package, *versions)
        if source is not None:
            self.sb.state(f"apt.source/{package}", source)

    def driver(self, upstream: str, *, replace: bool = False, revision: int | None = None) -> None:
        """Ubuntu's upload of one driver version: kernel common, headless (both module types),
        utils and the video libraries. `replace`: the only version left (the pocket moved)."""
        version = ubuntu_version(upstream, self.release, revision)
        common = f"nvidia-kernel-common-{BRANCH}-server"
        for suffix in (f"{BRANCH}-server", f"{BRANCH}-server-open"):
            self._add(f"nvidia-headless-no-dkms-{suffix}", version, replace)
            # nvidia-graphics-drivers debian/templates/control.in: the headless metapackage
            # bounds nvidia-kernel-common to its own upstream version (#DEBIAN_VERSION#,
            # debian/rules); its exact (= ${binary:Version}) libraries are left out, as the
            # apt-get stub installs no dependency by itself.
            self.sb.state(
                f"apt.depends/nvidia-headless-no-dkms-{suffix}={version}",
                f"{common} (<= {upstream}-1), {common} (>= {upstream})",
            )
        for name in USERSPACE:
            self._add(f"{name}-{BRANCH}-server", version, replace)

    def fabric(self, upstream: str) -> None:
        """NVIDIA's CUDA repository, which keeps every version: from branch 580 the unsuffixed
        fabric manager, NSCQ and NVSDM, and nvlsm (versioned on its own)."""
        version = cuda_version(upstream, self.release)
        for name in ("nvidia-fabricmanager", "libnvidia-nscq", "libnvsdm"):
            self._add(name, version, False)
            self.sb.state(f"apt.source/{name}", CUDA_LIST)
        self.offer("nvlsm", data.NVLSM_VERSION, source=CUDA_LIST)

    def infiniband_tools(self) -> None:
        """rdma-core's InfiniBand tools in Ubuntu's archive (packages.ubuntu.com: jammy 39.0-1;
        noble 50.0-2build2, infiniband-diags in universe, libibumad3 in main)."""
        for name in ("infiniband-diags", "libibumad3"):
            self.offer(name, data.base_version(name, self.release))

    def kernel(self, kernel: str) -> None:
        """A kernel of the -aws flavour: image, modules, modules-extra, headers."""
        for part in ("image", "modules", "modules-extra", "headers"):
            self.offer(f"linux-{part}-{kernel}", data.kernel_version(kernel))

    def modules_for(self, kernel: str, built_for: str, *, rebuild: bool = False) -> None:
        """The signed module packages of both types for one kernel, as linux-restricted-modules
        builds them: versioned like the kernel, depending on nvidia-kernel-common of exactly the
        driver they were built with. `rebuild`: a respin for a new driver (a new version)."""
        version = data.kernel_version(kernel, respin=1 if rebuild else 0)
        common = f"nvidia-kernel-common-{BRANCH}-server"
        flavours = (f"{BRANCH}-server", f"{BRANCH}-server-open")
        for suffix, other in zip(flavours, reversed(flavours), strict=True):
            package = f"linux-modules-nvidia-{suffix}-{kernel}"
            self.offer(package, version)
            depends = (
                f"linux-image-{kernel} | linux-image-unsigned-{kernel}, "
                f"{common} (<= {built_for}-1), {common} (>= {built_for})"
            )
            # Per version (an installed build keeps its own) and for the newest.
            self.sb.state(f"apt.depends/{package}={version}", depends)
            self.sb.state(f"apt.depends/{package}", depends)
            # The two module types of one kernel ship the same files: one replaces the other.
            self.sb.state(f"apt.conflicts/{package}", f"linux-modules-nvidia-{other}-{kernel}")
            self.sb.state(
                f"apt.conflicts/nvidia-headless-no-dkms-{suffix}",
                f"nvidia-headless-no-dkms-{other}",
            )

    def drop_kernel(self, kernel: str) -> None:
        """A kernel and its signed modules leave the archive."""
        names = [f"linux-{part}-{kernel}" for part in ("image", "modules", "modules-extra")]
        names += [f"linux-modules-nvidia-{BRANCH}-server{o}-{kernel}" for o in ("", "-open")]
        names.append(f"linux-headers-{kernel}")
        for name in names:
            self.sb.apt_available(name)

    def ubuntu_containerd(self, version: str) -> None:
        self.offer("containerd", version.format(release=self.release))

    def containerd_io(self, *upstream_revisions: str) -> None:
        codename = pins.UBUNTU_CODENAMES[self.release]
        versions = [f"{v}~ubuntu.{self.release}~{codename}" for v in upstream_revisions]
        self.offer("containerd.io", *versions, source=DOCKER_LIST)
        self.sb.state("apt.conflicts/containerd.io", "containerd runc")

    def toolkit(self, *versions: str) -> None:
        for package in TOOLKIT_PACKAGES:
            self.offer(package, *(versions or TOOLKIT_VERSIONS), source=TOOLKIT_LIST)

    def kubernetes(self, *versions: str) -> None:
        versions = versions or KUBE_VERSIONS
        minors = sorted({v.rsplit(".", 2)[0] for v in versions})
        for package in KUBE_PACKAGES:
            if package == "cri-tools":  # its own releases: v1.35.0 for every 1.35 patch
                offered = [
                    p.version
                    for minor in minors
                    for p in data.kubernetes_support(minor)
                    if p.name == package
                ]
                self.offer(package, *offered, source=KUBERNETES_LIST)
            else:
                self.offer(package, *versions, source=KUBERNETES_LIST)

    def python3_tomli(self) -> None:
        """The TOML parser for Python < 3.11, universe: 1.2.2-2 on jammy, 2.0.1-2 on noble
        (packages.ubuntu.com/jammy/python3-tomli, /noble/python3-tomli)."""
        self.offer("python3-tomli", data.base_version("python3-tomli", self.release))

    def _add(self, package: str, version: str, replace: bool) -> None:
        """Add a version (oldest first), or make it the only one."""
        have = [] if replace else (self.sb.state(f"apt.available/{package}") or "").split()
        self.sb.apt_available(package, *dict.fromkeys([*have, version]))


def gpu_host(sb: Sandbox, release: str = "24.04", gpus: int = 8) -> Sandbox:
    """A fresh Ubuntu GPU host on AWS: the AMI's kernel, nouveau loaded, an fstab."""
    sb.write("/etc/os-release", os_release(release))
    sb.write("/etc/fstab", "LABEL=cloudimg-rootfs\t/\text4\tdiscard,errors=remount-ro\t0 1\n")
    sb.state("modules", "nouveau\n")
    sb.state("nvidia-smi.gpus", gpus)
    if release in PYTHON3_WITHOUT_TOMLLIB:
        sb.state("python3.no-tomllib", "yes")
    for part in ("image", "modules", "headers"):
        sb.state(f"dpkg/linux-{part}-{KERNEL}", f"{KERNEL.rsplit('-', 1)[0]}.23")
    return sb


def installed(sb: Sandbox) -> dict[str, str]:
    """Every package the apt-get stub installed: name -> version."""
    root = sb.state_dir / "dpkg"
    return {path.name: path.read_text() for path in sorted(root.glob("*"))} if root.is_dir() else {}


def source_of(sb: Sandbox, package: str) -> str:
    """Where a package comes from, by the sources list the archive serves it through."""
    return SOURCES.get(sb.state(f"apt.source/{package}") or "", UBUNTU)


# ---- the EFA installer, as efa-installer.amazonaws.com serves it ---------------------------

EFA_KEY_FINGERPRINT = "4E9091BCBB97A96B26B15E59A05480B1DD2D3CCC"  # AWS's, as the stubs know it


def efa_installer_archive(version: str, driver_version: str) -> bytes:
    """aws-efa-installer/efa_installer.sh as AWS packs it, tests/stubs/_efa_installer.sh in it."""
    script = (STUBS_DIR / "_efa_installer.sh").read_text()
    script = script.replace(
        ': "${EFA_STUB_VERSION:?',
        f"EFA_STUB_VERSION={version}\nEFA_STUB_DRIVER_VERSION={driver_version}\n"
        ': "${EFA_STUB_VERSION:?',
        1,
    )
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        data = script.encode()
        info = tarfile.TarInfo("aws-efa-installer/efa_installer.sh")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def stub_signature(data: bytes, fingerprint: str = EFA_KEY_FINGERPRINT) -> str:
    """A detached signature of `data` by the key with `fingerprint`, as the gpgv stub reads it."""
    return f"stub signature {hashlib.sha256(data).hexdigest()} {fingerprint}\n"


def serve_efa_installer(
    sb: Sandbox,
    version: str = pins.EFA_INSTALLER_VERSION,
    driver_version: str = pins.EFA_DRIVER_VERSION,
    signature: str | None = None,
) -> bytes:
    """The installer archive and its signature (by AWS's key unless `signature` is given) on
    the curl stub; returns the archive."""
    archive = efa_installer_archive(version, driver_version)
    name = f"aws-efa-installer-{version}.tar.gz"
    (sb.state_dir / f"curl.body.{name}").write_bytes(archive)
    sb.state(f"curl.body.{name}.sig", signature or stub_signature(archive))
    return archive


# ---- a node's install steps, as the program sends them ------------------------------------


def install_steps(instance_type: str, release: str, minor: str = "1.35") -> list[tuple[str, dict]]:
    """The install steps of a pool's node with the parameters the program renders for them
    (components/gpu_node.py install_steps, without the login user's keys)."""
    gpu = CATALOG[instance_type]
    modules = gpu.default_kernel_modules
    fast = {"RETRY_BASE_SECONDS": "0.01"}
    return [
        ("wait-ready.sh", {"KERNEL_WITH_DRIVER": "true", **fast}),
        ("disable-nouveau.sh", {"DRIVER_BRANCH": "580", "KERNEL_MODULES": modules}),
        ("install-driver.sh", {**pins.driver_params(gpu, release, "580", modules), **fast}),
        ("install-runtime.sh", {**pins.runtime_params(release, minor, with_toolkit=True), **fast}),
        (
            "install-kube-tools.sh",
            {"KUBERNETES_MINOR": minor, "SANDBOX_IMAGE": pins.PAUSE_IMAGES[minor], **fast},
        ),
    ]


def reboot_if_scheduled(sb: Sandbox) -> bool:
    """A reboot a step scheduled (systemd-run): the host comes back on its newest installed
    kernel (GRUB's default), with nothing loaded (nouveau is blocklisted by then)."""
    if sb.state("systemd-run.scheduled") is None:
        return False
    (sb.state_dir / "systemd-run.scheduled").unlink()
    kernels = [name.removeprefix("linux-image-") for name in installed(sb)]
    kernels = [k for k in kernels if k[:1].isdigit()] + [sb.state("uname.r") or KERNEL]
    sb.state("uname.r", max(kernels, key=_kernel_order))
    sb.state("modules", "")
    return True


def _kernel_order(kernel: str) -> tuple[int, ...]:
    return tuple(int(part) for part in kernel.removesuffix("-aws").replace("-", ".").split("."))


def run_install_steps(sb: Sandbox, instance_type: str, release: str) -> list:
    """Every install step in chain order, each after the reboot the one before scheduled (the
    next step redials); stops at the first that fails. The results, in order."""
    results = []
    for script, params in install_steps(instance_type, release):
        result = sb.run(script, params)
        results.append(result)
        if result.returncode != 0:
            break
        reboot_if_scheduled(sb)
    return results

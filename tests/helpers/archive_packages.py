"""The package archives a GPU host installs from, as data: the real archives' package names,
versions and Depends/Provides/Conflicts, and where each piece came from (SOURCES).

Two consumers read it: tests/helpers/real_apt.py builds real apt repositories from it (dpkg-deb,
apt-ftparchive) for the real-apt tests, and tests/helpers/archive.py (the archive the sandbox's
apt stubs serve) takes its versions and version formats from it; tests/test_real_apt.py checks
the two offer the same packages at the same versions.

A snapshot (`today`, `next_month`, `module_outlives_driver`) lists what each repository offers on
one day. Ubuntu's -updates and -security pockets keep only the newest version of each package
name (Launchpad publishes one version per name and pocket); NVIDIA's CUDA repository, Docker's
and NVIDIA's container toolkit repository and pkgs.k8s.io keep every version they published.
Fields a package computes at build time (`${shlibs:Depends}`, `${misc:Depends}`) are left out:
the base system (INSTALLED_BASE) satisfies them on a real host.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# ---- where each piece comes from ---------------------------------------------------------

SOURCES = {
    "ubuntu-driver": (
        "canonical/nvidia-graphics-drivers debian/control and debian/changelog, branch "
        "580-server-noble (commit 6c2e02ae: 580.95.05-0ubuntu0.24.04.2, whose userspace packages "
        "Depend on nvidia-kernel-common-580-server (= ${binary:Version}); 982f3623: "
        "580.95.05-0ubuntu0.24.04.3, 'Fix dependencies between packages (LP: #2129682)', where "
        "they Depend on the virtual nvidia-kernel-common-580-server-580.95.05 the kernel common "
        "package Provides; 82b5f671: 580.105.08-0ubuntu0.24.04.1) and 580-server-jammy (the same "
        "control at 8a9dea69, 116777d2, 36e46993, without ocl-icd-libopencl1)"
    ),
    "ubuntu-lrm": (
        "linux-restricted-modules binaries, whose control template no stored repository holds: "
        "names from NVIDIA/gpu-driver-container ubuntu24.04/precompiled/nvidia-driver "
        "`_install_driver` and local-repo.sh `download_driver_package_deps` "
        "(linux-modules-nvidia-<branch>-server[-open]-<kernel>, linux-objects-nvidia-<branch>-"
        "server-<kernel>, linux-signatures-nvidia-<kernel>); versions the kernel's own "
        "(<abi>.<upload>, +N on a respin) and linux-signatures-nvidia-<kernel> Depends "
        "linux-image-<kernel> | linux-image-unsigned-<kernel>, from captured dpkg/apt "
        "transcripts (`dpkg -l`, `apt install linux-modules-nvidia-580-6.8.0-138-generic="
        "6.8.0-138.138`, dpkg's 'linux-signatures-nvidia-5.13.0-1021-oracle depends on "
        "linux-image-5.13.0-1021-oracle | linux-image-unsigned-...'); the nvidia-kernel-common "
        "range (<= X-1), (>= X) as the driver's own headless package states it (ubuntu-driver)"
    ),
    "ubuntu-kernel": (
        "Ubuntu's -aws kernel packages (linux-image/-modules/-modules-extra/-headers-<kernel>, the "
        "flavour metapackages linux-aws, linux-image-aws, linux-headers-aws): names as "
        "amazon-eks-ami and the scripts use them; the version scheme <abi>.<upload> as "
        "captured `dpkg -l` output shows (6.8.0-1021.23 is this model's upload number)"
    ),
    "ubuntu-containerd": (
        "Ubuntu's containerd and runc in noble-updates: captured `apt list --upgradable` "
        "(containerd/noble-updates 1.7.28-0ubuntu1~24.04.1) and a captured version table "
        "(containerd 2.2.1-0ubuntu1~24.04.3, runc 1.3.4-0ubuntu1~24.04.1)"
    ),
    "cuda-repo": (
        "NVIDIA's CUDA repository (compute/cuda/repos/ubuntu2404/x86_64, ubuntu2204/x86_64): "
        "file names of captured downloads (nvidia-fabricmanager_580.95.05-1_amd64.deb, "
        "libnvidia-nscq_580.105.08-1, libnvsdm_580.126.20-1, nvlsm_2025.06.10-1 and "
        "libnvidia-compute-580_580.95.05-0ubuntu1); from branch 580 the fabric packages carry no "
        "branch suffix (gpu-driver-container ubuntu24.04/precompiled/nvidia-driver "
        "`fabricmanager_install`, `nscq_install`, `nvsdm_install`). Their Depends are in no "
        "stored source: modelled as none"
    ),
    "toolkit": (
        "NVIDIA/nvidia-container-toolkit packaging/debian/control at v1.20.0 (and v1.18.0; "
        "v1.17.8 had libnvidia-container-tools (>= @LIBNVIDIA_CONTAINER_TOOLS_VERSION@)), "
        "@VERSION@ the full apt version (packaging/debian/prepare, docker/Dockerfile.debian "
        "VERSION=${REVISION}); NVIDIA/libnvidia-container pkg/deb/control (libnvidia-container-"
        "tools: ${shlibs:Depends}, libnvidia-container1 by pkg/deb/libnvidia-container@MAJOR@."
        "symbols)"
    ),
    "containerd.io": (
        "docker/containerd-packaging debian/control (containerd.io Provides, Conflicts and "
        "Replaces containerd, runc); versions from captured installs "
        "(containerd.io_2.2.1-1~ubuntu.24.04~noble_amd64.deb)"
    ),
    "pkgs.k8s.io": (
        "kubernetes/release cmd/krel/templates/latest/metadata.yaml (kubelet >= 1.28: "
        "kubernetes-cni >= 1.2.0; kubeadm: cri-tools >= 1.30.0 for every build before commit "
        "0ffd6e1f of 2026-04-24, which ended the '>= 1.30.0' range at 1.32 so that later builds "
        "of kubeadm >= 1.32 depend on nothing) and kubelet.spec (iptables >= 1.4.21, mount, "
        "util-linux); a generated index of the v1.35 repository (kubelet 1.35.0-1.1 Depends: "
        "iptables (>= 1.4.21), kubernetes-cni (>= 1.2.0), libc6, mount, util-linux; kubeadm "
        "1.35.0-1.1 Depends: cri-tools (>= 1.30.0); kubernetes-cni 1.8.0-1.1; cri-tools "
        "1.35.0-1.1); revisions -1.1 from captured installs"
    ),
    "ubuntu-base": (
        "packages of an Ubuntu server image the ones above depend on, at their release pockets' "
        "versions (Launchpad's publishing history of noble and jammy; no stored source holds "
        "them, and what matters is only that each meets the constraints above, as "
        "iptables (>= 1.4.21) for kubelet)"
    ),
}

# ---- the versions of this model (archive.py reads them) -----------------------------------

KERNEL = "6.8.0-1021-aws"  # the AMI's kernel
NEWER_KERNEL = "6.8.0-1030-aws"
BRANCH = "580"
DRIVER = "580.95.05"
POINT_RELEASE = "580.105.08"
# The upload of each driver version `today` and `next_month` offer (ubuntu-driver changelogs);
# RECRANK: 580.95.05's later upload with the dependency fix (`recrank`).
DRIVER_REVISIONS = {DRIVER: 2, POINT_RELEASE: 1}
RECRANK = 3
NVLSM_VERSION = "2025.06.10-1"
TOOLKIT_PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)
TOOLKIT_VERSIONS = ("1.17.8-1", "1.18.0-1", "1.20.0-1")
TOOLKIT_NEXT = "1.21.0-1"
KUBE_VERSIONS = ("1.35.0-1.1", "1.35.1-1.1")
KUBE_NEXT = "1.35.2-1.1"
CONTAINERD_IO = ("2.2.0-2", "2.2.1-1")
CONTAINERD_IO_NEXT = "2.2.2-1"
UBUNTU_CONTAINERD = {
    "today": "2.2.1-0ubuntu1~{release}.3",
    "next_month": "2.2.2-0ubuntu1~{release}.1",
}
UBUNTU_RUNC = "1.3.4-0ubuntu1~{release}.1"
CODENAMES = {"24.04": "noble", "22.04": "jammy"}


def ubuntu_version(upstream: str, release: str, revision: int | None = None) -> str:
    """An upload of NVIDIA's driver to Ubuntu: 580.95.05-0ubuntu0.24.04.3."""
    return f"{upstream}-0ubuntu0.{release}.{revision or DRIVER_REVISIONS.get(upstream, 1)}"


def cuda_version(upstream: str) -> str:
    """A fabric package of NVIDIA's CUDA repository: 580.95.05-1 (cuda-repo)."""
    return f"{upstream}-1"


def kernel_version(kernel: str, respin: int = 0) -> str:
    """A kernel's packages and its signed modules: 6.8.0-1021-aws -> 6.8.0-1021.23 (+1)."""
    abi = kernel.rsplit("-", 1)[0]
    return f"{abi}.23" + (f"+{respin}" if respin else "")


def containerd_io_version(upstream_revision: str, release: str) -> str:
    return f"{upstream_revision}~ubuntu.{release}~{CODENAMES[release]}"


# ---- packages and repositories ------------------------------------------------------------


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    source: str  # a key of SOURCES
    depends: str = ""
    pre_depends: str = ""
    provides: str = ""
    conflicts: str = ""
    breaks: str = ""
    replaces: str = ""
    section: str = "misc"
    multi_arch: str = ""

    def control(self) -> str:
        """The package's DEBIAN/control, as dpkg-deb builds it."""
        fields = [
            ("Package", self.name),
            ("Version", self.version),
            ("Architecture", "amd64"),
            ("Maintainer", "gpu-cluster tests <tests@gpu-cluster.invalid>"),
            ("Multi-Arch", self.multi_arch),
            ("Pre-Depends", self.pre_depends),
            ("Depends", self.depends),
            ("Provides", self.provides),
            ("Conflicts", self.conflicts),
            ("Breaks", self.breaks),
            ("Replaces", self.replaces),
            ("Section", self.section),
            ("Priority", "optional"),
            ("Description", f"{self.name} (metadata: {self.source})"),
        ]
        return "".join(f"{k}: {v}\n" for k, v in fields if v)


@dataclass(frozen=True)
class Repository:
    """One apt source: a flat repository (suite "/") or a dists/ archive."""

    key: str
    uri: str
    suites: tuple[str, ...] = ("/",)
    components: tuple[str, ...] = ()
    origin: str = ""
    label: str = ""

    @property
    def host(self) -> str:
        return self.uri.split("://", 1)[1].split("/", 1)[0]


def ubuntu_archive(release: str) -> Repository:
    codename = CODENAMES[release]
    return Repository(
        "ubuntu",
        "http://us-west-2.ec2.archive.ubuntu.com/ubuntu/",
        (codename, f"{codename}-updates"),
        ("main", "restricted", "universe", "multiverse"),
        "Ubuntu",
        "Ubuntu",
    )


def ubuntu_security(release: str) -> Repository:
    return Repository(
        "ubuntu-security",
        "http://security.ubuntu.com/ubuntu/",
        (f"{CODENAMES[release]}-security",),
        ("main", "restricted", "universe", "multiverse"),
        "Ubuntu",
        "Ubuntu",
    )


def cuda_repository(release: str) -> Repository:
    tag = "ubuntu" + release.replace(".", "")
    url = f"https://developer.download.nvidia.com/compute/cuda/repos/{tag}/x86_64/"
    return Repository("cuda", url, origin="NVIDIA", label="NVIDIA CUDA")


def docker_repository(release: str) -> Repository:
    return Repository(
        "docker",
        "https://download.docker.com/linux/ubuntu",
        (CODENAMES[release],),
        ("stable",),
        "Docker",
        "Docker CE",
    )


TOOLKIT_REPOSITORY = Repository(
    "nvidia-container-toolkit", "https://nvidia.github.io/libnvidia-container/stable/deb/amd64/"
)


def kubernetes_repository(minor: str) -> Repository:
    return Repository("kubernetes", f"https://pkgs.k8s.io/core:/stable:/v{minor}/deb/")


# ---- Ubuntu's archive -----------------------------------------------------------------------


def driver_packages(upstream: str, release: str, revision: int | None = None) -> list[Package]:
    """The binaries of nvidia-graphics-drivers-580-server a node installs, with their relations
    as debian/control states them (ubuntu-driver): before LP #2129682's fix (580.95.05's .2
    upload) the userspace names kernel common's exact revision, after it a virtual package of
    the driver's version."""
    v = ubuntu_version(upstream, release, revision)
    b = f"{BRANCH}-server"
    common = f"nvidia-kernel-common-{b}"
    fixed = (upstream, revision or DRIVER_REVISIONS.get(upstream, 1)) != (DRIVER, 2)
    # Virtual, provided by nvidia-kernel-common from the fix on.
    exact_common = f"{common}-{upstream}" if fixed else f"{common} (= {v})"
    on_driver = f"{common} (<= {upstream}-1), {common} (>= {upstream})"

    def p(name: str, depends: str = "", **more: str) -> Package:
        return Package(name, v, "ubuntu-driver", depends=depends, **more)

    compute_depends = f"{exact_common}, ocl-icd-libopencl1" if release == "24.04" else exact_common
    packages = [
        p(
            common,
            f"nvidia-firmware-{b}-{upstream}",
            provides=f"nvidia-kernel-common, {common}-{upstream}"
            if fixed
            else "nvidia-kernel-common",
            conflicts="nvidia-kernel-common",
            replaces="nvidia-kernel-common",
        ),
        p(
            f"nvidia-firmware-{b}-{upstream}",
            breaks=f"nvidia-firmware-{BRANCH}-{upstream}",
            replaces=f"nvidia-firmware-{BRANCH}-{upstream}",
        ),
        p(
            f"libnvidia-compute-{b}",
            compute_depends,
            provides=f"libnvidia-compute, libcuda1 (= {v}), libnvidia-ml1 (= {v})",
            conflicts="libnvidia-compute",
            replaces="libnvidia-compute",
            multi_arch="same",
        ),
        p(
            f"nvidia-compute-utils-{b}",
            f"libnvidia-compute-{b}, adduser",
            provides="nvidia-compute-utils, nvidia-persistenced",
            conflicts="nvidia-compute-utils, nvidia-persistenced",
            replaces="nvidia-compute-utils, nvidia-persistenced",
        ),
        p(
            f"libnvidia-cfg1-{b}",
            exact_common,
            provides="libnvidia-cfg1-any",
            conflicts="libnvidia-cfg1-any",
            replaces="libnvidia-cfg1-any",
            multi_arch="same",
        ),
        p(
            f"nvidia-utils-{b}",
            exact_common,
            provides="nvidia-utils, nvidia-smi",
            conflicts="nvidia-utils, nvidia-smi",
            replaces="nvidia-utils, nvidia-smi",
        ),
        p(
            f"libnvidia-decode-{b}",
            f"{exact_common}, libnvidia-compute-{b} (= {v})",
            provides="libnvidia-decode",
            conflicts="libnvidia-decode",
            replaces="libnvidia-decode",
            multi_arch="same",
        ),
        p(
            f"libnvidia-encode-{b}",
            exact_common,
            provides="libnvidia-encode",
            conflicts="libnvidia-encode",
            replaces="libnvidia-encode",
            multi_arch="same",
        ),
    ]
    for flavour in (b, f"{b}-open"):
        packages.append(
            p(
                f"nvidia-kernel-source-{flavour}",
                provides="nvidia-kernel-source",
                conflicts="nvidia-kernel-source",
                replaces="nvidia-kernel-source",
                multi_arch="foreign",
            )
        )
        packages.append(
            p(
                f"nvidia-headless-no-dkms-{flavour}",
                f"{on_driver}, nvidia-kernel-source-{flavour} (= {v}), "
                f"libnvidia-compute-{b} (= {v}), nvidia-compute-utils-{b} (= {v}), "
                f"libnvidia-cfg1-{b} (= {v})",
            )
        )
    return packages


def kernel_packages(kernel: str) -> list[Package]:
    """One -aws kernel: image, modules, modules-extra, headers (ubuntu-kernel)."""
    v = kernel_version(kernel)
    image = f"linux-image-{kernel}"
    return [
        Package(image, v, "ubuntu-kernel", depends=f"linux-modules-{kernel} (= {v})"),
        Package(f"linux-modules-{kernel}", v, "ubuntu-kernel"),
        Package(
            f"linux-modules-extra-{kernel}",
            v,
            "ubuntu-kernel",
            depends=f"{image} | linux-image-unsigned-{kernel}",
        ),
        Package(f"linux-headers-{kernel}", v, "ubuntu-kernel"),
    ]


def flavour_metapackages(kernel: str) -> list[Package]:
    """linux-aws and friends, pointing at the newest kernel (ubuntu-kernel), and the flavour's
    signed-module metapackages pointing at its modules (ubuntu-lrm)."""
    abi = kernel.rsplit("-", 1)[0]
    v = abi.replace("-", ".") + ".23"  # 6.8.0.1021.23, as the flavour metapackages number
    return [
        Package("linux-image-aws", v, "ubuntu-kernel", depends=f"linux-image-{kernel}"),
        Package("linux-headers-aws", v, "ubuntu-kernel", depends=f"linux-headers-{kernel}"),
        Package(
            "linux-aws",
            v,
            "ubuntu-kernel",
            depends=f"linux-image-aws (= {v}), linux-headers-aws (= {v})",
        ),
        *(
            Package(
                f"linux-modules-nvidia-{BRANCH}-server{o}-aws",
                kernel_version(kernel),
                "ubuntu-lrm",
                depends=f"linux-modules-nvidia-{BRANCH}-server{o}-{kernel}",
            )
            for o in ("", "-open")
        ),
    ]


def module_packages(kernel: str, built_for: str, respin: int = 0) -> list[Package]:
    """The signed NVIDIA modules of both types for one kernel, built against one driver version
    (ubuntu-lrm): the proprietary ones through linux-objects and linux-signatures."""
    v = kernel_version(kernel, respin)
    common = f"nvidia-kernel-common-{BRANCH}-server"
    on_driver = f"{common} (<= {built_for}-1), {common} (>= {built_for})"
    image = f"linux-image-{kernel} | linux-image-unsigned-{kernel}"
    signatures = f"linux-signatures-nvidia-{kernel}"
    objects = f"linux-objects-nvidia-{BRANCH}-server-{kernel}"
    return [
        Package(signatures, v, "ubuntu-lrm", depends=image),
        Package(objects, v, "ubuntu-lrm", depends=f"{image}, {on_driver}"),
        Package(
            f"linux-modules-nvidia-{BRANCH}-server-{kernel}",
            v,
            "ubuntu-lrm",
            depends=f"{image}, {signatures} (= {v}), {objects} (= {v}), {on_driver}",
        ),
        Package(
            f"linux-modules-nvidia-{BRANCH}-server-open-{kernel}",
            v,
            "ubuntu-lrm",
            depends=f"{image}, {on_driver}",
        ),
    ]


def ubuntu_runtime(version: str, release: str) -> list[Package]:
    return [
        Package("containerd", version.format(release=release), "ubuntu-containerd", depends="runc"),
        Package("runc", UBUNTU_RUNC.format(release=release), "ubuntu-containerd"),
    ]


# name -> (noble's version, jammy's) in the release pocket (ubuntu-base).
BASE_VERSIONS = {
    "libc6": ("2.39-0ubuntu8", "2.35-0ubuntu3"),
    "iptables": ("1.8.10-3ubuntu2", "1.8.7-1ubuntu5"),
    "mount": ("2.39.3-9ubuntu6", "2.37.2-4ubuntu3"),
    "util-linux": ("2.39.3-9ubuntu6", "2.37.2-4ubuntu3"),
    "adduser": ("3.137ubuntu1", "3.118ubuntu5"),
    "ocl-icd-libopencl1": ("2.3.2-1build1", "2.2.14-3"),
    "infiniband-diags": ("50.0-2build2", "39.0-1"),
    "libibumad3": ("50.0-2build2", "39.0-1"),
    "python3-tomli": ("2.0.1-2", "1.2.2-2"),
}
INSTALLED_BASE = ("libc6", "iptables", "mount", "util-linux", "adduser")


def base_version(name: str, release: str) -> str:
    return BASE_VERSIONS[name][0 if release == "24.04" else 1]


def base_packages(release: str, names: tuple[str, ...] = tuple(BASE_VERSIONS)) -> list[Package]:
    """What the release pocket offers besides (ubuntu-base)."""
    return [Package(name, base_version(name, release), "ubuntu-base") for name in names]


# ---- the other repositories -------------------------------------------------------------------


def cuda_packages(upstream: str) -> list[Package]:
    """NVIDIA's CUDA repository at one driver version (cuda-repo): the fabric packages the node
    takes, and two of the driver packages it must never take (they carry Ubuntu's names
    without -server, at versions above Ubuntu's)."""
    fabric = [
        Package(name, cuda_version(upstream), "cuda-repo")
        for name in ("nvidia-fabricmanager", "libnvidia-nscq", "libnvsdm")
    ]
    others = [
        Package(f"libnvidia-compute-{BRANCH}", f"{upstream}-0ubuntu1", "cuda-repo"),
        Package(
            f"nvidia-driver-{BRANCH}-open",
            f"{upstream}-0ubuntu1",
            "cuda-repo",
            depends=f"libnvidia-compute-{BRANCH} (= {upstream}-0ubuntu1)",
        ),
    ]
    return [*fabric, *others]


def nvlsm() -> Package:
    return Package("nvlsm", NVLSM_VERSION, "cuda-repo")


def toolkit_packages(version: str) -> list[Package]:
    """One release of the NVIDIA Container Toolkit (toolkit)."""
    if version.startswith("1.17."):
        tools = f"libnvidia-container-tools (>= {version}), libnvidia-container-tools (<< 2.0.0)"
    else:
        tools = f"libnvidia-container-tools (= {version}), libnvidia-container-tools (<< 2.0.0)"
    return [
        Package(
            "nvidia-container-toolkit",
            version,
            "toolkit",
            depends=f"nvidia-container-toolkit-base (= {version}), {tools}",
            breaks="nvidia-container-runtime (<= 3.5.0-1), nvidia-container-runtime-hook",
            replaces="nvidia-container-runtime (<= 3.5.0-1), nvidia-container-runtime-hook",
        ),
        Package(
            "nvidia-container-toolkit-base",
            version,
            "toolkit",
            breaks="nvidia-container-runtime (<= 3.5.0-1), nvidia-container-runtime-hook, "
            "nvidia-container-toolkit (<= 1.10.0-1)",
            replaces="nvidia-container-runtime (<= 3.5.0-1), nvidia-container-runtime-hook",
        ),
        Package(
            "libnvidia-container-tools",
            version,
            "toolkit",
            depends=f"libnvidia-container1 (>= {version}), libc6",
        ),
        Package("libnvidia-container1", version, "toolkit", depends="libc6", multi_arch="same"),
    ]


def containerd_io(upstream_revision: str, release: str) -> Package:
    return Package(
        "containerd.io",
        containerd_io_version(upstream_revision, release),
        "containerd.io",
        provides="containerd, runc",
        conflicts="containerd, runc",
        replaces="containerd, runc",
    )


def kubernetes_packages(version: str, *, kubeadm_needs_cri_tools: bool = True) -> list[Package]:
    """kubelet, kubeadm and kubectl of one patch release (pkgs.k8s.io)."""
    return [
        Package(
            "kubelet",
            version,
            "pkgs.k8s.io",
            depends="iptables (>= 1.4.21), kubernetes-cni (>= 1.2.0), libc6, mount, util-linux",
            section="net",
        ),
        Package(
            "kubeadm",
            version,
            "pkgs.k8s.io",
            depends="cri-tools (>= 1.30.0)" if kubeadm_needs_cri_tools else "",
            section="admin",
        ),
        Package("kubectl", version, "pkgs.k8s.io", section="admin"),
    ]


def kubernetes_support(minor: str) -> list[Package]:
    cni = "1.8.0-1.1" if minor == "1.35" else "1.9.1-1.1"
    return [
        Package("kubernetes-cni", cni, "pkgs.k8s.io", section="net"),
        Package("cri-tools", f"{minor}.0-1.1", "pkgs.k8s.io", section="admin"),
    ]


# ---- snapshots -------------------------------------------------------------------------------


@dataclass
class Snapshot:
    """What every repository offers one host on one day: repository -> suite -> component ->
    packages (a flat repository has suite "/" and component "")."""

    release: str
    offers: dict[Repository, dict[tuple[str, str], list[Package]]] = field(default_factory=dict)

    def add(
        self, repository: Repository, packages: list[Package], suite: str = "/", component: str = ""
    ) -> None:
        self.offers.setdefault(repository, {}).setdefault((suite, component), []).extend(packages)

    def ubuntu(self, pocket: str, packages: list[Package], component: str = "main") -> None:
        """Into a pocket ("" = the release pocket, "updates", "security")."""
        codename = CODENAMES[self.release]
        suite = f"{codename}-{pocket}" if pocket else codename
        repository = (
            ubuntu_security(self.release) if pocket == "security" else ubuntu_archive(self.release)
        )
        self.add(repository, packages, suite, component)

    def updates(self, packages: list[Package], component: str) -> None:
        """A stable release update, published to -updates and -security alike."""
        self.ubuntu("updates", packages, component)
        self.ubuntu("security", packages, component)

    def packages(self) -> dict[str, set[str]]:
        """name -> the versions every repository offers of it."""
        found: dict[str, set[str]] = {}
        for suites in self.offers.values():
            for packages in suites.values():
                for package in packages:
                    found.setdefault(package.name, set()).add(package.version)
        return found


def _common(snapshot: Snapshot, minor: str = "1.35") -> None:
    snapshot.ubuntu("", base_packages(snapshot.release))
    snapshot.add(kubernetes_repository(minor), kubernetes_support(minor))


def today(release: str = "24.04") -> Snapshot:
    """The archive the pins were chosen against: driver 580.95.05 with a signed module for the
    AMI's kernel, containerd 2.2.1 in Ubuntu's -updates and Docker's repository."""
    s = Snapshot(release)
    _common(s)
    s.updates(driver_packages(DRIVER, release), "restricted")
    s.updates(kernel_packages(KERNEL) + flavour_metapackages(KERNEL)[:3], "main")
    s.updates(module_packages(KERNEL, DRIVER) + flavour_metapackages(KERNEL)[3:], "restricted")
    s.updates(ubuntu_runtime(UBUNTU_CONTAINERD["today"], release), "main")
    s.add(cuda_repository(release), [*cuda_packages(DRIVER), nvlsm()])
    s.add(
        docker_repository(release),
        [containerd_io(v, release) for v in CONTAINERD_IO],
        CODENAMES[release],
        "stable",
    )
    s.add(TOOLKIT_REPOSITORY, [p for v in TOOLKIT_VERSIONS for p in toolkit_packages(v)])
    s.add(kubernetes_repository("1.35"), [p for v in KUBE_VERSIONS for p in kubernetes_packages(v)])
    return s


def next_month(release: str = "24.04") -> Snapshot:
    """The same archive a month on, as each moves: driver point release 580.105.08 replaced
    580.95.05 in Ubuntu's pockets, a newer kernel arrived with its module built for it and the
    AMI's kernel left with its modules, Ubuntu's containerd moved to 2.2.2; the repositories
    that keep every version added containerd.io 2.2.2, toolkit 1.21.0 and kubelet 1.35.2."""
    s = Snapshot(release)
    _common(s)
    s.updates(driver_packages(POINT_RELEASE, release), "restricted")
    s.updates(kernel_packages(NEWER_KERNEL) + flavour_metapackages(NEWER_KERNEL)[:3], "main")
    s.updates(
        module_packages(NEWER_KERNEL, POINT_RELEASE) + flavour_metapackages(NEWER_KERNEL)[3:],
        "restricted",
    )
    s.updates(ubuntu_runtime(UBUNTU_CONTAINERD["next_month"], release), "main")
    s.add(
        cuda_repository(release), [*cuda_packages(DRIVER), *cuda_packages(POINT_RELEASE), nvlsm()]
    )
    revisions = (*CONTAINERD_IO, CONTAINERD_IO_NEXT)
    s.add(
        docker_repository(release),
        [containerd_io(v, release) for v in revisions],
        CODENAMES[release],
        "stable",
    )
    s.add(
        TOOLKIT_REPOSITORY,
        [p for v in (*TOOLKIT_VERSIONS, TOOLKIT_NEXT) for p in toolkit_packages(v)],
    )
    s.add(
        kubernetes_repository("1.35"),
        [p for v in (*KUBE_VERSIONS, KUBE_NEXT) for p in kubernetes_packages(v)],
    )
    return s


def recrank(release: str = "24.04") -> Snapshot:
    """`today` after Ubuntu re-uploaded 580.95.05 with the dependency fix: .3 replaced .2 in
    both pockets (LP #2129682)."""
    s = today(release)
    for repository in (ubuntu_archive(release), ubuntu_security(release)):
        for key, packages in s.offers.get(repository, {}).items():
            if key[1] == "restricted":
                others = [p for p in packages if p.source != "ubuntu-driver"]
                s.offers[repository][key] = others
    s.updates(driver_packages(DRIVER, release, RECRANK), "restricted")
    return s


def module_outlives_driver(release: str = "24.04") -> Snapshot:
    """The driver moved on (580.105.08) while the AMI's kernel and its module built for
    580.95.05 stay: the module package has a name of its own, so the pocket keeps it beside
    the newer userspace (issue 39, finding 2)."""
    s = next_month(release)
    s.updates(kernel_packages(KERNEL), "main")
    s.updates(module_packages(KERNEL, DRIVER), "restricted")
    return s


def kubernetes_minor(
    minor: str, versions: tuple[str, ...], *, kubeadm_needs_cri_tools: bool = True
) -> tuple[Repository, list[Package]]:
    """Another minor's repository of pkgs.k8s.io (an upgrade's)."""
    packages = [
        p
        for v in versions
        for p in kubernetes_packages(v, kubeadm_needs_cri_tools=kubeadm_needs_cri_tools)
    ]
    return kubernetes_repository(minor), [*packages, *kubernetes_support(minor)]

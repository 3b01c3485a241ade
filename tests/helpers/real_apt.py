"""Real apt and dpkg (Debian's) on repositories built in the test, shaped like the real archives.

`AptHost` is one host's package state in a private root: `publish` builds the packages of an
archive snapshot (tests/helpers/archive_packages.py) with `dpkg-deb` (empty packages, real control
fields), indexes them with `apt-ftparchive` (Debian's apt-utils) into the real archives' layouts
(Ubuntu's dists/<codename>-<pocket>/<component>, Docker's dists/<codename>/stable, the flat
repositories of NVIDIA's CUDA and container toolkit repositories and pkgs.k8s.io) and signs each
Release with a key made for the session. `run` and `bash` then run Debian's own apt-get,
apt-cache, apt-mark, dpkg and dpkg-query on them:
- apt with `Dir::State`, `Dir::Cache`, `Dir::Log` and `Dir::State::status` in the root (APT_CONFIG)
  and `Dir::Bin::Methods::http(s)` on tests/helpers/apt_mirror_method.py, which serves each
  archive's real URI from the local mirror (so `Pin: origin <host>` sees the real host);
- dpkg with DPKG_ROOT (its admin directory, and the empty packages' files, in the root) and
  `--log` in the root;
- /etc/apt bind-mounted from the root in a private mount namespace (`unshare --mount`, with
  `--user --map-root-user` for a user other than root), because the scripts write
  /etc/apt/sources.list.d, keyrings and preferences.d by absolute path; `Dir::Etc` names it.
Nothing touches the machine's /usr, /etc/apt or /var/lib/dpkg (tests/test_real_apt.py checks the
machine's dpkg status and log are unchanged).

`bash` runs a host script's own functions: the script as the program renders it
(components/hosts/rendering.py), without its last line (`main "$@"`), then the test's commands.
Three seams stand in for the network, the publishers' keys and the running kernel: `download`
copies the URL's file from the mirror (the signing keys are served there, so gpg --dearmor and
the keyrings are real), the fingerprints the scripts pin for each publisher (PINNED_KEYS) are
the session key's, which signs every repository here, and `uname -r` answers the host's kernel.

Debian 12's apt is 2.6; Ubuntu's are 2.4 (jammy) and 2.7 (noble). The parts the scripts rely on
(version globs in `pkg=version`, holds, apt_preferences(5) pins, the resolver refusing an exact
`(= version)` it cannot reach) did not change between them; a test that relies on anything else
says so.
"""

from __future__ import annotations

import atexit
import gzip
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from components.hosts.rendering import render_script
from tests.helpers import archive_packages as data
from tests.helpers.tools import require_tool

METHOD = Path(__file__).with_name("apt_mirror_method.py")
# apt-ftparchive (apt-utils); gpg with the gpg-agent its key generation and signing run
# through (gnupg: Debian 12's `gpg` package only recommends it). dpkg-deb, apt and gpgv come
# with the base system.
INSTALL = "apt-get install apt-utils gnupg"
MAIN_CALL = 'main "$@"\n'


def require_real_apt() -> None:
    """Debian's apt tools this module runs; `missing` (skip, or fail in CI) without them."""
    for command in ("apt-get", "apt-ftparchive", "dpkg-deb", "gpg", "gpgv", "unshare"):
        require_tool(command, INSTALL)


@cache
def _work_dir() -> Path:
    """One directory per test session for what every test shares (built .debs, the key),
    removed when the session ends."""
    path = Path(tempfile.mkdtemp(prefix="real-apt-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


@cache
def method_command() -> Path:
    """apt runs a method as an executable: apt_mirror_method.py under this Python."""
    wrapper = _work_dir() / "mirror-method"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {METHOD} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


@dataclass(frozen=True)
class SigningKey:
    home: Path  # GNUPGHOME holding the secret key
    fingerprint: str
    armored: bytes  # the public key as a publisher serves it
    keyring: Path  # dearmored, for signed-by=


@cache
def signing_key() -> SigningKey:
    """An ed25519 key made once per session: every repository's Release is signed with it."""
    home = _work_dir() / "gnupg"
    home.mkdir(mode=0o700)
    env = {**os.environ, "GNUPGHOME": str(home)}
    gpg = ["gpg", "--batch", "--quiet"]
    subprocess.run(
        [*gpg, "--passphrase", "", "--quick-gen-key", "gpu-cluster tests", "ed25519", "sign", "0"],
        env=env,
        check=True,
        capture_output=True,
    )
    listing = subprocess.run(
        [*gpg, "--with-colons", "--list-keys"], env=env, check=True, capture_output=True, text=True
    ).stdout
    fingerprint = next(
        line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr")
    )
    armored = subprocess.run(
        [*gpg, "--armor", "--export", fingerprint], env=env, check=True, capture_output=True
    ).stdout
    keyring = _work_dir() / "archive-keyring.gpg"
    subprocess.run([*gpg, "--export", "--output", str(keyring), fingerprint], env=env, check=True)
    return SigningKey(home, fingerprint, armored, keyring)


def build_deb(package: data.Package) -> Path:
    """The package built by dpkg-deb (no files, its control fields), once per session."""
    control = package.control()
    digest = hashlib.sha256(control.encode()).hexdigest()[:16]
    deb = _work_dir() / "debs" / f"{package.name}_{package.version}_{digest}.deb"
    if not deb.is_file():
        tree = _work_dir() / "trees" / digest
        (tree / "DEBIAN").mkdir(parents=True, exist_ok=True)
        (tree / "DEBIAN" / "control").write_text(control)
        deb.parent.mkdir(exist_ok=True)
        subprocess.run(
            ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree), str(deb)],
            check=True,
            capture_output=True,
        )
    return deb


def _ftparchive(args: list[str], cwd: Path, out: Path) -> None:
    result = subprocess.run(
        ["apt-ftparchive", *args], cwd=cwd, check=True, capture_output=True, text=True
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(result.stdout)
    if out.name == "Packages":
        out.with_suffix(".gz").write_bytes(gzip.compress(result.stdout.encode(), mtime=0))


def _sign(release: Path) -> None:
    key = signing_key()
    env = {**os.environ, "GNUPGHOME": str(key.home)}
    for args, out in (("--clearsign", "InRelease"), ("--detach-sign", "Release.gpg")):
        subprocess.run(
            ["gpg", "--batch", "--yes", "--armor", args, "-o", str(release.parent / out), release],
            env=env,
            check=True,
            capture_output=True,
        )


def _release_options(repository: data.Repository, suite: str, components: list[str]) -> list[str]:
    fields = {
        "Origin": repository.origin,
        "Label": repository.label,
        "Suite": suite if suite != "/" else "",
        "Codename": suite.split("-")[0] if suite != "/" else "",
        "Architectures": "amd64",
        "Components": " ".join(components),
    }
    return [f"-oAPT::FTPArchive::Release::{k}={v}" for k, v in fields.items() if v]


# Where the scripts download the publishers' signing keys (the key files on the mirror).
KEY_PATHS = (
    "pkgs.k8s.io/core:/stable:/v{minor}/deb/Release.key",
    "nvidia.github.io/libnvidia-container/gpgkey",
    "download.docker.com/linux/ubuntu/gpg",
    "developer.download.nvidia.com/compute/cuda/repos/{tag}/x86_64/3bf863cc.pub",
)


# The publishers' key fingerprints the scripts pin (lib/common.sh, install-runtime.sh,
# install-driver.sh): add_signed_apt_repo refuses a key of another fingerprint.
PINNED_KEYS = (
    "DOCKER_KEY_FINGERPRINT",
    "NVIDIA_KEY_FINGERPRINT",
    "KUBE_KEY_FINGERPRINT",
    "CUDA_KEY_FINGERPRINT",
)


def publish(mirror: Path, snapshot: data.Snapshot) -> None:
    """Write every repository of the snapshot under mirror/<host>/<path>, replacing what was
    there, indexed and signed; the publishers' keys beside them."""
    if mirror.exists():
        shutil.rmtree(mirror)
    for repository, suites in snapshot.offers.items():
        base = mirror / repository.uri.split("://", 1)[1].rstrip("/")
        if repository.suites == ("/",):
            base.mkdir(parents=True, exist_ok=True)
            for package in suites[("/", "")]:
                shutil.copy(
                    build_deb(package), base / f"{package.name}_{package.version}_amd64.deb"
                )
            _ftparchive(["packages", "."], base, base / "Packages")
            _ftparchive(["release", "."], base, base / "Release")
            _sign(base / "Release")
            continue
        for suite in sorted({s for s, _ in suites}):
            components = list(repository.components)
            for component in components:
                pool = base / "pool" / suite / component
                pool.mkdir(parents=True, exist_ok=True)
                for package in suites.get((suite, component), []):
                    shutil.copy(
                        build_deb(package), pool / f"{package.name}_{package.version}_amd64.deb"
                    )
                index = base / "dists" / suite / component / "binary-amd64" / "Packages"
                _ftparchive(["packages", f"pool/{suite}/{component}"], base, index)
            dists = base / "dists" / suite
            _ftparchive(
                [*_release_options(repository, suite, components), "release", "."],
                dists,
                dists / "Release",
            )
            _sign(dists / "Release")
    tag = "ubuntu" + snapshot.release.replace(".", "")
    for minor in ("1.35", "1.36"):
        for path in KEY_PATHS:
            target = mirror / path.format(minor=minor, tag=tag)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(signing_key().armored)


class AptHost:
    """One Ubuntu host's apt and dpkg state, in `root`, fed by `mirror`."""

    def __init__(self, tmp: Path, release: str = "24.04", kernel: str = data.KERNEL) -> None:
        self.release = release
        self.kernel = kernel
        self.root = tmp / "root"
        self.mirror = tmp / "mirror"
        self.gnupg = tmp / "gnupg"
        for d in (
            "etc/apt/sources.list.d",
            "etc/apt/preferences.d",
            "etc/apt/apt.conf.d",
            "etc/apt/keyrings",
            "var/lib/apt/lists/partial",
            "var/cache/apt/archives/partial",
            "var/lib/dpkg/info",
            "var/lib/dpkg/updates",
            "var/log/apt",
            "tmp",
        ):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self.gnupg.mkdir(mode=0o700)
        (self.root / "var/lib/dpkg/available").touch()
        self.apt_config = tmp / "apt.conf"
        self.apt_config.write_text(self._apt_conf())
        self._write_ubuntu_sources()
        installed = [
            *data.base_packages(release, data.INSTALLED_BASE),
            *(p for p in data.kernel_packages(kernel) if "modules-extra" not in p.name),
            *data.flavour_metapackages(kernel)[:3],
        ]
        self._write_status(installed)

    # ---- the root ------------------------------------------------------------------------

    def _apt_conf(self) -> str:
        r = self.root
        lines = [
            f'Dir::Etc "{r}/etc/apt/";',
            f'Dir::State "{r}/var/lib/apt/";',
            f'Dir::State::status "{r}/var/lib/dpkg/status";',
            f'Dir::Cache "{r}/var/cache/apt/";',
            f'Dir::Log "{r}/var/log/apt/";',
            f'Dir::Bin::Methods::http "{method_command()}";',
            f'Dir::Bin::Methods::https "{method_command()}";',
            f'DPkg::Options {{ "--log={r}/var/log/dpkg.log"; }};',
            'APT::Architecture "amd64";',
            'APT::Architectures { "amd64"; };',
            # Ubuntu's images install no recommends the scripts do not ask for either.
            'APT::Install-Recommends "false";',
            # Downloads run as root: the root's directories are not the _apt user's.
            'APT::Sandbox::User "root";',
        ]
        return "".join(f"{line}\n" for line in lines)

    def _write_ubuntu_sources(self) -> None:
        """The Ubuntu sources an AWS image ships: deb822 ubuntu.sources on noble, a one-line
        sources.list on jammy (cloud-init's apt templates)."""
        key = signing_key().keyring
        archive, security = data.ubuntu_archive(self.release), data.ubuntu_security(self.release)
        components = " ".join(archive.components)
        etc = self.root / "etc/apt"
        if self.release == "24.04":
            stanzas = [
                f"Types: deb\nURIs: {repo.uri}\nSuites: {' '.join(repo.suites)}\n"
                f"Components: {components}\nSigned-By: {key}\n"
                for repo in (archive, security)
            ]
            (etc / "sources.list.d/ubuntu.sources").write_text("\n".join(stanzas))
        else:
            lines = [
                f"deb [signed-by={key}] {repo.uri} {suite} {components}\n"
                for repo in (archive, security)
                for suite in repo.suites
            ]
            (etc / "sources.list").write_text("".join(lines))

    def _write_status(self, packages: list[data.Package]) -> None:
        """dpkg's status database with these packages installed (as an image has them)."""
        stanzas = []
        for package in packages:
            control = package.control().replace(
                f"Version: {package.version}\n",
                f"Status: install ok installed\nVersion: {package.version}\n",
            )
            stanzas.append(control)
            (self.root / f"var/lib/dpkg/info/{package.name}.list").write_text("")
        (self.root / "var/lib/dpkg/status").write_text("\n".join(stanzas))

    def publish(self, snapshot: data.Snapshot) -> None:
        assert snapshot.release == self.release, (snapshot.release, self.release)
        publish(self.mirror, snapshot)

    # ---- running the real tools -------------------------------------------------------------

    def _environment(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "APT_CONFIG": str(self.apt_config),
            "DPKG_ROOT": str(self.root),
            "MIRROR_ROOT": str(self.mirror),
            "GNUPGHOME": str(self.gnupg),
            # What the scripts owe (lib/common.sh `owe`) stays in this root, not the machine's.
            "OWED_DIR": str(self.root / "var/lib/gpu-cluster/owed"),
            "TMPDIR": str(self.root / "tmp"),
            "HOME": str(self.root / "tmp"),
            "LANG": "C.UTF-8",
            "DEBIAN_FRONTEND": "noninteractive",
            **(extra or {}),
        }

    def run(
        self, *argv: str, stdin: str = "", env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        """argv with /etc/apt bound to the root's, in a private mount namespace."""
        user = () if os.geteuid() == 0 else ("--user", "--map-root-user")
        bind = f'mount --bind {self.root}/etc/apt /etc/apt && exec "$@"'
        namespace = ("bash", "-c", bind, "real-apt")
        return subprocess.run(
            ["unshare", *user, "--mount", "--propagation", "private", "--fork", *namespace, *argv],
            input=stdin,
            env=self._environment(env),
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    def apt_get(self, *args: str) -> subprocess.CompletedProcess:
        return self.run("apt-get", "-q", *args)

    def update(self) -> None:
        result = self.apt_get("update")
        assert result.returncode == 0 and "W:" not in result.stderr, result.stdout + result.stderr

    def bash(
        self, script: str, commands: str, params: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        """`commands` after the functions of `script` (as the program renders it with `params`),
        with the seams for the network and the kernel (module docstring)."""
        program = render_script(script, params or {})
        assert program.endswith(MAIN_CALL), f"{script} does not end with its main call"
        keys = "".join(f"{name}={signing_key().fingerprint}\n" for name in PINNED_KEYS)
        seams = f"""
download() {{ cp -- "${{MIRROR_ROOT}}/${{1#*://}}" "$2"; }}
{keys}uname() {{ if [[ "${{1:-}}" == -r ]]; then echo {self.kernel}; else command uname "$@"; fi; }}
init_script test
make_temp_dir
"""
        return self.run("bash", "-s", stdin=program[: -len(MAIN_CALL)] + seams + commands)

    # ---- what the host has ---------------------------------------------------------------------

    def installed(self) -> dict[str, str]:
        """Installed packages (dpkg-query): name -> version."""
        out = self.run("dpkg-query", "-W", "-f", "${db:Status-Status}\t${Package}\t${Version}\n")
        rows = [line.split("\t") for line in out.stdout.splitlines()]
        return {name: version for status, name, version in rows if status == "installed"}

    def held(self) -> set[str]:
        return set(self.run("apt-mark", "showhold").stdout.split())

    def candidate(self, package: str) -> str:
        """apt-cache policy's Candidate: line (the version apt would install)."""
        policy = self.run("apt-cache", "policy", package).stdout
        for line in policy.splitlines():
            if line.strip().startswith("Candidate:"):
                return line.split(":", 1)[1].strip()
        raise AssertionError(f"no Candidate in apt-cache policy {package}:\n{policy}")

    def priorities(self, package: str) -> dict[str, int]:
        """apt-cache policy's version table: version -> pin priority."""
        table = self.run("apt-cache", "policy", package).stdout.split("Version table:", 1)[-1]
        # " *** 580.95.05-1 600" (installed) or "     580.105.08-1 -1"; sources indent deeper.
        rows = (re.match(r"^ (?:\*\*\*|   ) (\S+) (-?\d+)$", line) for line in table.splitlines())
        return {m.group(1): int(m.group(2)) for m in rows if m}


def machine_dpkg_fingerprint() -> str:
    """The machine's own dpkg database and log, hashed: tests check they stay as they were."""
    digest = hashlib.sha256()
    for path in ("/var/lib/dpkg/status", "/var/log/dpkg.log"):
        if os.path.isfile(path):
            digest.update(Path(path).read_bytes())
    return digest.hexdigest()

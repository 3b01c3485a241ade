"""Run rendered node scripts for real, with bash, without touching the machine.

Each run happens in a private mount namespace with overlay mounts over /etc, /var, /opt and
/usr/local: the real directory below, a per-sandbox upper directory above, so scripts write their
real files and the tests read them from the upper directories. As root that is
`unshare --mount --fork`; as any other user an unprivileged user namespace adds `--user
--map-root-user` (the user is root inside it, and Linux 5.11+ lets it mount overlayfs), so the
tests run the same way on a developer's machine. There the real root's files and directories
belong to no user of the namespace and cannot be written, so each upper directory starts with
the real directory's tree of subdirectories (an upper directory's owner is the merged one's), and
a test puts any existing host file a script edits on the sandboxed host first (`Sandbox.write`),
as the tests do for /etc/fstab and /etc/os-release. Nor can a file belong to another user there:
the install and chown stubs leave the owner out, and a test checks the owner the script asked
for in the recorded call.

When the kernel refuses (user namespaces disabled, no overlayfs), every sandbox test fails with
the kernel's reason, unless the run opts out with GPU_CLUSTER_SANDBOX=skip; the summary then
says how many script tests did not run (tests/conftest.py).
Commands with outside effects (apt-get, systemctl, modprobe, nvidia-smi, kubeadm, curl, ...)
are the stubs in tests/stubs/, first on PATH. They record their argv and simulate state in a
state directory the tests control with `Sandbox.state(...)`.

Runs in one Sandbox share the upper directories and the state: a second run sees the first
run's files and installed packages, like a second `pulumi up` on the same host.

A step as the program registers it runs end to end too (`Sandbox.run_step`): its stdin (its
parameters, then lib/run-by-digest.sh and the run of its program by digest) as `sudo bash -s`
from the login user (`add_login_user`: an /etc/passwd entry with a home under /var), with the
host's copy of its scripts (`put_bundle`: what `<host>-scripts` copies, the role's directory
that components/hosts/bundle.py writes, into ~/.gpu-cluster/<role>/). A delete hook, a
`sudo ... bash -s` heredoc, runs with `run_command` (the sudo stub runs it as root, with
SUDO_USER set to the login user).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

from components.hosts import bundle
from components.hosts.rendering import render_script

STUBS_DIR = Path(__file__).resolve().parent / "stubs"
OVERLAID_DIRS = ("/etc", "/var", "/opt", "/usr/local")
# Without root, how deep each upper directory copies the real one's subdirectories: deep enough
# for every existing directory a script writes into (/etc/apt/keyrings, /etc/systemd/system,
# /var/lib/kubelet, /opt/cni/bin), shallow where a machine keeps big trees (/opt, /usr/local).
MIRROR_DEPTH = {"/etc": 4, "/var": 3, "/opt": 2, "/usr/local": 2}
FIELD_SEPARATOR = "\x1f"
OPT_OUT_ENV = "GPU_CLUSTER_SANDBOX"  # =skip: run without the script tests, and say so
# The login user steps run as (`sudo` sets SUDO_USER to it): its home is under an overlaid
# directory, so the copy of a host's scripts lands in the sandbox.
# The stacks' ssh.user, the login user of Ubuntu's images: the steps the program registers name
# it (wait-ready's SSH_USER).
LOGIN_USER = "ubuntu"
LOGIN_HOME = f"/var/lib/gpu-cluster-test-home/{LOGIN_USER}"
# Marks a test that runs scripts in the sandbox (tests/conftest.py fails or skips it when the
# sandbox cannot run here).
needs_sandbox = pytest.mark.sandbox


def unshare_command() -> tuple[str, ...]:
    """A private mount namespace; for a user other than root inside a new user namespace."""
    user = () if os.geteuid() == 0 else ("--user", "--map-root-user")
    return ("unshare", *user, "--mount", "--propagation", "private", "--fork")


@cache
def sandbox_problem() -> str | None:
    """Why this machine cannot run the sandbox (the kernel's own words), or None when it can:
    mounts a throwaway overlay over /etc in the namespace the sandbox uses."""
    if shutil.which("unshare") is None:
        return "`unshare` (util-linux) is not installed"
    with tempfile.TemporaryDirectory(prefix="sandbox-probe-") as tmp:
        upper, work = Path(tmp, "upper"), Path(tmp, "work")
        upper.mkdir()
        work.mkdir()
        probe = (
            f"mount -t overlay overlay -o lowerdir=/etc,upperdir={upper},workdir={work} /etc "
            "&& : > /etc/.gpu-cluster-sandbox-probe"
        )
        command = [*unshare_command(), "bash", "-c", probe]
        try:
            run = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"`{' '.join(command[:-1])}` could not run: {exc}"
        if run.returncode != 0 or not (upper / ".gpu-cluster-sandbox-probe").is_file():
            reason = (run.stderr or run.stdout).strip().splitlines()
            return (
                f"`{' '.join(command[:-2])}` with an overlay over /etc failed: "
                f"{reason[0] if reason else f'exit {run.returncode}'} (needs unprivileged user "
                "namespaces and overlayfs, Linux 5.11+, or root)"
            )
    return None


@cache
def _directories_below(lower: Path, depth: int) -> tuple[str, ...]:
    """The real subdirectories of lower down to depth (a symlink to a directory stays a link)."""
    found: list[str] = []
    for current, dirs, _files in os.walk(lower):
        relative = os.path.relpath(current, lower)
        level = 0 if relative == "." else relative.count(os.sep) + 1
        real = [d for d in dirs if not os.path.islink(os.path.join(current, d))]
        dirs[:] = real if level + 1 < depth else []
        found.extend(os.path.normpath(os.path.join(relative, d)) for d in real)
    return tuple(found)


def _mirror_directories(lower: Path, upper: Path) -> None:
    for relative in _directories_below(lower, MIRROR_DEPTH[str(lower)]):
        (upper / relative).mkdir(parents=True, exist_ok=True)


@dataclass
class RunResult:
    returncode: int
    stdout: str
    stderr: str
    calls: list[list[str]]  # argv of each stubbed command, in order, this run only
    uppers: dict[str, Path]  # overlaid dir ("/etc") -> its upper dir (files the run wrote)
    output: str = field(init=False)  # stdout + stderr, for "never printed" checks

    def __post_init__(self) -> None:
        self.output = self.stdout + self.stderr

    def called(self, *prefix: str) -> list[list[str]]:
        """The recorded calls whose argv starts with prefix, e.g. called("apt-get", "install")."""
        return [c for c in self.calls if c[: len(prefix)] == list(prefix)]

    def commands(self) -> list[str]:
        """The recorded calls as space-joined strings, for readable assertions."""
        return [" ".join(c) for c in self.calls]


class Sandbox:
    def __init__(
        self,
        root: Path,
        state_dir: Path | None = None,
        overlaid: tuple[str, ...] = OVERLAID_DIRS,
    ) -> None:
        """`state_dir` shared by two sandboxes: two hosts (or two runs on one host) that see one
        simulated cluster API, each with its own files. `overlaid`: the directories written
        into the upper dirs (as root, a host of the end-to-end tests overlays all of /usr)."""
        self.root = Path(root)
        self.overlaid = overlaid
        self.state_dir = Path(state_dir) if state_dir is not None else self.root / "state"
        self.tmp_dir = self.root / "tmp"
        self.uppers: dict[str, Path] = {}
        self._workdirs: dict[str, Path] = {}
        for d in (self.state_dir, self.tmp_dir):
            d.mkdir(parents=True, exist_ok=True)
        for overlaid in self.overlaid:
            slug = overlaid.strip("/").replace("/", "_")
            self.uppers[overlaid] = self.root / "upper" / slug
            self._workdirs[overlaid] = self.root / "work" / slug
            self.uppers[overlaid].mkdir(parents=True, exist_ok=True)
            self._workdirs[overlaid].mkdir(parents=True, exist_ok=True)
            if os.geteuid() != 0:
                _mirror_directories(Path(overlaid), self.uppers[overlaid])
        (self.state_dir / "calls.log").touch()

    # ---- stub state -------------------------------------------------------------

    def state(self, key: str, value: str | int | None = None) -> str | None:
        """Set a stub state value (when value is given) and return the current one, or None."""
        path = self.state_dir / key
        if value is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(str(value))
        return path.read_text() if path.exists() else None

    def apt_available(self, package: str, *versions: str) -> None:
        """Versions the simulated apt repository offers for a package (oldest first)."""
        self.state(f"apt.available/{package}", "".join(f"{v}\n" for v in versions))

    def installed(self, package: str) -> str | None:
        """The version of package the apt-get stub installed, or None."""
        return self.state(f"dpkg/{package}")

    def held(self) -> set[str]:
        return set((self.state("apt-mark.held") or "").split())

    def hold_apt_lock(self, seconds: float) -> None:
        """Simulate another apt (unattended-upgrades) holding the dpkg lock for `seconds` from
        the script's first apt-get call (not from now: starting the sandbox on a busy machine
        can take longer than the hold)."""
        self.state("apt.lock-seconds", f"{seconds:.3f}")

    def service_active(self, unit: str) -> bool:
        return self.state(f"systemd/{unit}.active") == "yes"

    # ---- files ----------------------------------------------------------------------

    def host_path(self, path: str) -> Path:
        """Where a host path (e.g. /etc/fstab) lives in the upper dirs."""
        for overlaid in sorted(self.overlaid, key=len, reverse=True):
            if path == overlaid or path.startswith(overlaid + "/"):
                return self.uppers[overlaid] / path[len(overlaid) :].lstrip("/")
        raise ValueError(f"{path} is not under an overlaid directory {self.overlaid}")

    def write(self, path: str, text: str, mode: int = 0o644) -> None:
        """Put a file on the sandboxed host before a run (e.g. /etc/os-release)."""
        target = self.host_path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():
            target.unlink()
        target.write_text(text)
        target.chmod(mode)

    def read(self, path: str) -> str:
        """A file the runs wrote (from the upper dirs)."""
        return self.host_path(path).read_text()

    def exists(self, path: str) -> bool:
        """Whether a run left this file (a whiteout, overlayfs' mark of a deleted file, is not)."""
        target = self.host_path(path)
        if not target.exists():
            return False
        st = target.stat()
        return not (stat.S_ISCHR(st.st_mode) and st.st_rdev == 0)

    # ---- the login user and the host's scripts ----------------------------------------

    def add_login_user(self, user: str = LOGIN_USER, home: str = LOGIN_HOME) -> str:
        """An account like the image's login user (ubuntu): an /etc/passwd and /etc/group entry
        (in place of one of that name this machine has) and its home directory. Returns the
        home."""
        entries = {
            "/etc/passwd": f"{user}:x:4300:4300::{home}:/bin/bash\n",
            "/etc/group": f"{user}:x:4300:\n",
        }
        for path, entry in entries.items():
            current = self.read(path) if self.exists(path) else Path(path).read_text("utf-8")
            others = [line for line in current.splitlines() if not line.startswith(f"{user}:")]
            self.write(path, "".join(f"{line}\n" for line in others) + entry)
        self.host_path(home).mkdir(parents=True, exist_ok=True)
        self.state("sudo.user", user)
        return home

    def put_bundle(self, role: str, home: str = LOGIN_HOME) -> Path:
        """What `<host>-scripts` copies to a host of `role`: the directory bundle.py writes
        (every program of the role, named by its digest), into ~/.gpu-cluster/<role>/. Returns
        that directory in the upper dirs."""
        from components.hosts.steps import Where, host_scripts

        source = bundle.write(bundle.Bundle(role, host_scripts(Where(role))))
        target = self.host_path(f"{home}/{bundle.REMOTE_DIR}/{role}")
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(source, target)
        return target

    def installed_program(self, digest: str) -> Path:
        """Where by_digest installed a program (/var/lib/gpu-cluster/scripts/<digest>.sh)."""
        return self.host_path(f"{bundle.INSTALLED_DIR}/{digest}.sh")

    # ---- running ----------------------------------------------------------------------

    def mount_commands(self, then: str = 'exec env -i "$@" bash -s') -> str:
        """A bash program that mounts the overlays (in a new mount namespace), then runs
        `then`."""
        lines = ["set -e"]
        for overlaid in self.overlaid:
            lines.append(
                "mount -t overlay overlay -o "
                f"lowerdir={overlaid},upperdir={self.uppers[overlaid]},"
                f"workdir={self._workdirs[overlaid]} {overlaid}"
            )
        lines.append(then)
        return "\n".join(lines)

    def run_text(
        self, program: str, timeout: float = 60, env: dict[str, str] | None = None
    ) -> RunResult:
        """Run a bash program (fed on stdin, as `sudo bash -s` does) in the sandbox; `env` on
        top of the sandbox's own (e.g. SUDO_USER, as sudo sets it)."""
        calls_log = self.state_dir / "calls.log"
        offset = calls_log.stat().st_size
        env = [
            f"PATH={STUBS_DIR}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            f"STUB_STATE={self.state_dir}",
            f"TMPDIR={self.tmp_dir}",
            "HOME=/root",
            "LANG=C.UTF-8",
            *(f"{name}={value}" for name, value in (env or {}).items()),
        ]
        proc = subprocess.run(
            [*unshare_command(), "bash", "-c", self.mount_commands(), "sandbox", *env],
            input=program,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        with calls_log.open("rb") as f:
            f.seek(offset)
            recorded = f.read().decode()
        calls = [line.split(FIELD_SEPARATOR) for line in recorded.splitlines() if line]
        return RunResult(proc.returncode, proc.stdout, proc.stderr, calls, dict(self.uppers))

    def run(
        self, script: str, params: dict[str, str] | None = None, timeout: float = 60
    ) -> RunResult:
        """Render a node script (components/hosts/scripts/<script>) with params and run it."""
        return self.run_text(render_script(script, params or {}), timeout=timeout)

    def run_step(self, stdin: str, user: str = LOGIN_USER, timeout: float = 60) -> RunResult:
        """A registered step's stdin (components/hosts/remote.py step_program) as its `create`
        runs it: `sudo bash -s` from the login user `user` (SUDO_USER)."""
        return self.run_text(stdin, timeout=timeout, env={"SUDO_USER": user})

    def run_registered(self, stdin: str, timeout: float = 60) -> RunResult:
        """A step's stdin as the program registers it, on a host that got its scripts: the login
        user and the role's bundle (the one its STEP_BUNDLE names) are put in place first, once,
        then it runs as `run_step` runs it."""
        role = re.search(r"^STEP_BUNDLE=\S+/([a-z-]+)$", stdin, re.M)
        assert role, "not a step's stdin: it names no bundle (STEP_BUNDLE=)"
        if not self.exists(f"{LOGIN_HOME}/{bundle.REMOTE_DIR}/{role.group(1)}"):
            self.add_login_user()
            self.put_bundle(role.group(1))
        return self.run_step(stdin, timeout=timeout)

    def run_command(self, command_line: str, timeout: float = 60) -> RunResult:
        """A command line as pulumi-command runs it over SSH as the login user (a stored delete
        hook: `sudo timeout ... bash -s <<'MARKER' ... MARKER`)."""
        return self.run_text(command_line + "\n", timeout=timeout)


def step_stdin(script: str, params: dict[str, str], role: str = "node") -> str:
    """What a step running `script` on a host of `role` sends on stdin (its parameters and the
    run of its program by digest)."""
    from components.hosts.remote import Host, step_program
    from components.hosts.steps import Where

    host = Host(name="sandbox", identity="i-0sandbox", _connection={}, role=Where(role))
    return step_program(script, params, host)

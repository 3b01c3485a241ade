"""Run rendered node scripts for real, with bash, without touching the machine.

Each run happens in a private mount namespace (`unshare --mount --fork`) with overlay mounts
over /etc, /var, /opt and /usr/local: the real directory below, a per-sandbox upper directory
above, so scripts write their real files and the tests read them from the upper directories.
Commands with outside effects (apt-get, systemctl, modprobe, nvidia-smi, kubeadm, curl, ...)
are the stubs in tests/stubs/, first on PATH. They record their argv and simulate state in a
state directory the tests control with `Sandbox.state(...)`.

Runs in one Sandbox share the upper directories and the state: a second run sees the first
run's files and installed packages, like a second `pulumi up` on the same host.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from components.host_scripts import render_script

STUBS_DIR = Path(__file__).resolve().parent / "stubs"
OVERLAID_DIRS = ("/etc", "/var", "/opt", "/usr/local")
FIELD_SEPARATOR = "\x1f"
UNSHARE = ("unshare", "--mount", "--propagation", "private", "--fork")


def sandbox_available() -> bool:
    """True when this machine can run the sandbox (root, unshare, overlayfs)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    try:
        filesystems = Path("/proc/filesystems").read_text()
    except OSError:
        return False
    return "overlay" in filesystems


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
    def __init__(self, root: Path, state_dir: Path | None = None) -> None:
        """`state_dir` shared by two sandboxes: two hosts (or two runs on one host) that see one
        simulated cluster API, each with its own files."""
        self.root = Path(root)
        self.state_dir = Path(state_dir) if state_dir is not None else self.root / "state"
        self.tmp_dir = self.root / "tmp"
        self.uppers: dict[str, Path] = {}
        self._workdirs: dict[str, Path] = {}
        for d in (self.state_dir, self.tmp_dir):
            d.mkdir(parents=True, exist_ok=True)
        for overlaid in OVERLAID_DIRS:
            slug = overlaid.strip("/").replace("/", "_")
            self.uppers[overlaid] = self.root / "upper" / slug
            self._workdirs[overlaid] = self.root / "work" / slug
            self.uppers[overlaid].mkdir(parents=True, exist_ok=True)
            self._workdirs[overlaid].mkdir(parents=True, exist_ok=True)
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
        """Simulate another apt (unattended-upgrades) holding the dpkg lock for `seconds` from the
        script's first apt-get call on (not from now: on a busy machine the script may need more
        than that to get there, and would then never meet the lock)."""
        self.state("apt.lock-for", f"{seconds:.3f}")

    def service_active(self, unit: str) -> bool:
        return self.state(f"systemd/{unit}.active") == "yes"

    # ---- files ----------------------------------------------------------------------

    def host_path(self, path: str) -> Path:
        """Where a host path (e.g. /etc/fstab) lives in the upper dirs."""
        for overlaid in sorted(OVERLAID_DIRS, key=len, reverse=True):
            if path == overlaid or path.startswith(overlaid + "/"):
                return self.uppers[overlaid] / path[len(overlaid) :].lstrip("/")
        raise ValueError(f"{path} is not under an overlaid directory {OVERLAID_DIRS}")

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

    # ---- running ----------------------------------------------------------------------

    def _mount_commands(self) -> str:
        lines = ["set -e"]
        for overlaid in OVERLAID_DIRS:
            lines.append(
                "mount -t overlay overlay -o "
                f"lowerdir={overlaid},upperdir={self.uppers[overlaid]},"
                f"workdir={self._workdirs[overlaid]} {overlaid}"
            )
        lines.append('exec env -i "$@" bash -s')
        return "\n".join(lines)

    def run_text(self, program: str, timeout: float = 60) -> RunResult:
        """Run a bash program (fed on stdin, as `sudo bash -s` does) in the sandbox."""
        calls_log = self.state_dir / "calls.log"
        offset = calls_log.stat().st_size
        env = [
            f"PATH={STUBS_DIR}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            f"STUB_STATE={self.state_dir}",
            f"TMPDIR={self.tmp_dir}",
            "HOME=/root",
            "LANG=C.UTF-8",
        ]
        proc = subprocess.run(
            [*UNSHARE, "bash", "-c", self._mount_commands(), "sandbox", *env],
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
        """Render a node script (components/scripts/<script>) with params and run it."""
        return self.run_text(render_script(script, params or {}), timeout=timeout)

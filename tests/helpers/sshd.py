"""A real sshd on 127.0.0.1 for the real-engine tests: Debian's OpenSSH server, on a free high
port, with its own host key, config and authorized key, logging to a file. Each server sets
TEST_HOST in its sessions (sshd_config SetEnv), so a command's output says which host ran it.
Where sshd is missing the test skips naming the package (and fails under CI=true).
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.cluster import free_port
from tests.helpers.tools import missing, require_tool

SSHD = "/usr/sbin/sshd"
INSTALL = "apt-get install openssh-server openssh-client"
READY_WITHIN_SECONDS = 30


@dataclass
class SshHost:
    name: str
    directory: Path
    port: int
    host_public_key: str  # "ssh-ed25519 AAAA..." as a connection's hostKey pins it
    client_private_key: str
    user: str
    process: subprocess.Popen

    def log(self) -> str:
        return (self.directory / "sshd.log").read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=20)


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)],
        check=True,
        capture_output=True,
    )


def start(directory: Path, name: str, user: str = "root") -> SshHost:
    """An sshd that accepts one client key for `user` and offers one ed25519 host key."""
    if not Path(SSHD).is_file():
        missing(f"{SSHD} is not installed", INSTALL)
    require_tool("ssh-keygen", INSTALL)
    directory.mkdir(parents=True, exist_ok=True)
    _keygen(directory / "host_key")
    _keygen(directory / "client_key")
    (directory / "authorized_keys").write_text((directory / "client_key.pub").read_text())
    (directory / "authorized_keys").chmod(0o600)
    # sshd (as root) needs its privilege-separation directory.
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    port = free_port()
    (directory / "sshd_config").write_text(
        f"ListenAddress 127.0.0.1:{port}\n"
        f"HostKey {directory / 'host_key'}\n"
        f"AuthorizedKeysFile {directory / 'authorized_keys'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "PermitRootLogin prohibit-password\nUsePAM no\nStrictModes no\nPidFile none\n"
        f"SetEnv TEST_HOST={name}\n"
        "Subsystem sftp internal-sftp\n"
    )
    process = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(directory / "sshd_config")],
        stdout=(directory / "sshd.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    host = SshHost(
        name,
        directory,
        port,
        host_public_key=" ".join((directory / "host_key.pub").read_text().split()[:2]),
        client_private_key=(directory / "client_key").read_text(),
        user=user,
        process=process,
    )
    deadline = time.monotonic() + READY_WITHIN_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"sshd {name} exited ({process.returncode}):\n{host.log()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1) as s:
            if s.recv(4).startswith(b"SSH-"):
                return host
        time.sleep(0.2)
    host.stop()
    raise RuntimeError(f"sshd {name} not listening on {port}:\n{host.log()}")


@contextlib.contextmanager
def hosts(directory: Path, *names: str) -> Iterator[dict[str, SshHost]]:
    started: dict[str, SshHost] = {}
    try:
        for name in names:
            started[name] = start(directory / name, name)
        yield started
    finally:
        for host in started.values():
            host.stop()

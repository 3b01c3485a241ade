"""A real sshd (Debian's openssh-server) as a machine the stack dials: each host runs in network,
mount and PID namespaces of its own, reachable from the test at an address of its own over a
veth pair, so several hosts can run at once and a client dials them as it dials EC2 machines.
The first contact's tests start one with a boot key (`start`, `running`); the real-engine tests
start several with keys of their own (`hosts`).

What a host is made of (all under the directory the test gives it; the machine's own files are
never written):
- overlay mounts over /etc, /var and /usr/local (lower: the real directory; upper: the host's
  own, which `host_path` and `read` show), and a tmpfs on /run (sshd's privilege separation
  directory, its pid file);
- the image's host keys removed and the boot key installed, as cloud-init's `cc_ssh` does with
  `ssh_deletekeys` and `ssh_keys` (components/hosts/host_keys.py `cloud_config`);
- the login user `ubuntu` with the given authorized keys and passwordless sudo, as cloud-init
  writes for an Ubuntu image's default user (`sudo: ALL=(ALL) NOPASSWD:ALL`);
- /dev/console bound to a file of the host (`console()`), where scripts announce to the console;
- TEST_HOST=<name> in every session (sshd_config SetEnv), so a command's output says which
  host ran it;
- `systemctl` (no systemd runs in the namespaces): tests/helpers/sshd_systemctl, which reloads
  this sshd as openssh's ssh.service does, and refuses every other verb.

The real sshd_config of the machine is used as Debian ships it (its `Include` of
sshd_config.d comes first and the first value of a keyword wins), with a drop-in that turns off
PAM (no PAM stack runs in the namespaces) and writes the pid file to /run.

Needs root (network namespaces and a veth in the test's namespace): as any other user, or
without sshd or sudo installed, `require()` skips (fails with CI=true; `.ci/run` installs
openssh-server and sudo). Every wait is bounded, and `stop()` (or leaving `running(...)`) kills
the namespaces' every process; the veth pair goes with the network namespace.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from tests.helpers.tools import missing

SSHD = "/usr/sbin/sshd"
OVERLAID_DIRS = ("/etc", "/var", "/usr/local")
LOGIN_USER = "ubuntu"
LOGIN_UID = 4300
LOGIN_HOME = f"/var/lib/gpu-cluster-test-home/{LOGIN_USER}"
SYSTEMCTL_STUB = Path(__file__).resolve().parent / "sshd_systemctl"
INSTALL = "apt-get install openssh-server sudo iproute2 util-linux"
# The hosts' addresses: one /30 each out of this block, the test's side first.
ADDRESS_BLOCK = ipaddress.ip_network("10.250.0.0/16")
# Bounds of every wait (seconds): a host that does not listen by then has failed to start.
START_SECONDS = 30
STOP_SECONDS = 10

_DROP_IN = """\
# gpu-cluster tests (tests/helpers/sshd.py): no PAM stack runs in the test's namespaces, and the
# pid file the systemctl stub signals lives on the host's own /run.
UsePAM no
PidFile /run/sshd.pid
LogLevel VERBOSE
SetEnv TEST_HOST={name}
"""

_LAUNCH = """\
set -Eeuo pipefail
ip link set lo up
for spec in "$@"; do
  IFS=: read -r target upper work <<<"${spec}"
  mount -t overlay overlay -o "lowerdir=${target},upperdir=${upper},workdir=${work}" "${target}"
done
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -m 0755 /run/sshd
mount --bind "${HOST_CONSOLE}" /dev/console
rm -f /etc/ssh/ssh_host_*key*
cat >/etc/ssh/ssh_host_ed25519_key
chmod 0600 /etc/ssh/ssh_host_ed25519_key
ssh-keygen -y -f /etc/ssh/ssh_host_ed25519_key >/etc/ssh/ssh_host_ed25519_key.pub
exec "${SSHD}" -D -e
"""

_counter = itertools.count()


def problem() -> str | None:
    """Why real sshd hosts cannot run here, or None."""
    if os.geteuid() != 0:
        return "a real sshd in a network namespace needs root"
    for tool in (SSHD, shutil.which("sudo"), shutil.which("unshare"), shutil.which("ip")):
        if tool is None or not os.access(tool, os.X_OK):
            return f"{tool or 'sudo'} is not installed"
    return None


def require() -> None:
    """Skip the test (fail it with CI=true) where real sshd hosts cannot run."""
    __tracebackhide__ = True
    reason = problem()
    if reason is not None:
        missing(reason, INSTALL)


@dataclass
class SshdHost:
    """One running host: `address`:`port` from the test's namespace, `user` logs in with the
    keys it was started with."""

    name: str
    root: Path
    address: str
    port: int
    user: str
    host_public_key: str  # the boot key's public half, "ssh-ed25519 AAAA..." as a hostKey pins it
    _process: subprocess.Popen = field(repr=False)
    _interface: str = field(repr=False)
    # The login key `hosts` made for it (empty for a host `start` was given the keys of).
    client_private_key: str = field(default="", repr=False)

    # ---- files of the host -----------------------------------------------------------

    def host_path(self, path: str) -> Path:
        """Where a file the host wrote under an overlaid directory lives (its upper dir)."""
        for overlaid in OVERLAID_DIRS:
            if path == overlaid or path.startswith(overlaid + "/"):
                return _upper(self.root, overlaid) / path[len(overlaid) :].lstrip("/")
        raise ValueError(f"{path} is not under an overlaid directory {OVERLAID_DIRS}")

    def exists(self, path: str) -> bool:
        """Whether the running host has this file now, as its own processes see it."""
        return self.in_host(["test", "-e", path]).returncode == 0

    def read(self, path: str) -> str:
        return self.host_path(path).read_text()

    def console(self) -> str:
        """What the host wrote to /dev/console."""
        return (self.root / "console").read_text()

    def log(self) -> str:
        """sshd's own log (its stderr, -e)."""
        return (self.root / "sshd.log").read_text(errors="replace")

    # ---- what a client sees ----------------------------------------------------------

    def served_host_keys(self) -> list[str]:
        """The host keys sshd offers now, as `type base64` lines (ssh-keyscan asks for each
        type it knows)."""
        scan = subprocess.run(
            ["ssh-keyscan", "-T", "10", "-p", str(self.port), self.address],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        keys = []
        for line in scan.stdout.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            _host, key_type, blob = line.split()[:3]
            keys.append(f"{key_type} {blob}")
        return sorted(keys)

    def sessions(self) -> int:
        """sshd processes serving a connection now (their title says so, setproctitle)."""
        listing = self.in_host(["ps", "-eo", "args="], check=True).stdout
        return sum(1 for line in listing.splitlines() if line.startswith("sshd: ") and "@" in line)

    # ---- inside the host -------------------------------------------------------------

    def in_host(self, argv: Sequence[str], *, check: bool = False, stdin: str | None = None):
        """Run `argv` as root in the host's namespaces (its network, files and processes)."""
        return subprocess.run(
            ["nsenter", "-t", str(self._namespace_pid()), "-n", "-m", "-p", "--", *argv],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=check,
        )

    def _namespace_pid(self) -> int:
        return _child_of(self._process.pid)

    # ---- lifecycle -------------------------------------------------------------------

    def stop(self) -> None:
        """Kill every process of the host and wait for them: its PID 1 first (the kernel then
        kills the rest of its PID namespace), reaped by `unshare`, which then exits; its veth
        goes with its network namespace."""
        if self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError, RuntimeError):
                os.kill(_child_of(self._process.pid, seconds=1), signal.SIGKILL)
            try:
                self._process.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=STOP_SECONDS)
        if _interface_exists(self._interface):
            subprocess.run(["ip", "link", "del", self._interface], check=False, timeout=30)


def start(
    root: Path,
    *,
    boot_key: str,
    authorized_keys: Sequence[str],
    name: str = "host",
) -> SshdHost:
    """Start a host under `root` (a new directory) whose sshd serves `boot_key` (an OpenSSH
    private key) and lets the login user in with `authorized_keys`. `require()` first."""
    root.mkdir(parents=True, exist_ok=True)
    specs = []
    for overlaid in OVERLAID_DIRS:
        upper, work = _upper(root, overlaid), root / "work" / _slug(overlaid)
        upper.mkdir(parents=True, exist_ok=True)
        work.mkdir(parents=True, exist_ok=True)
        specs.append(f"{overlaid}:{upper}:{work}")
    (root / "console").write_text("")
    _prepare_files(root, name, authorized_keys)
    log = (root / "sshd.log").open("wb")
    process = subprocess.Popen(
        [
            *("unshare", "--net", "--mount", "--propagation", "private", "--pid", "--fork"),
            *("--mount-proc", "--kill-child=SIGKILL", "bash", "-c", _LAUNCH, "launch", *specs),
        ],
        stdin=subprocess.PIPE,
        stdout=log,
        stderr=subprocess.STDOUT,
        # Should the test's process die first, unshare gets SIGTERM, and --kill-child then
        # kills the host (prctl PR_SET_PDEATHSIG).
        preexec_fn=_die_with_parent,
        env={
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "SSHD": SSHD,
            "HOST_CONSOLE": str(root / "console"),
        },
    )
    log.close()
    assert process.stdin is not None
    process.stdin.write(boot_key.encode())
    process.stdin.close()
    interface = ""
    try:
        interface, address = _connect(process)
        public = public_key_of(boot_key)
        host = SshdHost(name, root, address, 22, LOGIN_USER, public, process, interface)
        _wait_listening(host)
    except BaseException:
        process.kill()
        process.wait(timeout=STOP_SECONDS)
        if interface and _interface_exists(interface):
            subprocess.run(["ip", "link", "del", interface], check=False, timeout=30)
        raise
    return host


@contextlib.contextmanager
def running(root: Path, **kwargs) -> Iterator[SshdHost]:
    """`start(root, **kwargs)`, stopped on leaving."""
    host = start(root, **kwargs)
    try:
        yield host
    finally:
        host.stop()


@contextlib.contextmanager
def hosts(directory: Path, *names: str) -> Iterator[dict[str, SshdHost]]:
    """Hosts `names` under `directory`, each with a boot key and a login key of its own (its
    `client_private_key`), all stopped on leaving. `require()` first."""
    started: dict[str, SshdHost] = {}
    try:
        for name in names:
            boot, login = new_private_key(), new_private_key()
            host = start(
                directory / name,
                boot_key=boot,
                authorized_keys=[public_key_of(login)],
                name=name,
            )
            host.client_private_key = login
            started[name] = host
        yield started
    finally:
        for host in started.values():
            host.stop()


def new_private_key() -> str:
    """A new ED25519 key as OpenSSH writes it (ssh-keygen -t ed25519)."""
    return (
        ed25519.Ed25519PrivateKey.generate()
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
        .decode()
    )


def public_key_of(private_openssh: str) -> str:
    """The `type base64` public half of an OpenSSH private key."""
    key = serialization.load_ssh_private_key(private_openssh.encode(), password=None)
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return " ".join(public.decode().split()[:2])


# ---------------------------------------------------------------- setting a host up


def _slug(overlaid: str) -> str:
    return overlaid.strip("/").replace("/", "_")


def _upper(root: Path, overlaid: str) -> Path:
    return root / "upper" / _slug(overlaid)


def _prepare_files(root: Path, name: str, authorized_keys: Sequence[str]) -> None:
    """The upper directories' files before the host starts: the login user, its keys and its
    sudo rule, sshd's drop-in, the systemctl stub."""
    etc, var, usr_local = (_upper(root, d) for d in OVERLAID_DIRS)
    for path, entry in (
        ("passwd", f"{LOGIN_USER}:x:{LOGIN_UID}:{LOGIN_UID}::{LOGIN_HOME}:/bin/bash\n"),
        ("group", f"{LOGIN_USER}:x:{LOGIN_UID}:\n"),
        # Not locked ("*", no password): sshd without PAM refuses a locked account ("!").
        ("shadow", f"{LOGIN_USER}:*:19000:0:99999:7:::\n"),
    ):
        real = Path("/etc", path).read_text()
        kept = [line for line in real.splitlines() if not line.startswith(f"{LOGIN_USER}:")]
        target = etc / path
        target.write_text("".join(f"{line}\n" for line in kept) + entry)
        target.chmod(0o640 if path == "shadow" else 0o644)
    sudoers = etc / "sudoers.d" / "90-cloud-init-users"
    sudoers.parent.mkdir(parents=True, exist_ok=True)
    sudoers.write_text(f"{LOGIN_USER} ALL=(ALL) NOPASSWD:ALL\n")
    sudoers.chmod(0o440)
    drop_in = etc / "ssh" / "sshd_config.d" / "00-gpu-cluster-tests.conf"
    drop_in.parent.mkdir(parents=True, exist_ok=True)
    drop_in.write_text(_DROP_IN.format(name=name))
    home = var / LOGIN_HOME.removeprefix("/var/")
    (home / ".ssh").mkdir(parents=True, exist_ok=True)
    (home / ".ssh" / "authorized_keys").write_text("".join(f"{k}\n" for k in authorized_keys))
    for path, mode in (
        (home, 0o755),
        (home / ".ssh", 0o700),
        (home / ".ssh/authorized_keys", 0o600),
    ):
        os.chown(path, LOGIN_UID, LOGIN_UID)
        path.chmod(mode)
    parent = home.parent
    while parent != var:
        parent.chmod(0o755)
        parent = parent.parent
    sbin = usr_local / "sbin"
    sbin.mkdir(parents=True, exist_ok=True)
    shutil.copy(SYSTEMCTL_STUB, sbin / "systemctl")
    (sbin / "systemctl").chmod(0o755)


# ---------------------------------------------------------------- processes and network


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the process that started it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1  # <linux/prctl.h>
    libc.prctl(pr_set_pdeathsig, signal.SIGTERM)


def _child_of(pid: int, seconds: float = START_SECONDS) -> int:
    """The process `unshare --fork` started (PID 1 of the host's namespaces)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        children = Path(f"/proc/{pid}/task/{pid}/children")
        if children.exists():
            found = children.read_text().split()
            if found:
                return int(found[0])
        time.sleep(0.05)
    raise RuntimeError(f"unshare ({pid}) started no process within {seconds}s")


def _interface_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def _used_networks() -> list[ipaddress.IPv4Network]:
    listing = subprocess.run(
        ["ip", "-j", "-4", "addr"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    return [
        ipaddress.ip_network(f"{a['local']}/{a['prefixlen']}", strict=False)
        for link in json.loads(listing)
        for a in link.get("addr_info", [])
    ]


def _free_pair() -> tuple[str, ipaddress.IPv4Network]:
    """An interface name and a /30 of ADDRESS_BLOCK that no interface here uses."""
    subnets = list(ADDRESS_BLOCK.subnets(new_prefix=30))
    used = _used_networks()
    start_at = (os.getpid() * 131 + next(_counter) * 7919) % len(subnets)
    for offset in range(len(subnets)):
        index = (start_at + offset) % len(subnets)
        name = f"gcs{index:05x}"
        subnet = subnets[index]
        if _interface_exists(name) or any(subnet.overlaps(u) for u in used):
            continue
        return name, subnet
    raise RuntimeError(f"no free /30 left in {ADDRESS_BLOCK}")


def _connect(process: subprocess.Popen) -> tuple[str, str]:
    """A veth pair between the test's namespace and the host's: returns the test's interface
    and the host's address."""
    pid = _child_of(process.pid)
    name, subnet = _free_pair()
    ours, theirs = (f"{a}/30" for a in list(subnet.hosts())[:2])
    commands = [
        ["ip", "link", "add", name, "type", "veth", "peer", "name", "eth0", "netns", str(pid)],
        ["ip", "addr", "add", ours, "dev", name],
        ["ip", "link", "set", name, "up"],
        ["nsenter", "-t", str(pid), "-n", "ip", "addr", "add", theirs, "dev", "eth0"],
        ["nsenter", "-t", str(pid), "-n", "ip", "link", "set", "eth0", "up"],
    ]
    for command in commands:
        subprocess.run(command, check=True, capture_output=True, timeout=30)
    return name, theirs.split("/")[0]


def _wait_listening(host: SshdHost) -> None:
    """Until the host's sshd accepts a TCP connection, or START_SECONDS: then its log says why."""
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if host._process.poll() is not None:
            break
        try:
            with socket.create_connection((host.address, host.port), timeout=1) as conn:
                if conn.recv(4).startswith(b"SSH-"):
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"sshd of {host.name} is not listening:\n{host.log()}")

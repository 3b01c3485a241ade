"""Machines for the end-to-end tests: each host a network namespace on a bridge of its own, with
Debian's sshd running inside the script sandbox's mount namespace (tests/sandbox.py), so every
session it forks runs the real host scripts with the stubs of tests/stubs first on PATH and
writes only into the host's overlays (/etc, /var, /usr, /opt, /root), never this machine's.

    with lab.running(directory, api_port) as net:
        cp = net.add("cp", role="control-plane")     # also serves the API at its address:6443
        gpu = net.add("a")                            # a GPU server
        gpu.vanish()                                  # its sshd and namespace gone

The lab is a /24 of 10.213.0.0/16 that no route of this machine covers, picked per test session
(`session_network`), so concurrent sessions on one machine rarely meet; the bridge holds its
first address. The kube-apiserver of the session runs on this machine's loopback: the control
plane's namespace forwards its port 6443 there (`Forwarder`), so nodes join
`<control plane>:6443` as they join a kubeadm control plane, and its serving certificate names
that address (tests/conftest.py). Needs root (namespaces, a bridge, overlays), `ip` (iproute2)
and `unshare` (util-linux): where they are missing the tests skip, naming them; under CI=true
they fail (tests/helpers/tools.py). Why: docs/decisions/067-end-to-end-on-hosts-in-network-
namespaces.md.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers.tools import missing, require_tool
from tests.sandbox import STUBS_DIR, Sandbox

LAB_RANGE = ipaddress.ip_network("10.213.0.0/16")
CONTROL_PLANE_INDEX = 10  # the control plane's address in the lab's /24
FIRST_HOST_INDEX = 20
API_PORT = 6443  # what a kubeadm control plane serves its API on
SSHD = "/usr/sbin/sshd"
# Debian's openssh-sftp-server (a dependency of openssh-server): the SFTP subsystem.
SFTP_SERVER = "/usr/lib/openssh/sftp-server"
INSTALL = "apt-get install iproute2 util-linux openssh-server openssh-client openssl"
# Overlaid on every host: what a script may write outside a home directory.
HOST_DIRS = ("/etc", "/var", "/usr", "/opt", "/root")
# The login user steps run as: named as the stack's ssh.user, with uid 0 (the sandbox runs as
# root; its sudo is the stub, tests/stubs/sudo) and its home under the overlaid /var, where the
# copy of the host's scripts lands.
LOGIN_USER = "ubuntu"
LOGIN_HOME = f"/var/lib/gpu-cluster-test-home/{LOGIN_USER}"
READY_WITHIN_SECONDS = 30
STALL_FLAG = "sftp.stall-after-bytes"  # state file: the SFTP subsystem stops reading after N


def _free_subnet(taken: list[ipaddress.IPv4Network], seed: int) -> ipaddress.IPv4Network:
    subnets = list(LAB_RANGE.subnets(new_prefix=24))
    for offset in range(len(subnets)):
        candidate = subnets[(seed + offset) % len(subnets)]
        if not any(candidate.overlaps(net) for net in taken):
            return candidate
    raise RuntimeError(f"every /24 of {LAB_RANGE} is routed on this machine")


def _routed() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network this machine routes or holds an address in (`ip -j` is JSON)."""
    if shutil.which("ip") is None:
        return []
    found: list[ipaddress.IPv4Network] = []
    routes = subprocess.run(
        ["ip", "-j", "-4", "route", "show", "table", "all"], capture_output=True, text=True
    )
    for route in json.loads(routes.stdout or "[]"):
        dst = route.get("dst", "")
        if dst and dst != "default":
            with contextlib.suppress(ValueError):
                found.append(ipaddress.ip_network(dst, strict=False))
    addresses = subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True)
    for link in json.loads(addresses.stdout or "[]"):
        for info in link.get("addr_info", []):
            found.append(ipaddress.ip_network(f"{info['local']}/{info['prefixlen']}", strict=False))
    return found


@functools.cache
def session_network() -> ipaddress.IPv4Network:
    """This test session's lab /24 (no root needed to pick it)."""
    return _free_subnet(_routed(), os.getpid())


def control_plane_address() -> str:
    return str(session_network()[CONTROL_PLANE_INDEX])


def problem() -> str | None:
    """Why this machine cannot run the lab, or None."""
    if os.geteuid() != 0:
        return "the end-to-end hosts need root (network namespaces, a bridge, overlay mounts)"
    for tool in ("ip", "unshare", "ssh-keygen", "openssl"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not on PATH"
    for path in (SSHD, SFTP_SERVER):
        if not Path(path).is_file():
            return f"{path} is not installed"
    return None


def require() -> None:
    """Skip (fail under CI=true) where the lab cannot run, naming why."""
    __tracebackhide__ = True
    reason = problem()
    if reason is not None:
        missing(reason, f"run as root with {INSTALL}")


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")


def keygen(path: Path, comment: str) -> str:
    """An ed25519 key pair at `path` (+ .pub); returns the public key's `type blob`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return " ".join(path.with_suffix(".pub").read_text().split()[:2])


def public_key(private_key: Path) -> str:
    """The `type blob` of a key pair made by `keygen`."""
    return " ".join(private_key.with_suffix(".pub").read_text().split()[:2])


class Forwarder:
    """Port `port` of a namespace, forwarded to 127.0.0.1:`target` of this machine: the API
    server reached at the control plane's address. The listening socket is made inside the
    namespace (by a process run there, which hands it over) and served from here."""

    def __init__(self, netns: str, address: str, port: int, target: int):
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        code = (
            "import socket, sys\n"
            "s = socket.socket()\n"
            "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            f"s.bind(({address!r}, {port}))\n"
            "s.listen(128)\n"
            "socket.send_fds(socket.socket(fileno=int(sys.argv[1])), [b'x'], [s.fileno()])\n"
        )
        with parent, child:
            subprocess.run(
                ["ip", "netns", "exec", netns, sys.executable, "-c", code, str(child.fileno())],
                pass_fds=[child.fileno()],
                check=True,
                capture_output=True,
            )
            _, fds, _, _ = socket.recv_fds(parent, 1, 1)
        self.listener = socket.socket(fileno=fds[0])
        self.target = target
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.closed.set()
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()


@dataclass
class Host:
    """One machine of the lab: its namespace, address, sandbox and sshd."""

    name: str
    address: str
    netns: str
    directory: Path
    sandbox: Sandbox
    bin_dir: Path
    host_public_key: str = ""
    process: subprocess.Popen | None = field(default=None, repr=False)

    # ---- files and calls, as the host's sessions left them

    def read(self, path: str) -> str:
        return self.sandbox.read(path)

    def exists(self, path: str) -> bool:
        return self.sandbox.exists(path)

    def state(self, key: str, value: str | int | None = None) -> str | None:
        return self.sandbox.state(key, value)

    def calls(self) -> list[list[str]]:
        """Every command of the stubs (and the kubectl wrapper) the host's sessions ran."""
        log = self.sandbox.state_dir / "calls.log"
        return [line.split("\x1f") for line in log.read_text().splitlines() if line]

    def called(self, *prefix: str) -> list[list[str]]:
        return [c for c in self.calls() if c[: len(prefix)] == list(prefix)]

    def log(self) -> str:
        return (self.directory / "sshd.log").read_text(errors="replace")

    def sessions(self) -> int:
        """Logins sshd accepted (sshd logs one "Accepted publickey" line per authentication)."""
        return self.log().count("Accepted publickey for ")

    def disk(self) -> dict[str, str]:
        """sha256 of every file the host's sessions wrote (its upper directories): equal before
        and after an operation when nothing touched the machine."""
        found = {}
        for upper in self.sandbox.uppers.values():
            for path in sorted(upper.rglob("*")):
                if path.is_file() and not path.is_symlink():
                    found[str(path.relative_to(self.sandbox.root))] = hashlib.sha256(
                        path.read_bytes()
                    ).hexdigest()
        return found

    # ---- login keys, as the host's owners manage them

    @property
    def authorized_keys(self) -> Path:
        return self.sandbox.host_path(f"{LOGIN_HOME}/.ssh/authorized_keys")

    def authorize(self, public_key: str) -> None:
        keys = self.authorized_keys.read_text().splitlines()
        if public_key not in keys:
            self.authorized_keys.write_text("".join(f"{k}\n" for k in [*keys, public_key]))

    def revoke(self, public_key: str) -> None:
        keys = [k for k in self.authorized_keys.read_text().splitlines() if k != public_key]
        self.authorized_keys.write_text("".join(f"{k}\n" for k in keys))

    # ---- the machine

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def vanish(self) -> None:
        """The machine is gone: every process in its namespace killed, the namespace (and its
        link to the bridge) deleted. Its disks (the sandbox's upper directories) stay readable."""
        pids = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True, text=True)
        for pid in pids.stdout.split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)


@dataclass
class Lab:
    directory: Path
    network: ipaddress.IPv4Network
    api_port: int
    tag: str = field(default_factory=lambda: secrets.token_hex(2))
    hosts: dict[str, Host] = field(default_factory=dict)
    forwarders: list[Forwarder] = field(default_factory=list)

    @property
    def bridge(self) -> str:
        return f"gpuc{self.tag}"

    @property
    def gateway(self) -> str:
        return str(self.network[1])

    def start(self) -> None:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.gateway}/{self.network.prefixlen}", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        self.bin_dir.mkdir(parents=True, exist_ok=True)

    @property
    def bin_dir(self) -> Path:
        """Put before the stubs on every host's PATH: the real tools the hosts run."""
        return self.directory / "bin"

    def install_kubectl(self, kubectl: Path) -> None:
        """The real kubectl on every host, recorded as the stubs record their calls (the
        install and chown stubs do the same: record, then run the real tool)."""
        wrapper = self.bin_dir / "kubectl"
        wrapper.write_text(
            "#!/usr/bin/env bash\n"
            "# kubectl v1.35.4, built from k8s.io/kubernetes (python -m tools.engine build): the\n"
            "# call is recorded like a stub's, then the real kubectl runs.\n"
            f"source {STUBS_DIR}/_stub_lib.sh\n"
            'stub_record kubectl "$@"\n'
            f'exec {kubectl} "$@"\n'
        )
        wrapper.chmod(0o755)

    def add(self, name: str, index: int | None = None, *, gpus: int = 0) -> Host:
        """A new host `name` at the lab's address `index` (the control plane's for "cp"), its
        sshd started: a fresh Ubuntu 24.04 machine the stack did not create."""
        if index is None:
            index = FIRST_HOST_INDEX + len([h for h in self.hosts if h != "cp"])
        address = str(self.network[index])
        directory = self.directory / name
        host = Host(
            name=name,
            address=address,
            netns=f"gpuc-{self.tag}-{name}",
            directory=directory,
            sandbox=Sandbox(directory / "sandbox", overlaid=HOST_DIRS),
            bin_dir=self.bin_dir,
        )
        self.hosts[name] = host
        self._link(host, index)
        self._prepare(host)
        self._start_sshd(host)
        return host

    def _link(self, host: Host, index: int) -> None:
        veth = f"gpuc{self.tag}h{index}"
        _run("ip", "netns", "add", host.netns)
        _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", host.netns)
        _run("ip", "link", "set", veth, "master", self.bridge, "up")
        inside = ("ip", "netns", "exec", host.netns, "ip")
        _run(*inside, "link", "set", "lo", "up")
        _run(*inside, "addr", "add", f"{host.address}/{self.network.prefixlen}", "dev", "eth0")
        _run(*inside, "link", "set", "eth0", "up")
        _run(*inside, "route", "add", "default", "via", self.gateway)

    def _prepare(self, host: Host) -> None:
        """The host's own files: its login user, host key and sshd configuration."""
        sb = host.sandbox
        for path, entry in (
            ("/etc/passwd", f"{LOGIN_USER}:x:0:0::{LOGIN_HOME}:/bin/bash\n"),
            ("/etc/group", f"{LOGIN_USER}:x:0:\n"),
        ):
            lines = [
                line
                for line in Path(path).read_text().splitlines()
                if not line.startswith(f"{LOGIN_USER}:")
            ]
            sb.write(path, "".join(f"{line}\n" for line in lines) + entry)
        sb.state("sudo.user", LOGIN_USER)
        sb.host_path(f"{LOGIN_HOME}/.ssh").mkdir(parents=True, exist_ok=True)
        sb.host_path(f"{LOGIN_HOME}/.ssh").chmod(0o700)
        sb.write(f"{LOGIN_HOME}/.ssh/authorized_keys", "", 0o600)
        keys = host.directory / "keys"
        host.host_public_key = keygen(keys / "ssh_host_ed25519_key", f"root@{host.name}")
        sb.write(
            "/etc/ssh/ssh_host_ed25519_key", (keys / "ssh_host_ed25519_key").read_text(), 0o600
        )
        sb.write("/etc/hostname", f"{host.name}\n")
        system = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        path = f"{self.bin_dir}:{STUBS_DIR}:{system}"
        environment = {
            "PATH": path,
            "STUB_STATE": str(sb.state_dir),
            "STUB_PYTHON": sys.executable,
            "TMPDIR": str(sb.tmp_dir),
            "LANG": "C.UTF-8",
            "TEST_HOST": host.name,
        }
        sb.write(
            "/etc/ssh/sshd_config",
            f"ListenAddress {host.address}:22\n"
            "HostKey /etc/ssh/ssh_host_ed25519_key\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "PermitRootLogin prohibit-password\nUsePAM no\nPidFile none\nLogLevel VERBOSE\n"
            "AuthorizedKeysFile .ssh/authorized_keys\n"
            # Each session's environment: the stubs first on PATH and their state.
            f"SetEnv {' '.join(f'{k}={v}' for k, v in environment.items())}\n"
            f"Subsystem sftp {sys.executable} {Path(__file__).with_name('lab_sftp.py')} "
            f"{SFTP_SERVER}\n",
        )

    def _start_sshd(self, host: Host) -> None:
        """sshd in the host's namespace and sandbox: the overlays and a /run of its own (its
        sessions' TMPDIR is the sandbox's: this machine's /tmp holds the test's directories)."""
        then = "\n".join(
            (
                "mount -t tmpfs -o mode=0755 tmpfs /run",
                "mkdir -p /run/sshd",
                f"exec {SSHD} -D -e -f /etc/ssh/sshd_config",
            )
        )
        program = host.sandbox.mount_commands(then)
        host.process = subprocess.Popen(
            [
                *("ip", "netns", "exec", host.netns),
                *("unshare", "--mount", "--propagation", "private", "--fork", "--kill-child"),
                *("bash", "-c", program),
            ],
            stdout=(host.directory / "sshd.log").open("ab"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + READY_WITHIN_SECONDS
        while time.monotonic() < deadline:
            if host.process.poll() is not None:
                raise RuntimeError(f"sshd on {host.name} exited:\n{host.log()}")
            if "Server listening on" in host.log():
                return
            time.sleep(0.1)
        raise RuntimeError(f"sshd on {host.name} not listening:\n{host.log()}")

    def forward_api(self, host: Host) -> None:
        """`host`:6443 forwarded to the API server: the control plane serves its API."""
        self.forwarders.append(Forwarder(host.netns, host.address, API_PORT, self.api_port))

    def stop(self) -> None:
        for forwarder in self.forwarders:
            forwarder.close()
        for host in self.hosts.values():
            host.vanish()
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


@contextlib.contextmanager
def running(directory: Path, api_port: int) -> Iterator[Lab]:
    require()
    require_tool("ip", INSTALL)
    lab = Lab(directory, session_network(), api_port)
    try:
        lab.start()
        yield lab
    finally:
        lab.stop()

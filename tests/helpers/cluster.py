"""A Kubernetes control plane on loopback for the real-engine tests: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler v1.35.4 built by `python -m tools.engine build`,
with certificates made by openssl the way kubeadm lays them out (one CA, a serving certificate
for 127.0.0.1, a service-account key pair, an admin client certificate in system:masters).

No kubelet runs: tests/helpers/kubelet.py registers Nodes and reports pod status as one would.
Each process logs to a file under the cluster's directory; `Cluster.logs()` returns their tails
for a failure message. Waits are bounded and say what they waited for.
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import yaml

SERVICE_CIDR = "10.96.0.0/12"
READY_WITHIN_SECONDS = 300  # the control plane starting on a busy 2-core machine


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(directory: Path, extra_ips: tuple[str, ...] = ()) -> None:
    """kubeadm's layout, smaller (cmd/kubeadm/app/phases/certs): ca.crt/key; apiserver.crt for
    127.0.0.1, localhost and `extra_ips` (where else clients reach it: the end-to-end tests'
    control-plane address); sa.key/sa.pub; admin.crt with CN kubernetes-admin in
    system:masters, which RBAC binds to cluster-admin without a binding."""
    directory.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=kubernetes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        cwd=directory,
    )

    def signed(name: str, subject: str, extensions: str) -> None:
        (directory / f"{name}.ext").write_text(extensions)
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            subject,
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            cwd=directory,
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            f"{name}.ext",
            "-out",
            f"{name}.crt",
            cwd=directory,
        )

    signed(
        "apiserver",
        "/CN=kube-apiserver",
        "subjectAltName="
        + ",".join(f"IP:{ip}" for ip in ("127.0.0.1", *extra_ips))
        + ",DNS:localhost,DNS:kubernetes.default.svc\n"
        "extendedKeyUsage=serverAuth\n",
    )
    signed("admin", "/O=system:masters/CN=kubernetes-admin", "extendedKeyUsage=clientAuth\n")
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=directory)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)


def kubeconfig(server: str, pki: Path) -> dict[str, Any]:
    """An admin kubeconfig with its certificates inline, as kubeadm's admin.conf."""

    def inline(name: str) -> str:
        return base64.b64encode((pki / name).read_bytes()).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "test",
                "cluster": {"server": server, "certificate-authority-data": inline("ca.crt")},
            }
        ],
        "users": [
            {
                "name": "admin",
                "user": {
                    "client-certificate-data": inline("admin.crt"),
                    "client-key-data": inline("admin.key"),
                },
            }
        ],
        "contexts": [{"name": "admin@test", "context": {"cluster": "test", "user": "admin"}}],
        "current-context": "admin@test",
    }


class ApiError(RuntimeError):
    def __init__(self, method: str, path: str, response: requests.Response):
        self.status = response.status_code
        super().__init__(f"{method} {path}: HTTP {response.status_code}: {response.text[:500]}")


@dataclass
class Api:
    """A small client of the API server with the admin certificate: JSON in, JSON out."""

    server: str
    pki: Path
    session: requests.Session = field(default_factory=requests.Session)

    def __post_init__(self) -> None:
        # Not REQUESTS_CA_BUNDLE or proxies from the environment: requests lets those override
        # a session's own CA (sessions.py, merge_environment_settings).
        self.session.trust_env = False
        self.session.verify = str(self.pki / "ca.crt")
        self.session.cert = (str(self.pki / "admin.crt"), str(self.pki / "admin.key"))

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> Any:
        response = self.session.request(
            method,
            self.server + path,
            data=None if body is None else json.dumps(body),
            headers={"Content-Type": content_type},
            timeout=30,
        )
        if response.status_code >= 400:
            raise ApiError(method, path, response)
        return response.json() if response.content else None

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def exists(self, path: str) -> bool:
        try:
            self.get(path)
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    def create(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def merge_patch(self, path: str, body: Any) -> Any:
        return self.request("PATCH", path, body, "application/merge-patch+json")


@dataclass
class Cluster:
    directory: Path
    server: str
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def pki(self) -> Path:
        return self.directory / "pki"

    @property
    def kubeconfig_path(self) -> Path:
        return self.directory / "admin.conf"

    def kubeconfig_text(self) -> str:
        return self.kubeconfig_path.read_text()

    def api(self) -> Api:
        return Api(self.server, self.pki)

    def logs(self, lines: int = 30) -> str:
        tails = []
        for name in self.processes:
            log = (self.directory / f"{name}.log").read_text(errors="replace").splitlines()
            tails.append(f"--- {name} (last {lines} lines)\n" + "\n".join(log[-lines:]))
        return "\n".join(tails)

    def stop(self) -> None:
        for process in reversed(list(self.processes.values())):
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _control_loop_flags(cluster: Cluster) -> list[str]:
    """What kube-controller-manager and kube-scheduler both take here: the admin kubeconfig for
    the API, its authentication and authorization, a free loopback port, no leader election."""
    kubeconfig = str(cluster.kubeconfig_path)
    return [
        *("--kubeconfig", kubeconfig),
        *("--authentication-kubeconfig", kubeconfig),
        *("--authorization-kubeconfig", kubeconfig),
        *("--bind-address", "127.0.0.1"),
        *("--secure-port", str(free_port())),
        "--leader-elect=false",
    ]


def _start(cluster: Cluster, name: str, argv: list[str]) -> None:
    log = (cluster.directory / f"{name}.log").open("wb")
    cluster.processes[name] = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=cluster.directory,
    )


def _wait(cluster: Cluster, what: str, ready) -> None:
    deadline = time.monotonic() + READY_WITHIN_SECONDS
    while time.monotonic() < deadline:
        for name, process in cluster.processes.items():
            if process.poll() is not None:
                raise RuntimeError(
                    f"{name} exited ({process.returncode}) while waiting for "
                    f"{what}\n{cluster.logs()}"
                )
        with contextlib.suppress(requests.RequestException, ApiError):
            if ready():
                return
        time.sleep(0.5)
    raise RuntimeError(f"{what}: not within {READY_WITHIN_SECONDS} s\n{cluster.logs()}")


def start(directory: Path, binaries: Path, extra_ips: tuple[str, ...] = ()) -> Cluster:
    """etcd, then kube-apiserver (ready when /readyz says so), then the controller manager and
    the scheduler (ready when the default ServiceAccount exists: pods can be admitted).
    `extra_ips`: addresses its serving certificate names besides 127.0.0.1."""
    make_pki(directory / "pki", extra_ips)
    port = free_port()
    cluster = Cluster(directory, f"https://127.0.0.1:{port}")
    cluster.kubeconfig_path.write_text(yaml.safe_dump(kubeconfig(cluster.server, cluster.pki)))
    pki = cluster.pki
    etcd_client, etcd_peer = free_port(), free_port()
    try:
        _start(
            cluster,
            "etcd",
            [
                str(binaries / "etcd"),
                "--name",
                "test",
                "--data-dir",
                str(directory / "etcd"),
                "--listen-client-urls",
                f"http://127.0.0.1:{etcd_client}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{etcd_client}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{etcd_peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{etcd_peer}",
                "--initial-cluster",
                f"test=http://127.0.0.1:{etcd_peer}",
                "--unsafe-no-fsync",  # a test cluster: losing it to a crash costs nothing
            ],
        )
        # Flags as kubeadm's static pod manifest sets them (cmd/kubeadm/app/phases/controlplane/
        # manifests.go, getAPIServerCommand), for loopback and without a kubelet.
        _start(
            cluster,
            "kube-apiserver",
            [
                str(binaries / "kube-apiserver"),
                "--etcd-servers",
                f"http://127.0.0.1:{etcd_client}",
                "--bind-address",
                "127.0.0.1",
                "--advertise-address",
                "127.0.0.1",
                "--secure-port",
                str(port),
                "--tls-cert-file",
                str(pki / "apiserver.crt"),
                "--tls-private-key-file",
                str(pki / "apiserver.key"),
                "--client-ca-file",
                str(pki / "ca.crt"),
                "--service-account-key-file",
                str(pki / "sa.pub"),
                "--service-account-signing-key-file",
                str(pki / "sa.key"),
                "--service-account-issuer",
                "https://kubernetes.default.svc.cluster.local",
                "--service-cluster-ip-range",
                SERVICE_CIDR,
                "--authorization-mode",
                "Node,RBAC",
                "--enable-admission-plugins",
                "NodeRestriction",
                "--enable-bootstrap-token-auth=true",
                "--allow-privileged=true",
            ],
        )
        api = cluster.api()
        _wait(
            cluster,
            "kube-apiserver /readyz",
            lambda: api.session.get(cluster.server + "/readyz", timeout=5).status_code == 200,
        )
        # kubeadm's controllers (`*,bootstrapsigner,tokencleaner`). The node lifecycle
        # controller lifts the not-ready taint that the TaintNodesByCondition admission puts on
        # every new Node (plugin/pkg/admission/nodetaint) once the Node is Ready; no kubelet
        # renews the Nodes' leases here, so its grace period is an hour instead of 50 s, lest it
        # taint every Node unreachable mid-test.
        _start(
            cluster,
            "kube-controller-manager",
            [
                str(binaries / "kube-controller-manager"),
                *_control_loop_flags(cluster),
                "--use-service-account-credentials=true",
                "--controllers",
                "*,bootstrapsigner,tokencleaner",
                "--node-monitor-grace-period",
                "1h",
                "--root-ca-file",
                str(pki / "ca.crt"),
                "--cluster-signing-cert-file",
                str(pki / "ca.crt"),
                "--cluster-signing-key-file",
                str(pki / "ca.key"),
                "--service-account-private-key-file",
                str(pki / "sa.key"),
                "--service-cluster-ip-range",
                SERVICE_CIDR,
            ],
        )
        _start(
            cluster,
            "kube-scheduler",
            [
                str(binaries / "kube-scheduler"),
                *_control_loop_flags(cluster),
            ],
        )
        _wait(
            cluster,
            "the default ServiceAccount (controller manager up)",
            lambda: api.exists("/api/v1/namespaces/default/serviceaccounts/default"),
        )
    except BaseException:
        cluster.stop()
        raise
    return cluster


@contextlib.contextmanager
def running(directory: Path, binaries: Path, extra_ips: tuple[str, ...] = ()) -> Iterator[Cluster]:
    cluster = start(directory, binaries, extra_ips)
    try:
        yield cluster
    finally:
        cluster.stop()

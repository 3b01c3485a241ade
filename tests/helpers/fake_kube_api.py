"""A Kubernetes API server for the program's own API calls (components/kube/api/): HTTPS on
loopback that requires a client certificate of its CA, holding Nodes, Pods, PodDisruptionBudget
verdicts and Leases, and answering as kube-apiserver v1.35 does for what the program sends.

Its answers, each from its source in kubernetes/kubernetes:
- every error is a `metav1.Status` (kind Status, status Failure, message, reason, details,
  code), as k8s.io/apimachinery `pkg/api/errors` builds them: 404 NotFound `<resource>
  "<name>" not found`; 409 AlreadyExists `<resource> "<name>" already exists`;
- an update with a stale `metadata.resourceVersion` is 409 Conflict `Operation cannot be
  fulfilled on <resource> "<name>": the object has been modified; please apply your changes to
  the latest version and try again` (k8s.io/apiserver `pkg/registry/generic/registry/store.go`
  OptimisticLockErrorMsg); every write gets a new resourceVersion;
- a delete whose `preconditions.uid` is not the object's is 409 Conflict `Precondition failed:
  UID in precondition: ..., UID in object meta: ...` (k8s.io/apiserver `pkg/storage`
  `Preconditions.Check`);
- an eviction (`pods/<name>/eviction`, policy/v1) deletes the pod and answers 201 with a
  Success Status; one a disruption budget allows no disruption for is 429 TooManyRequests
  `Cannot evict pod as it would violate the pod's disruption budget.` with a DisruptionBudget
  cause `The disruption budget <pdb> needs <n> healthy pods and has <n> currently`; a missing
  pod 404 (pkg/registry/core/pod/storage/eviction.go `Create`, `checkAndDecrement`);
- GET /readyz answers `ok` (text/plain), as kube-apiserver's health checks do.
A test can make another client write an object between the program's read and its write
(`race`), as the node lifecycle controller or a second `up` would.
"""

from __future__ import annotations

import base64
import copy
import datetime
import http.server
import json
import re
import ssl
import tempfile
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CONFLICT = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def _status(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details,
        "code": code,
    }


SUCCESS = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}


class ApiAnswer(Exception):
    def __init__(self, code: int, body: dict[str, Any]):
        self.code, self.body = code, body


def not_found(resource: str, name: str) -> ApiAnswer:
    return ApiAnswer(404, _status(404, "NotFound", f'{resource} "{name}" not found', name=name))


@dataclass
class Cluster:
    """What the fake API server holds; tests put objects in and read them back."""

    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    leases: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Pods ("ns/name") a budget holds: the budget's name, desired and current healthy pods.
    budgets: dict[str, tuple[str, int, int]] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    # Called with (method, path) before a write is applied: it may write first (a race).
    race: Callable[[str, str], None] | None = None
    version: int = 100
    lock: threading.RLock = field(default_factory=threading.RLock)

    def stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        return obj

    def add_node(self, name: str, *, machine: str | None, ready: bool = True, **extra) -> dict:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "uid": f"uid-{name}-{self.version}", "labels": {}},
            "spec": {**({"providerID": f"aws:///us-west-2a/{machine}"} if machine else {})},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
        }
        for key, value in extra.items():
            node[key].update(value)
        self.nodes[name] = self.stamp(node)
        return node

    def add_pod(self, namespace: str, name: str, node: str, owner: str | None = "ReplicaSet"):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"namespace": namespace, "name": name, "uid": f"uid-{name}"},
            "spec": {"nodeName": node},
            "status": {"phase": "Running"},
        }
        if owner:
            pod["metadata"]["ownerReferences"] = [
                {"kind": owner, "name": f"{name}-owner", "controller": True}
            ]
        self.pods[(namespace, name)] = self.stamp(pod)
        return pod


class _Handler(http.server.BaseHTTPRequestHandler):
    cluster: Cluster

    def log_message(self, *_args) -> None:
        pass

    def _answer(self, code: int, body: Any) -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        kind = "text/plain" if isinstance(body, str) else "application/json"
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        cluster = self.cluster
        with cluster.lock:
            cluster.requests.append((self.command, url.path))
            if self.command != "GET" and cluster.race is not None:
                race, cluster.race = cluster.race, None
                race(self.command, url.path)
            try:
                code, answer = _route(cluster, self.command, url, body)
            except ApiAnswer as error:
                code, answer = error.code, error.body
        self._answer(code, answer)

    do_GET = do_PUT = do_POST = do_DELETE = _handle


def _route(cluster: Cluster, method: str, url, body) -> tuple[int, Any]:
    path, query = url.path, urllib.parse.parse_qs(url.query)
    if path == "/readyz":
        return 200, "ok"
    if match := re.fullmatch(r"/api/v1/nodes/([^/]+)", path):
        return _node(cluster, method, match.group(1), body)
    if path == "/api/v1/pods" and method == "GET":
        selector = query.get("fieldSelector", [""])[0].removeprefix("spec.nodeName=")
        items = [p for p in cluster.pods.values() if p["spec"]["nodeName"] == selector]
        return 200, {"kind": "PodList", "apiVersion": "v1", "items": copy.deepcopy(items)}
    if match := re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)(/eviction)?", path):
        return _pod(cluster, method, match.group(1), match.group(2), bool(match.group(3)))
    prefix = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
    if path.startswith(prefix):
        return _lease(cluster, method, path.removeprefix(prefix).strip("/"), body)
    raise ApiAnswer(
        404, _status(404, "NotFound", "the server could not find the requested resource")
    )


def _node(cluster: Cluster, method: str, name: str, body) -> tuple[int, Any]:
    node = cluster.nodes.get(name)
    if node is None:
        raise not_found("nodes", name)
    if method == "GET":
        return 200, copy.deepcopy(node)
    if method == "PUT":
        if body["metadata"].get("resourceVersion") != node["metadata"]["resourceVersion"]:
            message = f'Operation cannot be fulfilled on nodes "{name}": {CONFLICT}'
            raise ApiAnswer(409, _status(409, "Conflict", message, name=name, kind="nodes"))
        cluster.nodes[name] = cluster.stamp(copy.deepcopy(body))
        return 200, copy.deepcopy(cluster.nodes[name])
    if method == "DELETE":
        uid = ((body or {}).get("preconditions") or {}).get("uid")
        if uid is not None and uid != node["metadata"]["uid"]:
            message = (
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                f"{node['metadata']['uid']}"
            )
            raise ApiAnswer(409, _status(409, "Conflict", message, name=name, kind="nodes"))
        del cluster.nodes[name]
        return 200, SUCCESS
    raise ApiAnswer(405, _status(405, "MethodNotAllowed", f"{method} on a node"))


def _pod(cluster: Cluster, method: str, ns: str, name: str, eviction: bool) -> tuple[int, Any]:
    pod = cluster.pods.get((ns, name))
    if pod is None:
        raise not_found("pods", name)
    if eviction and method == "POST":
        if f"{ns}/{name}" in cluster.budgets:
            budget, desired, current = cluster.budgets[f"{ns}/{name}"]
            answer = _status(
                429,
                "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
                causes=[
                    {
                        "reason": "DisruptionBudget",
                        "message": f"The disruption budget {budget} needs {desired} healthy "
                        f"pods and has {current} currently",
                    }
                ],
            )
            raise ApiAnswer(429, answer)
        del cluster.pods[(ns, name)]
        return 201, SUCCESS
    if method == "GET":
        return 200, copy.deepcopy(pod)
    if method == "DELETE":
        del cluster.pods[(ns, name)]
        return 200, copy.deepcopy(pod)
    raise ApiAnswer(405, _status(405, "MethodNotAllowed", f"{method} on a pod"))


def _lease(cluster: Cluster, method: str, name: str, body) -> tuple[int, Any]:
    resource = "leases.coordination.k8s.io"
    if method == "POST":
        name = body["metadata"]["name"]
        if name in cluster.leases:
            message = f'{resource} "{name}" already exists'
            raise ApiAnswer(409, _status(409, "AlreadyExists", message, name=name))
        cluster.leases[name] = cluster.stamp(copy.deepcopy(body))
        return 201, copy.deepcopy(cluster.leases[name])
    lease = cluster.leases.get(name)
    if lease is None:
        raise not_found(resource, name)
    if method == "GET":
        return 200, copy.deepcopy(lease)
    if method == "PUT":
        version = body["metadata"].get("resourceVersion")
        if version and version != lease["metadata"]["resourceVersion"]:
            message = f'Operation cannot be fulfilled on {resource} "{name}": {CONFLICT}'
            raise ApiAnswer(409, _status(409, "Conflict", message, name=name))
        cluster.leases[name] = cluster.stamp(copy.deepcopy(body))
        return 200, copy.deepcopy(cluster.leases[name])
    raise ApiAnswer(405, _status(405, "MethodNotAllowed", f"{method} on a lease"))


# ---------------------------------------------------------------- certificates and kubeconfig


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _certificate(subject, issuer, key, signer, *, ca=False, server=False) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        import ipaddress

        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    elif not ca:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
    return builder.sign(signer, hashes.SHA256())


def _pem(value) -> bytes:
    if isinstance(value, x509.Certificate):
        return value.public_bytes(serialization.Encoding.PEM)
    return value.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


class FakeApiServer:
    """The fake API on 127.0.0.1 (an ephemeral port), TLS with a CA of its own, requiring a
    client certificate of that CA; `kubeconfig()` is an admin.conf-shaped kubeconfig for it."""

    def __init__(self, cluster: Cluster | None = None):
        self.cluster = cluster or Cluster()
        ca_key = ec.generate_private_key(ec.SECP256R1())
        self.ca = _certificate(_name("kubernetes"), _name("kubernetes"), ca_key, ca_key, ca=True)
        server_key = ec.generate_private_key(ec.SECP256R1())
        server = _certificate(
            _name("kube-apiserver"), self.ca.subject, server_key, ca_key, server=True
        )
        self.client_key = ec.generate_private_key(ec.SECP256R1())
        self.client = _certificate(
            _name("kubernetes-admin"), self.ca.subject, self.client_key, ca_key
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.TemporaryDirectory() as private:
            pair = Path(private) / "server.pem"
            pair.write_bytes(_pem(server_key) + _pem(server))
            context.load_cert_chain(pair)
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cadata=_pem(self.ca).decode())
        handler = type("Handler", (_Handler,), {"cluster": self.cluster})
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeApiServer:
        self.thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.httpd.server_address[1]}"

    def kubeconfig(self, *, with_client_certificate: bool = True) -> str:
        def b64(data: bytes) -> str:
            return base64.b64encode(data).decode()

        user: dict[str, str] = {}
        if with_client_certificate:
            user = {
                "client-certificate-data": b64(_pem(self.client)),
                "client-key-data": b64(_pem(self.client_key)),
            }
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "kubernetes",
                    "cluster": {
                        "certificate-authority-data": b64(_pem(self.ca)),
                        "server": self.server,
                    },
                }
            ],
            "contexts": [
                {
                    "name": "kubernetes-admin@kubernetes",
                    "context": {"cluster": "kubernetes", "user": "kubernetes-admin"},
                }
            ],
            "current-context": "kubernetes-admin@kubernetes",
            "users": [{"name": "kubernetes-admin", "user": user}],
        }
        return json.dumps(config)


def run_async(coroutine):
    """Run a hook's coroutine on a loop of its own, leaving the thread's current event loop as
    it was (`asyncio.run` unsets it, and the SDK's mocks need one for the next program run)."""
    import asyncio

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()

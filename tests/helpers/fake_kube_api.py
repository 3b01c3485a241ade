"""A fake kube-apiserver for the program's own API calls (components/kube/api/): HTTPS on
loopback with a CA of its own, holding Nodes, Pods, PodDisruptionBudget verdicts, Leases and
bootstrap-token Secrets, and answering as kube-apiserver v1.35 does for what the program sends.

Its answers, each from its source in kubernetes/kubernetes:
- who calls: a client certificate of its CA is the admin; it asks for one and verifies one that
  is given (RequestClientCert and the client CA), so a caller without one is system:anonymous,
  which RBAC refuses (403 Forbidden) but on the health and version paths the
  system:public-info-viewer ClusterRole opens (plugin/pkg/auth/authorizer/rbac/bootstrappolicy
  policy.go); a bearer token it does not know is 401 Unauthorized (apiserver
  pkg/endpoints/handlers/responsewriters `errors.go`, "Unauthorized");
- every error is a `metav1.Status` (kind Status, status Failure, message, reason, details,
  code), as k8s.io/apimachinery `pkg/api/errors` builds them: 404 NotFound `<resource>
  "<name>" not found`; 409 AlreadyExists `<resource> "<name>" already exists`; 403 Forbidden;
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
- a Secret created gets a uid, resourceVersion and creationTimestamp (201);
- GET /readyz answers `ok` (text/plain), as kube-apiserver's health checks do;
- a `Date` header on every answer (Go's server adds one when the handler set none: net/http
  server.go `chunkWriter.writeHeader`), from the fake's own clock (`server_now`), so tests can
  put the two clocks apart.
`authenticates(token, at)` judges a join token as the bootstrap token authenticator does
(plugin/pkg/auth/authenticator/token/bootstrap/bootstrap.go `AuthenticateToken`), `clean(at)`
deletes as the token cleaner does (pkg/controller/bootstrap/tokencleaner.go `evalSecret`,
cluster-bootstrap `util/secrets` `GetExpiration`). The kubeconfig it hands out is shaped as
kubeadm writes admin.conf. A test can make another client write an object between the
program's read and its write (`race`), as the node lifecycle controller or a second `up` would.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime
import email.utils
import http.server
import json
import re
import ssl
import tempfile
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from ipaddress import ip_address
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SYSTEM = "kube-system"
TOKEN_TYPE = "bootstrap.kubernetes.io/token"
CONFLICT = (
    "the object has been modified; please apply your changes to the latest version and try again"
)
# What system:public-info-viewer lets anyone read (bootstrappolicy policy.go).
PUBLIC_PATHS = frozenset({"/healthz", "/livez", "/readyz", "/version"})


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
    return ApiAnswer(
        404, _status(404, "NotFound", f'{resource} "{name}" not found', name=name, kind=resource)
    )


def secret_data(secret: dict[str, Any], key: str) -> str:
    """cluster-bootstrap util/secrets GetData: a data value, decoded ("" when absent)."""
    value = (secret.get("data") or {}).get(key)
    return base64.b64decode(value).decode() if value is not None else ""


def _expired(secret: dict[str, Any], at: datetime.datetime) -> bool:
    """cluster-bootstrap util/secrets GetExpiration: no expiration never expires; one that does
    not parse as RFC 3339 counts as expired."""
    text = secret_data(secret, "expiration")
    if not text:
        return False
    try:
        when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return True
    return at > when


@dataclass
class Cluster:
    """What the fake API server holds; tests put objects in and read them back."""

    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    leases: dict[str, dict[str, Any]] = field(default_factory=dict)
    secrets: dict[str, dict[str, Any]] = field(default_factory=dict)  # of kube-system
    # Pods ("ns/name") a budget holds: the budget's name, desired and current healthy pods.
    budgets: dict[str, tuple[str, int, int]] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)  # (method, path)
    bodies: list[tuple[str, Any]] = field(default_factory=list)  # (method, body) of each write
    # Called with (method, path) before a write is applied: it may write first (a race).
    race: Callable[[str, str], None] | None = None
    server_now: datetime.datetime | None = None  # the Date it answers with; None: real clock
    forbidden: bool = False  # RBAC refuses the admin too (every request but the public ones)
    tokens: frozenset[str] = frozenset()  # bearer tokens it authenticates
    # Answer this many more requests 503 ServiceUnavailable (an API server starting: apimachinery
    # errors.go NewServiceUnavailable), whoever asks.
    unavailable: int = 0
    version: int = 100
    lock: threading.RLock = field(default_factory=threading.RLock)

    def stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        return obj

    def add_node(self, name: str, *, machine: str | None, ready: bool = True, **extra) -> dict:
        """A Node as a kubelet of this program registers it: its providerID (join-node.sh's
        PROVIDER_ID: aws:///<zone>/<id>, or gpu-cluster:///host-<hex> for an existing host),
        or none (`machine=None`: registered before nodes carried it)."""
        provider = None
        if machine:
            provider = (
                f"gpu-cluster:///{machine}"
                if machine.startswith("host-")
                else f"aws:///us-west-2a/{machine}"
            )
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "uid": f"uid-{name}-{self.version}",
                "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
            },
            "spec": {**({"providerID": provider} if provider else {})},
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

    def posts(self) -> list[dict[str, Any]]:
        """The bodies of every POST, in order."""
        return [body for method, body in self.bodies if method == "POST" and body]

    def authenticates(self, token: str, at: datetime.datetime) -> bool:
        """bootstrap.go AuthenticateToken: the Secret named after the id exists, is of the
        bootstrap type, its secret and id match, it has not expired, and it may authenticate."""
        token_id, _, token_secret = token.partition(".")
        secret = self.secrets.get(f"bootstrap-token-{token_id}")
        return (
            secret is not None
            and secret.get("type") == TOKEN_TYPE
            and secret_data(secret, "token-secret") == token_secret
            and secret_data(secret, "token-id") == token_id
            and not _expired(secret, at)
            and secret_data(secret, "usage-bootstrap-authentication") == "true"
        )

    def clean(self, at: datetime.datetime) -> list[str]:
        """The token cleaner at `at`: deletes every expired bootstrap-token Secret."""
        gone = [
            name
            for name, secret in self.secrets.items()
            if secret.get("type") == TOKEN_TYPE and _expired(secret, at)
        ]
        for name in gone:
            del self.secrets[name]
        return gone


class _Handler(http.server.BaseHTTPRequestHandler):
    cluster: Cluster

    def log_message(self, *_args) -> None:
        pass

    def date_time_string(self, timestamp: float | None = None) -> str:
        if self.cluster.server_now is None:
            return super().date_time_string(timestamp)
        return email.utils.format_datetime(self.cluster.server_now, usegmt=True)

    def _answer(self, code: int, body: Any) -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        kind = "text/plain" if isinstance(body, str) else "application/json"
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _user(self) -> str | None:
        """Who calls (authentication): the admin, a known token's user, or system:anonymous;
        None for a token it does not know."""
        if self.connection.getpeercert():
            return "kubernetes-admin"
        header = self.headers.get("Authorization") or ""
        if header.startswith("Bearer "):
            return "token-user" if header.removeprefix("Bearer ") in self.cluster.tokens else None
        return "system:anonymous"

    def _handle(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        cluster = self.cluster
        user = self._user()
        with cluster.lock:
            cluster.requests.append((self.command, url.path))
            if self.command != "GET":
                cluster.bodies.append((self.command, copy.deepcopy(body)))
            try:
                if cluster.unavailable:
                    cluster.unavailable -= 1
                    raise ApiAnswer(503, _status(503, "ServiceUnavailable", "starting"))
                _authorize(cluster, user, self.command, url.path)
                if self.command != "GET" and cluster.race is not None:
                    race, cluster.race = cluster.race, None
                    race(self.command, url.path)
                code, answer = _route(cluster, self.command, url, body)
            except ApiAnswer as error:
                code, answer = error.code, error.body
        self._answer(code, answer)

    do_GET = do_PUT = do_POST = do_DELETE = _handle


def _authorize(cluster: Cluster, user: str | None, method: str, path: str) -> None:
    if user is None:
        raise ApiAnswer(401, _status(401, "Unauthorized", "Unauthorized"))
    if path in PUBLIC_PATHS and method == "GET":
        return
    if user == "system:anonymous" or cluster.forbidden:
        resource = path.strip("/").split("/")[-1]
        message = f'{resource} is forbidden: User "{user}" cannot {method.lower()} resource'
        raise ApiAnswer(403, _status(403, "Forbidden", message))


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
    prefix = f"/apis/coordination.k8s.io/v1/namespaces/{SYSTEM}/leases"
    if path.startswith(prefix):
        return _lease(cluster, method, path.removeprefix(prefix).strip("/"), body)
    prefix = f"/api/v1/namespaces/{SYSTEM}/secrets"
    if path.startswith(prefix):
        return _secret(cluster, method, path.removeprefix(prefix).strip("/"), body)
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


def _secret(cluster: Cluster, method: str, name: str, body) -> tuple[int, Any]:
    if method == "POST" and not name:
        name = body["metadata"]["name"]
        if name in cluster.secrets:
            message = f'secrets "{name}" already exists'
            raise ApiAnswer(409, _status(409, "AlreadyExists", message, name=name, kind="secrets"))
        created = copy.deepcopy(body)
        created["metadata"].update(uid=f"uid-{name}", creationTimestamp="2026-01-01T00:00:00Z")
        cluster.secrets[name] = cluster.stamp(created)
        return 201, copy.deepcopy(created)
    secret = cluster.secrets.get(name)
    if secret is None:
        raise not_found("secrets", name)
    if method == "GET":
        return 200, copy.deepcopy(secret)
    raise ApiAnswer(405, _status(405, "MethodNotAllowed", f"{method} on a secret"))


# ---------------------------------------------------------------- certificates and kubeconfig


@dataclass(frozen=True)
class Pki:
    """A cluster CA, a server certificate for 127.0.0.1 and an admin client certificate."""

    ca_pem: str
    server_pem: str
    client_cert_pem: str
    client_key_pem: str


def _name(common: str, org: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common)]
    if org:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(parts)


def make_pki(ca_name: str = "kubernetes") -> Pki:
    """As kubeadm's: a CA named `kubernetes`, the apiserver's serving certificate (here for
    127.0.0.1) and `kubernetes-admin` in group kubeadm:cluster-admins (kubeadm 1.29+)."""
    start = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=1)
    end = start + datetime.timedelta(days=3)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name(ca_name))
        .issuer_name(_name(ca_name))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )

    def issued(subject: x509.Name, server: bool) -> tuple[str, str]:
        key = ec.generate_private_key(ec.SECP256R1())
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ip_address("127.0.0.1"))]),
                critical=False,
            )
        cert = builder.sign(ca_key, hashes.SHA256())
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        ).decode()
        return cert.public_bytes(serialization.Encoding.PEM).decode(), key_pem

    server_cert, server_key = issued(_name("kube-apiserver"), server=True)
    client_cert, client_key = issued(
        _name("kubernetes-admin", "kubeadm:cluster-admins"), server=False
    )
    return Pki(
        ca_pem=ca.public_bytes(serialization.Encoding.PEM).decode(),
        server_pem=server_cert + server_key,
        client_cert_pem=client_cert,
        client_key_pem=client_key,
    )


def kubeconfig(server: str, ca_pem: str, cert_pem: str, key_pem: str) -> str:
    """An admin.conf as kubeadm writes it (clientcmd.Write: keys sorted, data base64)."""

    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    return (
        "apiVersion: v1\nclusters:\n- cluster:\n"
        f"    certificate-authority-data: {b64(ca_pem)}\n    server: {server}\n"
        "  name: kubernetes\ncontexts:\n- context:\n    cluster: kubernetes\n"
        "    user: kubernetes-admin\n  name: kubernetes-admin@kubernetes\n"
        "current-context: kubernetes-admin@kubernetes\nkind: Config\npreferences: {}\n"
        "users:\n- name: kubernetes-admin\n  user:\n"
        f"    client-certificate-data: {b64(cert_pem)}\n"
        f"    client-key-data: {b64(key_pem)}\n"
    )


class FakeApiServer:
    """The fake API on 127.0.0.1 (an ephemeral port), TLS with a CA of its own, verifying a
    client certificate of that CA when one is given; `kubeconfig()` is its admin.conf."""

    def __init__(self, cluster: Cluster | None = None):
        self.cluster = cluster or Cluster()
        self.pki = make_pki()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.TemporaryDirectory() as private:
            pair = Path(private) / "server.pem"
            pair.write_text(self.pki.server_pem)
            context.load_cert_chain(pair)
        # kube-apiserver asks for a client certificate and verifies one that is given
        # (RequestClientCert and the client CA); a request without one is system:anonymous.
        context.verify_mode = ssl.CERT_OPTIONAL
        context.load_verify_locations(cadata=self.pki.ca_pem)
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

    def kubeconfig(self, *, pki: Pki | None = None) -> str:
        """The admin kubeconfig of this API; with `pki`, another cluster's (its CA and client
        certificate), which this API's TLS refuses."""
        source = pki or self.pki
        return kubeconfig(self.server, source.ca_pem, source.client_cert_pem, source.client_key_pem)


def run_async(coroutine):
    """Run a hook's coroutine on a loop of its own, leaving the thread's current event loop as
    it was (`asyncio.run` unsets it, and the SDK's mocks need one for the next program run)."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()

"""A fake kube-apiserver for what the program's hooks call: real HTTPS on loopback, its own CA,
client certificates checked, and the answers of the real one for the few paths they use.

What it stands for, and where each answer comes from (Kubernetes 1.35):
- `GET /api/v1/nodes/{name}`, `GET|POST /api/v1/namespaces/kube-system/secrets[/{name}]`: the
  object (201 on create, with uid, resourceVersion, creationTimestamp), or a `Status`
  (apimachinery `pkg/api/errors/errors.go`: NewNotFound `nodes "x" not found`, NewAlreadyExists
  `secrets "x" already exists`, NewForbidden for a request without a client certificate, which
  kube-apiserver takes as system:anonymous and RBAC refuses).
- A `Date` header on every answer (Go's server adds one when the handler set none: net/http
  server.go `chunkWriter.writeHeader`, x/net/http2 server.go `writeChunk`), from the fake's own
  clock (`server_now`), so tests can put the two clocks apart.
- `authenticates(token, at)`: the bootstrap token authenticator's checks
  (plugin/pkg/auth/authenticator/token/bootstrap/bootstrap.go `AuthenticateToken`); `clean(at)`:
  the token cleaner's (pkg/controller/bootstrap/tokencleaner.go `evalSecret`, cluster-bootstrap
  `util/secrets` `GetExpiration`: an expired or unreadable expiration is deleted).
- The kubeconfig it hands out is shaped as kubeadm writes admin.conf (embedded CA, client
  certificate and key, one context), which read-kubeconfig.sh prints.
"""

from __future__ import annotations

import base64
import datetime
import email.utils
import itertools
import json
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import ip_address
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

SYSTEM = "kube-system"


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
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [x509.ExtendedKeyUsageOID.SERVER_AUTH if server else x509.OID_CLIENT_AUTH]
                ),
                critical=False,
            )
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


def status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict:
    """A failure `Status` as kube-apiserver serialises it (errors.go)."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return body


def node(name: str, *, instance_id: str | None, zone: str = "us-west-2a") -> dict[str, Any]:
    """A Node as a kubelet of this program registers it: the instance-id label and providerID
    (join-node.sh), or neither (`instance_id=None`: registered before nodes carried them)."""
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
    spec: dict[str, Any] = {}
    if instance_id is not None:
        labels["gpu-cluster.io/instance-id"] = instance_id
        spec["providerID"] = f"aws:///{zone}/{instance_id}"
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": labels},
        "spec": spec,
    }


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
class FakeApi:
    """The cluster's objects and the requests it was sent (method, path, body)."""

    pki: Pki
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    secrets: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[tuple[str, str, dict[str, Any] | None]] = field(default_factory=list)
    server_now: datetime.datetime | None = None  # None: the real clock
    forbidden: bool = False  # answer every request as RBAC refusing it
    url: str = ""
    _versions: Iterator[int] = field(default_factory=lambda: itertools.count(1000))

    def kubeconfig(self, *, pki: Pki | None = None) -> str:
        """The admin kubeconfig of this API; with `pki`, another cluster's (its CA and client
        certificate), which this API's TLS refuses."""
        source = pki or self.pki
        return kubeconfig(self.url, source.ca_pem, source.client_cert_pem, source.client_key_pem)

    def posts(self) -> list[dict[str, Any]]:
        return [body for method, _, body in self.requests if method == "POST" and body]

    def authenticates(self, token: str, at: datetime.datetime) -> bool:
        """bootstrap.go AuthenticateToken: the Secret named after the id exists, is of the
        bootstrap type, its secret and id match, it has not expired, and it may authenticate."""
        token_id, _, token_secret = token.partition(".")
        secret = self.secrets.get(f"bootstrap-token-{token_id}")
        return (
            secret is not None
            and secret.get("type") == "bootstrap.kubernetes.io/token"
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
            if secret.get("type") == "bootstrap.kubernetes.io/token" and _expired(secret, at)
        ]
        for name in gone:
            del self.secrets[name]
        return gone

    def answer(
        self, method: str, path: str, body: dict[str, Any] | None, anonymous: bool
    ) -> tuple[int, dict[str, Any]]:
        self.requests.append((method, path, body))
        parts = path.strip("/").split("/")
        if anonymous or self.forbidden:
            user = "system:anonymous" if anonymous else "kubernetes-admin"
            return 403, status(
                403,
                "Forbidden",
                f'{parts[-1]} is forbidden: User "{user}" cannot {method.lower()} resource',
            )
        if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4 and method == "GET":
            return self._get(self.nodes, "nodes", parts[3])
        if parts[:5] == ["api", "v1", "namespaces", SYSTEM, "secrets"]:
            if len(parts) == 6 and method == "GET":
                return self._get(self.secrets, "secrets", parts[5])
            if len(parts) == 5 and method == "POST" and body is not None:
                return self._create(body)
        return 404, status(404, "NotFound", "the server could not find the requested resource")

    def _get(self, store: dict[str, Any], kind: str, name: str) -> tuple[int, dict[str, Any]]:
        if name not in store:
            details = {"name": name, "kind": kind}
            return 404, status(404, "NotFound", f'{kind} "{name}" not found', details)
        return 200, store[name]

    def _create(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        name = body.get("metadata", {}).get("name", "")
        if name in self.secrets:
            details = {"name": name, "kind": "secrets"}
            return 409, status(409, "AlreadyExists", f'secrets "{name}" already exists', details)
        created = json.loads(json.dumps(body))
        created["metadata"].update(
            uid=f"uid-{name}",
            resourceVersion=str(next(self._versions)),
            creationTimestamp="2026-01-01T00:00:00Z",
        )
        self.secrets[name] = created
        return 201, created


@contextmanager
def fake_api(tmp_path: Path) -> Iterator[FakeApi]:
    """A FakeApi serving on 127.0.0.1 (an ephemeral port) until the block ends."""
    pki = make_pki()
    api = FakeApi(pki)
    server_file = tmp_path / "apiserver.pem"
    server_file.write_text(pki.server_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(server_file)
    # kube-apiserver asks for a client certificate and verifies one that is given
    # (RequestClientCert + the client CA); a request without one is system:anonymous.
    context.verify_mode = ssl.CERT_OPTIONAL
    context.load_verify_locations(cadata=pki.ca_pem)

    class Handler(BaseHTTPRequestHandler):
        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            anonymous = not self.connection.getpeercert()
            code, answer = api.answer(method, self.path, body, anonymous)
            payload = json.dumps(answer).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def date_time_string(self, timestamp: float | None = None) -> str:
            if api.server_now is None:
                return super().date_time_string(timestamp)
            return email.utils.format_datetime(api.server_now, usegmt=True)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    api.url = f"https://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
        thread.join()

"""A Kubernetes API client for the program's own calls: JSON over HTTPS with the credential of
a kubeconfig, in this process. No kubectl and no child process, so the credential never reaches
an environment, a command line or a log; it is read when a call is made, so a call always runs
with the credential the program holds then, never one stored with a resource.

It speaks what a kubeadm admin.conf or a token kubeconfig holds (`*-data` fields, `token`) and
refuses the rest by name. Each request is bounded; errors carry the API's own `Status` (code,
reason, message, causes), which callers branch on. Why a small module and not the `kubernetes`
package: docs/decisions/052-a-node-leaves-through-the-api.md.
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import os
import ssl
import tempfile
import urllib.parse
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import yaml

# A request that takes longer than this is an API server that does not answer.
REQUEST_TIMEOUT_SECONDS = 30
# What a kubeconfig may say that this client cannot honour: each is refused by name.
UNSUPPORTED_USER_FIELDS = (
    "exec",
    "auth-provider",
    "client-certificate",
    "client-key",
    "tokenFile",
    "username",
    "password",
)
UNSUPPORTED_CLUSTER_FIELDS = ("certificate-authority", "insecure-skip-tls-verify", "proxy-url")


class KubeconfigError(ValueError):
    """A kubeconfig this client cannot use; the message names the field, never its value."""


@dataclass(frozen=True)
class Credential:
    """Where the API is and who calls it: the server, its CA, and a client certificate and key
    or a bearer token (PEM and token text; never printed: `repr` shows the server only)."""

    server: str
    ca_pem: str | None = field(default=None, repr=False)
    cert_pem: str | None = field(default=None, repr=False)
    key_pem: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)


def credential_of(kubeconfig: str) -> Credential:
    """The current context's cluster and user of a kubeconfig (YAML)."""
    config = yaml.safe_load(kubeconfig) or {}
    if not isinstance(config, dict):
        raise KubeconfigError("the kubeconfig is not a YAML mapping")
    current = config.get("current-context")
    context = _named(config, "contexts", current, "context")
    cluster = _named(config, "clusters", context.get("cluster"), "cluster")
    user = _named(config, "users", context.get("user"), "user")
    for name in UNSUPPORTED_CLUSTER_FIELDS:
        if cluster.get(name):
            raise KubeconfigError(f"kubeconfig cluster field {name!r} is not supported")
    for name in UNSUPPORTED_USER_FIELDS:
        if user.get(name):
            raise KubeconfigError(f"kubeconfig user field {name!r} is not supported")
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith("https://"):
        raise KubeconfigError("the kubeconfig's cluster has no https:// server")
    credential = Credential(
        server=server.rstrip("/"),
        ca_pem=_pem(cluster, "certificate-authority-data"),
        cert_pem=_pem(user, "client-certificate-data"),
        key_pem=_pem(user, "client-key-data"),
        token=user.get("token") or None,
    )
    if bool(credential.cert_pem) != bool(credential.key_pem):
        raise KubeconfigError("the kubeconfig's user has a client certificate or key, not both")
    if not credential.cert_pem and not credential.token:
        raise KubeconfigError("the kubeconfig's user has neither a client certificate nor a token")
    return credential


def _named(config: dict[str, Any], section: str, name: Any, key: str) -> dict[str, Any]:
    for item in config.get(section) or []:
        if isinstance(item, dict) and item.get("name") == name:
            value = item.get(key)
            if isinstance(value, dict):
                return value
    raise KubeconfigError(f"the kubeconfig has no {key} named {name!r} in {section!r}")


def _pem(section: dict[str, Any], key: str) -> str | None:
    value = section.get(key)
    if not value:
        return None
    try:
        return base64.b64decode(value, validate=True).decode("ascii")
    except ValueError as error:
        raise KubeconfigError(f"kubeconfig field {key!r} is not base64 of a PEM") from error


class ApiError(Exception):
    """A call the API server refused: its HTTP code and its `Status` reason, message and causes
    (k8s.io/apimachinery `metav1.Status`)."""

    def __init__(self, method: str, path: str, code: int, status: Mapping[str, Any]):
        self.code = code
        self.reason = str(status.get("reason") or "")
        self.message = str(status.get("message") or "")
        details = status.get("details") or {}
        self.causes = [str(c.get("message", "")) for c in details.get("causes") or []]
        super().__init__(f"{method} {path}: {code} {self.reason}: {self.message}".rstrip(": "))


class KubeApi:
    """Blocking calls to the API server of one credential (`call`); `AsyncKubeApi` runs them
    off the event loop."""

    def __init__(self, credential: Credential, timeout_seconds: float = REQUEST_TIMEOUT_SECONDS):
        parsed = urllib.parse.urlsplit(credential.server)
        self.host = parsed.hostname or ""
        self.port = parsed.port or 443
        self.prefix = parsed.path.rstrip("/")
        self.token = credential.token
        self.timeout_seconds = timeout_seconds
        self.context = _tls_context(credential)

    def call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        query: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """One request; the decoded JSON answer, or ApiError for any code above 299."""
        target = self.prefix + path
        if query:
            target += "?" + urllib.parse.urlencode(query)
        headers = {"Accept": "application/json"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        connection = http.client.HTTPSConnection(
            self.host, self.port, timeout=self.timeout_seconds, context=self.context
        )
        try:
            connection.request(method, target, body=payload, headers=headers)
            response = connection.getresponse()
            raw = response.read()
        finally:
            connection.close()
        answer = _json(raw)
        if response.status > 299:
            if answer.get("kind") != "Status":
                answer = {"message": raw[:300].decode(errors="replace")}
            raise ApiError(method, path, response.status, answer)
        return answer


def _json(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _tls_context(credential: Credential) -> ssl.SSLContext:
    """Verify the server against the kubeconfig's CA (the system's when it names none); present
    the client certificate. `load_cert_chain` reads files only: the pair is written 0600 into a
    private directory and removed as soon as it is loaded."""
    context = ssl.create_default_context(cadata=credential.ca_pem)
    if credential.cert_pem and credential.key_pem:
        with tempfile.TemporaryDirectory(prefix="gpu-cluster-api-") as private:
            path = os.path.join(private, "client.pem")
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w", encoding="ascii") as pair:
                pair.write(credential.key_pem + "\n" + credential.cert_pem)
            context.load_cert_chain(path)
    return context


# Calls run on threads of their own, not the event loop's default executor: the SDK needs that
# one for its own RPCs while a drain waits.
_CALLS = ThreadPoolExecutor(max_workers=16, thread_name_prefix="gpu-cluster-api")


class AsyncKubeApi:
    """`KubeApi.call`, awaited: the hooks run on the program's event loop, which must stay free
    while a call waits for the API server."""

    def __init__(self, api: KubeApi):
        self.api = api

    async def call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        query: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_CALLS, self.api.call, method, path, body, query)

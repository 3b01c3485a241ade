"""A Kubernetes API client for the program's own calls: JSON over HTTPS with the credential of
a kubeconfig, in this process. No kubectl and no child process, so the credential never reaches
an environment, a command line or a log; it is read when a call is made, so a call always runs
with the credential the program holds then, never one stored with a resource.

It speaks what a kubeadm admin.conf or a token kubeconfig holds (`*-data` fields, `token`) and
refuses the rest by name. The client key is loaded from memory (a memfd), never a file on disk.
Each request is bounded and a transient failure is tried again; `request` gives the answer
(status, body, the server's `Date`), `call` the body or an ApiError with the API's own `Status`
(code, reason, message, causes), which callers branch on. Why a small module and not the
`kubernetes` package: docs/decisions/058-a-node-leaves-through-the-api.md.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import email.utils
import http.client
import json
import os
import ssl
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import yaml

# A request that takes longer than this is an API server that does not answer.
REQUEST_TIMEOUT_SECONDS = 30
# Answers worth another try: the server's own "try again" (apimachinery errors.go
# NewTooManyRequests, NewServiceUnavailable, NewServerTimeout, NewTimeoutError) and a gateway's;
# tried ATTEMPTS times in all, 1 s, 2 s, 4 s apart. An eviction's 429 is not one: it is the
# disruption budget's verdict (eviction.go), which the drain waits out itself at kubectl's pace.
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
ATTEMPTS = 4
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
    (k8s.io/apimachinery `metav1.Status`); code 0 when no answer came (no connection, a TLS
    handshake refused). The message names no credential."""

    def __init__(self, method: str, path: str, code: int, status: Mapping[str, Any]):
        self.code = code
        self.reason = str(status.get("reason") or "")
        self.message = str(status.get("message") or "")
        details = status.get("details") or {}
        self.causes = [str(c.get("message", "")) for c in details.get("causes") or []]
        super().__init__(f"{method} {path}: {code} {self.reason}: {self.message}".rstrip(": "))


@dataclass(frozen=True)
class Answer:
    """One response: its status, its JSON body (a `Status` object on failure) and the server's
    `Date` header (None when absent)."""

    status: int
    body: dict[str, Any]
    date: datetime | None

    @property
    def reason(self) -> str:
        """A failure's `reason` (NotFound, AlreadyExists, Forbidden, ...), "" otherwise."""
        return str(self.body.get("reason", "")) if self.body.get("kind") == "Status" else ""

    @property
    def message(self) -> str:
        return str(self.body.get("message", "")) if self.body.get("kind") == "Status" else ""


class KubeApi:
    """Blocking calls to the API server of one credential (`request`, `call`); `AsyncKubeApi`
    runs them off the event loop. `pause` waits between tries (tests pass one that does not)."""

    def __init__(
        self,
        credential: Credential,
        timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
        *,
        attempts: int = ATTEMPTS,
        pause: Callable[[float], None] = time.sleep,
    ):
        parsed = urllib.parse.urlsplit(credential.server)
        self.host = parsed.hostname or ""
        self.port = parsed.port or 443
        self.prefix = parsed.path.rstrip("/")
        self.token = credential.token
        self.timeout_seconds = timeout_seconds
        self.attempts = attempts
        self.pause = pause
        self.context = _tls_context(credential)

    def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        query: Mapping[str, str] | None = None,
    ) -> Answer:
        """One request, tried again after a transient failure; the last answer, whatever its
        status, or ApiError (code 0) when none came."""
        where = f"https://{self.host}:{self.port}{self.prefix}{path}"
        retried = RETRIED_STATUSES - ({429} if path.endswith("/eviction") else set())
        attempt = 1
        while True:
            try:
                answer = self._once(method, path, body, query)
            except ssl.SSLError as error:  # a certificate that does not verify: no retry helps
                status = {"message": f"TLS failed ({error.reason or error})"}
                raise ApiError(method, where, 0, status) from None
            except OSError as error:
                if attempt >= self.attempts:
                    status = {"message": f"no answer after {attempt} tries ({error})"}
                    raise ApiError(method, where, 0, status) from None
            else:
                if answer.status not in retried or attempt >= self.attempts:
                    return answer
            self.pause(2 ** (attempt - 1))
            attempt += 1

    def call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        query: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """`request`'s decoded JSON body, or ApiError for any code above 299."""
        answer = self.request(method, path, body, query)
        if answer.status > 299:
            raise ApiError(method, path, answer.status, answer.body)
        return answer.body

    def _once(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        query: Mapping[str, str] | None,
    ) -> Answer:
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
            date = response.getheader("Date")
        finally:
            connection.close()
        parsed = _json(raw)
        if response.status > 299 and parsed.get("kind") != "Status":
            parsed = {"message": raw[:300].decode(errors="replace")}
        return Answer(response.status, parsed, _date(date))


def _date(header: str | None) -> datetime | None:
    """An HTTP Date header (RFC 9110 IMF-fixdate) as an aware datetime."""
    if not header:
        return None
    try:
        return email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return None


def _json(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _tls_context(credential: Credential) -> ssl.SSLContext:
    """Verify the server against the kubeconfig's CA (the system's when it names none); present
    the client certificate, loaded from an in-memory file closed right after (`load_cert_chain`
    takes a path only)."""
    context = ssl.create_default_context(cadata=credential.ca_pem)
    if credential.cert_pem and credential.key_pem:
        with _memory_file(f"{credential.key_pem.strip()}\n{credential.cert_pem.strip()}\n") as path:
            context.load_cert_chain(path)
    return context


@contextlib.contextmanager
def _memory_file(text: str) -> Iterator[str]:
    """A path to `text` that never touches a disk (Linux memfd_create)."""
    fd = os.memfd_create("gpu-cluster-client", os.MFD_CLOEXEC)
    try:
        data = memoryview(text.encode())
        while data:
            data = data[os.write(fd, data) :]
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


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

    async def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        query: Mapping[str, str] | None = None,
    ) -> Answer:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_CALLS, self.api.request, method, path, body, query)

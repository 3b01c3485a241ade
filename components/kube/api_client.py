"""The Kubernetes API called from the program itself, for work that must happen when a step runs
(a join token minted by a resource hook), with this run's credential (the control plane's
kubeconfig Output), never one stored in the state.

Standard library only: HTTPS verified against the kubeconfig's CA, the client certificate read
from memory (a memfd, never a file on disk), JSON bodies. Transient failures (no connection,
429, 5xx) are retried a few times; any other answer is the caller's to judge.
Why: docs/decisions/057-a-join-token-is-minted-when-a-node-must-join.md
"""

from __future__ import annotations

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
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import yaml

# Answers worth another try: the server's own "try again" (apimachinery errors.go
# NewTooManyRequests, NewServiceUnavailable, NewServerTimeout, NewTimeoutError) and a gateway's.
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})


class ApiError(Exception):
    """The API could not be reached or refused a request; the message names no credential."""


@dataclass(frozen=True)
class Access:
    """Where the API is and how to prove who we are: the parts of a kubeconfig a client uses."""

    host: str
    port: int
    ca_pem: str
    client_pem: str = field(repr=False)  # certificate and key, PEM

    @classmethod
    def of_kubeconfig(cls, text: str) -> Access:
        """The current context's cluster and user, as kubeadm writes admin.conf (embedded
        `certificate-authority-data`, `client-certificate-data`, `client-key-data`)."""
        try:
            config = yaml.safe_load(text)
            context = _named(config["contexts"], config["current-context"])["context"]
            cluster = _named(config["clusters"], context["cluster"])["cluster"]
            user = _named(config["users"], context["user"])["user"]
            ca, cert, key = (
                base64.b64decode(source[name]).decode()
                for source, name in (
                    (cluster, "certificate-authority-data"),
                    (user, "client-certificate-data"),
                    (user, "client-key-data"),
                )
            )
        except (KeyError, TypeError, ValueError, yaml.YAMLError) as error:
            # A missing field's name at most: the kubeconfig holds the admin's key.
            what = f"no entry {error}" if isinstance(error, KeyError) else "not readable"
            raise ApiError(
                f"the control plane's kubeconfig: {what} (its current context, cluster and user "
                "with embedded CA, client certificate and key, as kubeadm writes admin.conf)"
            ) from None
        server = urllib.parse.urlsplit(cluster.get("server", ""))
        if server.scheme != "https" or not server.hostname:
            raise ApiError(f"the kubeconfig's server is not an https URL: {server.geturl()!r}")
        return cls(server.hostname, server.port or 443, ca, f"{cert.strip()}\n{key.strip()}\n")


def _named(entries: list[Mapping[str, Any]], name: str) -> Mapping[str, Any]:
    for entry in entries:
        if entry.get("name") == name:
            return entry
    raise KeyError(name)


@dataclass(frozen=True)
class Answer:
    """One response: its status, its JSON body (a Status object on failure) and the server's
    `Date` header (None when absent)."""

    status: int
    body: Mapping[str, Any]
    date: datetime | None

    @property
    def reason(self) -> str:
        """A failure's `reason` (NotFound, AlreadyExists, Forbidden, ...), "" otherwise."""
        return str(self.body.get("reason", "")) if self.body.get("kind") == "Status" else ""

    @property
    def message(self) -> str:
        return str(self.body.get("message", "")) if self.body.get("kind") == "Status" else ""


class Api:
    """Requests to one API server: `call("GET", "/api/v1/nodes/x")` gives the Answer."""

    def __init__(
        self,
        access: Access,
        *,
        timeout_seconds: float = 30,
        attempts: int = 4,
        pause: Callable[[float], None] = time.sleep,
    ):
        self._access = access
        self._timeout = timeout_seconds
        self._attempts = attempts
        self._pause = pause
        self._context = _tls_context(access)

    def call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Answer:
        where = f"{method} https://{self._access.host}:{self._access.port}{path}"
        attempt = 1
        while True:
            try:
                answer = self._once(method, path, body)
            except ssl.SSLError as error:  # a certificate that does not verify: no retry helps
                raise ApiError(f"{where}: TLS failed ({error.reason or error})") from None
            except OSError as error:
                if attempt == self._attempts:
                    raise ApiError(f"{where}: no answer after {attempt} tries ({error})") from None
            else:
                if answer.status not in RETRIED_STATUSES or attempt == self._attempts:
                    return answer
            self._pause(2 ** (attempt - 1))
            attempt += 1

    def _once(self, method: str, path: str, body: Mapping[str, Any] | None) -> Answer:
        connection = http.client.HTTPSConnection(
            self._access.host, self._access.port, timeout=self._timeout, context=self._context
        )
        try:
            payload = None if body is None else json.dumps(body).encode()
            headers = {"Accept": "application/json"}
            if payload is not None:
                headers["Content-Type"] = "application/json"
            connection.request(method, path, body=payload, headers=headers)
            response = connection.getresponse()
            raw = response.read()
            date = response.getheader("Date")
        finally:
            connection.close()
        try:
            parsed = json.loads(raw) if raw else {}
        except ValueError:
            parsed = {}
        return Answer(response.status, parsed if isinstance(parsed, dict) else {}, _date(date))


def _date(header: str | None) -> datetime | None:
    """An HTTP Date header (RFC 9110 IMF-fixdate) as an aware datetime."""
    if not header:
        return None
    try:
        return email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return None


def _tls_context(access: Access) -> ssl.SSLContext:
    """Verify the server against the cluster's CA (and its name or address), and present the
    client certificate, loaded from an in-memory file that is closed right after."""
    context = ssl.create_default_context(cadata=access.ca_pem)
    with _memory_file(access.client_pem) as path:
        context.load_cert_chain(path)
    return context


@contextlib.contextmanager
def _memory_file(text: str) -> Iterator[str]:
    """A path to `text` that never touches a disk (Linux memfd_create), for APIs that take a
    path only (`SSLContext.load_cert_chain`)."""
    fd = os.memfd_create("gpu-cluster-client", os.MFD_CLOEXEC)
    try:
        data = memoryview(text.encode())
        while data:
            data = data[os.write(fd, data) :]
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)

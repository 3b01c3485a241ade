"""A node's kubelet serving certificate request, approved through the API at its put in service
only when it asks for the names the program knows that machine by (kubelet_serving.py); the
names are recorded for the managed control plane's renewals (`record`) and forgotten when the
node leaves (`forget`).

The request (PEM PKCS#10, RFC 2986) is read with a small DER reader of its own: subject exactly
O=system:nodes, CN=system:node:<node>, one extension, the subject alternative names, each known.
Its signature is the API server's to check (kubernetes certificates validation `validateCSR`,
`CheckSignature`: refused at create).
Why: docs/decisions/061-kubelet-serving-certificates-for-the-names-the-program-knows.md
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from components.kube.api.client import ApiError
from components.kube.api.nodes import Api, Clock, Say

CSR_PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
SIGNER = "kubernetes.io/kubelet-serving"
# The two usage sets the kubelet-serving signer takes (pkg/apis/certificates/v1/helpers.go
# ValidateKubeletServingCSR; client-go util/certificate DefaultKubeletServingGetUsages: key
# encipherment for an RSA key only).
USAGES = (
    frozenset({"digital signature", "server auth"}),
    frozenset({"digital signature", "key encipherment", "server auth"}),
)
APPROVAL_REASON = "GpuClusterApprove"
POLL_SECONDS = 5
# The record of a node's names the managed control plane's timer reads (init-control-plane.sh
# SERVING_NAMES_PREFIX): ConfigMap kube-system/<prefix><node>, key KEY.
RECORD_NAMESPACE = "kube-system"
RECORD_PREFIX = "gpu-cluster-serving-"
RECORD_KEY = "subjectAltNames"
RECORDS_PATH = f"/api/v1/namespaces/{RECORD_NAMESPACE}/configmaps"
_MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-cluster"}  # manifests.MANAGED_BY

_COMMON_NAME, _ORGANIZATION = "2.5.4.3", "2.5.4.10"
_EXTENSION_REQUEST = "1.2.840.113549.1.9.14"  # PKCS#9 extensionRequest (RFC 2985)
_SUBJECT_ALT_NAME = "2.5.29.17"
_DNS_NAME, _IP_ADDRESS = 0x82, 0x87  # GeneralName [2] dNSName, [7] iPAddress (RFC 5280)
_STRINGS = {0x0C: "utf-8", 0x13: "ascii", 0x16: "ascii"}  # UTF8, Printable, IA5


class Malformed(ValueError):
    pass


def _items(data: bytes) -> list[tuple[int, bytes]]:
    """The DER elements of `data`, in order: (tag, contents)."""
    found, at = [], 0
    while at < len(data):
        if at + 2 > len(data):
            raise Malformed("truncated element")
        tag, length = data[at], data[at + 1]
        at += 2
        if length & 0x80:
            size = length & 0x7F
            if size == 0 or size > 4 or at + size > len(data):
                raise Malformed("bad length")
            length = int.from_bytes(data[at : at + size], "big")
            at += size
        if at + length > len(data):
            raise Malformed("element longer than its container")
        found.append((tag, data[at : at + length]))
        at += length
    return found


def _one(data: bytes, tag: int) -> bytes:
    items = _items(data)
    if len(items) != 1 or items[0][0] != tag:
        raise Malformed(f"expected one element of tag {tag:#x}")
    return items[0][1]


def _oid(contents: bytes) -> str:
    parts, value = [], 0
    for byte in contents[1:]:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            parts.append(value)
            value = 0
    first = contents[0] if contents else 0
    return ".".join(map(str, [min(first // 40, 2), first - 40 * min(first // 40, 2), *parts]))


def _text(tag: int, contents: bytes) -> str:
    if tag not in _STRINGS:
        raise Malformed(f"a name attribute of string tag {tag:#x}")
    return contents.decode(_STRINGS[tag])


@dataclass(frozen=True)
class Request:
    """What a kubelet serving certificate request asks for: subject attributes (OID, value) and
    subject alternative names ("DNS", name) or ("IP", address); `other` names what else it
    holds (other attributes, extensions or kinds of name)."""

    subject: tuple[tuple[str, str], ...]
    names: tuple[tuple[str, str], ...]
    other: tuple[str, ...]


def parse(request_b64: str) -> Request:
    """`spec.request` (base64 of a PEM CERTIFICATE REQUEST) read as RFC 2986 lays it out."""
    try:
        pem = base64.b64decode(request_b64, validate=True).decode("ascii")
    except ValueError as error:
        raise Malformed("spec.request is not base64 of a PEM text") from error
    lines = [line.strip() for line in pem.strip().splitlines()]
    if len(lines) < 3 or lines[0] != "-----BEGIN CERTIFICATE REQUEST-----":
        raise Malformed("spec.request is not a PEM CERTIFICATE REQUEST")
    if lines[-1] != "-----END CERTIFICATE REQUEST-----":
        raise Malformed("spec.request is not a PEM CERTIFICATE REQUEST")
    try:
        der = base64.b64decode("".join(lines[1:-1]), validate=True)
    except ValueError as error:
        raise Malformed("the PEM body is not base64") from error
    outer = _items(_one(der, 0x30))
    if len(outer) != 3 or outer[0][0] != 0x30:
        raise Malformed("not a CertificationRequest")
    info = _items(outer[0][1])
    if len(info) != 4 or [tag for tag, _ in info] != [0x02, 0x30, 0x30, 0xA0]:
        raise Malformed("not a CertificationRequestInfo")
    subject = []
    for _set, rdn in _items(info[1][1]):
        for _seq, pair in _items(rdn):
            (_oid_tag, oid), (tag, value) = _items(pair)
            subject.append((_oid(oid), _text(tag, value)))
    names, other = [], []
    for _seq, attribute in _items(info[3][1]):
        (_tag, oid), (_set, values) = _items(attribute)
        if _oid(oid) != _EXTENSION_REQUEST:
            other.append(f"attribute {_oid(oid)}")
            continue
        for _seq2, extension in _items(_one(values, 0x30)):
            parts = _items(extension)
            if len(parts) not in (2, 3) or parts[0][0] != 0x06:
                raise Malformed("an extension is not (id, [critical], value)")
            extension_id = _oid(parts[0][1])
            if extension_id != _SUBJECT_ALT_NAME:
                other.append(f"extension {extension_id}")
                continue
            for tag, value in _items(_one(parts[-1][1], 0x30)):
                if tag == _DNS_NAME:
                    names.append(("DNS", value.decode("ascii", errors="replace")))
                elif tag == _IP_ADDRESS and len(value) in (4, 16):
                    names.append(("IP", str(ipaddress.ip_address(value))))
                else:
                    other.append(f"a subject alternative name of tag {tag:#x}")
    return Request(tuple(subject), tuple(names), tuple(other))


def known_names(lines: str) -> frozenset[tuple[str, str]]:
    """SERVING_NAMES ("DNS:<name>" / "IP Address:<address>", one a line) as `Request.names`."""
    known = set()
    for line in lines.splitlines():
        if line.startswith("DNS:"):
            known.add(("DNS", line.removeprefix("DNS:").lower()))
        elif line.startswith("IP Address:"):
            known.add(("IP", str(ipaddress.ip_address(line.removeprefix("IP Address:")))))
        elif line.strip():
            raise ValueError(f"SERVING_NAMES: {line!r} is not 'DNS:<name>' or 'IP Address:<ip>'")
    return frozenset(known)


def serving_problem(csr: dict[str, Any], node: str, known: Iterable[tuple[str, str]]) -> str:
    """Nothing when `csr` is `node`'s kubelet asking for a serving certificate for names in
    `known`, else why not, in one line."""
    spec = csr.get("spec") or {}
    usages = frozenset(spec.get("usages") or ())
    if usages not in USAGES:
        return (
            f"usages {sorted(usages)} are not those of a serving certificate (digital signature "
            "and server auth, with key encipherment for an RSA key)"
        )
    try:
        request = parse(spec.get("request") or "")
    except (Malformed, ValueError) as error:
        return f"spec.request is not a certificate request it can read ({error})"
    wanted = sorted([(_ORGANIZATION, "system:nodes"), (_COMMON_NAME, f"system:node:{node}")])
    if sorted(request.subject) != wanted:
        return f"its subject is {list(request.subject)}, not CN=system:node:{node},O=system:nodes"
    if request.other:
        return f"it requests more than DNS and IP names: {', '.join(request.other)}"
    if not request.names:
        return "it names no subject alternative name"
    allowed = frozenset(known)
    for kind, value in request.names:
        if (kind, value.lower() if kind == "DNS" else value) not in allowed:
            shown = ", ".join(f"{k}:{v}" for k, v in sorted(allowed))
            return f"it names {kind}:{value!r}, which is not {node}'s (it may name: {shown})"
    return ""


async def approve_serving(
    api: Api,
    node: str,
    known: frozenset[tuple[str, str]],
    clock: Clock,
    say: Say,
    wait_seconds: int,
) -> None:
    """Approve `node`'s pending kubelet serving requests that ask for `known` names; leave any
    other pending, saying why. Looks for one up to `wait_seconds` (a Ready kubelet filed it);
    without one, says how to approve it later (the API server cannot reach that kubelet's
    logs and exec until then) and carries on."""
    deadline = clock.now() + wait_seconds
    refused: set[str] = set()
    while True:
        listed = await api.call("GET", CSR_PATH)
        handled = False
        for csr in _of(listed.get("items") or (), node):
            name = csr["metadata"]["name"]
            if (csr.get("status") or {}).get("conditions"):
                handled = True  # approved or denied before
                continue
            problem = serving_problem(csr, node, known)
            if problem:
                if name not in refused:
                    say(
                        f"not approving kubelet serving certificate request {name} of {node}, it "
                        f"stays pending: {problem}"
                    )
                    refused.add(name)
                continue
            handled = await _approve(api, csr, say) or handled
        if handled:
            return
        if clock.now() >= deadline:
            break
        await clock.sleep(POLL_SECONDS)
    say(
        f"no kubelet serving certificate request of {node} for its own names yet; approve it "
        "when it appears: kubectl get csr, then kubectl certificate approve <name>"
    )


def _of(items: Sequence[dict[str, Any]], node: str) -> list[dict[str, Any]]:
    return [
        csr
        for csr in items
        if (csr.get("spec") or {}).get("signerName") == SIGNER
        and (csr.get("spec") or {}).get("username") == f"system:node:{node}"
    ]


async def _approve(api: Api, csr: dict[str, Any], say: Say) -> bool:
    """The approval as `kubectl certificate approve` writes it (kubectl pkg/cmd/certificates
    certificates.go: an Approved condition, status True, through the approval subresource)."""
    name = csr["metadata"]["name"]
    approved = {
        **csr,
        "status": {
            **(csr.get("status") or {}),
            "conditions": [
                {
                    "type": "Approved",
                    "status": "True",
                    "reason": APPROVAL_REASON,
                    "message": "the names the program knows its node by (gpu-cluster)",
                }
            ],
        },
    }
    try:
        await api.call("PUT", f"{CSR_PATH}/{name}/approval", approved)
    except ApiError as error:
        if error.code != 409:
            raise
        # Another approver (the managed control plane's timer) wrote it first.
        current = await api.call("GET", f"{CSR_PATH}/{name}")
        return bool((current.get("status") or {}).get("conditions"))
    say(f"approved kubelet serving certificate request {name}")
    return True


async def record(api: Api, node: str, lines: str, say: Say) -> None:
    """ConfigMap kube-system/gpu-cluster-serving-<node> holds `lines` (SERVING_NAMES), for the
    managed control plane's approver timer: created, or rewritten when it holds other names."""
    name = f"{RECORD_PREFIX}{node}"
    wanted = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": RECORD_NAMESPACE, "labels": dict(_MANAGED_BY)},
        "data": {RECORD_KEY: lines},
    }
    try:
        current = await api.call("GET", f"{RECORDS_PATH}/{name}")
    except ApiError as error:
        if error.code != 404:
            raise
        await api.call("POST", RECORDS_PATH, wanted)
        say(f"recorded the serving names of {node} ({RECORD_NAMESPACE}/{name})")
        return
    if current.get("data") == wanted["data"]:
        return
    wanted["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    await api.call("PUT", f"{RECORDS_PATH}/{name}", wanted)
    say(f"recorded the serving names of {node} ({RECORD_NAMESPACE}/{name})")


async def forget(api: Api, node: str) -> None:
    """The record of `node`'s names goes with its Node (gone already: nothing to do)."""
    try:
        await api.call("DELETE", f"{RECORDS_PATH}/{RECORD_PREFIX}{node}")
    except ApiError as error:
        if error.code != 404:
            raise

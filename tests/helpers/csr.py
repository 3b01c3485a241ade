"""Kubelet serving certificate requests as a kubelet files them, made with `cryptography`, for
the kubectl stub (state kubectl/csrs and kubectl/csr-specs/<name>.json).

What the kubelet asks for (kubernetes pkg/kubelet/certificate/kubelet.go,
NewKubeletServerCertificateManager: subject CN system:node:<node>, O system:nodes, the Node's
addresses as DNS and IP SANs; client-go util/certificate DefaultKubeletServingGetUsages: digital
signature and server auth, plus key encipherment for an RSA key; its key is ECDSA P-256), and
what an attacker on a node could ask for instead.
"""

from __future__ import annotations

import base64
import ipaddress
import json
from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

SERVING = "kubernetes.io/kubelet-serving"
USAGES = ["digital signature", "server auth"]
_KEY = ec.generate_private_key(ec.SECP256R1())


def request(
    node: str,
    *,
    dns: Sequence[str] = (),
    ips: Sequence[str] = (),
    emails: Sequence[str] = (),
    organizations: Sequence[str] = ("system:nodes",),
    common_name: str | None = None,
) -> str:
    """spec.request of a CSR object: base64 of the PEM PKCS#10 request, subject as Go's
    x509.CreateCertificateRequest orders it (O, then CN)."""
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name or f"system:node:{node}"))
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(attributes))
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    names += [x509.RFC822Name(e) for e in emails]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    pem = builder.sign(_KEY, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
    return base64.b64encode(pem).decode()


def spec(request_b64: str, usages: Sequence[str] = USAGES) -> str:
    """The JSON of state kubectl/csr-specs/<name>.json."""
    return json.dumps({"usages": list(usages), "request": request_b64})


def line(name: str, node: str, condition: str = "", signer: str = SERVING) -> str:
    """One line of state kubectl/csrs."""
    return f"{name} system:node:{node} {signer} {condition}\n"


def serving_names(node: str, dns: str, ip: str) -> str:
    """SERVING_NAMES as the program passes it (components/kube/kubelet_serving.py)."""
    return f"DNS:{node}\nDNS:{dns}\nIP Address:{ip}"


def kubelet_request(node: str, names: str) -> str:
    """spec.request of the request the node's kubelet files for `names` (SERVING_NAMES)."""
    dns = [n.removeprefix("DNS:") for n in names.splitlines() if n.startswith("DNS:")]
    ips = [n.removeprefix("IP Address:") for n in names.splitlines() if n.startswith("IP Address:")]
    return request(node, dns=dns, ips=ips)


def file_request(sandbox, name: str, node: str, request_b64: str, *, usages=USAGES) -> None:
    """Add a pending request to the kubectl stub's state (after any already there)."""
    existing = sandbox.state("kubectl/csrs") or ""
    sandbox.state("kubectl/csrs", existing + line(name, node))
    sandbox.state(f"kubectl/csr-specs/{name}.json", spec(request_b64, usages))


def hostile_requests(
    node: str, node_ip: str, api_ip: str
) -> dict[str, tuple[str, list[str] | None]]:
    """Requests a compromised `node` (private address `node_ip`) could file, each with its
    usages (None: the kubelet's), and what makes each one not its own (issue 41, finding 3): a
    cluster-CA-signed serverAuth certificate for any of these names would let it stand in for
    the API server (`api_ip`) or another node."""
    return {
        "kubernetes.default.svc": (request(node, dns=[node, "kubernetes.default.svc"]), None),
        "the API's address": (request(node, dns=[node], ips=[node_ip, api_ip]), None),
        "the service network's API address": (request(node, ips=["10.96.0.1"]), None),
        "another node's address": (request(node, dns=[node], ips=["10.42.9.10"]), None),
        "another node's name": (request(node, dns=["dev-gpu-a10g-1"]), None),
        "a name with a newline hiding a second line": (
            request(node, dns=[f"{node}\n"], ips=["10.96.0.1"]),
            None,
        ),
        "an email address": (request(node, dns=[node], emails=["x@example.com"]), None),
        "no name at all": (request(node), None),
        "another node's common name": (
            request(node, dns=[node], common_name="system:node:dev-gpu-a10g-1"),
            None,
        ),
        "a second organization": (
            request(node, dns=[node], organizations=("system:nodes", "system:masters")),
            None,
        ),
        "client auth usage": (
            request(node, dns=[node], ips=[node_ip]),
            ["digital signature", "client auth"],
        ),
        "client and server auth usages": (
            request(node, dns=[node], ips=[node_ip]),
            ["digital signature", "server auth", "client auth"],
        ),
        "not a request": (
            base64.b64encode(b"-----BEGIN CERTIFICATE REQUEST-----\nx\n").decode(),
            None,
        ),
    }

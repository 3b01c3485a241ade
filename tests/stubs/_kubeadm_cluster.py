"""kubeadm and the kubelet against a real API server (the end-to-end tests, tests/helpers/lab.py):
what the kubeadm stub and a starting kubelet do once state `cluster.api` exists, instead of
simulating a cluster in the state directory. Run by the tests' own Python ($STUB_PYTHON: it has
PyYAML, requests and cryptography), never the host's.

  join <JoinConfiguration file>   kubeadm join's token discovery, its check for a Ready Node of
      the same name, and the kubelet's TLS bootstrap: /etc/kubernetes/kubelet.conf with a client
      certificate the cluster signed. Stands for kubeadm 1.35 and kubelet 1.35:
      - discovery, cmd/kubeadm/app/discovery/token/token.go `retrieveValidatedConfigInfo`: the
        cluster-info ConfigMap of kube-public read without trusting the server, its
        `jws-kubeconfig-<token id>` signature checked against the token (a detached HS256 JWS
        whose key id is the token id: k8s.io/cluster-bootstrap token/jws/jws.go
        `ComputeDetachedSignature`), the CA in its kubeconfig checked against caCertHashes
        (sha256 of the DER SubjectPublicKeyInfo: cmd/kubeadm/app/util/pubkeypin), then read
        again trusting that CA; each failure with kubeadm's words;
      - cmd/kubeadm/app/cmd/phases/join/kubelet.go `runKubeletStartJoinPhase`: a Ready Node of
        the same name refuses the join (read with the bootstrap token, which kubeadm's
        `kubeadm:get-nodes` ClusterRole lets read Nodes);
      - pkg/kubelet/certificate/bootstrap/bootstrap.go `LoadClientCert`, `requestNodeCertificate`:
        an ECDSA P-256 key, a CSR for CN system:node:<name>, O system:nodes, signer
        kubernetes.io/kube-apiserver-client-kubelet, usages digital signature and client auth,
        posted with the bootstrap token; the kube-controller-manager approves and signs it;
        `writeKubeconfigFromBootstrapping`: kubelet.conf (default-cluster, default-auth,
        default-context) naming /var/lib/kubelet/pki/kubelet-client-current.pem.
  register <JoinConfiguration file>   the kubelet's first start on a joined host: register the
      Node with the kubelet's own credentials unless it exists (pkg/kubelet/kubelet_node_status.go
      `registerWithAPIServer`, `initialNode`: --node-labels, --provider-id and
      --register-with-taints from the JoinConfiguration, as kubeadm passes them; the Node as a
      v1.35 kubelet writes it, tests/helpers/kubelet.py `node_object`), its InternalIP the
      host's address toward the API server (pkg/kubelet/nodestatus/setters.go `NodeAddress`).
      NodeRestriction admission judges what it may set, as for a real kubelet.
  kubeconfig-user <client name> <organization> <validity>   `kubeadm kubeconfig user`
      (cmd/kubeadm/app/cmd/kubeconfig.go, phases/kubeconfig `WriteKubeConfigWithClientCert`): a
      client certificate for the name and organization, signed by /etc/kubernetes/pki/ca.key for
      the validity (Go duration, hours here), as a kubeconfig with its certificates inline and
      the server of /etc/kubernetes/admin.conf.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import json
import os
import socket
import sys
import time
from pathlib import Path

import requests
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.helpers.kubelet import node_object  # noqa: E402

KUBELET_CONF = Path("/etc/kubernetes/kubelet.conf")
PKI = Path("/var/lib/kubelet/pki")
CLIENT_CERT = PKI / "kubelet-client-current.pem"
ADMIN_CONF = Path("/etc/kubernetes/admin.conf")
CA_CERT, CA_KEY = Path("/etc/kubernetes/pki/ca.crt"), Path("/etc/kubernetes/pki/ca.key")
SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
CSR_WAIT_SECONDS = 60


def fail(message: str) -> None:
    print(message, file=sys.stderr)
    sys.exit(1)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def pin(ca_pem: bytes) -> str:
    key = x509.load_pem_x509_certificate(ca_pem).public_key()
    der = key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return "sha256:" + hashlib.sha256(der).hexdigest()


def signature_matches(signature: str, payload: str, token_id: str, secret: str) -> bool:
    """The signature's own header is what was signed (jose's verification), not our spelling."""
    header, _, mac = signature.partition("..")
    signing_input = f"{header}.{b64url(payload.encode())}".encode()
    expected = hmac.new(secret.encode(), signing_input, hashlib.sha256).digest()
    claims = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
    return claims.get("kid") == token_id and hmac.compare_digest(b64url(expected), mac)


def session(verify: bool | str = False, token: str | None = None, cert=None) -> requests.Session:
    s = requests.Session()
    s.trust_env = False
    s.verify = verify
    if token:
        s.headers["Authorization"] = f"Bearer {token}"
    if cert:
        s.cert = cert
    return s


def cluster_info(endpoint: str, verify: bool | str) -> dict:
    url = f"https://{endpoint}/api/v1/namespaces/kube-public/configmaps/cluster-info"
    try:
        response = session(verify).get(url, timeout=20)
    except requests.RequestException as error:
        fail(
            "error execution phase preflight: couldn't validate the identity of the API Server: "
            f'Get "{url}": {error}'
        )
    if response.status_code != 200:
        fail(
            "error execution phase preflight: couldn't validate the identity of the API Server: "
            f'configmaps "cluster-info" is forbidden or missing (HTTP {response.status_code})'
        )
    return response.json()


def join(config_file: str) -> None:
    config = yaml.safe_load(Path(config_file).read_text())
    discovery = config["discovery"]["bootstrapToken"]
    endpoint, token = discovery["apiServerEndpoint"], discovery["token"]
    token_id, secret = token.split(".", 1)
    name = config["nodeRegistration"]["name"]
    phase = "error execution phase preflight: couldn't validate the identity of the API Server"

    data = cluster_info(endpoint, verify=False).get("data") or {}
    kubeconfig, signature = data.get("kubeconfig", ""), data.get(f"jws-kubeconfig-{token_id}")
    if signature is None:
        fail(
            f"{phase}: could not find a JWS signature in the cluster-info ConfigMap for token ID "
            f'"{token_id}"'
        )
    if not signature_matches(signature, kubeconfig, token_id, secret):
        fail(
            f"{phase}: failed to verify JWS signature of received cluster info object, can't "
            "trust this API Server"
        )
    cluster = yaml.safe_load(kubeconfig)["clusters"][0]["cluster"]
    ca_pem = base64.b64decode(cluster["certificate-authority-data"])
    if pin(ca_pem) not in discovery.get("caCertHashes", []):
        fail(
            f"{phase}: cluster CA found in cluster-info ConfigMap is invalid: none of the public "
            f'keys "{pin(ca_pem)}" are pinned'
        )
    ca_file = Path("/etc/kubernetes/pki/ca.crt")
    ca_file.parent.mkdir(parents=True, exist_ok=True)
    ca_file.write_bytes(ca_pem)
    again = cluster_info(endpoint, verify=str(ca_file)).get("data") or {}
    if again.get("kubeconfig") != kubeconfig:
        fail(f"{phase}: cluster-info changed between the insecure and the secure read")
    server = cluster["server"]

    bootstrap = session(verify=str(ca_file), token=token)
    node = bootstrap.get(f"{server}/api/v1/nodes/{name}", timeout=20)
    if node.status_code == 200:
        ready = [c for c in node.json()["status"].get("conditions", []) if c["type"] == "Ready"]
        if ready and ready[0]["status"] == "True":
            fail(
                "error execution phase kubelet-start: a Node with name "
                f'"{name}" and status "Ready" already exists in the cluster. You must delete the '
                "existing Node or change the name of this new joining Node"
            )
    elif node.status_code != 404:
        fail(
            f"error execution phase kubelet-start: cannot get Node {name}: HTTP {node.status_code}"
        )

    key = ec.generate_private_key(ec.SECP256R1())
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                    x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{name}"),
                ]
            )
        )
        .sign(key, hashes.SHA256())
    )
    body = {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "csr-"},
        "spec": {
            "request": base64.b64encode(request.public_bytes(serialization.Encoding.PEM)).decode(),
            "signerName": SIGNER,
            "usages": ["digital signature", "client auth"],
        },
    }
    created = bootstrap.post(
        f"{server}/apis/certificates.k8s.io/v1/certificatesigningrequests", json=body, timeout=20
    )
    if created.status_code >= 300:
        fail(
            f"kubelet: failed to create a certificate signing request: HTTP "
            f"{created.status_code}: {created.text[:300]}"
        )
    csr_name = created.json()["metadata"]["name"]
    deadline = time.monotonic() + CSR_WAIT_SECONDS
    while True:
        status = (
            bootstrap.get(
                f"{server}/apis/certificates.k8s.io/v1/certificatesigningrequests/{csr_name}",
                timeout=20,
            )
            .json()
            .get("status", {})
        )
        refused = [c for c in status.get("conditions", []) if c["type"] in ("Denied", "Failed")]
        if refused:
            fail(f"kubelet: certificate signing request {csr_name} {refused[0]['type'].lower()}")
        if status.get("certificate"):
            break
        if time.monotonic() > deadline:
            fail(
                f"kubelet: certificate signing request {csr_name} not signed within "
                f"{CSR_WAIT_SECONDS}s: not approved (the bootstrap token's group lacks kubeadm's "
                "node-autoapprove binding?)"
            )
        time.sleep(0.5)
    PKI.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d-%H-%M-%S")
    pem = base64.b64decode(status["certificate"]) + key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    issued = PKI / f"kubelet-client-{stamp}.pem"
    issued.write_bytes(pem)
    issued.chmod(0o600)
    CLIENT_CERT.unlink(missing_ok=True)
    CLIENT_CERT.symlink_to(issued)
    KUBELET_CONF.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "default-cluster",
                        "cluster": {
                            "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                            "server": server,
                        },
                    }
                ],
                "contexts": [
                    {
                        "name": "default-context",
                        "context": {
                            "cluster": "default-cluster",
                            "namespace": "default",
                            "user": "default-auth",
                        },
                    }
                ],
                "current-context": "default-context",
                "users": [
                    {
                        "name": "default-auth",
                        "user": {
                            "client-certificate": str(CLIENT_CERT),
                            "client-key": str(CLIENT_CERT),
                        },
                    }
                ],
            },
            sort_keys=False,
        )
    )
    KUBELET_CONF.chmod(0o600)


def extra_arg(config: dict, name: str) -> str:
    for item in config["nodeRegistration"].get("kubeletExtraArgs") or []:
        if item["name"] == name:
            return item["value"]
    return ""


def register(config_file: str) -> None:
    config = yaml.safe_load(Path(config_file).read_text())
    name = config["nodeRegistration"]["name"]
    kubelet = yaml.safe_load(KUBELET_CONF.read_text())
    server = kubelet["clusters"][0]["cluster"]["server"]
    ca = Path("/etc/kubernetes/pki/ca.crt")
    client = session(verify=str(ca), cert=(str(CLIENT_CERT), str(CLIENT_CERT)))
    if client.get(f"{server}/api/v1/nodes/{name}", timeout=20).status_code == 200:
        return  # registered before: a kubelet only updates its status
    labels = dict(
        item.split("=", 1) for item in filter(None, extra_arg(config, "node-labels").split(","))
    )
    taints = [
        {k: v for k, v in taint.items() if k in ("key", "value", "effect") and v != ""}
        for taint in config["nodeRegistration"].get("taints") or []
    ]
    host = server.removeprefix("https://").rsplit(":", 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host[0], int(host[1])))
        address = probe.getsockname()[0]
    body = node_object(
        name,
        address=address,
        labels=labels,
        taints=taints,
        provider_id=extra_arg(config, "provider-id") or None,
    )
    created = client.post(f"{server}/api/v1/nodes", json=body, timeout=20)
    if created.status_code >= 300:
        fail(
            f'kubelet: "Unable to register node with API server" err="{created.text[:500]}" '
            f'node="{name}"'
        )


def kubeconfig_user(client_name: str, organization: str, validity: str) -> None:
    hours = int(validity.removesuffix("h"))
    ca = x509.load_pem_x509_certificate(CA_CERT.read_bytes())
    ca_key = serialization.load_pem_private_key(CA_KEY.read_bytes(), password=None)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = datetime.datetime.now(datetime.UTC)
    subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization)] if organization else []
    subject.append(x509.NameAttribute(NameOID.COMMON_NAME, client_name))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(subject))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=hours))
        .add_extension(
            x509.KeyUsage(True, False, True, False, False, False, False, False, False),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), False)
        .sign(ca_key, hashes.SHA256())
    )
    admin = yaml.safe_load(ADMIN_CONF.read_text())
    server = admin["clusters"][0]["cluster"]["server"]

    def inline(data: bytes) -> str:
        return base64.b64encode(data).decode()

    print(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "clusters": [
                    {
                        "cluster": {
                            "certificate-authority-data": inline(CA_CERT.read_bytes()),
                            "server": server,
                        },
                        "name": "kubernetes",
                    }
                ],
                "contexts": [
                    {
                        "context": {"cluster": "kubernetes", "user": client_name},
                        "name": f"{client_name}@kubernetes",
                    }
                ],
                "current-context": f"{client_name}@kubernetes",
                "kind": "Config",
                "users": [
                    {
                        "name": client_name,
                        "user": {
                            "client-certificate-data": inline(
                                cert.public_bytes(serialization.Encoding.PEM)
                            ),
                            "client-key-data": inline(
                                key.private_bytes(
                                    serialization.Encoding.PEM,
                                    serialization.PrivateFormat.TraditionalOpenSSL,
                                    serialization.NoEncryption(),
                                )
                            ),
                        },
                    }
                ],
            },
            sort_keys=False,
        ),
        end="",
    )


def main() -> None:
    verb, *args = sys.argv[1:]
    {"join": join, "register": register, "kubeconfig-user": kubeconfig_user}[verb](*args)


if __name__ == "__main__":
    os.umask(0o022)
    main()

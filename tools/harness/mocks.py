"""Plausible provider answers for the SDK's mocks: every output a component reads has a value
(an Output whose value is missing serializes as nothing and drops its dependency edges)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
from collections.abc import Callable, Iterator
from datetime import date, timedelta

import pulumi.runtime
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from pulumi.runtime import MockCallArgs, MockResourceArgs

from tools.harness.graph import program_params


def fake_id(prefix: str, name: str, length: int = 17) -> str:
    return prefix + hashlib.sha256(name.encode()).hexdigest()[:length]


def fake_ip(prefix: str, name: str) -> str:
    digest = hashlib.sha256(name.encode()).digest()
    return f"{prefix}.{digest[0] % 250 + 2}.{digest[1] % 250 + 2}"


# The test cluster's CA public key hash (what read-kubeconfig.sh, and mint-join-token.sh of
# earlier releases, print).
CA_CERT_HASH = "sha256:" + hashlib.sha256(b"test cluster CA").hexdigest()
# When the kube-tools steps of earlier releases reported the host ready to join (their
# install-kube-tools.sh printed it last; their programs, run by `tools.preview --against <ref>`,
# parse it). This version prints nothing there: the program's own clock dates a join token.
READY_TO_JOIN_AT = "2026-01-01T00:00:00Z"


def _plain(value: object) -> object:
    """An input as the mock monitor hands it over, a secret unwrapped."""
    return value.get("value") if isinstance(value, dict) else value


def _join_token_stdout(args: MockResourceArgs) -> str:
    """Stands for what mint-join-token.sh printed in the releases before commit 1824a45 (an
    earlier release: git show 1824a45^:components/hosts/scripts/mint-join-token.sh,
    `print_credentials`): one JSON line, {"token": ..., "caCertHash": ...}, the token in the
    form kubeadm 1.35's `token create` prints ([a-z0-9]{6}.[a-z0-9]{16}, cmd/kubeadm/app/apis/
    bootstraptoken/v1/utils.go), unique to the node (recorded graphs of those releases run
    under these mocks too)."""
    digest = hashlib.sha256(args.name.encode()).hexdigest()
    token = f"{digest[:6]}.{digest[6:22]}"
    return json.dumps({"token": token, "caCertHash": CA_CERT_HASH}) + "\n"


def _kube_tools_stdout(args: MockResourceArgs) -> str:
    """Stands for what install-kube-tools.sh printed last in the releases before commit b78550f
    (an earlier release: git show b78550f^:components/hosts/scripts/install-kube-tools.sh,
    `print_ready_to_join`): one JSON line, {"readyToJoinAt": ...}, the time as GNU date
    (coreutils 8.32 and 9.4, Ubuntu 22.04 and 24.04) prints `date -u +%Y-%m-%dT%H:%M:%SZ`.
    This version's script prints nothing and its program reads nothing there; recorded graphs
    of those releases run under these mocks too."""
    return json.dumps({"readyToJoinAt": READY_TO_JOIN_AT}) + "\n"


def _kubeconfig_stdout(args: MockResourceArgs) -> str:
    """Stands for what components/hosts/scripts/read-kubeconfig.sh prints
    (`print_kubeconfig`): the admin.conf kubeadm 1.35 writes (cmd/kubeadm/app/phases/kubeconfig,
    client-go tools/clientcmd `Write`) with its server rewritten, then "# ca-cert-hash:
    sha256:<64 hex>"; here with fake, recognisable credentials (tests look for
    FAKE-TEST-ADMIN-KEY in plain inputs and outputs to catch a leak), its certificate the one
    valid until ADMIN_CERT_NOT_AFTER (a renewed one, a new kubeconfig).
    tests/test_canned_outputs.py holds its shape to that script's output."""
    stdin = _plain(args.inputs.get("stdin"))
    until = program_params(str(stdin)).get("ADMIN_CERT_NOT_AFTER", "") if stdin else ""
    fake = base64.b64encode(f"FAKE-TEST-ADMIN-KEY for {args.name}{until}".encode()).decode()
    ca = base64.b64encode(b"FAKE-TEST-CA").decode()
    return (
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n"
        f"    certificate-authority-data: {ca}\n    server: https://203.0.113.10:6443\n"
        "  name: kubernetes\ncontexts:\n- context:\n    cluster: kubernetes\n"
        "    user: kubernetes-admin\n  name: kubernetes-admin@kubernetes\n"
        "current-context: kubernetes-admin@kubernetes\nusers:\n- name: kubernetes-admin\n"
        f"  user:\n    client-certificate-data: {fake}\n    client-key-data: {fake}\n"
        f"# ca-cert-hash: {CA_CERT_HASH}\n"
    )


def _certificates_stdout(args: MockResourceArgs) -> str:
    """Stands for what components/hosts/scripts/renew-certificates.sh prints last
    (`print_admin_expiry`): admin.conf's `expirationDate` from kubeadm 1.35's `certs
    check-expiration -o json` (cmd/kubeadm/app/cmd/certs.go `newCmdCertsExpiration`, kind
    `CertificateExpirationInfo` of output.kubeadm.k8s.io, RFC 3339 UTC), a year after the
    renewal period this run is for began (as if the period's check renewed it)."""
    stdin = _plain(args.inputs.get("stdin"))
    period = date.fromisoformat(program_params(str(stdin))["CHECK_PERIOD"])
    return json.dumps({"adminConfNotAfter": f"{period + timedelta(days=365)}T00:00:00Z"}) + "\n"


STASH = "pulumi:index:Stash"


# Outputs of host steps whose stdout the program parses, keyed by the end of the resource name.
COMMAND_STDOUT: dict[str, Callable[[MockResourceArgs], str]] = {
    "-join-token": _join_token_stdout,
    "-kubeconfig": _kubeconfig_stdout,
    "-kube-tools": _kube_tools_stdout,
    "-certificates": _certificates_stdout,
}


def ed25519_key(seed_name: str) -> dict[str, str]:
    """What pulumi-tls `PrivateKey(algorithm="ED25519")` stores, for a real key derived from
    `seed_name` (the same on every run, as the program's inputs must be): terraform-provider-tls
    `internal/provider/common_key.go` sets `public_key_openssh` to `ssh.MarshalAuthorizedKey`
    (type and base64 blob, a newline, no comment), the fingerprint with `ssh.FingerprintSHA256`;
    `resource_private_key.go` the private key as OpenSSH PEM and PKCS#8 PEM."""
    seed = hashlib.sha256(f"host key {seed_name}".encode()).digest()
    private = ed25519.Ed25519PrivateKey.from_private_bytes(seed)
    public = private.public_key()
    openssh_public = public.public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    ).decode()
    blob = base64.b64decode(blob_of(openssh_public))
    fingerprint = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    return {
        "algorithm": "ED25519",
        "privateKeyOpenssh": _openssh_private_key(seed, base64.b64decode(blob_of(openssh_public))),
        "privateKeyPem": private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode(),
        "publicKeyOpenssh": openssh_public + "\n",
        "publicKeyPem": public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ).decode(),
        "publicKeyFingerprintSha256": f"SHA256:{fingerprint}",
    }


def blob_of(public_line: str) -> str:
    return public_line.split()[1]


def _ssh_string(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def _openssh_private_key(seed: bytes, public_blob: bytes) -> str:
    """An unencrypted OpenSSH private key file of an ED25519 key (openssh PROTOCOL.key), as
    x/crypto/ssh `MarshalPrivateKey` writes it and `pem.EncodeToMemory` wraps it (64 columns).
    Its check integers are random there; here they come from the seed, so two runs match."""
    raw_public = public_blob[-32:]
    check = hashlib.sha256(b"check" + seed).digest()[:4] * 2
    private = (
        check
        + _ssh_string(b"ssh-ed25519")
        + _ssh_string(raw_public)
        + _ssh_string(seed + raw_public)
        + _ssh_string(b"")
    )
    private += bytes(range(1, 1 + (-len(private)) % 8))
    blob = (
        b"openssh-key-v1\0"
        + _ssh_string(b"none")
        + _ssh_string(b"none")
        + _ssh_string(b"")
        + (1).to_bytes(4, "big")
        + _ssh_string(public_blob)
        + _ssh_string(private)
    )
    text = base64.b64encode(blob).decode()
    lines = [text[i : i + 64] for i in range(0, len(text), 64)]
    return (
        "-----BEGIN OPENSSH PRIVATE KEY-----\n"
        + "\n".join(lines)
        + "\n-----END OPENSSH PRIVATE KEY-----\n"
    )


# Instances created by a release before the program generated host keys: they booted without
# user data, and `userData` is ignored after create, so their state keeps none (tests add names).
INSTANCES_WITHOUT_USER_DATA: set[str] = set()


@contextlib.contextmanager
def booted_without_user_data(names: set[str]) -> Iterator[None]:
    """Within: the instances `names` answer as machines that booted without user data."""
    saved = set(INSTANCES_WITHOUT_USER_DATA)
    INSTANCES_WITHOUT_USER_DATA.update(names)
    try:
        yield
    finally:
        INSTANCES_WITHOUT_USER_DATA.clear()
        INSTANCES_WITHOUT_USER_DATA.update(saved)


def stored_user_data(name: str, inputs: dict) -> str:
    """What the provider keeps as an instance's `userData`: the SHA-1 of what it booted with
    (terraform-provider-aws `internal/service/ec2/ec2_instance.go`, `StateFunc`:
    `userDataHashSum`), nothing for a machine booted without."""
    user_data = inputs.get("userData")
    if isinstance(user_data, dict):  # a secret, as the mock monitor hands it over
        user_data = user_data.get("value")
    if name in INSTANCES_WITHOUT_USER_DATA or not user_data:
        return ""
    return hashlib.sha1(user_data.encode()).hexdigest()


def local_inputs(stdin: object) -> tuple[dict[str, list[str]], str]:
    """A first contact's stdin as components/hosts/local/rotate-host-key.sh reads it: its
    NAME=value lines (each name's values in order), and the host program after the line `---`."""
    if isinstance(stdin, dict):  # a secret, as the mock monitor hands it over
        stdin = stdin.get("value")
    head, _, program = str(stdin or "").partition("\n---\n")
    inputs: dict[str, list[str]] = {}
    for line in head.splitlines():
        key, _, value = line.partition("=")
        inputs.setdefault(key, []).append(value)
    return inputs, program


def _local_input(stdin: object, name: str) -> str:
    return local_inputs(stdin)[0].get(name, [""])[-1]


# Images this account already holds (id, tags), for the `getAmiIds` look-up of baked images:
# empty by default (a first build); tests and tools add one to stand for a build made earlier.
EXISTING_IMAGES: list[tuple[str, dict[str, str]]] = []


def _image_ids(inputs: dict) -> list[str]:
    """The ids of EXISTING_IMAGES that match every `tag:<key>` and `tag-key` filter (all are
    available), in the order of the list (as if listed oldest first), newest first when the
    call asks `sortAscending: false`."""
    filters = inputs.get("filters", [])
    wanted = {
        f["name"].removeprefix("tag:"): set(f["values"])
        for f in filters
        if f["name"].startswith("tag:")
    }
    keys = [set(f["values"]) for f in filters if f["name"] == "tag-key"]
    found = [
        image_id
        for image_id, tags in EXISTING_IMAGES
        if all(tags.get(key) in values for key, values in wanted.items())
        and all(names & tags.keys() for names in keys)
    ]
    return found[::-1] if inputs.get("sortAscending") is False else found


# Which Canonical release the AMI look-up answers with: set AMI_RELEASE[0] to a new value to see
# what a newer image does to a running stack (tools.lifecycle).
AMI_RELEASE = [""]


class Mocks(pulumi.runtime.Mocks):
    """Plausible provider answers: every output a component reads has a value, so no
    dependency edge is lost to a missing output.

    A mock passes inputs on as they are or replaces them; it never changes one in place (copy
    it first). The recording monitor copies an input the state still holds (the same object)
    from the request instead of writing it again (`recorder._sent_as_read`), so a change made
    in place would not reach the answer. tests/test_recorder.py compares every answer with the
    SDK's mock monitor, which would show it."""

    def __init__(self) -> None:
        super().__init__()
        # Stash outputs the engine keeps from the state this run updates (by resource name):
        # the recorder fills it for a Stash the engine would not create again.
        self.kept_stash_outputs: dict[str, object] = {}

    def new_resource(self, args: MockResourceArgs):
        state = dict(args.inputs)
        name, typ = args.name, args.typ
        if typ == "aws:ec2/instance:Instance":
            state.update(
                publicIp=fake_ip("198.51", name),
                privateIp=fake_ip("10.42", name),
                privateDns=f"ip-{fake_ip('10-42', name).replace('.', '-')}.ec2.internal",
                arn=f"arn:aws:ec2:us-west-2:123456789012:instance/{fake_id('i-', name)}",
                userData=stored_user_data(name, state),
            )
            # The provider reads the zone back from the subnet it launched in.
            state.setdefault("availabilityZone", "us-west-2a")
            return fake_id("i-", name), state
        if typ == "tls:index/privateKey:PrivateKey":
            state.update(ed25519_key(name))
            return fake_id("key-", name, 40), state
        if typ == "aws:ec2/eip:Eip":
            state.update(publicIp=fake_ip("203.0", name), allocationId=fake_id("eipalloc-", name))
            return fake_id("eipalloc-", name), state
        if typ == "aws:ec2/vpc:Vpc":
            return fake_id("vpc-", name), state
        if typ == "aws:ec2/subnet:Subnet":
            # One subnet per zone of a VPC here: the same one under another name (an alias)
            # keeps its id.
            where = f"{state.get('vpcId')}|{state.get('availabilityZone')}"
            return fake_id("subnet-", where), state
        if typ == "aws:ec2/securityGroup:SecurityGroup":
            return fake_id("sg-", name), state
        if typ == "aws:ec2/keyPair:KeyPair":
            # Pulumi auto-names it: the name plus a random suffix, new for a replacement (a new
            # public key), so a machine launched with the old name can be told apart.
            public_key = str(state.get("publicKey", ""))
            auto_name = f"{name}-{hashlib.sha256(public_key.encode()).hexdigest()[:7]}"
            state.update(keyName=state.get("keyName") or auto_name)
            return fake_id("key-", name), state
        if typ == "command:remote:Command":
            for suffix, make in COMMAND_STDOUT.items():
                if name.endswith(suffix):
                    state["stdout"] = make(args)
                    break
            else:
                state.setdefault("stdout", "")
            state.setdefault("stderr", "")
            # A (re)created command gets a new id, as with the real provider: the id follows
            # the triggers, so a step chained after a re-run step sees a changed trigger.
            triggers = json.dumps(args.inputs.get("triggers"), sort_keys=True, default=str)
            return fake_id("cmd-", f"{name}|{triggers}", 12), state
        if typ == "command:local:Command" and name.endswith("-host-key-rotation"):
            # What scripts/rotate-host-key.sh prints last when it stages: the host's new public
            # key (a real key, derived from the name, so it differs from the boot key).
            state["stdout"] = ed25519_key(f"{name} rotated")["publicKeyOpenssh"].strip()
            state.setdefault("stderr", "")
            triggers = json.dumps(args.inputs.get("triggers"), sort_keys=True, default=str)
            return fake_id("cmd-", f"{name}|{triggers}", 12), state
        if typ == STASH:
            # The engine's builtin provider (pulumi pkg/resource/deploy/builtins.go): Create
            # sets `output` to the input it was created with, Update and Read keep it; its id
            # is a random UUID.
            state["output"] = self.kept_stash_outputs.get(name, state.get("input"))
            return fake_id("stash-", name, 32), state
        if typ == "command:local:Command" and name.endswith("-host-key-switch"):
            # What the local script prints after the switch: the key it then saw the machine
            # serve, the one its inputs name (VERIFY_HOST_KEY).
            state["stdout"] = _local_input(args.inputs.get("stdin"), "VERIFY_HOST_KEY")
            state.setdefault("stderr", "")
            triggers = json.dumps(args.inputs.get("triggers"), sort_keys=True, default=str)
            return fake_id("cmd-", f"{name}|{triggers}", 12), state
        if typ == "kubernetes:batch/v1:Job":
            # pulumi-kubernetes returns a Job only once it has completed (it awaits the
            # Complete condition and fails on Failed), so a created Job reports success.
            state.setdefault(
                "status",
                {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]},
            )
        return fake_id(f"{name}-", name, 8), state

    def call(self, args: MockCallArgs):
        token, inputs = args.token, args.args
        if token == "aws:ec2/getAmi:getAmi":
            name_filter = next(
                (f["values"][0] for f in inputs.get("filters", []) if f["name"] == "name"), "ami"
            )
            return {
                # The newest image of that name; AMI_RELEASE stands for a later Canonical release.
                "id": fake_id("ami-", name_filter + AMI_RELEASE[0]),
                "name": name_filter,
                "architecture": "x86_64",
            }
        if token == "aws:ec2/getAmiIds:getAmiIds":
            return {"ids": _image_ids(inputs)}
        if token == "aws:index/getAvailabilityZones:getAvailabilityZones":
            return {
                "names": ["us-west-2a", "us-west-2b", "us-west-2c"],
                "zoneIds": ["usw2-az1", "usw2-az2", "usw2-az3"],
            }
        if token == "aws:index/getRegion:getRegion":
            return {"name": "us-west-2", "region": "us-west-2"}
        if token == "aws:ec2/getVpc:getVpc":
            return {"id": inputs.get("id"), "cidrBlock": "10.0.0.0/16"}
        if token == "aws:ec2/getSubnet:getSubnet":
            subnet = inputs.get("id", "subnet-0")
            index = int(hashlib.sha256(subnet.encode()).hexdigest(), 16) % 3
            return {
                "id": subnet,
                "vpcId": "vpc-0a1b2c3d4e5f60718",
                "cidrBlock": f"10.0.{index + 1}.0/24",
                "availabilityZone": f"us-west-2{'abc'[index]}",
            }
        return {}

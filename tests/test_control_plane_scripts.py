"""The control-plane scripts, run for real with bash in the sandbox (tests/sandbox.py): kubeadm
init (and the timer that approves kubelet serving certificates), the CNI, the kubeconfig and
the CA hash nodes pin, the version-skew check, and a node's drain on delete, which acts only
on the Node its own machine registered.

kubeadm and kubectl are stubs (tests/stubs) that simulate a cluster API; openssl, awk and sed
are the real ones, so the CA hash is computed as on a real host and checked here independently.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shlex
import stat
from pathlib import Path

import pytest
import yaml

from components.hosts.rendering import SCRIPTS_DIR
from components.settings import SUPPORTED_KUBERNETES_MINORS
from tests.helpers import csr
from tests.helpers.control_plane_host import (
    ADMIN_KEY,
    ADMIN_KUBECONFIG,
    CNI,
    CP_NAME,
    FLANNEL_MANIFEST,
    INIT,
    PRIVATE_IP,
    PUBLIC_IP,
)
from tests.sandbox import Sandbox, needs_sandbox

pytestmark = needs_sandbox

NODE = "dev-gpu-a10g-0"
TOKEN = "q8z3kd.7hx2m4p9r1t6v0wb"
ADMIN_CONF = "/etc/kubernetes/admin.conf"


def node_json(name: str, ready: str | None) -> str:
    conditions = [] if ready is None else [{"type": "Ready", "status": ready}]
    return json.dumps({"metadata": {"name": name}, "status": {"conditions": conditions}})


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    """A control-plane host after install-kube-tools.sh (kubeadm 1.35.1), no cluster yet."""
    sb = Sandbox(tmp_path)
    for pkg in ("kubelet", "kubeadm", "kubectl"):
        sb.state(f"dpkg/{pkg}", "1.35.1-1.1")
    (sb.state_dir / "kubectl" / "nodes").mkdir(parents=True)
    return sb


@pytest.fixture
def cluster(sandbox: Sandbox) -> Sandbox:
    """The same host with a running cluster (kubeadm init done, API answering)."""
    sandbox.write(ADMIN_CONF, ADMIN_KUBECONFIG, 0o600)
    sandbox.state("kubectl/api", "v1.35.1")
    sandbox.state(f"kubectl/nodes/{CP_NAME}.json", node_json(CP_NAME, "True"))
    return sandbox


def kubeadm_config(sandbox: Sandbox) -> dict[str, dict]:
    docs = yaml.safe_load_all(sandbox.state("kubeadm-init-config.yaml"))
    return {doc["kind"]: doc for doc in docs}


# ------------------------------------------------------------------ init-control-plane.sh


def test_init_runs_kubeadm_from_an_init_configuration_once(sandbox):
    first = sandbox.run("init-control-plane.sh", INIT)
    assert first.returncode == 0, first.stderr
    inits = first.called("kubeadm", "init")
    config_path = "/etc/kubernetes/gpu-cluster/kubeadm-init.yaml"
    assert inits == [["kubeadm", "init", "--config", config_path, "--skip-token-print"]], inits
    config = kubeadm_config(sandbox)
    init, cluster = config["InitConfiguration"], config["ClusterConfiguration"]
    assert init["apiVersion"] == cluster["apiVersion"] == "kubeadm.k8s.io/v1beta4"
    assert init["nodeRegistration"]["name"] == CP_NAME
    assert init["localAPIEndpoint"] == {"advertiseAddress": PRIVATE_IP, "bindPort": 6443}
    assert [t["ttl"] for t in init["bootstrapTokens"]] == ["15m0s"], "init token lives long"
    assert cluster["clusterName"] == "dev-gpu"
    assert cluster["kubernetesVersion"] == "v1.35.1", "not the installed kubeadm's patch"
    assert cluster["controlPlaneEndpoint"] == f"{PRIVATE_IP}:6443"
    assert cluster["networking"] == {"podSubnet": "10.244.0.0/16", "serviceSubnet": "10.96.0.0/12"}
    assert cluster["apiServer"]["certSANs"] == INIT["CERT_SANS"].split(",")
    assert config["KubeletConfiguration"]["cgroupDriver"] == "systemd"
    assert oct(sandbox.host_path(config_path).stat().st_mode & 0o777) == "0o600"
    assert "API server ready" in first.stderr

    second = sandbox.run("init-control-plane.sh", INIT)
    assert second.returncode == 0, second.stderr
    assert not second.called("kubeadm", "init"), f"second run re-initialized: {second.commands()}"
    assert "already initialized" in second.stderr
    assert sandbox.state("kubeadm.init-count") == "1"


def test_init_with_an_admin_conf_but_no_api_stops_without_reinitializing(cluster):
    cluster.state("kubectl/api-down", "yes")
    result = cluster.run("init-control-plane.sh", {**INIT, "API_WAIT_SECONDS": "0"})
    assert result.returncode != 0
    assert "admin.conf exists but the API server does not answer /readyz" in result.stderr
    assert "kubeadm reset -f" in result.stderr, "no way forward in the message"
    assert not result.called("kubeadm", "init"), result.commands()


def test_init_with_kubeadm_of_another_minor_fails_with_expected_and_found(sandbox):
    sandbox.state("dpkg/kubeadm", "1.34.2-1.1")
    result = sandbox.run("init-control-plane.sh", INIT)
    assert result.returncode != 0
    assert "kubeadm v1.35.x expected, found v1.34.2" in result.stderr
    assert not result.called("kubeadm", "init"), result.commands()


def test_failed_kubeadm_init_names_the_step(sandbox):
    sandbox.state("kubeadm.fail.init", 1)
    result = sandbox.run("init-control-plane.sh", INIT)
    assert result.returncode != 0
    assert "[init] FAILED at step 1/4 (init cluster), in init_cluster" in result.stderr, (
        result.stderr
    )


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("POD_SUBNET", "10.244.0.0", "POD_SUBNET must be a CIDR"),
        ("CERT_SANS", f"{PUBLIC_IP},bad name", "CERT_SANS: 'bad name'"),
        ("CONTROL_PLANE_ENDPOINT", PRIVATE_IP, "CONTROL_PLANE_ENDPOINT must be host:port"),
        ("KUBERNETES_MINOR", "1.35.1", "KUBERNETES_MINOR must be a minor version"),
        ("CLUSTER_NAME", 'gpu"\nkind: x', "CLUSTER_NAME must be a lowercase DNS label"),
    ],
)
def test_init_rejects_malformed_inputs_before_acting(sandbox, name, value, message):
    result = sandbox.run("init-control-plane.sh", {**INIT, name: value})
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
    assert result.calls == [], f"acted before checking inputs: {result.commands()}"


# ------------------------------------------------------------------ install-cni.sh


@pytest.fixture
def flannel(cluster: Sandbox) -> Sandbox:
    cluster.state("curl.body.kube-flannel.yml", FLANNEL_MANIFEST)
    return cluster


def test_cni_applies_the_pinned_manifest_with_the_pod_cidr_and_waits(flannel):
    result = flannel.run("install-cni.sh", CNI)
    assert result.returncode == 0, result.stderr
    urls = [c[-1] for c in result.called("curl")]
    assert urls == [
        "https://github.com/flannel-io/flannel/releases/download/v0.27.4/kube-flannel.yml"
    ], urls
    applied = (flannel.state_dir / "kubectl/applied/kube-flannel.yml").read_text()
    assert '"Network": "10.200.0.0/16"' in applied and "10.244.0.0/16" not in applied
    commands = result.commands()
    rollout = [c for c in commands if " rollout status daemonset/kube-flannel-ds" in c]
    assert rollout and "--timeout=300s" in rollout[0], commands
    assert any(f"wait --for=condition=Ready node/{CP_NAME}" in c for c in commands), commands
    order = [
        next(i for i, c in enumerate(commands) if f" {verb} " in c)
        for verb in ("apply", "rollout status", "wait")
    ]
    assert order == sorted(order), f"not apply, then rollout, then Node Ready: {commands}"

    second = flannel.run("install-cni.sh", CNI)
    assert second.returncode == 0, second.stderr
    assert not second.called("curl"), "downloaded the manifest again"
    assert not [c for c in second.commands() if " apply " in c], "applied again"
    assert "flannel v0.27.4 already applied" in second.stderr


def _image_lines(text: str) -> list[str]:
    return [line.split("image:", 1)[1].strip() for line in text.splitlines() if "image:" in line]


def test_cni_runs_flannels_images_by_digest(flannel):
    """Issue 41, finding 6: the checksum-verified manifest names its images by tag; what is
    applied names each by digest (the CNI plugin's binary runs as root on every node)."""
    result = flannel.run("install-cni.sh", CNI)
    assert result.returncode == 0, result.stderr
    applied = (flannel.state_dir / "kubectl/applied/kube-flannel.yml").read_text()
    pinned = (CNI["FLANNEL_IMAGE"], CNI["FLANNEL_CNI_PLUGIN_IMAGE"])
    assert sorted(_image_lines(applied)) == sorted([pinned[0], pinned[1], pinned[0]]), applied
    assert sorted(_image_lines(FLANNEL_MANIFEST)) != sorted(_image_lines(applied))


def test_cni_cluster_running_flannel_by_tag_gets_the_digests(flannel):
    """A cluster made before the digests runs the release by tag: applied again, once."""
    tagged = _image_lines(FLANNEL_MANIFEST)  # kube-flannel, then the two init containers
    flannel.state(
        "kubectl/daemonsets/kube-flannel/kube-flannel-ds.json",
        json.dumps(
            {
                "metadata": {"name": "kube-flannel-ds", "namespace": "kube-flannel"},
                "spec": {
                    "template": {
                        "spec": {
                            "initContainers": [{"image": i} for i in tagged[1:]],
                            "containers": [{"image": tagged[0]}],
                        }
                    }
                },
            }
        ),
    )
    result = flannel.run("install-cni.sh", CNI)
    assert result.returncode == 0, result.stderr
    assert [c for c in result.commands() if " apply " in c], "left flannel running by tag"
    again = flannel.run("install-cni.sh", CNI)
    assert not [c for c in again.commands() if " apply " in c], "applied the digests twice"


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda m: m + "---\nkind: DaemonSet\nspec:\n  containers:\n  - image: evil:1\n", "other"),
        (
            lambda m: m.replace(
                "flannel:v0.27.4\n        name: install-cni",
                "flannel:v0.27.3\n        name: install-cni",
            ),
            "another release",
        ),
        (
            lambda m: m.replace(
                "        image: ghcr.io/flannel-io/flannel-cni-plugin:v1.8.0-flannel1\n", ""
            ),
            "no plugin",
        ),
    ],
    ids=["another image", "flannel at another release", "no CNI plugin"],
)
def test_cni_manifest_naming_other_images_is_not_applied(flannel, edit, why):
    other = edit(FLANNEL_MANIFEST)
    assert other != FLANNEL_MANIFEST, why
    flannel.state("curl.body.kube-flannel.yml", other)
    pinned = hashlib.sha256(other.encode()).hexdigest()
    result = flannel.run("install-cni.sh", {**CNI, "FLANNEL_MANIFEST_SHA256": pinned})
    assert result.returncode != 0
    assert "changed shape" in result.stderr, result.stderr
    assert not [c for c in result.commands() if " apply " in c], "applied an image by tag"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("FLANNEL_IMAGE", "ghcr.io/flannel-io/flannel:v0.27.4"),
        ("FLANNEL_IMAGE", "ghcr.io/flannel-io/flannel:v0.27.3@sha256:" + "f" * 64),
        ("FLANNEL_IMAGE", "docker.io/evil/flannel:v0.27.4@sha256:" + "f" * 64),
        ("FLANNEL_CNI_PLUGIN_IMAGE", "ghcr.io/flannel-io/flannel-cni-plugin:v1.8.0-flannel1"),
        ("FLANNEL_CNI_PLUGIN_IMAGE", "ghcr.io/flannel-io/flannel:v0.27.4@sha256:" + "f" * 64),
    ],
)
def test_cni_refuses_an_image_not_by_digest(flannel, name, value):
    result = flannel.run("install-cni.sh", {**CNI, name: value})
    assert result.returncode != 0 and f"{name} must be" in result.stderr, result.stderr
    assert not result.called("curl"), "downloaded before checking its inputs"


def test_cni_download_retries_then_works(flannel):
    flannel.state("curl.fail", 2)
    result = flannel.run("install-cni.sh", CNI)
    assert result.returncode == 0, result.stderr
    assert len(result.called("curl")) == 3, result.commands()


def test_cni_rollout_that_does_not_finish_fails_naming_what_to_look_at(flannel):
    flannel.state("kubectl.fail.rollout", 1)
    result = flannel.run("install-cni.sh", {**CNI, "CNI_TIMEOUT_SECONDS": "5"})
    assert result.returncode != 0
    assert "flannel DaemonSet not rolled out after 5s" in result.stderr
    assert "kubectl -n kube-flannel get pods" in result.stderr


def test_cni_control_plane_node_never_ready_fails(flannel):
    flannel.state(f"kubectl/nodes/{CP_NAME}.json", node_json(CP_NAME, "False"))
    result = flannel.run("install-cni.sh", CNI)
    assert result.returncode != 0
    assert f"Node {CP_NAME} not Ready 300s after the CNI rolled out" in result.stderr


def test_cni_manifest_other_than_the_pinned_one_is_never_applied(flannel):
    """Issue 34, finding 9: the manifest runs with admin rights, so a download whose sha256 is
    not the pinned one (one added line: a ClusterRoleBinding, say) fails before it is read."""
    tampered = FLANNEL_MANIFEST + "---\nkind: ClusterRoleBinding\n"
    flannel.state("curl.body.kube-flannel.yml", tampered)
    result = flannel.run("install-cni.sh", CNI)
    assert result.returncode != 0
    wanted = CNI["FLANNEL_MANIFEST_SHA256"]
    found = hashlib.sha256(tampered.encode()).hexdigest()
    assert f"has sha256 {found}, expected {wanted}" in result.stderr, result.stderr
    assert not [c for c in result.commands() if " apply " in c], "applied a tampered manifest"
    bad = flannel.run("install-cni.sh", {**CNI, "FLANNEL_MANIFEST_SHA256": "latest"})
    assert bad.returncode != 0 and "FLANNEL_MANIFEST_SHA256 must be 64 hex" in bad.stderr
    assert not bad.called("curl"), "downloaded before checking its inputs"


def test_cni_manifest_of_another_shape_fails_before_applying(flannel):
    other = FLANNEL_MANIFEST.replace("10.244.0.0/16", "x")
    flannel.state("curl.body.kube-flannel.yml", other)
    pinned = hashlib.sha256(other.encode()).hexdigest()
    result = flannel.run("install-cni.sh", {**CNI, "FLANNEL_MANIFEST_SHA256": pinned})
    assert result.returncode != 0
    assert "changed shape" in result.stderr, result.stderr
    assert not [c for c in result.commands() if " apply " in c], "applied an unknown manifest"


def test_cni_needs_an_initialized_cluster(sandbox):
    result = sandbox.run("install-cni.sh", CNI)
    assert result.returncode != 0
    assert f"{ADMIN_CONF} not found; run init-control-plane.sh first" in result.stderr


# ------------------------------------------------------------------ read-kubeconfig.sh


def _der_element(data: bytes, start: int) -> tuple[int, int, int]:
    """(tag, content start, end) of the DER element at `start`."""
    tag, length, position = data[start], data[start + 1], start + 2
    if length & 0x80:
        size = length & 0x7F
        length = int.from_bytes(data[position : position + size], "big")
        position += size
    return tag, position, position + length


def ca_public_key_hash(pem: str) -> str:
    """sha256 of the certificate's SubjectPublicKeyInfo, read from the DER without openssl."""
    body = "".join(line for line in pem.splitlines() if not line.startswith("-----"))
    der = base64.b64decode(body)
    _, certificate, _ = _der_element(der, 0)
    _, tbs_start, tbs_end = _der_element(der, certificate)
    fields, position = [], tbs_start
    while position < tbs_end:
        tag, _, end = _der_element(der, position)
        fields.append((tag, position, end))
        position = end
    offset = 1 if fields[0][0] == 0xA0 else 0  # explicit [0] version
    _, spki_start, spki_end = fields[offset + 5]
    return "sha256:" + hashlib.sha256(der[spki_start:spki_end]).hexdigest()


def test_kubeconfig_points_at_the_operators_address_and_is_not_logged(cluster, ca_cert):
    """The admin kubeconfig, then the hash of the cluster CA's public key that joining nodes
    pin (what mint-join-token.sh printed with each token): the program reads both from it."""
    from components.kube.ca_cert_hash import parse_ca_cert_hash

    cluster.write("/etc/kubernetes/pki/ca.crt", ca_cert)
    server = f"https://{PUBLIC_IP}:6443"
    result = cluster.run("read-kubeconfig.sh", {"API_SERVER": server})
    assert result.returncode == 0, result.stderr
    expected = ADMIN_KUBECONFIG.replace(f"https://{PRIVATE_IP}:6443", server)
    ca_hash = ca_public_key_hash(ca_cert)
    assert result.stdout == f"{expected}# ca-cert-hash: {ca_hash}\n"
    assert parse_ca_cert_hash(result.stdout) == ca_hash
    assert yaml.safe_load(result.stdout)["clusters"][0]["cluster"]["server"] == server
    assert ADMIN_KEY not in result.stderr, "the admin key reached the log"


def test_kubeconfig_with_an_unreadable_ca_prints_nothing_and_names_the_file(cluster):
    """A CA file that is not a certificate (truncated by a full disk, overwritten by hand): no
    hash of nothing for nodes to pin, and no kubeconfig either: pulumi-command puts a failed
    step's stdout into its error message, which would show the admin's key."""
    cluster.write("/etc/kubernetes/pki/ca.crt", "-----BEGIN CERTIFICATE-----\ntruncated\n")
    result = cluster.run("read-kubeconfig.sh", {"API_SERVER": f"https://{PUBLIC_IP}:6443"})
    assert result.returncode == 1, result.stderr
    assert (
        "[kubeconfig] FAILED: could not read the public key of /etc/kubernetes/pki/ca.crt "
        "(openssl's error is above)" in result.stderr
    ), result.stderr
    assert result.stdout == "", "printed before it failed: the error message would carry it"
    assert ADMIN_KEY not in result.output


def test_kubeconfig_on_a_host_without_the_cluster_ca_fails_before_printing(cluster):
    result = cluster.run("read-kubeconfig.sh", {"API_SERVER": f"https://{PUBLIC_IP}:6443"})
    assert result.returncode == 1, result.stderr
    assert "/etc/kubernetes/pki/ca.crt not found on this host" in result.stderr, result.stderr
    assert result.stdout == ""


def test_operator_kubeconfig_is_its_own_bounded_identity(cluster):
    server = f"https://{PUBLIC_IP}:6443"
    params = {
        "API_SERVER": server,
        "CLIENT_NAME": "dev-gpu-operator",
        "GROUP": "gpu-cluster:operators",
        "VALIDITY_HOURS": "24",
    }
    result = cluster.run("user-kubeconfig.sh", params)
    assert result.returncode == 0, result.stderr
    (call,) = result.called("kubeadm", "kubeconfig", "user")
    assert call[3:] == [
        "--client-name",
        "dev-gpu-operator",
        "--org",
        "gpu-cluster:operators",
        "--validity-period",
        "24h",
    ], call
    config = yaml.safe_load(result.stdout)
    assert [c["cluster"]["server"] for c in config["clusters"]] == [server]
    (user,) = config["users"]
    assert user["name"] == "dev-gpu-operator", user
    assert user["user"]["client-key-data"] != ADMIN_KEY, "admin.conf's identity exported"
    assert ADMIN_KEY not in result.stdout, "admin.conf's key in the operator kubeconfig"
    assert user["user"]["client-key-data"] not in result.stderr, "the key reached the log"


@pytest.mark.parametrize(
    ("name", "value"),
    [("GROUP", "system:masters/x"), ("VALIDITY_HOURS", "0"), ("CLIENT_NAME", "-x")],
)
def test_operator_kubeconfig_refuses_bad_inputs(cluster, name, value):
    params = {
        "API_SERVER": f"https://{PUBLIC_IP}:6443",
        "CLIENT_NAME": "dev-gpu-operator",
        "GROUP": "gpu-cluster:operators",
        "VALIDITY_HOURS": "24",
        name: value,
    }
    result = cluster.run("user-kubeconfig.sh", params)
    assert result.returncode != 0 and name in result.stderr, result.stderr
    assert not result.called("kubeadm", "kubeconfig"), result.commands()


def test_kubeconfig_on_a_host_without_admin_conf_fails_clearly(sandbox):
    result = sandbox.run("read-kubeconfig.sh", {"API_SERVER": f"https://{PUBLIC_IP}:6443"})
    assert result.returncode != 0
    assert "admin.conf not found on this host" in result.stderr
    assert result.stdout == ""


# ------------------------------------------------------------------ check-version-skew.sh


@pytest.mark.parametrize(("server", "kubelet"), [("v1.35.1", "1.35"), ("v1.36.0", "1.36")])
def test_skew_within_the_supported_window_passes(cluster, server, kubelet):
    cluster.state("kubectl/api", server)
    result = cluster.run("check-version-skew.sh", {"KUBERNETES_MINOR": kubelet})
    assert result.returncode == 0, result.stderr
    assert "version skew ok" in result.stderr


def test_kubelet_newer_than_the_api_server_fails_clearly(cluster):
    cluster.state("kubectl/api", "v1.34.3")
    result = cluster.run("check-version-skew.sh", {"KUBERNETES_MINOR": "1.35"})
    assert result.returncode != 0
    assert (
        "[version-skew] FAILED: kubelet 1.35 would be newer than the API server 1.34; "
        "set gpu-cluster:kubernetesVersion to 1.34\n"
    ) in result.stderr, result.stderr
    assert [c[:4] for c in result.called("kubectl")] == [
        ["kubectl", f"--kubeconfig={ADMIN_CONF}", "--request-timeout=30s", "get"]
    ], f"touched more than the version: {result.commands()}"


def test_kubelet_too_far_behind_fails_clearly(cluster):
    cluster.state("kubectl/api", "v1.37.0")
    result = cluster.run("check-version-skew.sh", {"KUBERNETES_MINOR": "1.33"})
    assert result.returncode != 0
    assert "kubelet 1.33 would be more than 3 minors older than the API server 1.37" in (
        result.stderr
    )
    assert "; set gpu-cluster:kubernetesVersion to 1.37\n" in result.stderr, result.stderr


def test_kubeadm_older_than_the_cluster_fails_although_kubelet_may_lag(cluster):
    """kubelet 1.33 under a 1.35 API server is within the kubelet's 3-minor allowance, but the
    node's kubeadm 1.33 cannot `kubeadm join` a 1.35 cluster."""
    cluster.state("kubectl/api", "v1.35.2")
    result = cluster.run("check-version-skew.sh", {"KUBERNETES_MINOR": "1.33"})
    assert result.returncode != 0
    assert (
        "kubeadm 1.33 would join an API server of 1.35: kubeadm join needs the cluster's own "
        "minor" in result.stderr
    )
    assert "set gpu-cluster:kubernetesVersion to 1.35" in result.stderr


SUPPORTED = ",".join(SUPPORTED_KUBERNETES_MINORS)
ADVICE = re.compile(r"set gpu-cluster:kubernetesVersion to (1\.[0-9]+)\n")


@pytest.mark.parametrize(
    ("server", "kubelet"),
    [("v1.34.3", "1.35"), ("v1.37.0", "1.33"), ("v1.35.2", "1.34"), ("v1.36.1", "1.33")],
)
def test_skew_advice_names_a_version_the_program_and_the_next_check_accept(
    cluster, server, kubelet
):
    """Whatever the refusal (kubelet newer, kubelet more than 3 minors behind, kubeadm of
    another minor), the version it advises is one gpu-cluster:kubernetesVersion takes and the
    check then passes with (advising "1.34 or newer" under a 1.37 API server sent the operator
    to 1.34, which the kubeadm check refuses next)."""
    cluster.state("kubectl/api", server)
    params = {"KUBERNETES_MINOR": kubelet, "SUPPORTED_MINORS": SUPPORTED}
    refused = cluster.run("check-version-skew.sh", params)
    assert refused.returncode == 1, refused.stderr
    advised = ADVICE.search(refused.stderr)
    assert advised, refused.stderr
    # The window gpu-cluster:kubernetesVersion is validated against (Settings._supported_minor).
    assert advised.group(1) in SUPPORTED_KUBERNETES_MINORS
    accepted = cluster.run(
        "check-version-skew.sh", {**params, "KUBERNETES_MINOR": advised.group(1)}
    )
    assert accepted.returncode == 0, accepted.stderr
    assert "version skew ok" in accepted.stderr


@pytest.mark.parametrize(
    ("server", "advice"),
    [
        (
            "v1.31.4",
            "upgrade the cluster with kubeadm, one minor at a time, to 1.33, then set "
            "gpu-cluster:kubernetesVersion to 1.33",
        ),
        ("v1.38.0", "kubeadm does not downgrade: a cluster on 1.38 needs a release of this"),
    ],
)
def test_skew_advice_for_a_cluster_outside_the_supported_window(cluster, server, advice):
    """The API server's own minor is not one gpu-cluster:kubernetesVersion accepts: the advice
    says how the cluster reaches one, never to set a version the program refuses."""
    cluster.state("kubectl/api", server)
    params = {"KUBERNETES_MINOR": "1.35", "SUPPORTED_MINORS": SUPPORTED}
    result = cluster.run("check-version-skew.sh", params)
    assert result.returncode == 1, result.stderr
    assert f"this program installs {SUPPORTED.replace(',', ', ')} only" in result.stderr
    assert advice in result.stderr, result.stderr
    named = ADVICE.findall(result.stderr)
    assert all(minor in SUPPORTED_KUBERNETES_MINORS for minor in named), named


def test_skew_on_a_host_that_is_not_a_control_plane(sandbox):
    result = sandbox.run("check-version-skew.sh", {"KUBERNETES_MINOR": "1.35"})
    assert result.returncode != 0
    assert "controlPlane.host must be a kubeadm control-plane node" in result.stderr


def test_skew_with_the_api_down_fails_clearly(cluster):
    cluster.state("kubectl/api-down", "yes")
    result = cluster.run("check-version-skew.sh", {"KUBERNETES_MINOR": "1.35"})
    assert result.returncode != 0
    assert "the API server did not answer" in result.stderr


# ------------------------------------------------------------------ all of them


@pytest.mark.parametrize(
    ("script", "required"),
    [
        ("init-control-plane.sh", "CLUSTER_NAME NODE_NAME KUBERNETES_MINOR"),
        (
            "install-cni.sh",
            "FLANNEL_VERSION FLANNEL_MANIFEST_SHA256 FLANNEL_IMAGE FLANNEL_CNI_PLUGIN_IMAGE "
            "POD_SUBNET NODE_NAME",
        ),
        ("read-kubeconfig.sh", "API_SERVER"),
        ("check-version-skew.sh", "KUBERNETES_MINOR"),
    ],
)
def test_missing_inputs_fail_at_once_naming_them(cluster, script, required):
    result = cluster.run(script, {})
    assert result.returncode != 0
    assert f"missing required input(s): {required}" in result.stderr, result.stderr
    assert result.calls == [], f"{script} acted before checking inputs: {result.commands()}"


# ------------------------------------------------------------------ hardening (CIS basics)
# The managed control plane as the CIS Kubernetes benchmark asks of a kubeadm cluster, read from
# what init-control-plane.sh renders: the API server, controller-manager and scheduler flags, the
# kubelet configuration, the audit policy, encryption and admission files those flags name
# (parsed, with their permissions), and the approval of the kubelet serving certificates the API
# server then verifies.

CONFIG_DIR = "/etc/kubernetes/gpu-cluster"
AUDIT_POLICY = f"{CONFIG_DIR}/audit-policy.yaml"
ENCRYPTION = f"{CONFIG_DIR}/encryption-config.yaml"
ADMISSION = f"{CONFIG_DIR}/admission-config.yaml"
AUDIT_LOG = "/var/log/kubernetes/audit/audit.log"
SERVING = "kubernetes.io/kubelet-serving"


def _args(component: dict) -> dict[str, str]:
    """kubeadm v1beta4 extraArgs (a list of name/value) as a mapping; a name given twice fails."""
    pairs = [(a["name"], a["value"]) for a in component.get("extraArgs", [])]
    names = [n for n, _v in pairs]
    assert len(names) == len(set(names)), f"a flag given twice: {names}"
    return dict(pairs)


def _mode(sb, path: str) -> str:
    return oct(stat.S_IMODE(sb.host_path(path).stat().st_mode))


@pytest.fixture
def initialized(sandbox):
    result = sandbox.run("init-control-plane.sh", INIT)
    assert result.returncode == 0, result.stderr
    return sandbox, result


def test_api_server_flags_name_the_hardening_files(initialized):
    sb, _result = initialized
    cluster_config = kubeadm_config(sb)["ClusterConfiguration"]
    api = _args(cluster_config["apiServer"])
    assert api["audit-policy-file"] == AUDIT_POLICY
    assert api["audit-log-path"] == AUDIT_LOG
    assert int(api["audit-log-maxage"]) >= 30 and int(api["audit-log-maxbackup"]) >= 10
    assert int(api["audit-log-maxsize"]) >= 100
    assert api["encryption-provider-config"] == ENCRYPTION
    assert api["admission-control-config-file"] == ADMISSION
    assert api["kubelet-certificate-authority"] == "/etc/kubernetes/pki/ca.crt"
    assert api["profiling"] == "false"
    volumes = {v["mountPath"]: v for v in cluster_config["apiServer"]["extraVolumes"]}
    assert volumes[CONFIG_DIR]["hostPath"] == CONFIG_DIR and volumes[CONFIG_DIR]["readOnly"]
    audit_dir = AUDIT_LOG.rsplit("/", 1)[0]
    assert volumes[audit_dir]["hostPath"] == audit_dir and not volumes[audit_dir]["readOnly"]
    for component in ("controllerManager", "scheduler"):
        assert _args(cluster_config[component])["profiling"] == "false", component


def test_kubelets_serve_with_certificates_of_the_cluster_ca(initialized):
    sb, _result = initialized
    kubelet = kubeadm_config(sb)["KubeletConfiguration"]
    # Joining nodes take this KubeletConfiguration from the cluster (kubeadm's kubelet-config).
    assert kubelet["serverTLSBootstrap"] is True, kubelet


def test_audit_policy_logs_changes_and_never_secret_bodies(initialized):
    sb, _result = initialized
    policy = yaml.safe_load(sb.read(AUDIT_POLICY))
    assert (policy["apiVersion"], policy["kind"]) == ("audit.k8s.io/v1", "Policy")
    assert _mode(sb, AUDIT_POLICY) == "0o600"
    rules = policy["rules"]
    secrets_rule = next(
        r for r in rules if any("secrets" in g.get("resources", []) for g in r.get("resources", []))
    )
    assert secrets_rule["level"] == "Metadata", secrets_rule
    before = rules[: rules.index(secrets_rule)]
    assert all(r["level"] == "None" for r in before), "a rule logs Secrets before theirs"
    assert any(
        r["level"] in ("Request", "RequestResponse") and "create" in r.get("verbs", [])
        for r in rules
    ), "changes are not logged with their request"
    assert rules[-1] == {"level": "Metadata"}, "requests outside the rules are not logged"


def test_secrets_are_encrypted_at_rest_with_a_key_made_once(initialized):
    sb, result = initialized
    config = yaml.safe_load(sb.read(ENCRYPTION))
    assert config["kind"] == "EncryptionConfiguration"
    (entry,) = config["resources"]
    assert entry["resources"] == ["secrets"]
    first, last = entry["providers"][0], entry["providers"][-1]
    (key,) = first["secretbox"]["keys"]
    assert len(base64.b64decode(key["secret"])) == 32, "secretbox needs a 32-byte key"
    assert last == {"identity": {}}, "Secrets stored before encryption could not be read"
    assert _mode(sb, ENCRYPTION) == "0o600"
    assert key["secret"] not in result.output, "the key was printed"
    # A second run (and a second cluster init after a reset) keeps the key.
    sb.host_path("/etc/kubernetes/admin.conf").unlink()
    again = sb.run("init-control-plane.sh", INIT)
    assert again.returncode == 0, again.stderr
    kept = yaml.safe_load(sb.read(ENCRYPTION))["resources"][0]["providers"][0]
    assert kept["secretbox"]["keys"][0]["secret"] == key["secret"], "the key was replaced"


def test_pod_security_baseline_is_enforced_cluster_wide(initialized):
    sb, _result = initialized
    admission = yaml.safe_load(sb.read(ADMISSION))
    (plugin,) = admission["plugins"]
    assert plugin["name"] == "PodSecurity"
    config = plugin["configuration"]
    assert config["kind"] == "PodSecurityConfiguration"
    assert config["defaults"]["enforce"] == "baseline"
    assert config["defaults"]["audit"] == config["defaults"]["warn"] == "restricted"
    assert config["exemptions"]["namespaces"] == ["kube-system"]


def test_the_device_plugin_namespace_is_privileged_and_validation_is_not():
    from components.kube import manifests

    plugin = manifests.device_plugin_namespace()["labels"]
    assert plugin["pod-security.kubernetes.io/enforce"] == "privileged", plugin
    validation = manifests.validation_namespace()["labels"]
    assert validation["pod-security.kubernetes.io/enforce"] in ("baseline", "restricted")


def _csrs(*lines: str) -> str:
    return "".join(f"{line}\n" for line in lines)


def test_init_approves_only_its_own_kubelets_serving_certificate(sandbox):
    own = csr.kubelet_request(CP_NAME, INIT["SERVING_NAMES"])
    csr.file_request(sandbox, "csr-own", CP_NAME, own)
    csr.file_request(sandbox, "csr-other", NODE, own)
    csr.file_request(
        sandbox, "csr-client", CP_NAME, own, usages=["digital signature", "client auth"]
    )
    result = sandbox.run("init-control-plane.sh", INIT)
    assert result.returncode == 0, result.stderr
    approvals = [c for c in result.commands() if " certificate approve " in f" {c} "]
    assert len(approvals) == 1 and approvals[0].endswith("csr-own"), approvals
    states = dict(line.split(" ", 1) for line in sandbox.state("kubectl/csrs").splitlines())
    assert states["csr-own"].endswith("Approved") and not states["csr-other"].endswith("Approved")
    # A re-run of an initialized cluster neither waits for nor approves anything.
    sandbox.state("kubectl/csrs", "")
    csr.file_request(sandbox, "csr-later", CP_NAME, own)
    again = sandbox.run("init-control-plane.sh", {**INIT, "CSR_WAIT_SECONDS": "600"})
    assert again.returncode == 0, again.stderr
    assert not [c for c in again.commands() if "certificate approve" in c], again.commands()
    assert not again.called(
        "kubectl", "--kubeconfig=/etc/kubernetes/admin.conf", "--request-timeout=30s", "get", "csr"
    )


# Requests a compromised node could file, with what makes each one not its own (issue 41,
# finding 3): a cluster-CA-signed serverAuth certificate for any of these names would let it
# stand in for the API server or another node.
COMMON = SCRIPTS_DIR / "lib" / "common.sh"
NODE_DNS = "ip-10-42-9-9.us-west-2.compute.internal"
NODE_IP = "10.42.9.9"
NODE_NAMES = csr.serving_names(NODE, NODE_DNS, NODE_IP)
HOSTILE_REQUESTS = csr.hostile_requests(NODE, NODE_IP, PRIVATE_IP)


def _run_check(sandbox: Sandbox, request: str, usages=csr.USAGES) -> str:
    """What lib/common.sh's kubelet_serving_problem says of a request of NODE."""
    names = " ".join(shlex.quote(n) for n in NODE_NAMES.splitlines())
    program = (
        f"source {shlex.quote(str(COMMON))}\n"
        f"kubelet_serving_problem {NODE} {shlex.quote(','.join(usages) + ',')} "
        f"{shlex.quote(request)} {names}\n"
    )
    result = sandbox.run_text(program)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_the_request_check_takes_the_nodes_own_request(sandbox):
    good = csr.request(NODE, dns=[NODE, NODE_DNS], ips=[NODE_IP])
    assert _run_check(sandbox, good) == ""
    assert _run_check(sandbox, csr.request(NODE, dns=[NODE], ips=[NODE_IP])) == ""
    rsa = ["digital signature", "key encipherment", "server auth"]
    assert _run_check(sandbox, good, rsa) == ""


@pytest.mark.parametrize("case", sorted(HOSTILE_REQUESTS))
def test_the_request_check_refuses_what_is_not_the_nodes_own(sandbox, case):
    request, usages = HOSTILE_REQUESTS[case]
    problem = _run_check(sandbox, request, usages or csr.USAGES)
    assert problem, f"{case}: would be approved"


APPROVER = "/usr/local/sbin/gpu-cluster-approve-kubelet-serving"
APPROVER_UNIT = "/etc/systemd/system/gpu-cluster-approve-kubelet-serving"


def test_init_installs_a_timer_that_approves_the_serving_certificates_of_nodes(sandbox):
    """No per-node step on the control plane approves a node's serving certificate as the node
    joins: a timer does, every 20 s, once its Node is registered."""
    result = sandbox.run("init-control-plane.sh", INIT)
    assert result.returncode == 0, result.stderr
    assert _mode(sandbox, APPROVER) == "0o755"
    timer = sandbox.read(f"{APPROVER_UNIT}.timer")
    assert "OnUnitActiveSec=20s" in timer and "WantedBy=timers.target" in timer, timer
    service = sandbox.read(f"{APPROVER_UNIT}.service")
    assert "Type=oneshot" in service and f"ExecStart={APPROVER}" in service, service
    assert result.called("systemctl", "daemon-reload"), result.commands()
    assert sandbox.state("systemd/gpu-cluster-approve-kubelet-serving.timer.enabled") == "yes"
    assert sandbox.service_active("gpu-cluster-approve-kubelet-serving.timer")
    again = sandbox.run("init-control-plane.sh", INIT)
    assert again.returncode == 0, again.stderr
    assert not again.called("systemctl", "daemon-reload"), "nothing changed, yet reloaded"
    assert not again.called("systemctl", "enable"), again.commands()


def _record_names(sandbox: Sandbox, node: str, names: str) -> None:
    """The ConfigMap the program writes for a machine (components/kube/kubelet_serving.py)."""
    sandbox.state(
        f"kubectl/configmaps/kube-system/gpu-cluster-serving-{node}.json",
        json.dumps(
            {
                "metadata": {"name": f"gpu-cluster-serving-{node}", "namespace": "kube-system"},
                "data": {"subjectAltNames": names},
            }
        ),
    )


def test_the_timer_approves_pending_serving_requests_for_the_recorded_names_only(sandbox):
    """Each request made by a Node's own identity (system:node:<name>) for a kubelet serving
    certificate, pending, for the names the program recorded for that machine: approved. Not a
    client certificate, not a request of a name with no record (anyone holding a bootstrap
    token could ask as any name), not one for another name, not one approved already, not one
    of another user; each one left pending says why."""
    assert sandbox.run("init-control-plane.sh", INIT).returncode == 0
    _record_names(sandbox, NODE, NODE_NAMES)
    sandbox.state("kubectl/csrs", "")
    own = csr.request(NODE, dns=[NODE], ips=[NODE_IP])
    csr.file_request(sandbox, "csr-gpu", NODE, own)
    csr.file_request(sandbox, "csr-ghost", "dev-gpu-a10g-9", csr.request("dev-gpu-a10g-9"))
    csr.file_request(sandbox, "csr-api", NODE, HOSTILE_REQUESTS["the API's address"][0])
    csr.file_request(sandbox, "csr-client", NODE, own, usages=["digital signature", "client auth"])
    sandbox.state(
        "kubectl/csrs",
        sandbox.state("kubectl/csrs")
        + csr.line("csr-done", CP_NAME, "Approved")
        + f"csr-user alice {csr.SERVING} \n",
    )
    result = sandbox.run_text(f"{APPROVER}\n")
    assert result.returncode == 0, result.stderr
    approvals = [c for c in result.commands() if " certificate approve " in c]
    assert [a.rsplit(" ", 1)[1] for a in approvals] == ["csr-gpu"], result.commands()
    states = dict(line.split(" ", 1) for line in sandbox.state("kubectl/csrs").splitlines())
    assert states["csr-gpu"].endswith("Approved"), states
    for pending in ("csr-ghost", "csr-api", "csr-client"):
        assert not states[pending].endswith("Approved"), states
    assert "not approving csr-ghost of dev-gpu-a10g-9: no record of its names" in result.stdout
    assert f"not approving csr-api of {NODE}, it stays pending: it names IP Address:" in (
        result.stdout
    )
    assert "not approving csr-client" in result.stdout, result.stdout
    again = sandbox.run_text(f"{APPROVER}\n")
    assert again.returncode == 0, again.stderr
    assert not [c for c in again.commands() if " certificate approve " in c], "approved twice"


# ------------------------------------------------------------------ failures met in the field


def test_operator_kubeconfig_refuses_a_server_that_is_not_an_https_url(cluster):
    params = {
        "API_SERVER": f"{PUBLIC_IP}:6443",  # the scheme left out: kubectl would try plain http
        "CLIENT_NAME": "dev-gpu-operator",
        "GROUP": "gpu-cluster:operators",
        "VALIDITY_HOURS": "24",
    }
    result = cluster.run("user-kubeconfig.sh", params)
    assert result.returncode == 1, result.stderr
    assert (
        f"FAILED: API_SERVER must be https://host:port, got '{PUBLIC_IP}:6443'" in result.stderr
    ), result.stderr
    assert not result.called("kubeadm"), result.commands()


def test_admin_kubeconfig_refuses_a_server_that_is_not_an_https_url(cluster):
    """The admin kubeconfig the stack exports would point kubectl at plain http (or nowhere):
    refused before anything is read or printed."""
    result = cluster.run("read-kubeconfig.sh", {"API_SERVER": f"{PUBLIC_IP}:6443"})
    assert result.returncode == 1, result.stderr
    assert (
        f"FAILED: API_SERVER must be https://host:port, got '{PUBLIC_IP}:6443'" in result.stderr
    ), result.stderr
    assert result.stdout == "", "printed a kubeconfig for a server it refused"


def test_cni_on_a_host_without_a_control_plane_fails_before_applying(sandbox):
    """The CNI step before init (or on the wrong host): no admin kubeconfig, so it fails naming
    the step that must come first, and applies nothing."""
    sandbox.state("curl.body.kube-flannel.yml", FLANNEL_MANIFEST)
    result = sandbox.run("install-cni.sh", CNI)
    assert result.returncode == 1, result.stderr
    assert (
        "FAILED: /etc/kubernetes/admin.conf not found; run init-control-plane.sh first"
        in result.stderr
    ), result.stderr
    assert not result.called("kubectl"), result.commands()

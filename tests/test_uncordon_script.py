"""roll-uncordon.sh (the <node>-uncordon step, last of a node), run for real with bash in the
sandbox against the kubectl stub's Node: it reconciles the pool's labels and taints through the
API (what label-node.sh did; the join sets them at registration, so a change of the pool reaches
running nodes here, never by a re-join): a re-run changes nothing, what the config no longer
wants is taken off (only what this program set: the Node's annotations remember it), and a
missing Node or a failing API stops the step naming which. It approves the node's kubelet
serving certificate and deletes the never-expiring join tokens earlier releases minted for this
node, and no other's. The slot and cordon half is tests/test_rolling_scripts.py's.

The stub applies `kubectl label|taint|annotate` as kubectl does, refusals included
(tests/stubs/_kubectl_objects.py); the first tests here pin those refusals to kubectl's own.
"""

from __future__ import annotations

import base64
import json

import pytest

from tests.helpers import csr
from tests.sandbox import Sandbox, needs_sandbox

pytestmark = needs_sandbox

SCRIPT = "roll-uncordon.sh"
NODE = "dev-gpu-a10g-0"
OTHER = "dev-gpu-a10g-1"
ADMIN_CONF = "/etc/kubernetes/admin.conf"
LABELS_ANNOTATION = "gpu-cluster.io/managed-labels"
TAINTS_ANNOTATION = "gpu-cluster.io/managed-taints"
CHANGE = "0f" * 32
SERVING = "kubernetes.io/kubelet-serving"
# What the kubelet registers by itself, and what an operator set by hand: never this step's.
KUBELET_LABELS = {
    "kubernetes.io/hostname": NODE,
    "kubernetes.io/os": "linux",
    "node.kubernetes.io/instance-type": "g5.xlarge",
}
OPERATOR_LABEL = ("ops.example.com/owner", "alice")
OPERATOR_TAINT = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
POOL = {
    "NODE_NAME": NODE,
    "POOL_NAME": "a10g",
    "MAX_UNAVAILABLE": "1",
    "READY_TIMEOUT_SECONDS": "0",
    "CHANGE": CHANGE,
    "CSR_WAIT_SECONDS": "0",
    "POLL_SECONDS": "0",
    "NODE_LABELS": "gpu-cluster.io/pool=a10g,nvidia.com/gpu.present=true,team=ml",
    "NODE_TAINTS": "nvidia.com/gpu=true:NoSchedule,dedicated:NoExecute",
    "SERVING_NAMES": csr.serving_names(NODE, "ip-10-42-9-9.ec2.internal", "10.42.9.9"),
}
# roll-uncordon.sh's steps, as its log and failures number them.
STEPS = 9


@pytest.fixture
def cluster(tmp_path) -> Sandbox:
    """A control-plane host with an API answering and the Node registered by its kubelet, with
    an operator's label and taint on it."""
    sb = Sandbox(tmp_path)
    sb.write(ADMIN_CONF, "apiVersion: v1\nkind: Config\n", 0o600)
    sb.state("kubectl/api", "v1.35.1")
    node = {
        "metadata": {
            "name": NODE,
            "labels": {**KUBELET_LABELS, OPERATOR_LABEL[0]: OPERATOR_LABEL[1]},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"taints": [OPERATOR_TAINT]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    sb.state(f"kubectl/nodes/{NODE}.json", json.dumps(node))
    return sb


def node(sb: Sandbox) -> dict:
    return json.loads(sb.state(f"kubectl/nodes/{NODE}.json"))


def labels(sb: Sandbox) -> dict[str, str]:
    return node(sb)["metadata"].get("labels", {})


def taints(sb: Sandbox) -> set[str]:
    """Each taint as key=value:Effect (key:Effect without a value)."""
    return {
        f"{t['key']}{'=' + t['value'] if t.get('value') else ''}:{t['effect']}"
        for t in node(sb).get("spec", {}).get("taints", [])
    }


def kubectl(sb: Sandbox, *args: str):
    return sb.run_text(f"kubectl --kubeconfig={ADMIN_CONF} {' '.join(args)}\n")


# --------------------------------------------------------- the stub, in kubectl's shape


@pytest.mark.parametrize(
    ("args", "error"),
    [
        # kubectl pkg/cmd/taint/utils.go deleteTaints: the value is not part of the message
        (("taint", "node", NODE, "gone=x:NoSchedule-"), 'error: taint "gone:NoSchedule" not found'),
        (("taint", "node", NODE, "gone-"), 'error: taint "gone" not found'),
        # pkg/cmd/taint/taint.go Validate
        (
            ("taint", "node", NODE, "--overwrite", "a=1:NoSchedule-", "a=2:NoSchedule"),
            "error: can not both modify and remove the following taint(s) in the same command: "
            '{"a":"NoSchedule"}',
        ),
        # pkg/cmd/taint/taint.go updateTaints
        (
            ("taint", "node", NODE, "maintenance=false:NoSchedule"),
            f"error: node {NODE} already has maintenance taint(s) with same effect(s) and "
            "--overwrite is false",
        ),
        (("taint", "node", NODE, "a=1"), "error: invalid taint spec: a=1"),
        # pkg/cmd/label/label.go labelFunc / parseLabels
        (
            ("label", "node", NODE, f"{OPERATOR_LABEL[0]}=bob"),
            f"error: '{OPERATOR_LABEL[0]}' already has a value (alice), and --overwrite is false",
        ),
        (
            ("label", "node", NODE, "--overwrite", "team=ml", "team-"),
            "error: can not both modify and remove a label in the same command",
        ),
        (("label", "node", "absent-node", "team=ml"), 'nodes "absent-node" not found'),
    ],
)
def test_the_stub_refuses_as_kubectl_does_and_writes_nothing(cluster, args, error):
    before = node(cluster)
    result = kubectl(cluster, *args)
    assert result.returncode == 1, result.output
    assert error in result.stderr, result.stderr
    assert node(cluster) == before


def test_the_stub_applies_as_kubectl_does(cluster):
    """--overwrite replaces a taint of the same key and effect (its value is not compared on
    removal), `key-` takes every effect of a key, an absent label's removal is only reported."""
    steps = [
        ("taint", "node", NODE, "a=1:NoSchedule", "a:NoExecute"),
        ("taint", "node", NODE, "--overwrite", "a=2:NoSchedule"),
        ("label", "node", NODE, "--overwrite", "team=ml", "never-set-"),
    ]
    outputs = []
    for args in steps:
        result = kubectl(cluster, *args)
        assert result.returncode == 0, result.output
        outputs.append(result.stdout)
    assert outputs == [
        f"node/{NODE} tainted\n",
        f"node/{NODE} modified\n",
        f'label "never-set" not found.\nnode/{NODE} labeled\n',
    ]
    assert taints(cluster) == {"a=2:NoSchedule", "a:NoExecute", "maintenance=true:NoSchedule"}
    assert kubectl(cluster, "taint", "node", NODE, "a-").returncode == 0
    assert taints(cluster) == {"maintenance=true:NoSchedule"}
    assert labels(cluster)["team"] == "ml"


# ------------------------------------------------------ labels and taints (label-node.sh's)


def test_first_run_applies_the_pools_labels_and_taints_and_remembers_them(cluster):
    result = cluster.run(SCRIPT, POOL)
    assert result.returncode == 0, result.stderr
    assert labels(cluster) == {
        **KUBELET_LABELS,
        OPERATOR_LABEL[0]: OPERATOR_LABEL[1],
        "gpu-cluster.io/pool": "a10g",
        "nvidia.com/gpu.present": "true",
        "team": "ml",
    }
    assert taints(cluster) == {
        "nvidia.com/gpu=true:NoSchedule",
        "dedicated:NoExecute",
        "maintenance=true:NoSchedule",
    }
    annotations = node(cluster)["metadata"]["annotations"]
    assert annotations[LABELS_ANNOTATION] == POOL["NODE_LABELS"]
    assert annotations[TAINTS_ANNOTATION] == POOL["NODE_TAINTS"]
    assert annotations["node.alpha.kubernetes.io/ttl"] == "0"


def test_a_rerun_changes_nothing(cluster):
    first = cluster.run(SCRIPT, POOL)
    assert first.returncode == 0, first.stderr
    applied = node(cluster)
    again = cluster.run(SCRIPT, POOL)
    assert again.returncode == 0, again.stderr
    assert node(cluster) == applied, "a re-run changed the Node (its resourceVersion moved)"
    assert f"node/{NODE} not labeled" in again.stderr, again.stderr
    removals = [a for c in again.called("kubectl") for a in c[5:] if a.endswith("-")]
    assert removals == [], again.commands()


def test_what_the_config_no_longer_wants_is_removed_and_nothing_else(cluster):
    """The second run's pool drops the team label and the dedicated taint: they go; the
    kubelet's labels and the operator's label and taint, never set by this step, stay."""
    assert cluster.run(SCRIPT, POOL).returncode == 0
    fewer = {
        **POOL,
        "NODE_LABELS": "gpu-cluster.io/pool=a10g,nvidia.com/gpu.present=true",
        "NODE_TAINTS": "nvidia.com/gpu=true:NoSchedule",
    }
    result = cluster.run(SCRIPT, fewer)
    assert result.returncode == 0, result.stderr
    assert labels(cluster) == {
        **KUBELET_LABELS,
        OPERATOR_LABEL[0]: OPERATOR_LABEL[1],
        "gpu-cluster.io/pool": "a10g",
        "nvidia.com/gpu.present": "true",
    }
    assert taints(cluster) == {"nvidia.com/gpu=true:NoSchedule", "maintenance=true:NoSchedule"}
    assert "previously set, now removed: team" in result.stderr, result.stderr
    annotations = node(cluster)["metadata"]["annotations"]
    assert annotations[LABELS_ANNOTATION] == fewer["NODE_LABELS"]
    assert annotations[TAINTS_ANNOTATION] == fewer["NODE_TAINTS"]
    emptied = cluster.run(SCRIPT, {**POOL, "NODE_LABELS": "", "NODE_TAINTS": ""})
    assert emptied.returncode == 0, emptied.stderr
    assert labels(cluster) == {**KUBELET_LABELS, OPERATOR_LABEL[0]: OPERATOR_LABEL[1]}
    assert taints(cluster) == {"maintenance=true:NoSchedule"}


def test_labels_the_join_set_at_registration_are_taken_off_when_the_pool_drops_them(cluster):
    """A node joined with the pool's labels (kubelet --node-labels) and taints before any
    uncordon remembered them: the first run remembers what it set, so a later pool change
    takes off what it no longer wants."""
    registered = node(cluster)
    registered["metadata"]["labels"]["team"] = "ml"
    cluster.state(f"kubectl/nodes/{NODE}.json", json.dumps(registered))
    assert cluster.run(SCRIPT, POOL).returncode == 0
    result = cluster.run(SCRIPT, {**POOL, "NODE_LABELS": "gpu-cluster.io/pool=a10g"})
    assert result.returncode == 0, result.stderr
    assert "team" not in labels(cluster), labels(cluster)


def test_a_taint_whose_value_changes_is_replaced(cluster):
    """Same key and effect, another value: kubectl refuses to remove and set one key and effect
    in one command, so the old one is overwritten, not removed."""
    assert cluster.run(SCRIPT, POOL).returncode == 0
    changed = {**POOL, "NODE_TAINTS": "nvidia.com/gpu=present:NoSchedule,dedicated:NoExecute"}
    result = cluster.run(SCRIPT, changed)
    assert result.returncode == 0, result.stderr
    assert taints(cluster) == {
        "nvidia.com/gpu=present:NoSchedule",
        "dedicated:NoExecute",
        "maintenance=true:NoSchedule",
    }


def test_a_managed_taint_taken_off_by_hand_is_not_removed_again(cluster):
    """An operator took the dedicated taint off; the pool then drops it too: the step does not
    ask kubectl to remove what is not there (kubectl fails the whole command on it)."""
    assert cluster.run(SCRIPT, POOL).returncode == 0
    edited = node(cluster)
    edited["spec"]["taints"] = [t for t in edited["spec"]["taints"] if t["key"] != "dedicated"]
    cluster.state(f"kubectl/nodes/{NODE}.json", json.dumps(edited))
    result = cluster.run(SCRIPT, {**POOL, "NODE_TAINTS": "nvidia.com/gpu=true:NoSchedule"})
    assert result.returncode == 0, result.stderr
    assert "taint dedicated:NoExecute set before is not on the Node any more" in result.stderr
    assert taints(cluster) == {"nvidia.com/gpu=true:NoSchedule", "maintenance=true:NoSchedule"}
    annotations = node(cluster)["metadata"]["annotations"]
    assert annotations[TAINTS_ANNOTATION] == "nvidia.com/gpu=true:NoSchedule"


def test_a_node_that_does_not_exist_fails_naming_it_and_the_step(cluster):
    result = cluster.run(SCRIPT, {**POOL, "NODE_NAME": "dev-gpu-a10g-9"})
    assert result.returncode == 1, result.stderr
    assert (
        "[roll-uncordon] FAILED: Node dev-gpu-a10g-9 is not registered; it must have joined "
        "before it is put back" in result.stderr
    ), result.stderr
    assert not [c for c in result.called("kubectl") if {"label", "taint", "annotate"} & set(c)]


def test_an_api_server_that_does_not_answer_is_not_called_a_missing_node(cluster):
    cluster.state("kubectl/api-down", "yes")
    result = cluster.run(SCRIPT, POOL)
    assert result.returncode == 1, result.stderr
    assert (
        f"[roll-uncordon] FAILED: could not read Node {NODE} from the API server: The "
        "connection to the server 10.0.0.1:6443 was refused" in result.stderr
    ), result.stderr
    assert "not registered" not in result.stderr


@pytest.mark.parametrize(
    ("verb", "step"),
    [("label", f"2/{STEPS} (reconcile labels)"), ("taint", f"3/{STEPS} (reconcile taints)")],
)
def test_an_api_error_fails_the_step_naming_it_and_remembers_nothing(cluster, verb, step):
    """The API server fails the write: the step stops naming where, and the annotations keep
    what was managed before, so the next run still knows what to take off."""
    assert cluster.run(SCRIPT, POOL).returncode == 0
    cluster.state(f"kubectl.fail.{verb}", 1)
    fewer = {**POOL, "NODE_LABELS": "team=ml", "NODE_TAINTS": ""}
    result = cluster.run(SCRIPT, fewer)
    assert result.returncode == 1, result.stderr
    assert f"[roll-uncordon] FAILED at step {step}" in result.stderr, result.stderr
    assert "etcdserver: request timed out" in result.stderr
    annotations = node(cluster)["metadata"]["annotations"]
    assert annotations[LABELS_ANNOTATION] == POOL["NODE_LABELS"]
    assert annotations[TAINTS_ANNOTATION] == POOL["NODE_TAINTS"]
    retried = cluster.run(SCRIPT, fewer)
    assert retried.returncode == 0, retried.stderr
    assert labels(cluster) == {**KUBELET_LABELS, OPERATOR_LABEL[0]: OPERATOR_LABEL[1], "team": "ml"}
    assert taints(cluster) == {"maintenance=true:NoSchedule"}


# ------------------------------------------------------ the kubelet serving certificate


def test_the_nodes_serving_certificate_is_approved_once(cluster):
    own = csr.kubelet_request(NODE, POOL["SERVING_NAMES"])
    csr.file_request(cluster, "csr-gpu", NODE, own)
    csr.file_request(cluster, "csr-other", OTHER, csr.request(OTHER, dns=[OTHER]))
    cluster.state(
        "kubectl/csrs",
        cluster.state("kubectl/csrs")
        + f"csr-client system:node:{NODE} kubernetes.io/kube-apiserver-client-kubelet \n",
    )
    result = cluster.run(SCRIPT, POOL)
    assert result.returncode == 0, result.stderr
    assert "approved kubelet serving certificate request csr-gpu" in result.stderr
    approvals = [c for c in result.commands() if " certificate approve " in c]
    assert len(approvals) == 1 and approvals[0].endswith(" csr-gpu"), approvals
    again = cluster.run(SCRIPT, POOL)
    assert again.returncode == 0, again.stderr
    assert not [c for c in again.commands() if "approve" in c], "approved twice"


def test_a_request_for_names_not_the_nodes_stays_pending_and_says_why(cluster):
    """Issue 41, finding 3: the node asks for the API server's service name too."""
    bad = csr.request(NODE, dns=[NODE, "kubernetes.default.svc"], ips=["10.42.9.9"])
    csr.file_request(cluster, "csr-gpu", NODE, bad)
    result = cluster.run(SCRIPT, POOL)
    assert result.returncode == 0, result.stderr
    assert not [c for c in result.commands() if " certificate approve " in c], "approved"
    assert "not approving kubelet serving certificate request csr-gpu" in result.stderr
    assert "it names DNS:kubernetes.default.svc" in result.stderr, result.stderr


def test_without_a_request_it_says_how_to_approve_later(cluster):
    result = cluster.run(SCRIPT, POOL)
    assert result.returncode == 0, result.stderr
    assert "kubectl certificate approve" in result.stderr, result.stderr


# ------------------------------------------------------ join tokens of earlier releases


def token_secret(token_id: str, description: str, expiration: str | None) -> str:
    """A bootstrap token Secret as the API serves it (data base64-encoded)."""
    data = {
        "token-id": token_id,
        "token-secret": "0123456789abcdef",
        "description": description,
        "usage-bootstrap-authentication": "true",
        "usage-bootstrap-signing": "true",
        "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token",
    }
    if expiration is not None:
        data["expiration"] = expiration
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "bootstrap.kubernetes.io/token",
            "metadata": {"name": f"bootstrap-token-{token_id}", "namespace": "kube-system"},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
        }
    )


def test_only_this_nodes_never_expiring_join_tokens_are_deleted(cluster):
    """Earlier releases minted `--ttl 0s` tokens ("gpu-cluster: join of <node>") and deleted
    each once its node was Ready: one left by a failed join is a standing credential. Tokens
    with an expiry (this release's, kubeadm init's) are the token cleaner's; another node's are
    its own uncordon's; a Secret of another type is no token at all."""
    secrets = {
        "bootstrap-token-aaaaaa": token_secret("aaaaaa", f"gpu-cluster: join of {NODE}", None),
        "bootstrap-token-bbbbbb": token_secret("bbbbbb", f"gpu-cluster: join of {OTHER}", None),
        "bootstrap-token-cccccc": token_secret(
            "cccccc", f"gpu-cluster: join of {NODE}", "2026-01-01T02:00:00Z"
        ),
        "bootstrap-token-dddddd": token_secret(
            "dddddd",
            "kubeadm init default; each node joins with a token of its own",
            "2026-01-01T00:15:00Z",
        ),
        # An operator's own (kubeadm token create --ttl 0), without a description.
        "bootstrap-token-ffffff": token_secret("ffffff", "", None),
        # Not a bootstrap token, though its description reads like one of ours.
        "gpu-cluster-notes": json.dumps(
            {
                "kind": "Secret",
                "type": "Opaque",
                "metadata": {"name": "gpu-cluster-notes", "namespace": "kube-system"},
                "data": {
                    "token-id": base64.b64encode(b"eeeeee").decode(),
                    "description": base64.b64encode(
                        f"gpu-cluster: join of {NODE}".encode()
                    ).decode(),
                },
            }
        ),
    }
    for name, text in secrets.items():
        cluster.state(f"kubectl/secrets/kube-system/{name}.json", text)
    result = cluster.run(SCRIPT, POOL)
    assert result.returncode == 0, result.stderr
    assert cluster.state("kubectl/deleted-secrets") == "kube-system/bootstrap-token-aaaaaa\n"
    assert f"never-expiring join tokens of {NODE} deleted: 1" in result.stderr, result.stderr
    left = sorted(p.stem for p in (cluster.state_dir / "kubectl/secrets/kube-system").iterdir())
    assert left == sorted(set(secrets) - {"bootstrap-token-aaaaaa"}), left
    again = cluster.run(SCRIPT, POOL)
    assert again.returncode == 0, again.stderr
    assert f"never-expiring join tokens of {NODE} deleted: 0" in again.stderr
    assert cluster.state("kubectl/deleted-secrets") == "kube-system/bootstrap-token-aaaaaa\n"

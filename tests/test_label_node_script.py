"""label-node.sh (the <node>-labels step), run for real with bash in the sandbox against the
kubectl stub's Node: the pool's labels and taints reach the Node through the API, a re-run
changes nothing, what the config no longer wants is taken off (only what this program set: the
Node's annotations remember it), and a missing Node or a failing API stops the step naming it.

The stub applies `kubectl label|taint|annotate` as kubectl does, refusals included
(tests/stubs/_kubectl_objects.py); the first tests here pin those refusals to kubectl's own.
"""

from __future__ import annotations

import json

import pytest

from tests.sandbox import Sandbox, needs_sandbox

pytestmark = needs_sandbox

NODE = "dev-gpu-a10g-0"
ADMIN_CONF = "/etc/kubernetes/admin.conf"
LABELS_ANNOTATION = "gpu-cluster.io/managed-labels"
TAINTS_ANNOTATION = "gpu-cluster.io/managed-taints"
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
    "NODE_LABELS": "gpu-cluster.io/pool=a10g,nvidia.com/gpu.present=true,team=ml",
    "NODE_TAINTS": "nvidia.com/gpu=true:NoSchedule,dedicated:NoExecute",
}


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


# ------------------------------------------------------------------------ label-node.sh


def test_first_run_applies_the_pools_labels_and_taints_and_remembers_them(cluster):
    result = cluster.run("label-node.sh", POOL)
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
    first = cluster.run("label-node.sh", POOL)
    assert first.returncode == 0, first.stderr
    applied = node(cluster)
    again = cluster.run("label-node.sh", POOL)
    assert again.returncode == 0, again.stderr
    assert node(cluster) == applied, "a re-run changed the Node (its resourceVersion moved)"
    assert f"node/{NODE} not labeled" in again.stderr, again.stderr
    removals = [a for c in again.called("kubectl") for a in c[5:] if a.endswith("-")]
    assert removals == [], again.commands()


def test_what_the_config_no_longer_wants_is_removed_and_nothing_else(cluster):
    """The second run's pool drops the team label and the dedicated taint: they go; the
    kubelet's labels and the operator's label and taint, never set by this step, stay."""
    assert cluster.run("label-node.sh", POOL).returncode == 0
    fewer = {
        **POOL,
        "NODE_LABELS": "gpu-cluster.io/pool=a10g,nvidia.com/gpu.present=true",
        "NODE_TAINTS": "nvidia.com/gpu=true:NoSchedule",
    }
    result = cluster.run("label-node.sh", fewer)
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
    emptied = cluster.run(
        "label-node.sh", {"NODE_NAME": NODE, "NODE_LABELS": "", "NODE_TAINTS": ""}
    )
    assert emptied.returncode == 0, emptied.stderr
    assert labels(cluster) == {**KUBELET_LABELS, OPERATOR_LABEL[0]: OPERATOR_LABEL[1]}
    assert taints(cluster) == {"maintenance=true:NoSchedule"}


def test_a_taint_whose_value_changes_is_replaced(cluster):
    """Same key and effect, another value: kubectl refuses to remove and set one key and effect
    in one command, so the old one is overwritten, not removed."""
    assert cluster.run("label-node.sh", POOL).returncode == 0
    changed = {**POOL, "NODE_TAINTS": "nvidia.com/gpu=present:NoSchedule,dedicated:NoExecute"}
    result = cluster.run("label-node.sh", changed)
    assert result.returncode == 0, result.stderr
    assert taints(cluster) == {
        "nvidia.com/gpu=present:NoSchedule",
        "dedicated:NoExecute",
        "maintenance=true:NoSchedule",
    }


def test_a_managed_taint_taken_off_by_hand_is_not_removed_again(cluster):
    """An operator took the dedicated taint off; the pool then drops it too: the step does not
    ask kubectl to remove what is not there (kubectl fails the whole command on it)."""
    assert cluster.run("label-node.sh", POOL).returncode == 0
    edited = node(cluster)
    edited["spec"]["taints"] = [t for t in edited["spec"]["taints"] if t["key"] != "dedicated"]
    cluster.state(f"kubectl/nodes/{NODE}.json", json.dumps(edited))
    result = cluster.run("label-node.sh", {**POOL, "NODE_TAINTS": "nvidia.com/gpu=true:NoSchedule"})
    assert result.returncode == 0, result.stderr
    assert "taint dedicated:NoExecute set before is not on the Node any more" in result.stderr
    assert taints(cluster) == {"nvidia.com/gpu=true:NoSchedule", "maintenance=true:NoSchedule"}
    annotations = node(cluster)["metadata"]["annotations"]
    assert annotations[TAINTS_ANNOTATION] == "nvidia.com/gpu=true:NoSchedule"


def test_a_node_that_does_not_exist_fails_naming_it_and_the_step(cluster):
    result = cluster.run("label-node.sh", {**POOL, "NODE_NAME": "dev-gpu-a10g-9"})
    assert result.returncode == 1, result.stderr
    assert (
        "[labels] FAILED: Node dev-gpu-a10g-9 expected (the node-ready step waits for it), not "
        "found: it left the cluster since" in result.stderr
    ), result.stderr
    assert not [c for c in result.called("kubectl") if {"label", "taint", "annotate"} & set(c)]


def test_an_api_server_that_does_not_answer_is_not_called_a_missing_node(cluster):
    cluster.state("kubectl/api-down", "yes")
    result = cluster.run("label-node.sh", POOL)
    assert result.returncode == 1, result.stderr
    assert (
        f"[labels] FAILED: could not read Node {NODE} from the API server: The connection to "
        "the server 10.0.0.1:6443 was refused" in result.stderr
    ), result.stderr
    assert "left the cluster" not in result.stderr


@pytest.mark.parametrize(
    ("verb", "step"),
    [("label", "1/3 (reconcile labels)"), ("taint", "2/3 (reconcile taints)")],
)
def test_an_api_error_fails_the_step_naming_it_and_remembers_nothing(cluster, verb, step):
    """The API server fails the write: the step stops naming where, and the annotations keep
    what was managed before, so the next run still knows what to take off."""
    assert cluster.run("label-node.sh", POOL).returncode == 0
    cluster.state(f"kubectl.fail.{verb}", 1)
    fewer = {**POOL, "NODE_LABELS": "team=ml", "NODE_TAINTS": ""}
    result = cluster.run("label-node.sh", fewer)
    assert result.returncode == 1, result.stderr
    assert f"[labels] FAILED at step {step}" in result.stderr, result.stderr
    assert "etcdserver: request timed out" in result.stderr
    annotations = node(cluster)["metadata"]["annotations"]
    assert annotations[LABELS_ANNOTATION] == POOL["NODE_LABELS"]
    assert annotations[TAINTS_ANNOTATION] == POOL["NODE_TAINTS"]
    retried = cluster.run("label-node.sh", fewer)
    assert retried.returncode == 0, retried.stderr
    assert labels(cluster) == {**KUBELET_LABELS, OPERATOR_LABEL[0]: OPERATOR_LABEL[1], "team": "ml"}
    assert taints(cluster) == {"maintenance=true:NoSchedule"}

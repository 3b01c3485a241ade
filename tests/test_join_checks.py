"""join-node.sh's checks after kubeadm join, run for real in the sandbox: the node watches its
own Node through the API with its kubelet's credentials (/etc/kubernetes/kubelet.conf; the Node
authorizer lets a node read its own Node) until it is registered, Ready and, when EXPECTED_GPUS
is set, reports that many allocatable nvidia.com/gpu.

The kubeadm stub's join registers the Node as the kubelet does (tests/stubs/_kubelet_register.py:
the JoinConfiguration's name, labels, provider id and taints; state kubelet.ready and
kubelet.gpus for its status). Each way the wait can end has its own test: success, and each
failure the message must tell apart (not registered, not Ready, Ready with no GPUs, too few, too
many, an API that does not answer), plus the node that gets there while the script waits. The
timeouts are 0 (one look) unless a test waits on purpose: no test waits minutes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.sandbox import Sandbox, needs_sandbox

pytestmark = needs_sandbox

SCRIPT = "join-node.sh"
NODE = "dev-gpu-a10g-0"
KUBELET_CONF = "/etc/kubernetes/kubelet.conf"
TOKEN = "abcdef.0123456789abcdef"
INSTANCE_ID = "i-0123456789abcdef0"
# One look at each check (READY/CAPACITY_TIMEOUT_SECONDS=0): a failure test takes no wall-clock
# time.
ONCE = {
    "NODE_NAME": NODE,
    "API_ENDPOINT": "10.42.1.10:6443",
    "JOIN_TOKEN": TOKEN,
    "CA_CERT_HASH": "sha256:" + "ab" * 32,
    "KUBERNETES_MINOR": "1.35",
    "NODE_LABELS": f"gpu-cluster.io/instance-id={INSTANCE_ID},gpu-cluster.io/pool=a10g",
    "NODE_TAINTS": "nvidia.com/gpu=true:NoSchedule",
    "PROVIDER_ID": f"aws:///us-west-2a/{INSTANCE_ID}",
    "EXPECTED_GPUS": "8",
    "READY_TIMEOUT_SECONDS": "0",
    "CAPACITY_TIMEOUT_SECONDS": "0",
    "POLL_SECONDS": "0",
    "DEVICE_PLUGIN_NAMESPACE": "nvidia-device-plugin",
    "RETRY_BASE_SECONDS": "0.01",
}


def node_json(ready: str | None = "True", gpus: str | None = "8") -> str:
    conditions = [{"type": "MemoryPressure", "status": "False"}]
    if ready is not None:
        conditions.append({"type": "Ready", "status": ready})
    allocatable = {"cpu": "47", "memory": "191Gi", "pods": "110"}
    if gpus is not None:
        allocatable["nvidia.com/gpu"] = gpus
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": NODE},
            "status": {"conditions": conditions, "allocatable": allocatable},
        }
    )


@pytest.fixture
def host(tmp_path: Path) -> Sandbox:
    """A GPU host where install-kube-tools.sh ran (kubeadm 1.35, kubelet enabled), in a cluster
    whose API answers; its kubelet registers a Ready Node with 8 GPUs unless a test says
    otherwise (state kubelet.ready, kubelet.gpus, kubelet.never-registers)."""
    sb = Sandbox(tmp_path)
    sb.state("dpkg/kubeadm", "1.35.1-1.1")
    sb.state("dpkg/kubelet", "1.35.1-1.1")
    sb.state("systemd/kubelet.enabled", "yes")
    sb.state("kubectl/api", "v1.35.1")
    (sb.state_dir / "kubectl" / "nodes").mkdir(parents=True)
    sb.state("kubelet.gpus", "8")
    return sb


def set_node(sb: Sandbox, text: str, *, then: str | None = None, after: int = 0) -> None:
    """The Node as the API serves it now (and `then`, after `after` more looks)."""
    sb.state(f"kubectl/nodes/{NODE}.json", text)
    if then is not None:
        sb.state(f"kubectl/nodes/{NODE}.json.next", then)
        sb.state(f"kubectl/nodes/{NODE}.next-after", after)


def failure_line(output: str) -> str:
    lines = [line for line in output.splitlines() if "FAILED" in line]
    assert lines, f"{SCRIPT}: no FAILED line in:\n{output}"
    return lines[-1]


def looks(result) -> list[list[str]]:
    """The kubectl calls that read the Node."""
    return [c for c in result.called("kubectl") if "get" in c and "node" in c]


def test_success_is_a_node_ready_with_every_gpu_seen_with_its_own_credentials(host):
    result = host.run(SCRIPT, ONCE)
    assert result.returncode == 0, f"{SCRIPT} for {NODE} failed:\n{result.output}"
    assert f"Node {NODE} Ready with 8 allocatable nvidia.com/gpu" in result.stderr, result.stderr
    assert TOKEN not in result.output
    kubectl = result.called("kubectl")
    assert kubectl and looks(result) == kubectl, result.commands()
    for call in kubectl:
        # The kubelet's own kubeconfig (a node has no admin.conf), and only its own Node.
        assert call[1:3] == ["--kubeconfig", KUBELET_CONF], call
        assert call[call.index("node") + 1] == NODE, call
    # After the join: the checks look only once the node has joined.
    commands = result.commands()
    joined = next(i for i, c in enumerate(commands) if c.startswith("kubeadm join"))
    assert all(commands.index(" ".join(c)) > joined for c in kubectl), commands


def test_the_node_registers_with_the_instance_it_runs_on(host):
    """The kubelet registers with the machine's provider id and the labels and taints it is
    given, which the join's delete hook checks it acts on (components/kube/node_hooks.py)."""
    assert host.run(SCRIPT, ONCE).returncode == 0
    node = json.loads(host.state(f"kubectl/nodes/{NODE}.json"))
    assert node["spec"]["providerID"] == ONCE["PROVIDER_ID"], node
    assert node["metadata"]["labels"]["gpu-cluster.io/instance-id"] == INSTANCE_ID, node
    assert node["spec"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
    ], node


def test_a_node_never_registered_is_named_as_such(host):
    host.state("kubelet.never-registers", "yes")
    result = host.run(SCRIPT, ONCE)
    assert result.returncode == 1, f"{SCRIPT}: {NODE} does not exist, yet it passed"
    line = failure_line(result.output)
    assert (
        f"[join] FAILED: after 0s: Node {NODE} is not registered: the kubelet never reached "
        "the API server, or registered another name (a host joined before under another node "
        "name: remove that node's entry, run 'sudo kubeadm reset -f' on the host, then add it); "
        "look at 'journalctl -u kubelet' on this host" in line
    ), line


@pytest.mark.parametrize("ready", ["False", "Unknown", "none"])
def test_a_node_not_ready_is_named_as_such_and_not_blamed_on_gpus(host, ready):
    host.state("kubelet.ready", ready)
    result = host.run(SCRIPT, ONCE)
    assert result.returncode == 1, f"{SCRIPT}: {NODE} Ready={ready} passed"
    line = failure_line(result.output)
    shown = "none" if ready == "none" else ready
    assert f"after 0s: Node {NODE} is not Ready (Ready={shown}):" in line, line
    assert f"'kubectl describe node {NODE}'" in line and "journalctl -u kubelet" in line, line
    assert "allocatable" not in line, f"{SCRIPT}: not-Ready must not blame GPUs: {line}"


@pytest.mark.parametrize("gpus", ["0", None], ids=["zero", "missing"])
def test_ready_without_gpus_points_at_device_plugin_and_runtime(host, gpus):
    if gpus is None:
        (host.state_dir / "kubelet.gpus").unlink()
    else:
        host.state("kubelet.gpus", gpus)
    result = host.run(SCRIPT, ONCE)
    assert result.returncode == 1, f"{SCRIPT}: {NODE} with gpus={gpus} passed"
    line = failure_line(result.output)
    expected = (
        f"after 0s: Node {NODE} is Ready but has no allocatable nvidia.com/gpu: the device "
        "plugin pod on it or the nvidia container runtime is not working (kubectl -n "
        f"nvidia-device-plugin get pods -o wide --field-selector spec.nodeName={NODE}"
    )
    assert expected in line, f"{SCRIPT} for {NODE}: {line}"
    assert "kubectl -n nvidia-device-plugin logs <that pod>" in line, line
    assert "/etc/containerd/conf.d/99-nvidia.toml" in line, line
    # The driver step's boot-time check: a kernel booted without an NVIDIA module.
    assert "systemctl status gpu-cluster-nvidia-boot-check" in line, f"{SCRIPT}: {line}"


@pytest.mark.parametrize(("gpus", "case"), [("4", "too few"), ("16", "too many")])
def test_another_count_than_expected_names_both(host, gpus, case):
    """Too few (a GPU lost), too many (16 shares of 8 GPUs: time slicing configured otherwise
    than the stack says): neither is success, and the message says how many of how many."""
    host.state("kubelet.gpus", gpus)
    result = host.run(SCRIPT, ONCE)
    assert result.returncode == 1, f"{SCRIPT}: {NODE} with {gpus} of 8 GPUs ({case}) passed"
    line = failure_line(result.output)
    expected = (
        f"after 0s: Node {NODE} reports {gpus} allocatable nvidia.com/gpu, expected 8: check "
        "nvidia-smi on this host, the MIG/time-slicing config (kubectl -n nvidia-device-plugin "
        "get configmap"
    )
    assert expected in line, f"{SCRIPT} for {NODE}: {line}"


def test_the_four_failures_read_apart(host):
    """Not registered, not Ready, no GPUs, too few: four different first sentences, so the
    person reading `pulumi up` knows which part of the node to look at."""
    cases = {
        "not registered": {"kubelet.never-registers": "yes"},
        "not Ready": {"kubelet.ready": "False"},
        "no GPUs": {"kubelet.gpus": "0"},
        "too few": {"kubelet.gpus": "2"},
    }
    sentences = {}
    for case, state in cases.items():
        sb = Sandbox(host.root / case.replace(" ", "-"))
        for key, value in {
            "dpkg/kubeadm": "1.35.1-1.1",
            "systemd/kubelet.enabled": "yes",
            "kubectl/api": "v1.35.1",
            "kubelet.gpus": "8",
            **state,
        }.items():
            sb.state(key, value)
        (sb.state_dir / "kubectl" / "nodes").mkdir(parents=True)
        result = sb.run(SCRIPT, ONCE)
        assert result.returncode == 1, f"{case}: {result.output}"
        sentences[case] = failure_line(result.output).split(":")[2]
    assert len(set(sentences.values())) == len(cases), sentences


def test_timeout_message_names_the_bound(host):
    host.state("kubelet.gpus", "0")
    result = host.run(SCRIPT, {**ONCE, "CAPACITY_TIMEOUT_SECONDS": "1", "POLL_SECONDS": "0.1"})
    assert result.returncode == 1, f"{SCRIPT}: {NODE} with 0 GPUs passed"
    assert "after 1s: Node" in failure_line(result.output), result.output
    # How many looks fit in 1s depends on the machine's load; that it looked again, and gave up
    # at the bound, does not.
    assert len(looks(result)) >= 2, f"{SCRIPT} for {NODE}: looked once: {result.commands()}"


def test_waits_through_not_ready_and_plugin_start(host):
    """Not Ready first (its join's one look fails); on the next up, Ready with no GPUs (the
    plugin starting), then all 8: success, and the wait says what it waits for."""
    host.state("kubelet.ready", "False")
    first = host.run(SCRIPT, ONCE)
    assert "is not Ready" in failure_line(first.output), first.output
    set_node(host, node_json(gpus="0"), then=node_json(gpus="8"), after=2)
    result = host.run(SCRIPT, {**ONCE, "CAPACITY_TIMEOUT_SECONDS": "30", "POLL_SECONDS": "0.05"})
    assert result.returncode == 0, f"{SCRIPT} for {NODE} did not wait:\n{result.output}"
    assert not result.called("kubeadm", "join"), "joined twice"
    assert len(looks(result)) == 3, f"expected 3 looks (0, 0, 8 GPUs): {result.commands()}"
    assert "FAILED" not in result.output, result.output
    assert f"waiting: Node {NODE} is Ready but has no allocatable nvidia.com/gpu" in (
        result.stderr
    ), result.stderr


def test_without_expected_gpus_a_ready_node_is_enough(host):
    """validation.enabled false: no capacity check (EXPECTED_GPUS empty)."""
    (host.state_dir / "kubelet.gpus").unlink()
    result = host.run(SCRIPT, {**ONCE, "EXPECTED_GPUS": ""})
    assert result.returncode == 0, result.output
    assert "no capacity check (validation disabled)" in result.stderr, result.stderr
    assert len(looks(result)) == 1, result.commands()


def test_non_numeric_count_is_reported_as_such(host):
    host.state("kubelet.gpus", "abc")
    result = host.run(SCRIPT, ONCE)
    assert result.returncode == 1, f"{SCRIPT} for {NODE}: a non-numeric count passed"
    line = failure_line(result.output)
    assert "allocatable nvidia.com/gpu is 'abc', not a count" in line, f"{SCRIPT}: {line}"


@pytest.mark.parametrize(
    ("breakage", "expected"),
    [
        ("api-down", "The connection to the server 10.0.0.1:6443 was refused"),
        ("unreadable", None),
    ],
)
def test_an_api_error_is_not_blamed_on_the_node(host, breakage, expected):
    assert host.run(SCRIPT, ONCE).returncode == 0
    if breakage == "api-down":
        host.state("kubectl/api-down", "yes")
    else:
        set_node(host, "not json: the stub's kubectl fails like a broken API server")
    result = host.run(SCRIPT, ONCE)
    assert result.returncode == 1, f"{SCRIPT} for {NODE}: a failing kubectl passed"
    line = failure_line(result.output)
    assert f"cannot read Node {NODE} from the API server: " in line, f"{SCRIPT}: {line}"
    assert expected is None or expected in line, line
    assert "is not Ready" not in line and "not registered" not in line, line


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({**ONCE, "EXPECTED_GPUS": "eight"}, "EXPECTED_GPUS must be a whole number, got 'eight'"),
        ({**ONCE, "EXPECTED_GPUS": "0"}, "EXPECTED_GPUS must be at least 1, got '0'"),
        (
            {**ONCE, "READY_TIMEOUT_SECONDS": "10m"},
            "READY_TIMEOUT_SECONDS must be a whole number, got '10m'",
        ),
        (
            {**ONCE, "CAPACITY_TIMEOUT_SECONDS": "-1"},
            "CAPACITY_TIMEOUT_SECONDS must be a whole number, got '-1'",
        ),
        (
            {**ONCE, "PROVIDER_ID": INSTANCE_ID},
            "PROVIDER_ID must be aws:///<zone>/<instance id> or gpu-cluster:///host-<hex>, "
            f"got '{INSTANCE_ID}'",
        ),
        (
            {**ONCE, "NODE_NAME": "Dev_GPU-0"},
            "NODE_NAME must be a lowercase DNS name, got 'Dev_GPU-0'",
        ),
    ],
    ids=[
        "not-a-number",
        "zero",
        "bad-ready-timeout",
        "bad-capacity-timeout",
        "bad-provider-id",
        "bad-node-name",
    ],
)
def test_bad_inputs_fail_before_joining_or_asking_the_api(host, params, expected):
    result = host.run(SCRIPT, params)
    assert result.returncode == 1, f"{SCRIPT} accepted {params}"
    assert expected in result.output, f"{SCRIPT} with {params}: {result.output}"
    assert result.calls == [], f"{SCRIPT} with {params}: {result.commands()}"

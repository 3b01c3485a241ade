"""wait-gpu-capacity.sh, run for real in the sandbox against a kubectl stub serving Node JSON.

Each way the wait can end has its own test: success, and the three failures the message must tell
apart (node not Ready, Ready with no GPUs, too few GPUs), plus the node that gets there while the
script waits.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.sandbox import Sandbox, needs_sandbox

pytestmark = needs_sandbox

SCRIPT = "wait-gpu-capacity.sh"
NODE = "dev-gpu-a10g-0"
ADMIN_CONF = "/etc/kubernetes/admin.conf"
# TIMEOUT_SECONDS=0: look once, so a failure test takes no wall-clock time.
ONCE = {"NODE_NAME": NODE, "EXPECTED_GPUS": "8", "TIMEOUT_SECONDS": "0", "POLL_SECONDS": "0"}


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
def sandbox(tmp_path: Path) -> Sandbox:
    """A control-plane host with the admin kubeconfig and an API server that has no Node yet."""
    sb = Sandbox(tmp_path)
    sb.write(ADMIN_CONF, "apiVersion: v1\nkind: Config\n", mode=0o600)
    (sb.state_dir / "kubectl" / "nodes").mkdir(parents=True)
    return sb


def set_node(sb: Sandbox, text: str, *, then: str | None = None, after: int = 0) -> None:
    sb.state(f"kubectl/nodes/{NODE}.json", text)
    if then is not None:
        sb.state(f"kubectl/nodes/{NODE}.json.next", then)
        sb.state(f"kubectl/nodes/{NODE}.next-after", after)


def failure_line(output: str) -> str:
    lines = [line for line in output.splitlines() if "FAILED" in line]
    assert lines, f"{SCRIPT}: no FAILED line in:\n{output}"
    return lines[-1]


def test_success_prints_the_exact_message(sandbox):
    set_node(sandbox, node_json(gpus="8"))
    result = sandbox.run(SCRIPT, ONCE)
    assert result.returncode == 0, f"{SCRIPT} for {NODE} failed:\n{result.output}"
    assert result.stdout.strip() == f"node {NODE}: 8 allocatable nvidia.com/gpu, as expected", (
        f"{SCRIPT} for {NODE}: stdout {result.stdout!r}"
    )
    gets = result.called("kubectl")
    assert gets and all(f"--kubeconfig {ADMIN_CONF}" in " ".join(c) for c in gets), (
        f"{SCRIPT} for {NODE}: kubectl must use the admin kubeconfig: {result.commands()}"
    )


def test_node_not_registered_is_not_ready(sandbox):
    result = sandbox.run(SCRIPT, ONCE)
    assert result.returncode != 0, f"{SCRIPT}: {NODE} does not exist, yet it passed"
    line = failure_line(result.output)
    assert f"node {NODE} is not Ready: check kubelet on the node (journalctl -u kubelet)" in line, (
        f"{SCRIPT} for {NODE}: {line}"
    )
    assert "no Node of that name" in line, f"{SCRIPT} for {NODE}: {line}"


@pytest.mark.parametrize("ready", ["False", "Unknown", None])
def test_node_not_ready(sandbox, ready):
    set_node(sandbox, node_json(ready=ready, gpus="8"))
    result = sandbox.run(SCRIPT, ONCE)
    assert result.returncode != 0, f"{SCRIPT}: {NODE} Ready={ready} passed"
    line = failure_line(result.output)
    assert f"node {NODE} is not Ready: check kubelet on the node (journalctl -u kubelet)" in line, (
        f"{SCRIPT} for {NODE} (Ready={ready}): {line}"
    )
    assert f"Ready condition is {ready or 'missing'}" in line, f"{SCRIPT} for {NODE}: {line}"
    assert "allocatable" not in line, f"{SCRIPT} for {NODE}: not-Ready must not blame GPUs: {line}"


@pytest.mark.parametrize("gpus", ["0", None], ids=["zero", "missing"])
def test_ready_without_gpus_points_at_device_plugin_and_runtime(sandbox, gpus):
    set_node(sandbox, node_json(gpus=gpus))
    result = sandbox.run(SCRIPT, {**ONCE, "DEVICE_PLUGIN_NAMESPACE": "nvidia-device-plugin"})
    assert result.returncode != 0, f"{SCRIPT}: {NODE} with gpus={gpus} passed"
    line = failure_line(result.output)
    expected = (
        f"node {NODE} is Ready but has no allocatable nvidia.com/gpu: the device plugin pod on "
        "it or the nvidia container runtime is not working (kubectl -n nvidia-device-plugin"
    )
    assert expected in line, f"{SCRIPT} for {NODE}: {line}"
    assert "logs ds/nvidia-device-plugin" in line, f"{SCRIPT} for {NODE}: {line}"
    assert f"spec.nodeName={NODE}" in line, f"{SCRIPT} for {NODE}: name the pod's node: {line}"


def test_too_few_gpus(sandbox):
    set_node(sandbox, node_json(gpus="4"))
    result = sandbox.run(SCRIPT, ONCE)
    assert result.returncode != 0, f"{SCRIPT}: {NODE} with 4 of 8 GPUs passed"
    line = failure_line(result.output)
    expected = (
        f"node {NODE} reports 4 allocatable nvidia.com/gpu, expected 8: check nvidia-smi on "
        "the node, MIG/time-slicing config"
    )
    assert expected in line, f"{SCRIPT} for {NODE}: {line}"


def test_more_than_expected_is_not_success(sandbox):
    """16 shares of 8 GPUs: time slicing configured differently from what the stack says."""
    set_node(sandbox, node_json(gpus="16"))
    result = sandbox.run(SCRIPT, ONCE)
    assert result.returncode != 0, f"{SCRIPT}: {NODE} with 16 for 8 expected passed"
    line = failure_line(result.output)
    assert f"node {NODE} reports 16 allocatable nvidia.com/gpu, expected 8" in line, (
        f"{SCRIPT} for {NODE}: {line}"
    )


def test_timeout_message_names_the_bound(sandbox):
    set_node(sandbox, node_json(gpus="0"))
    result = sandbox.run(SCRIPT, {**ONCE, "TIMEOUT_SECONDS": "1"})
    assert result.returncode != 0, f"{SCRIPT}: {NODE} with 0 GPUs passed"
    assert "after 1s:" in failure_line(result.output), f"{SCRIPT} for {NODE}: {result.output}"
    # How many looks fit in 1s depends on the machine's load; that it looked, and gave up
    # at the bound, does not.
    assert result.called("kubectl"), f"{SCRIPT} for {NODE}: never looked: {result.commands()}"


def test_waits_through_not_ready_and_plugin_start(sandbox):
    """Not Ready, then Ready with no GPUs (plugin starting), then all 8: success, no failure."""
    set_node(sandbox, node_json(ready="False", gpus=None), then=node_json(gpus="0"), after=1)
    params = {**ONCE, "TIMEOUT_SECONDS": "30"}
    first = sandbox.run(SCRIPT, {**params, "TIMEOUT_SECONDS": "0"})
    assert "is not Ready" in failure_line(first.output), f"{SCRIPT} for {NODE}: {first.output}"
    set_node(sandbox, node_json(gpus="0"), then=node_json(gpus="8"), after=2)
    result = sandbox.run(SCRIPT, params)
    assert result.returncode == 0, f"{SCRIPT} for {NODE} did not wait:\n{result.output}"
    assert len(result.called("kubectl")) == 3, (
        f"{SCRIPT} for {NODE}: expected 3 looks (0, 0, 8 GPUs): {result.commands()}"
    )
    assert "FAILED" not in result.output, f"{SCRIPT} for {NODE}: {result.output}"
    assert "has no allocatable nvidia.com/gpu" in result.stderr, (
        f"{SCRIPT} for {NODE}: the wait should log what it is waiting for: {result.stderr}"
    )


def test_non_numeric_count_is_reported_as_such(sandbox):
    set_node(sandbox, node_json(gpus="abc"))
    result = sandbox.run(SCRIPT, ONCE)
    assert result.returncode != 0, f"{SCRIPT} for {NODE}: a non-numeric count passed"
    line = failure_line(result.output)
    assert "allocatable nvidia.com/gpu is 'abc', not a count" in line, f"{SCRIPT}: {line}"


def test_api_error_is_not_blamed_on_the_node(sandbox):
    set_node(sandbox, "not json: the stub's kubectl fails like an unreachable API server")
    result = sandbox.run(SCRIPT, ONCE)
    assert result.returncode != 0, f"{SCRIPT} for {NODE}: a failing kubectl passed"
    line = failure_line(result.output)
    assert f"cannot read node {NODE} from the API server" in line, f"{SCRIPT}: {line}"
    assert "is not Ready" not in line, f"{SCRIPT} for {NODE}: {line}"


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({}, "missing required input(s): NODE_NAME EXPECTED_GPUS TIMEOUT_SECONDS"),
        ({**ONCE, "EXPECTED_GPUS": "eight"}, "EXPECTED_GPUS must be a whole number of GPUs"),
        ({**ONCE, "EXPECTED_GPUS": "0"}, "EXPECTED_GPUS must be at least 1"),
        ({**ONCE, "TIMEOUT_SECONDS": "10m"}, "TIMEOUT_SECONDS must be a whole number of seconds"),
        (
            {**ONCE, "NODE_NAME": "Dev_GPU-0"},
            "NODE_NAME must be a lowercase DNS name, got 'Dev_GPU-0'",
        ),
    ],
    ids=["missing", "not-a-number", "zero", "bad-timeout", "bad-node-name"],
)
def test_bad_inputs_fail_before_asking_the_api(sandbox, params, expected):
    result = sandbox.run(SCRIPT, params)
    assert result.returncode != 0, f"{SCRIPT} accepted {params}"
    assert expected in result.output, f"{SCRIPT} with {params}: {result.output}"
    assert not result.called("kubectl"), f"{SCRIPT} with {params}: {result.commands()}"


def test_runs_only_on_a_control_plane(tmp_path):
    sb = Sandbox(tmp_path)
    result = sb.run(SCRIPT, ONCE)
    assert result.returncode != 0, f"{SCRIPT} ran without {ADMIN_CONF}"
    assert f"cannot read {ADMIN_CONF}" in result.output, f"{SCRIPT}: {result.output}"

"""The real program, run for each stack file under the recording harness."""

from __future__ import annotations

import json

import pytest

from components import catalog
from tests.helpers import graphs as shared
from tools.harness.graph import Secret, plain_strings
from tools.harness.stacks import STACKS, load_stack_settings, run_program


@pytest.fixture(scope="module", params=STACKS)
def stack_run(request):
    return request.param, shared.stack_graph(request.param)


def test_every_stack_registers_its_nodes(stack_run):
    stack, graph = stack_run
    settings = load_stack_settings(stack)
    instances = {r.name for r in graph.of_type("aws:ec2/instance:Instance")}
    for pool in settings.node_pools:
        for index in range(pool.count):
            name = f"{settings.cluster_name}-{pool.name}-{index}"
            assert name in instances, f"{stack}: no instance {name} in {sorted(instances)}"


def test_every_stack_exports_its_contract(stack_run):
    stack, graph = stack_run
    settings = load_stack_settings(stack)
    outputs = graph.outputs
    for key in ("endpoint", "kubeconfig", "kubernetesVersion", "nodePools", "gpuNodes"):
        assert key in outputs, f"{stack}: stack output {key} missing; got {sorted(outputs)}"
    assert isinstance(outputs["kubeconfig"], Secret), f"{stack}: kubeconfig output is not secret"
    assert outputs["kubernetesVersion"] == settings.kubernetes_version
    nodes = outputs["nodePools"]
    assert {p.name: p.count for p in settings.node_pools} == {k: len(v) for k, v in nodes.items()}
    for name, node in outputs["gpuNodes"].items():
        entry = catalog.CATALOG[node["instanceType"]]
        assert node["gpuCount"] == entry.gpu_count, f"{stack}: {name} GPU count"
        assert node["gpuModel"] == entry.gpu.name, f"{stack}: {name} GPU model"


def test_every_resource_is_tagged_or_untaggable(stack_run):
    stack, graph = stack_run
    settings = load_stack_settings(stack)
    for resource in graph:
        if not resource.type.startswith("aws:") or "tags" not in resource.inputs:
            continue
        tags = resource.plain_inputs()["tags"]
        for key, value in settings.stack_tags.items():
            assert tags.get(key) == value, f"{resource.urn}: tag {key} missing or wrong: {tags}"


def test_private_key_never_plain(stack_run):
    """The SSH key is in every connection, always under a secret marker."""
    from tools.harness.stacks import TEST_SECRETS

    stack, graph = stack_run
    key = TEST_SECRETS["sshPrivateKey"].strip().splitlines()[1]
    for resource in graph:
        for text in plain_strings(resource.inputs):
            assert key not in text, f"{resource.urn}: the SSH private key is in a plain input"
    for text in plain_strings(graph.outputs):
        assert key not in text, f"{stack}: the SSH private key is in a plain stack output"


def _inputs_snapshot(stack: str, **config) -> str:
    graph = run_program(stack, config=config or None)
    # Registration order is the SDK's concurrency, not an input: compare resources by URN.
    return json.dumps(
        sorted(
            [r.urn, r.type, r.parent, sorted(r.dependencies), r.provider, _plain(r.inputs)]
            for r in graph
        ),
        sort_keys=True,
    )


def _plain(value):
    if isinstance(value, Secret):
        return {"secret": _plain(value.value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@pytest.mark.parametrize("stack", STACKS)
def test_two_runs_register_byte_identical_inputs(stack):
    """A second `pulumi up` with unchanged config must change nothing: no timestamps, no random
    values, no dict-order noise in any input."""
    first = _inputs_snapshot(stack)
    second = _inputs_snapshot(stack)
    assert first == second, f"{stack}: two runs registered different inputs"


def test_registration_order_does_not_leak_into_inputs():
    """Pools given in another order register the same inputs per resource."""
    settings = load_stack_settings("prod")
    pools = [p.model_dump(by_alias=True, exclude_none=True) for p in settings.node_pools]
    forward = run_program("prod", config={"nodePools": pools})
    backward = run_program("prod", config={"nodePools": list(reversed(pools))})
    by_urn = {r.urn: json.dumps(_plain(r.inputs), sort_keys=True) for r in backward}
    for resource in forward:
        assert by_urn.get(resource.urn) == json.dumps(_plain(resource.inputs), sort_keys=True), (
            f"{resource.urn}: inputs depend on pool order"
        )

"""The GPU node add-ons on the registered graph: the AWS EFA device plugin (EFA nodes only) and
the NVIDIA DCGM exporter (Service, optional ServiceMonitor), pinned, strictly valid for every
supported Kubernetes minor, and depending on the Kubernetes provider only (never on a node)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest
import yaml

from components.kube import addon_manifests as manifests
from components.labels import EFA_LABEL, EFA_RESOURCE, GPU_PRESENT_LABEL
from components.settings import SUPPORTED_KUBERNETES_MINORS, DcgmExporter, Taint
from tests.helpers import graphs as shared
from tests.helpers.manifests import manifest, only_on_the_provider, pinned, stack_minor, validate
from tools.harness.graph import Graph, script_params
from tools.harness.identity import VARIANTS
from tools.harness.stacks import STACKS, run_program

DAEMON_SET = "kubernetes:apps/v1:DaemonSet"
EFA_PLUGIN = "gpu-node-addons-efa-device-plugin"
DCGM = "gpu-node-addons-dcgm-exporter"
SERVICE_MONITOR = "gpu-node-addons-dcgm-exporter-service-monitor"
P5_POOL = {"name": "h100", "instanceType": "p5.48xlarge", "count": 2, "driverVersion": "580"}
L4_POOL = {"name": "l4", "instanceType": "g6.xlarge", "count": 1}


@cache
def graph(stack: str, overrides: str = "") -> Graph:
    if not overrides:
        return shared.stack_graph(stack)
    return run_program(stack, config=yaml.safe_load(overrides))


def efa_graph(**extra) -> Graph:
    return graph("staging", yaml.safe_dump({"nodePools": [P5_POOL, L4_POOL], **extra}))


def test_efa_plugin_runs_on_efa_nodes_only_pinned_and_independent_of_nodes():
    g = efa_graph()
    plugin = g.named(EFA_PLUGIN)
    spec = plugin.plain_inputs()["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {EFA_LABEL: "true"}, plugin.urn
    assert pinned(spec["containers"][0]["image"]), plugin.urn
    only_on_the_provider(g, plugin)
    # The selector's label is set at join on the EFA pool's nodes and on no other node.
    labels = {
        r.name: script_params(r)["NODE_LABELS"]
        for r in g.find(lambda r: r.name.endswith("-join") and r.type.startswith("command"))
    }
    assert all(f"{EFA_LABEL}=true" in v for k, v in labels.items() if "-h100-" in k), labels
    assert not any(EFA_LABEL in v for k, v in labels.items() if "-l4-" in k), labels


@pytest.mark.parametrize("stack", STACKS)
def test_no_efa_plugin_without_an_efa_pool(stack):
    assert not graph(stack).find(lambda r: r.name == EFA_PLUGIN), stack


@pytest.mark.parametrize("stack", STACKS)
def test_dcgm_exporter_on_gpu_nodes_with_a_service_pinned_and_independent_of_nodes(stack):
    g = graph(stack)
    exporter = g.named(DCGM)
    spec = exporter.plain_inputs()["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {GPU_PRESENT_LABEL: "true"}, exporter.urn
    assert pinned(spec["containers"][0]["image"]), exporter.urn
    only_on_the_provider(g, exporter)
    service = g.named(f"{DCGM}-service").plain_inputs()
    assert service["spec"]["selector"] == exporter.plain_inputs()["spec"]["selector"]["matchLabels"]
    assert not g.find(lambda r: r.name == SERVICE_MONITOR), stack


def test_dcgm_exporter_can_be_turned_off():
    g = graph("staging", yaml.safe_dump({"dcgmExporter": {"enabled": False}}))
    assert not g.find(lambda r: r.name.startswith(DCGM))


def test_service_monitor_when_switched_on_selects_the_service():
    g = efa_graph(dcgmExporter={"serviceMonitor": True})
    monitor = g.named(SERVICE_MONITOR).plain_inputs()
    service = g.named(f"{DCGM}-service").plain_inputs()
    assert (
        monitor["apiVersion"] == "monitoring.coreos.com/v1" and monitor["kind"] == "ServiceMonitor"
    )
    assert monitor["spec"]["selector"]["matchLabels"] == service["metadata"]["labels"] | {} or (
        set(monitor["spec"]["selector"]["matchLabels"].items())
        <= set(service["metadata"]["labels"].items())
    )
    ports = {p["name"] for p in service["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports
    # The operator's ServiceMonitor fields (monitoring.coreos.com/v1): selector, endpoints.
    assert set(monitor["spec"]) == {"selector", "endpoints"}


def test_every_addon_object_of_an_efa_cluster_validates_strictly():
    g = efa_graph()
    for resource in g.find(lambda r: r.type.startswith("kubernetes:") and "Addons" in r.urn):
        validate(manifest(resource), stack_minor("staging"), resource.urn)


@pytest.mark.parametrize("minor", SUPPORTED_KUBERNETES_MINORS)
def test_addon_builders_validate_for_every_supported_minor(minor):
    taints = [Taint(key="nvidia.com/gpu", value="true", effect="NoSchedule")]
    objects = {
        "efa plugin": (
            "apps/v1",
            "DaemonSet",
            manifests.efa_plugin_daemon_set_spec(pool_taints=taints),
        ),
        "dcgm exporter": (
            "apps/v1",
            "DaemonSet",
            manifests.dcgm_exporter_daemon_set_spec(DcgmExporter(), pool_taints=taints),
        ),
        "dcgm service": ("v1", "Service", manifests.dcgm_exporter_service_spec()),
    }
    for what, (api, kind, spec) in objects.items():
        obj = {
            "apiVersion": api,
            "kind": kind,
            "metadata": {"name": "x", "namespace": "n"},
            "spec": spec,
        }
        validate(obj, minor, f"{what} for Kubernetes {minor}")


def test_efa_resource_name_is_the_one_the_plugin_advertises():
    # aws-efa-k8s-device-plugin registers vpc.amazonaws.com/efa (EKS user guide, "Manage EFA
    # devices": integer count of vpc.amazonaws.com/efa extended resources).
    assert EFA_RESOURCE == "vpc.amazonaws.com/efa"


def _pod_specs(g: Graph) -> dict[str, dict]:
    """The pod spec of every long-running workload the program creates (DaemonSets and
    Deployments: on every node, all the time)."""
    found = {}
    for resource in g:
        if resource.type.startswith("kubernetes:") and resource.type.split(":")[-1] in (
            "DaemonSet",
            "Deployment",
        ):
            found[resource.name] = resource.plain_inputs()["spec"]["template"]["spec"]
    return found


def test_pods_that_never_call_the_api_get_no_token():
    """A long-running pod without a service account of its own (the EFA device plugin, the DCGM
    exporter) never calls the API: it gets no token, so a privileged host-network pod holds no
    credential it does not use. Pods with their own account (GPU Feature Discovery, the NFD
    master) keep the default."""
    g = efa_graph()
    specs = _pod_specs(g)
    assert EFA_PLUGIN in specs and DCGM in specs, sorted(specs)
    # NVIDIA's device plugin keeps the token its static manifest gives it: whether its release
    # reads the API for per-node config is not verified here, and a change restarts the plugin
    # on every running node.
    specs.pop("nvidia-device-plugin-daemonset")
    for name, spec in specs.items():
        if spec.get("serviceAccountName") in (None, "default"):
            assert spec.get("automountServiceAccountToken") is False, name
        else:
            assert spec.get("automountServiceAccountToken") is not False, name


def test_the_dcgm_port_the_docs_give_is_the_one_served():
    """Scrape configs and dashboards are written against the port docs/multi-node.md gives (9400,
    dcgm-exporter's own default): the Service, the container and the exporter's listen address
    all use it."""
    doc = Path(__file__).resolve().parent.parent / "docs" / "multi-node.md"
    port = int(re.search(r"`dcgm-exporter` Service on port (\d+)", doc.read_text()).group(1))
    assert port == 9400
    g = graph("dev")
    service = g.named(f"{DCGM}-service").plain_inputs()["spec"]
    assert [p["port"] for p in service["ports"]] == [port], service
    container = g.named(DCGM).plain_inputs()["spec"]["template"]["spec"]["containers"][0]
    assert [p["containerPort"] for p in container["ports"]] == [port], container["ports"]
    listen = {e["name"]: e.get("value") for e in container["env"]}["DCGM_EXPORTER_LISTEN"]
    assert listen == f":{port}", listen


def test_a_dead_nodes_pods_stop_no_destroy():
    """pulumi-kubernetes deletes in the foreground by default and waits for the pods; a pod on
    a dead Node never goes, so a destroy with a dead node stopped for 10 minutes on each
    DaemonSet and failed (tests/test_e2e.py, on the real engine and API server). Each one the
    program registers is deleted in the background (components/kube/manifests.py
    `BACKGROUND_DELETION` cites the provider)."""
    seen = set()
    for name in [*STACKS, *VARIANTS]:
        stack, config = VARIANTS.get(name, (name, None))
        graph_of = run_program(stack, config=config)
        for daemon_set in graph_of.of_type("kubernetes:apps/v1:DaemonSet"):
            seen.add(daemon_set.name.removeprefix(f"{stack}-"))
            annotations = daemon_set.inputs["metadata"].get("annotations", {})
            assert annotations.get("pulumi.com/deletionPropagationPolicy") == "background", (
                daemon_set.urn
            )
        # Their namespaces are not awaited on delete: one holding a dead Node's pod is not gone
        # until the Node is (NO_DELETE_WAIT cites the provider).
        for namespace in graph_of.of_type("kubernetes:core/v1:Namespace"):
            annotations = namespace.inputs["metadata"].get("annotations", {})
            assert annotations.get("pulumi.com/skipAwait") == "true", namespace.urn
    assert len(seen) >= 4, seen

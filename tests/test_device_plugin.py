"""NvidiaDevicePlugin on the recorded graph: what it depends on, and the DaemonSet it deploys."""

from __future__ import annotations

from functools import cache

import pulumi_kubernetes as k8s
import pytest
import yaml

from components.kube import manifests
from components.kube.device_plugin import NvidiaDevicePlugin, NvidiaDevicePluginArgs
from components.labels import GPU_PRESENT_LABEL
from components.settings import DevicePlugin, Taint, TimeSlicing
from components.settings.constants import DEVICE_PLUGIN_DIGESTS
from tests.helpers import graphs as shared
from tools.harness.graph import Graph, Resource
from tools.harness.stacks import STACKS, run_program, stack_file

PLUGIN = "nvidia-device-plugin"
DAEMON_SET = f"{PLUGIN}-daemonset"
GPU_NODE_TYPE = "gpu-cluster:index:GpuNode"


@cache
def graph(stack: str) -> Graph:
    return shared.stack_graph(stack)


def pod_spec(ds: Resource) -> dict:
    return ds.plain_inputs()["spec"]["template"]["spec"]


def stack_taints(stack: str) -> list[Taint]:
    pools = stack_file(stack)["gpu-cluster:nodePools"]
    default = [Taint(key="nvidia.com/gpu", value="true", effect="NoSchedule")]
    return [
        Taint(**t) if isinstance(t, dict) else t
        for pool in pools
        for t in (pool.get("taints") or default)
    ]


@pytest.mark.parametrize("stack", STACKS)
def test_daemon_set_depends_on_no_gpu_node(stack):
    g = graph(stack)
    ds = g.named(DAEMON_SET)
    node_parts = [g.by_urn[u] for u in g.ancestors(ds) if GPU_NODE_TYPE in u]
    assert not node_parts, (
        f"{ds.urn} waits for GPU node resources {[r.urn for r in node_parts]}: it must depend "
        "on the Kubernetes provider only"
    )
    assert ds.provider_urn and ds.provider_urn.split("::")[-1].endswith("-k8s"), (
        f"{ds.urn}: created with provider {ds.provider}, expected the control plane's"
    )


@pytest.mark.parametrize("stack", STACKS)
def test_plugin_objects_wait_for_the_provider_and_nothing_else(stack):
    g = graph(stack)
    ds = g.named(DAEMON_SET)
    provider = g.by_urn[ds.provider_urn]
    allowed = g.ancestors(provider) | {provider.urn}
    plugin_objects = [
        g.named(f"{PLUGIN}-namespace"),
        g.named(f"{PLUGIN}-validation-namespace"),
        g.named(f"{PLUGIN}-config"),
        ds,
    ]
    allowed |= {r.urn for r in plugin_objects}
    for r in plugin_objects:
        assert r.provider_urn == provider.urn, f"{r.urn}: provider {r.provider}"
        extra = g.ancestors(r) - allowed
        assert not extra, f"{r.urn} waits for {sorted(extra)} beyond the Kubernetes provider"


@pytest.mark.parametrize("stack", STACKS)
def test_daemon_set_follows_upstream_manifest(stack):
    g = graph(stack)
    ds = g.named(DAEMON_SET)
    inputs = ds.plain_inputs()
    spec = pod_spec(ds)
    configured = stack_file(stack).get("gpu-cluster:devicePlugin", {})
    version = configured.get("version", "v0.20.0")
    # It runs with SYS_ADMIN: pulled by digest, the tag kept in the reference (decision 039).
    digest = configured.get("imageDigest") or DEVICE_PLUGIN_DIGESTS[version]
    (container,) = spec["containers"]
    assert container["name"] == "nvidia-device-plugin-ctr", f"{ds.urn}: {container['name']}"
    assert container["image"] == f"nvcr.io/nvidia/k8s-device-plugin:{version}@{digest}", (
        f"{ds.urn}: image {container['image']}"
    )
    assert {"name": "FAIL_ON_INIT_ERROR", "value": "false"} in container["env"], f"{ds.urn}"
    # Upstream's chart with deviceListStrategy volume-mounts (_helpers.tpl, requiresCapSysAdmin).
    assert container["securityContext"] == {"capabilities": {"add": ["SYS_ADMIN"]}}, (
        f"{ds.urn}: securityContext {container['securityContext']}"
    )
    assert spec["priorityClassName"] == "system-node-critical", f"{ds.urn}"
    assert spec["nodeSelector"] == {GPU_PRESENT_LABEL: "true"}, f"{ds.urn}: {spec['nodeSelector']}"
    assert inputs["spec"]["updateStrategy"]["type"] == "RollingUpdate", f"{ds.urn}"
    host_paths = [v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v]
    assert host_paths == ["/var/lib/kubelet/device-plugins"], f"{ds.urn}: hostPaths {host_paths}"
    assert not spec.get("hostNetwork") and not spec.get("hostPID"), f"{ds.urn}"
    assert inputs["metadata"]["namespace"] == manifests.DEVICE_PLUGIN_NAMESPACE, f"{ds.urn}"
    assert "pulumi.com/skipAwait" not in (inputs["metadata"].get("annotations") or {}), (
        f"{ds.urn}: the rollout must be awaited"
    )


@pytest.mark.parametrize("stack", STACKS)
def test_daemon_set_tolerates_every_pool_taint(stack):
    ds = graph(stack).named(DAEMON_SET)
    tolerations = pod_spec(ds)["tolerations"]
    assert manifests.GPU_TOLERATION in tolerations, f"{ds.urn}: {tolerations}"
    for taint in stack_taints(stack):
        assert manifests.tolerates(tolerations, taint), (
            f"{ds.urn} does not tolerate {taint} of a {stack} pool: the plugin would never run "
            f"there ({tolerations})"
        )


@pytest.mark.parametrize("stack", STACKS)
def test_config_map_holds_mig_strategy_and_time_slicing(stack):
    g = graph(stack)
    cm = g.named(f"{PLUGIN}-config")
    plugin = DevicePlugin.model_validate(stack_file(stack).get("gpu-cluster:devicePlugin", {}))
    config = yaml.safe_load(cm.plain_inputs()["data"][manifests.CONFIG_KEY])
    assert config["version"] == "v1", f"{cm.urn}: {config}"
    assert config["flags"]["migStrategy"] == plugin.mig_strategy, f"{cm.urn}: {config}"
    # GPUs by volume mounts, never by the NVIDIA_VISIBLE_DEVICES any pod can set.
    assert config["flags"]["plugin"]["deviceListStrategy"] == ["volume-mounts"], f"{cm.urn}"
    replicas = plugin.time_slicing.replicas
    time_slicing = config.get("sharing", {}).get("timeSlicing", {})
    if replicas > 1:
        assert time_slicing == {
            # The shares keep the name the capacity wait and the Job use ...
            "renameByDefault": False,
            # ... and one pod may take several (the Job takes all of them).
            "failRequestsGreaterThanOne": False,
            "resources": [{"name": "nvidia.com/gpu", "replicas": replicas}],
        }, f"{cm.urn}: {config}"
    else:
        assert "sharing" not in config, f"{cm.urn}: no sharing without time slicing: {config}"
    ds = g.named(DAEMON_SET)
    spec = pod_spec(ds)
    volume = next(v for v in spec["volumes"] if "configMap" in v)
    assert volume["configMap"]["name"] == cm.plain_inputs()["metadata"]["name"], f"{ds.urn}"
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == volume["name"])
    expected_arg = f"--config-file={mount['mountPath']}/{manifests.CONFIG_KEY}"
    assert expected_arg in spec["containers"][0]["args"], f"{ds.urn}: {spec['containers'][0]}"
    assert g.depends_on(ds, cm), f"{ds.urn} must wait for {cm.urn}"


def test_config_change_rolls_the_daemon_set():
    def annotation(plugin: DevicePlugin) -> str:
        spec = manifests.device_plugin_daemon_set_spec(plugin)
        return spec["template"]["metadata"]["annotations"][manifests.CONFIG_HASH_ANNOTATION]

    one, two = DevicePlugin(), DevicePlugin(time_slicing=TimeSlicing(replicas=2))
    assert annotation(one) != annotation(two), "DaemonSet: a config change must change the pods"
    assert annotation(one) == annotation(DevicePlugin()), "DaemonSet: hash must be stable"


def test_version_override_changes_the_image():
    # A release the program has no digest for needs its own (decision 039); a made-up one
    # serves here, nothing is pulled.
    digest = "sha256:" + "17" * 32
    g = run_program("dev", config={"devicePlugin": {"version": "v0.17.1", "imageDigest": digest}})
    ds = g.named(DAEMON_SET)
    image = pod_spec(ds)["containers"][0]["image"]
    assert image == f"nvcr.io/nvidia/k8s-device-plugin:v0.17.1@{digest}", f"{ds.urn}: {image}"


def test_explicit_pool_taints_give_exact_tolerations():
    taints = [
        Taint(key="nvidia.com/gpu", value="true", effect="NoSchedule"),
        Taint(key="dedicated", value="training", effect="NoExecute"),
        Taint(key="dedicated", value="inference", effect="NoExecute"),
    ]

    def program() -> None:
        provider = k8s.Provider("k8s", kubeconfig="apiVersion: v1\nkind: Config\n")
        NvidiaDevicePlugin(
            PLUGIN,
            NvidiaDevicePluginArgs(
                settings=DevicePlugin(), provider=provider, pool_taints=tuple(taints)
            ),
        )

    ds = run_program("dev", program=program).named(DAEMON_SET)
    tolerations = pod_spec(ds)["tolerations"]
    assert tolerations == [
        manifests.GPU_TOLERATION,
        {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"},
        # It runs on a node before its proof (decision 059).
        manifests.UNPROVEN_TOLERATION,
    ], f"{ds.urn}: {tolerations}"
    assert manifests.TOLERATE_ALL not in tolerations, f"{ds.urn}: {tolerations}"


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        ({"operator": "Exists"}, Taint(key="a", value="b", effect="NoExecute"), True),
        (
            {"key": "a", "operator": "Exists", "effect": "NoSchedule"},
            Taint(key="a", effect="NoExecute"),
            False,
        ),
        (
            {"key": "a", "value": "b", "effect": "NoExecute"},
            Taint(key="a", value="b", effect="NoExecute"),
            True,
        ),
        (
            {"key": "a", "value": "c", "effect": "NoExecute"},
            Taint(key="a", value="b", effect="NoExecute"),
            False,
        ),
        ({"key": "b", "operator": "Exists"}, Taint(key="a", effect="NoSchedule"), False),
    ],
)
def test_toleration_matching_follows_kubernetes(toleration, taint, expected):
    assert manifests.tolerates([toleration], taint) is expected, f"{toleration} vs {taint}"


@pytest.mark.parametrize(
    ("mig_strategy", "replicas"),
    [("none", 1), ("single", 1), ("mixed", 1), ("none", 2), ("none", 64)],
)
def test_the_plugin_config_reads_back_as_written(mig_strategy, replicas):
    settings = DevicePlugin(mig_strategy=mig_strategy, time_slicing=TimeSlicing(replicas=replicas))
    text = manifests.device_plugin_config(settings)
    assert manifests.device_plugin_config(settings) == text, "rendering must be deterministic"
    assert yaml.safe_load(text)["flags"]["migStrategy"] == mig_strategy

"""Every Kubernetes object the program registers validates against the Kubernetes JSON schemas,
in strict mode (unknown fields are errors), for the stack's configured minor.

The objects come from the recorded graph of each stack file (types `kubernetes:*`): the inputs
the engine receives are the manifest (apiVersion, kind, metadata, spec/data), so what is validated
is what is deployed. The pure builders in components/kube/manifests.py are also validated
for every supported minor, so a stack moving to another minor is covered before it does.

Schema versions: a minor kubernetes-validate does not ship maps to the nearest older one it does
(tests/helpers/manifests.py: `schema_version`); a test here reports that mapping.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import kubernetes_validate
import pytest

from components.kube import manifests
from components.settings import SUPPORTED_KUBERNETES_MINORS, DevicePlugin, Taint, TimeSlicing
from tests.helpers import graphs as shared
from tests.helpers.manifests import (
    available_minors,
    manifest,
    schema_version,
    stack_minor,
    validate,
)
from tools.harness.graph import Graph, Resource
from tools.harness.stacks import STACKS, run_program, stack_file

EXPECTED_KINDS = {"Namespace", "ConfigMap", "DaemonSet", "Job", "ClusterRoleBinding", "Service"}


@cache
def graph(stack: str) -> Graph:
    return shared.stack_graph(stack)


def kubernetes_objects(g: Graph) -> list[Resource]:
    return g.find(lambda r: r.type.startswith("kubernetes:"))


# ---------------------------------------------------------------- the registered objects


@pytest.mark.parametrize("stack", STACKS)
def test_every_registered_kubernetes_object_validates_strictly(stack):
    g = graph(stack)
    objects = kubernetes_objects(g)
    kinds = {manifest(r)["kind"] for r in objects}
    assert kinds >= EXPECTED_KINDS, (
        f"stack {stack}: expected at least {sorted(EXPECTED_KINDS)} among the Kubernetes "
        f"objects, got {sorted(kinds)} ({[r.urn for r in objects]})"
    )
    minor = stack_minor(stack)
    for resource in objects:
        validate(manifest(resource), minor, f"stack {stack}: {resource.urn}")


@pytest.mark.parametrize("stack", STACKS)
def test_one_validation_job_per_gpu_node_is_validated(stack):
    g = graph(stack)
    jobs = [j for j in g.of_type("kubernetes:batch/v1:Job") if j.name.endswith("-validation-job")]
    nodes = sum(pool["count"] for pool in stack_file(stack)["gpu-cluster:nodePools"])
    assert len(jobs) == nodes, (
        f"stack {stack}: {len(jobs)} validation Jobs ({[j.urn for j in jobs]}) for {nodes} nodes"
    )


def test_validation_disabled_still_validates_what_is_left():
    g = run_program("staging", config={"validation": {"enabled": False}})
    objects = kubernetes_objects(g)
    kinds = {manifest(r)["kind"] for r in objects}
    assert kinds == {
        "Namespace",
        "ConfigMap",
        "DaemonSet",
        "ClusterRoleBinding",
        "Service",
        # GPU Feature Discovery and the NFD master
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "Role",
        "RoleBinding",
        "Deployment",
        # The node guard: no GPU node writes the control plane's labels
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }, f"staging without validation: Kubernetes objects {[r.urn for r in objects]}"
    for resource in objects:
        validate(manifest(resource), stack_minor("staging"), f"staging: {resource.urn}")


# ---------------------------------------------------------------- every supported minor


def builder_objects(minor_settings: DevicePlugin) -> list[tuple[str, dict[str, Any]]]:
    taints = [
        Taint(key="nvidia.com/gpu", value="true", effect="NoSchedule"),
        Taint(key="dedicated", value="training", effect="NoExecute"),
    ]
    return [
        ("namespace", _obj("v1", "Namespace", manifests.device_plugin_namespace())),
        ("validation namespace", _obj("v1", "Namespace", manifests.validation_namespace())),
        (
            "config map",
            _obj(
                "v1",
                "ConfigMap",
                {"name": "c", "namespace": "n"},
                data=manifests.device_plugin_config_map_data(minor_settings),
            ),
        ),
        (
            "daemon set",
            _obj(
                "apps/v1",
                "DaemonSet",
                {"name": "d", "namespace": "n"},
                spec=manifests.device_plugin_daemon_set_spec(minor_settings, pool_taints=taints),
            ),
        ),
        (
            "daemon set (taints unknown)",
            _obj(
                "apps/v1",
                "DaemonSet",
                {"name": "d", "namespace": "n"},
                spec=manifests.device_plugin_daemon_set_spec(minor_settings),
            ),
        ),
        (
            "job",
            _obj(
                "batch/v1",
                "Job",
                manifests.validation_job_metadata("c-p-0"),
                spec=manifests.validation_job_spec(
                    node_name="c-p-0",
                    gpu_count=8,
                    image="nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
                    timeout_seconds=900,
                    taints=taints,
                    template_annotations={manifests.CAPACITY_CHECK_ANNOTATION: "cmd-1"},
                    shares_per_gpu=minor_settings.time_slicing.replicas,
                ),
            ),
        ),
    ]


def _obj(api_version: str, kind: str, metadata: dict, **fields: Any) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, **fields}


@pytest.mark.parametrize("minor", SUPPORTED_KUBERNETES_MINORS)
@pytest.mark.parametrize(
    "plugin",
    [
        DevicePlugin(),
        DevicePlugin(mig_strategy="mixed"),
        DevicePlugin(time_slicing=TimeSlicing(replicas=4)),
    ],
    ids=["default", "mig-mixed", "time-slicing-4"],
)
def test_builders_validate_for_every_supported_minor(minor, plugin):
    for what, obj in builder_objects(plugin):
        validate(obj, minor, f"{what} for Kubernetes {minor}")


def test_every_supported_minor_has_its_own_schemas():
    """Report the mapping; a minor served by another's schemas is named here, not hidden."""
    mapping = {minor: schema_version(minor) for minor in SUPPORTED_KUBERNETES_MINORS}
    borrowed = {m: v for m, v in mapping.items() if m != v}
    assert not borrowed, (
        f"kubernetes-validate {kubernetes_validate.version.__version__} has no schemas for "
        f"{sorted(borrowed)}; validating them against {borrowed} (upgrade kubernetes-validate)"
    )


def test_schema_version_maps_to_the_nearest_older_minor():
    available = available_minors()
    assert schema_version(available[-1]) == available[-1], f"mapping of {available[-1]}"
    assert schema_version("99.0") == available[-1], f"a future minor maps to {available[-1]}"
    assert schema_version("0.1") == available[0], f"an ancient minor maps to {available[0]}"


def test_strict_validation_rejects_an_unknown_field():
    """The check is real: a typo'd field (spec.template.spec.tolerations -> toleration) fails."""
    spec = manifests.device_plugin_daemon_set_spec(DevicePlugin())
    spec["template"]["spec"]["toleration"] = spec["template"]["spec"].pop("tolerations")
    obj = _obj("apps/v1", "DaemonSet", {"name": "d"}, spec=spec)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(obj, schema_version("1.35"), strict=True)


# ---------------------------------------------------------------- pod security admission

# The Baseline level of the Pod Security Standards (kubernetes.io/docs/concepts/security/
# pod-security-standards), the controls a GPU pod could trip: host namespaces, privileged
# containers, capabilities beyond this list, hostPath volumes, host ports.
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
PSA_ENFORCE = "pod-security.kubernetes.io/enforce"


def baseline_violations(pod: dict[str, Any]) -> list[str]:
    """What in `pod` (a pod spec) the Baseline level rejects; empty when it is admitted."""
    found = [f"spec.{key}" for key in ("hostNetwork", "hostPID", "hostIPC") if pod.get(key)]
    found += [f"volume {v['name']}: hostPath" for v in pod.get("volumes", []) if "hostPath" in v]
    for c in pod.get("initContainers", []) + pod.get("containers", []):
        context = c.get("securityContext") or {}
        if context.get("privileged"):
            found.append(f"container {c['name']}: privileged")
        added = set((context.get("capabilities") or {}).get("add", [])) - BASELINE_CAPABILITIES
        if added:
            found.append(f"container {c['name']}: adds {sorted(added)}")
        found += [
            f"container {c['name']}: hostPort {p['hostPort']}"
            for p in c.get("ports", [])
            if p.get("hostPort")
        ]
    return found


def namespace_levels(g: Graph) -> dict[str, str]:
    """Enforced Pod Security level of each namespace the stack creates."""
    levels = {}
    for ns in g.of_type("kubernetes:core/v1:Namespace"):
        metadata = ns.plain_inputs()["metadata"]
        labels = metadata.get("labels") or {}
        assert PSA_ENFORCE in labels, f"{ns.urn}: no {PSA_ENFORCE} label: {labels}"
        levels[metadata["name"]] = labels[PSA_ENFORCE]
    return levels


@pytest.mark.parametrize("stack", STACKS)
def test_pods_are_admitted_by_their_namespace_and_it_is_no_looser_than_needed(stack):
    """Each pod template passes its namespace's enforced level (else the DaemonSet or Job
    creates no pod and `up` waits until its timeout), and a namespace is `privileged` only when
    its pods need it (the plugin's hostPath to the kubelet's device-plugins directory)."""
    g = graph(stack)
    levels = namespace_levels(g)
    workloads = g.of_type("kubernetes:apps/v1:DaemonSet") + g.of_type("kubernetes:batch/v1:Job")
    assert workloads, f"stack {stack}: no DaemonSet or Job recorded"
    for workload in workloads:
        inputs = workload.plain_inputs()
        namespace = inputs["metadata"]["namespace"]
        assert namespace in levels, (
            f"{workload.urn}: namespace {namespace} is not one the stack creates ({levels})"
        )
        level = levels[namespace]
        violations = baseline_violations(inputs["spec"]["template"]["spec"])
        if level == "privileged":
            assert violations, (
                f"{workload.urn}: namespace {namespace} enforces privileged, yet its pods pass "
                "baseline: enforce baseline"
            )
        else:
            assert level in ("baseline", "restricted"), f"{workload.urn}: level {level!r}"
            assert not violations, (
                f"{workload.urn}: namespace {namespace} enforces {level}, "
                f"which rejects {violations}"
            )
    assert levels[manifests.VALIDATION_NAMESPACE] == "baseline", f"stack {stack}: {levels}"
    assert levels[manifests.DEVICE_PLUGIN_NAMESPACE] == "privileged", f"stack {stack}: {levels}"


def test_baseline_check_is_real():
    pod = manifests.device_plugin_daemon_set_spec(DevicePlugin())["template"]["spec"]
    # Both are why the plugin's namespace is `privileged` (SYS_ADMIN: volume-mounts strategy).
    assert baseline_violations(pod) == [
        "volume kubelet-device-plugins-dir: hostPath",
        "container nvidia-device-plugin-ctr: adds ['SYS_ADMIN']",
    ], f"DaemonSet pod: {baseline_violations(pod)}"
    job = manifests.validation_job_spec(
        node_name="n-0", gpu_count=1, image="i:1", timeout_seconds=60
    )["template"]["spec"]
    assert baseline_violations(job) == [], f"validation pod: {baseline_violations(job)}"
    container = job["containers"][0]
    container["securityContext"] = {"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}}
    job["hostNetwork"] = True
    assert baseline_violations(job) == [
        "spec.hostNetwork",
        f"container {container['name']}: privileged",
        f"container {container['name']}: adds ['SYS_ADMIN']",
    ], f"validation pod made privileged: {baseline_violations(job)}"

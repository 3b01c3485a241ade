"""GPU Feature Discovery and the NFD master on the registered graph: GFD at the device plugin's
release with its config, NFD pinned and unprivileged, Pod Security levels, strict validity for
every supported minor, and nothing waiting on a GPU node.

What GFD needs comes from NVIDIA's k8s-device-plugin v0.20.0 (`cmd/gpu-feature-discovery/
main.go`: USE_NODE_FEATURE_API; `internal/lm/output.go`: one NodeFeature per node, in the
namespace of the pod, labelled with the node's name; `deployments/helm/.../templates/role.yml`);
what NFD needs from node-feature-discovery v0.19.0 (`deployment/base/rbac/
master-clusterrole.yaml`; nfd-master `-extra-label-ns`)."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import pytest
import yaml

from components.kube import feature_discovery_manifests as fd
from components.kube import manifests as km
from components.settings import SUPPORTED_KUBERNETES_MINORS, DevicePlugin, Taint
from tests.helpers import graphs as shared
from tests.helpers.manifests import manifest, only_on_the_provider, pinned, stack_minor, validate
from tools.harness.graph import Graph
from tools.harness.stacks import STACKS, run_program

ROOT = Path(__file__).resolve().parent.parent
GFD = "gpu-feature-discovery-daemonset"
MASTER = "gpu-feature-discovery-nfd-master"
COMPONENT = "gpu-cluster:index:GpuFeatureDiscovery"


@cache
def graph(stack: str, overrides: str = "") -> Graph:
    if not overrides:
        return shared.stack_graph(stack)
    return run_program(stack, config=yaml.safe_load(overrides))


def env(container: dict) -> dict[str, object]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


@pytest.mark.parametrize("stack", STACKS)
def test_gfd_runs_the_device_plugins_release_and_config_on_gpu_nodes(stack):
    g = graph(stack)
    gfd = g.named(GFD)
    plugin = g.named("nvidia-device-plugin-daemonset").plain_inputs()["spec"]["template"]["spec"]
    spec = gfd.plain_inputs()["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert container["image"] == plugin["containers"][0]["image"], gfd.urn
    assert container["command"] == ["gpu-feature-discovery"], gfd.urn
    assert spec["nodeSelector"] == plugin["nodeSelector"], gfd.urn
    assert spec["tolerations"] == plugin["tolerations"], gfd.urn
    variables = env(container)
    assert variables["USE_NODE_FEATURE_API"] == "true", gfd.urn
    for name, path in (
        ("NODE_NAME", "spec.nodeName"),
        ("NAMESPACE", "metadata.namespace"),
        ("POD_NAME", "metadata.name"),
    ):
        assert variables[name] == {"fieldRef": {"fieldPath": path}}, (gfd.urn, name)
    # The plugin's own config file: the labels describe what the plugin advertises.
    assert variables["CONFIG_FILE"] == f"{km.CONFIG_MOUNT_PATH}/{km.CONFIG_KEY}"
    assert {"name": "config", "configMap": {"name": km.DEVICE_PLUGIN_CONFIG_MAP}} in spec["volumes"]
    assert gfd.plain_inputs()["metadata"]["namespace"] == km.DEVICE_PLUGIN_NAMESPACE
    only_on_the_provider(g, gfd)


@pytest.mark.parametrize("stack", STACKS)
def test_nfd_master_is_pinned_unprivileged_and_admits_the_gfd_label_namespace(stack):
    g = graph(stack)
    master = g.named(MASTER)
    spec = master.plain_inputs()["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert pinned(container["image"]) and container["image"].endswith(fd.NFD_VERSION)
    assert "-extra-label-ns=nvidia.com" in container["args"], master.urn
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False and security["capabilities"] == {
        "drop": ["ALL"]
    }
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    # It has a node before any GPU node joins: the control plane.
    assert fd.CONTROL_PLANE_TOLERATION in spec["tolerations"], master.urn
    only_on_the_provider(g, master)


@pytest.mark.parametrize("stack", STACKS)
def test_nfd_master_runs_on_the_control_plane_only(stack):
    """Issue 41, finding 7: its token may patch every Node, so it never lands on a GPU node:
    selected to the control plane, tolerating no pool's taint (prod's pools taint NoExecute)."""
    master = graph(stack).named(MASTER)
    spec = master.plain_inputs()["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}, master.urn
    assert spec["tolerations"] == [fd.CONTROL_PLANE_TOLERATION], master.urn


def test_nfd_master_reads_gfds_namespace_only_and_overwrites_no_label():
    """nfd-master's restrictions (NFD v0.19 nfd-master.go `Restrictions`): NodeFeature objects
    of the device plugin's namespace only, and no label it did not set replaced."""
    container = graph("prod").named(MASTER).plain_inputs()["spec"]["template"]["spec"]
    args = container["containers"][0]["args"]
    (options,) = [a.removeprefix("-options=") for a in args if a.startswith("-options=")]
    restrictions = json.loads(options)["restrictions"]
    assert restrictions == {
        "nodeFeatureNamespaceSelector": {
            "matchLabels": {"kubernetes.io/metadata.name": km.DEVICE_PLUGIN_NAMESPACE}
        },
        "allowOverwrite": False,
    }, restrictions


def test_gfd_gets_creates_and_updates_node_features_only():
    """What GFD's writer does (k8s-device-plugin internal/lm/output.go: Get, then Create or
    Update): no list, no watch, no delete of NodeFeature objects."""
    rules = graph("dev").named("gpu-feature-discovery-role").plain_inputs()["rules"]
    nfd = [r for r in rules if fd.NFD_GROUP in r["apiGroups"]]
    assert nfd == [
        {
            "apiGroups": [fd.NFD_GROUP],
            "resources": ["nodefeatures"],
            "verbs": ["get", "create", "update"],
        }
    ], rules


# ------------------------------------------------------- NodeFeature objects of one's own node

GFD_ACCOUNT = f"system:serviceaccount:{km.DEVICE_PLUGIN_NAMESPACE}:{fd.GFD_NAME}"


def _feature(node: str | None) -> dict:
    labels = {fd.NODE_NAME_LABEL: node} if node is not None else {}
    return {
        "apiVersion": f"{fd.NFD_API_VERSION}",
        "kind": "NodeFeature",
        "metadata": {"name": f"nvidia-features-for-{node}", "labels": labels},
        "spec": {"labels": {"nvidia.com/gpu.product": "NVIDIA-A10G"}},
    }


def _request(operation: str, user: str, token_node: str | None, obj, old) -> dict:
    extra = {fd.TOKEN_NODE_NAME: [token_node]} if token_node is not None else {}
    return {
        "operation": operation,
        "resource": {"group": fd.NFD_GROUP, "resource": "nodefeatures"},
        "userInfo": {"username": user, "extra": extra},
        "object": obj,
        "oldObject": old,
    }


def admitted(policy: dict, request: dict) -> bool:
    """The ValidatingAdmissionPolicy's verdict, as kube-apiserver reaches it (plugin/policy/
    validating: the request in matchConstraints, every matchCondition true, then every
    validation true), its CEL evaluated by cel-python."""
    import celpy

    rule = policy["matchConstraints"]["resourceRules"][0]
    if request["operation"] not in rule["operations"] or (
        request["resource"]["resource"] not in rule["resources"]
    ):
        return True
    environment = celpy.Environment()
    activation = {
        "request": celpy.json_to_cel(request),
        "object": celpy.json_to_cel(request["object"]),
        "oldObject": celpy.json_to_cel(request["oldObject"]),
    }

    def holds(expression: str) -> bool:
        program = environment.program(environment.compile(expression))
        return bool(program.evaluate(activation))

    if not all(holds(c["expression"]) for c in policy.get("matchConditions", [])):
        return True
    return all(holds(v["expression"]) for v in policy["validations"])


NODEFEATURE_CASES = [
    ("GFD on a-0 creates a-0's object", "CREATE", GFD_ACCOUNT, "a-0", _feature("a-0"), None, True),
    (
        "GFD on a-0 updates a-0's object",
        "UPDATE",
        GFD_ACCOUNT,
        "a-0",
        _feature("a-0"),
        _feature("a-0"),
        True,
    ),
    ("GFD on a-0 creates a-1's object", "CREATE", GFD_ACCOUNT, "a-0", _feature("a-1"), None, False),
    (
        "GFD on a-0 takes over a-1's object",
        "UPDATE",
        GFD_ACCOUNT,
        "a-0",
        _feature("a-0"),
        _feature("a-1"),
        False,
    ),
    ("GFD on a-0 deletes a-1's object", "DELETE", GFD_ACCOUNT, "a-0", None, _feature("a-1"), False),
    ("GFD on a-0 deletes a-0's object", "DELETE", GFD_ACCOUNT, "a-0", None, _feature("a-0"), True),
    ("an object without a node label", "CREATE", GFD_ACCOUNT, "a-0", _feature(None), None, False),
    ("a token bound to no node", "CREATE", GFD_ACCOUNT, None, _feature("a-0"), None, False),
    (
        "another service account on a-0 for a-1",
        "CREATE",
        "system:serviceaccount:team-a:builder",
        "a-0",
        _feature("a-1"),
        None,
        False,
    ),
    (
        "an administrator for any node",
        "CREATE",
        "kubernetes-admin",
        None,
        _feature("a-1"),
        None,
        True,
    ),
]


@pytest.mark.parametrize(
    ("case", "operation", "user", "token_node", "obj", "old", "allowed"),
    NODEFEATURE_CASES,
    ids=[c[0] for c in NODEFEATURE_CASES],
)
def test_a_pod_writes_the_nodefeature_object_of_its_own_node_only(
    case, operation, user, token_node, obj, old, allowed
):
    """Issue 41, finding 7: a NodeFeature object may name any node and nfd-master applies it;
    GFD's token is on every GPU node. The policy as registered decides each request."""
    g = graph("dev")
    policy = g.named("gpu-feature-discovery-nodefeature-policy").plain_inputs()["spec"]
    request = _request(operation, user, token_node, obj, old)
    assert admitted(policy, request) is allowed, case


def test_the_nodefeature_policy_is_bound_and_gfd_starts_after_it():
    g = graph("dev")
    policy = g.named("gpu-feature-discovery-nodefeature-policy")
    binding = g.named("gpu-feature-discovery-nodefeature-policy-binding")
    assert binding.plain_inputs()["spec"] == {
        "policyName": policy.plain_inputs()["metadata"]["name"],
        "validationActions": ["Deny"],
    }
    assert policy.plain_inputs()["spec"]["failurePolicy"] == "Fail"
    assert g.depends_on(g.named(GFD), binding), "GFD may write before the policy holds"


def test_pod_security_levels_privileged_only_where_host_access_is_needed():
    g = graph("dev")
    levels = {
        r.plain_inputs()["metadata"]["name"]: r.plain_inputs()["metadata"]["labels"][
            "pod-security.kubernetes.io/enforce"
        ]
        for r in g.of_type("kubernetes:core/v1:Namespace")
    }
    assert levels[fd.NFD_NAMESPACE] == "restricted", levels
    # GFD needs /sys from the host: it shares the device plugin's privileged namespace.
    assert levels[km.DEVICE_PLUGIN_NAMESPACE] == "privileged", levels


def test_gfd_may_write_exactly_what_nfd_master_reads():
    g = graph("dev")
    gfd_role = g.named("gpu-feature-discovery-role").plain_inputs()["rules"]
    master_role = g.named("gpu-feature-discovery-nfd-master-role").plain_inputs()["rules"]
    writes = {
        r for rule in gfd_role if fd.NFD_GROUP in rule["apiGroups"] for r in rule["resources"]
    }
    reads = {
        r
        for rule in master_role
        if fd.NFD_GROUP in rule["apiGroups"] and "watch" in rule["verbs"]
        for r in rule["resources"]
    }
    assert writes == {"nodefeatures"} and writes <= reads, (writes, reads)
    crds = {
        r.plain_inputs()["metadata"]["name"]
        for r in g.of_type("kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition")
    }
    assert crds == {f"{plural}.{fd.NFD_GROUP}" for _, plural, _, _ in fd.NFD_KINDS}, crds


def test_only_node_feature_groups_have_a_status_that_nfd_master_writes():
    """As upstream's CRDs (node-feature-discovery v0.19.0 deployment/base/nfd-crds/
    nfd-api-crds.yaml): nfd-master updates a NodeFeatureGroup's status through the /status
    subresource it is granted, which must exist; the other kinds have none (a status
    subresource there would make the API drop a `status` written through the main resource)."""
    g = graph("dev")
    subresources = {
        r.plain_inputs()["spec"]["names"]["kind"]: r.plain_inputs()["spec"]["versions"][0].get(
            "subresources"
        )
        for r in g.of_type("kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition")
    }
    assert subresources == {
        "NodeFeature": None,
        "NodeFeatureGroup": {"status": {}},
        "NodeFeatureRule": None,
    }, subresources
    master_role = g.named("gpu-feature-discovery-nfd-master-role").plain_inputs()["rules"]
    status_writes = {
        r
        for rule in master_role
        if fd.NFD_GROUP in rule["apiGroups"]
        for r in rule["resources"]
        if r.endswith("/status")
    }
    assert status_writes == {"nodefeaturegroups/status"}


def test_feature_discovery_can_be_turned_off():
    g = graph("staging", yaml.safe_dump({"featureDiscovery": {"enabled": False}}))
    assert not g.find(lambda r: COMPONENT in r.urn)


def test_the_labels_the_docs_promise_pass_nfd_masters_filter():
    """Every nvidia.com label docs/multi-node.md names for GFD lies in a namespace nfd-master
    admits (without -extra-label-ns it drops them, and the node never shows them)."""
    doc = (ROOT / "docs" / "multi-node.md").read_text()
    promised = set(re.findall(r"`(nvidia\.com/gpu\.[a-z.-]+)`", doc)) - {"nvidia.com/gpu.present"}
    assert {"nvidia.com/gpu.product", "nvidia.com/gpu.memory"} <= promised, promised
    admitted = fd.nfd_master_args()[0].removeprefix("-extra-label-ns=").split(",")
    for label in promised:
        assert label.split("/", 1)[0] in admitted, label


@pytest.mark.parametrize("stack", STACKS)
def test_every_feature_discovery_object_validates_for_the_stacks_minor(stack):
    g = graph(stack)
    objects = g.find(lambda r: COMPONENT in r.urn and r.type.startswith("kubernetes:"))
    assert len(objects) >= 11, [r.urn for r in objects]
    for resource in objects:
        validate(manifest(resource), stack_minor(stack), f"{stack}: {resource.urn}")


@pytest.mark.parametrize("minor", SUPPORTED_KUBERNETES_MINORS)
def test_feature_discovery_builders_validate_for_every_supported_minor(minor):
    taints = [Taint(key="nvidia.com/gpu", value="true", effect="NoSchedule")]
    meta = {"name": "x", "namespace": "n"}
    objects = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": fd.nfd_namespace()},
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": meta,
            "spec": fd.gfd_daemon_set_spec(DevicePlugin(), pool_taints=taints),
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": fd.nfd_master_deployment_spec(),
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": fd.NODEFEATURE_POLICY},
            "spec": fd.nodefeature_policy(),
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": fd.NODEFEATURE_POLICY},
            "spec": fd.nodefeature_policy_binding(),
        },
        *(
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": f"{plural}.{fd.NFD_GROUP}"},
                "spec": fd.nfd_crd_spec(kind, plural, scope, status),
            }
            for kind, plural, scope, status in fd.NFD_KINDS
        ),
    ]
    for obj in objects:
        validate(obj, minor, f"{obj['kind']} for Kubernetes {minor}")

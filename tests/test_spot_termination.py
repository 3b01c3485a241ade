"""Spot pools run the AWS Node Termination Handler in IMDS mode: a DaemonSet on their nodes
only, which cordons and drains a node on its interruption notice. The objects follow upstream's
chart (components/kube/termination_handler_manifests.py names each change) and validate against
the Kubernetes schemas with the rest (tests/test_manifests_schema.py)."""

from __future__ import annotations

import logging

import pytest

from components.kube import termination_handler_manifests as manifests
from components.settings.load import ConfigError
from tools.harness.graph import unwrap
from tools.harness.stacks import load_stack_settings, run_program, stack_file

DAEMON_SET = "kubernetes:apps/v1:DaemonSet"
DIGEST = "sha256:" + "0123456789abcdef" * 4


def _handler(graph):
    return [r for r in graph.of_type(DAEMON_SET) if r.name == "spot-termination-handler-daemonset"]


def _spot_pools(stack: str) -> list[str]:
    pools = stack_file(stack)["gpu-cluster:nodePools"]
    return sorted(p["name"] for p in pools if p.get("market") == "spot" and p.get("count", 1))


@pytest.mark.parametrize("stack", ["staging", "prod"])
def test_spot_pools_get_the_handler_on_their_nodes_only(stack):
    (handler,) = _handler(run_program(stack))
    spec = unwrap(handler.inputs["spec"])["template"]["spec"]
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    (expression,) = term["matchExpressions"]
    assert expression["values"] == _spot_pools(stack), expression
    assert spec["hostNetwork"] is True, "IMDS mode reads the metadata from the host network"
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert env["ENABLE_SPOT_INTERRUPTION_DRAINING"] == "true"
    assert env["ENABLE_SQS_TERMINATION_DRAINING"] == "false"
    assert env["ENABLE_ASG_LIFECYCLE_DRAINING"] == "false"
    assert spec["containers"][0]["securityContext"]["runAsNonRoot"] is True


def test_a_stack_without_spot_pools_runs_no_handler():
    assert stack_file("dev")["gpu-cluster:nodePools"][0].get("market") == "on-demand"
    assert not _handler(run_program("dev"))


def test_the_handler_may_evict_and_cordon_and_nothing_more():
    verbs = {
        (group, resource, verb)
        for rule in manifests.cluster_role_rules()
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert ("", "pods/eviction", "create") in verbs and ("", "nodes", "patch") in verbs
    assert not [v for v in verbs if v[2] in ("delete", "deletecollection", "*")], verbs
    assert not [v for v in verbs if v[1] in ("secrets", "*")], verbs


def test_an_image_pinned_by_digest_is_what_runs(caplog):
    image = f"{manifests.IMAGE}@{DIGEST}"
    with caplog.at_level(logging.WARNING):
        graph = run_program("staging", config={"nodeTerminationHandler": {"image": image}})
    (handler,) = _handler(graph)
    container = unwrap(handler.inputs["spec"])["template"]["spec"]["containers"][0]
    assert container["image"] == image
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert not [w for w in warnings if "nodeTerminationHandler.image" in w], warnings


def test_without_a_digest_the_handler_runs_by_tag_and_every_preview_says_so(caplog):
    with caplog.at_level(logging.WARNING):
        graph = run_program("staging")
    (handler,) = _handler(graph)
    container = unwrap(handler.inputs["spec"])["template"]["spec"]["containers"][0]
    assert container["image"] == manifests.IMAGE
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("nodeTerminationHandler.image is not set" in w for w in warnings), warnings


def test_an_image_by_tag_only_is_refused_naming_the_key():
    with pytest.raises(ConfigError) as error:
        load_stack_settings(
            "staging", config={"nodeTerminationHandler": {"image": manifests.IMAGE}}
        )
    assert "gpu-cluster:nodeTerminationHandler.image" in str(error.value), error.value
    assert "pinned by digest" in str(error.value)

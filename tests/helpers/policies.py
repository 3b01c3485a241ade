"""The policy pack as the engine runs it: resources shaped as a policy sees them, one policy's
check, and the whole pack through pulumi_policy's own analyzer servicer (the code the CLI talks to
over gRPC), without its server."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from google.protobuf import struct_pb2
from pulumi.runtime.proto import analyzer_pb2
from pulumi_policy import EnforcementLevel
from pulumi_policy.policy import _PolicyAnalyzerServicer

from tools.harness.graph import unwrap

# The pack's own package (policies/gpu_cluster_policies), as the Pulumi CLI runs it.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "policies"))

from gpu_cluster_policies import validators as v
from gpu_cluster_policies.pack import PACK_NAME, build_policies

URN = "urn:pulumi:dev::gpu-cluster::{type}::{name}"


def resource(type_: str, name: str, props: dict[str, Any], **extra: Any) -> v.Resource:
    return v.Resource(type_, props, URN.format(type=type_, name=name), name, **extra)


def policy(name: str) -> v.PolicySpec:
    return next(p for p in v.POLICIES if p.name == name)


def check(name: str, res: v.Resource, config: dict[str, Any] | None = None) -> list[str]:
    spec = policy(name)
    return spec.check(res, spec.config(config))


def assert_names_resource_and_fix(messages: list[str], res: v.Resource, count: int = 1) -> None:
    assert len(messages) == count, f"{res.urn}: expected {count} violation(s), got {messages}"
    for message in messages:
        assert f"'{res.name}'" in message, (
            f"{res.urn}: message does not name the resource: {message}"
        )
        assert "Fix:" in message, f"{res.urn}: message does not say the fix: {message}"


def security_group(*ingress: dict[str, Any], name: str = "network-cluster") -> v.Resource:
    return resource(
        v.SECURITY_GROUP, name, {"ingress": list(ingress), "tags": {"env": "dev", "owner": "ml"}}
    )


def ssh_rule(*cidrs: str, port: int = 22) -> dict[str, Any]:
    return {"protocol": "tcp", "fromPort": port, "toPort": port, "cidrBlocks": list(cidrs)}


def as_policy_input(r) -> v.Resource:
    """A recorded registration as the policy runtime shows it: inputs without secret markers,
    dependencies and property dependencies together."""
    dependencies = set(r.dependencies).union(*r.property_dependencies.values())
    return v.Resource(
        r.type,
        unwrap(r.inputs),
        r.urn,
        r.name,
        tuple(r.additional_secret_outputs),
        frozenset(dependencies),
        r.protect,
    )


def analyzer_resource(r: v.Resource, message_type):
    properties = struct_pb2.Struct()
    properties.update(json.loads(json.dumps(dict(r.props))))
    return message_type(
        type=r.resource_type,
        properties=properties,
        urn=r.urn,
        name=r.name,
        options=analyzer_pb2.AnalyzerResourceOptions(
            additionalSecretOutputs=list(r.additional_secret_outputs), protect=r.protect
        ),
    )


def analyze(resources: list[v.Resource]) -> list[tuple[str, str, str, int]]:
    """Run the pack's policies in pulumi_policy's analyzer servicer (what the CLI calls) and
    return (policy, URN, message, enforcement level) for every diagnostic."""
    servicer = _PolicyAnalyzerServicer(
        PACK_NAME, "0.0.1", build_policies(), EnforcementLevel.MANDATORY
    )
    diagnostics = []
    for r in resources:
        request = analyzer_resource(r, analyzer_pb2.AnalyzeRequest)
        for d in servicer.Analyze(request, None).diagnostics:
            diagnostics.append(
                (d.policyName, r.urn if not d.urn else d.urn, d.message, d.enforcementLevel)
            )
    stack_resources = []
    for r in resources:
        message = analyzer_resource(r, analyzer_pb2.AnalyzerResource)
        message.dependencies.extend(sorted(r.dependencies))
        stack_resources.append(message)
    response = servicer.AnalyzeStack(
        analyzer_pb2.AnalyzeStackRequest(resources=stack_resources), None
    )
    diagnostics += [
        (d.policyName, d.urn, d.message, d.enforcementLevel) for d in response.diagnostics
    ]
    return diagnostics


MANDATORY = analyzer_pb2.EnforcementLevel.Value("MANDATORY")

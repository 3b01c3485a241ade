"""The pulumi_policy objects of the pack: each validator adapted to the policy runtime.

Building these objects starts nothing; only `PolicyPack(...)` (in `policies/__main__.py`) starts
the gRPC server the Pulumi CLI talks to.

Why: docs/decisions/024-policy-validators-are-pure-functions.md
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from gpu_cluster_policies.validators import POLICIES, PolicySpec, Resource

PACK_NAME = "gpu-cluster"


def from_resource_args(args: ResourceValidationArgs) -> Resource:
    """The validator input for one resource. `props` stays the runtime's proxy: a value unknown
    during preview raises only when a check reads it (the runtime then reports it as advisory)."""
    return Resource(
        resource_type=args.resource_type,
        props=args.props,
        urn=args.urn,
        name=args.name,
        additional_secret_outputs=tuple(args.opts.additional_secret_outputs or ()),
        protect=bool(args.opts.protect),
    )


def from_stack_args(args: StackValidationArgs) -> list[Resource]:
    resources = []
    for r in args.resources:
        dependencies = {d.urn for d in r.dependencies}
        for deps in r.property_dependencies.values():
            dependencies |= {d.urn for d in deps}
        resources.append(
            Resource(
                resource_type=r.resource_type,
                props=r.props,
                urn=r.urn,
                name=r.name,
                additional_secret_outputs=tuple(r.opts.additional_secret_outputs or ()),
                protect=bool(r.opts.protect),
                dependencies=frozenset(dependencies),
            )
        )
    return resources


def _config(spec: PolicySpec, given: Mapping[str, Any]) -> dict[str, Any]:
    return spec.config({k: v for k, v in given.items() if k != "enforcementLevel"})


def build_policy(spec: PolicySpec) -> Policy:
    schema = PolicyConfigSchema(properties={k: dict(v) for k, v in spec.config_schema.items()})
    level = EnforcementLevel(spec.enforcement_level)
    if spec.stack:

        def validate_stack(args: StackValidationArgs, report: ReportViolation) -> None:
            for urn, message in spec.check(from_stack_args(args), _config(spec, args.get_config())):
                report(message, urn)

        return StackValidationPolicy(
            name=spec.name,
            description=spec.description,
            validate=validate_stack,
            enforcement_level=level,
            config_schema=schema,
        )

    def validate_resource(args: ResourceValidationArgs, report: ReportViolation) -> None:
        for message in spec.check(from_resource_args(args), _config(spec, args.get_config())):
            report(message, None)

    return ResourceValidationPolicy(
        name=spec.name,
        description=spec.description,
        validate=validate_resource,
        enforcement_level=level,
        config_schema=schema,
    )


def build_policies() -> list[Policy]:
    return [build_policy(spec) for spec in POLICIES]

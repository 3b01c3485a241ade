"""Kubernetes objects as the program registers them: the recorded manifest, strict validation
against the Kubernetes JSON schemas of a stack's minor, and the checks every add-on shares.

Schema versions: kubernetes-validate ships one schema set per minor (1.37.0 ships 1.2x..1.37). A
minor it does not ship maps to the nearest older one it does (the API only grows within v1), or,
older than all of them, to its oldest; `schema_version` does that mapping
(tests/test_manifests_schema.py reports it).
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from kubernetes_validate import utils as kv_utils
from packaging.version import Version

from tools.harness.graph import Graph, Resource
from tools.harness.stacks import stack_file


def available_minors() -> list[str]:
    """The minors kubernetes-validate has schemas for, oldest first."""
    return sorted({kv_utils.major_minor(v) for v in kv_utils.all_versions()}, key=Version)


def schema_version(minor: str) -> str:
    """The schema set to validate a cluster of `minor` against (see the module docstring)."""
    available = available_minors()
    if minor in available:
        return minor
    older = [v for v in available if Version(v) <= Version(minor)]
    return older[-1] if older else available[0]


def manifest(resource: Resource) -> dict[str, Any]:
    """The recorded inputs as a manifest: apiVersion, kind and the object's own fields."""
    inputs = resource.plain_inputs()
    _, group_version, kind = resource.type.split(":")
    expected_api = group_version.removeprefix("core/")
    assert inputs.get("apiVersion") == expected_api and inputs.get("kind") == kind, (
        f"{resource.urn}: recorded apiVersion/kind {inputs.get('apiVersion')}/{inputs.get('kind')}"
        f" do not match its type {resource.type}"
    )
    return {k: v for k, v in inputs.items() if not k.startswith("__")}


def validate(obj: dict[str, Any], minor: str, what: str) -> None:
    version = schema_version(minor)
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path)
        pytest.fail(f"{what}: invalid for Kubernetes {version} (strict) at {path}: {exc.message}")
    except kubernetes_validate.SchemaNotFoundError as exc:
        pytest.fail(f"{what}: no schema for Kubernetes {version}: {exc.message}")


def stack_minor(stack: str) -> str:
    return str(stack_file(stack).get("gpu-cluster:kubernetesVersion", "1.35"))


def pinned(image: str) -> bool:
    tag = image.rpartition(":")[2]
    return "@sha256:" in image or ("/" not in tag and tag not in ("", "latest"))


def only_on_the_provider(g: Graph, resource: Resource) -> None:
    """Everything the resource waits for is Kubernetes state or the provider's own inputs
    (the control plane), never a GPU node's resource."""
    for urn in g.ancestors(resource):
        assert "GpuNode" not in urn and "GpuValidation" not in urn, (
            f"{resource.urn} waits for {urn}"
        )
    assert resource.provider_urn and "pulumi:providers:kubernetes" in resource.provider_urn, (
        f"{resource.urn}: provider {resource.provider}"
    )

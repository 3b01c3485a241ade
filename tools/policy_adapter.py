"""Run the policy pack's mandatory policies (policies/gpu_cluster_policies) over a recorded graph.

The pack's validators are pure functions over `validators.Resource` (what the engine shows a
policy); this adapter turns the harness's recorded resources into those and counts the verdicts.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from types import ModuleType

from tools.harness.graph import Graph, unwrap
from tools.harness.stacks import ROOT

POLICIES_DIR = ROOT / "policies"


@dataclass
class PolicyReport:
    available: bool
    passed: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    note: str = ""


def validators() -> ModuleType:
    """The pack's validators module (ImportError when the pack cannot be imported)."""
    if str(POLICIES_DIR) not in sys.path:
        sys.path.insert(0, str(POLICIES_DIR))
    from gpu_cluster_policies import validators as module

    return module


def as_policy_resources(graph: Graph) -> list:
    """The recorded resources as the pack's `validators.Resource`s."""
    pack = validators()
    resources = []
    for r in graph:
        waits = set(r.dependencies)
        for urns in r.property_dependencies.values():
            waits |= urns
        resources.append(
            pack.Resource(
                resource_type=r.type,
                props=unwrap(r.inputs),
                urn=r.urn,
                name=r.name,
                additional_secret_outputs=tuple(r.additional_secret_outputs),
                dependencies=frozenset(waits),
                protect=r.protect,
            )
        )
    return resources


def run(graph: Graph) -> PolicyReport:
    """The mandatory policies' verdicts on `graph`; unavailable when the pack does not import."""
    try:
        pack = validators()
    except ImportError as exc:
        return PolicyReport(available=False, note=f"policy pack not importable: {exc}")
    mandatory = {p.name for p in pack.POLICIES if p.enforcement_level == "mandatory"}
    found = [
        (policy, urn, message)
        for policy, urn, message in pack.validate_stack(as_policy_resources(graph))
        if policy in mandatory
    ]
    failing = {policy for policy, _, _ in found}
    names = {r.urn: r.name for r in graph}
    return PolicyReport(
        available=True,
        passed=sorted(mandatory - failing),
        violations=[
            f"[{policy}] {names.get(urn, urn)}: {message}" for policy, urn, message in found
        ],
    )

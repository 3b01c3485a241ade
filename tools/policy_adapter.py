"""Run the policy pack's mandatory policies (policies/gpu_cluster_policies) over a recorded graph.

The pack's validators are pure functions over `validators.Resource` (what the engine shows a
policy); this adapter turns the harness's recorded resources into those and counts the verdicts.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from tools.harness.graph import Graph, unwrap
from tools.harness.stacks import ROOT

POLICIES_DIR = ROOT / "policies"
if str(POLICIES_DIR) not in sys.path:
    sys.path.insert(0, str(POLICIES_DIR))

from gpu_cluster_policies import validators  # noqa: E402

if TYPE_CHECKING:
    from tools.preview import PolicyReport


def as_policy_resources(graph: Graph) -> list[validators.Resource]:
    resources = []
    for r in graph:
        waits = set(r.dependencies)
        for urns in r.property_dependencies.values():
            waits |= urns
        resources.append(
            validators.Resource(
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
    from tools.preview import PolicyReport

    mandatory = {p.name for p in validators.POLICIES if p.enforcement_level == "mandatory"}
    found = [
        (policy, urn, message)
        for policy, urn, message in validators.validate_stack(as_policy_resources(graph))
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

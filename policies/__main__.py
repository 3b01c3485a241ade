"""The gpu-cluster policy pack. Building a PolicyPack starts the gRPC server the Pulumi CLI
talks to and blocks, so this file only builds it; the policies live in gpu_cluster_policies.

    pulumi preview --policy-pack policies

Why: docs/decisions/024-policy-validators-are-pure-functions.md
"""

from gpu_cluster_policies.pack import PACK_NAME, build_policies
from pulumi_policy import EnforcementLevel, PolicyPack

PolicyPack(
    name=PACK_NAME,
    enforcement_level=EnforcementLevel.MANDATORY,
    policies=build_policies(),
)

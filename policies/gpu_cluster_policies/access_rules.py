"""Who may do everything: Kubernetes RBAC that hands an admin role to everyone, and AWS IAM
that hands out administrator rights.

RBAC: a binding of cluster-admin, admin, edit or a role with wildcard rules to a group every
caller is in (`system:anonymous`, `system:unauthenticated`, `system:authenticated`,
`system:serviceaccounts` and a namespace's `system:serviceaccounts:<ns>`; kubernetes
`staging/src/k8s.io/apiserver/pkg/authentication/user/user.go` and the service account
authenticator's groups) or to the anonymous user. IAM: an attachment of AdministratorAccess (or
IAMFullAccess, with which a principal grants itself the rest), and an inline or managed policy
whose statement allows every action (`*`, `*:*`, or NotAction) on every resource.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gpu_cluster_policies.resources import Config, Resource, get, items, label

BINDINGS = {
    "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding",
    "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBindingPatch",
    "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding",
    "kubernetes:rbac.authorization.k8s.io/v1:RoleBindingPatch",
}
ROLES = {
    "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole",
    "kubernetes:rbac.authorization.k8s.io/v1:ClusterRolePatch",
    "kubernetes:rbac.authorization.k8s.io/v1:Role",
    "kubernetes:rbac.authorization.k8s.io/v1:RolePatch",
}
EVERYONE_GROUPS = (
    "system:anonymous",
    "system:unauthenticated",
    "system:authenticated",
    "system:serviceaccounts",
)
EVERYONE_USERS = ("system:anonymous",)
# The default user-facing roles that write (kubernetes plugin/pkg/auth/authorizer/rbac/
# bootstrappolicy/policy.go): cluster-admin is everything, admin and edit read Secrets and run
# pods as any service account of a namespace.
POWERFUL_ROLES = ("cluster-admin", "admin", "edit")

ATTACHMENTS = {
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
    "aws:iam/userPolicyAttachment:UserPolicyAttachment",
    "aws:iam/groupPolicyAttachment:GroupPolicyAttachment",
    "aws:iam/policyAttachment:PolicyAttachment",
}
INLINE_POLICIES = {
    "aws:iam/rolePolicy:RolePolicy",
    "aws:iam/userPolicy:UserPolicy",
    "aws:iam/groupPolicy:GroupPolicy",
    "aws:iam/policy:Policy",
}
IAM_ROLE = "aws:iam/role:Role"
DENIED_MANAGED_POLICIES = ("AdministratorAccess", "IAMFullAccess")


def _everyone(subject: Any, config: Config) -> bool:
    groups = tuple(config.get("everyoneGroups") or EVERYONE_GROUPS)
    if not isinstance(subject, Mapping):
        return False
    kind, name = subject.get("kind"), str(subject.get("name") or "")
    if kind == "Group":
        return name in groups or name.startswith("system:serviceaccounts:")
    return kind == "User" and name in EVERYONE_USERS


def _wildcard(rules: Any) -> bool:
    """A rule granting every verb on every resource (of every group)."""
    for rule in items(rules):
        verbs, resources = items(get(rule, "verbs")), items(get(rule, "resources"))
        if "*" in verbs and "*" in resources:
            return True
    return False


def check_rbac_everyone(resources: Sequence[Resource], config: Config) -> list[tuple[str, str]]:
    """No binding hands cluster-admin, admin, edit or a role with wildcard rules (one of the
    stack's) to a group every caller is in, or to the anonymous user."""
    powerful = set(config.get("powerfulRoles") or POWERFUL_ROLES)
    for role in resources:
        if role.resource_type in ROLES and _wildcard(get(role.props, "rules")):
            powerful.add(str(get(role.props, "metadata", "name")))
    found = []
    for binding in resources:
        if binding.resource_type not in BINDINGS:
            continue
        role = get(binding.props, "roleRef", "name")
        everyone = [s for s in items(get(binding.props, "subjects")) if _everyone(s, config)]
        if role in powerful and everyone:
            names = ", ".join(f"{s.get('kind')} {s.get('name')}" for s in everyone)
            found.append(
                (
                    binding.urn,
                    f"{label(binding)}: binds {role} to {names}, so every caller of the API "
                    "holds it. Fix: bind it to a group of your own (like "
                    "gpu-cluster:operators) or to named service accounts.",
                )
            )
    return found


def _statements(document: Any) -> list[Mapping[str, Any]]:
    if isinstance(document, str):
        try:
            document = json.loads(document)
        except ValueError:
            return []
    statements = get(document, "Statement")
    if isinstance(statements, Mapping):
        return [statements]
    return [s for s in items(statements) if isinstance(s, Mapping)]


def _as_list(value: Any) -> list[Any]:
    return [value] if isinstance(value, str) else items(value)


def _allows_everything(statement: Mapping[str, Any]) -> bool:
    if statement.get("Effect") != "Allow":
        return False
    resources = _as_list(statement.get("Resource"))
    if "*" not in resources:
        return False
    actions = _as_list(statement.get("Action"))
    return any(a in ("*", "*:*") for a in actions) or "NotAction" in statement


def _denied_arn(arn: Any, config: Config) -> bool:
    names = tuple(config.get("deniedManagedPolicies") or DENIED_MANAGED_POLICIES)
    return isinstance(arn, str) and any(arn.endswith(f":policy/{n}") for n in names)


def check_iam_admin(resource: Resource, config: Config) -> list[str]:
    """No IAM role, user or group is given AdministratorAccess (or IAMFullAccess), or a policy
    that allows every action on every resource."""
    props, kind = resource.props, resource.resource_type
    found = []
    if kind in ATTACHMENTS and _denied_arn(props.get("policyArn"), config):
        found.append(f"attaches {props.get('policyArn')}")
    if kind in INLINE_POLICIES and any(map(_allows_everything, _statements(props.get("policy")))):
        found.append("its policy allows every action on every resource")
    if kind == IAM_ROLE:
        found += [
            f"attaches {arn}"
            for arn in items(props.get("managedPolicyArns"))
            if _denied_arn(arn, config)
        ]
        for inline in items(props.get("inlinePolicies")):
            if any(map(_allows_everything, _statements(get(inline, "policy")))):
                found.append(f"its inline policy {get(inline, 'name')!r} allows everything")
    return [
        f"{label(resource)}: {problem}. Fix: grant the actions and resources the role needs "
        "(the program's machines need none beyond their instance profile's)."
        for problem in found
    ]

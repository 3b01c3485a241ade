"""The policy pack's rules of issue 41 (finding 2), one unsafe and one safe case each, in the
shape the engine shows a policy (tests/helpers/policies.py): RBAC that hands an admin role to
everyone, IAM administrator rights, Pod Security `privileged` namespaces, commands that run ssh
without checking host keys, commands that print credentials with logging on, the IMDS hop limit,
and resources whose content the pack cannot see. Each unsafe case also goes through
pulumi_policy's analyzer servicer (what the CLI calls) as a mandatory violation."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.helpers.policies import (
    MANDATORY,
    analyze,
    assert_names_resource_and_fix,
    check,
    policy,
    resource,
    v,
)

RBAC = "kubernetes:rbac.authorization.k8s.io/v1"


def _stack(name: str, resources: list[v.Resource]) -> list[tuple[str, str]]:
    spec = policy(name)
    return spec.check(resources, spec.config())


def _mandatory(name: str, resources: list[v.Resource]) -> None:
    found = [f for f in analyze(resources) if f[0] == name]
    assert found and all(f[3] == MANDATORY for f in found), found


# ---------------------------------------------------------------- RBAC


def binding(role: str, kind: str, subject: str, *, type_: str = "ClusterRoleBinding") -> v.Resource:
    return resource(
        f"{RBAC}:{type_}",
        f"{role}-{subject}",
        {
            "metadata": {"name": f"{role}-for-{subject.replace(':', '-')}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"kind": kind, "name": subject}],
        },
    )


WILDCARD_ROLE = resource(
    f"{RBAC}:ClusterRole",
    "everything",
    {
        "metadata": {"name": "everything"},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
    },
)


@pytest.mark.parametrize(
    ("role", "kind", "subject"),
    [
        ("cluster-admin", "Group", "system:anonymous"),
        ("cluster-admin", "Group", "system:unauthenticated"),
        ("cluster-admin", "Group", "system:serviceaccounts"),
        ("cluster-admin", "Group", "system:serviceaccounts:default"),
        ("edit", "Group", "system:authenticated"),
        ("everything", "Group", "system:authenticated"),
        ("cluster-admin", "User", "system:anonymous"),
    ],
)
def test_admin_rbac_for_everyone_is_refused(role, kind, subject):
    unsafe = binding(role, kind, subject)
    found = _stack("no-admin-rbac-for-everyone", [WILDCARD_ROLE, unsafe])
    assert len(found) == 1 and found[0][0] == unsafe.urn, found
    assert f"binds {role} to {kind} {subject}" in found[0][1] and "Fix:" in found[0][1]
    _mandatory("no-admin-rbac-for-everyone", [WILDCARD_ROLE, unsafe])


def test_rbac_for_named_groups_and_read_only_roles_passes():
    safe = [
        WILDCARD_ROLE,
        binding("cluster-admin", "Group", "gpu-cluster:operators"),
        binding("view", "Group", "system:authenticated"),
        binding("system:discovery", "Group", "system:authenticated"),
    ]
    assert _stack("no-admin-rbac-for-everyone", safe) == []


# ---------------------------------------------------------------- IAM


ADMIN_ARN = "arn:aws:iam::aws:policy/AdministratorAccess"


def _document(**statement: Any) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", **statement}]})


@pytest.mark.parametrize(
    "unsafe",
    [
        resource(
            "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
            "node-admin",
            {"role": "gpu-node", "policyArn": ADMIN_ARN},
        ),
        resource(
            "aws:iam/userPolicyAttachment:UserPolicyAttachment",
            "ci-admin",
            {"user": "ci", "policyArn": "arn:aws:iam::aws:policy/IAMFullAccess"},
        ),
        resource(
            "aws:iam/rolePolicy:RolePolicy",
            "node-inline",
            {"role": "gpu-node", "policy": _document(Action="*:*", Resource="*")},
        ),
        resource(
            "aws:iam/policy:Policy",
            "all-but-billing",
            {"policy": _document(NotAction=["aws-portal:*"], Resource=["*"])},
        ),
        resource(
            "aws:iam/role:Role",
            "gpu-node",
            {
                "assumeRolePolicy": "{}",
                "managedPolicyArns": [ADMIN_ARN],
                "tags": {"env": "dev", "owner": "ml"},
            },
        ),
        resource(
            "aws:iam/role:Role",
            "gpu-node-inline",
            {
                "assumeRolePolicy": "{}",
                "inlinePolicies": [{"name": "all", "policy": _document(Action="*", Resource="*")}],
                "tags": {"env": "dev", "owner": "ml"},
            },
        ),
    ],
    ids=lambda r: r.name,
)
def test_iam_administrator_rights_are_refused(unsafe):
    messages = check("no-iam-administrator", unsafe)
    assert_names_resource_and_fix(messages, unsafe)
    _mandatory("no-iam-administrator", [unsafe])


def test_narrow_iam_passes():
    safe = [
        resource(
            "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
            "ssm",
            {
                "role": "gpu-node",
                "policyArn": "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore",
            },
        ),
        resource(
            "aws:iam/rolePolicy:RolePolicy",
            "describe",
            {"role": "gpu-node", "policy": _document(Action=["ec2:Describe*"], Resource="*")},
        ),
        resource(
            "aws:iam/rolePolicy:RolePolicy",
            "one-bucket",
            {"role": "gpu-node", "policy": _document(Action="*", Resource="arn:aws:s3:::b/*")},
        ),
    ]
    for safe_resource in safe:
        assert check("no-iam-administrator", safe_resource) == [], safe_resource.name


# ---------------------------------------------------------------- Pod Security


def namespace(name: str, level: str, *, patch: bool = False) -> v.Resource:
    kind = "NamespacePatch" if patch else "Namespace"
    return resource(
        f"kubernetes:core/v1:{kind}",
        name,
        {"metadata": {"name": name, "labels": {"pod-security.kubernetes.io/enforce": level}}},
    )


@pytest.mark.parametrize("patch", [False, True], ids=["namespace", "namespace patch"])
def test_a_tenant_namespace_enforcing_privileged_is_refused(patch):
    unsafe = namespace("team-a", "privileged", patch=patch)
    assert_names_resource_and_fix(check("no-privileged-pod-security-namespaces", unsafe), unsafe)
    _mandatory("no-privileged-pod-security-namespaces", [unsafe])


def test_the_node_agents_namespace_and_baseline_ones_pass():
    for safe in (namespace("nvidia-device-plugin", "privileged"), namespace("team-a", "baseline")):
        assert check("no-privileged-pod-security-namespaces", safe) == [], safe.name


# ---------------------------------------------------------------- ssh without host keys


def local(name: str, **props: Any) -> v.Resource:
    return resource(v.LOCAL_COMMAND, name, {"logging": "stdoutAndStderr", **props})


@pytest.mark.parametrize(
    "unsafe",
    [
        local("copy", create="scp -o StrictHostKeyChecking=no f ubuntu@10.0.0.5:/tmp"),
        local("probe", create="ssh -oStrictHostKeyChecking=accept-new ubuntu@10.0.0.5 true"),
        local("probe2", create="ssh -o 'UserKnownHostsFile /dev/null' ubuntu@10.0.0.5 true"),
        local(
            "git",
            create="git pull",
            environment={"GIT_SSH_COMMAND": "ssh -o StrictHostKeyChecking=off"},
        ),
        resource(
            v.REMOTE_COMMAND,
            "hop",
            {"create": "bash -s", "stdin": "ssh -o StrictHostKeyChecking no other-host true\n"},
        ),
    ],
    ids=lambda r: r.name,
)
def test_commands_running_ssh_without_host_key_checks_are_refused(unsafe):
    messages = check("no-ssh-without-host-key-checking", unsafe)
    assert_names_resource_and_fix(messages, unsafe)
    _mandatory("no-ssh-without-host-key-checking", [unsafe])


def test_ssh_with_a_pinned_host_key_passes():
    safe = local(
        "pinned",
        create="ssh -o StrictHostKeyChecking=yes -o UserKnownHostsFile=/run/k ubuntu@h true",
    )
    assert check("no-ssh-without-host-key-checking", safe) == []


# ---------------------------------------------------------------- credentials in logs


@pytest.mark.parametrize(
    "script",
    [
        "kubectl -n kube-system create token admin --duration=24h",
        "kubectl config view --raw",
        "kubectl --raw config view",
        "cat /etc/kubernetes/pki/*.key",
        "sudo cat /etc/kubernetes/pki/ca.key",
        "kubeadm token create --print-join-command",
    ],
)
def test_commands_printing_credentials_with_logging_on_are_refused(script):
    unsafe = local("print", create=script)
    messages = check("secret-command-output", unsafe)
    assert_names_resource_and_fix(messages, unsafe, count=2)
    safe = resource(
        v.LOCAL_COMMAND,
        "print",
        {"create": script, "logging": "none"},
        additional_secret_outputs=("stdout", "stderr"),
    )
    assert check("secret-command-output", safe) == []


def test_commands_printing_nothing_secret_pass():
    assert check("secret-command-output", local("list", create="kubectl get nodes -o wide")) == []


# ---------------------------------------------------------------- IMDS hop limit


@pytest.mark.parametrize("type_", [v.SPOT_REQUEST, v.LAUNCH_TEMPLATE, v.INSTANCE])
def test_a_hop_limit_that_reaches_containers_is_refused(type_):
    options = {"httpTokens": "required", "httpEndpoint": "enabled"}
    unsafe = resource(type_, "spot", {"metadataOptions": {**options, "httpPutResponseHopLimit": 2}})
    assert_names_resource_and_fix(check("imds-hop-limit", unsafe), unsafe)
    _mandatory("imds-hop-limit", [unsafe])
    safe = resource(type_, "spot", {"metadataOptions": {**options, "httpPutResponseHopLimit": 1}})
    assert check("imds-hop-limit", safe) == []
    assert check("imds-hop-limit", unsafe, {"maxHopLimit": 2}) == [], "the configured bound"


# ---------------------------------------------------------------- what the pack cannot see


def test_a_helm_v3_release_is_refused():
    unsafe = resource(
        "kubernetes:helm.sh/v3:Release",
        "gpu-operator",
        {"chart": "gpu-operator", "repositoryOpts": {"repo": "https://helm.ngc.nvidia.com/nvidia"}},
    )
    assert_names_resource_and_fix(check("kubernetes-content-inspectable", unsafe), unsafe)
    _mandatory("kubernetes-content-inspectable", [unsafe])


def test_a_chart_rendered_as_resources_is_checked_resource_by_resource():
    chart = resource("kubernetes:helm.sh/v4:Chart", "gpu-operator", {"chart": "gpu-operator"})
    assert check("kubernetes-content-inspectable", chart) == []

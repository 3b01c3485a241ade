"""Adversarial configuration values (issue 34's closing note): each is either refused before any
resource exists, by a problem naming its exact key, or accepted, and then what it puts on a host
is checked: the login user's authorized_keys (wait-ready.sh's AUTHORIZED_KEYS), the pinned host
keys, the tags. Counted by `test_the_corpus_is_large_and_mostly_refused`."""

from __future__ import annotations

from typing import Any

import pytest

from components.hosts.remote import Login
from components.settings.load import ConfigError
from tools.harness.stacks import load_stack_settings, stack_file

PUB = stack_file("dev")["gpu-cluster:ssh"]["publicKey"]
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHgQhqhz7570cVflJzFU7G+rWj7+er6oB85ewHM+R5QD"
OTHER = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOBDTt8M+hE1cCPbLyfkqiRG15dpfzxOyAA+P+Vm1S28"
VPC = {"vpcId": "vpc-0a1b2c3d4e5f60718", "subnetIds": ["subnet-0a1b2c3d4e5f60710"]}
SG = "sg-0a1b2c3d4e5f60788"
BASTION = {"host": "198.51.100.7", "hostKey": KEY, "securityGroupId": SG}
EXISTING = {"mode": "existing", "host": "10.0.1.10", "endpoint": "10.0.1.10:6443", "hostKey": KEY}
POOL = {"name": "a", "instanceType": "g5.xlarge", "count": 1}


def ssh(public_key: str) -> dict[str, Any]:
    return {"ssh": {"user": "ubuntu", "publicKey": public_key}}


def bastion(**changes: Any) -> dict[str, Any]:
    return {"network": {**VPC, "bastion": {**BASTION, **changes}}}


def control_plane(**changes: Any) -> dict[str, Any]:
    return {"controlPlane": {**EXISTING, **changes}, "network": VPC}


def kubeconfig_group(group: str) -> dict[str, Any]:
    return {"kubeconfig": {"group": group}}


# (id, config, the key path refused, or None: accepted)
REFUSED = "refused"
CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("login key + newline + second key", ssh(f"{PUB} ops\n{KEY} attacker"), "ssh.publicKey"),
    ("login key + CR + second key", ssh(f"{PUB} ops\r{KEY}"), "ssh.publicKey"),
    ("login key + CRLF + second key", ssh(f"{PUB} ops\r\n{KEY}"), "ssh.publicKey"),
    ("login key + NUL", ssh(f"{PUB} ops\0"), "ssh.publicKey"),
    ("login key + U+2028 + second key", ssh(f"{PUB} ops\u2028{KEY}"), "ssh.publicKey"),
    ("login key + U+2029", ssh(f"{PUB} ops\u2029x"), "ssh.publicKey"),
    ("login key + NEL U+0085", ssh(f"{PUB} ops\x85{KEY}"), "ssh.publicKey"),
    ("login key + vertical tab", ssh(f"{PUB} ops\x0b{KEY}"), "ssh.publicKey"),
    ("login key + form feed", ssh(f"{PUB} ops\x0c{KEY}"), "ssh.publicKey"),
    ("login key + ESC sequence", ssh(f"{PUB} \x1b[2Jops"), "ssh.publicKey"),
    ("login key fields split by a tab", ssh(PUB.replace(" ", "\t", 1)), "ssh.publicKey"),
    ("login key with a command= option", ssh(f'command="sh" {PUB}'), "ssh.publicKey"),
    ("login key with a from= option", ssh(f'from="*" {PUB}'), "ssh.publicKey"),
    ("login key of type ecdsa-sk", ssh(f"sk-{PUB}"), "ssh.publicKey"),
    (
        "bastion host key + newline + second",
        bastion(hostKey=f"{KEY}\n{OTHER}"),
        "network.bastion.hostKey",
    ),
    (
        "bastion host key as ssh-keyscan prints it",
        bastion(hostKey=f"198.51.100.7 {KEY}"),
        "network.bastion.hostKey",
    ),
    (
        "bastion host key @cert-authority",
        bastion(hostKey=f"@cert-authority * {KEY}"),
        "network.bastion.hostKey",
    ),
    (
        "bastion host key RSA",
        bastion(hostKey="ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7"),
        "network.bastion.hostKey",
    ),
    ("bastion without host key", bastion(hostKey=None), "network.bastion.hostKey"),
    (
        "bastion on a public address, no group",
        bastion(securityGroupId=None),
        "network.bastion.securityGroupId",
    ),
    (
        "bastion host with an ssh option",
        bastion(host="198.51.100.7 -oProxyCommand=id"),
        "network.bastion.host",
    ),
    (
        "bastion host starting with a dash",
        bastion(host="-oProxyCommand=id"),
        "network.bastion.host",
    ),
    (
        "control-plane host key + newline",
        control_plane(hostKey=f"{KEY}\n{OTHER}"),
        "controlPlane.hostKey",
    ),
    ("control plane without host key", control_plane(hostKey=None), "controlPlane.hostKey"),
    (
        "control-plane host as an ssh option",
        control_plane(host="-oProxyCommand=id"),
        "controlPlane.host",
    ),
    (
        "control-plane endpoint with a path",
        control_plane(endpoint="10.0.1.10:6443/x;id"),
        "controlPlane.endpoint",
    ),
    (
        "hostKeys entry + newline",
        {"hostKeys": {"i-0123456789abcdef0": f"{KEY}\n{OTHER}"}},
        "hostKeys.i-0123456789abcdef0",
    ),
    (
        "kubeconfig group kubeadm:cluster-admins",
        kubeconfig_group("kubeadm:cluster-admins"),
        "kubeconfig.group",
    ),
    (
        "kubeconfig group Kubeadm:cluster-admins",
        kubeconfig_group("Kubeadm:cluster-admins"),
        "kubeconfig.group",
    ),
    ("kubeconfig group system:masters", kubeconfig_group("system:masters"), "kubeconfig.group"),
    ("kubeconfig group SYSTEM:MASTERS", kubeconfig_group("SYSTEM:MASTERS"), "kubeconfig.group"),
    ("kubeconfig group system:nodes", kubeconfig_group("system:nodes"), "kubeconfig.group"),
    (
        "kubeconfig group with a newline",
        kubeconfig_group("ops\nsystem:masters"),
        "kubeconfig.group",
    ),
    ("tag value with a newline", {"tags": {"env": "dev\nowner: x", "owner": "o"}}, "tags.env"),
    ("tag value with NUL", {"tags": {"env": "dev\0", "owner": "o"}}, "tags.env"),
    ("tag key with BEL", {"tags": {"env\x07": "dev", "owner": "o"}}, "tags.env\x07"),
    (
        "SSH open to 0.0.0.0/0",
        {"network": {"create": True, "sshAllowedCidrs": ["0.0.0.0/0"]}},
        "network.sshAllowedCidrs",
    ),
    (
        "SSH open to two halves of the world",
        {"network": {"create": True, "sshAllowedCidrs": ["0.0.0.0/1", "128.0.0.0/1"]}},
        "network.sshAllowedCidrs",
    ),
    (
        "API open to 0.0.0.0/0",
        {"controlPlane": {"mode": "managed", "apiAllowedCidrs": ["0.0.0.0/0"]}},
        "controlPlane.apiAllowedCidrs",
    ),
    (
        "SSH user with a shell metacharacter",
        {"ssh": {"user": "ubuntu;id", "publicKey": PUB}},
        "ssh.user",
    ),
    ("SSH user root$(id)", {"ssh": {"user": "root$(id)", "publicKey": PUB}}, "ssh.user"),
    ("cluster name with a newline", {"clusterName": "dev\ngpu"}, "clusterName"),
    (
        "label value with a newline",
        {"nodePools": [{**POOL, "labels": {"team": "ml\nx"}}]},
        "nodePools[0].labels.team",
    ),
    (
        "taint key with a space",
        {"nodePools": [{**POOL, "taints": [{"key": "a b", "effect": "NoSchedule"}]}]},
        "nodePools[0].taints[0].key",
    ),
    (
        "DCGM exporter by tag",
        {"dcgmExporter": {"image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless"}},
        "dcgmExporter.image",
    ),
    (
        "device plugin release without a digest",
        {"devicePlugin": {"version": "v0.17.0"}},
        "devicePlugin.imageDigest",
    ),
    (
        "device plugin digest that is a tag",
        {"devicePlugin": {"imageDigest": "latest"}},
        "devicePlugin.imageDigest",
    ),
    (
        "validation image latest",
        {"validation": {"image": "nvcr.io/nvidia/k8s/cuda-sample:latest"}},
        "validation.image",
    ),
    # Accepted: checked below for what reaches a host.
    ("login key with a trailing newline", ssh(f"{PUB}\n"), None),
    ("login key with surrounding spaces", ssh(f"  {PUB} ops  "), None),
    ("login key whose comment names another key", ssh(f"{PUB} {KEY}"), None),
    ("login key with a Unicode comment", ssh(f"{PUB} ops@exämple"), None),
    ("kubeconfig group with trailing space", kubeconfig_group("gpu-cluster:ops "), None),
    (
        "bastion by its private address, no group",
        bastion(host="10.20.0.5", securityGroupId=None),
        None,
    ),
    # A trailing CR is whitespace around one line: stripped, the key pinned as one line.
    ("hostKeys entry + trailing CR", {"hostKeys": {"i-0123456789abcdef0": f"{KEY}\r"}}, None),
]


def _config(config: dict[str, Any]) -> dict[str, Any]:
    """Drop keys set to None (a case that leaves a key out)."""

    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items() if v is not None}
        return value

    return clean(config)


@pytest.mark.parametrize(("case", "config", "key"), CASES, ids=[c[0] for c in CASES])
def test_each_value_is_refused_naming_its_key_or_reaches_the_host_as_one_key(case, config, key):
    if key is not None:
        with pytest.raises(ConfigError) as refused:
            load_stack_settings(config=_config(config))
        keys = {p.key for p in refused.value.problems}
        assert f"gpu-cluster:{key}" in keys, f"{case}: {keys}"
        assert "Traceback" not in str(refused.value)
        return
    settings = load_stack_settings(config=_config(config))
    authorized = Login.of(settings).wait_ready_params()["AUTHORIZED_KEYS"].split("\n")
    # What wait-ready.sh writes: ssh.publicKey, then the public half of sshPrivateKey (the key
    # the steps log in with), each on one line of printable characters; nothing else.
    assert len(authorized) == 2 and authorized[0].split()[:2] == PUB.split()[:2], authorized
    assert all(ch.isprintable() for line in authorized for ch in line), authorized
    assert not any(line.startswith((KEY, OTHER)) for line in authorized), authorized
    for instance_id, pinned in settings.host_keys.items():
        assert pinned == KEY, (instance_id, pinned)
    bastion_ = settings.network.bastion
    if bastion_ is not None:
        assert bastion_.host_key == KEY, bastion_
    assert not settings.kubeconfig.group.lower().startswith(("system:", "kubeadm:"))


def test_the_corpus_is_large_and_mostly_refused():
    refused = [c for c in CASES if c[2] is not None]
    accepted = [c for c in CASES if c[2] is None]
    assert len(CASES) >= 40, len(CASES)
    assert (len(refused), len(accepted)) == (48, 7), (len(refused), len(accepted))

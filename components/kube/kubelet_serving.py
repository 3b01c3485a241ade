"""The names a kubelet may serve as, as the program knows them: its Node's name, its instance's
private DNS name and private address, or an existing host's configured address (never what the
kubelet reports about itself).

Approving names a node chose would hand a compromised node a certificate for
`kubernetes.default.svc` or another node's names, so every approver compares a request with
these only: a node's put in service (api/certificates.py), the control plane's init and the
managed control plane's renewal timer, which reads them from a kube-system ConfigMap per
machine that no node may write.
Why: docs/decisions/061-kubelet-serving-certificates-for-the-names-the-program-knows.md
"""

from __future__ import annotations

import ipaddress

import pulumi
import pulumi_kubernetes as k8s

from components.kube.api.certificates import RECORD_KEY as KEY
from components.kube.api.certificates import RECORD_NAMESPACE as NAMESPACE
from components.kube.api.certificates import RECORD_PREFIX as CONFIG_MAP_PREFIX
from components.kube.manifests import MANAGED_BY


def serving_names(
    node_name: str, private_dns: pulumi.Input[str], private_ip: pulumi.Input[str]
) -> pulumi.Output[str]:
    """One name a line, as `openssl req -text` prints a subject alternative name (OpenSSL
    crypto/x509/v3_san.c, i2v_GENERAL_NAME): DNS:<node>, DNS:<private DNS>, IP Address:<ip>."""

    def lines(values: list[str | None]) -> str:
        dns, ip = values
        names = [f"DNS:{node_name}"]
        if dns:
            names.append(f"DNS:{dns.lower()}")
        if ip:
            names.append(f"IP Address:{ip}")
        return "\n".join(dict.fromkeys(names))

    return pulumi.Output.all(private_dns, private_ip).apply(lines)


def host_serving_names(node_name: str, address: str) -> str:
    """An existing host's: DNS:<node> and its configured address, as an IP address or a DNS
    name (what its kubelet reports besides is not the program's to vouch for)."""
    try:
        return f"DNS:{node_name}\nIP Address:{ipaddress.ip_address(address)}"
    except ValueError:
        return f"DNS:{node_name}\nDNS:{address.lower()}"


def record(
    name: str,
    node_name: str,
    names: pulumi.Input[str],
    *,
    provider: k8s.Provider,
    parent: pulumi.Resource,
) -> k8s.core.v1.ConfigMap:
    """`<name>-serving-names`: ConfigMap kube-system/gpu-cluster-serving-<node> holding `names`,
    which the control plane's approver reads for that Node's requests."""
    return k8s.core.v1.ConfigMap(
        f"{name}-serving-names",
        metadata={
            "name": f"{CONFIG_MAP_PREFIX}{node_name}",
            "namespace": NAMESPACE,
            "labels": MANAGED_BY,
        },
        data={KEY: names},
        opts=pulumi.ResourceOptions(parent=parent, provider=provider),
    )

"""What a joined node's kubelet does first: register its Node with the API server, for the
kubectl stub (state kubectl/nodes/<name>.json), from the JoinConfiguration kubeadm join got:
the name, `node-labels` and `provider-id` of nodeRegistration.kubeletExtraArgs, and its taints,
as the kubelet registers them (a Node that exists already is kept: the kubelet updates only
its status). Its status, from state the test controls:
  kubelet.ready   the Ready condition's status (default True; "none": no Ready condition)
  kubelet.gpus    allocatable nvidia.com/gpu (absent: the device plugin has advertised none)
Stands for kubelet 1.35 registering its Node: pkg/kubelet/kubelet_node_status.go
(`registerWithAPIServer`, `initialNode`: the labels of --node-labels, spec.providerID of
--provider-id, spec.taints of --register-with-taints, which kubeadm 1.35 passes from
JoinConfiguration nodeRegistration.kubeletExtraArgs and taints, cmd/kubeadm/app/phases/kubelet
flags.go `buildKubeletArgs`).
Usage: python3 _kubelet_register.py <state-dir> < join-configuration.yaml
"""

import json
import re
import sys
from pathlib import Path


def extra_arg(config: str, name: str) -> str:
    found = re.search(rf'- name: {re.escape(name)}\n\s+value: "([^"]*)"', config)
    return found.group(1) if found else ""


def main() -> None:
    state, config = Path(sys.argv[1]), sys.stdin.read()
    name = re.search(r'^  name: "([^"]+)"$', config, re.M).group(1)
    path = state / "kubectl" / "nodes" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        return
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
    for item in filter(None, extra_arg(config, "node-labels").split(",")):
        key, _, value = item.partition("=")
        labels[key] = value
    taints = [
        {"key": key, **({"value": value} if value else {}), "effect": effect}
        for key, value, effect in re.findall(
            r'- key: "([^"]*)"\n\s+value: "([^"]*)"\n\s+effect: (\w+)', config
        )
    ]
    spec: dict = {}
    if extra_arg(config, "provider-id"):
        spec["providerID"] = extra_arg(config, "provider-id")
    if taints:
        spec["taints"] = taints
    ready = (
        (state / "kubelet.ready").read_text().strip()
        if (state / "kubelet.ready").exists()
        else "True"
    )
    conditions = [{"type": "MemoryPressure", "status": "False"}]
    if ready != "none":
        conditions.append({"type": "Ready", "status": ready})
    allocatable = {"cpu": "4", "memory": "15Gi", "pods": "110"}
    if (state / "kubelet.gpus").exists():
        allocatable["nvidia.com/gpu"] = (state / "kubelet.gpus").read_text().strip()
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {}},
        "spec": spec,
        "status": {"conditions": conditions, "allocatable": allocatable},
    }
    path.write_text(json.dumps(node))


main()

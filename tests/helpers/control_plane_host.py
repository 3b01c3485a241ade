"""A control-plane host in the script sandbox: the inputs its scripts run with in the tests
(kubeadm init, the CNI) and the files a running cluster has (the admin kubeconfig, flannel's
release manifest)."""

from __future__ import annotations

import base64
import hashlib

FAST = {"RETRY_BASE_SECONDS": "0.01", "POLL_SECONDS": "0.01", "CSR_WAIT_SECONDS": "0"}
CP_NAME = "dev-gpu-control-plane"
PRIVATE_IP = "10.42.3.7"
PUBLIC_IP = "198.51.100.20"
# init-control-plane.sh's inputs for this host.
INIT = {
    "CLUSTER_NAME": "dev-gpu",
    "NODE_NAME": CP_NAME,
    "KUBERNETES_MINOR": "1.35",
    "CONTROL_PLANE_ENDPOINT": f"{PRIVATE_IP}:6443",
    "ADVERTISE_ADDRESS": PRIVATE_IP,
    "POD_SUBNET": "10.244.0.0/16",
    "SERVICE_SUBNET": "10.96.0.0/12",
    "CERT_SANS": f"{PUBLIC_IP},{PRIVATE_IP},ip-10-42-3-7.us-west-2.compute.internal",
    # As components/kube/kubelet_serving.py `serving_names` prints them for this host.
    "SERVING_NAMES": (
        f"DNS:{CP_NAME}\nDNS:ip-10-42-3-7.us-west-2.compute.internal\nIP Address:{PRIVATE_IP}"
    ),
    "API_WAIT_SECONDS": "1",
    **FAST,
}
CNI = {
    "FLANNEL_VERSION": "v0.27.4",
    "FLANNEL_IMAGE": "ghcr.io/flannel-io/flannel:v0.27.4@sha256:" + "f" * 64,
    "FLANNEL_CNI_PLUGIN_IMAGE": "ghcr.io/flannel-io/flannel-cni-plugin:v1.7.1-flannel1@sha256:"
    + "c" * 64,
    "POD_SUBNET": "10.200.0.0/16",
    "NODE_NAME": CP_NAME,
    **FAST,
}
ADMIN_KEY = base64.b64encode(b"FAKE-ADMIN-KEY-DATA").decode()
ADMIN_KUBECONFIG = f"""apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: RkFLRS1DQQ==
    server: https://{PRIVATE_IP}:6443
  name: kubernetes
contexts:
- context:
    cluster: kubernetes
    user: kubernetes-admin
  name: kubernetes-admin@kubernetes
current-context: kubernetes-admin@kubernetes
users:
- name: kubernetes-admin
  user:
    client-certificate-data: RkFLRS1DRVJU
    client-key-data: {ADMIN_KEY}
"""
# The shape of flannel v0.27.4's release manifest (`kubectl kustomize`: fields sorted, `image`
# before `name`), trimmed to what install-cni.sh and the stub read.
FLANNEL_MANIFEST = """---
kind: Namespace
apiVersion: v1
metadata:
  name: kube-flannel
  labels:
    k8s-app: flannel
    pod-security.kubernetes.io/enforce: privileged
---
kind: ConfigMap
apiVersion: v1
metadata:
  name: kube-flannel-cfg
  namespace: kube-flannel
data:
  net-conf.json: |
    {
      "Network": "10.244.0.0/16",
      "EnableNFTables": false,
      "Backend": {
        "Type": "vxlan"
      }
    }
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: kube-flannel-ds
  namespace: kube-flannel
  labels:
    app: flannel
spec:
  selector:
    matchLabels:
      app: flannel
  template:
    spec:
      containers:
      - args:
        - --ip-masq
        - --kube-subnet-mgr
        command:
        - /opt/bin/flanneld
        image: ghcr.io/flannel-io/flannel:v0.27.4
        name: kube-flannel
      initContainers:
      - args:
        - -f
        - /flannel
        - /opt/cni/bin/flannel
        command:
        - cp
        image: ghcr.io/flannel-io/flannel-cni-plugin:v1.8.0-flannel1
        name: install-cni-plugin
      - args:
        - -f
        - /etc/kube-flannel/cni-conf.json
        - /etc/cni/net.d/10-flannel.conflist
        command:
        - cp
        image: ghcr.io/flannel-io/flannel:v0.27.4
        name: install-cni
"""
# The pinned digest of the manifest the curl stub serves (the real one is pins.py's): the CNI
# step applies nothing else (issue 34).
CNI["FLANNEL_MANIFEST_SHA256"] = hashlib.sha256(FLANNEL_MANIFEST.encode()).hexdigest()

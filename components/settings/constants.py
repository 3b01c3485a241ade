"""Supported versions, defaults and the names the program owns (labels, tags), for the settings
model and the components that follow the same rules."""

from __future__ import annotations

from components.labels import EFA_LABEL, GPU_PRESENT_LABEL, INSTANCE_LABEL, POOL_LABEL

PROJECT = "gpu-cluster"

# Kubernetes minors this program installs and tests (kubelet/kubeadm come from pkgs.k8s.io,
# which publishes one repository per minor; the manifests are validated against these schemas).
SUPPORTED_KUBERNETES_MINORS = ("1.33", "1.34", "1.35", "1.36", "1.37")
# NVIDIA driver branches with real Ubuntu server packages (nvidia-headless-no-dkms-<branch>-server
# and the signed linux-modules-nvidia-<branch>-server[-open]-<kernel>): 535 and 580 are NVIDIA's
# long-term branches, 570 a production branch. 550 and 575 reached end of life and Ubuntu turned
# their -server names into transitional packages that pull a newer branch; install-driver.sh also
# refuses a transitional branch on the host before downloading, naming the branch it maps to.
SUPPORTED_DRIVER_BRANCHES = ("535", "570", "580")
# kube-controller-manager gives each Node a pod range of this prefix out of podCidr
# (--node-cidr-mask-size, default 24 for IPv4; the managed control plane keeps the default).
NODE_POD_CIDR_PREFIX = 24
SUPPORTED_UBUNTU = ("24.04", "22.04")
DEFAULT_DEVICE_PLUGIN_VERSION = "v0.20.0"
# What runs privileged or with added capabilities is pulled by digest (a tag can be moved): the
# device plugin and GPU Feature Discovery (SYS_ADMIN) run nvcr.io/nvidia/k8s-device-plugin at
# these digests, the tag kept beside each. Another release needs devicePlugin.imageDigest.
# Source: the multi-arch index digests public manifests pin (NVIDIA GPU Operator 26.7.0's
# bundle for v0.20.0); check one with `crane digest nvcr.io/nvidia/k8s-device-plugin:<tag>`.
DEVICE_PLUGIN_DIGESTS = {
    "v0.20.0": "sha256:a61ba9fd8efb82f3a79f877f7580e02c1e8e7593f62473644bc9c79e315c3312",
}
DEFAULT_VALIDATION_IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
# AWS's image with nccl-tests, NCCL, aws-ofi-nccl and the EFA installer's libfabric at the versions
# its tag names (public.ecr.aws/hpc-cloud/nccl-tests, from aws-samples awsome-distributed-training);
# efa1.43.2 matches the EFA installer the EFA step puts on the hosts.
DEFAULT_NCCL_IMAGE = (
    "public.ecr.aws/hpc-cloud/nccl-tests:cuda12.8.1-efa1.43.2-ofiv1.16.3-ncclv2.27.7-1-testsv2.16.9"
)
# NVIDIA DCGM exporter: the image NVIDIA/dcgm-exporter release 4.5.3-4.8.2 ships in its manifest
# (dcgm-exporter.yaml; tag <DCGM version>-<exporter version>-<base>).
# It runs privileged, so by digest (the tag stays in the reference; `crane digest` checks it).
DEFAULT_DCGM_EXPORTER_IMAGE = (
    "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless"
    "@sha256:60d3b00ac80b4ae77f94dae2f943685605585ad9e92fdccda3154d009ae317cc"
)
# A Node's name is its kubernetes.io/hostname label value (and our Job's gpu-cluster.io/node
# label value): Kubernetes caps label values at 63 characters, so longer names never register.
MAX_NODE_NAME_LENGTH = 63
# Labels the program sets on every GPU node itself (the device plugin selects on them).
PROGRAM_NODE_LABELS = (GPU_PRESENT_LABEL, POOL_LABEL, EFA_LABEL, INSTANCE_LABEL)
# Label namespaces a kubelet may set on its own Node (kubelet --node-labels / NodeRestriction):
# other kubernetes.io and k8s.io labels make the kubelet refuse to start.
KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")
# Labels the kubelet sets on its own Node from the machine and rewrites when they differ
# (kubernetes pkg/kubelet/kubelet_node_status.go initialNode and updateDefaultLabels;
# staging/src/k8s.io/api/core/v1/well_known_labels.go): a pool may not set them, as the node
# guard refuses a registration carrying a key the program manages, and a configured value would
# claim another node's name, zone or machine.
KUBELET_OWN_LABELS = frozenset(
    {
        "kubernetes.io/arch",
        "kubernetes.io/hostname",
        "kubernetes.io/os",
        "node.kubernetes.io/instance-type",
    }
)
KUBELET_OWN_LABEL_NAMESPACES = (
    "beta.kubernetes.io",
    "failure-domain.beta.kubernetes.io",
    "topology.kubernetes.io",
)
# Label key prefixes hardware discovery writes (NVIDIA GPU feature discovery: nvidia.com/gpu.*,
# nvidia.com/mig.*, nvidia.com/cuda.*; node feature discovery: feature.node.kubernetes.io/*):
# a pool's value would claim a GPU the machine lacks, and the discovery would fight the program.
DISCOVERY_LABEL_PREFIXES = (
    "nvidia.com/gpu.",
    "nvidia.com/mig.",
    "nvidia.com/cuda.",
    "feature.node.kubernetes.io/",
)
# The program's own label and taint keys (components/labels.py): no pool sets any key here.
PROGRAM_KEY_PREFIX = "gpu-cluster.io/"
# AWS tags the program sets on its resources itself (a configured one would be overwritten).
PROGRAM_TAGS = ("Name", "gpu-cluster:cluster", POOL_LABEL)
# A created VPC: one subnet per zone (the first SUBNETS_IN_NEW_VPC of the region unless
# availabilityZones names them), each 1/2**SUBNET_PREFIX_DIFF of the VPC block. AWS keeps 5
# addresses of every subnet (the first four and the last).
SUBNETS_IN_NEW_VPC = 2
SUBNET_PREFIX_DIFF = 4
AWS_RESERVED_PER_SUBNET = 5
# AWS allows 50 tags per resource; the program adds PROGRAM_TAGS and keeps room to grow.
MAX_TAGS = 40

"""Names shared by the host side (set at join) and the Kubernetes side (selected on)."""

# Set on every GPU node at join; the device plugin DaemonSet selects on it (the same label
# NVIDIA's GPU feature discovery sets, so the plugin lands on GPU nodes only).
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
POOL_LABEL = "gpu-cluster.io/pool"
# The machine that registered the Node (an EC2 instance id, or an existing host's host-<hex>),
# set by the control plane when it puts the Node in service; a leave acts only on the Node its
# own machine registered (by its providerID, this label for Nodes of earlier releases).
INSTANCE_LABEL = "gpu-cluster.io/instance-id"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# Set at join on the nodes of pools that use EFA; the EFA device plugin selects on it.
EFA_LABEL = "gpu-cluster.io/efa"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
# A new GPU node registers with this taint (join-node.sh, the JoinConfiguration's
# nodeRegistration.taints), which only the per-node system DaemonSets and the node's own checks
# tolerate; the control plane removes it once those checks passed (components/kube/node_hooks.py).
UNPROVEN_TAINT_KEY = "gpu-cluster.io/unproven"
UNPROVEN_TAINT_EFFECT = "NoSchedule"

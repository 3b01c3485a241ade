"""The host steps, described once as data: what each runs, where, for how long, what replaces it,
what an update does, what undoes it, and whether it disrupts GPU work.

Components build their `remote.Command`s from these rows (`remote.run_step`); the tests, the
preview, the policies and the README read step names and order from here instead of spelling
them out again. A step's resource is `f"{owner}-{step.suffix}"`: the node name for node steps
(also for the control-plane steps that act on one node), the cluster name for control-plane steps.

How the engine treats a step on a later `pulumi up` (pulumi-command
`provider/pkg/provider/common/inputs.go`: `triggers` is the only `replaceOnChanges` input;
`provider/pkg/provider/remote/commandController.go`: `Update` runs `update`, else `create`):
- `identity` lists what the step's `triggers` hold. Only a change of these replaces the step
  (delete hook first, then create): the host it runs on (an instance id), and for the join the
  cluster it joins (endpoint and CA hash).
- Any other change (script, parameters, connection) is an update; `on_update` says what it does:
  re-run the idempotent script on the same host, or nothing.
- `disruptive` marks steps whose update on a joined node interrupts GPU work (the driver, the
  container runtime and toolkit, kubelet/kubeadm): these must roll, node by node.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Where(enum.Enum):
    """The host a step runs on."""

    NODE = "node"
    CONTROL_PLANE = "control-plane"
    IMAGE_BUILDER = "image-builder"  # the machine a baked GPU image is made on


class OnUpdate(enum.Enum):
    """What a changed script or parameter does to a step that already ran."""

    RERUN = "re-run"  # run the (idempotent) script again on the same host
    NOTHING = "nothing"  # record the new inputs, run nothing


class Identity(enum.Enum):
    """The values a step's `triggers` hold: only a change of one of them replaces the step."""

    HOST = "host"  # the instance id of the host the step is about
    ENDPOINT = "endpoint"  # the API endpoint of the cluster a node joins
    CA_HASH = "ca-hash"  # the hash of that cluster's CA public key


@dataclass(frozen=True)
class Step:
    suffix: str
    script: str
    runs_on: Where
    timeout_seconds: int  # bound on the script on the host (`timeout -k`), not only the dial
    identity: tuple[Identity, ...] = (Identity.HOST,)
    on_update: OnUpdate = OnUpdate.RERUN
    delete_script: str | None = None
    disruptive: bool = False  # an update on a joined node interrupts GPU work
    secret_stdout: bool = False  # stdout carries a token or a kubeconfig
    summary: str = ""

    def resource_name(self, owner: str) -> str:
        return f"{owner}-{self.suffix}"


MINUTE = 60

# ---------------------------------------------------------------- GPU node chain, in order

WAIT_READY = Step(
    "wait-ready",
    "wait-ready.sh",
    Where.NODE,
    20 * MINUTE,
    summary="OS ready: cloud-init done, apt free",
)
NOUVEAU = Step(
    "nouveau",
    "disable-nouveau.sh",
    Where.NODE,
    20 * MINUTE,  # an initramfs rebuild, maybe a newer kernel with a signed module to install
    # It may install a kernel and reboot the host: on a joined node only inside the roll.
    disruptive=True,
    summary="nouveau off (blocklist; reboot only when it cannot be unloaded)",
)
ROLL_DRAIN = Step(
    "roll-drain",
    "roll-drain.sh",
    Where.CONTROL_PLANE,
    30 * MINUTE,  # the component bounds it by the pool's slot wait plus the drain instead
    summary=(
        "before a disruptive change reaches a joined node: a pool slot (a Lease), cordon, "
        "drain (nothing on a node not joined yet)"
    ),
)
DRIVER = Step(
    "driver",
    "install-driver.sh",
    Where.NODE,
    45 * MINUTE,
    disruptive=True,
    summary="NVIDIA driver, pinned branch; nvidia-smi sees every GPU",
)
RUNTIME = Step(
    "runtime",
    "install-runtime.sh",
    Where.NODE,
    20 * MINUTE,
    disruptive=True,
    summary="containerd + NVIDIA Container Toolkit",
)
KUBE_UPGRADE = Step(
    "kube-upgrade",
    "upgrade-node.sh",
    Where.NODE,
    20 * MINUTE,
    disruptive=True,
    summary="a joined node to the next Kubernetes minor: kubeadm upgrade node, then kubelet",
)
KUBE_TOOLS = Step(
    "kube-tools",
    "install-kube-tools.sh",
    Where.NODE,
    15 * MINUTE,
    disruptive=True,
    summary="kubelet/kubeadm, pinned minor",
)
JOIN_TOKEN = Step(
    "join-token",
    "mint-join-token.sh",
    Where.CONTROL_PLANE,
    5 * MINUTE,
    identity=(Identity.HOST, Identity.ENDPOINT),
    secret_stdout=True,
    summary="bootstrap token for this node, minted on the control plane",
)
JOIN = Step(
    "join",
    "join-node.sh",
    Where.NODE,
    20 * MINUTE,  # above join-node.sh's own bound (17m: kubeadm's phase timeouts + 2m)
    identity=(Identity.HOST, Identity.ENDPOINT, Identity.CA_HASH),
    # No delete hook: pulumi-command's Delete dials the stored host and fails when it is gone, so
    # a hook on the node would make a terminated machine block every later up. A kept host that
    # moves to another cluster is reset by the join itself (join-node.sh, leave_other_cluster);
    # a deleted machine needs no reset.
    summary="kubeadm join from a JoinConfiguration (resets a host joined to another cluster)",
)
# On nodes of EFA pools only, after kube-tools and before the join token (also with a baked
# image: its builder has no EFA interface to prove); inside the roll like the steps before it.
EFA = Step(
    "efa",
    "install-efa.sh",
    Where.NODE,
    30 * MINUTE,  # installer download, its packages and a DKMS build of the efa driver
    # A new installer release replaces libfabric and the efa driver under running NCCL jobs.
    disruptive=True,
    summary="EFA software (AWS's installer, pinned; aws-ofi-nccl); fi_info -p efa lists every "
    "interface",
)
NODE_READY = Step(
    "node-ready",
    "wait-node-ready.sh",
    Where.CONTROL_PLANE,
    20 * MINUTE,
    identity=(Identity.HOST, Identity.ENDPOINT),
    delete_script="drain-node.sh",
    summary="Node Ready (drained and deleted on delete)",
)

# Beside the chain (nothing waits for them): keys reach running machines, labels and taints are
# reconciled through the API.
AUTHORIZED_KEYS = Step(
    "authorized-keys",
    "authorize-ssh-keys.sh",
    Where.NODE,
    2 * MINUTE,
    summary="the login user's authorized_keys: ssh.publicKey and the key the steps log in with",
)
NODE_LABELS = Step(
    "labels",
    "label-node.sh",
    Where.CONTROL_PLANE,
    5 * MINUTE,
    summary="the pool's labels and taints, set with --overwrite; ones set before removed",
)
NODE_SIDE_STEPS: tuple[Step, ...] = (AUTHORIZED_KEYS, NODE_LABELS)

# The steps that make a booted Ubuntu a GPU host, in chain order: every node of a stock pool runs
# them; a baked image holds their work (components/images/gpu_image.py) and its nodes only verify.
INSTALL_STEPS: tuple[Step, ...] = (WAIT_READY, NOUVEAU, DRIVER, RUNTIME, KUBE_TOOLS)

NODE_STEPS: tuple[Step, ...] = (
    WAIT_READY,
    ROLL_DRAIN,
    NOUVEAU,
    DRIVER,
    RUNTIME,
    KUBE_UPGRADE,
    KUBE_TOOLS,
    JOIN_TOKEN,
    JOIN,
    NODE_READY,
)

# ---------------------------------------------------------------- per node, after its chain

GPU_CAPACITY = Step(
    "gpu-capacity",
    "wait-gpu-capacity.sh",
    Where.CONTROL_PLANE,
    20 * MINUTE,  # the component bounds it by validation.timeoutSeconds instead
    identity=(Identity.HOST, Identity.ENDPOINT),
    summary="allocatable nvidia.com/gpu equals the GPUs of the instance type",
)
# The validation Job that follows is a Kubernetes resource, not a host step.
VALIDATION_JOB_SUFFIX = "validation-job"
# Last of a node, after its validation Job (or node-ready without validation): ends the roll
# ROLL_DRAIN began.
ROLL_UNCORDON = Step(
    "uncordon",
    "roll-uncordon.sh",
    Where.CONTROL_PLANE,
    15 * MINUTE,
    summary="after the checks passed again: uncordon, give the pool slot back",
)

# ---------------------------------------------------------------- control plane

CP_WAIT_READY = Step("wait-ready", "wait-ready.sh", Where.CONTROL_PLANE, 20 * MINUTE)
CP_AUTHORIZED_KEYS = Step(
    "authorized-keys", "authorize-ssh-keys.sh", Where.CONTROL_PLANE, 2 * MINUTE
)
CP_RUNTIME = Step("runtime", "install-runtime.sh", Where.CONTROL_PLANE, 20 * MINUTE)
CP_UPGRADE = Step(
    "upgrade",
    "upgrade-control-plane.sh",
    Where.CONTROL_PLANE,
    40 * MINUTE,
    summary=(
        "one Kubernetes minor up (kubeadm upgrade plan/apply, then kubelet), before any node; "
        "refuses a skipped minor or a downgrade"
    ),
)
CP_KUBE_TOOLS = Step("kube-tools", "install-kube-tools.sh", Where.CONTROL_PLANE, 15 * MINUTE)
CP_INIT = Step(
    "init",
    "init-control-plane.sh",
    Where.CONTROL_PLANE,
    30 * MINUTE,
    summary="kubeadm init from an InitConfiguration (skipped when initialised)",
)
CP_CNI = Step("cni", "install-cni.sh", Where.CONTROL_PLANE, 15 * MINUTE, summary="flannel")
CP_VERSION_SKEW = Step(
    "version-skew",
    "check-version-skew.sh",
    Where.CONTROL_PLANE,
    5 * MINUTE,
    summary="kubelets never newer than the API server",
)
CP_KUBECONFIG = Step(
    "kubeconfig",
    "read-kubeconfig.sh",
    Where.CONTROL_PLANE,
    5 * MINUTE,
    secret_stdout=True,
    summary="admin kubeconfig, read back (secret)",
)
CP_OPERATOR_KUBECONFIG = Step(
    "operator-kubeconfig",
    "user-kubeconfig.sh",
    Where.CONTROL_PLANE,
    5 * MINUTE,
    secret_stdout=True,
    summary="the operators' kubeconfig: its own identity, bounded lifetime (secret)",
)

# ---------------------------------------------------------------- baked image builder
# It runs the install steps of the node chain (install_steps in gpu_node.py), then these.

IMAGE_PULL = Step("pull-images", "pull-images.sh", Where.IMAGE_BUILDER, 20 * MINUTE)
IMAGE_PREPARE = Step("prepare", "prepare-image.sh", Where.IMAGE_BUILDER, 10 * MINUTE)
IMAGE_POWER_OFF = Step("power-off", "power-off-builder.sh", Where.IMAGE_BUILDER, 5 * MINUTE)
IMAGE_STEPS: tuple[Step, ...] = (IMAGE_PULL, IMAGE_PREPARE, IMAGE_POWER_OFF)

MANAGED_CONTROL_PLANE_STEPS: tuple[Step, ...] = (
    CP_WAIT_READY,
    CP_RUNTIME,
    CP_UPGRADE,
    CP_KUBE_TOOLS,
    CP_INIT,
    CP_CNI,
    CP_KUBECONFIG,
    CP_OPERATOR_KUBECONFIG,
)
EXISTING_CONTROL_PLANE_STEPS: tuple[Step, ...] = (
    CP_VERSION_SKEW,
    CP_KUBECONFIG,
    CP_OPERATOR_KUBECONFIG,
)

ALL_STEPS: tuple[Step, ...] = (
    *NODE_STEPS,
    *NODE_SIDE_STEPS,
    EFA,
    GPU_CAPACITY,
    ROLL_UNCORDON,
    *MANAGED_CONTROL_PLANE_STEPS,
    CP_AUTHORIZED_KEYS,
    CP_VERSION_SKEW,
    *IMAGE_STEPS,
)


def node_chain() -> tuple[str, ...]:
    """The suffixes of a GPU node's steps after its instance, in chain order."""
    return tuple(step.suffix for step in NODE_STEPS)


def validation_chain() -> tuple[str, ...]:
    """The suffixes of a node's validation, after its chain, when validation is enabled."""
    return (GPU_CAPACITY.suffix, VALIDATION_JOB_SUFFIX)


def node_steps_in_first_up() -> tuple[Step, ...]:
    """The node chain as a new node's first `up` does work in it (the README's chain): without
    the steps that act on a joined node only (the roll's drain, the kubelet upgrade)."""
    return tuple(step for step in NODE_STEPS if step not in (ROLL_DRAIN, KUBE_UPGRADE))


def disruptive_steps() -> tuple[Step, ...]:
    """The node steps whose update interrupts GPU work on a joined node, in chain order."""
    return tuple(step for step in NODE_STEPS if step.disruptive)


def node_step(suffix: str) -> Step:
    """The node step with this suffix (KeyError naming the known ones)."""
    for step in (*NODE_STEPS, *NODE_SIDE_STEPS, EFA, GPU_CAPACITY, ROLL_UNCORDON):
        if step.suffix == suffix:
            return step
    raise KeyError(f"no node step {suffix!r}; known: {', '.join(node_chain())}, gpu-capacity")

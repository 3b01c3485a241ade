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
    KUBERNETES = "kubernetes"  # an object the Kubernetes provider creates, not a host step


class OnUpdate(enum.Enum):
    """What a changed script or parameter does to a step that already ran."""

    RERUN = "re-run"  # run the (idempotent) script again on the same host
    NOTHING = "nothing"  # record the new inputs, run nothing


class When(enum.Enum):
    """When a node row does its work."""

    EVERY_NODE = "every node"
    EFA_POOLS = "EFA pools only"  # registered only on nodes of pools that use EFA
    ROLL_ONLY = "a roll only"  # registered on every node; acts only on a joined node
    VALIDATION = "validation enabled"  # registered only with validation.enabled


class Part(enum.Enum):
    """Which component builds a node row, in chain order."""

    NODE = "GpuNode"  # the node's own chain, up to its Node Ready and labels
    VALIDATION = "GpuValidation"  # the checks after it
    ROLL_END = "GpuNode.finish_roll"  # last, after the checks


class Identity(enum.Enum):
    """The values a step's `triggers` hold: only a change of one of them replaces the step."""

    HOST = "host"  # the instance id of the host the step is about
    ENDPOINT = "endpoint"  # the API endpoint of the cluster a node joins
    CA_HASH = "ca-hash"  # the hash of that cluster's CA public key


# What the first row of a node follows: the node's EC2 instance (resource `<node>`).
INSTANCE = "instance"


@dataclass(frozen=True)
class Step:
    """One row: a host step (its script, host and bound), or a Kubernetes object of the chain
    (`script` None). Node rows also say when they apply, which rows they follow, and whether a
    baked image already holds their work (`in_image`: its nodes only verify)."""

    suffix: str
    script: str | None
    runs_on: Where
    timeout_seconds: int  # bound on the script on the host (`timeout -k`), not only the dial
    after: tuple[str, ...] = ()  # node rows: the suffixes of the rows it follows (or INSTANCE)
    when: When = When.EVERY_NODE
    part: Part = Part.NODE
    in_image: bool = False  # its work is baked into a GPU image (the builder runs it too)
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
    after=(INSTANCE,),
    in_image=True,
    summary="OS ready: cloud-init done, apt free",
)
# Beside the chain (nothing waits for it): keys reach running machines.
AUTHORIZED_KEYS = Step(
    "authorized-keys",
    "authorize-ssh-keys.sh",
    Where.NODE,
    2 * MINUTE,
    after=("wait-ready",),
    summary="the login user's authorized_keys: ssh.publicKey and the key the steps log in with",
)
ROLL_DRAIN = Step(
    "roll-drain",
    "roll-drain.sh",
    Where.CONTROL_PLANE,
    30 * MINUTE,  # the component bounds it by the pool's slot wait plus the drain instead
    after=("wait-ready",),
    when=When.ROLL_ONLY,
    summary=(
        "before a disruptive change reaches a joined node: a pool slot (a Lease), cordon, "
        "drain (nothing on a node not joined yet)"
    ),
)
NOUVEAU = Step(
    "nouveau",
    "disable-nouveau.sh",
    Where.NODE,
    20 * MINUTE,  # an initramfs rebuild, maybe a newer kernel with a signed module to install
    after=("roll-drain",),
    in_image=True,
    # It may install a kernel and reboot the host: on a joined node only inside the roll.
    disruptive=True,
    summary="nouveau off, a kernel with a signed NVIDIA module (reboots only when it must)",
)
DRIVER = Step(
    "driver",
    "install-driver.sh",
    Where.NODE,
    45 * MINUTE,
    after=("nouveau",),
    in_image=True,
    disruptive=True,
    summary="NVIDIA driver, pinned branch; nvidia-smi sees every GPU",
)
RUNTIME = Step(
    "runtime",
    "install-runtime.sh",
    Where.NODE,
    20 * MINUTE,
    after=("driver",),
    in_image=True,
    disruptive=True,
    summary="containerd + NVIDIA Container Toolkit; nvidia is containerd's default runtime",
)
KUBE_UPGRADE = Step(
    "kube-upgrade",
    "upgrade-node.sh",
    Where.NODE,
    20 * MINUTE,
    after=("runtime",),  # and the control plane's kubelet gate (its upgrade or skew check)
    when=When.ROLL_ONLY,
    disruptive=True,
    summary="a joined node to the next Kubernetes minor: kubeadm upgrade node, then kubelet",
)
KUBE_TOOLS = Step(
    "kube-tools",
    "install-kube-tools.sh",
    Where.NODE,
    15 * MINUTE,
    after=("kube-upgrade",),
    in_image=True,
    disruptive=True,
    summary="kubelet/kubeadm, pinned minor",
)
# After kube-tools and before the join token (also with a baked image: its builder has no EFA
# interface to prove); inside the roll like the steps before it.
EFA = Step(
    "efa",
    "install-efa.sh",
    Where.NODE,
    30 * MINUTE,  # installer download, its packages and a DKMS build of the efa driver
    after=("kube-tools",),
    when=When.EFA_POOLS,
    # A new installer release replaces libfabric and the efa driver under running NCCL jobs.
    disruptive=True,
    summary="EFA software (AWS's installer, pinned; aws-ofi-nccl); fi_info -p efa lists every "
    "interface",
)
JOIN_TOKEN = Step(
    "join-token",
    "mint-join-token.sh",
    Where.CONTROL_PLANE,
    5 * MINUTE,
    after=("efa",),  # and the control plane being ready
    identity=(Identity.HOST, Identity.ENDPOINT),
    secret_stdout=True,
    summary="a fresh short-lived join token for this node, minted on the control plane",
)
JOIN = Step(
    "join",
    "join-node.sh",
    Where.NODE,
    20 * MINUTE,  # above join-node.sh's own bound (17m: kubeadm's phase timeouts + 2m)
    after=("join-token",),
    identity=(Identity.HOST, Identity.ENDPOINT, Identity.CA_HASH),
    # No delete hook: pulumi-command's Delete dials the stored host and fails when it is gone, so
    # a hook on the node would make a terminated machine block every later up. A kept host that
    # moves to another cluster is reset by the join itself (join-node.sh, leave_other_cluster);
    # a deleted machine needs no reset.
    summary="kubeadm join from a JoinConfiguration (resets a host joined to another cluster)",
)
NODE_READY = Step(
    "node-ready",
    "wait-node-ready.sh",
    Where.CONTROL_PLANE,
    20 * MINUTE,
    after=("join",),
    identity=(Identity.HOST, Identity.ENDPOINT),
    delete_script="drain-node.sh",
    summary="Node Ready, seen from the control plane (drained and deleted on delete)",
)
# Beside the chain (nothing waits for it): labels and taints reconciled through the API.
NODE_LABELS = Step(
    "labels",
    "label-node.sh",
    Where.CONTROL_PLANE,
    5 * MINUTE,
    after=("node-ready",),
    summary="the pool's labels and taints, set with --overwrite; ones set before removed",
)
GPU_CAPACITY = Step(
    "gpu-capacity",
    "wait-gpu-capacity.sh",
    Where.CONTROL_PLANE,
    20 * MINUTE,  # the component bounds it by validation.timeoutSeconds instead
    after=("node-ready",),  # and the device plugin DaemonSet
    when=When.VALIDATION,
    part=Part.VALIDATION,
    identity=(Identity.HOST, Identity.ENDPOINT),
    summary="allocatable nvidia.com/gpu == the type's GPUs (from the control plane)",
)
VALIDATION_JOB = Step(
    "validation-job",
    None,
    Where.KUBERNETES,
    15 * MINUTE,  # the component bounds it by validation.timeoutSeconds instead
    after=("gpu-capacity",),
    when=When.VALIDATION,
    part=Part.VALIDATION,
    summary="a Job pinned to the node takes all its GPUs: nvidia-smi -L + a CUDA kernel",
)
# Last of a node, after its checks (or node-ready without validation): ends the roll
# ROLL_DRAIN began.
ROLL_UNCORDON = Step(
    "uncordon",
    "roll-uncordon.sh",
    Where.CONTROL_PLANE,
    15 * MINUTE,
    after=("validation-job", "node-ready"),
    when=When.ROLL_ONLY,
    part=Part.ROLL_END,
    summary="after the checks passed again: uncordon, give the pool slot back",
)

# Every node row, in chain order: GpuNode, GpuValidation and the roll's end build them from here.
NODE_ROWS: tuple[Step, ...] = (
    WAIT_READY,
    AUTHORIZED_KEYS,
    ROLL_DRAIN,
    NOUVEAU,
    DRIVER,
    RUNTIME,
    KUBE_UPGRADE,
    KUBE_TOOLS,
    EFA,
    JOIN_TOKEN,
    JOIN,
    NODE_READY,
    NODE_LABELS,
    GPU_CAPACITY,
    VALIDATION_JOB,
    ROLL_UNCORDON,
)
# Rows beside the chain: registered, but nothing waits for them.
NODE_SIDE_STEPS: tuple[Step, ...] = (AUTHORIZED_KEYS, NODE_LABELS)

# The steps that make a booted Ubuntu a GPU host, in chain order: every node of a stock pool runs
# them; a baked image holds their work (components/images/gpu_image.py) and its nodes only verify.
INSTALL_STEPS: tuple[Step, ...] = tuple(step for step in NODE_ROWS if step.in_image)

# The node's own chain (GpuNode), without the rows beside it and the EFA-only one.
NODE_STEPS: tuple[Step, ...] = tuple(
    step
    for step in NODE_ROWS
    if step.part is Part.NODE and step not in NODE_SIDE_STEPS and step.when is not When.EFA_POOLS
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
    *NODE_ROWS,
    *MANAGED_CONTROL_PLANE_STEPS,
    CP_AUTHORIZED_KEYS,
    CP_VERSION_SKEW,
    *IMAGE_STEPS,
)
HOST_STEPS: tuple[Step, ...] = tuple(step for step in ALL_STEPS if step.script is not None)


def node_rows(*, efa: bool, validation: bool, part: Part | None = None) -> tuple[Step, ...]:
    """The node rows one node registers, in chain order: EFA rows only with `efa`, validation
    rows only with `validation`; with `part`, only the rows that component builds."""
    return tuple(
        step
        for step in NODE_ROWS
        if (efa or step.when is not When.EFA_POOLS)
        and (validation or step.when is not When.VALIDATION)
        and (part is None or step.part is part)
    )


def follows(step: Step, registered: tuple[Step, ...]) -> tuple[str, ...]:
    """The suffixes (or INSTANCE) of the registered rows `step` waits for: its `after`, each row
    that is not registered replaced by what that row follows in turn."""
    present = {row.suffix for row in registered}
    by_suffix = {row.suffix: row for row in NODE_ROWS}
    found: list[str] = []
    for name in step.after:
        if name == INSTANCE or name in present:
            found.append(name)
        else:
            found.extend(follows(by_suffix[name], registered))
    return tuple(dict.fromkeys(found))


def node_chain() -> tuple[str, ...]:
    """The suffixes of a GPU node's own chain after its instance, in chain order."""
    return tuple(step.suffix for step in NODE_STEPS)


def validation_chain() -> tuple[str, ...]:
    """The suffixes of a node's validation, after its chain, when validation is enabled."""
    return tuple(step.suffix for step in NODE_ROWS if step.part is Part.VALIDATION)


def node_steps_in_first_up() -> tuple[Step, ...]:
    """The node chain as a new node's first `up` does work in it (the README's chain): without
    the rows beside it and those that act on a joined node only."""
    return tuple(step for step in NODE_STEPS if step.when is not When.ROLL_ONLY)


def disruptive_steps() -> tuple[Step, ...]:
    """The node steps whose update interrupts GPU work on a joined node, in chain order."""
    return tuple(step for step in NODE_STEPS if step.disruptive)


def node_step(suffix: str) -> Step:
    """The node row with this suffix (KeyError naming the known ones)."""
    for step in NODE_ROWS:
        if step.suffix == suffix:
            return step
    known = ", ".join(step.suffix for step in NODE_ROWS)
    raise KeyError(f"no node step {suffix!r}; known: {known}")

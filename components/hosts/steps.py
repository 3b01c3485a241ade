"""The step table: the one place the chain lives. Each row says what runs (a script, or a
Kubernetes object), where (the node, the control plane, an image builder), when (every node, EFA
pools only, with validation), after which rows, what replaces it (`identity`: its `triggers`),
what an update does, what its hooks do through the API (taking a node out, in, away), and
whether it disrupts GPU work.

Every machine the stack creates starts with the first-contact rows (its host-key rotation in two
phases, then the copy of its scripts); GpuNode and the validation build the node rows after them
(`<owner>-<suffix>`); the timeline, the policy pack's generated copy, the README's chain and the
tests read them. A new step is a new row plus its script. Why: docs/decisions/004-steps-are-
replaced-only-by-identity.md, 041-a-host-key-only-its-host-can-use.md, 064-a-first-contact-that-
can-be-redone.md."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Where(enum.Enum):
    """The host a step runs on."""

    NODE = "node"
    CONTROL_PLANE = "control-plane"
    IMAGE_BUILDER = "image-builder"  # the machine a baked GPU image is made on
    KUBERNETES = "kubernetes"  # an object the Kubernetes provider creates, not a host step
    # Every machine the stack creates (a GPU node, the managed control plane, an image builder),
    # first, from where `pulumi up` runs: before the host has its scripts (in no bundle).
    MACHINE = "machine"


class OnUpdate(enum.Enum):
    """What a changed script or parameter does to a step that already ran."""

    RERUN = "re-run"  # run the (idempotent) script again on the same host
    NOTHING = "nothing"  # record the new inputs, run nothing


class When(enum.Enum):
    """When a node row does its work."""

    EVERY_NODE = "every node"
    EFA_POOLS = "EFA pools only"  # registered only on nodes of pools that use EFA
    VALIDATION = "validation enabled"  # registered only with validation.enabled


class Part(enum.Enum):
    """Which component builds a node row, in chain order."""

    NODE = "GpuNode"  # the node's own chain, up to its Node Ready and labels
    VALIDATION = "GpuValidation"  # the checks after it
    ROLL_END = "GpuNode.put_in_service"  # last, after the checks


class Hook(enum.Enum):
    """What a row's resource hooks do, through the Kubernetes API with the credential the
    program holds when they run (components/kube/node_hooks.py)."""

    JOINS = "before create: a dead machine's Node of the same name is deleted"
    LEAVES = "before delete: the Node its machine registered is drained and deleted"
    TAKE_OUT = "before an update on a joined node: a pool slot, cordon, drain"
    IN_SERVICE = "before create or update: labels, taints, the proof taint off, uncordon"
    MINT = "before create: the join token minted, unless its machine's Node is registered"


class Identity(enum.Enum):
    """The values a step's `triggers` hold: only a change of one of them replaces the step."""

    HOST = "host"  # the machine the step is about: an instance id, or an existing host's id
    ENDPOINT = "endpoint"  # the API endpoint of the cluster a node joins
    CA_HASH = "ca-hash"  # the hash of that cluster's CA public key


# What the first row of a node follows: the node's EC2 instance (resource `<node>`).
INSTANCE = "instance"


@dataclass(frozen=True)
class Step:
    """One row: a host step (its script, host and bound), or a Kubernetes object of the chain or
    the copy of a host's scripts (`script` None). Node rows also say when they apply, which rows
    they follow, and whether a baked image already holds their work (`in_image`: its nodes only
    verify)."""

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
    hooks: tuple[Hook, ...] = ()
    disruptive: bool = False  # an update on a joined node interrupts GPU work
    secret_stdout: bool = False  # stdout carries a token or a kubeconfig
    summary: str = ""

    def resource_name(self, owner: str) -> str:
        return f"{owner}-{self.suffix}"


MINUTE = 60

# ---------------------------------------------------------------- first contact, in order
# Every machine the stack creates runs these after its instance and before any row of its role
# (components/hosts/remote.py `machine_host`, `Host.scripts`). Hosts it did not create (an
# existing control plane, the servers of a hosts pool) are pinned from config and get only the
# copy (PINNED_FIRST_CONTACT).

HOST_KEY_ROTATION = Step(
    "host-key-rotation",
    "rotate-host-key.sh",  # sent on stdin by a local Command (components/hosts/local/)
    Where.MACHINE,
    30 * MINUTE,  # the local script's dial budget: a fresh GPU machine opens SSH late
    after=(INSTANCE,),
    # Its update repeats the key it read (PULUMI_COMMAND_STDOUT) and dials nothing: the boot
    # key is never offered again (components/hosts/host_keys.py).
    on_update=OnUpdate.NOTHING,
    summary="the first dial checks the boot host key and stages a new one beside it",
)
HOST_KEY_SWITCH = Step(
    "host-key-switch",
    "rotate-host-key.sh",  # its second phase, from the same local Command script
    Where.MACHINE,
    10 * MINUTE,  # the machine answers already; the dial budget covers sshd's reload
    after=(HOST_KEY_ROTATION.suffix,),
    on_update=OnUpdate.NOTHING,
    summary="the staged key made the live one, the boot key gone; seen served before it is pinned",
)
SCRIPTS = Step(
    "scripts",
    None,  # a CopyToRemote of the host's bundle (components/hosts/bundle.py)
    Where.MACHINE,
    30 * MINUTE,
    after=(HOST_KEY_SWITCH.suffix,),
    summary="the host's scripts, copied once over SFTP; each step runs its own by digest",
)
FIRST_CONTACT: tuple[Step, ...] = (HOST_KEY_ROTATION, HOST_KEY_SWITCH, SCRIPTS)
PINNED_FIRST_CONTACT: tuple[Step, ...] = (SCRIPTS,)

# ---------------------------------------------------------------- GPU node chain, in order

WAIT_READY = Step(
    "wait-ready",
    "wait-ready.sh",
    Where.NODE,
    20 * MINUTE,
    after=(SCRIPTS.suffix,),
    in_image=True,
    summary="OS ready: cloud-init done, apt free; the login user's authorized keys",
)
NOUVEAU = Step(
    "nouveau",
    "disable-nouveau.sh",
    Where.NODE,
    20 * MINUTE,  # an initramfs rebuild, maybe a newer kernel with a signed module to install
    after=("wait-ready",),
    in_image=True,
    # It may install a kernel and reboot the host: on a joined node only inside the roll.
    disruptive=True,
    hooks=(Hook.TAKE_OUT,),
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
    hooks=(Hook.TAKE_OUT,),
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
    hooks=(Hook.TAKE_OUT,),
    summary="containerd + NVIDIA Container Toolkit; nvidia is containerd's default runtime",
)
KUBE_TOOLS = Step(
    "kube-tools",
    "install-kube-tools.sh",
    Where.NODE,
    25 * MINUTE,  # a joined node's upgrade too: kubeadm upgrade node (10m) and the packages
    after=("runtime",),  # and the control plane's kubelet gate (its upgrade or skew check)
    in_image=True,
    disruptive=True,
    hooks=(Hook.TAKE_OUT,),
    summary="kubelet/kubeadm, pinned minor (a joined node moved to it as kubeadm says)",
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
    hooks=(Hook.TAKE_OUT,),
    summary="EFA software (AWS's installer, pinned; aws-ofi-nccl); fi_info -p efa lists every "
    "interface",
)
JOIN_TOKEN = Step(
    "join-token",
    None,
    Where.KUBERNETES,
    MINUTE,
    after=("efa",),
    # What it holds is a credential: the policy pack keeps a Command of this name (as earlier
    # releases had) to the rules of one that prints a token.
    secret_stdout=True,
    hooks=(Hook.MINT,),
    summary="a bootstrap token for this node, minted through the API when it must join, for 2 h",
)
JOIN = Step(
    "join",
    "join-node.sh",
    Where.NODE,
    # kubeadm join's own bound (17m), the Node Ready (10m) and its GPUs allocatable (the
    # component bounds that part by validation.timeoutSeconds)
    30 * MINUTE,
    after=("join-token",),  # and the device plugin DaemonSet
    identity=(Identity.HOST, Identity.ENDPOINT, Identity.CA_HASH),
    # Its hooks work through the API, never on the node: a dead machine never blocks an up. A
    # kept host that moves to another cluster is reset by the join itself (join-node.sh,
    # leave_other_cluster); a deleted machine needs no reset.
    hooks=(Hook.JOINS, Hook.LEAVES),
    summary="kubeadm join, tainted until proven; the Node Ready and every GPU allocatable",
)
VALIDATION_JOB = Step(
    "validation-job",
    None,
    Where.KUBERNETES,
    15 * MINUTE,  # the component bounds it by validation.timeoutSeconds instead
    after=("join",),
    when=When.VALIDATION,
    part=Part.VALIDATION,
    summary="a Job pinned to the node takes all its GPUs: nvidia-smi -L + a CUDA kernel",
)
# Last of a node, after its checks: the control plane puts it in service through the API (the
# labels and taints it owns, the proof taint off, a roll's cordon and slot ended). It runs no
# command: its hooks do the work (components/kube/in_service.py).
IN_SERVICE = Step(
    "in-service",
    None,
    Where.KUBERNETES,
    15 * MINUTE,  # its hook waits for the Node Ready (READY_TIMEOUT_SECONDS) and writes it once
    after=("validation-job", "join"),
    part=Part.ROLL_END,
    hooks=(Hook.IN_SERVICE,),
    summary="its checks passed: pool labels and taints set, the proof taint off (through the API)",
)

# Every node row, in chain order: GpuNode, its validation and its put in service build them.
NODE_ROWS: tuple[Step, ...] = (
    WAIT_READY,
    NOUVEAU,
    DRIVER,
    RUNTIME,
    KUBE_TOOLS,
    EFA,
    JOIN_TOKEN,
    JOIN,
    VALIDATION_JOB,
    IN_SERVICE,
)

# The steps that make a booted Ubuntu a GPU host, in chain order: every node of a stock pool runs
# them; a baked image holds their work (components/images/gpu_image.py) and its nodes only verify.
INSTALL_STEPS: tuple[Step, ...] = tuple(step for step in NODE_ROWS if step.in_image)

# The node's own chain (GpuNode), without the EFA-only row.
NODE_STEPS: tuple[Step, ...] = tuple(
    step for step in NODE_ROWS if step.part is Part.NODE and step.when is not When.EFA_POOLS
)

# ---------------------------------------------------------------- control plane

CP_WAIT_READY = Step("wait-ready", "wait-ready.sh", Where.CONTROL_PLANE, 20 * MINUTE)
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
# Once per renewal period of the program's clock (components/control_plane.py): kubeadm's
# certificates and admin.conf, renewed before they expire when no upgrade renewed them.
CP_CERTIFICATES = Step(
    "certificates",
    "renew-certificates.sh",
    Where.CONTROL_PLANE,
    15 * MINUTE,  # the renewals, and the static Pods restarted: the API down, then up again
    summary="kubeadm's certificates renewed when they expire within 90 days; once a period",
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
# It runs the install steps of the node chain (install_steps in node_inputs.py), then these.

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
    CP_CERTIFICATES,
    CP_KUBECONFIG,
    CP_OPERATOR_KUBECONFIG,
)
EXISTING_CONTROL_PLANE_STEPS: tuple[Step, ...] = (
    CP_VERSION_SKEW,
    CP_CERTIFICATES,
    CP_KUBECONFIG,
    CP_OPERATOR_KUBECONFIG,
)

ALL_STEPS: tuple[Step, ...] = (
    *FIRST_CONTACT,
    *NODE_ROWS,
    *MANAGED_CONTROL_PLANE_STEPS,
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
    that is not registered replaced by what that row follows in turn. The first-contact rows
    count as registered: a node row follows the copy of the scripts, which every host has."""
    present = {row.suffix for row in (*FIRST_CONTACT, *registered)}
    by_suffix = {row.suffix: row for row in (*FIRST_CONTACT, *NODE_ROWS)}
    found: list[str] = []
    for name in step.after:
        if name == INSTANCE or name in present:
            found.append(name)
        else:
            found.extend(follows(by_suffix[name], registered))
    return tuple(dict.fromkeys(found))


def first_contact_chain() -> tuple[str, ...]:
    """The suffixes of what every machine the stack creates runs first, after its instance."""
    return tuple(step.suffix for step in FIRST_CONTACT)


def node_chain() -> tuple[str, ...]:
    """The suffixes of a GPU node's own chain after its first contact, in chain order."""
    return tuple(step.suffix for step in NODE_STEPS)


def validation_chain() -> tuple[str, ...]:
    """The suffixes of a node's validation, after its chain, when validation is enabled."""
    return tuple(step.suffix for step in NODE_ROWS if step.part is Part.VALIDATION)


def node_steps_in_first_up() -> tuple[Step, ...]:
    """The node chain as a new node's first `up` does work in it (the README's chain): its first
    contact, then its own rows."""
    return (*FIRST_CONTACT, *NODE_STEPS)


def host_scripts(where: Where) -> tuple[str, ...]:
    """The scripts a host of `where` runs: its bundle. An image builder runs the GPU node's
    install steps and the image steps."""
    if where is Where.IMAGE_BUILDER:
        rows: tuple[Step, ...] = (*INSTALL_STEPS, *IMAGE_STEPS)
    else:
        rows = tuple(step for step in ALL_STEPS if step.runs_on is where)
    return tuple(sorted({step.script for step in rows if step.script is not None}))


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

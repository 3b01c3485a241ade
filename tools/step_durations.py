"""How long each resource's create step takes, and the rates of the limits a fleet meets
(`LIMITS`), for the bring-up model (`python -m tools.timeline`).

Every figure names where it comes from: a public measurement, a vendor document, the source of
the tool that sets it, or, where none exists, the stated assumption. Durations are for one create
on a fresh machine in one region, without noise. "stock": a host booted from Canonical's Ubuntu
image; "baked": booted from an image built from the same scripts, whose install steps only
verify. Why: docs/decisions/016-the-bring-up-is-modelled-on-the-engine.md and
051-the-model-meets-a-fleets-limits.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from components.hosts import steps


@dataclass(frozen=True)
class Duration:
    seconds: float
    source: str


# Sources, cited by key below.
SOURCES = {
    "brevdev": "brevdev/ec2-coldboot-research @fix_plan.md: cold EC2 launch to SSH 25.8 s average "
    "(RunInstances API 19 % = 4.9 s, pending->running 69 % = 17.8 s, boot->SSH 12 % = 3.1 s), "
    "instance family irrelevant (22.6-23.3 s over six types)",
    "daemonology": "daemonology.net 2021-08-12 'EC2 boot time benchmarking' (ec2-boot-bench): "
    "RunInstances 1.5 s, pending->running 4.9 s, running->port 22 closed 17.2 s, ->open 5.6 s",
    "issue-figures": "published figures gathered for the fleet bring-up model: GPU driver install "
    "several minutes, DKMS build 80-150 s, device plugin start to allocatable 13-90 s, baked "
    "GPU node floor 45-90 s",
    "autoscaler": "kubernetes/autoscaler cluster-autoscaler/utils/gpu/gpu.go: 'When a machine "
    "with GPU becomes ready it can take up to 15 minutes before it reports that GPU is "
    "allocatable' (the upper bound; we take the 13-90 s range's middle)",
    "amifrominstance": "pulumi-aws AmiFromInstance docs: a running source instance is stopped "
    "before the snapshots and started again; EC2 CreateImage docs: the AMI is usable when its "
    "snapshots complete",
    "tf-aws-instance": "terraform-provider-aws internal/service/ec2/ec2_instance.go: Create "
    "returns once the instance is 'running' (waitInstanceCreated)",
    "kubeadm": "kubeadm init/join reference (kubernetes.io): init pulls the control-plane "
    "images, writes static pods and waits for a healthy API server; join is TLS bootstrap "
    "and kubelet start",
    "kubeadm-healthy": "kubeadm's wait for the control plane: kubernetes/kubernetes#117984 "
    "('kubeadm: speedup init by 0s or 20s', merged 2023, in every kubeadm this program "
    "installs), champtar's logs of one host's repeated installs: '[apiclient] All control plane "
    "components are healthy after' 24.0-28.0 s before the change, 5.5-15.0 s with it, the whole "
    "install unit then 23-24 s",
    "kubelet-status": "kubelet configuration reference: nodeStatusUpdateFrequency default 10 s "
    "(Ready follows the CNI config at the next status update); flannel-io/flannel#1798 log: "
    "`kubectl apply -f` of the release manifest URL between prompts at 08:02:45 and 08:02:57 "
    "(an upper bound: typing included), its CNI plugin image pulled by 08:03:00",
    "pulumi-k8s-await": "pulumi-kubernetes await logic (provider/pkg/await): a DaemonSet is "
    "ready when its rollout reports every desired pod ready (0 desired before any GPU node "
    "joins); a Job when it completes",
}


def _d(seconds: float, source: str) -> Duration:
    return Duration(seconds, source)


# Resource kinds whose time does not depend on the image.
COMMON: dict[str, Duration] = {
    "component": _d(
        0.0, "pulumi pkg/resource/deploy/step.go CreateStep.Apply: no provider call unless Custom"
    ),
    "provider": _d(
        2.0,
        "assumption: plugin start + CheckConfig/Configure of a provider already on disk, ~2 s",
    ),
    "aws:ec2/vpc:Vpc": _d(4.0, "assumption: CreateVpc then wait 'available' (seconds)"),
    "aws:ec2/internetGateway:InternetGateway": _d(3.0, "assumption: create + attach, ~3 s"),
    "aws:ec2/subnet:Subnet": _d(3.0, "assumption: CreateSubnet then wait 'available'"),
    "aws:ec2/routeTable:RouteTable": _d(2.0, "assumption: one API call plus a route"),
    "aws:ec2/routeTableAssociation:RouteTableAssociation": _d(1.0, "assumption: one API call"),
    "aws:ec2/securityGroup:SecurityGroup": _d(3.0, "assumption: create + authorize rules"),
    "aws:ec2/keyPair:KeyPair": _d(1.0, "assumption: ImportKeyPair, one API call"),
    "aws:ec2/eip:Eip": _d(2.0, "assumption: AllocateAddress + associate"),
    "tls:index/privateKey:PrivateKey": _d(
        0.1, "terraform-provider-tls common_key.go: ed25519.GenerateKey, local, no API call"
    ),
    "aws:ec2/instance:Instance": _d(
        23.0, "brevdev: API 4.9 s + pending->running 17.8 s; tf-aws-instance: waits 'running'"
    ),
    "kubernetes:core/v1:Namespace": _d(1.0, "assumption: one API call"),
    "kubernetes:core/v1:ConfigMap": _d(1.0, "assumption: one API call"),
    "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding": _d(
        1.0, "assumption: one API call"
    ),
    "kubernetes:core/v1:ServiceAccount": _d(1.0, "assumption: one API call"),
    "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole": _d(1.0, "assumption: one API call"),
    "kubernetes:rbac.authorization.k8s.io/v1:Role": _d(1.0, "assumption: one API call"),
    "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding": _d(1.0, "assumption: one API call"),
    "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition": _d(
        2.0, "pulumi-k8s-await: the CRD's Established condition; assumption 2 s"
    ),
    "kubernetes:apps/v1:Deployment": _d(
        20.0, "pulumi-k8s-await: one replica Ready (NFD master image pulled, /healthz); ~20 s"
    ),
    "kubernetes:core/v1:Service": _d(
        1.0, "assumption: one API call (ClusterIP, no endpoints wait)"
    ),
    "aws:ec2/placementGroup:PlacementGroup": _d(
        2.0, "assumption: CreatePlacementGroup then wait 'available' (seconds)"
    ),
    "aws:ec2/networkInterface:NetworkInterface": _d(
        2.0, "assumption: CreateNetworkInterface, one API call"
    ),
    "kubernetes:apps/v1:DaemonSet": _d(
        3.0, "pulumi-k8s-await: 0 desired pods before any GPU node joins; assumption 3 s"
    ),
    # Control-plane host steps (the managed control plane boots from stock Ubuntu).
    "cp:wait-ready": _d(
        27.0, "assumption: cloud-init to 'done' ~27 s after SSH opened (its scripts' copy)"
    ),
    "cp:runtime": _d(45.0, "assumption: containerd from the Ubuntu archive + config, ~45 s"),
    "cp:kube-tools": _d(30.0, "assumption: kubelet/kubeadm/kubectl from pkgs.k8s.io, ~30 s"),
    "cp:init": _d(60.0, "kubeadm: image pull (~200 MB) + static pods healthy; assumption 60 s"),
    "cp:cni": _d(30.0, "assumption: CNI manifest applied and its pods Ready, ~30 s"),
    "cp:certificates": _d(
        3.0,
        "assumption: one SSH round trip and kubeadm certs check-expiration twice (local files); "
        "a first up renews nothing, restarts nothing",
    ),
    "cp:kubeconfig": _d(2.0, "assumption: one SSH round trip"),
    "cp:version-skew": _d(3.0, "assumption: one SSH round trip + kubectl version"),
    "cp:operator-kubeconfig": _d(
        2.0, "assumption: one SSH round trip (kubeadm kubeconfig user signs locally)"
    ),
    "cp:upgrade": _d(2.0, "roll: no cluster yet on a first up, the script checks and skips"),
    steps.IN_SERVICE.suffix: _d(
        1.0,
        "assumption: its hook, through the API: /readyz, the Node read, one PUT, the pool's slot "
        "Leases read (a few round trips to the API server, no SSH)",
    ),
    steps.JOIN_TOKEN.suffix: _d(
        1.0, "assumption: two API calls from its hook (the Node, the Secret)"
    ),
    # Every created machine's first contact (the step table's FIRST_CONTACT rows), any role.
    steps.HOST_KEY_ROTATION.suffix: _d(
        4.0,
        "brevdev: boot->SSH 3.1 s after 'running' (a machine's first dial is this step's); "
        "LIMITS ssh-handshake 0.5 s; assumption: the local script's start and ssh-keygen on "
        "the host, ~0.4 s",
    ),
    steps.HOST_KEY_SWITCH.suffix: _d(
        2.5,
        "LIMITS ssh-handshake 0.5 s, twice (the switch, then the dial that pins the new key "
        "alone); assumption: sshd -t, two renames and a reload on the host, ~1.5 s",
    ),
    steps.SCRIPTS.suffix: _d(
        2.5,
        "LIMITS ssh-handshake 0.5 s (its own connection, after the rotation's); assumption: "
        "SFTP of ~100 KB of scripts, ~2 s",
    ),
    "kubernetes:core/v1:Secret": _d(1.0, "assumption: one API call"),
    # A record the engine keeps (`<cluster>-ca-cert-hash`, `<pool>-join-token-seed`; a node's
    # `-join-token` has its own row, its hook's API calls).
    "pulumi:index:Stash": _d(
        0.0,
        "pulumi pkg/resource/deploy/builtins.go builtinProvider.Create, stashType: output = "
        "input and a new UUID, in the engine's own process (no plugin, no network)",
    ),
    "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy": _d(
        1.0, "assumption: one API call (the node guard's policy)"
    ),
    "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding": _d(
        1.0, "assumption: one API call (the node guard's binding)"
    ),
    # Building a baked control-plane image (ControlPlaneImage): the control plane's own install
    # on a builder of its instance type, kubeadm's and flannel's images pulled, the snapshot.
    "cp-image:wait-ready": _d(
        27.0, "assumption: cloud-init to 'done' ~27 s after SSH opened (its scripts' copy)"
    ),
    "cp-image:runtime": _d(45.0, "as cp:runtime (the same step, stock Ubuntu)"),
    "cp-image:kube-tools": _d(30.0, "as cp:kube-tools (the same step, stock Ubuntu)"),
    "cp-image:pull-images": _d(
        45.0,
        "assumption: kubeadm's seven images (~200 MB, the pull cp:init spends most of its 60 s "
        "on) + flannel's two (~40 MB), ~45 s",
    ),
    "cp-image:prepare": _d(10.0, "assumption: cloud-init clean, stop services, sync, ~10 s"),
    "cp-image:power-off": _d(2.0, "assumption: one SSH round trip (systemd-run schedules it)"),
    # Building a baked image (GpuImage): the stock install on a builder, then the snapshot.
    "image:pull-images": _d(
        40.0, "assumption: device plugin + CUDA sample images (~0.2 GB) pulled, ~40 s"
    ),
    "image:prepare": _d(10.0, "assumption: cloud-init clean, stop services, sync, ~10 s"),
    "aws:ec2/amiFromInstance:AmiFromInstance": _d(
        300.0,
        "amifrominstance; AWS Toolkit guide 'It may take a few minutes for the AMI to be "
        "created'; assumption 300 s for a 50 GiB root snapshot",
    ),
    "image:power-off": _d(2.0, "assumption: one SSH round trip (systemd-run schedules it)"),
    "other-command": _d(5.0, "assumption: a short host command"),
    "other": _d(5.0, "assumption: a resource type this table does not list, ~5 s"),
}

# GPU node host steps, by image.
STOCK: dict[str, Duration] = {
    steps.WAIT_READY.suffix: _d(
        27.0, "assumption: cloud-init to 'done' ~27 s after SSH opened (its scripts' copy)"
    ),
    steps.NOUVEAU.suffix: _d(
        20.0, "assumption: blocklist + update-initramfs, module unloaded, ~20 s"
    ),
    steps.DRIVER.suffix: _d(
        240.0,
        "issue-figures: 'several minutes' (DKMS alone 80-150 s); Ubuntu's signed prebuilt "
        "modules skip DKMS but download ~0.5 GB; assumption 240 s",
    ),
    steps.RUNTIME.suffix: _d(
        45.0, "assumption: containerd + NVIDIA Container Toolkit apt install, ~45 s"
    ),
    steps.KUBE_TOOLS.suffix: _d(
        30.0, "assumption: kubelet/kubeadm/kubectl from pkgs.k8s.io, ~30 s"
    ),
    steps.JOIN.suffix: _d(
        95.0,
        "kubeadm: TLS bootstrap + kubelet start (assumption 20 s); the CNI pod pulled and "
        "started, Node Ready (assumption 30 s); issue-figures: device plugin start to "
        "allocatable 13-90 s, its image pulled on the node (the middle, 45 s); autoscaler",
    ),
    steps.VALIDATION_JOB.suffix: _d(
        30.0, "assumption: CUDA sample image (~100 MB) pulled + a vector add, ~30 s"
    ),
    steps.EFA.suffix: _d(
        180.0,
        "assumption: EFA installer download (~100 MB) + its packages + DKMS build of the efa "
        "driver, ~3 min",
    ),
}
BAKED: dict[str, Duration] = {
    steps.WAIT_READY.suffix: STOCK[steps.WAIT_READY.suffix],
    steps.NOUVEAU.suffix: _d(
        3.0, "baked: blocklist already in the image; the script checks and skips"
    ),
    steps.DRIVER.suffix: _d(
        5.0, "baked: packages held at the pinned version; nvidia-smi check only"
    ),
    steps.RUNTIME.suffix: _d(3.0, "baked: config hash unchanged, no restart; check only"),
    steps.KUBE_TOOLS.suffix: _d(3.0, "baked: versions match, nothing installed; check only"),
    steps.JOIN.suffix: _d(
        63.0,
        "kubeadm join (assumption 20 s), Node Ready (assumption 30 s); issue-figures: 13 s to "
        "allocatable, the low end: the plugin image is in the image (pull-images.sh)",
    ),
    steps.VALIDATION_JOB.suffix: _d(
        10.0, "assumption: the CUDA sample image is in the image; schedule + vector add, ~10 s"
    ),
    # The EFA software is not in a baked image (its builder has no EFA interface to prove).
    steps.EFA.suffix: STOCK[steps.EFA.suffix],
}

# Managed control-plane steps booted from a baked ControlPlaneImage (with --baked).
CONTROL_PLANE_BAKED: dict[str, Duration] = {
    "cp:runtime": _d(3.0, "baked: containerd held at the pin, config hash unchanged; check only"),
    "cp:kube-tools": _d(3.0, "baked: versions match, nothing installed; check only"),
    "cp:init": _d(
        30.0,
        "kubeadm-healthy: healthy after 5.5-15 s, the whole install 23-24 s (kubeadm with "
        "#117984); no image pull; plus this step's kubelet serving CSR approval (assumption ~6 s)",
    ),
    "cp:cni": _d(
        15.0,
        "kubelet-status: manifest downloaded (not in the image) and applied (assumption ~2 s), "
        "flannel's containers start from images in place (assumption ~3 s), Node Ready at the "
        "next status update (<= 10 s)",
    ),
}
# A baked GPU node of a stack with a managed control plane: flannel's images are in its image.
BAKED_JOIN_WITH_CNI = _d(
    48.0,
    "kubeadm join (assumption 20 s); kubelet-status: flannel's pod starts from images in place "
    "(assumption ~5 s), Node Ready at the next status update (<= 10 s); issue-figures: 13 s to "
    "allocatable",
)

# ---------------------------------------------------------------- the limits a fleet meets


@dataclass(frozen=True)
class Figure:
    """A rate or size the model's limits use, with its unit and source."""

    value: float
    unit: str
    source: str


LIMITS: dict[str, Figure] = {
    "evaluation": Figure(
        0.00747,
        "s per resource",
        "python -m tools.benchmark --nodes 1 64 256 1000 (2026-12-04, a shared 2-core machine): "
        "the dev program with 1,000 g5.xlarge nodes registered 14,050 resources on 105.0 s of "
        "CPU, 7.47 ms each (8.10 at 256 nodes, 9.60 at 64); 297 s of wall time on the busy "
        "machine (21.1 ms each)",
    ),
    "ssh-handshake": Figure(
        0.5,
        "s",
        "cpaelzer.github.io 'SSH login got slower, be happy!' (2023): `ssh localhost true` "
        "400 ms mean on Ubuntu 23.04 (sntrup761x25519 key exchange, 24.04's default too), 251 "
        "ms on 22.04; assumption: +4 round trips to the region, 0.5 s unauthenticated",
    ),
    "cloud-request": Figure(
        0.52,
        "s per send",
        "pulumi.com/blog/journaling (2025-12, Europe to Pulumi Cloud in us-west-2): 3,222 "
        "resources created in 58m26s with two serialized checkpoint PATCHes per step, 2m50s "
        "with journaling: (3506 - 170) s / 6,444 checkpoints",
    ),
    "journal-batch-entries": Figure(
        100,
        "entries",
        "pulumi pkg/backend/httpstate/journal/snapshot.go NewJournaler: maxBatchSize 100 "
        "(PULUMI_JOURNALING_BATCH_SIZE), batches sent one at a time (sendBatches)",
    ),
    "journal-batch-seconds": Figure(
        0.05,
        "s",
        "pulumi journal/snapshot.go NewJournaler: period 50 ms (PULUMI_JOURNALING_BATCH_PERIOD)",
    ),
    "snapshot-request": Figure(
        0.3,
        "s per write",
        "pulumi pkg/backend/diy/state.go saveCheckpoint: a bucket listing (stackPath), a copy to "
        ".bak (backupTarget), the write (WriteAll); assumption 0.1 s each; pulumi/pulumi#10960: "
        "1-3 s per backup and save on GCS",
    ),
    "upload": Figure(
        1.2e6,
        "bytes/s",
        "pulumi/pulumi#14967: a 16 MB state of ~130 resources took 30 min to refresh with "
        "checkpoints, 29 s without: (1800 - 29) s / 130 writes = 13.6 s per 16 MB; #6074: the "
        "S3 backend fills a 5-6 Mbit/s uplink",
    ),
    "run-instances-bucket": Figure(
        1000,
        "instances",
        "docs.aws.amazon.com/ec2/latest/devguide/ec2-api-throttling.html, resource token "
        "limits: RunInstances bucket 1,000 instances (assumption: full when the up starts)",
    ),
    "run-instances-refill": Figure(
        2, "instances/s", "ec2-api-throttling.html, resource token limits: RunInstances refill 2/s"
    ),
}


# The install steps, whose time depends on the image (the step table's order).
INSTALL_STEPS = tuple(step.suffix for step in steps.INSTALL_STEPS)
# Node steps whose time depends on the image but that are not install steps.
CACHED_IMAGE_STEPS = (steps.JOIN.suffix, steps.VALIDATION_JOB.suffix)


def image_step_durations(baked: bool, cni_in_image: bool = False) -> dict[str, Duration]:
    """The steps whose time depends on the image: GPU node install steps by image, plus the
    builder's (it always installs from stock); baked, also the managed control plane's, and the
    node's Node Ready when its image holds the CNI's images (`cni_in_image`: the stack's control
    plane is managed)."""
    builder = {f"image:{k}": STOCK[k] for k in INSTALL_STEPS}
    table = {**(BAKED if baked else STOCK), **builder}
    if baked:
        table.update(CONTROL_PLANE_BAKED)
        if cni_in_image:
            table[steps.JOIN.suffix] = BAKED_JOIN_WITH_CNI
    return table


def all_rows(baked: bool, cni_in_image: bool = False) -> list[tuple[str, Duration]]:
    """(kind, duration) rows of the table in use, for printing with the timeline (a row of the
    image-dependent table replaces the COMMON row of the same kind)."""
    table = image_step_durations(baked, cni_in_image)
    return [
        *((kind, duration) for kind, duration in COMMON.items() if kind not in table),
        *table.items(),
    ]

"""The Kubernetes objects of the device plugin and the GPU validation, as plain data.

Pure functions, no Pulumi: the components pass these dicts to typed pulumi-kubernetes resources
(`k8s.apps.v1.DaemonSet(name, metadata=..., spec=...)`), and tests validate the very same data
against the Kubernetes JSON schemas. Field names are the Kubernetes API's (camelCase). The device
plugin follows NVIDIA's static manifest, plus its own namespace, the plugin config from a
ConfigMap, a node selector on the GPU label set at join and tolerations for every pool's taints.

Why: docs/decisions/012-manifests-follow-upstream-with-named-changes.md,
docs/decisions/014-gpu-validation-is-a-capacity-wait-and-an-awaited-job.md
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from components.labels import GPU_PRESENT_LABEL, UNPROVEN_TAINT_EFFECT, UNPROVEN_TAINT_KEY
from components.settings import DevicePlugin, Taint

DEVICE_PLUGIN_NAMESPACE = "nvidia-device-plugin"
DEVICE_PLUGIN_NAME = "nvidia-device-plugin"  # the DaemonSet: `kubectl -n ... logs ds/<this>`
DEVICE_PLUGIN_CONFIG_MAP = "nvidia-device-plugin-config"
DEVICE_PLUGIN_CONTAINER = "nvidia-device-plugin-ctr"
DEVICE_PLUGIN_IMAGE_REPOSITORY = "nvcr.io/nvidia/k8s-device-plugin"
DEVICE_PLUGINS_HOST_PATH = "/var/lib/kubelet/device-plugins"
CONFIG_KEY = "config.yaml"
CONFIG_MOUNT_PATH = "/etc/nvidia-device-plugin"
VALIDATION_NAMESPACE = "gpu-validation"
VALIDATION_CONTAINER = "cuda-validation"
# The cuda-sample images (NVIDIA/k8s-samples) install the sample as /cuda-samples/<name> and
# point their ENTRYPOINT at this symlink; the vectoradd tag runs vectorAdd.
CUDA_SAMPLE_BINARY = "/cuda-samples/sample"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-cluster"}
# How the plugin passes a container's GPUs to the runtime (k8s-device-plugin README:
# envvar | volume-mounts | cdi-annotations | cdi-cri). Not `envvar`: the runtime would have to
# trust NVIDIA_VISIBLE_DEVICES, which any pod can set.
DEVICE_LIST_STRATEGY = "volume-mounts"
# Upstream's chart adds CAP_SYS_ADMIN to the plugin when the strategy includes volume-mounts
# (deployments/helm/nvidia-device-plugin/templates/_helpers.tpl, requiresCapSysAdmin;
# CHANGELOG v0.16.2 "Add CAP_SYS_ADMIN if volume-mounts list strategy is included", #856).
DEVICE_PLUGIN_SECURITY_CONTEXT = {"capabilities": {"add": ["SYS_ADMIN"]}}
ISOLATION_CONTAINER = "gpu-isolation"
# Changing the plugin config rolls the DaemonSet (a ConfigMap edit alone restarts nothing).
CONFIG_HASH_ANNOTATION = "gpu-cluster.io/config-sha256"
# Set on the GPU Jobs' pod templates, while a capacity step of their own ran before them, to
# that step's id. Retired: the Jobs follow their machine and cluster (`replacement_trigger`,
# `replace_with`) instead, and ignore it, so the Jobs of running stacks keep the stored value
# and are not replaced (run again on nodes in service) by the upgrade.
CAPACITY_CHECK_ANNOTATION = "gpu-cluster.io/capacity-check"
RETIRED_TEMPLATE_ANNOTATIONS = (CAPACITY_CHECK_ANNOTATION,)
# The digest of the node's disruptive steps (components/hosts/rolling.py): a new one re-runs
# the Job.
NODE_CHANGE_ANNOTATION = "gpu-cluster.io/node-change"
# The validation Job re-validates a node that a roll keeps cordoned until it passes. The
# scheduler places a pod on an unschedulable Node only when the pod tolerates this taint
# (kubernetes `pkg/scheduler/framework/plugins/nodeunschedulable`: `Filter` checks
# `node.Spec.Unschedulable` against a toleration of node.kubernetes.io/unschedulable:NoSchedule).
UNSCHEDULABLE_TOLERATION = {
    "key": "node.kubernetes.io/unschedulable",
    "operator": "Exists",
    "effect": "NoSchedule",
}
# pulumi-kubernetes: a Job that failed in an earlier `up` is replaced on the next one (rather than
# awaited forever), so fixing the node and running `pulumi up` validates it again.
REPLACE_UNREADY_ANNOTATION = "pulumi.com/replaceUnready"
# pulumi-kubernetes deletes with foreground propagation unless this annotation says otherwise
# (provider/pkg/metadata/overrides.go `DeletionPropagation`; await.go `Deletion` then waits, 10
# minutes by default, for the object to be gone). A DaemonSet's pod on a dead Node never goes
# (no kubelet confirms it) until the Node is deleted, so a foreground delete of the DaemonSet
# would stop a destroy for those 10 minutes and fail it; in the background the DaemonSet goes at
# once and the pod garbage collector removes its pods once their Node is gone.
BACKGROUND_DELETION = {"pulumi.com/deletionPropagationPolicy": "background"}
# The same for a namespace holding those pods: it is not gone until they are, so the provider
# is told not to wait for it (metadata/overrides.go `DeletedCondition`: `pulumi.com/skipAwait`
# holds on delete for a Namespace, `allowsSkipAwaitWithDelete`). The namespace controller
# finishes it once the Node's deletion lets its pods go.
NO_DELETE_WAIT = {"pulumi.com/skipAwait": "true"}
MAX_NAME_LENGTH = 63  # a Job's name becomes its pods' job-name label value
# What the nvidia container runtime mounts into the validation pod: `compute` for the CUDA
# sample, `utility` for nvidia-smi and NVML. Set on the container so the check does not depend on
# the image's own ENV (NVIDIA's CUDA base images set it; another validation.image may not, and
# unset means `utility` only with older toolkits).
VALIDATION_DRIVER_CAPABILITIES = "compute,utility"


def namespace(name: str, pod_security: str) -> dict[str, Any]:
    """Metadata of a namespace with its Pod Security Admission level enforced explicitly, so a
    cluster-wide default cannot reject the pods (the plugin needs a hostPath: `privileged`)."""
    return {
        "name": name,
        "labels": {
            **MANAGED_BY,
            "pod-security.kubernetes.io/enforce": pod_security,
        },
        "annotations": NO_DELETE_WAIT,
    }


def device_plugin_namespace() -> dict[str, Any]:
    return namespace(DEVICE_PLUGIN_NAMESPACE, "privileged")


def validation_namespace() -> dict[str, Any]:
    return namespace(VALIDATION_NAMESPACE, "baseline")


# ---------------------------------------------------------------- tolerations


def toleration(taint: Taint) -> dict[str, str]:
    """Tolerate `taint` whatever its value (a value change then needs no new manifest)."""
    return {"key": taint.key, "operator": "Exists", "effect": taint.effect}


# The extended resource the device plugin advertises and a GPU Job requests; the GPU taint of
# the default node pools uses the same name as its key.
GPU_EXTENDED_RESOURCE = "nvidia.com/gpu"
GPU_TOLERATION = {"key": GPU_EXTENDED_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}


# Tolerates every taint (kubeadm's kube-proxy DaemonSet does the same): for the device plugin when
# the pools' taints are not known, so that no pool taint can keep it off a GPU node.
TOLERATE_ALL = {"operator": "Exists"}


# The proof taint a new GPU node registers with (components/kube/node_hooks.py): the per-node
# system DaemonSets and the node's own checks tolerate it; no tenant does.
UNPROVEN_TOLERATION = {
    "key": UNPROVEN_TAINT_KEY,
    "operator": "Exists",
    "effect": UNPROVEN_TAINT_EFFECT,
}
# A Job keeps the tolerations it ran with: they only place a run that already happened, and a
# Job that runs again (a new machine, a roll, a failed run) is created with the program's
# (decision 030). So a new toleration (a new pool taint, the proof taint) replaces no Job of a
# node in service.
JOB_TOLERATIONS = "spec.template.spec.tolerations"
# What a GPU Job ignores on a later `up`: its retired annotations and its tolerations.
JOB_IGNORED_CHANGES = [
    *(f'spec.template.metadata.annotations["{key}"]' for key in RETIRED_TEMPLATE_ANNOTATIONS),
    JOB_TOLERATIONS,
]


def node_agent_tolerations(taints: Iterable[Taint] | None) -> list[dict[str, str]]:
    """What runs on a GPU node before it is proven (the device plugin, GFD, the DCGM exporter,
    the EFA plugin, the node's validation and NCCL Jobs): `tolerations` and the proof taint."""
    found = tolerations(taints)
    return found if TOLERATE_ALL in found else [*found, UNPROVEN_TOLERATION]


def tolerations(taints: Iterable[Taint] | None) -> list[dict[str, str]]:
    """The GPU taint's toleration, then one per distinct taint key/effect, in a stable order;
    with `taints=None`, the GPU toleration and TOLERATE_ALL."""
    if taints is None:
        return [GPU_TOLERATION, TOLERATE_ALL]
    found = [GPU_TOLERATION]
    for taint in taints:
        item = toleration(taint)
        if item not in found:
            found.append(item)
    return [found[0], *sorted(found[1:], key=lambda t: (t["key"], t["effect"]))]


def tolerates(tolerations_: Iterable[Mapping[str, str]], taint: Taint) -> bool:
    """Kubernetes' matching rule: does one of `tolerations_` tolerate `taint`?"""
    for item in tolerations_:
        if item.get("effect") and item["effect"] != taint.effect:
            continue
        operator = item.get("operator", "Equal")
        if operator == "Exists" and item.get("key") in (None, "", taint.key):
            return True
        if (
            operator == "Equal"
            and item.get("key") == taint.key
            and item.get("value", "") == taint.value
        ):
            return True
    return False


# ---------------------------------------------------------------- device plugin


def device_plugin_config(settings: DevicePlugin) -> str:
    """The plugin's config file (upstream format `version: v1`), as stable YAML text.

    GPUs are handed to containers as volume mounts (`deviceListStrategy: volume-mounts`,
    api/config/v1 flags.go), which the host's toolkit accepts while it ignores
    NVIDIA_VISIBLE_DEVICES from unprivileged containers (install-runtime.sh): a pod that
    requests no GPU sees none, whatever its environment says.

    With time slicing, two switches are written out although they are upstream's defaults
    (api/config/v1 ReplicatedResources: plain bools), because the checks depend on them:
    `renameByDefault: false` keeps the shares named nvidia.com/gpu (true would advertise
    nvidia.com/gpu.shared, and the capacity wait would find no nvidia.com/gpu), and
    `failRequestsGreaterThanOne: false` lets one container take more than one share (true makes
    the plugin's Allocate reject it, and the validation pod, which takes every share of the node,
    would never start)."""
    config: dict[str, Any] = {
        "version": "v1",
        "flags": {
            "migStrategy": settings.mig_strategy,
            "plugin": {"deviceListStrategy": [DEVICE_LIST_STRATEGY]},
        },
    }
    replicas = settings.time_slicing.replicas
    if replicas > 1:
        config["sharing"] = {
            "timeSlicing": {
                "renameByDefault": False,
                "failRequestsGreaterThanOne": False,
                "resources": [{"name": GPU_EXTENDED_RESOURCE, "replicas": replicas}],
            }
        }
    return yaml.safe_dump(config, sort_keys=True)


def device_plugin_config_map_data(settings: DevicePlugin) -> dict[str, str]:
    return {CONFIG_KEY: device_plugin_config(settings)}


def device_plugin_image(settings: DevicePlugin) -> str:
    """By digest, with the release tag kept in the reference: it runs with SYS_ADMIN."""
    return f"{DEVICE_PLUGIN_IMAGE_REPOSITORY}:{settings.version}@{settings.digest}"


def device_plugin_labels() -> dict[str, str]:
    return {"app.kubernetes.io/name": DEVICE_PLUGIN_NAME}


def daemon_set_spec(
    selector: dict[str, str],
    pod_spec: dict[str, Any],
    *,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The spec of one of our DaemonSets: pods labelled `selector` (and MANAGED_BY), with
    `annotations` on the pod template (a config hash restarts them), replaced one node at a time."""
    metadata: dict[str, Any] = {"labels": {**selector, **MANAGED_BY}}
    if annotations:
        metadata["annotations"] = annotations
    return {
        "selector": {"matchLabels": selector},
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
        "template": {"metadata": metadata, "spec": pod_spec},
    }


def device_plugin_daemon_set_spec(
    settings: DevicePlugin, *, pool_taints: Iterable[Taint] | None = None
) -> dict[str, Any]:
    """The DaemonSet spec: one plugin pod on each node labelled GPU_PRESENT_LABEL=true, tolerating
    the GPU taint and each of `pool_taints` (every taint, when they are not given)."""
    config_hash = hashlib.sha256(device_plugin_config(settings).encode()).hexdigest()
    selector = device_plugin_labels()
    return daemon_set_spec(
        selector,
        {
            "priorityClassName": "system-node-critical",
            "nodeSelector": {GPU_PRESENT_LABEL: "true"},
            "tolerations": node_agent_tolerations(pool_taints),
            "containers": [
                {
                    "name": DEVICE_PLUGIN_CONTAINER,
                    "image": device_plugin_image(settings),
                    "args": [f"--config-file={CONFIG_MOUNT_PATH}/{CONFIG_KEY}"],
                    "env": [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}],
                    "securityContext": DEVICE_PLUGIN_SECURITY_CONTEXT,
                    "volumeMounts": [
                        {
                            "name": "kubelet-device-plugins-dir",
                            "mountPath": DEVICE_PLUGINS_HOST_PATH,
                        },
                        {"name": "config", "mountPath": CONFIG_MOUNT_PATH, "readOnly": True},
                    ],
                }
            ],
            "volumes": [
                {
                    "name": "kubelet-device-plugins-dir",
                    "hostPath": {"path": DEVICE_PLUGINS_HOST_PATH, "type": "Directory"},
                },
                {"name": "config", "configMap": {"name": DEVICE_PLUGIN_CONFIG_MAP}},
            ],
        },
        annotations={CONFIG_HASH_ANNOTATION: config_hash},
    )


# ---------------------------------------------------------------- validation Job


def fitted_name(name: str, limit: int = MAX_NAME_LENGTH, hashed: str | None = None) -> str:
    """`name`, or when longer than `limit` its head and an 8-character hash of `hashed` (default:
    the name itself), so long names stay distinct and fit a label value or DNS label."""
    if len(name) <= limit:
        return name
    digest = hashlib.sha256((hashed if hashed is not None else name).encode()).hexdigest()[:8]
    head = re.sub(r"-+$", "", name[: limit - len(digest) - 1])
    return f"{head}-{digest}"


def validation_job_name(node_name: str) -> str:
    """`<node>-validation`, shortened with a hash suffix when longer than a label value allows."""
    return fitted_name(f"{node_name}-validation", hashed=node_name)


def validation_command(gpu_count: int) -> str:
    """POSIX sh run in the validation pod: `nvidia-smi -L` must list exactly `gpu_count` GPUs,
    then the CUDA sample runs once on each GPU (a bad GPU fails the Job, not just GPU 0)."""
    return (
        "set -eu\n"
        'if ! gpus="$(nvidia-smi -L)"; then\n'
        '  echo "nvidia-smi -L failed: the driver or the nvidia container runtime" >&2\n'
        "  exit 1\n"
        "fi\n"
        "printf '%s\\n' \"$gpus\"\n"
        "found=\"$(printf '%s\\n' \"$gpus\" | awk '/^GPU / { n++ } END { print n + 0 }')\"\n"
        f'if [ "$found" -ne {gpu_count} ]; then\n'
        f'  echo "expected {gpu_count} GPU(s), nvidia-smi -L lists $found" >&2\n'
        "  exit 1\n"
        "fi\n"
        "i=0\n"
        f'while [ "$i" -lt {gpu_count} ]; do\n'
        '  echo "CUDA sample on GPU $i"\n'
        f'  CUDA_VISIBLE_DEVICES="$i" {CUDA_SAMPLE_BINARY}\n'
        "  i=$((i + 1))\n"
        "done\n"
        f'echo "validated {gpu_count} GPU(s)"\n'
    )


def validation_job_metadata(node_name: str) -> dict[str, Any]:
    return {
        "name": validation_job_name(node_name),
        "namespace": VALIDATION_NAMESPACE,
        "labels": {**MANAGED_BY, "gpu-cluster.io/node": node_name},
        "annotations": {REPLACE_UNREADY_ANNOTATION: "true"},
    }


def validation_job_spec(
    *,
    node_name: str,
    gpu_count: int,
    image: str,
    timeout_seconds: int,
    taints: Iterable[Taint] = (),
    template_annotations: Mapping[str, Any] | None = None,
    shares_per_gpu: int = 1,
) -> dict[str, Any]:
    """A Job pinned to `node_name` (node affinity on the Node's name, through the scheduler, so
    the pod waits for the GPUs instead of being rejected by the kubelet) that requests every
    nvidia.com/gpu the node advertises, `gpu_count` x `shares_per_gpu` (time-slicing replicas),
    and runs `validation_command`, which checks the `gpu_count` physical GPUs.

    Why every share and not `gpu_count` of them: the plugin spreads a multi-share request over
    distinct GPUs only as a preference (GetPreferredAllocation), so N shares can land on fewer than
    N GPUs and the count check would fail a healthy node; all shares of the node cover every GPU
    by construction (the runtime sees each GPU's UUID, repeated, and exposes it once). That needs
    `failRequestsGreaterThanOne: false`, which `device_plugin_config` writes.

    One retry, then `up` fails; the whole Job is bounded by `timeout_seconds`
    (activeDeadlineSeconds, image pull included)."""
    gpus = str(gpu_count * shares_per_gpu)
    return {
        "backoffLimit": 1,
        "activeDeadlineSeconds": timeout_seconds,
        "template": {
            "metadata": {
                "labels": {**MANAGED_BY, "gpu-cluster.io/node": node_name},
                "annotations": dict(template_annotations or {}),
            },
            "spec": {
                "restartPolicy": "Never",
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchFields": [
                                        {
                                            "key": "metadata.name",
                                            "operator": "In",
                                            "values": [node_name],
                                        }
                                    ]
                                }
                            ]
                        }
                    }
                },
                "tolerations": [*node_agent_tolerations(taints), UNSCHEDULABLE_TOLERATION],
                # First, in the same pod on the same node: a container without a GPU request
                # sees no GPU although it asks for all of them by environment variable.
                "initContainers": [isolation_container(image)],
                "containers": [
                    {
                        "name": VALIDATION_CONTAINER,
                        "image": image,
                        "command": ["sh", "-c", validation_command(gpu_count)],
                        "env": [
                            {
                                "name": "NVIDIA_DRIVER_CAPABILITIES",
                                "value": VALIDATION_DRIVER_CAPABILITIES,
                            }
                        ],
                        "resources": {
                            "limits": {GPU_EXTENDED_RESOURCE: gpus},
                            "requests": {GPU_EXTENDED_RESOURCE: gpus},
                        },
                        "securityContext": {
                            "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]},
                        },
                    }
                ],
            },
        },
    }


# ---------------------------------------------------------------- isolation check


def isolation_command() -> str:
    """POSIX sh run in a pod that requested no GPU but sets NVIDIA_VISIBLE_DEVICES=all: it must
    see no GPU device node and no GPU in `nvidia-smi -L` (with a device injected, the toolkit
    also mounts nvidia-smi; without one there is none)."""
    return (
        "set -eu\n"
        'nodes="$(ls /dev/nvidia[0-9]* 2>/dev/null || :)"\n'
        'listed=""\n'
        "if command -v nvidia-smi >/dev/null 2>&1; then\n"
        "  listed=\"$(nvidia-smi -L 2>/dev/null | grep '^GPU ' || :)\"\n"
        "fi\n"
        'if [ -n "$nodes$listed" ]; then\n'
        '  echo "a pod that requested no GPU sees GPUs'
        ' (NVIDIA_VISIBLE_DEVICES=all honoured):" >&2\n'
        '  printf \'%s\\n\' "$nodes" "$listed" >&2\n'
        '  echo "the toolkit must not accept NVIDIA_VISIBLE_DEVICES from unprivileged pods'
        ' (/etc/nvidia-container-runtime/config.toml, set by the runtime step)" >&2\n'
        "  exit 1\n"
        "fi\n"
        'echo "no GPU visible to a pod that requested none"\n'
    )


def isolation_container(image: str) -> dict[str, Any]:
    """A container that requests no nvidia.com/gpu and asks for every GPU by environment
    variable, as any CUDA image does; it must see none (`isolation_command`)."""
    return {
        "name": ISOLATION_CONTAINER,
        "image": image,
        "command": ["sh", "-c", isolation_command()],
        "env": [
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": VALIDATION_DRIVER_CAPABILITIES},
        ],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }

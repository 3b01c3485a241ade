"""What a Kubernetes resource would run, found by its shape, and what may run with the host.

Pod specs are found wherever a resource holds one (a mapping with a `containers` list): a
DaemonSet, a DaemonSetPatch, a ReplicationController, a PodTemplate, a CronJob, a custom
resource that embeds a pod template; a new type is checked without being listed. The node
agents that need the host are recognised by their namespace, their exact name and the
repository of every image they run, never by a resource name a stack chooses. A resource
whose content the pack cannot see (a helm v3 Release, rendered inside the provider) is denied.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from gpu_cluster_policies.resources import Config, Resource, get, items, label, walk

DAEMON_SET = "kubernetes:apps/v1:DaemonSet"
NAMESPACE = "kubernetes:core/v1:Namespace"
NAMESPACE_PATCH = "kubernetes:core/v1:NamespacePatch"
# pulumi-kubernetes `helm.v3.Release` installs a chart with Helm inside the provider: what it
# creates is never registered as resources, so no policy sees it (`helm.v4.Chart`, kustomize and
# yaml v2 render their objects as child resources, which the pack checks one by one).
OPAQUE_TYPES = {
    "kubernetes:helm.sh/v3:Release": (
        "a helm v3 Release installs its chart inside the provider: the pack never sees what "
        "it creates",
        "use kubernetes.helm.v4.Chart (its objects are resources the pack checks) or typed "
        "resources",
    ),
}
# The device plugin's namespace holds the node agents that need the host (Pod Security
# `privileged`, components/kube/manifests.py); the system DaemonSets, as the stacks register
# them: namespace, metadata.name, the repositories their images come from.
DEVICE_PLUGIN_NAMESPACE = "nvidia-device-plugin"
SYSTEM_WORKLOADS: tuple[dict[str, Any], ...] = (
    {
        "namespace": DEVICE_PLUGIN_NAMESPACE,
        "name": "nvidia-device-plugin",
        "images": ["nvcr.io/nvidia/k8s-device-plugin"],
    },
    {
        "namespace": DEVICE_PLUGIN_NAMESPACE,
        "name": "gpu-feature-discovery",
        "images": ["nvcr.io/nvidia/k8s-device-plugin"],
    },
    {
        "namespace": DEVICE_PLUGIN_NAMESPACE,
        "name": "dcgm-exporter",
        "images": ["nvcr.io/nvidia/k8s/dcgm-exporter"],
    },
    {
        "namespace": DEVICE_PLUGIN_NAMESPACE,
        "name": "aws-efa-k8s-device-plugin",
        "images": ["public.ecr.aws/eks/aws-efa-k8s-device-plugin"],
    },
    {
        "namespace": DEVICE_PLUGIN_NAMESPACE,
        "name": "aws-node-termination-handler",
        "images": ["public.ecr.aws/aws-ec2/aws-node-termination-handler"],
    },
)
PRIVILEGED_NAMESPACES = (DEVICE_PLUGIN_NAMESPACE,)
ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"


def pod_specs(resource: Resource) -> list[tuple[str, Mapping[str, Any]]]:
    """(path, pod spec) of every pod spec a Kubernetes resource holds: each mapping with a list
    of `containers` (a pod spec's own field, in a Pod, a template, a patch or a custom
    resource), outermost first."""
    if not resource.resource_type.startswith("kubernetes:"):
        return []
    found: list[tuple[str, Mapping[str, Any]]] = []
    for path, value in walk(resource.props):
        if not isinstance(value, Mapping) or any(path.startswith(f"{p}.") for p, _ in found):
            continue
        containers = value.get("containers") if "containers" in value else None
        if isinstance(containers, Sequence) and not isinstance(containers, str):
            found.append((path, value))
    return found


def containers(pod_spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for index, container in enumerate(items(pod_spec.get(kind))):
            if isinstance(container, Mapping):
                yield f"{kind}[{index}] ({container.get('name', 'unnamed')})", container


def image_repository(image: Any) -> str:
    """`registry/path/name` of an image reference, without its tag and digest."""
    text = str(image).split("@", 1)[0]
    head, _, last = text.rpartition("/")
    name = last.split(":", 1)[0]
    return f"{head}/{name}" if head else name


def is_system_workload(resource: Resource, config: Config) -> bool:
    """A DaemonSet whose namespace and name are one of `systemWorkloads`, every image of it
    from that entry's repositories. A patch, another kind or another image is not one."""
    if resource.resource_type != DAEMON_SET:
        return False
    namespace = get(resource.props, "metadata", "namespace")
    name = get(resource.props, "metadata", "name")
    specs = pod_specs(resource)
    images = [c.get("image") for _, pod in specs for _, c in containers(pod)]
    for entry in config.get("systemWorkloads") or SYSTEM_WORKLOADS:
        if (entry.get("namespace"), entry.get("name")) != (namespace, name):
            continue
        allowed = set(entry.get("images") or [])
        return bool(images) and all(image_repository(i) in allowed for i in images)
    return False


def check_inspectable(resource: Resource, config: Config) -> list[str]:
    """A resource whose content the pack cannot see is denied."""
    if resource.resource_type not in OPAQUE_TYPES:
        return []
    why, fix = OPAQUE_TYPES[resource.resource_type]
    return [f"{label(resource)}: {why}. Fix: {fix}."]


def check_privileged_namespaces(resource: Resource, config: Config) -> list[str]:
    """No namespace enforces Pod Security `privileged` (which admits any pod: host namespaces,
    host paths, privileged containers) but the node agents' own."""
    if resource.resource_type not in (NAMESPACE, NAMESPACE_PATCH):
        return []
    level = get(resource.props, "metadata", "labels", ENFORCE_LABEL)
    name = get(resource.props, "metadata", "name")
    allowed = tuple(config.get("privilegedNamespaces") or PRIVILEGED_NAMESPACES)
    if level != "privileged" or name in allowed:
        return []
    return [
        f"{label(resource)}: namespace {name!r} enforces Pod Security privileged, so any pod "
        "in it may take the host. Fix: enforce baseline or restricted, or add it to the "
        "policy's privilegedNamespaces after review."
    ]

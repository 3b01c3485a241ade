"""Every security property of every manifest is asserted, and each assertion is shown to fail
when the property is flipped (issue 34: a mutation sample flipped allowPrivilegeEscalation in
the two-node NCCL manifest and no test failed).

Workloads other than the system DaemonSets are held to the policy pack's rules (no privilege,
escalation, added capability beyond sshd's, hostPath or host namespace: tests/test_policies.py
flips each). The system DaemonSets need the host, so each is held to its exact profile here:
its pod's host namespaces, its hostPath mounts, each container's securityContext and image by
digest where it runs privileged or with an added capability. A flip of any of them changes the
profile, and the test that compares it fails.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tools.harness.graph import unwrap
from tools.harness.stacks import run_program

DAEMON_SET = "kubernetes:apps/v1:DaemonSet"
EFA_POOL = {"name": "h100", "instanceType": "p5.48xlarge", "count": 2, "efa": True}

# name suffix -> (host namespaces, hostPath mounts, per container: securityContext)
PROFILES: dict[str, dict[str, Any]] = {
    "nvidia-device-plugin-daemonset": {
        "host": {},
        "hostPaths": ["/var/lib/kubelet/device-plugins"],
        "contexts": [{"capabilities": {"add": ["SYS_ADMIN"]}}],
    },
    "gpu-feature-discovery-daemonset": {
        "host": {},
        "hostPaths": ["/sys"],
        "contexts": [{"capabilities": {"add": ["SYS_ADMIN"]}}],
    },
    "-dcgm-exporter": {
        "host": {},
        "hostPaths": ["/var/lib/kubelet/pod-resources"],
        "contexts": [{"privileged": True, "runAsUser": 0}],
    },
    "spot-termination-handler-daemonset": {
        "host": {"hostNetwork": True},
        "hostPaths": ["/proc/uptime"],
        "contexts": [
            {
                "runAsGroup": 1000,
                "runAsUser": 1000,
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "runAsNonRoot": True,
            }
        ],
    },
    "-efa-device-plugin": {
        "host": {"hostNetwork": True},
        "hostPaths": ["/var/lib/kubelet/device-plugins", "/dev/infiniband"],
        "contexts": [{"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}],
    },
}


def profile(pod: dict[str, Any]) -> dict[str, Any]:
    """What a pod takes from its host: namespaces, hostPath mounts, container contexts."""
    containers = [*pod.get("initContainers", []), *pod.get("containers", [])]
    return {
        "host": {k: pod[k] for k in ("hostNetwork", "hostPID", "hostIPC") if pod.get(k)},
        "hostPaths": [v["hostPath"]["path"] for v in pod.get("volumes", []) if "hostPath" in v],
        "contexts": [c.get("securityContext", {}) for c in containers],
    }


def deviations(name: str, pod: dict[str, Any]) -> list[str]:
    """How a system DaemonSet's pod differs from its profile, and images not by digest where it
    runs privileged or adds a capability."""
    (suffix,) = [s for s in PROFILES if name.endswith(s)]
    found = []
    actual = profile(pod)
    for key, wanted in PROFILES[suffix].items():
        if actual[key] != wanted:
            found.append(f"{name}: {key} {actual[key]} != {wanted}")
    for container in [*pod.get("initContainers", []), *pod.get("containers", [])]:
        context = container.get("securityContext", {})
        privileged = context.get("privileged") or context.get("capabilities", {}).get("add")
        if privileged and "@sha256:" not in container.get("image", ""):
            found.append(f"{name}: {container['name']} runs with privileges by tag")
    return found


@pytest.fixture(scope="module")
def system_pods() -> dict[str, dict[str, Any]]:
    pods = {}
    for graph in (run_program("prod"), run_program("prod", config={"nodePools": [EFA_POOL]})):
        for r in graph.of_type(DAEMON_SET):
            pods[r.name] = unwrap(r.inputs)["spec"]["template"]["spec"]
    return pods


def test_every_system_daemonset_is_exactly_its_profile(system_pods):
    assert sorted(s for s in PROFILES if any(n.endswith(s) for n in system_pods)) == sorted(
        PROFILES
    ), sorted(system_pods)
    for name, pod in system_pods.items():
        assert deviations(name, pod) == [], deviations(name, pod)


def _flips(pod: dict[str, Any]):
    """(what, flipped pod) for each security property of a pod."""
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        flipped = copy.deepcopy(pod)
        flipped[key] = not pod.get(key, False)
        yield f"{key} flipped", flipped
    flipped = copy.deepcopy(pod)
    flipped.setdefault("volumes", []).append({"name": "root", "hostPath": {"path": "/"}})
    yield "a hostPath added", flipped
    containers = [*pod.get("initContainers", []), *pod.get("containers", [])]
    for index in range(len(containers)):
        for what, change in (
            ("privileged", lambda c: c.__setitem__("privileged", not c.get("privileged", False))),
            (
                "allowPrivilegeEscalation",
                lambda c: c.__setitem__(
                    "allowPrivilegeEscalation", not c.get("allowPrivilegeEscalation", True)
                ),
            ),
            ("runAsUser", lambda c: c.__setitem__("runAsUser", 1000 if "runAsUser" in c else 0)),
            (
                "an added capability",
                lambda c: c.setdefault("capabilities", {}).setdefault("add", []).append("NET_RAW"),
            ),
            ("drop ALL", lambda c: c.setdefault("capabilities", {}).pop("drop", None) or None),
        ):
            flipped = copy.deepcopy(pod)
            target = [*flipped.get("initContainers", []), *flipped.get("containers", [])][index]
            change(target.setdefault("securityContext", {}))
            if profile(flipped) != profile(pod):
                yield f"{what} of container {index}", flipped
        flipped = copy.deepcopy(pod)
        target = [*flipped.get("initContainers", []), *flipped.get("containers", [])][index]
        context = target.get("securityContext", {})
        if context.get("privileged") or context.get("capabilities", {}).get("add"):
            target["image"] = target["image"].split("@")[0]
            yield f"the digest of container {index}", flipped


def test_each_flipped_property_of_a_system_daemonset_is_caught(system_pods):
    flips = 0
    for name, pod in system_pods.items():
        for what, flipped in _flips(pod):
            flips += 1
            assert deviations(name, flipped), f"{name}: {what} went unnoticed"
    assert flips >= 4 * 9, flips

"""Every input check of every host script stops the script before it changes anything (issue 35).

A mutation sample (seed 20261203) turned `fatal` into `log` for KUBERNETES_MINOR in
install-kube-tools.sh and for READY_TIMEOUT_SECONDS in wait-node-ready.sh (now join-node.sh),
and no test failed: a check no test feeds its bad value can stop checking.
Here every check in a script's `check_inputs` (its `fatal`s, its `require_vars` and
`require_node_name`) gets its bad value, on a host that is otherwise right for the script, and
the run must fail naming it with no command of the host touched (no stub called) and no file
written. A check added without a case here fails `test_every_check_has_a_case`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from components.hosts.rendering import SCRIPTS_DIR, render_script
from tests.helpers.archive import Archive
from tests.helpers.control_plane_host import CNI
from tests.sandbox import Sandbox, needs_sandbox

ADMIN_CONF = "/etc/kubernetes/admin.conf"
CA_CERT = "/etc/kubernetes/pki/ca.crt"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGxg7mXQyTzYhQ0q1b3oBk1J9KqDk8d6yY3c2a9n6H3F ops@x"

# Inputs the scripts accept, valid, per script: each case changes one thing.
BASE: dict[str, dict[str, str]] = {
    "check-version-skew.sh": {"KUBERNETES_MINOR": "1.35"},
    "disable-nouveau.sh": {"DRIVER_BRANCH": "580", "KERNEL_MODULES": "open"},
    "init-control-plane.sh": {
        "CLUSTER_NAME": "dev-gpu",
        "NODE_NAME": "dev-gpu-control-plane",
        "KUBERNETES_MINOR": "1.35",
        "CONTROL_PLANE_ENDPOINT": "10.42.3.7:6443",
        "ADVERTISE_ADDRESS": "10.42.3.7",
        "POD_SUBNET": "10.244.0.0/16",
        "SERVICE_SUBNET": "10.96.0.0/12",
        "CERT_SANS": "10.42.3.7,api.example.com",
        "SERVING_NAMES": "DNS:dev-gpu-control-plane\nIP Address:10.42.3.7",
    },
    "install-cni.sh": {
        "FLANNEL_VERSION": "v0.27.4",
        # The hash of the manifest the sandbox's curl serves (issue 34).
        "FLANNEL_MANIFEST_SHA256": CNI["FLANNEL_MANIFEST_SHA256"],
        "FLANNEL_IMAGE": CNI["FLANNEL_IMAGE"],
        "FLANNEL_CNI_PLUGIN_IMAGE": CNI["FLANNEL_CNI_PLUGIN_IMAGE"],
        "POD_SUBNET": "10.244.0.0/16",
        "NODE_NAME": "dev-gpu-control-plane",
    },
    "install-driver.sh": {
        "DRIVER_BRANCH": "580",
        "GPU_COUNT": "8",
        "NEEDS_FABRIC_MANAGER": "true",
        "KERNEL_MODULES": "proprietary",
        "NVLINK_SUBNET_MANAGER": "false",
        "CUDA_REPOSITORY": "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/",
        "GSP_FIRMWARE": "off",
    },
    "install-efa.sh": {
        "EFA_INSTALLER_VERSION": "1.51.0",
        "EFA_DRIVER_VERSION": "3.3.1",
        "EFA_INTERFACES": "32",
    },
    "install-kube-tools.sh": {"KUBERNETES_MINOR": "1.35"},
    "install-runtime.sh": {
        "CONTAINERD_VERSION": "2.2.1-1~ubuntu.24.04~noble",
        "CONTAINERD_REPOSITORY": "https://download.docker.com/linux/ubuntu noble stable",
        "SANDBOX_IMAGE": "registry.k8s.io/pause:3.10.1",
        "NVIDIA_CTK_VERSION": "1.20.0-1",
    },
    "join-node.sh": {
        "NODE_NAME": "a10g-0",
        "API_ENDPOINT": "10.42.1.10:6443",
        "JOIN_TOKEN": "abcdef.0123456789abcdef",
        "CA_CERT_HASH": "sha256:" + "ab" * 32,
        "KUBERNETES_MINOR": "1.35",
        "PROVIDER_ID": "aws:///us-west-2a/i-0abc123",
        "EXPECTED_GPUS": "8",
        "READY_TIMEOUT_SECONDS": "600",
        "CAPACITY_TIMEOUT_SECONDS": "900",
        "NODE_LABELS": "team=ml",
        "NODE_TAINTS": "nvidia.com/gpu=true:NoSchedule",
    },
    "power-off-builder.sh": {"POWER_OFF_DELAY_SECONDS": "5"},
    "prepare-image.sh": {"IMAGE_DIGEST": "ab" * 32, "SSH_USER": "ubuntu"},
    "pull-images.sh": {"IMAGES": "registry.k8s.io/pause:3.10.1", "KUBEADM_IMAGES": "false"},
    "read-kubeconfig.sh": {"API_SERVER": "https://10.42.3.7:6443"},
    "renew-certificates.sh": {
        "CHECK_PERIOD": "2026-12-27",
        "RENEW_WITHIN_DAYS": "90",
        "RENEW_CONTROL_PLANE": "true",
    },
    "rotate-host-key.sh": {"PHASE": "switch", "NEW_HOST_KEY": " ".join(KEY.split()[:2])},
    "upgrade-control-plane.sh": {"KUBERNETES_MINOR": "1.35"},
    "user-kubeconfig.sh": {
        "API_SERVER": "https://10.42.3.7:6443",
        "CLIENT_NAME": "dev-gpu-operator",
        "GROUP": "gpu-cluster:operators",
        "VALIDITY_HOURS": "24",
    },
    "wait-ready.sh": {"KERNEL_WITH_DRIVER": "true", "SSH_USER": "root", "AUTHORIZED_KEYS": KEY},
}
# What each script's host has for its file checks to pass (a control plane's kubeconfig).
FILES = {
    "check-version-skew.sh": (ADMIN_CONF,),
    "install-cni.sh": (ADMIN_CONF,),
    "read-kubeconfig.sh": (ADMIN_CONF, CA_CERT),
    "renew-certificates.sh": (ADMIN_CONF,),
    "user-kubeconfig.sh": (ADMIN_CONF,),
}
MISSING = None  # an input left out
FAST = {"RETRY_BASE_SECONDS": "0.01"}


@dataclass(frozen=True)
class Case:
    script: str
    changes: dict[str, str | None]
    says: str
    without: tuple[str, ...] = field(default=())  # files of FILES the host lacks

    @property
    def id(self) -> str:
        what = ",".join(f"{k}={'(missing)' if v is None else v}" for k, v in self.changes.items())
        return f"{self.script}:{what or 'without ' + ','.join(self.without)}"

    def params(self) -> dict[str, str]:
        params = dict(BASE[self.script])
        for name, value in self.changes.items():
            if value is None:
                params.pop(name, None)
            else:
                params[name] = value
        return params


def missing(script: str, *names: str) -> list[Case]:
    """One case per required input: it alone left out."""
    return [Case(script, {n: MISSING}, f"missing required input(s): {n}") for n in names]


def bad(script: str, name: str, value: str, says: str) -> Case:
    return Case(script, {name: value}, says)


CASES: list[Case] = [
    *missing("check-version-skew.sh", "KUBERNETES_MINOR"),
    bad("check-version-skew.sh", "KUBERNETES_MINOR", "1.x", "KUBERNETES_MINOR must be a minor"),
    Case("check-version-skew.sh", {}, f"{ADMIN_CONF} not found on this host", (ADMIN_CONF,)),
    bad("disable-nouveau.sh", "REBOOT_DELAY_SECONDS", "0", "REBOOT_DELAY_SECONDS must be a"),
    bad("disable-nouveau.sh", "DRIVER_BRANCH", "58", "DRIVER_BRANCH must be a driver branch"),
    bad("disable-nouveau.sh", "KERNEL_MODULES", "both", "KERNEL_MODULES must be open or"),
    *missing("disable-nouveau.sh", "KERNEL_MODULES"),
    *missing(
        "init-control-plane.sh",
        "CLUSTER_NAME",
        "NODE_NAME",
        "KUBERNETES_MINOR",
        "CONTROL_PLANE_ENDPOINT",
        "ADVERTISE_ADDRESS",
        "POD_SUBNET",
        "SERVICE_SUBNET",
        "CERT_SANS",
        "SERVING_NAMES",
    ),
    bad("init-control-plane.sh", "KUBERNETES_MINOR", "v1.35", "KUBERNETES_MINOR must be a minor"),
    bad("init-control-plane.sh", "CONTROL_PLANE_ENDPOINT", "10.42.3.7", "must be host:port"),
    bad("init-control-plane.sh", "ADVERTISE_ADDRESS", "cp.local", "must be an IPv4 address"),
    bad("init-control-plane.sh", "POD_SUBNET", "10.244.0.0", "POD_SUBNET must be a CIDR"),
    bad("init-control-plane.sh", "SERVICE_SUBNET", "10.96/12", "SERVICE_SUBNET must be a CIDR"),
    bad("init-control-plane.sh", "NODE_NAME", "CP_1", "NODE_NAME must be a lowercase DNS name"),
    # Pasted into the kubeadm config's YAML between double quotes: a quote would close it.
    bad(
        "init-control-plane.sh",
        "CLUSTER_NAME",
        'gpu"\nextra: x',
        "CLUSTER_NAME must be a lowercase DNS label of at most 40 characters like gpu-dev, got",
    ),
    bad(
        "init-control-plane.sh",
        "CLUSTER_NAME",
        "g" * 41,
        "CLUSTER_NAME must be a lowercase DNS label of at most 40 characters",
    ),
    bad("init-control-plane.sh", "CERT_SANS", "10.42.3.7,a b", "CERT_SANS: 'a b' is not an IP"),
    bad(
        "init-control-plane.sh",
        "SERVING_NAMES",
        "DNS:cp\nkubernetes.default.svc",
        "SERVING_NAMES: 'kubernetes.default.svc' is not 'DNS:<name>'",
    ),
    *missing(
        "install-cni.sh",
        "FLANNEL_VERSION",
        "FLANNEL_MANIFEST_SHA256",
        "FLANNEL_IMAGE",
        "FLANNEL_CNI_PLUGIN_IMAGE",
        "POD_SUBNET",
        "NODE_NAME",
    ),
    bad(
        "install-cni.sh",
        "FLANNEL_MANIFEST_SHA256",
        "sha256:" + "ab" * 32,
        "FLANNEL_MANIFEST_SHA256 must be 64 hex digits",
    ),
    bad("install-cni.sh", "FLANNEL_VERSION", "0.27.4", "FLANNEL_VERSION must be a release tag"),
    bad(
        "install-cni.sh",
        "FLANNEL_IMAGE",
        "ghcr.io/flannel-io/flannel:v0.27.4",
        "FLANNEL_IMAGE must be ghcr.io/flannel-io/flannel:v0.27.4@sha256:",
    ),
    bad(
        "install-cni.sh",
        "FLANNEL_CNI_PLUGIN_IMAGE",
        "ghcr.io/flannel-io/flannel-cni-plugin:v1.8.0-flannel1",
        "FLANNEL_CNI_PLUGIN_IMAGE must be ghcr.io/flannel-io/flannel-cni-plugin:<tag>@sha256:",
    ),
    bad("install-cni.sh", "POD_SUBNET", "10.244.0.0/x", "POD_SUBNET must be a CIDR"),
    Case("install-cni.sh", {}, f"{ADMIN_CONF} not found; run init-control-plane.sh", (ADMIN_CONF,)),
    *missing("install-driver.sh", "DRIVER_BRANCH", "GPU_COUNT", "NEEDS_FABRIC_MANAGER"),
    *missing("install-driver.sh", "KERNEL_MODULES", "CUDA_REPOSITORY"),
    bad("install-driver.sh", "DRIVER_BRANCH", "580.95", "DRIVER_BRANCH must be a driver branch"),
    bad("install-driver.sh", "GPU_COUNT", "0", "GPU_COUNT must be a positive integer"),
    bad("install-driver.sh", "NEEDS_FABRIC_MANAGER", "yes", "NEEDS_FABRIC_MANAGER must be true"),
    bad("install-driver.sh", "KERNEL_MODULES", "nouveau", "KERNEL_MODULES must be open or"),
    bad("install-driver.sh", "NVLINK_SUBNET_MANAGER", "1", "NVLINK_SUBNET_MANAGER must be true"),
    bad(
        "install-driver.sh",
        "CUDA_REPOSITORY",
        "http://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/",
        "CUDA_REPOSITORY must be NVIDIA's CUDA apt repository",
    ),
    bad("install-driver.sh", "GSP_FIRMWARE", "disabled", "GSP_FIRMWARE must be on or off"),
    bad("install-driver.sh", "KERNEL_MODULES", "open", "GSP_FIRMWARE=off needs KERNEL_MODULES="),
    *missing("install-efa.sh", "EFA_INSTALLER_VERSION", "EFA_DRIVER_VERSION", "EFA_INTERFACES"),
    bad("install-efa.sh", "EFA_INSTALLER_VERSION", "latest", "EFA_INSTALLER_VERSION must be a"),
    bad("install-efa.sh", "EFA_DRIVER_VERSION", "3.3", "EFA_DRIVER_VERSION must be a driver"),
    bad("install-efa.sh", "EFA_INTERFACES", "0", "EFA_INTERFACES must be a positive whole"),
    *missing("install-kube-tools.sh", "KUBERNETES_MINOR"),
    bad("install-kube-tools.sh", "KUBERNETES_MINOR", "1.35.1", "KUBERNETES_MINOR must be a minor"),
    bad("install-runtime.sh", "WITH_NVIDIA_TOOLKIT", "yes", "WITH_NVIDIA_TOOLKIT must be true"),
    *missing(
        "install-runtime.sh",
        "NVIDIA_CTK_VERSION",
        "CONTAINERD_VERSION",
        "CONTAINERD_REPOSITORY",
        "SANDBOX_IMAGE",
    ),
    Case(
        "install-runtime.sh",
        {"WITH_NVIDIA_TOOLKIT": "false", "SANDBOX_IMAGE": MISSING},
        "missing required input(s): SANDBOX_IMAGE",
    ),
    bad("install-runtime.sh", "CONTAINERD_VERSION", "2.2.*", "CONTAINERD_VERSION must be one"),
    bad(
        "install-runtime.sh",
        "CONTAINERD_REPOSITORY",
        "http://example.com/ubuntu noble stable",
        "CONTAINERD_REPOSITORY must be Docker's apt source",
    ),
    bad("install-runtime.sh", "SANDBOX_IMAGE", "pause", "SANDBOX_IMAGE must be an image with a"),
    bad("install-runtime.sh", "NVIDIA_CTK_VERSION", "latest", "NVIDIA_CTK_VERSION must be an apt"),
    *missing(
        "join-node.sh",
        "NODE_NAME",
        "API_ENDPOINT",
        "JOIN_TOKEN",
        "CA_CERT_HASH",
        "KUBERNETES_MINOR",
    ),
    bad("join-node.sh", "NODE_NAME", "A10G-0", "NODE_NAME must be a lowercase DNS name"),
    bad("join-node.sh", "API_ENDPOINT", "https://10.42.1.10", "API_ENDPOINT must be host:port"),
    bad("join-node.sh", "JOIN_TOKEN", "SECRET-not-a-token", "JOIN_TOKEN is not a bootstrap token"),
    bad("join-node.sh", "CA_CERT_HASH", "sha256:abc", "CA_CERT_HASH must be sha256:<64 hex"),
    bad("join-node.sh", "KUBERNETES_MINOR", "135", "KUBERNETES_MINOR must be a minor version"),
    bad("join-node.sh", "PROVIDER_ID", "i-0abc123", "PROVIDER_ID must be aws:///<zone>/"),
    bad(
        "join-node.sh",
        "EXPECTED_GPUS",
        "eight",
        "EXPECTED_GPUS must be a whole number, got 'eight'",
    ),
    bad("join-node.sh", "READY_TIMEOUT_SECONDS", "10m", "READY_TIMEOUT_SECONDS must be a whole"),
    bad("join-node.sh", "CAPACITY_TIMEOUT_SECONDS", "-1", "CAPACITY_TIMEOUT_SECONDS must be a"),
    bad("join-node.sh", "NODE_LABELS", "team", "NODE_LABELS: 'team' is not key=value"),
    bad("join-node.sh", "NODE_TAINTS", "gpu=true:Never", "NODE_TAINTS: 'gpu=true:Never' is not"),
    bad("power-off-builder.sh", "POWER_OFF_DELAY_SECONDS", "soon", "POWER_OFF_DELAY_SECONDS must"),
    *missing("prepare-image.sh", "IMAGE_DIGEST", "SSH_USER"),
    *missing("pull-images.sh", "IMAGES"),
    bad("pull-images.sh", "IMAGES", "registry.k8s.io/pause", "image 'registry.k8s.io/pause' has"),
    bad("pull-images.sh", "KUBEADM_IMAGES", "yes", "KUBEADM_IMAGES must be true or false"),
    *missing("read-kubeconfig.sh", "API_SERVER"),
    bad("read-kubeconfig.sh", "API_SERVER", "10.42.3.7:6443", "API_SERVER must be https://"),
    Case("read-kubeconfig.sh", {}, f"{ADMIN_CONF} not found on this host", (ADMIN_CONF,)),
    Case("read-kubeconfig.sh", {}, f"{CA_CERT} not found on this host", (CA_CERT,)),
    bad(
        "read-kubeconfig.sh",
        "ADMIN_CERT_NOT_AFTER",
        "2027-01-01",
        "ADMIN_CERT_NOT_AFTER must be a UTC time (RFC 3339)",
    ),
    *missing("renew-certificates.sh", "CHECK_PERIOD", "RENEW_WITHIN_DAYS", "RENEW_CONTROL_PLANE"),
    bad("renew-certificates.sh", "CHECK_PERIOD", "2026-12", "CHECK_PERIOD must be a date"),
    bad("renew-certificates.sh", "RENEW_WITHIN_DAYS", "90d", "RENEW_WITHIN_DAYS must be a number"),
    bad("renew-certificates.sh", "RENEW_CONTROL_PLANE", "1", "RENEW_CONTROL_PLANE must be true"),
    Case("renew-certificates.sh", {}, f"{ADMIN_CONF} not found on this host", (ADMIN_CONF,)),
    bad("rotate-host-key.sh", "PHASE", "rotate", "PHASE must be stage or switch, got 'rotate'"),
    bad("rotate-host-key.sh", "NEW_HOST_KEY", "", "NEW_HOST_KEY is required with PHASE=switch"),
    bad("rotate-host-key.sh", "NEW_HOST_KEY", KEY, "NEW_HOST_KEY must be one ssh-ed25519 public"),
    *missing("upgrade-control-plane.sh", "KUBERNETES_MINOR"),
    bad("upgrade-control-plane.sh", "KUBERNETES_MINOR", "1", "KUBERNETES_MINOR must be a minor"),
    *missing("user-kubeconfig.sh", "API_SERVER", "CLIENT_NAME", "GROUP", "VALIDITY_HOURS"),
    bad("user-kubeconfig.sh", "API_SERVER", "http://10.42.3.7:6443", "API_SERVER must be https:"),
    bad("user-kubeconfig.sh", "CLIENT_NAME", "dev gpu", "CLIENT_NAME must be a user name like"),
    bad("user-kubeconfig.sh", "GROUP", "-operators", "GROUP must be a group name like"),
    bad("user-kubeconfig.sh", "VALIDITY_HOURS", "0", "VALIDITY_HOURS must be a number of hours"),
    Case("user-kubeconfig.sh", {}, f"{ADMIN_CONF} not found on this host", (ADMIN_CONF,)),
    bad("wait-ready.sh", "KERNEL_WITH_DRIVER", "yes", "KERNEL_WITH_DRIVER must be true or false"),
    bad("wait-ready.sh", "SSHD_MAX_STARTUPS", "100", "SSHD_MAX_STARTUPS must be start:rate:full"),
    bad("wait-ready.sh", "SSHD_MAX_STARTUPS", "300:30:200", "expected 1 <= start <= full and"),
    bad("wait-ready.sh", "ROOT_VOLUME_GIB", "200G", "ROOT_VOLUME_GIB must be a size in GiB"),
    bad("wait-ready.sh", "OS_VERSION", "20.04", "OS_VERSION must be one of 22.04 24.04"),
    *missing("wait-ready.sh", "SSH_USER", "AUTHORIZED_KEYS"),
    bad("wait-ready.sh", "AUTHORIZED_KEYS", "not a key", "AUTHORIZED_KEYS: a line is not an"),
    bad(
        "wait-ready.sh",
        "SSH_USER",
        "nosuchuser",
        "user nosuchuser expected with a home directory, getent finds ''",
    ),
]


def host_for(tmp_path: Path, script: str, without: tuple[str, ...] = ()) -> Sandbox:
    sb = Sandbox(tmp_path)
    for path in FILES.get(script, ()):
        if path not in without:
            sb.write(path, "present\n", 0o600)
    return sb


def written_files(sb: Sandbox, before: set[Path]) -> list[str]:
    return sorted(
        str(path)
        for upper in sb.uppers.values()
        for path in upper.rglob("*")
        if path.is_file() and path not in before
    )


# ---- the cases cover every check -----------------------------------------------------------

FATAL = re.compile(r'\bfatal\s+"((?:[^"\\]|\\.)*)"')
VARIABLE = re.compile(r"\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*")


def function_body(text: str, name: str) -> str:
    match = re.search(rf"^{name}\(\) \{{\n(.*?)^\}}", text, re.MULTILINE | re.DOTALL)
    return match.group(1) if match else ""


def check_inputs_body(script: str) -> str:
    """The script's check_inputs, with the bodies of the script's functions it calls."""
    text = (SCRIPTS_DIR / script).read_text()
    body = function_body(text, "check_inputs")
    called = set(re.findall(r"^\s*([a-z_]+)\s*$", body, re.MULTILINE))
    return body + "".join(function_body(text, name) for name in sorted(called))


def checked_scripts() -> list[str]:
    return sorted(p.name for p in SCRIPTS_DIR.glob("*.sh") if check_inputs_body(p.name))


def fixed_start(message: str) -> str:
    """The message's text up to its first variable part (what a case can match on)."""
    return VARIABLE.split(message)[0].strip() or VARIABLE.split(message)[1].strip()


def test_every_script_with_input_checks_has_cases():
    assert set(checked_scripts()) == set(BASE), sorted(set(checked_scripts()) ^ set(BASE))


@pytest.mark.parametrize("script", checked_scripts())
def test_every_check_has_a_case(script):
    body = check_inputs_body(script)
    says = [case.says for case in CASES if case.script == script]
    unmatched = [
        message
        for message in FATAL.findall(body)
        if not any(fixed_start(message)[:20] in said or said in message for said in says)
    ]
    assert not unmatched, f"{script}: no case feeds these checks their bad value: {unmatched}"
    required = re.findall(r"[A-Z][A-Z0-9_]+", " ".join(re.findall(r"require_vars([^\n]*)", body)))
    if "require_node_name" in body:
        required.append("NODE_NAME")
    for name in required:
        assert f"missing required input(s): {name}" in says, f"{script}: {name} left out"


# ---- each case stops the script before it changes anything ---------------------------------


def inputs_only(script: str, params: dict[str, str]) -> str:
    """The script's program, rendered as a host runs it, stopped after its input checks."""
    program = render_script(script, params)
    head, _, _ = program.rpartition('main "$@"')
    return head + "init_script inputs\ncheck_inputs\necho INPUTS-OK\n"


@needs_sandbox
@pytest.mark.parametrize("script", sorted(BASE))
def test_the_valid_inputs_pass_the_checks(tmp_path, script):
    """So each case below fails on its one bad value, not on another."""
    result = host_for(tmp_path, script).run_text(inputs_only(script, BASE[script]))
    assert result.returncode == 0 and "INPUTS-OK" in result.stdout, result.stderr


@needs_sandbox
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_a_bad_input_stops_the_script_before_it_changes_anything(tmp_path, case):
    host = host_for(tmp_path, case.script, case.without)
    before = {p for upper in host.uppers.values() for p in upper.rglob("*") if p.is_file()}
    result = host.run(case.script, case.params())
    assert result.returncode == 1, f"{case.id}: exit {result.returncode}\n{result.stderr}"
    assert "] FAILED: " in result.stderr and case.says in result.stderr, result.stderr
    assert result.calls == [], f"{case.id}: the host was touched: {result.commands()}"
    assert written_files(host, before) == [], f"{case.id}: files written"
    # Some scripts list the checks as their first step: no other step may have started.
    started = re.findall(r"^\[[a-z-]+ [1-9][0-9]*/[0-9]+\] (.*)$", result.stderr, re.MULTILINE)
    assert set(started) <= {"check inputs"}, f"{case.id}: a step started: {result.stderr}"
    if case.changes.get("JOIN_TOKEN"):
        assert case.changes["JOIN_TOKEN"] not in result.output, "the token was echoed"


# ---- and the inputs a script may go without ----------------------------------------------


@needs_sandbox
def test_kube_tools_without_its_optional_input_and_files_succeeds(tmp_path):
    """The same mutation sample turned a `return 0` of install-kube-tools.sh into `return 1`
    unnoticed: its early returns (no /etc/fstab, no SANDBOX_IMAGE to check, a host not joined
    yet) are each the normal path of some host."""
    host = Sandbox(tmp_path)
    Archive.today(host)
    program = render_script("install-kube-tools.sh", {"KUBERNETES_MINOR": "1.35", **FAST})
    # The machine running the tests has an /etc/fstab under the overlay: this host has none.
    result = host.run_text(f"rm -f /etc/fstab\n{program}")
    assert result.returncode == 0, result.stderr
    assert host.installed("kubelet")
    assert result.called("swapoff", "-a") and "/etc/fstab" not in result.stderr
    assert "not joined yet" in result.stderr and "sandbox image" not in result.stderr

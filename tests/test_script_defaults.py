"""Every default a host script falls back to (`${NAME:-value}`) is what production runs unless the
program passes NAME. So each one is either passed by the program in every host step that runs
the script, in every stack (checked here against the rendered programs), or run once at its
default, in the program the dev stack renders, against stubs that take realistic time.

Real seconds would make the suite slow, so the sandbox's clock is scaled: the sleep stub records
what a script asked for and sleeps a fraction of it (state sleep.scale), and the stubs' own
durations (a `kubeadm init` of 15 s, an API server that answers 15 s after it) run on that
clock. The scripts' bounds stay real: a bound cut to 1 s fails against a stub that takes 1.5 s,
while the production bound (minutes) waits it out.

A new `${NAME:-value}` in a script fails test_every_default_is_passed_or_exercised until it is
in PASSED (the program passes it) or EXERCISED (the test that runs it at its default).
"""

from __future__ import annotations

import ast
import json
import re
import time
from pathlib import Path

import pytest

from components.hosts import pins
from components.hosts.rendering import SCRIPTS_DIR
from tests.helpers import csr
from tests.helpers.control_plane_host import CNI, FLANNEL_MANIFEST
from tests.helpers.scripts import header_inputs, host_steps, step_program
from tests.sandbox import Sandbox, needs_sandbox
from tools.harness.graph import program_params
from tools.harness.stacks import run_program

SCRIPTS = SCRIPTS_DIR
DEFAULT = re.compile(r"\$\{([A-Z_][A-Z0-9_]*):-([^}]+)\}")

# Set by the script itself (step bookkeeping, state it computes), not an input.
INTERNAL = {
    ("lib/common.sh", "STEP"),
    ("lib/common.sh", "STEP_INDEX"),
    ("lib/common.sh", "STEP_COUNT"),
    ("lib/common.sh", "STEP_TITLE"),
    # Where owed actions are recorded: the program never sets it; the real-apt tests point it
    # inside their root (tests/helpers/real_apt.py), production uses the default.
    ("lib/common.sh", "OWED_DIR"),
    ("init-control-plane.sh", "INITIALIZED_NOW"),
    ("join-node.sh", "NODE_READY"),
    ("join-node.sh", "NODE_ERROR"),
}
# Passed by the program in every host step that runs the script, in every stack.
PASSED = {
    ("renew-certificates.sh", "API_DOWN_SECONDS"),
    ("renew-certificates.sh", "API_UP_SECONDS"),
    ("renew-certificates.sh", "POLL_SECONDS"),
    ("install-driver.sh", "NVLINK_SUBNET_MANAGER"),
    ("install-driver.sh", "GSP_FIRMWARE"),
    ("install-efa.sh", "EFA_INSTALLER_TIMEOUT_SECONDS"),
    ("join-node.sh", "DEVICE_PLUGIN_NAMESPACE"),
    ("join-node.sh", "READY_TIMEOUT_SECONDS"),
    ("join-node.sh", "CAPACITY_TIMEOUT_SECONDS"),
    ("read-kubeconfig.sh", "ADMIN_CERT_NOT_AFTER"),
}
# Run at its default by a test (module, function) that passes the script nothing for it.
EXERCISED_BY = [
    (
        "test_image_scripts",
        "test_pull_images_without_kubeadm_images_never_asks_kubeadm",
        [("pull-images.sh", "KUBEADM_IMAGES")],
    ),
    (
        "test_script_defaults",
        "test_skew_check_allows_the_kubelet_lag_kubernetes_supports",
        [("check-version-skew.sh", "MAX_KUBELET_LAG")],
    ),
    (
        "test_node_scripts",
        "test_nouveau_step_moves_to_the_newest_kernel_with_a_module_and_reboots",
        [("disable-nouveau.sh", "REBOOT_DELAY_SECONDS")],
    ),
    (
        "test_script_defaults",
        "test_init_waits_out_a_control_plane_that_takes_its_time",
        [
            ("init-control-plane.sh", "INIT_TIMEOUT_SECONDS"),
            ("init-control-plane.sh", "API_WAIT_SECONDS"),
            ("init-control-plane.sh", "CSR_WAIT_SECONDS"),
            ("lib/common.sh", "POLL_SECONDS"),
        ],
    ),
    (
        "test_script_defaults",
        "test_cni_waits_out_a_rollout_of_seconds",
        [("install-cni.sh", "CNI_TIMEOUT_SECONDS")],
    ),
    (
        "test_production_defaults",
        "test_download_failing_for_longer_than_one_retry_is_waited_out",
        [("install-runtime.sh", "WITH_NVIDIA_TOOLKIT"), ("lib/common.sh", "DOWNLOAD_RETRIES")],
    ),
    (
        "test_script_defaults",
        "test_join_waits_out_a_kubeadm_join_of_seconds",
        [("join-node.sh", "JOIN_TIMEOUT_SECONDS")],
    ),
    (
        "test_production_defaults",
        "test_retry_backoff_grows_to_a_minute_in_production",
        [("lib/common.sh", "RETRY_BASE_SECONDS"), ("lib/common.sh", "RETRY_MAX_SECONDS")],
    ),
    (
        "test_script_defaults",
        "test_first_boot_waits_out_cloud_init_apt_daily_and_a_busy_archive",
        [
            ("lib/common.sh", "CLOUD_INIT_TIMEOUT_SECONDS"),
            ("wait-ready.sh", "APT_DAILY_TIMEOUT_SECONDS"),
            ("wait-ready.sh", "APT_DAILY_POLL_SECONDS"),
            ("wait-ready.sh", "APT_LISTS_RETRIES"),
        ],
    ),
    (
        "test_script_defaults",
        "test_packages_wait_out_a_held_dpkg_lock_and_failed_installs",
        [("lib/common.sh", "APT_LOCK_TIMEOUT_SECONDS"), ("lib/common.sh", "APT_RETRIES")],
    ),
    (
        "test_script_defaults",
        "test_an_interrupted_dpkg_is_finished_within_its_bound",
        [("lib/common.sh", "DPKG_REPAIR_TIMEOUT_SECONDS")],
    ),
    (
        "test_script_defaults",
        "test_the_repair_of_an_interrupted_dpkg_waits_out_a_held_lock",
        [("lib/common.sh", "DPKG_LOCK_POLL_SECONDS")],
    ),
    (
        "test_control_plane_scripts",
        "test_kubeconfig_points_at_the_operators_address_and_is_not_logged",
        [("read-kubeconfig.sh", "CA_CERT")],
    ),
    (
        "test_bundle",
        "test_run_as_root_without_sudo_a_program_is_looked_for_in_roots_home",
        [("lib/run-by-digest.sh", "SUDO_USER")],
    ),
    (
        "test_image_scripts",
        "test_power_off_schedules_a_poweroff_the_session_survives",
        [("power-off-builder.sh", "POWER_OFF_DELAY_SECONDS")],
    ),
    (
        "test_production_defaults",
        "test_reset_waits_for_a_kubeadm_reset_that_takes_seconds",
        [("reset-node.sh", "RESET_TIMEOUT_SECONDS")],
    ),
    (
        "test_script_defaults",
        "test_control_plane_upgrade_waits_out_kubeadm_and_the_restarting_api",
        [
            ("upgrade-control-plane.sh", "APPLY_TIMEOUT_SECONDS"),
            ("upgrade-control-plane.sh", "API_WAIT_SECONDS"),
        ],
    ),
    (
        "test_script_defaults",
        "test_node_upgrade_waits_out_a_kubeadm_upgrade_node_of_seconds",
        [("install-kube-tools.sh", "UPGRADE_TIMEOUT_SECONDS")],
    ),
    (
        "test_script_defaults",
        "test_the_joins_checks_look_every_five_seconds",
        [("join-node.sh", "POLL_SECONDS")],
    ),
    (
        "test_kernel_before_driver",
        "test_other_hosts_keep_their_kernel_updates",
        [("wait-ready.sh", "KERNEL_WITH_DRIVER")],
    ),
    (
        "test_root_volume",
        "test_the_filesystem_grows_once_the_disk_shows_the_new_size",
        [("wait-ready.sh", "ROOT_GROW_TIMEOUT_SECONDS")],
    ),
]
EXERCISED = {key: f"{module}:{function}" for module, function, keys in EXERCISED_BY for key in keys}


def script_defaults() -> dict[tuple[str, str], str]:
    """(script relative to components/hosts/scripts, NAME) -> default, of every non-empty
    default."""
    found = {}
    for path in sorted(SCRIPTS.rglob("*.sh")):
        relative = path.relative_to(SCRIPTS).as_posix()
        for name, value in DEFAULT.findall(path.read_text()):
            found[(relative, name)] = value
    return found


def test_the_scripts_have_defaults_to_check():
    defaults = script_defaults()
    assert defaults[("reset-node.sh", "RESET_TIMEOUT_SECONDS")] == "300"
    assert defaults[("lib/common.sh", "RETRY_MAX_SECONDS")] == "60"
    assert len(defaults) > 40, defaults


def test_every_default_is_passed_or_exercised():
    uncovered = [
        f"{script}: ${{{name}:-{value}}}"
        for (script, name), value in script_defaults().items()
        if (script, name) not in INTERNAL | PASSED | EXERCISED.keys()
    ]
    assert not uncovered, (
        "defaults production runs that no test covers: pass them from the program (and list "
        "them in PASSED) or run the script once at the default against a stub that takes "
        "realistic time (and list the test in EXERCISED):\n" + "\n".join(uncovered)
    )
    stale = sorted((INTERNAL | PASSED | EXERCISED.keys()) - script_defaults().keys())
    assert not stale, f"no longer a default of its script, remove: {stale}"


def test_internal_defaults_are_set_by_the_script_itself():
    for script, name in INTERNAL:
        text = (SCRIPTS / script).read_text()
        assert re.search(rf"\b{name}=", text), f"{script} never sets {name}: it is an input"
        assert name not in header_inputs(script), f"{script} lists {name} as an input"


def test_passed_defaults_are_passed_by_every_step_of_every_stack():
    steps = host_steps()
    for script, name in sorted(PASSED):
        runs = [(stack, step, params) for stack, step, s, params in steps if s == script]
        assert runs, f"no host step runs {script}: remove its PASSED entries"
        missing = [f"{stack}: {step}" for stack, step, params in runs if name not in params]
        assert not missing, f"{script} runs on its {name} default in: {missing}"


def test_exercised_defaults_name_a_test_that_runs_the_script_without_them():
    steps = host_steps()
    for (script, name), where in sorted(EXERCISED.items()):
        module, function = where.split(":")
        source = (Path(__file__).parent / f"{module}.py").read_text()
        tree = ast.parse(source)
        (test,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function]
        body = ast.get_source_segment(source, test)
        assert f'"{name}"' not in body, f"{where} sets {name}: it does not run the default"
        runs = [params for _, _, s, params in steps if s == script]
        assert not runs or not all(name in params for params in runs), (
            f"{script}: every step passes {name} now; move it to PASSED"
        )


# ---------------------------------------------------------------- runs at the defaults

SCALE = "0.1"  # a production second is a tenth of a real one: the 1.5 s a stub takes is 15 s
CP = "dev-gpu-control-plane"
NODE = "dev-gpu-a10g-0"
ADMIN_CONF = "/etc/kubernetes/admin.conf"


@pytest.fixture(scope="module")
def dev():
    return run_program("dev")


def sleeps(sb: Sandbox) -> list[float]:
    return [float(s) for s in (sb.state("sleep.requested") or "").split()]


def scaled_host(root: Path, scale: str = SCALE) -> Sandbox:
    sb = Sandbox(root)
    sb.state("sleep.scale", scale)
    return sb


def with_kube_packages(sb: Sandbox, version: str = "1.35.1-1.1") -> Sandbox:
    for pkg in ("kubelet", "kubeadm", "kubectl", "cri-tools"):
        sb.state(f"dpkg/{pkg}", version)
        sb.apt_available(pkg, "1.34.3-1.1", "1.35.1-1.1", "1.36.0-1.1")
    sb.state("systemd/kubelet.active", "yes")
    return sb


def cluster(sb: Sandbox, version: str = "v1.35.1") -> Sandbox:
    sb.write(ADMIN_CONF, "apiVersion: v1\nkind: Config\n", 0o600)
    sb.state("kubectl/api", version)
    (sb.state_dir / "kubectl" / "nodes").mkdir(parents=True, exist_ok=True)
    return sb


def node_json(name: str, ready: str = "True", **status) -> str:
    conditions = [{"type": "Ready", "status": ready}]
    return json.dumps({"metadata": {"name": name}, "status": {"conditions": conditions, **status}})


def approved(result) -> list[str]:
    return [c[-1] for c in result.called("kubectl") if c[-3:-1] == ["certificate", "approve"]]


def file_kubelet_request(sb: Sandbox, name: str, node: str, program: str) -> None:
    """The request the node's kubelet files for the names its step's program passes."""
    names = program_params(program)["SERVING_NAMES"]
    csr.file_request(sb, name, node, csr.kubelet_request(node, names))


@needs_sandbox
def test_init_waits_out_a_control_plane_that_takes_its_time(dev, tmp_path):
    """kubeadm init takes 15 s, the API server answers 15 s after it and the kubelet files its
    serving certificate request 30 s after it: the dev stack's init step (which passes no bound)
    waits each out, polling every 5 s, and approves the request."""
    sb = with_kube_packages(scaled_host(tmp_path))
    sb.state("kubeadm.seconds.init", 15)
    sb.state("kubeadm.api-start-seconds", 15)
    file_kubelet_request(sb, "csr-cp", CP, step_program(dev, "dev-gpu-init"))
    sb.state("kubectl/csrs-at", f"{time.time() + 4.5:.3f}")
    result = sb.run_registered(step_program(dev, "dev-gpu-init"), timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.called("kubeadm", "init"), result.commands()
    assert "API server ready" in result.stderr
    assert approved(result) == ["csr-cp"], result.commands()
    polls = [s for s in sleeps(sb) if s not in (0, 15)]  # the kubeadm stub's own
    assert polls and set(polls) == {5.0}, f"production polls every 5 s: {sleeps(sb)}"


@needs_sandbox
def test_cni_waits_out_a_rollout_of_seconds(dev, tmp_path):
    """flannel's DaemonSet takes 15 s to roll out and the node 15 s more to be Ready."""
    sb = cluster(with_kube_packages(scaled_host(tmp_path)))
    sb.state(f"kubectl/nodes/{CP}.json", node_json(CP))
    sb.state("curl.body.kube-flannel.yml", FLANNEL_MANIFEST)
    sb.state("kubectl/rollout-seconds", 15)
    sb.state("kubectl/wait-seconds", 15)
    # The program dev renders, checking the sandbox's manifest instead of the release's.
    program = step_program(dev, "dev-gpu-cni")
    pinned = f"FLANNEL_MANIFEST_SHA256={pins.FLANNEL_MANIFEST_SHA256}\n"
    assert pinned in program
    program = program.replace(pinned, f"FLANNEL_MANIFEST_SHA256={CNI['FLANNEL_MANIFEST_SHA256']}\n")
    result = sb.run_registered(program, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "flannel DaemonSet rolled out" in result.stderr
    assert f"Node {CP} Ready" in result.stderr


@needs_sandbox
def test_join_waits_out_a_kubeadm_join_of_seconds(dev, tmp_path):
    """kubeadm join takes 30 s (TLS bootstrap, kubelet start): the bound the program leaves to
    the script (the sum of kubeadm's phase timeouts) waits it out."""
    sb = with_kube_packages(scaled_host(tmp_path))
    sb.state("kubeadm.seconds.join", 30)
    sb.state("kubelet.gpus", "1")  # the device plugin's, on a g5.xlarge
    result = sb.run_registered(step_program(dev, f"{NODE}-join"), timeout=120)
    assert result.called("kubeadm", "join"), result.commands()
    assert result.returncode == 0, result.stderr
    assert sb.exists("/etc/kubernetes/kubelet.conf")
    assert f"Node {NODE} Ready with 1 allocatable nvidia.com/gpu" in result.stderr


@needs_sandbox
def test_control_plane_upgrade_waits_out_kubeadm_and_the_restarting_api(dev, tmp_path):
    """`kubeadm upgrade plan` and `apply` take 15 s each, and the API server answers 15 s after
    the apply (its static pods restart): the dev stack's upgrade step waits all of it out."""
    sb = cluster(with_kube_packages(scaled_host(tmp_path), "1.34.3-1.1"), "v1.34.3")
    sb.state("apt-mark.held", "kubelet\nkubeadm\nkubectl\n")
    sb.state("kubeadm.seconds.upgrade", 15)
    sb.state("kubeadm.api-start-seconds", 15)
    result = sb.run_registered(step_program(dev, "dev-gpu-upgrade"), timeout=120)
    assert result.returncode == 0, result.stderr
    assert sb.state("kubectl/api") == "v1.35.1"
    assert "control plane upgraded to v1.35.1" in result.stderr


@needs_sandbox
def test_node_upgrade_waits_out_a_kubeadm_upgrade_node_of_seconds(dev, tmp_path):
    """A joined 1.34 worker moved to the dev stack's 1.35 by its kube-tools step: `kubeadm
    upgrade node` takes 15 s, within the bound the program leaves to the script."""
    sb = with_kube_packages(scaled_host(tmp_path), "1.34.3-1.1")
    sb.state("kubectl/api", "v1.35.1")
    sb.write("/etc/kubernetes/kubelet.conf", "apiVersion: v1\nkind: Config\n", 0o600)
    sb.state("kubeadm.seconds.upgrade", 15)
    result = sb.run_registered(step_program(dev, f"{NODE}-kube-tools"), timeout=120)
    assert result.returncode == 0, result.stderr
    assert sb.state("kubeadm.upgrades").splitlines() == ["node"]
    assert sb.installed("kubelet") == "1.35.1-1.1"


@needs_sandbox
def test_the_joins_checks_look_every_five_seconds(dev, tmp_path):
    """A joined node's Node is not Ready on the first two looks, then Ready with its GPU: the
    registered join (which passes no poll) waits it out, looking every 5 s, through the node's
    own kubeconfig, and its capacity check finds the GPU on the next look."""
    sb = with_kube_packages(scaled_host(tmp_path))
    sb.write("/etc/kubernetes/kubelet.conf", "apiVersion: v1\nkind: Config\n", 0o600)
    (sb.state_dir / "kubectl" / "nodes").mkdir(parents=True)
    sb.state(f"kubectl/nodes/{NODE}.json", node_json(NODE, "False", allocatable={"cpu": "4"}))
    sb.state(
        f"kubectl/nodes/{NODE}.json.next",
        node_json(NODE, allocatable={"cpu": "4", "nvidia.com/gpu": "1"}),
    )
    sb.state(f"kubectl/nodes/{NODE}.next-after", 2)
    result = sb.run_registered(step_program(dev, f"{NODE}-join"), timeout=120)
    assert result.returncode == 0, result.stderr
    assert not result.called("kubeadm", "join"), "joined a joined node"
    looks = [c for c in result.called("kubectl") if "get" in c]
    assert len(looks) == 4 and all("/etc/kubernetes/kubelet.conf" in c for c in looks), looks
    assert sleeps(sb) == [5.0, 5.0], sleeps(sb)


@needs_sandbox
def test_first_boot_waits_out_cloud_init_apt_daily_and_a_busy_archive(dev, tmp_path):
    """On a fresh instance cloud-init runs 30 s more, apt-daily 20 s (four looks, every 5 s)
    and apt's lists lock is held three times: the dev stack's first step waits it all out."""
    sb = scaled_host(tmp_path, "0.05")
    sb.write("/etc/os-release", 'NAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\n')
    sb.state("cloud-init.seconds", 30)
    sb.state("systemd/apt-daily.running-checks", 4)
    sb.state("apt.lists-lock", 3)
    result = sb.run_registered(step_program(dev, "dev-gpu-wait-ready"), timeout=120)
    assert result.returncode == 0, result.stderr
    assert "host ready" in result.stderr
    # cloud-init's 30 s, apt-daily's four 5 s looks, then the three retries of apt-get update
    # (common.sh `retry`: 2, 4, 8 s plus up to half again of jitter, which can itself come to
    # 5.000: counting 5.0 anywhere made this test fail about once in 4,000 runs).
    waited = sleeps(sb)
    assert waited[:5] == [30.0, 5.0, 5.0, 5.0, 5.0], waited
    backoffs = waited[5:]
    assert len(backoffs) == 3, waited
    for attempt, delay in enumerate(backoffs, start=1):
        base = 2.0 * 2 ** (attempt - 1)
        assert base <= delay <= base * 1.5, waited
    assert len([c for c in result.called("apt-get") if "update" in c]) == 4, result.commands()


@needs_sandbox
def test_packages_wait_out_a_held_dpkg_lock_and_failed_installs(dev, tmp_path):
    """unattended-upgrades holds the dpkg lock for 2 s (20 s here) and the install fails twice
    (a mirror mid-sync): the kube-tools step waits for the lock and retries the install."""
    sb = scaled_host(tmp_path)
    sb.write("/etc/os-release", 'NAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\n')
    for pkg in ("kubelet", "kubeadm", "kubectl", "cri-tools"):
        sb.apt_available(pkg, "1.35.0-1.1", "1.35.1-1.1")
    sb.hold_apt_lock(2)
    sb.state("apt-get.fail.install", 2)
    result = sb.run_registered(step_program(dev, "dev-gpu-kube-tools"), timeout=120)
    assert result.returncode == 0, result.stderr
    assert sb.installed("kubeadm") == "1.35.1-1.1"
    assert len([c for c in result.called("apt-get") if "install" in c]) == 3, result.commands()


@needs_sandbox
def test_an_interrupted_dpkg_is_finished_within_its_bound(dev, tmp_path):
    """A killed step left dpkg's journal; `dpkg --configure -a` runs its maintainer scripts for
    minutes (a DKMS build: 2 s here, the clock not scaled) well inside the 900 s bound, and the
    kube-tools step installs after it."""
    sb = Sandbox(tmp_path)
    sb.write("/etc/os-release", 'NAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\n')
    for pkg in ("kubelet", "kubeadm", "kubectl", "cri-tools"):
        sb.apt_available(pkg, "1.35.0-1.1", "1.35.1-1.1")
    sb.write("/var/lib/dpkg/updates/0001", "Package: kubelet\nStatus: install ok unpacked\n")
    sb.state("dpkg.configure-seconds", 2)
    result = sb.run_registered(step_program(dev, "dev-gpu-kube-tools"), timeout=120)
    assert result.returncode == 0, result.stderr
    assert len(result.called("dpkg")) == 1
    assert sb.installed("kubeadm") == "1.35.1-1.1"


@needs_sandbox
def test_the_repair_of_an_interrupted_dpkg_waits_out_a_held_lock(dev, tmp_path):
    """A killed step left dpkg's journal and unattended-upgrades holds dpkg's lock for 2 s (20 s
    here): dpkg fails at once while it is held, so the kube-tools step tries the repair again
    every 5 s until the lock is free, then installs."""
    sb = scaled_host(tmp_path)
    sb.write("/etc/os-release", 'NAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\n')
    for pkg in ("kubelet", "kubeadm", "kubectl", "cri-tools"):
        sb.apt_available(pkg, "1.35.0-1.1", "1.35.1-1.1")
    sb.write("/var/lib/dpkg/updates/0001", "Package: kubelet\nStatus: install ok unpacked\n")
    sb.hold_apt_lock(2)
    result = sb.run_registered(step_program(dev, "dev-gpu-kube-tools"), timeout=120)
    assert result.returncode == 0, result.stderr
    assert "another package manager holds dpkg's lock: waiting for it (at most 600s)" in (
        result.stderr
    )
    polls = [s for s in sleeps(sb) if s == 5]
    assert len(result.called("dpkg")) == len(polls) + 1 >= 2, (result.commands(), sleeps(sb))
    assert sb.installed("kubeadm") == "1.35.1-1.1"


@needs_sandbox
@pytest.mark.parametrize(
    ("minor", "message"),
    [
        ("1.32", "kubeadm 1.32 would join an API server of 1.35: kubeadm join needs the"),
        ("1.31", "kubelet 1.31 would be more than 3 minors older than the API server 1.35"),
    ],
)
def test_skew_check_allows_the_kubelet_lag_kubernetes_supports(tmp_path, minor, message):
    """Kubernetes' version skew policy: a kubelet may be up to three minors older than the API
    server (kubernetes.io/releases/version-skew-policy/#kubelet), not four; within that, kubeadm
    still needs the cluster's own minor, and the message says which rule refused."""
    sb = cluster(with_kube_packages(Sandbox(tmp_path)), "v1.35.1")
    result = sb.run("check-version-skew.sh", {"KUBERNETES_MINOR": minor})
    assert result.returncode == 1, result.stderr
    assert message in result.stderr, result.stderr

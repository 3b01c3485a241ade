"""Host scripts run exactly as the program registers them (the stdin and the delete of its host
steps in the dev stack, run by digest from the host's copy of its scripts), so the defaults a
script falls back to when the program passes nothing are the ones under test, against stubs that
take the time the real commands take.

A test that overrides a default (RETRY_BASE_SECONDS=0.01 for speed) never sees what production
runs. Here the clock is scaled instead: the sleep stub records what a script asked for and sleeps
a thousandth of it (state sleep.scale), so a minute of backoff costs milliseconds.
"""

from __future__ import annotations

import pytest

from components.hosts import pins
from components.hosts.rendering import COMMON_LIB, render_script, stripped_script
from tests.helpers.gpu_host import CONTAINERD, CTK_PACKAGES, UBUNTU_2404
from tests.helpers.scripts import step_program
from tests.sandbox import Sandbox, needs_sandbox
from tools.harness.graph import unwrap
from tools.harness.stacks import run_program

pytestmark = needs_sandbox

NODE = "dev-gpu-a10g-0"
CLOCK_SCALE = "0.001"


@pytest.fixture(scope="module")
def dev_graph():
    return run_program("dev")


def delete_program(graph, name: str) -> str:
    """The program a host step runs on delete: the heredoc body of `sudo bash -s <<'MARKER'`."""
    delete = unwrap(graph.named(name).inputs["delete"])
    first, _, rest = delete.partition("\n")
    marker = first.rsplit("<<", 1)[1].strip("'\"")
    body, _, _ = rest.rpartition(f"\n{marker}")
    return body


def library_only(program: str) -> str:
    """A step's stdin with lib/common.sh in place of its script: the step's real inputs and the
    library every program starts with."""
    head, sep, _ = program.partition("STEP_BUNDLE=")
    assert sep, "not a step's stdin"
    return head + stripped_script(COMMON_LIB)


def requested_sleeps(sandbox: Sandbox) -> list[float]:
    return [float(s) for s in (sandbox.state("sleep.requested") or "").split()]


@pytest.fixture
def host(tmp_path) -> Sandbox:
    """A GPU host of the dev stack's pool: Ubuntu 24.04, the pinned toolkit in the repository,
    a scaled clock."""
    sb = Sandbox(tmp_path)
    sb.write("/etc/os-release", UBUNTU_2404)
    sb.state("sleep.scale", CLOCK_SCALE)
    sb.apt_available("containerd.io", CONTAINERD)  # the release pinned by components/hosts/pins.py
    sb.state("apt.source/containerd.io", "/etc/apt/sources.list.d/docker.list")
    return sb


def test_reset_waits_for_a_kubeadm_reset_that_takes_seconds(host):
    """reset-node.sh run with no inputs (as an operator runs it on a host leaving the cluster):
    its own RESET_TIMEOUT_SECONDS is what bounds it. A real `kubeadm reset` stops every
    container and unmounts their volumes: seconds, not zero."""
    program = render_script("reset-node.sh", {})
    host.state("dpkg/kubeadm", "1.35.1-1.1")
    host.state("systemd/kubelet.active", "yes")
    host.write("/etc/kubernetes/kubelet.conf", "apiVersion: v1\n")
    host.state("kubeadm.seconds.reset", 2)
    (host.state_dir / "sleep.scale").unlink()  # real seconds: the bound is a wall-clock timeout
    result = host.run_text(program)
    assert result.returncode == 0, (
        "a kubeadm reset of 2 s was cut short: every scale-down and destroy would fail\n"
        + result.stderr
    )
    assert result.called("kubeadm", "reset", "-f"), result.commands()
    assert not host.exists("/etc/kubernetes/kubelet.conf")


def test_retry_backoff_grows_to_a_minute_in_production(dev_graph, host):
    """With the inputs the program renders, retry() waits 2, 4, 8, ... s (plus up to 50% jitter)
    and caps a single wait at 60 s: a mirror that is down for minutes is waited out, and a
    retry loop never sleeps for hours."""
    program = library_only(step_program(dev_graph, f"{NODE}-runtime"))
    result = host.run_text(program + "init_script probe\nretry 8 false\necho went-on\n")
    # Out of attempts, retry stops the step, naming the command and how often it failed.
    assert result.returncode == 1, result.stderr
    assert "went-on" not in result.stdout, result.stdout
    assert "[probe] FAILED: step 0/0 (setup): 'false' failed 8 times (last exit 1)" in (
        result.stderr
    ), result.stderr
    sleeps = requested_sleeps(host)
    assert len(sleeps) == 7, sleeps
    for attempt, slept in enumerate(sleeps, start=1):
        base = min(2 * 2 ** (attempt - 1), 60)
        assert base <= slept <= base * 1.5, (
            f"retry {attempt} waited {slept}s, production backoff is {base}s plus jitter: {sleeps}"
        )
    assert max(sleeps) <= 90, f"a single retry waits more than the 60 s cap: {sleeps}"


def test_download_failing_for_longer_than_one_retry_is_waited_out(dev_graph, host):
    """The NVIDIA key download of the runtime step fails for half a minute of production time
    (4 failures with the default backoff), then works: the step succeeds."""
    program = step_program(dev_graph, f"{NODE}-runtime")
    host.state("curl.fail", 4)
    for pkg in CTK_PACKAGES:
        host.apt_available(pkg, pins.NVIDIA_CTK_VERSION)
    result = host.run_registered(program)
    assert result.returncode == 0, result.stderr
    # WITH_NVIDIA_TOOLKIT is left to its default on GPU nodes: the toolkit is what this step
    # installs there (its key is the download above).
    assert host.installed("nvidia-container-toolkit") == pins.NVIDIA_CTK_VERSION
    # Docker's key first (containerd.io): it takes the 4 failures; then NVIDIA's.
    assert len(result.called("curl")) == 6, result.commands()
    sleeps = requested_sleeps(host)
    assert len(sleeps) == 4, sleeps
    assert sum(sleeps) >= 30, f"the download gave up on an outage of {sum(sleeps):.1f}s: {sleeps}"

"""The scripts only a baked-image builder runs, for real in the sandbox: pull the node's first
container images, prepare the host for the snapshot, power it off afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.hosts.rendering import render_script
from tests.sandbox import Sandbox, needs_sandbox

pytestmark = needs_sandbox

PLUGIN = "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"
SAMPLE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"


# The builder's login user, with a home on an overlaid directory of the sandbox.
BUILDER_HOME = "/var/lib/gpu-cluster-test-builder"
BUILDER_KEYS = f"{BUILDER_HOME}/.ssh/authorized_keys"
STACK_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIStackStackStackStackStackStackStackStackSt ops"
PREPARE = {"IMAGE_DIGEST": "abc123", "SSH_USER": "builder"}


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    sb = Sandbox(tmp_path)
    passwd = Path("/etc/passwd").read_text(encoding="utf-8")
    sb.write("/etc/passwd", passwd + f"builder:x:4243:4243::{BUILDER_HOME}:/bin/bash\n")
    sb.write(BUILDER_KEYS, f"{STACK_KEY}\n", mode=0o600)
    # Every host has one, and prepare-image.sh empties it: put it on the sandboxed host first
    # (without root the real /etc/machine-id belongs to no user of the sandbox's namespace).
    sb.write("/etc/machine-id", "0123456789abcdef0123456789abcdef\n", mode=0o444)
    return sb


def test_pull_images_pulls_what_is_missing_once(sandbox):
    sandbox.state("ctr.images", f"{SAMPLE}\n")
    first = sandbox.run("pull-images.sh", {"IMAGES": f"{PLUGIN} {SAMPLE}"})
    assert first.returncode == 0, first.output
    assert first.called("ctr", "--namespace", "k8s.io", "images", "pull", PLUGIN)
    assert not first.called("ctr", "--namespace", "k8s.io", "images", "pull", SAMPLE)
    again = sandbox.run("pull-images.sh", {"IMAGES": f"{PLUGIN} {SAMPLE}"})
    assert again.returncode == 0, again.output
    assert not [c for c in again.calls if "pull" in c], again.commands()


def test_pull_images_retries_then_names_the_image_it_could_not_get(sandbox):
    sandbox.state("ctr.fail.pull", 1)
    retried = sandbox.run("pull-images.sh", {"IMAGES": PLUGIN, "RETRY_BASE_SECONDS": "0"})
    assert retried.returncode == 0, retried.output
    assert len(retried.called("ctr", "--namespace", "k8s.io", "images", "pull", PLUGIN)) == 2
    sandbox.state("ctr.fail.pull", 9)
    failed = sandbox.run("pull-images.sh", {"IMAGES": SAMPLE, "RETRY_BASE_SECONDS": "0"})
    assert failed.returncode != 0
    assert "pull-images" in failed.stderr and SAMPLE in failed.stderr, failed.stderr


def test_pull_images_refuses_an_unpinned_reference_before_pulling(sandbox):
    result = sandbox.run("pull-images.sh", {"IMAGES": "nvcr.io/nvidia/k8s-device-plugin"})
    assert result.returncode != 0
    assert "no tag or digest" in result.stderr, result.stderr
    assert not result.called("ctr")


def test_prepare_image_leaves_a_host_every_clone_boots_as_a_new_machine(sandbox):
    sandbox.write("/etc/ssh/ssh_host_ed25519_key", "host key\n", 0o600)
    sandbox.state("systemd/containerd.active", "yes")
    result = sandbox.run("prepare-image.sh", PREPARE)
    assert result.returncode == 0, result.output
    assert sandbox.read("/etc/gpu-cluster/image") == "image=abc123\n"
    assert sandbox.read("/etc/machine-id") == ""
    # The power-off step dials the builder after this one: sshd must still have its host key
    # (clones replace it through cloud-init, components/hosts/host_keys.py).
    assert sandbox.read("/etc/ssh/ssh_host_ed25519_key") == "host key\n"
    assert result.called("cloud-init", "clean", "--logs")
    assert result.called("systemctl", "stop", "containerd")
    assert not sandbox.service_active("containerd")


def test_prepare_image_needs_its_digest_before_touching_anything(sandbox):
    result = sandbox.run("prepare-image.sh", {})
    assert result.returncode != 0
    assert "IMAGE_DIGEST" in result.stderr and "SSH_USER" in result.stderr
    assert not result.calls


def test_the_builders_login_key_stays_out_of_the_image_and_keeps_working(sandbox):
    """Images are shared by the stacks of an account: the building stack's key must not be in
    one. On disk the file is empty (what the snapshot holds); the builder's sshd still reads the
    key (served from a tmpfs over it) for the power-off step; a second run in the same boot
    changes nothing."""
    program = render_script("prepare-image.sh", PREPARE)
    after = (
        f'echo "seen: $(cat {BUILDER_KEYS})"\n'
        f'echo "on: $(findmnt --noheadings --output FSTYPE --target {BUILDER_KEYS})"\n'
    )
    result = sandbox.run_text(program + after + "main\n" + after)
    assert result.returncode == 0, result.output
    assert sandbox.read(BUILDER_KEYS) == ""
    seen = [line for line in result.stdout.splitlines() if line.startswith(("seen:", "on:"))]
    assert seen == [f"seen: {STACK_KEY}", "on: tmpfs"] * 2, result.stdout
    assert "already served from memory" in result.stderr, result.stderr


def test_prepare_image_without_a_login_key_has_nothing_to_keep_out(sandbox):
    sandbox.write(BUILDER_KEYS, "", mode=0o600)
    result = sandbox.run("prepare-image.sh", PREPARE)
    assert result.returncode == 0, result.output
    assert "no login key to keep out of the image" in result.stderr


def test_prepare_image_names_a_login_user_it_cannot_find(sandbox):
    result = sandbox.run("prepare-image.sh", {**PREPARE, "SSH_USER": "nobody-here"})
    assert result.returncode != 0
    assert "user nobody-here expected with a home directory" in result.stderr, result.stderr
    assert "prepare-image" in result.stderr


def test_power_off_schedules_a_poweroff_the_session_survives(sandbox):
    result = sandbox.run("power-off-builder.sh", {})
    assert result.returncode == 0, result.output
    [call] = result.called("systemd-run")
    assert "--on-active=5" in call and call[-2:] == ["systemctl", "poweroff"], call
    assert not result.called("systemctl", "poweroff")


def test_pull_images_fails_when_a_pulled_image_is_not_kept(sandbox):
    """ctr reported the pull done, but the image is not in containerd afterwards (its content
    collected, a prune meanwhile): the image would be baked without it."""
    sandbox.state("ctr.pull-not-kept", "yes")
    result = sandbox.run("pull-images.sh", {"IMAGES": PLUGIN})
    assert result.called("ctr", "--namespace", "k8s.io", "images", "pull", PLUGIN)
    assert result.returncode == 1, result.output
    assert (
        f"FAILED: image {PLUGIN} expected in containerd (namespace k8s.io) after its pull, not "
        "found" in result.stderr
    ), result.stderr


def test_power_off_refuses_a_delay_that_is_not_whole_seconds(sandbox):
    result = sandbox.run("power-off-builder.sh", {"POWER_OFF_DELAY_SECONDS": "5s"})
    assert result.returncode == 1, result.output
    assert "FAILED: POWER_OFF_DELAY_SECONDS must be a whole number, got '5s'" in result.stderr
    assert not result.called("systemd-run"), result.commands()


FLANNEL = "ghcr.io/flannel-io/flannel:v0.27.4"
KUBEADM_1_35 = [
    "registry.k8s.io/kube-apiserver:v1.35.1",
    "registry.k8s.io/kube-controller-manager:v1.35.1",
    "registry.k8s.io/kube-scheduler:v1.35.1",
    "registry.k8s.io/kube-proxy:v1.35.1",
    "registry.k8s.io/coredns/coredns:v1.12.1",
    "registry.k8s.io/pause:3.10.1",
    "registry.k8s.io/etcd:3.6.5-0",
]


def test_pull_images_with_kubeadm_images_pulls_what_kubeadm_init_runs_once(sandbox):
    """A control-plane image: the images the installed kubeadm lists for its own version join
    IMAGES, pulled into containerd's k8s.io namespace; a second run pulls nothing."""
    sandbox.state("dpkg/kubeadm", "1.35.1-1.1")
    sandbox.state("ctr.images", "registry.k8s.io/pause:3.10.1\n")
    params = {"IMAGES": FLANNEL, "KUBEADM_IMAGES": "true"}
    first = sandbox.run("pull-images.sh", params)
    assert first.returncode == 0, first.output
    assert first.called("kubeadm", "config", "images", "list", "--kubernetes-version", "v1.35.1")
    for ref in [FLANNEL, *KUBEADM_1_35]:
        pulled = first.called("ctr", "--namespace", "k8s.io", "images", "pull", ref)
        assert len(pulled) == (0 if ref.endswith("pause:3.10.1") else 1), (ref, first.commands())
    assert set(sandbox.state("ctr.images").split()) == {FLANNEL, *KUBEADM_1_35}
    again = sandbox.run("pull-images.sh", params)
    assert again.returncode == 0, again.output
    assert not [c for c in again.calls if "pull" in c], again.commands()


def test_pull_images_without_kubeadm_images_never_asks_kubeadm(sandbox):
    result = sandbox.run("pull-images.sh", {"IMAGES": PLUGIN})
    assert result.returncode == 0, result.output
    assert not result.called("kubeadm"), result.commands()


def test_pull_images_with_kubeadm_images_needs_kubeadm_installed(sandbox):
    result = sandbox.run("pull-images.sh", {"IMAGES": FLANNEL, "KUBEADM_IMAGES": "true"})
    assert result.returncode == 1, result.output
    assert (
        "FAILED: KUBEADM_IMAGES=true needs kubeadm, and 'kubeadm version' failed; run "
        "install-kube-tools.sh before this step" in result.stderr
    ), result.stderr
    assert not result.called("ctr", "--namespace", "k8s.io", "images", "pull", FLANNEL)


def test_pull_images_names_kubeadm_when_it_cannot_list_its_images(sandbox):
    sandbox.state("dpkg/kubeadm", "1.35.1-1.1")
    sandbox.state("kubeadm.fail.config", 1)
    result = sandbox.run("pull-images.sh", {"IMAGES": FLANNEL, "KUBEADM_IMAGES": "true"})
    assert result.returncode == 1, result.output
    assert (
        "FAILED: kubeadm v1.35.1 could not list its images; look at 'kubeadm config images list'"
        in result.stderr
    ), result.stderr
    assert not result.called("ctr", "--namespace", "k8s.io", "images", "pull", FLANNEL)


def test_pull_images_refuses_a_kubeadm_images_that_is_not_a_boolean(sandbox):
    result = sandbox.run("pull-images.sh", {"IMAGES": FLANNEL, "KUBEADM_IMAGES": "yes"})
    assert result.returncode == 1, result.output
    assert "FAILED: KUBEADM_IMAGES must be true or false, got 'yes'" in result.stderr
    assert not result.calls, result.commands()

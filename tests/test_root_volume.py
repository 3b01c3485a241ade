"""A grown root volume is grown into: `rootVolumeGiB` raised on a running node is an in-place
update of its volume (terraform-provider-aws ec2_instance.go: root_block_device.volume_size,
EBS ModifyVolume), and the node's wait-ready step, whose parameters hold the size, runs again
and grows the partition and the filesystem online once the disk shows the size (cloud-init's
growpart runs at boot only). Run for real in the script sandbox, with growpart and resize2fs
as stubs over a simulated disk (tests/stubs/lsblk)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sandbox import Sandbox, needs_sandbox
from tools import lifecycle
from tools.harness.graph import script_params
from tools.harness.stacks import run_program, stack_file

GIB = 1024**3
UBUNTU_2404 = 'ID=ubuntu\nVERSION_ID="24.04"\n'
FAST = {"RETRY_BASE_SECONDS": "0.01", "APT_DAILY_POLL_SECONDS": "0"}


@pytest.fixture
def host(tmp_path: Path) -> Sandbox:
    """A node whose 50 GiB root volume was just modified to 200 GiB."""
    sandbox = Sandbox(tmp_path)
    sandbox.write("/etc/os-release", UBUNTU_2404)
    sandbox.state("disk/disk-bytes", 50 * GIB)
    sandbox.state("disk/part-bytes", 50 * GIB - 1024**2)
    sandbox.state("disk/fs-bytes", 49 * GIB)
    sandbox.state("disk/disk-bytes.next", 200 * GIB)
    sandbox.state("sleep.scale", "0.01")
    return sandbox


def _filesystem_gib(host: Sandbox) -> float:
    return int(host.state("disk/fs-bytes")) / GIB


@needs_sandbox
def test_the_filesystem_grows_once_the_disk_shows_the_new_size(host):
    host.state("disk/grown-after", 2)  # EBS applies the modification a little later
    result = host.run("wait-ready.sh", {"ROOT_VOLUME_GIB": "200", **FAST})
    assert result.returncode == 0, result.stderr
    assert result.called("growpart", "/dev/nvme0n1", "1"), result.commands()
    assert result.called("resize2fs", "/dev/nvme0n1p1"), result.commands()
    assert _filesystem_gib(host) > 190, host.state("disk/fs-bytes")
    assert "waiting for /dev/nvme0n1 to show 200 GiB" in result.stderr


@needs_sandbox
def test_a_second_run_grows_nothing(host):
    assert host.run("wait-ready.sh", {"ROOT_VOLUME_GIB": "200", **FAST}).returncode == 0
    again = host.run("wait-ready.sh", {"ROOT_VOLUME_GIB": "200", **FAST})
    assert again.returncode == 0, again.stderr
    assert not again.called("growpart") and not again.called("resize2fs"), again.commands()
    assert "already fills /dev/nvme0n1" in again.stderr


@needs_sandbox
def test_a_disk_that_never_shows_the_size_fails_naming_what_to_look_at(host):
    host.state("disk/grown-after", 1000)
    result = host.run(
        "wait-ready.sh", {"ROOT_VOLUME_GIB": "200", "ROOT_GROW_TIMEOUT_SECONDS": "0", **FAST}
    )
    assert result.returncode != 0
    assert "FAILED: /dev/nvme0n1 is 50 GiB after 0s, 200 GiB expected (rootVolumeGiB)" in (
        result.stderr
    ), result.stderr
    assert "describe-volumes-modifications" in result.stderr
    assert not result.called("growpart"), result.commands()


@needs_sandbox
def test_a_bad_size_is_refused_before_anything_is_touched(host):
    result = host.run("wait-ready.sh", {"ROOT_VOLUME_GIB": "200G", **FAST})
    assert result.returncode != 0
    assert "ROOT_VOLUME_GIB must be a size in GiB, got '200G'" in result.stderr
    assert not result.called("cloud-init"), result.commands()


def test_a_larger_root_volume_updates_the_machine_and_re_runs_wait_ready():
    before = run_program("dev")
    pools = [dict(pool) for pool in stack_file("dev")["gpu-cluster:nodePools"]]
    pools[0]["rootVolumeGiB"] += 100
    after = run_program("dev", config={"nodePools": pools})
    plan = lifecycle.plan(before, after)
    node = lifecycle.node_names(after)[0]
    assert plan.named(node).action is lifecycle.Action.UPDATE, lifecycle.render(plan)
    wait_ready = plan.named(f"{node}-wait-ready")
    assert wait_ready.action is lifecycle.Action.RERUN, lifecycle.render(plan)
    assert script_params(after.named(wait_ready.name))["ROOT_VOLUME_GIB"] == str(
        pools[0]["rootVolumeGiB"]
    )
    assert plan.nodes[node].summary() == "untouched", plan.nodes[node]


@needs_sandbox
def test_a_growpart_failure_fails_the_step_with_its_message(host):
    host.state("growpart.fail", 1)
    result = host.run("wait-ready.sh", {"ROOT_VOLUME_GIB": "200", **FAST})
    assert result.returncode != 0
    assert "growpart /dev/nvme0n1 1 failed (exit 2): FAILED: sfdisk" in result.stderr, result.stderr
    assert not result.called("resize2fs"), result.commands()


@needs_sandbox
def test_a_root_filesystem_that_cannot_be_grown_is_named(host):
    host.state("disk/fstype", "btrfs")
    result = host.run("wait-ready.sh", {"ROOT_VOLUME_GIB": "200", **FAST})
    assert result.returncode != 0
    assert "root filesystem /dev/nvme0n1p1 is btrfs: only ext4 and xfs are grown" in result.stderr


@needs_sandbox
def test_a_root_filesystem_off_a_partition_is_named(host):
    host.state("disk/root", "/dev/mapper/vg-root")
    result = host.run("wait-ready.sh", {"ROOT_VOLUME_GIB": "200", **FAST})
    assert result.returncode != 0
    assert "is not on a partition of a disk (lsblk found" in result.stderr, result.stderr

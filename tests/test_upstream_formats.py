"""The formats the real tools write, and the stubs and readers held to them (issue 39).

tests/upstream/ holds output containerd 2.2.1, containerd 1.7.28 and nvidia-ctk 1.20.0
generated (its README says how). The stubs must write those bytes for the same input, and the
hosts' TOML reader (lib/common.sh `toml_read`, tomllib, or tomli on Ubuntu 22.04) must read every
spelling: go-toml v2's 'single quotes' (containerd 2.x), go-toml v1's "double quotes"
(containerd 1.7, nvidia-ctk) and the config as install-runtime.sh writes it.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from components.hosts import pins
from components.hosts.rendering import SCRIPTS_DIR
from tests.helpers.archive import Archive, gpu_host, installed
from tests.sandbox import STUBS_DIR, Sandbox, needs_sandbox

UPSTREAM = STUBS_DIR.parent / "upstream"
CTD = UPSTREAM / "containerd-2.2.1"
CTK = UPSTREAM / "nvidia-ctk-1.20.0"
CTD_17 = UPSTREAM / "containerd-1.7.28"
CONFIG = "/etc/containerd/config.toml"
DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
FAST = {"RETRY_BASE_SECONDS": "0.01"}
# The reader on Ubuntu 22.04: no tomllib, tomli from python3-tomli (tests/stubs/python3).
PYTHON_310 = f"{STUBS_DIR}/_python3.10/hide:{STUBS_DIR}/_python3.10"


def runtime(release: str = "24.04") -> dict[str, str]:
    return {**pins.runtime_params(release, "1.35", with_toolkit=True), **FAST}


def toml_read(*args: str, pythonpath: str | None = None) -> str:
    """lib/common.sh `toml_read` as a host runs it (bash, python3)."""
    env = {**os.environ, **({"PYTHONPATH": pythonpath} if pythonpath else {})}
    run = subprocess.run(
        ["bash", "-c", f'source "{SCRIPTS_DIR}/lib/common.sh" && toml_read "$@"', "toml", *args],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return run.stdout.strip()


# ---- the stubs write what the tools wrote ----------------------------------------------------


@needs_sandbox
@pytest.mark.parametrize(
    ("files", "dump"),
    [
        ({CONFIG: CTK / "config-before.toml"}, CTD / "config-dump-without-toolkit.toml"),
        (
            {CONFIG: CTK / "config-after.toml", DROP_IN: CTK / "99-nvidia.toml"},
            CTD / "config-dump-with-toolkit.toml",
        ),
    ],
    ids=["without-toolkit", "with-toolkit"],
)
def test_the_containerd_stub_dumps_what_containerd_2_2_1_dumped(tmp_path, files, dump):
    host = Sandbox(tmp_path)
    host.state("dpkg/containerd.io", pins.CONTAINERD_VERSIONS["24.04"])
    for path, source in files.items():
        host.write(path, source.read_text())
    result = host.run_text("containerd config dump")
    assert result.returncode == 0, result.stderr
    assert result.stdout == dump.read_text()
    default = host.run_text("containerd config default")
    assert default.stdout == (CTD / "config-default.toml").read_text()


@needs_sandbox
def test_the_nvidia_ctk_stub_writes_what_nvidia_ctk_1_20_0_wrote(tmp_path):
    host = Sandbox(tmp_path)
    host.state("dpkg/nvidia-container-toolkit", pins.NVIDIA_CTK_VERSION)
    host.write(CONFIG, (CTK / "config-before.toml").read_text())
    command = (
        "nvidia-ctk runtime configure --runtime=containerd --set-as-default "
        f"--config={CONFIG} --drop-in-config={DROP_IN}\n"
        "nvidia-ctk config --config-file=/etc/nvidia-container-runtime/config.toml --in-place "
        "--set accept-nvidia-visible-devices-envvar-when-unprivileged=false "
        "--set accept-nvidia-visible-devices-as-volume-mounts=true\n"
    )
    for _ in range(2):  # the second run writes the same again
        result = host.run_text(command)
        assert result.returncode == 0, result.stderr
        assert host.read(CONFIG) == (CTK / "config-after.toml").read_text()
        assert host.read(DROP_IN) == (CTK / "99-nvidia.toml").read_text()
        toolkit = host.read("/etc/nvidia-container-runtime/config.toml")
        assert toolkit == (CTK / "toolkit-config.toml").read_text()
    assert 'level=info msg="Wrote updated config to /etc/containerd/conf.d/99-nvidia.toml"' in (
        result.stderr
    )


# ---- the hosts read every spelling -------------------------------------------------------------

CRI = ("plugins", "io.containerd.cri.v1.runtime", "containerd")
SAMPLES = [
    # (file, key path, the value as JSON)
    (CTD / "config-dump-with-toolkit.toml", (*CRI, "default_runtime_name"), '"nvidia"'),
    (
        CTD / "config-dump-with-toolkit.toml",
        (*CRI, "runtimes", "nvidia", "options", "SystemdCgroup"),
        "true",
    ),
    (
        CTD / "config-dump-without-toolkit.toml",
        ("plugins", "io.containerd.cri.v1.images", "pinned_images", "sandbox"),
        '"registry.k8s.io/pause:3.10.1"',
    ),
    (
        CTD / "config-dump-without-toolkit.toml",
        ("timeouts", "io.containerd.timeout.shim.load"),
        '"5s"',
    ),
    (CTD / "config-dump-without-toolkit.toml", (*CRI, "runtimes", "nvidia"), ""),
    (CTK / "config-after.toml", ("imports",), '["/etc/containerd/conf.d/*.toml"]'),
    (
        CTK / "99-nvidia.toml",
        (*CRI, "runtimes", "nvidia", "options", "BinaryName"),
        '"/usr/bin/nvidia-container-runtime"',
    ),
    (CTK / "config-before.toml", (*CRI, "runtimes", "runc", "options", "SystemdCgroup"), "true"),
    (
        CTK / "toolkit-config.toml",
        ("accept-nvidia-visible-devices-envvar-when-unprivileged",),
        "false",
    ),
    (
        CTD_17 / "config-dump.toml",
        (
            "plugins",
            "io.containerd.grpc.v1.cri",
            "containerd",
            "runtimes",
            "runc",
            "options",
            "SystemdCgroup",
        ),
        "true",
    ),
    (
        CTD_17 / "config-dump.toml",
        ("plugins", "io.containerd.grpc.v1.cri", "sandbox_image"),
        '"registry.k8s.io/pause:3.10.1"',
    ),
]


@pytest.mark.parametrize("pythonpath", [None, PYTHON_310], ids=["tomllib", "tomli"])
@pytest.mark.parametrize(("path", "keys", "value"), SAMPLES, ids=lambda v: getattr(v, "name", None))
def test_the_hosts_read_every_spelling_with_a_toml_parser(path, keys, value, pythonpath):
    assert toml_read("get", str(path), *keys, pythonpath=pythonpath) == value


def test_two_spellings_of_one_config_read_the_same():
    """What install-runtime.sh wrote and nvidia-ctk's rewrite of it are one config."""
    before = toml_read("canonical", str(CTK / "config-before.toml"))
    assert before == toml_read("canonical", str(CTK / "config-after.toml"))
    assert json.loads(before)["version"] == 3


def test_text_that_is_not_toml_fails_naming_the_file(tmp_path):
    bad = tmp_path / "config.toml"
    bad.write_text("[plugins\n")
    run = subprocess.run(
        ["bash", "-c", f'source "{SCRIPTS_DIR}/lib/common.sh" && toml_read get "$1" a', "t", bad],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 1
    assert f"cannot read {bad} as TOML" in run.stderr


# ---- the runtime step passes against containerd 2.x's spelling ---------------------------------


@needs_sandbox
@pytest.mark.parametrize("release", ["24.04", "22.04"])
def test_the_runtime_step_passes_against_what_containerd_2_prints(tmp_path, release):
    """Issue 39, finding 1: `containerd config dump` prints 'single quotes'; the step reads it
    with a parser (on 22.04 python3 3.10 has no tomllib: python3-tomli is installed)."""
    host = gpu_host(Sandbox(tmp_path), release)
    Archive.today(host, release)
    result = host.run("install-runtime.sh", runtime(release))
    assert result.returncode == 0, result.stderr
    dump = host.run_text("containerd config dump").stdout
    assert "      default_runtime_name = 'nvidia'\n" in dump
    assert "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia.options]" in dump
    assert "containerd active, nvidia is the default runtime, GPUs only on request" in result.stderr
    assert ("python3-tomli" in installed(host)) == (release == "22.04")


@needs_sandbox
def test_the_control_planes_runtime_step_passes_against_what_containerd_2_prints(tmp_path):
    host = gpu_host(Sandbox(tmp_path))
    Archive.today(host)
    params = {**pins.runtime_params("24.04", "1.35", with_toolkit=False), **FAST}
    result = host.run("install-runtime.sh", params)
    assert result.returncode == 0, result.stderr
    assert "containerd active, systemd cgroups, sandbox registry.k8s.io/pause:3.10.1" in (
        result.stderr
    )

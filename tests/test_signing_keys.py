"""Every third-party apt repository is trusted by the fingerprint its publisher documents, and
its keyring is fetched again when the key on file expired or is another (issue 39, finding 8):
pkgs.k8s.io's key expired once (kubernetes/release#3818) and was extended, so a keyring fetched
before stops verifying the repository. lib/common.sh `add_signed_apt_repo`, `primary_key`."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from components.hosts import pins
from components.hosts.rendering import SCRIPTS_DIR
from tests.helpers.archive import Archive, gpu_host
from tests.helpers.tools import require_tool
from tests.sandbox import STUBS_DIR, Sandbox, needs_sandbox

GNUPG = STUBS_DIR.parent / "upstream" / "gnupg-2.2.40"
FAST = {"RETRY_BASE_SECONDS": "0.01"}
KUBE = {"KUBERNETES_MINOR": "1.35", **FAST}
RUNTIME = {**pins.runtime_params("24.04", "1.35", with_toolkit=True), **FAST}
K8S_KEY = "https://pkgs.k8s.io/core:/stable:/v1.35/deb/Release.key"
K8S_FPR = "DE15B14486CD377B9E876E1A234654DA9A296436"
K8S_KEYRING = "/etc/apt/keyrings/kubernetes-apt-keyring.gpg"
NVIDIA_KEY = "https://nvidia.github.io/libnvidia-container/gpgkey"
NVIDIA_FPR = "C95B321B61E88C1809C4F759DDCAE044F796ECB0"
NVIDIA_KEYRING = "/etc/apt/keyrings/nvidia-container-toolkit.gpg"
OTHER_FPR = "0123456789ABCDEF0123456789ABCDEF01234567"


@pytest.fixture
def host(tmp_path: Path) -> Sandbox:
    sb = gpu_host(Sandbox(tmp_path))
    Archive.today(sb)
    return sb


def key(fingerprint: str, expires: int | None = None) -> str:
    """An armored key as the curl stub serves it (tests/stubs/gpg reads these lines)."""
    lines = ["-----BEGIN PGP PUBLIC KEY BLOCK-----", f"stub key fingerprint {fingerprint}"]
    if expires is not None:
        lines.append(f"stub key expires {expires}")
    return "\n".join([*lines, "-----END PGP PUBLIC KEY BLOCK-----", ""])


def fetched(result) -> list[str]:
    return [call[-1] for call in result.called("curl")]


@needs_sandbox
@pytest.mark.parametrize(
    ("script", "params", "url", "fingerprint", "served_as"),
    [
        ("install-kube-tools.sh", KUBE, K8S_KEY, K8S_FPR, "Release.key"),
        ("install-runtime.sh", RUNTIME, NVIDIA_KEY, NVIDIA_FPR, "gpgkey"),
    ],
    ids=["pkgs.k8s.io", "nvidia-container-toolkit"],
)
def test_a_key_that_is_not_the_publishers_is_never_trusted(
    host, script, params, url, fingerprint, served_as
):
    host.state(f"curl.body.{served_as}", key(OTHER_FPR))
    result = host.run(script, params)
    assert result.returncode == 1
    assert (
        f"FAILED: the key at {url} has fingerprint {OTHER_FPR}, {fingerprint} expected: not "
        "trusting it" in result.stderr
    ), result.stderr
    installs = [" ".join(c) for c in result.called("apt-get") if "install" in c]
    assert not any("kubelet" in c or "nvidia-container-toolkit" in c for c in installs)


@needs_sandbox
def test_a_current_keyring_is_not_fetched_again(host):
    assert host.run("install-kube-tools.sh", KUBE).returncode == 0
    again = host.run("install-kube-tools.sh", KUBE)
    assert again.returncode == 0, again.stderr
    assert fetched(again) == []


@needs_sandbox
def test_an_expired_keyring_is_fetched_again_and_the_lists_refreshed(host):
    """The keyring on file holds pkgs.k8s.io's key as it was before its expiry was extended."""
    assert host.run("install-kube-tools.sh", KUBE).returncode == 0
    past, future = int(time.time()) - 86400, int(time.time()) + 365 * 86400
    host.write(K8S_KEYRING, "dearmored keyring\n" + key(K8S_FPR, past))
    host.state("curl.body.Release.key", key(K8S_FPR, future))
    result = host.run("install-kube-tools.sh", KUBE)
    assert result.returncode == 0, result.stderr
    assert f"key {K8S_FPR} expired on " in result.stderr
    assert fetched(result) == [K8S_KEY]
    assert f"stub key expires {future}" in host.read(K8S_KEYRING)
    assert any("update" in call for call in result.called("apt-get"))


@needs_sandbox
def test_wait_ready_renews_an_expired_keyring_before_its_first_update(host):
    """The host has pkgs.k8s.io's list and a keyring whose key expired (an image built before the
    expiry was extended, its lists cleaned): apt would refuse that repository ("is not signed",
    exit 100) at wait-ready's apt-get update, the first of the run, before the step that adds the
    repository renews its key. wait-ready renews it first."""
    assert host.run("install-kube-tools.sh", KUBE).returncode == 0
    past, future = int(time.time()) - 86400, int(time.time()) + 365 * 86400
    host.write(K8S_KEYRING, "dearmored keyring\n" + key(K8S_FPR, past))
    host.state("curl.body.Release.key", key(K8S_FPR, future))
    result = host.run("wait-ready.sh", FAST)
    assert result.returncode == 0, result.stderr
    assert fetched(result) == [K8S_KEY], "the kubernetes list's own minor's key, nothing else"
    assert f"stub key expires {future}" in host.read(K8S_KEYRING)
    commands = result.commands()
    first_update = next(
        i for i, c in enumerate(commands) if c.startswith("apt-get ") and "update" in c
    )
    fetch = next(i for i, c in enumerate(commands) if c.startswith("curl "))
    assert fetch < first_update, commands
    again = host.run("wait-ready.sh", FAST)
    assert fetched(again) == [], "a current keyring is left alone"


@needs_sandbox
def test_a_keyring_holding_another_key_is_replaced(host):
    assert host.run("install-runtime.sh", RUNTIME).returncode == 0
    host.write(NVIDIA_KEYRING, "dearmored keyring\n" + key(OTHER_FPR))
    result = host.run("install-runtime.sh", RUNTIME)
    assert result.returncode == 0, result.stderr
    assert f"{NVIDIA_KEYRING} holds key {OTHER_FPR}, not {NVIDIA_FPR}" in result.stderr
    assert fetched(result) == [NVIDIA_KEY]


@needs_sandbox
def test_a_publisher_serving_only_an_expired_key_stops_the_step_naming_it(host):
    past = int(time.time()) - 86400
    host.state("curl.body.Release.key", key(K8S_FPR, past))
    result = host.run("install-kube-tools.sh", KUBE)
    assert result.returncode == 1
    day = time.strftime("%Y-%m-%d", time.gmtime(past))
    assert (
        f"FAILED: the key at {K8S_KEY} ({K8S_FPR}) expired on {day} and no renewed one is served"
        in result.stderr
    ), result.stderr


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("current.asc", "364B41B460D58D92A7FC42CB51948168528C167A"),
        ("expired.asc", "12F3272C233D3722338E9462A6A77C151AE0D25F 1724457600"),
    ],
)
def test_primary_key_reads_what_real_gpg_lists(tmp_path, name, expected):
    """The reader on the real tool: gpg itself lists the keys (an empty home, as on a host)."""
    require_tool("gpg", "apt-get install gnupg")
    run = subprocess.run(
        [
            "bash",
            "-c",
            f'source "{SCRIPTS_DIR}/lib/common.sh" && primary_key "$1"',
            "k",
            GNUPG / name,
        ],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "GNUPGHOME": str(tmp_path)},
    )
    assert run.stdout.strip() == expected


@pytest.mark.parametrize("name", ["current", "expired"])
def test_the_gpg_stub_lists_keys_as_gpg_does(tmp_path, name):
    """The stub's pub and fpr records have the fields gpg 2.2.40 printed (ids aside)."""
    real = (GNUPG / f"show-keys-{name}.txt").read_text().splitlines()
    fpr = real[1].split(":")[9]
    expires = real[0].split(":")[6]
    served = tmp_path / "key"
    served.write_text(key(fpr, int(expires) if expires else None))
    run = subprocess.run(
        [STUBS_DIR / "gpg", "--batch", "--with-colons", "--show-keys", served],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "STUB_STATE": str(tmp_path)},
    )
    stub = run.stdout.splitlines()
    assert [r.split(":")[0] for r in stub] == [r.split(":")[0] for r in real]
    for index in (1, 4, 6, 11):  # validity, key id, expiry, capabilities
        assert stub[0].split(":")[index] == real[0].split(":")[index], index
    assert stub[1] == real[1]
    assert len(stub[0].split(":")) == len(real[0].split(":"))

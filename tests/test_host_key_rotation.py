"""A host key only its host can use (issue 34, finding 5): the key a machine boots with travels
in its user data, which others can read, so the first contact (`<machine>-host-key-rotation`, a
local Command) checks that key alone, replaces it on the host, and reads back the new public
key, which every later step pins. Checked on the registered graph, on the local script with a
stub ssh, and on the host script in the sandbox with the real ssh-keygen."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from cryptography.hazmat.primitives import serialization

from components.hosts.host_keys import HOST_SCRIPT, LOCAL_SCRIPT
from components.hosts.rendering import script_text, strip_comments
from tests.helpers import graphs as shared
from tests.sandbox import Sandbox, needs_sandbox
from tools.harness import mocks
from tools.harness.graph import Graph, Resource, Secret, unwrap
from tools.harness.stacks import STACKS, run_program, stack_file

INSTANCE = "aws:ec2/instance:Instance"
ROTATION = "command:local:Command"
REMOTE = ("command:remote:Command", "command:remote:CopyToRemote")


@pytest.fixture(scope="module", params=STACKS)
def stack_graph(request) -> tuple[str, Graph]:
    return request.param, shared.stack_graph(request.param)


def boot_key(instance: Resource) -> str:
    """The public half of the private key in the instance's user data."""
    keys = yaml.safe_load(unwrap(instance.inputs["userData"]))["ssh_keys"]
    private = serialization.load_ssh_private_key(keys["ed25519_private"].encode(), None)
    return (
        private.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )


def rotations(graph: Graph) -> dict[str, Resource]:
    return {
        r.name.removesuffix("-host-key-rotation"): r
        for r in graph.of_type(ROTATION)
        if r.name.endswith("-host-key-rotation")
    }


def test_every_machine_is_first_dialled_by_its_rotation_pinning_its_boot_key(stack_graph):
    stack, graph = stack_graph
    found = rotations(graph)
    instances = {i.name: i for i in graph.of_type(INSTANCE)}
    assert set(found) == set(instances), f"{stack}: {sorted(found)} != {sorted(instances)}"
    for name, rotation in found.items():
        instance = instances[name]
        assert isinstance(rotation.inputs["environment"], Secret), rotation.urn  # the login key
        env = unwrap(rotation.inputs["environment"])
        assert env["BOOT_HOST_KEY"] == boot_key(instance), rotation.urn
        assert unwrap(rotation.inputs["triggers"]) == [instance.id], rotation.urn
        assert instance.urn in rotation.dependencies, rotation.urn
        # Its update repeats what it read: no dial, so the boot key is never offered again.
        update = rotation.inputs["update"]
        assert "ssh" not in update and "PULUMI_COMMAND_STDOUT" in update, update
        assert rotation.inputs["stdin"] == strip_comments(script_text(HOST_SCRIPT))


def test_every_step_on_a_created_machine_pins_the_rotated_key_never_the_boot_key(stack_graph):
    stack, graph = stack_graph
    found = rotations(graph)
    instances = {i.name: i for i in graph.of_type(INSTANCE)}
    # What the mocks answer as the host script's last line (a key of its own per machine).
    rotated = {
        name: mocks.ed25519_key(f"{r.name} rotated")["publicKeyOpenssh"].strip()
        for name, r in found.items()
    }
    boot = {name: boot_key(i).strip() for name, i in instances.items()}
    checked = 0
    for step in graph.find(lambda r: r.type in REMOTE):
        conn = unwrap(step.inputs["connection"])
        key = (conn.get("hostKey") or "").strip()
        assert key and key not in boot.values(), f"{step.urn}: pins {key or 'nothing'}"
        owner = [name for name, value in rotated.items() if value == key]
        if owner:
            checked += 1
            assert found[owner[0]].urn in graph.ancestors(step), f"{step.urn}: before rotation"
    assert checked, f"{stack}: no step pins a rotated key"


def _local(tmp_path: Path, env: dict[str, str], ssh_script: str) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "ssh").write_text("#!/usr/bin/env bash\n" + ssh_script)
    (bin_dir / "sleep").write_text("#!/usr/bin/env bash\nexit 0\n")
    for stub in ("ssh", "sleep"):
        (bin_dir / stub).chmod(0o755)
    return subprocess.run(
        ["bash", str(LOCAL_SCRIPT)],
        input="echo rotate\n",
        env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


BOOT = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHgQhqhz7570cVflJzFU7G+rWj7+er6oB85ewHM+R5QD"
NEW = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOBDTt8M+hE1cCPbLyfkqiRG15dpfzxOyAA+P+Vm1S28"
ENV = {
    "SSH_HOST": "10.42.0.7",
    "SSH_PORT": "22",
    "SSH_USER": "ubuntu",
    "SSH_PRIVATE_KEY": "-----BEGIN OPENSSH PRIVATE KEY-----\nx\n-----END OPENSSH PRIVATE KEY-----",
    "BOOT_HOST_KEY": BOOT,
}
# Records its arguments and the known_hosts it was given, then answers like the host.
RECORDING_SSH = f"""
printf '%s\\n' "$@" > "$HOME/args"
for arg in "$@"; do
  case "$arg" in UserKnownHostsFile=*) cat "${{arg#*=}}" >> "$HOME/known";; esac
  case "$arg" in ProxyCommand=*) echo "$arg" > "$HOME/proxy";; esac
done
cat > "$HOME/program"
echo "[host-key] done" >&2
echo "{NEW}"
"""


def test_the_local_half_checks_the_boot_key_alone_and_returns_the_new_key(tmp_path):
    result = _local(tmp_path, ENV, RECORDING_SSH)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == NEW
    args = (tmp_path / "args").read_text().splitlines()
    assert "StrictHostKeyChecking=yes" in args and "GlobalKnownHostsFile=/dev/null" in args
    assert "ubuntu@10.42.0.7" in args, args
    assert (tmp_path / "known").read_text() == f"gpu-cluster-host {BOOT}\n"
    assert (tmp_path / "program").read_text() == "echo rotate\n"
    proxied = _local(
        tmp_path,
        {**ENV, "PROXY_HOST": "198.51.100.7", "PROXY_USER": "jump", "PROXY_HOST_KEY": NEW},
        RECORDING_SSH,
    )
    assert proxied.returncode == 0, proxied.stderr
    proxy = (tmp_path / "proxy").read_text()
    assert "StrictHostKeyChecking=yes" in proxy and "jump@198.51.100.7" in proxy, proxy


def test_a_host_with_another_key_is_refused_at_once(tmp_path):
    mismatch = 'echo "Host key verification failed." >&2; echo x >> "$HOME/dials"; exit 255\n'
    result = _local(tmp_path, ENV, mismatch)
    assert result.returncode != 0
    assert "did not present the host key it booted with" in result.stderr, result.stderr
    assert (tmp_path / "dials").read_text() == "x\n", "dialled again after a key mismatch"


def test_a_machine_not_yet_listening_is_dialled_again(tmp_path):
    flaky = (
        'n=$(cat "$HOME/n" 2>/dev/null || echo 0); echo $((n+1)) > "$HOME/n"\n'
        'if ((n < 2)); then echo "Connection refused" >&2; exit 255; fi\n'
        f'cat >/dev/null; echo "{NEW}"\n'
    )
    result = _local(tmp_path, ENV, flaky)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "n").read_text().strip() == "3" and result.stdout.strip() == NEW


@pytest.mark.parametrize("missing", ["BOOT_HOST_KEY", "SSH_PRIVATE_KEY", "SSH_HOST"])
def test_nothing_is_dialled_without_its_inputs(tmp_path, missing):
    result = _local(tmp_path, {k: v for k, v in ENV.items() if k != missing}, RECORDING_SSH)
    assert result.returncode != 0 and f"{missing} is required" in result.stderr
    assert not (tmp_path / "args").exists(), "dialled without its inputs"
    two = _local(tmp_path, {**ENV, "BOOT_HOST_KEY": f"{BOOT}\n{NEW}"}, RECORDING_SSH)
    assert two.returncode != 0 and "one ED25519 or ECDSA" in two.stderr


def _booted_host(tmp_path: Path) -> Sandbox:
    """A sandboxed machine as it boots: the generated key and an image's RSA key in /etc/ssh,
    cloud-init's copy of the user data that carried the key."""
    sb = Sandbox(tmp_path)
    sb.write("/etc/ssh/ssh_host_ed25519_key", "BOOT PRIVATE KEY\n", mode=0o600)
    sb.write("/etc/ssh/ssh_host_ed25519_key.pub", f"{BOOT}\n")
    sb.write("/etc/ssh/ssh_host_rsa_key", "IMAGE RSA KEY\n", mode=0o600)
    sb.write("/var/lib/cloud/instance/user-data.txt", "#cloud-config\nssh_keys: {}\n")
    return sb


@needs_sandbox
def test_the_host_half_replaces_every_host_key_and_forgets_the_boot_key(tmp_path):
    sb = _booted_host(tmp_path)
    result = sb.run_text(script_text(HOST_SCRIPT))
    assert result.returncode == 0, result.stderr
    new = sb.read("/etc/ssh/ssh_host_ed25519_key.pub").strip()
    assert new.startswith("ssh-ed25519 ") and new.split()[:2] != BOOT.split()
    assert result.stdout.strip().splitlines()[-1] == " ".join(new.split()[:2])
    assert "OPENSSH PRIVATE KEY" in sb.read("/etc/ssh/ssh_host_ed25519_key")
    assert not sb.exists("/etc/ssh/ssh_host_rsa_key"), "another host key stayed"
    assert not sb.exists("/var/lib/cloud/instance/user-data.txt"), "the boot key stayed"
    assert result.called("systemctl"), result.commands()


@needs_sandbox
@pytest.mark.parametrize(
    ("switch", "message"),
    [
        # A full or read-only /etc/ssh: no new key, so nothing is removed.
        ("ssh-keygen.fail", "ssh-keygen could not make an ed25519 key in /etc/ssh/.rotate."),
        # The new key is in place but sshd would not start with it: not reloaded.
        ("sshd.fail.t", "sshd -t refuses the configuration with the new host key"),
        # Any other command that fails: the ERR trap names its line and the command.
        ("systemctl.fail.try-reload-or-restart.ssh", "[host-key] FAILED: line "),
    ],
)
def test_the_host_half_stops_naming_what_failed_and_prints_no_key(tmp_path, switch, message):
    """scripts/rotate-host-key.sh in the sandbox, one field failure each (a stub's failure
    switch): it exits non-zero with a message that names the failure and prints no key, so the
    local half fails the rotation and no step pins a key the host does not serve."""
    sb = _booted_host(tmp_path)
    sb.state(switch, 1)
    result = sb.run_text(script_text(HOST_SCRIPT))
    assert result.returncode != 0, result.stdout
    assert message in result.stderr, result.stderr
    assert "ssh-ed25519" not in result.stdout, result.stdout
    if switch == "ssh-keygen.fail":
        assert sb.read("/etc/ssh/ssh_host_ed25519_key.pub") == f"{BOOT}\n", "boot key removed"
        assert sb.exists("/etc/ssh/ssh_host_rsa_key"), "a host key removed before a new one"
    if switch.startswith("systemctl."):
        assert "systemctl try-reload-or-restart ssh.service" in result.stderr, result.stderr


@needs_sandbox
@pytest.mark.parametrize(
    ("failure", "says"),
    [
        # Any other command fails: the ERR trap stops the step naming the line and command.
        ("mktemp() { return 1; }", "[host-key] FAILED: line "),
    ],
)
def test_the_host_half_keeps_the_boot_key_when_it_cannot_make_a_new_one(tmp_path, failure, says):
    """rotate-host-key.sh removes the boot key only once a new key exists: a failure before
    that leaves the host reachable with the key its rotation pinned."""
    sb = Sandbox(tmp_path)
    sb.write("/etc/ssh/ssh_host_ed25519_key", "BOOT PRIVATE KEY\n", mode=0o600)
    sb.write("/etc/ssh/ssh_host_ed25519_key.pub", f"{BOOT}\n")
    result = sb.run_text(f"{failure}\n{script_text(HOST_SCRIPT)}")
    assert result.returncode == 1 and says in result.stderr, result.stderr
    assert sb.read("/etc/ssh/ssh_host_ed25519_key.pub").strip() == BOOT
    assert not result.called("systemctl"), result.commands()


def test_the_control_plane_of_an_existing_cluster_is_pinned_from_config_not_rotated():
    graph = run_program("prod")
    key = stack_file("prod")["gpu-cluster:controlPlane"]["hostKey"]
    host = stack_file("prod")["gpu-cluster:controlPlane"]["host"]
    steps = [
        r
        for r in graph.find(lambda r: r.type in REMOTE)
        if unwrap(r.inputs["connection"])["host"] == host
    ]
    assert steps and all(unwrap(s.inputs["connection"])["hostKey"] == key for s in steps)

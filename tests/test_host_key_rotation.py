"""A host key only its host can use, by a first contact that can be redone (issue 34, finding 5;
issue 40, findings 2 and 5; issue 41, finding 1): the key a machine boots with travels in user
data others can read, so two local Commands replace it, `<machine>-host-key-rotation` (stage a
new key beside it) and `<machine>-host-key-switch` (make it the live key, see it served), and
every later step pins the switched key. Checked on the registered graph, on the local script
with a stub ssh (what it dials, with which environment), and on the host script in the sandbox
with the real ssh-keygen. tests/test_first_contact_sshd.py runs both halves against a real sshd.
"""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from cryptography.hazmat.primitives import serialization

from components.hosts import host_keys
from components.hosts.host_keys import HOST_SCRIPT, LOCAL_CREATE, Reach
from components.hosts.rendering import script_text
from tests.helpers import graphs as shared
from tests.sandbox import Sandbox, needs_sandbox
from tools.harness import mocks
from tools.harness.graph import Graph, Resource, Secret, plain_strings, unwrap
from tools.harness.stacks import ROOT, STACKS, run_program, stack_file

INSTANCE = "aws:ec2/instance:Instance"
LOCAL = "command:local:Command"
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


def phases(graph: Graph, suffix: str) -> dict[str, Resource]:
    return {
        r.name.removesuffix(f"-{suffix}"): r
        for r in graph.of_type(LOCAL)
        if r.name.endswith(f"-{suffix}")
    }


def staged_key(rotation: Resource) -> str:
    """What the mocks answer as the key a rotation staged (the host script's last line)."""
    return mocks.ed25519_key(f"{rotation.name} rotated")["publicKeyOpenssh"].strip()


def inputs_of(command: Resource) -> tuple[dict[str, list[str]], str]:
    assert isinstance(command.inputs["stdin"], Secret), f"{command.urn}: the login key is in it"
    return mocks.local_inputs(unwrap(command.inputs["stdin"]))


def test_every_machine_is_first_dialled_by_its_two_phases_pinning_its_boot_key(stack_graph):
    stack, graph = stack_graph
    rotations = phases(graph, host_keys.ROTATION)
    switches = phases(graph, host_keys.SWITCH)
    instances = {i.name: i for i in graph.of_type(INSTANCE)}
    assert set(rotations) == set(instances) == set(switches), f"{stack}: {sorted(rotations)}"
    for name, rotation in rotations.items():
        instance, switch = instances[name], switches[name]
        inputs, program = inputs_of(rotation)
        assert inputs["HOST_KEY"] == [boot_key(instance)], rotation.urn
        assert program == host_keys.host_program("stage"), rotation.urn
        staged = staged_key(rotation)
        inputs, program = inputs_of(switch)
        # The switch accepts the boot key or the staged one (a switch cut off after it
        # switched is redone), and prints only the staged key once it saw it served.
        assert inputs["HOST_KEY"] == [boot_key(instance), staged], switch.urn
        assert inputs["VERIFY_HOST_KEY"] == [staged], switch.urn
        assert program == host_keys.host_program("switch", staged), switch.urn
        assert unwrap(rotation.inputs["triggers"]) == [instance.id], rotation.urn
        assert unwrap(switch.inputs["triggers"]) == [instance.id, staged], switch.urn
        assert instance.urn in rotation.dependencies and rotation.urn in switch.dependencies
        for phase in (rotation, switch):
            # Neither update dials: the boot key is never offered again.
            update = phase.inputs["update"]
            assert "ssh" not in update and "PULUMI_COMMAND_STDOUT" in update, update


def test_every_step_on_a_created_machine_pins_the_switched_key_never_the_boot_key(stack_graph):
    stack, graph = stack_graph
    switches = phases(graph, host_keys.SWITCH)
    instances = {i.name: i for i in graph.of_type(INSTANCE)}
    switched = {name: staged_key(graph.named(f"{name}-{host_keys.ROTATION}")) for name in switches}
    boot = {name: boot_key(i).strip() for name, i in instances.items()}
    checked = 0
    for step in graph.find(lambda r: r.type in REMOTE):
        conn = unwrap(step.inputs["connection"])
        key = (conn.get("hostKey") or "").strip()
        assert key and key not in boot.values(), f"{step.urn}: pins {key or 'nothing'}"
        owner = [name for name, value in switched.items() if value == key]
        if owner:
            checked += 1
            assert switches[owner[0]].urn in graph.ancestors(step), f"{step.urn}: before switch"
    assert checked, f"{stack}: no step pins a switched key"


def test_no_value_of_the_stack_reaches_a_local_shell_or_environment():
    """Issue 41, finding 1: the first contact's local Commands run one constant line; every
    value (the bastion's address and user too) travels on stdin as data, and they set no
    `environment` (pulumi-command would add it to the runner's own)."""
    graph = run_program("prod")
    bastion = stack_file("prod")["gpu-cluster:network"]["bastion"]
    locals_ = graph.of_type(LOCAL)
    assert locals_
    for command in locals_:
        assert command.inputs["create"] == LOCAL_CREATE, command.urn
        assert "environment" not in command.inputs, command.urn
        inputs, _ = inputs_of(command)
        assert inputs["PROXY_HOST"] == [bastion["host"]], command.urn
        for text in plain_strings(command.inputs):
            assert bastion["host"] not in text, f"{command.urn}: {text}"


# ------------------------------------------------------------------ the local half, stub ssh


def _stdin(host_keys_: list[str], program: str = "echo rotate\n", **changes) -> str:
    reach = Reach(
        address=changes.pop("address", "10.42.0.7"),
        user=changes.pop("user", "ubuntu"),
        port=22,
        private_key=LOGIN_KEY,
        bastion=changes.pop("bastion", None),
    )
    return host_keys.local_stdin(
        "dev-gpu-a10g-0 (i-0abc)",
        reach.address,
        reach,
        LOGIN_KEY,
        host_keys=host_keys_,
        program=program,
        dial_seconds=changes.pop("dial_seconds", 60),
        verify=changes.pop("verify", None),
    )


def _local(
    tmp_path: Path, stdin: str, ssh_script: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """The local half as pulumi-command runs it: `/bin/sh -c <create>` from the program's
    directory, with the provider's whole environment (local/commandOutputs.go `run`)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    # The environment is emptied on the way: the stub knows its record directory itself.
    record = f"RECORD={tmp_path / 'record'}\n"
    (bin_dir / "ssh").write_text("#!/usr/bin/env bash\n" + record + ssh_script)
    (bin_dir / "sleep").write_text("#!/usr/bin/env bash\nexit 0\n")
    for stub in ("ssh", "sleep"):
        (bin_dir / stub).chmod(0o755)
    (tmp_path / "record").mkdir(exist_ok=True)
    return subprocess.run(
        ["/bin/sh", "-c", LOCAL_CREATE],
        input=stdin,
        cwd=ROOT,
        env={
            **os.environ,
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            **(env or {}),
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


LOGIN_KEY = mocks.ed25519_key("the operator's login")["privateKeyOpenssh"]
BOOT = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHgQhqhz7570cVflJzFU7G+rWj7+er6oB85ewHM+R5QD"
NEW = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOBDTt8M+hE1cCPbLyfkqiRG15dpfzxOyAA+P+Vm1S28"
# The stub ssh stands in for OpenSSH's client: it records its arguments, its environment, the
# key file and known_hosts it was given, and answers like the host.
RECORDING_SSH = f"""
record="${{RECORD:?}}/$(date +%s%N)"
mkdir -p "$record"
printf '%s\\n' "$@" > "$record/args"
env > "$record/env"
prev=""
for arg in "$@"; do
  case "$arg" in UserKnownHostsFile=*) cp "${{arg#*=}}" "$record/known";; esac
  case "$arg" in ProxyCommand=*) printf '%s\\n' "${{arg#*=}}" > "$record/proxy";; esac
  if [[ "$prev" == -i ]]; then stat -c %a "$arg" > "$record/key-mode"; cp "$arg" "$record/key"; fi
  prev="$arg"
done
cat > "$record/program"
echo "[host-key] done" >&2
echo "{NEW}"
"""


def _records(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "record").iterdir())


def test_the_local_half_checks_only_the_keys_it_is_given_and_returns_the_new_key(tmp_path):
    result = _local(tmp_path, _stdin([BOOT]), RECORDING_SSH)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{NEW}\n"
    (record,) = _records(tmp_path)
    args = (record / "args").read_text().splitlines()
    assert "StrictHostKeyChecking=yes" in args and "GlobalKnownHostsFile=/dev/null" in args
    assert args[-3:] == ["--", "10.42.0.7", "sudo timeout -k 30 300 bash -s"], args
    assert (record / "known").read_text() == f"gpu-cluster-host {BOOT}\n"
    assert (record / "program").read_text() == "echo rotate\n"
    # The login key: from stdin to a 0600 file, read by ssh with -i; never in the environment.
    assert (record / "key").read_text() == LOGIN_KEY
    assert (record / "key-mode").read_text().strip() == "600"


def test_the_local_half_hands_ssh_none_of_the_runners_credentials(tmp_path):
    """Issue 41, finding 1: pulumi-command starts a local command with the provider's whole
    environment, the deploy job's AWS and Pulumi credentials included; the first contact starts
    from an empty one, so neither it nor ssh (nor a ProxyCommand) holds them."""
    runner = {
        "AWS_ACCESS_KEY_ID": "AKIAEXAMPLEEXAMPLE01",
        "AWS_SECRET_ACCESS_KEY": "deploy-role-secret",
        "AWS_SESSION_TOKEN": "deploy-role-session",
        "PULUMI_ACCESS_TOKEN": "pul-deploy-token",
        "SSH_PRIVATE_KEY": LOGIN_KEY,
        "PULUMI_CONFIG_PASSPHRASE": "state-passphrase",
    }
    result = _local(tmp_path, _stdin([BOOT]), RECORDING_SSH, env=runner)
    assert result.returncode == 0, result.stderr
    (record,) = _records(tmp_path)
    seen = (record / "env").read_text()
    names = {line.split("=", 1)[0] for line in seen.splitlines()}
    assert not names & set(runner), names & set(runner)
    for value in runner.values():
        assert value.splitlines()[0] not in seen
    assert "PRIVATE KEY" not in seen and base64.b64encode(LOGIN_KEY.encode()).decode() not in seen


@pytest.mark.parametrize(
    "field",
    ["bastion host", "bastion user", "machine address", "login user"],
)
def test_a_hostile_value_never_runs_as_code_on_the_runner(tmp_path, field):
    """Issue 41, finding 1: a value with shell syntax in it (a scope id `%h$(...)`, a user
    `$(...)`) reaches ssh as one argument, and the bastion hop's ProxyCommand holds none: the
    real ssh runs it through /bin/sh. Nothing is created on the runner."""
    marker = tmp_path / "ran"
    payload = f"x$(touch {marker})`touch {marker}`;touch {marker}"
    bastion = _Bastion(host="198.51.100.7", user="jump")
    changes: dict[str, object] = {"dial_seconds": 0}
    if field == "bastion host":
        bastion = _Bastion(host=f"fe80::1%h{payload}", user="jump")
    elif field == "bastion user":
        bastion = _Bastion(host="198.51.100.7", user=payload)
    elif field == "machine address":
        changes["address"] = f"10.0.0.1{payload}"
    else:
        changes["user"] = payload
    stdin = _stdin([BOOT], bastion=bastion, **changes)
    # The real OpenSSH client: its ProxyCommand goes through /bin/sh.
    result = subprocess.run(
        ["/bin/sh", "-c", LOCAL_CREATE],
        input=stdin,
        cwd=ROOT,
        env={"PATH": os.environ["PATH"], "SHELL": "/bin/sh"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0, result.stdout
    assert not marker.exists(), f"{field}: ran on the runner\n{result.stderr}"


class _Bastion:
    """network.bastion as the settings hand it over (components/settings: host, port, user,
    hostKey)."""

    def __init__(self, host: str, user: str, port: int = 22, host_key: str = NEW):
        self.host, self.user, self.port, self.host_key = host, user, port, host_key


def test_the_bastion_hop_is_this_script_reading_its_values_from_the_environment(tmp_path):
    result = _local(
        tmp_path, _stdin([BOOT], bastion=_Bastion("198.51.100.7", "jump")), RECORDING_SSH
    )
    assert result.returncode == 0, result.stderr
    (record,) = _records(tmp_path)
    proxy = (record / "proxy").read_text().strip()
    script = str(ROOT / host_keys.LOCAL_SCRIPT.relative_to(ROOT))
    assert proxy == f"bash '{script}' --hop", proxy
    seen = dict(line.split("=", 1) for line in (record / "env").read_text().splitlines())
    assert (seen["PROXY_HOST"], seen["PROXY_USER"], seen["PROXY_PORT"]) == (
        "198.51.100.7",
        "jump",
        "22",
    )


def test_a_host_with_none_of_the_keys_is_refused_at_once_naming_the_key_to_set(tmp_path):
    mismatch = 'echo "Host key verification failed." >&2; echo x >> "$RECORD/../dials"; exit 255\n'
    result = _local(tmp_path, _stdin([BOOT]), mismatch)
    assert result.returncode != 0
    assert "presented none of the host keys it may have now" in result.stderr, result.stderr
    assert "gpu-cluster:hostKeys.<instance id>" in result.stderr, result.stderr
    assert (tmp_path / "dials").read_text() == "x\n", "dialled again after a key mismatch"


def test_a_machine_not_yet_listening_is_dialled_again(tmp_path):
    flaky = (
        'n=$(cat "$RECORD/../n" 2>/dev/null || echo 0); echo $((n+1)) > "$RECORD/../n"\n'
        'if ((n < 2)); then echo "Connection refused" >&2; exit 255; fi\n'
        f'cat >/dev/null; echo "{NEW}"\n'
    )
    result = _local(tmp_path, _stdin([BOOT]), flaky)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "n").read_text().strip() == "3" and result.stdout.strip() == NEW


def test_the_switch_prints_its_key_only_once_a_dial_pinning_it_alone_passed(tmp_path):
    result = _local(tmp_path, _stdin([BOOT, NEW], verify=NEW), RECORDING_SSH)
    assert result.returncode == 0, result.stderr
    program, verify = _records(tmp_path)
    assert (program / "known").read_text() == f"gpu-cluster-host {BOOT}\ngpu-cluster-host {NEW}\n"
    assert (verify / "known").read_text() == f"gpu-cluster-host {NEW}\n"
    assert (verify / "args").read_text().splitlines()[-1] == "true"
    # A host that answers but does not serve the key afterwards: nothing is printed.
    serves_boot = (
        'for a in "$@"; do case "$a" in UserKnownHostsFile=*) k="${a#*=}";; esac; done\n'
        f'if grep -q "{BOOT}" "$k"; then cat >/dev/null; echo "{NEW}"; exit 0; fi\n'
        'echo "Host key verification failed." >&2; exit 255\n'
    )
    refused = _local(tmp_path, _stdin([BOOT, NEW], verify=NEW), serves_boot)
    assert refused.returncode != 0 and refused.stdout == ""
    assert f"does not serve {NEW} after its switch" in refused.stderr, refused.stderr


@pytest.mark.parametrize("missing", ["HOST_KEY", "LOGIN_KEY", "SSH_HOST"])
def test_nothing_is_dialled_without_its_inputs(tmp_path, missing):
    head, _, program = _stdin([BOOT]).partition("\n---\n")
    kept = [line for line in head.splitlines() if not line.startswith(f"{missing}=")]
    result = _local(tmp_path, "\n".join(kept) + "\n---\n" + program, RECORDING_SSH)
    assert result.returncode != 0 and f"{missing} is required" in result.stderr, result.stderr
    assert not _records(tmp_path), "dialled without its inputs"
    with pytest.raises(ValueError, match="must be one line"):
        _stdin([f"{BOOT}\n{NEW}"])


@pytest.mark.parametrize(
    "value", ["\nPROXY_HOST=evil", "10.42.0.7\n", "\r10.42.0.7", "10.42.0.7\0"]
)
@pytest.mark.parametrize("field", ["address", "user"])
def test_a_value_with_a_line_break_at_either_end_is_refused(field, value):
    """Issue 41: the one-line check read the stripped value but wrote the value itself, so a
    leading newline added an input line (PROXY_HOST=evil after SSH_HOST=)."""
    with pytest.raises(ValueError, match="must be one line"):
        _stdin([BOOT], **{field: value})
    assert _stdin([BOOT + "\n"]).count("\nHOST_KEY=") == 1


# ------------------------------------------------------------------ the host half, sandbox


def _booted_host(tmp_path: Path) -> tuple[Sandbox, str]:
    """A sandboxed machine as it boots: the generated key (a real one: the switch checks its
    halves) and an image's RSA key in /etc/ssh, cloud-init's copy of the user data."""
    sb = Sandbox(tmp_path)
    key = mocks.ed25519_key("sandbox boot key")
    sb.write("/etc/ssh/ssh_host_ed25519_key", key["privateKeyOpenssh"], mode=0o600)
    sb.write("/etc/ssh/ssh_host_ed25519_key.pub", key["publicKeyOpenssh"])
    sb.write("/etc/ssh/ssh_host_rsa_key", "IMAGE RSA KEY\n", mode=0o600)
    sb.write("/var/lib/cloud/instance/user-data.txt", "#cloud-config\nssh_keys: {}\n")
    return sb, key["publicKeyOpenssh"].strip()


def _run(sb: Sandbox, phase: str, new: str | None = None):
    return sb.run_text(host_keys.host_program(phase, new))


@needs_sandbox
def test_the_stage_keeps_the_boot_key_live_and_stages_one_key_once(tmp_path):
    sb, boot = _booted_host(tmp_path)
    first = _run(sb, "stage")
    assert first.returncode == 0, first.stderr
    staged = first.stdout.strip().splitlines()[-1]
    assert staged.startswith("ssh-ed25519 ") and staged != boot
    assert sb.read("/etc/ssh/ssh_host_ed25519_key.pub").strip() == boot, "boot key replaced"
    assert sb.exists("/etc/ssh/ssh_host_rsa_key") and sb.exists(
        "/var/lib/cloud/instance/user-data.txt"
    )
    assert not first.called("systemctl"), first.commands()
    # A stage whose answer was lost, run again: the same key, nothing made anew.
    again = _run(sb, "stage")
    assert again.returncode == 0 and again.stdout.strip() == staged, again.stderr
    assert "already staged: keeping it" in again.stderr
    assert not again.called("ssh-keygen", "-q"), again.commands()


@needs_sandbox
def test_the_switch_makes_the_staged_key_live_and_forgets_every_other(tmp_path):
    sb, _boot = _booted_host(tmp_path)
    staged = _run(sb, "stage").stdout.strip()
    result = _run(sb, "switch", staged)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == staged
    assert sb.read("/etc/ssh/ssh_host_ed25519_key.pub").strip() == staged
    assert "OPENSSH PRIVATE KEY" in sb.read("/etc/ssh/ssh_host_ed25519_key")
    assert not sb.exists("/etc/ssh/ssh_host_rsa_key"), "another host key stayed"
    assert not sb.exists("/var/lib/cloud/instance/user-data.txt"), "the boot key stayed"
    assert not sb.exists("/etc/ssh/gpu-cluster-staged/ssh_host_ed25519_key")
    assert result.called("systemctl", "try-reload-or-restart", "ssh.service"), result.commands()
    # Cut off after the switch and run again: nothing changes, sshd is reloaded once more.
    again = _run(sb, "switch", staged)
    assert again.returncode == 0 and again.stdout.strip() == staged, again.stderr
    assert "the new host key is already the live one" in again.stderr
    assert again.called("systemctl"), again.commands()


@needs_sandbox
@pytest.mark.parametrize(
    ("switch", "message"),
    [
        # A full or read-only /etc/ssh: no new key, so nothing is removed.
        ("ssh-keygen.fail", "ssh-keygen could not make an ed25519 key in /etc/ssh/.gpu-cluster-"),
        # sshd would not start with the new key: checked before it is made live.
        ("sshd.fail.t", "sshd -t refuses the configuration with the staged host key"),
        # Any other command that fails: the ERR trap names its line and the command.
        ("systemctl.fail.try-reload-or-restart.ssh", "[host-key] FAILED: line "),
    ],
)
def test_the_host_half_stops_naming_what_failed_and_prints_no_key(tmp_path, switch, message):
    """scripts/rotate-host-key.sh in the sandbox, one field failure each (a stub's failure
    switch): it exits non-zero with a message that names the failure and prints no key, so the
    local half fails the phase and no step pins a key the host does not serve."""
    sb, boot = _booted_host(tmp_path)
    staged = None if switch == "ssh-keygen.fail" else _run(sb, "stage").stdout.strip()
    sb.state(switch, 1)
    result = _run(sb, "stage") if staged is None else _run(sb, "switch", staged)
    assert result.returncode != 0, result.stdout
    assert message in result.stderr, result.stderr
    assert "ssh-ed25519" not in result.stdout, result.stdout
    if switch != "systemctl.fail.try-reload-or-restart.ssh":
        assert sb.read("/etc/ssh/ssh_host_ed25519_key.pub").strip() == boot, "boot key removed"
        assert sb.exists("/etc/ssh/ssh_host_rsa_key"), "a host key removed before a new one"
    else:
        assert "systemctl try-reload-or-restart ssh.service" in result.stderr, result.stderr


@needs_sandbox
@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"PHASE": "rotate"}, "PHASE must be stage or switch, got 'rotate'"),
        ({"PHASE": "switch"}, "NEW_HOST_KEY is required with PHASE=switch"),
        (
            {"PHASE": "switch", "NEW_HOST_KEY": f"{NEW}\n{BOOT}"},
            "NEW_HOST_KEY must be one ssh-ed25519 public key line",
        ),
        # The stage's record names a key the host did not stage (its staged key is another).
        ({"PHASE": "switch", "NEW_HOST_KEY": NEW}, "not the one the stage recorded"),
    ],
)
def test_the_host_half_refuses_inputs_it_cannot_act_on(tmp_path, params, says):
    sb, boot = _booted_host(tmp_path)
    _run(sb, "stage")
    from components.hosts.rendering import render_inputs, stripped_script

    result = sb.run_text(render_inputs(params) + stripped_script(HOST_SCRIPT))
    assert result.returncode == 1 and says in result.stderr, result.stderr
    assert sb.read("/etc/ssh/ssh_host_ed25519_key.pub").strip() == boot


@needs_sandbox
def test_a_run_cut_off_halfway_leaves_nothing_the_next_run_trips_on(tmp_path):
    """A stage killed between making its key aside and moving it into place, or a switch
    killed between its two renames, leaves files the next run removes."""
    sb, boot = _booted_host(tmp_path)
    sb.write("/etc/ssh/.gpu-cluster-staging.AbC123/ssh_host_ed25519_key", "half\n", 0o600)
    sb.write("/etc/ssh/ssh_host_ed25519_key.pub.gpu-cluster-new", f"{NEW}\n")
    result = _run(sb, "stage")
    assert result.returncode == 0, result.stderr
    assert "left by a run that was cut off" in result.stderr
    assert not sb.exists("/etc/ssh/.gpu-cluster-staging.AbC123")
    assert not sb.exists("/etc/ssh/ssh_host_ed25519_key.pub.gpu-cluster-new")
    assert sb.read("/etc/ssh/ssh_host_ed25519_key.pub").strip() == boot


def test_the_host_script_says_its_inputs():
    assert "PHASE" in script_text(HOST_SCRIPT) and "NEW_HOST_KEY" in script_text(HOST_SCRIPT)


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

"""The command stand-in (tools/engine/modules/command, pulumi-command v1.2.1's behaviour on its
own framework) on the real engine, against real sshd servers (tests/helpers/sshd.py): what a
local and a remote Command run with, what a delete runs with after the connection changed, and
that a failed create leaves no state."""

from __future__ import annotations

import pytest

from tests.helpers import engine, sshd
from tools.harness.engine import EngineStack

pytestmark = pytest.mark.engine

PROGRAM = """
import pulumi
import pulumi_command as command

config = pulumi.Config()
log = config.require("log")
# The login user appends to the test's log (root's) through sudo, as the steps run.
append = f"| sudo tee -a {log} >/dev/null"
host = config.require_object("host")
connection = command.remote.ConnectionArgs(
    host=host["address"], port=host["port"], user=host["user"], host_key=host["hostKey"],
    private_key=config.require_secret("privateKey"), dial_error_limit=2,
)
remote = command.remote.Command(
    "step",
    connection=connection,
    create=f'echo "created on $TEST_HOST" {append}; echo "stdout of $TEST_HOST"',
    delete=f'echo "deleted on $TEST_HOST after $PULUMI_COMMAND_STDOUT" {append}',
    triggers=[host["identity"]],
)
local = command.local.Command(
    "local",
    create='printf "%s|%s|%s" "$GREETING" "$(cat)" "${PULUMI_COMMAND_STDOUT:-none}"',
    environment={"GREETING": config.require("greeting")},
    stdin="from stdin",
)
if config.get_bool("failing"):
    command.remote.Command(
        "failing", connection=connection, create="echo about to fail; exit 3"
    )
pulumi.export("local", local.stdout)
pulumi.export("remote", remote.stdout)
"""
STEP = "command:remote:Command"


@pytest.fixture
def hosts(tmp_path):
    sshd.require()
    with sshd.hosts(tmp_path / "hosts", "a", "b") as started:
        yield started


@pytest.fixture
def stack(tmp_path, engine_binaries, hosts):
    program = engine.project(tmp_path / "program", "engine-command", PROGRAM)
    stack = EngineStack.create(tmp_path / "work", program, "test", engine_binaries)
    yield stack
    stack.destroy()


def _use(stack: EngineStack, host: sshd.SshdHost, tmp_path, **config) -> None:
    stack.set_config(
        {
            "engine-command:log": str(tmp_path / "hosts.log"),
            "engine-command:greeting": "hello",
            "engine-command:host": {
                "address": host.address,
                "port": host.port,
                "user": host.user,
                "hostKey": host.host_public_key,
                "identity": host.name,
            },
            **{f"engine-command:{k}": v for k, v in config.items()},
        },
        secrets={"engine-command:privateKey": host.client_private_key},
    )


def _log(tmp_path) -> list[str]:
    path = tmp_path / "hosts.log"
    return path.read_text().splitlines() if path.exists() else []


def test_local_command_runs_with_its_environment_and_stdin(stack, hosts, tmp_path):
    _use(stack, hosts["a"], tmp_path)
    assert stack.up().ok
    assert stack.outputs()["local"] == "hello|from stdin|none"

    # An update runs `create` again (no `update` given) with the previous stdout in
    # PULUMI_COMMAND_STDOUT (local/commandOutputs.go, run).
    _use(stack, hosts["a"], tmp_path, greeting="again")
    updated = stack.up()
    assert updated.ok, updated.output()
    assert stack.outputs()["local"] == "again|from stdin|hello|from stdin|none"


def test_remote_delete_runs_over_the_stored_connection(stack, hosts, tmp_path):
    _use(stack, hosts["a"], tmp_path)
    first = stack.up()
    assert first.ok, first.output()
    assert _log(tmp_path) == ["created on a"]
    assert stack.outputs()["remote"] == "stdout of a"

    # Host b: a new trigger (replace) and a new connection. The replacement is created over
    # the new connection, then the old one is deleted over the connection stored in its state.
    _use(stack, hosts["b"], tmp_path)
    moved = stack.up()
    assert moved.ok, moved.output()
    # The previous stdout travels as a setenv request, which sshd refuses for a name its
    # AcceptEnv does not list: the delete runs without it, after a warning
    # (remote/commandOutputs.go, run: logAndWrapSetenvErr at Warning, then goes on).
    assert _log(tmp_path) == ["created on a", "created on b", "deleted on a after "]
    assert any("Unable to set 'PULUMI_COMMAND_STDOUT'" in m for m in moved.diagnostics("warning"))
    steps = [op for op, urn in moved.steps() if urn.endswith("::step")]
    assert steps == ["create-replacement", "delete-replaced"] or "replace" in steps, steps


def test_the_connection_is_a_secret_in_the_state(stack, hosts, tmp_path):
    _use(stack, hosts["a"], tmp_path)
    assert stack.up().ok
    [step] = [r for r in stack.resources().values() if r["type"] == STEP]
    for properties in (step["inputs"], step["outputs"]):
        assert set(properties["connection"]) == {
            "4dabf18193072939515e22adb298388d",
            "ciphertext",
        }, properties["connection"]
    assert hosts["a"].client_private_key.split("\n")[1] not in str(stack.state())


def test_a_failed_create_records_nothing_and_says_what_failed(stack, hosts, tmp_path):
    _use(stack, hosts["a"], tmp_path, failing=True)
    failed = stack.up()
    assert not failed.ok
    assert "about to fail" in failed.output() and "Process exited with status 3" in failed.output()
    assert not any(urn.endswith("::failing") for urn in stack.resources())
    assert any(urn.endswith("::step") for urn in stack.resources()), "the others were kept"


def test_a_wrong_host_key_fails_the_dial(stack, hosts, tmp_path):
    wrong = hosts["a"]
    _use(stack, wrong, tmp_path)
    stack.set_config(
        {
            "engine-command:host": {
                "address": wrong.address,
                "port": wrong.port,
                "user": wrong.user,
                "identity": "a",
                "hostKey": hosts["b"].host_public_key,
            }
        }
    )
    failed = stack.up()
    assert not failed.ok
    assert "ssh: handshake failed" in failed.output(), failed.output()
    assert _log(tmp_path) == []

"""A managed control plane's sshd takes its fleet's SSH fan-in (components/hosts/fan_in.py):
the MaxStartups the program asks for, the wait-ready step that writes it (run for real in the
sandbox, tests/sandbox.py, with sshd and systemctl stubs), and the graph that puts it before any
node's step on the control plane."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.hosts import fan_in
from components.hosts.fan_in import MaxStartups, max_startups
from tests.sandbox import Sandbox, needs_sandbox
from tools.harness.graph import unwrap
from tools.harness.stacks import run_program

DROP_IN = "/etc/ssh/sshd_config.d/10-gpu-cluster-fan-in.conf"
UBUNTU_2404 = 'NAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\nID_LIKE=debian\n'
FAST = {"RETRY_BASE_SECONDS": "0.01"}
ASKED = {**FAST, "SSHD_MAX_STARTUPS": "100:30:200"}


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        (0, MaxStartups(50, 30, 100)),  # never below OpenSSH's 10:30:100
        (34, MaxStartups(50, 30, 100)),
        (35, MaxStartups(100, 30, 200)),  # 35 nodes + 16 control-plane dials
        (256, MaxStartups(300, 30, 600)),
        (1000, MaxStartups(1000, 30, 1000)),  # sshd's open files cap full
    ],
)
def test_max_startups_holds_a_dial_per_node_in_steps_of_fifty(nodes, expected):
    assert max_startups(nodes) == expected
    assert str(expected).count(":") == 2


def test_the_managed_control_plane_keeps_its_fan_in_and_no_node_dials_it():
    """Sized as before (no running control plane re-runs for it), though since decision 058 no
    node step dials the control plane at all."""
    graph = run_program("dev")
    wait_ready = graph.named("dev-gpu-wait-ready")
    assert "SSHD_MAX_STARTUPS=50:30:100" in unwrap(wait_ready.inputs["stdin"])
    control_plane = unwrap(wait_ready.inputs["connection"])["host"]
    for node in ("dev-gpu-a10g-0",):
        for resource in graph.find(lambda r, n=node: r.name.startswith(f"{n}-")):
            connection = unwrap(resource.inputs.get("connection")) or {}
            assert connection.get("host") != control_plane, (
                f"{resource.urn} dials the control plane"
            )


def test_a_node_s_wait_ready_and_an_existing_control_plane_leave_sshd_alone():
    graph = run_program("prod")
    for resource in graph.of_type("command:remote:Command"):
        assert "SSHD_MAX_STARTUPS" not in str(unwrap(resource.inputs.get("stdin"))), resource.urn


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    sb = Sandbox(tmp_path)
    sb.write("/etc/os-release", UBUNTU_2404)
    return sb


@needs_sandbox
def test_wait_ready_writes_the_drop_in_checks_it_and_reloads_sshd_once(sandbox):
    first = sandbox.run("wait-ready.sh", ASKED)
    assert first.returncode == 0, first.stderr
    assert "MaxStartups 100:30:200\n" in sandbox.read(DROP_IN)
    assert first.called("sshd", "-t") and first.called("sshd", "-T")
    assert first.called("systemctl", "try-reload-or-restart", "ssh.service")
    assert "sshd: MaxStartups 100:30:200, reloaded" in first.stderr

    again = sandbox.run("wait-ready.sh", ASKED)
    assert again.returncode == 0, again.stderr
    assert again.called("systemctl", "try-reload-or-restart") == []
    assert "already in effect, not reloading" in again.stderr


@needs_sandbox
def test_a_new_fan_in_replaces_the_drop_in_and_reloads(sandbox):
    assert sandbox.run("wait-ready.sh", ASKED).returncode == 0
    grown = sandbox.run("wait-ready.sh", {**FAST, "SSHD_MAX_STARTUPS": "300:30:600"})
    assert grown.returncode == 0, grown.stderr
    assert "MaxStartups 300:30:600\n" in sandbox.read(DROP_IN)
    assert grown.called("systemctl", "try-reload-or-restart", "ssh.service")


@needs_sandbox
def test_a_config_sshd_refuses_is_put_back_and_sshd_is_not_reloaded(sandbox):
    assert sandbox.run("wait-ready.sh", ASKED).returncode == 0
    sandbox.state("sshd.refuse", "/etc/ssh/sshd_config line 12: Bad configuration option")
    refused = sandbox.run("wait-ready.sh", {**FAST, "SSHD_MAX_STARTUPS": "300:30:600"})
    assert refused.returncode == 1
    assert "sshd -t refused the configuration with MaxStartups 300:30:600" in refused.stderr
    assert "Bad configuration option" in refused.stderr
    assert "MaxStartups 100:30:200\n" in sandbox.read(DROP_IN), "the working file is back"
    assert refused.called("systemctl", "try-reload-or-restart") == []


@needs_sandbox
def test_a_first_refused_drop_in_leaves_no_file(sandbox):
    sandbox.state("sshd.refuse", "bad")
    refused = sandbox.run("wait-ready.sh", ASKED)
    assert refused.returncode == 1
    assert not sandbox.exists(DROP_IN)


@needs_sandbox
def test_a_smaller_setting_read_first_elsewhere_is_named(sandbox):
    sandbox.write("/etc/ssh/sshd_config.d/01-site.conf", "MaxStartups 10:30:60\n")
    result = sandbox.run("wait-ready.sh", ASKED)
    assert result.returncode == 1
    assert "sshd reads MaxStartups 10:30:60, below 100:30:200" in result.stderr
    assert "raise or remove that setting" in result.stderr
    assert result.called("systemctl", "try-reload-or-restart") == []


@needs_sandbox
def test_a_larger_setting_read_first_elsewhere_is_kept(sandbox):
    """A control plane that more stacks' nodes join: the operator's own drop-in, sorted first."""
    sandbox.write("/etc/ssh/sshd_config.d/05-fleet.conf", "MaxStartups 1000:30:1000\n")
    result = sandbox.run("wait-ready.sh", ASKED)
    assert result.returncode == 0, result.stderr
    assert "MaxStartups 1000:30:1000 set elsewhere takes this fleet (100:30:200)" in result.stderr


@needs_sandbox
def test_without_the_input_sshd_is_left_alone(sandbox):
    result = sandbox.run("wait-ready.sh", FAST)
    assert result.returncode == 0, result.stderr
    assert result.called("sshd") == [] and not sandbox.exists(DROP_IN)


@needs_sandbox
@pytest.mark.parametrize(
    "value", ["100", "100:30", "200:30:100", "10:0:100", "10:101:100", "a:b:c"]
)
def test_a_max_startups_sshd_would_refuse_fails_before_anything_is_touched(sandbox, value):
    result = sandbox.run("wait-ready.sh", {**FAST, "SSHD_MAX_STARTUPS": value})
    assert result.returncode == 1
    assert "SSHD_MAX_STARTUPS" in result.stderr
    assert result.calls == []


def test_openssh_default_is_the_documented_one():
    assert str(fan_in.OPENSSH_DEFAULT) == "10:30:100"

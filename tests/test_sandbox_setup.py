"""Where the script sandbox cannot run, its tests fail with the reason instead of passing by not
running; an explicit GPU_CLUSTER_SANDBOX=skip runs the rest and the summary counts the script
tests that did not run. Simulated with a PATH whose `unshare` always fails, as a kernel that
refuses user namespaces makes it fail."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sandbox import OPT_OUT_ENV, Sandbox, needs_sandbox, sandbox_problem, unshare_command
from tools.harness.stacks import ROOT

SCRIPT_TESTS = "tests/test_capacity_script.py"
REFUSAL = "unshare: unshare failed: Operation not permitted"


@pytest.fixture
def refusing_env(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "unshare"
    fake.write_text(f"#!/bin/sh\necho '{REFUSAL}' >&2\nexit 1\n")
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.pop(OPT_OUT_ENV, None)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return env


def _pytest(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", SCRIPT_TESTS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def test_the_sandbox_runs_here():
    assert sandbox_problem() is None, sandbox_problem()
    user_namespace = "--user" in unshare_command()
    assert user_namespace == (os.geteuid() != 0), unshare_command()


def test_a_refused_sandbox_fails_with_the_reason(refusing_env):
    run = _pytest(refusing_env)
    assert run.returncode != 0, f"script tests passed without running:\n{run.stdout[-2000:]}"
    assert REFUSAL in run.stdout and f"{OPT_OUT_ENV}=skip" in run.stdout, run.stdout[-2000:]


def test_opting_out_skips_and_says_how_many_did_not_run(refusing_env):
    run = _pytest({**refusing_env, OPT_OUT_ENV: "skip"})
    assert run.returncode == 0, run.stdout[-2000:]
    summary = [line for line in run.stdout.splitlines() if line.startswith("script sandbox: ")]
    assert len(summary) == 1, run.stdout[-2000:]
    count = int(summary[0].split()[2])
    assert count > 0 and f"{count} skipped" in run.stdout, run.stdout[-2000:]
    assert REFUSAL in summary[0], summary


@needs_sandbox
def test_a_script_may_give_files_to_another_user_as_root_or_not(tmp_path):
    """`install -o` and `chown` to a user other than root run in the sandbox with or without root
    (without, only root is mapped: the stubs leave the owner out), and the call records the
    owner asked for; a chown of a path that does not exist still fails."""
    sb = Sandbox(tmp_path)
    result = sb.run_text(
        "set -e\n"
        "install -d -m 0700 -o nobody -g nogroup /var/lib/owned\n"
        ": > /var/lib/owned/file\n"
        "chown nobody:nogroup /var/lib/owned/file\n"
    )
    assert result.returncode == 0, result.output
    assert result.called("install", "-d", "-m", "0700", "-o", "nobody", "-g", "nogroup")
    assert result.called("chown", "nobody:nogroup", "/var/lib/owned/file"), result.commands()
    assert oct(sb.host_path("/var/lib/owned").stat().st_mode & 0o777) == "0o700"
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody").pw_uid
        assert sb.host_path("/var/lib/owned/file").stat().st_uid == nobody, "owner not set as root"
    missing = sb.run_text("chown nobody:nogroup /var/lib/not-there\n")
    assert missing.returncode != 0 and "not-there" in missing.stderr, missing.output

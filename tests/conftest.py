"""Script sandbox tests (marked `sandbox`, tests/sandbox.py) never pass by not running: where this
machine cannot run the sandbox they fail with the kernel's reason, unless the run opts out with
GPU_CLUSTER_SANDBOX=skip; the summary then says how many script tests did not run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import sandbox
from tests.helpers import cluster, engine, lab

# The policy pack's modules import each other as `gpu_cluster_policies` (the pack runs from
# policies/): a test module that imports them works alone too, not only after test_policies.py.
_POLICIES = str(Path(__file__).resolve().parent.parent / "policies")
if _POLICIES not in sys.path:
    sys.path.insert(0, _POLICIES)

_not_run: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "sandbox: runs host scripts in the script sandbox (tests/sandbox.py)"
    )
    config.addinivalue_line(
        "markers",
        "engine: runs the real Pulumi engine and providers built by `python -m tools.engine "
        "build` (docs/decisions/055-the-real-engine-built-from-its-modules.md)",
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("sandbox") is None:
        return
    problem = sandbox.sandbox_problem()
    if problem is None:
        return
    if os.environ.get(sandbox.OPT_OUT_ENV) == "skip":
        _not_run.append(item.nodeid)
        pytest.skip(f"script sandbox unavailable ({sandbox.OPT_OUT_ENV}=skip): {problem}")
    pytest.fail(
        f"the script sandbox cannot run here: {problem}. To run the other tests without the "
        f"script tests, set {sandbox.OPT_OUT_ENV}=skip",
        pytrace=False,
    )


def pytest_terminal_summary(terminalreporter) -> None:
    if _not_run:
        terminalreporter.write_line(
            f"script sandbox: {len(_not_run)} script tests did not run "
            f"({sandbox.OPT_OUT_ENV}=skip): {sandbox.sandbox_problem()}",
            yellow=True,
        )


@pytest.fixture(scope="module")
def ca_cert(tmp_path_factory) -> str:
    """A self-signed cluster CA certificate (PEM), as kubeadm writes /etc/kubernetes/pki/ca.crt."""
    directory = tmp_path_factory.mktemp("ca")
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=kubernetes", "-keyout", str(directory / "ca.key")),
            *("-out", str(directory / "ca.crt")),
        ],
        check=True,
        capture_output=True,
    )
    return (directory / "ca.crt").read_text()


@pytest.fixture(scope="session")
def engine_binaries() -> Path:
    """build/engine/ with every real-engine binary built; else skip (fail under CI=true)."""
    return engine.binaries()


@pytest.fixture(scope="session")
def cluster_binaries() -> Path:
    """build/engine/ with the control plane's binaries built; else skip (fail under CI=true)."""
    return engine.cluster_binaries()


@pytest.fixture(scope="session")
def kube_cluster(cluster_binaries, tmp_path_factory):
    """etcd, kube-apiserver, kube-controller-manager and kube-scheduler on loopback, shared by
    the session's real-engine tests (each test uses namespaces and Nodes of its own)."""
    # Its serving certificate also names the end-to-end lab's control-plane address, where the
    # lab forwards the API (tests/helpers/lab.py).
    with cluster.running(
        tmp_path_factory.mktemp("cluster"), cluster_binaries, (lab.control_plane_address(),)
    ) as running:
        yield running

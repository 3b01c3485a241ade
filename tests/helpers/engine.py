"""The real-engine layer's entry for tests: where the built binaries are, or a skip (a failure
under CI=true) naming the one command that builds them; and small Pulumi projects written into
a test's directory."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.helpers.tools import missing
from tools.engine import build


def binaries() -> Path:
    """build/engine/, when every binary there is built at its pinned version."""
    __tracebackhide__ = True
    absent = build.missing()
    if absent:
        missing(f"the real engine is not built here ({', '.join(absent)})", build.BUILD_COMMAND)
    return build.BUILD_DIR


CLUSTER_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


def cluster_binaries() -> Path:
    """build/engine/, when the control plane's binaries (tests/helpers/cluster.py) are built at
    their pinned versions: a test of the API server alone needs no Pulumi engine."""
    __tracebackhide__ = True
    absent = [name for name in build.missing() if name in CLUSTER_BINARIES]
    if absent:
        missing(f"the control plane is not built here ({', '.join(absent)})", build.BUILD_COMMAND)
    return build.BUILD_DIR


def project(directory: Path, name: str, program: str) -> Path:
    """A Python project: Pulumi.yaml (runtime python) and `program` as __main__.py."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "Pulumi.yaml").write_text(f"name: {name}\nruntime: python\n")
    (directory / "__main__.py").write_text(textwrap.dedent(program))
    return directory

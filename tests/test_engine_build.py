"""tools.engine's table and build: each binary's version is what its go.mod requires, each is a
tool of its module, and a binary counts as built only for the sources and flags it has now."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tools.engine import build
from tools.engine.binaries import BINARIES, MODULES, Binary


def _go_mod(binary: Binary) -> str:
    return (binary.module_dir / "go.mod").read_text()


def _required(go_mod: str, module: str) -> str | None:
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)} (v\S+)", go_mod, re.MULTILINE)
    return match.group(1) if match else None


@pytest.mark.parametrize("binary", BINARIES, ids=lambda b: b.name)
def test_the_version_built_is_the_version_go_mod_requires(binary):
    assert _required(_go_mod(binary), binary.requires) == binary.version


@pytest.mark.parametrize("binary", BINARIES, ids=lambda b: b.name)
def test_each_binary_is_a_tool_or_a_package_of_its_module(binary):
    go_mod = _go_mod(binary)
    module = re.search(r"^module (\S+)", go_mod, re.MULTILINE).group(1)
    assert binary.package.startswith(module + "/") or re.search(
        rf"^\s*(?:tool\s+)?{re.escape(binary.package)}$", go_mod, re.MULTILINE
    ), f"{binary.package} is neither in module {module} nor a tool of {binary.module_dir}"


def test_every_module_directory_is_built_from():
    used = {b.module for b in BINARIES}
    assert used == {p.name for p in MODULES.iterdir() if (p / "go.mod").is_file()}


def test_release_flags_stamp_the_versions():
    pulumi = next(b for b in BINARIES if b.name == "pulumi")
    arguments = build.build_arguments(pulumi, Path("out"))
    assert "-tags=osusergo,grpcnotrace" in arguments
    assert any("version.Version=v3.274.0" in a for a in arguments)
    apiserver = next(b for b in BINARIES if b.name == "kube-apiserver")
    flags = " ".join(build.build_arguments(apiserver, Path("out")))
    assert "k8s.io/component-base/version.gitVersion=v1.35.4" in flags
    assert "k8s.io/component-base/version.gitMinor=35" in flags


def test_a_binary_is_current_only_for_the_sources_it_was_built_from(tmp_path, monkeypatch):
    module = tmp_path / "modules" / "demo"
    module.mkdir(parents=True)
    (module / "go.mod").write_text("module demo\n\ngo 1.25\n")
    monkeypatch.setattr("tools.engine.binaries.MODULES", tmp_path / "modules")
    demo = Binary("demo", "demo", "demo/cmd", requires="demo", version="v1.0.0")
    out = tmp_path / "out"
    (out / ".stamps").mkdir(parents=True)
    (out / "demo").write_bytes(b"\x7fELF")
    (out / ".stamps" / "demo.json").write_text(json.dumps(build.stamp_of(demo, "go1.26.8")))
    assert build.is_current(demo, out, "go1.26.8")
    assert not build.is_current(demo, out, "go1.26.9"), "another Go must rebuild"
    (module / "go.sum").write_text("demo v1 h1:x\n")
    assert not build.is_current(demo, out, "go1.26.8"), "a new go.sum must rebuild"


def test_without_the_binaries_the_real_engine_tests_skip_naming_the_build(monkeypatch):
    from tests.helpers import engine

    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(build, "missing", lambda out=None: ["pulumi", "etcd"])
    with pytest.raises(pytest.skip.Exception, match=r"pulumi, etcd.*python -m tools.engine build"):
        engine.binaries()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must run this test"):
        engine.binaries()


def test_ci_builds_the_engine_and_runs_its_tests():
    ci = (build.ROOT / ".ci" / "run").read_text()
    assert build.BUILD_COMMAND in ci
    assert "openssh-server" in ci, "the real-engine tests need sshd"
    assert 'python -m pytest -m "not engine"' in ci and "python -m pytest -m engine" in ci

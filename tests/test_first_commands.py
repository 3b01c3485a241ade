"""The README's first two commands on a machine that has only Python: a fresh copy of the
repository (the files git tracks, no build/ or venv/), Graphviz's `dot` off PATH.

The interpreter is this test run's own (installed from requirements-dev.txt, as `.ci/run` does),
so the copy needs no pip install; a separate test checks that every third-party module the
program, the tools and the tests import comes from a package those requirement files name.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from tests.helpers.tools import ACTIONLINT_INSTALL, CI_ENV, require_tool
from tools import graph_picture
from tools.harness.stacks import ROOT

README_COMMANDS = (
    "pip install -r requirements-dev.txt && python -m tools.preview dev",
    "python -m pytest",
)


def _fresh_copy(dest: Path) -> Path:
    """The files a clone of the working tree would have (tracked or new, never ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return dest


def _path_without_dot(shadow: Path) -> str:
    """The venv's bin directory, then every other command of the current PATH except Graphviz's
    `dot` (as links in one directory: a venv's python must stay in its own bin to find the venv)."""
    shadow.mkdir()
    venv_bin = str(Path(sys.executable).parent)
    assert not (Path(venv_bin) / "dot").exists(), f"{venv_bin} has its own dot"
    for directory in os.environ["PATH"].split(os.pathsep):
        if directory == venv_bin or not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            link = shadow / entry.name
            if entry.name == "dot" or link.exists() or link.is_symlink():
                continue
            if os.access(entry.path, os.X_OK) and not entry.is_dir():
                link.symlink_to(entry.path)
    return os.pathsep.join((venv_bin, str(shadow)))


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    base = tmp_path_factory.mktemp("fresh")
    clone = _fresh_copy(base / "gpu-cluster")
    # A newcomer's machine: no CI=true, under which a missing Graphviz fails the picture tests.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST", "PULUMI_CONFIG")) and k != CI_ENV
    }
    env["PATH"] = _path_without_dot(base / "bin")
    probe = subprocess.run(["which", "dot"], env=env, capture_output=True, check=False)
    assert probe.returncode != 0, f"`dot` still on the stripped PATH: {probe.stdout!r}"
    return clone, env


def test_readme_still_starts_with_these_two_commands():
    readme = (ROOT / "README.md").read_text()
    first_block = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    for command in README_COMMANDS:
        assert command in first_block, f"README's first block no longer has {command!r}"


def test_preview_prints_the_plan_without_graphviz(fresh):
    clone, env = fresh
    run = subprocess.run(
        [sys.executable, "-m", "tools.preview", "dev"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stdout}\n{run.stderr}"
    out = run.stdout
    for section in ("+ pulumi:pulumi:Stack", "Chains:", "Policies: "):
        assert section in out, f"no {section!r} in the preview:\n{out}"
    assert out.index("Chains:") < out.index("graph picture skipped"), out
    assert (clone / "build" / "preview" / "dev" / "graph.dot").is_file()


def test_the_preview_tests_pass_without_graphviz(fresh):
    clone, env = fresh
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_preview.py"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    tail = "\n".join(run.stdout.splitlines()[-15:])
    assert run.returncode == 0, f"pytest exit {run.returncode} without Graphviz:\n{tail}"
    assert " passed" in tail and "error" not in tail, tail
    assert f"`dot` is not on PATH; install it: {graph_picture.INSTALL_HINT}" in run.stdout, (
        f"the picture tests did not say why they skipped:\n{tail}"
    )


def test_a_missing_tool_skips_saying_what_to_install(monkeypatch):
    monkeypatch.delenv(CI_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="install it: apt-get install -y no-such-tool"):
        require_tool("gpu-cluster-no-such-tool", "apt-get install -y no-such-tool")


@pytest.mark.parametrize("value", ["true", "True"])
def test_a_missing_tool_fails_in_ci(monkeypatch, value):
    """CI sets CI=true (GitHub Actions does, and .ci/run installs the tools): there a test that
    skipped for a missing tool would pass by not running."""
    monkeypatch.setenv(CI_ENV, value)
    with pytest.raises(pytest.fail.Exception, match="CI=true: CI must run this test"):
        require_tool("gpu-cluster-no-such-tool", "apt-get install -y no-such-tool")


# The calls of tests/helpers/tools.py whose second argument tells a newcomer what to install.
TOOL_CHECKS = ("require_tool", "missing")


def _string_constants(tree: ast.Module) -> dict[str, str]:
    """A module's top-level NAME = "string" assignments."""
    return {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name) and isinstance(node.value.value, str)
    }


def _install_hints(path: Path) -> list[str]:
    """The install hints a test module passes to require_tool or missing: literal strings, the
    literal parts of f-strings, and the constants they name (the module's own, or imported from
    a module of this repository)."""
    tree = ast.parse(path.read_text(), str(path))
    constants = _string_constants(tree)
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests."):
            source = ROOT / f"{node.module.replace('.', '/')}.py"
            if source.is_file():
                theirs = _string_constants(ast.parse(source.read_text(), str(source)))
                for alias in node.names:
                    if alias.name in theirs:
                        constants[alias.asname or alias.name] = theirs[alias.name]
    hints = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", "") in TOOL_CHECKS):
            continue
        args = [*node.args[1:2], *(k.value for k in node.keywords if k.arg == "install")]
        for arg in args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                hints.append(arg.value)
            elif isinstance(arg, ast.JoinedStr):
                hints.append("".join(v.value for v in arg.values if isinstance(v, ast.Constant)))
            elif isinstance(arg, ast.Name) and arg.id in constants:
                hints.append(constants[arg.id])
    return hints


def test_ci_installs_every_tool_a_test_may_skip_for():
    """What tests/helpers/tools.py lets a newcomer's run skip, .ci/run installs, pinned as the
    tests name it, and it runs the tests with CI=true: every apt package a test's
    require_tool or missing names (the fakes of this module's own tests aside)."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert graph_picture.INSTALL_HINT.rsplit(" ", 1)[1] in ci, "graphviz is not installed by CI"
    assert ACTIONLINT_INSTALL.rsplit(" ", 1)[1] in ci, f"CI does not {ACTIONLINT_INSTALL}"
    assert re.search(r"^export CI=true$", ci, re.MULTILINE), ".ci/run does not set CI=true"
    installed = set(re.findall(r"missing\+=\(([^)]*)\)", ci))
    installed = {package for group in installed for package in group.split()}
    named: dict[str, set[str]] = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for hint in _install_hints(path):
            for command in hint.split("&&"):
                words = command.split()
                if words[:2] == ["apt-get", "install"]:
                    packages = {w for w in words[2:] if not w.startswith("-")}
                    named.setdefault(path.name, set()).update(packages - {"no-such-tool"})
    every = set().union(*named.values())
    assert {"apt-utils", "gnupg", "systemd", "openssh-server"} <= every, named
    for module, packages in named.items():
        assert packages <= installed, f".ci/run does not install {packages - installed} ({module})"


def _imported_top_levels(paths: list[Path]) -> set[str]:
    names: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def _required_distributions(requirements: Path) -> set[str]:
    names: set[str] = set()
    for raw in requirements.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("-r "):
            names |= _required_distributions(requirements.parent / line[3:].strip())
        elif line:
            names.add(line.split("==", 1)[0].split("[", 1)[0].strip().lower().replace("_", "-"))
    return names


def test_requirements_install_every_third_party_import():
    sources = [
        *ROOT.glob("*.py"),
        *ROOT.glob("components/**/*.py"),
        *ROOT.glob("tools/**/*.py"),
        *ROOT.glob("tests/**/*.py"),
        *ROOT.glob("policies/**/*.py"),
    ]
    local = {"components", "tools", "tests", "policies", "gpu_cluster_policies", "__main__"}
    # The stubs' Python helpers run as scripts from tests/stubs/ and import their siblings.
    local |= {path.stem for path in (ROOT / "tests" / "stubs").glob("*.py")}
    third_party = {
        name
        for name in _imported_top_levels(sources) - local
        if name not in sys.stdlib_module_names
    }
    required = _required_distributions(ROOT / "requirements-dev.txt")
    providers = metadata.packages_distributions()
    installed_with = {}
    for name in sorted(third_party):
        dists = {d.lower().replace("_", "-") for d in providers.get(name, [])}
        installed_with[name] = dists
        # The import is covered when one of its distributions is named, or pulled in by one
        # that is (pulumi brings grpc and google.protobuf, for example).
    missing = []
    for name, dists in installed_with.items():
        if dists & required:
            continue
        if any(dists & _dependencies_of(req) for req in required):
            continue
        missing.append(f"{name} (from {sorted(dists) or 'no installed package'})")
    assert not missing, f"imported but not installed by requirements-dev.txt: {missing}"


def _dependencies_of(distribution: str, seen: set[str] | None = None) -> set[str]:
    seen = set() if seen is None else seen
    try:
        requires = metadata.requires(distribution) or []
    except metadata.PackageNotFoundError:
        return set()
    for spec in requires:
        if "extra ==" in spec:
            continue
        name = spec.split(";", 1)[0]
        for stop in "<>=!~[ (":
            name = name.split(stop, 1)[0]
        name = name.strip().lower().replace("_", "-")
        if name and name not in seen:
            seen.add(name)
            _dependencies_of(name, seen)
    return seen

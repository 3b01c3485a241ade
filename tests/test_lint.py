"""Lint is part of the test command: ruff for Python, shellcheck for every host script and stub."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from components.hosts.rendering import SCRIPTS_DIR

ROOT = Path(__file__).resolve().parent.parent


def _bash_files() -> list[Path]:
    found = sorted(SCRIPTS_DIR.rglob("*.sh"))
    for path in sorted((ROOT / "tests" / "stubs").glob("*")):
        head = path.read_text(errors="replace").split("\n", 3)[:3] if path.is_file() else []
        if any("bash" in line for line in head):
            found.append(path)
    found.append(ROOT / ".ci" / "run")
    return found


def _run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("command", [("check", "."), ("format", "--check", ".")], ids=str)
def test_ruff(command):
    ruff = shutil.which("ruff")
    assert ruff, "ruff is not installed: pip install -r requirements-dev.txt"
    result = _run(ruff, *command)
    assert result.returncode == 0, f"ruff {' '.join(command)}:\n{result.stdout}{result.stderr}"


def test_shellcheck_every_script():
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck is not installed: pip install -r requirements-dev.txt"
    files = _bash_files()
    assert len(files) > 20, f"expected the host scripts and stubs, found {files}"
    result = _run(shellcheck, "-x", "--severity=style", *map(str, files))
    assert result.returncode == 0, f"shellcheck findings:\n{result.stdout}{result.stderr}"

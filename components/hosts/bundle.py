"""Host scripts travel once per host, not once per step.

Each script is bundled as one self-contained program (lib/common.sh, then the script, both
without comments and blank lines) named by its sha256, written under build/host-scripts/<role>/
and copied to every host of that role by one `CopyToRemote` (its state keeps the directory's
path and hash, not the text). A step then carries only its parameters and the digest of the
program it runs (lib/run-by-digest.sh), so a real change re-runs it and a comment does not.
Why: docs/decisions/026-scripts-travel-once-per-host.md.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from components.hosts.rendering import COMMON_LIB, SCRIPTS_DIR, stripped_script

ROOT = SCRIPTS_DIR.parents[2]
# Where the bundles are written, under the project (the program runs from its root).
BUILD_DIR = ROOT / "build" / "host-scripts"
# Where they land on a host: relative to the login user's home, as SFTP resolves it.
REMOTE_DIR = ".gpu-cluster"
RUNNER = "lib/run-by-digest.sh"
INSTALLED_DIR = "/var/lib/gpu-cluster/scripts"


@functools.cache
def program(script: str) -> str:
    """The bundled program of `script`: what a host runs, byte for byte."""
    if script in (COMMON_LIB, RUNNER):
        raise ValueError(f"{script} is a library, not a host script")
    return (
        "#!/usr/bin/env bash\n"
        f"# {script}, bundled by gpu-cluster (components/hosts/bundle.py)\n"
        + stripped_script(COMMON_LIB)
        + stripped_script(script)
    )


@functools.cache
def digest(script: str) -> str:
    """sha256 of the bundled program of `script`: the name it is run by."""
    return hashlib.sha256(program(script).encode()).hexdigest()


@dataclass(frozen=True)
class Bundle:
    """The programs of one role of host (node, control plane, image builder)."""

    role: str
    scripts: tuple[str, ...]

    @property
    def remote_dir(self) -> str:
        """Where the copy puts them, relative to the login user's home."""
        return f"{REMOTE_DIR}/{self.role}"

    def local_dir(self) -> str:
        """The bundle written out (exactly its programs, each by digest), as a path relative to
        the working directory: what the copy's `FileArchive` names."""
        directory = write(self)
        return os.path.relpath(directory, Path.cwd())


def write(bundle: Bundle) -> Path:
    """Write `bundle` under BUILD_DIR/<role>: each program as <digest>.sh, nothing else (a file
    left by an older bundle would change the directory's hash). Each file is written whole and
    renamed into place, so two programs writing the same bundle at once agree."""
    directory = BUILD_DIR / bundle.role
    directory.mkdir(parents=True, exist_ok=True)
    wanted = {f"{digest(script)}.sh": script for script in bundle.scripts}
    for name, script in sorted(wanted.items()):
        target = directory / name
        text = program(script)
        if target.is_file() and target.read_text(encoding="utf-8") == text:
            continue
        with tempfile.NamedTemporaryFile(
            "w", encoding="utf-8", dir=directory, delete=False, prefix=".tmp-"
        ) as handle:
            handle.write(text)
        os.chmod(handle.name, 0o644)
        os.replace(handle.name, target)
    for stale in directory.iterdir():
        if stale.name not in wanted and not _being_written(stale):
            stale.unlink(missing_ok=True)
    return directory


def _being_written(path: Path) -> bool:
    """A temporary file another program is writing right now (younger than a minute)."""
    import time

    try:
        return path.name.startswith(".tmp-") and time.time() - path.stat().st_mtime < 60
    except FileNotFoundError:
        return False

"""The host scripts as text: read from components/hosts/scripts/, without comments and blank
lines (what a host runs and a later `pulumi up` compares, so a comment edit re-runs nothing), and
a step's parameters as shell assignments. `render_script` makes one self-contained program of a
script and its parameters, as the script tests run it.
"""

from __future__ import annotations

import functools
import hashlib
import re
import shlex
from collections.abc import Mapping
from pathlib import Path

SCRIPTS_DIR = Path(__file__).resolve().parent / "scripts"
COMMON_LIB = "lib/common.sh"

_PARAM_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
# shellcheck directives stay: the rendered program is checked too (tools.preview).
_DIRECTIVE = re.compile(r"^#\s*shellcheck\s")
# A heredoc opened on a line (`<<WORD`, `<<'WORD'`, `<<-"WORD"`), not a here-string (`<<<`).
_HEREDOC = re.compile(r"(?<!<)<<(-?)[ \t]*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")


def available_scripts() -> list[str]:
    """Names of the node scripts, e.g. ["install-driver.sh", ...]."""
    return sorted(p.name for p in SCRIPTS_DIR.glob("*.sh"))


@functools.cache
def script_text(name: str) -> str:
    """The text of a script under SCRIPTS_DIR, e.g. "install-driver.sh" or "lib/common.sh".

    Read once per process: every node renders the same few scripts several times."""
    path = (SCRIPTS_DIR / name).resolve()
    if SCRIPTS_DIR not in path.parents or not path.is_file():
        raise ValueError(
            f"unknown host script {name!r}; expected one of {', '.join(available_scripts())}"
        )
    return path.read_text(encoding="utf-8")


def strip_comments(text: str) -> str:
    """`text` without full-line comments and blank lines: what a host runs and what a later
    `pulumi up` compares, so that editing a comment or spacing changes no input and re-runs
    nothing. Heredoc bodies are kept verbatim (a `#` line in a YAML or config file is content),
    and so are shellcheck directives."""
    kept: list[str] = []
    pending: list[tuple[bool, str]] = []  # heredocs still open: (strip leading tabs, word)
    for line in text.splitlines():
        if pending:
            kept.append(line)
            strip_tabs, word = pending[0]
            if (line.lstrip("\t") if strip_tabs else line) == word:
                pending.pop(0)
            continue
        stripped = line.strip()
        if not stripped or (stripped.startswith("#") and not _DIRECTIVE.match(stripped)):
            continue
        kept.append(line)
        pending = [(m.group(1) == "-", m.group(3)) for m in _HEREDOC.finditer(line)]
    return "".join(f"{line}\n" for line in kept)


@functools.cache
def stripped_script(name: str) -> str:
    """`strip_comments(script_text(name))`, once per process."""
    return strip_comments(script_text(name))


def render_inputs(params: Mapping[str, str]) -> str:
    """`params` as sorted NAME='value' lines, refusing a name or value bash would not keep."""
    lines = []
    for name in sorted(params):
        value = params[name]
        if not isinstance(name, str) or not _PARAM_NAME.match(name):
            raise ValueError(
                f"script parameter name {name!r} is not a shell variable name "
                "(expected ^[A-Z][A-Z0-9_]*$)"
            )
        if not isinstance(value, str):
            raise TypeError(f"script parameter {name} must be a string, got {type(value).__name__}")
        if "\0" in value:
            raise ValueError(f"script parameter {name} contains a NUL byte")
        lines.append(f"{name}={shlex.quote(value)}\n")
    return "".join(lines)


def render_script(name: str, params: Mapping[str, str]) -> str:
    """One bash program: shebang, sorted NAME='value' inputs, common.sh, the script body, the
    last two without comments and blank lines (`strip_comments`)."""
    if name == COMMON_LIB:
        raise ValueError(f"{COMMON_LIB} is a library, not a node script")
    return "".join(
        [
            "#!/usr/bin/env bash\n",
            f"# {name}, rendered by components/hosts/rendering.py; runs as `sudo bash -s`.\n",
            "set +x  # the inputs may hold a secret: keep them out of any trace\n",
            "# ---- inputs\n",
            render_inputs(params),
            f"# ---- {COMMON_LIB}\n",
            stripped_script(COMMON_LIB),
            f"# ---- {name}\n",
            stripped_script(name),
        ]
    )


def script_digest(name: str, params: Mapping[str, str]) -> str:
    """sha256 of the rendered program, for Pulumi `triggers` (re-run on any change)."""
    return program_digest(render_script(name, params))


def program_digest(program: str) -> str:
    """sha256 of a program already rendered by `render_script`."""
    return hashlib.sha256(program.encode("utf-8")).hexdigest()

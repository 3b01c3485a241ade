"""Render the node scripts in components/hosts/scripts/ into programs for `sudo bash -s`.

Each rendered program is self-contained: the inputs as shell assignments, then the shared
library (lib/common.sh), then the script body. It travels on stdin, so inputs never go through
the SSH environment (sshd drops it) and secrets such as the join token never appear in argv.
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
    """`strip_comments(script_text(name))`, once per process: every node renders the same few
    scripts, and stripping them each time was the program's largest own cost
    (`python -m tools.benchmark`)."""
    return strip_comments(script_text(name))


def _assignments(params: Mapping[str, str]) -> str:
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


def render_script(name: str, params: Mapping[str, str], *, remember: bool = True) -> str:
    """One bash program: shebang, sorted NAME='value' inputs, common.sh, the script body, the
    last two without comments and blank lines (`strip_comments`).

    The same name and params always give byte-identical text: the same string object while it
    is among the last renders remembered (`_rendered`). Most steps of a node render exactly
    what the same step of every other node does (their inputs are versions and settings, not
    the node), and a fleet then holds one copy of each, not one per node. `remember=False`
    for a program that holds a secret: it is not kept past its use.
    """
    if name == COMMON_LIB:
        raise ValueError(f"{COMMON_LIB} is a library, not a node script")
    if remember:
        kinds = set(map(type, params))
        kinds.update(map(type, params.values()))
        if kinds <= {str}:  # names and values all strings (else refused below)
            return _rendered(name, tuple(sorted(params.items())))
    return _render(name, params)  # refuses a parameter that is not a string, as it says why


# Renders remembered: a node's own ones pass through, the ones every node shares stay.
_RENDERS_REMEMBERED = 256


@functools.lru_cache(maxsize=_RENDERS_REMEMBERED)
def _rendered(name: str, items: tuple[tuple[str, str], ...]) -> str:
    return _render(name, dict(items))


def _render(name: str, params: Mapping[str, str]) -> str:
    body = stripped_script(name)
    common = stripped_script(COMMON_LIB)
    return "".join(
        [
            "#!/usr/bin/env bash\n",
            # The header names the renderer by its first path: what the stacks sent stays the
            # same bytes, so the move of this module re-ran no step.
            f"# {name}, rendered by components/host_scripts.py; runs as `sudo bash -s`.\n",
            "set +x  # the inputs may hold a secret: keep them out of any trace\n",
            "# ---- inputs\n",
            _assignments(params),
            f"# ---- {COMMON_LIB}\n",
            common,
            f"# ---- {name}\n",
            body,
        ]
    )


def script_digest(name: str, params: Mapping[str, str]) -> str:
    """sha256 of the rendered program, for Pulumi `triggers` (re-run on any change)."""
    return program_digest(render_script(name, params))


def program_digest(program: str) -> str:
    """sha256 of a program already rendered by `render_script`."""
    return hashlib.sha256(program.encode("utf-8")).hexdigest()

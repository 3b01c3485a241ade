"""Every fake is a claim about the world (docs/host-matrix.md, "The tools the scripts run"): each
file in tests/stubs says in its header which real tool and version it stands for and where its
answers come from, an upstream file or function, or output the tool itself generated (a
captured transcript, a sample upstream generated with the tool). A header without a version, or
whose sources are only our description of the tool, is refused; so is a canned answer of the
harness (tools/harness/mocks.py) that does not name the step whose output it stands for.

The header is the leading comment block of a script (after its shebang) or the docstring of a
Python module. It holds, in any wording:
- "stands for" (or "standing for") and a version number (1.35, 580.95.05, 252);
- a source: a file path with a directory and an extension (cmd/kubeadm/app/cmd/version.go,
  src/systemctl/systemctl-is-enabled.c) or a source file of a project's top directory
  (servconf.c), or the words "captured" or "generated" naming output the tool printed
  (tests/upstream/..., a transcript).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.sandbox import STUBS_DIR
from tools import host_matrix
from tools.harness import mocks

STANDS_FOR = re.compile(r"\bstand(?:s|ing) for\b", re.I)
VERSION = re.compile(r"\bv?\d+\.\d+")
UPSTREAM_FILE = re.compile(
    r"\b[\w.@-]+(?:/[\w.@:-]+)+\.[a-z0-9]{1,5}\b"  # a path: cmd/kubeadm/app/cmd/version.go
    r"|\b[\w-]+\.(?:c|cc|cpp|h|go|rs)\b"  # a source file at a project's top: servconf.c
)
GENERATED = re.compile(r"\b(?:captured|generated)\b", re.I)


def stub_files() -> list[Path]:
    """Every file of tests/stubs, the modules of its helper directories too (_python3.10/)."""
    return sorted(
        p
        for p in STUBS_DIR.rglob("*")
        if p.is_file()
        and not any(part.startswith(".") or part == "__pycache__" for part in p.parts)
        and p.suffix != ".pyc"
    )


def stub_name(path: Path) -> str:
    return str(path.relative_to(STUBS_DIR))


def header(path: Path) -> str:
    """The leading comment block, or the docstring of a Python module."""
    text = path.read_text()
    if path.suffix == ".py":
        return ast.get_docstring(ast.parse(text)) or ""
    lines = text.splitlines()
    if lines and (lines[0].startswith("#!") or lines[0].startswith("# shellcheck shell=")):
        lines = lines[1:]
    block = []
    for line in lines:
        if not line.startswith("#") or line.startswith("# shellcheck"):
            break
        block.append(line.lstrip("# "))
    return "\n".join(block)


def problems(text: str) -> list[str]:
    found = []
    if not STANDS_FOR.search(text):
        found.append("does not say which real tool it stands for ('stands for ...')")
    if not VERSION.search(text):
        found.append("names no version of the tool")
    if not (UPSTREAM_FILE.search(text) or GENERATED.search(text)):
        found.append("names no upstream file or function, nor output the tool generated")
    return found


@pytest.mark.parametrize("path", stub_files(), ids=stub_name)
def test_every_stub_names_its_tool_version_and_source(path):
    missing = problems(header(path))
    assert not missing, f"tests/stubs/{stub_name(path)}: its header " + "; ".join(missing)


@pytest.mark.parametrize(
    "text",
    [
        "kubeadm stub.\n  version -o short   v<the installed kubeadm's version>",
        "Stands for kubeadm v1.35: it answers as the docs say it does.",
        "Stands for kubeadm: cmd/kubeadm/app/cmd/version.go `RunVersion`.",
    ],
    ids=["no-claim", "no-source", "no-version"],
)
def test_the_rule_refuses_a_header_without_a_claim_a_source_or_a_version(text):
    assert problems(text)


def test_the_rule_accepts_a_header_with_all_three():
    text = "Stands for kubeadm v1.35.1: cmd/kubeadm/app/cmd/version.go `RunVersion`."
    assert problems(text) == []


@pytest.mark.parametrize("suffix", sorted(mocks.COMMAND_STDOUT))
def test_every_canned_step_output_names_the_script_it_stands_for(suffix):
    """A step's stdout the mocks answer with is a script's output: its docstring names the
    script (and function) whose printing it copies, and tests/test_canned_outputs.py holds it
    to that script's real output."""
    doc = mocks.COMMAND_STDOUT[suffix].__doc__ or ""
    assert problems(doc) == [], f"mocks.COMMAND_STDOUT[{suffix!r}]: {problems(doc)}"
    assert re.search(r"components/hosts/scripts/[\w-]+\.sh|earlier release", doc), doc


def test_the_host_matrix_names_a_tool_for_every_stub():
    """docs/host-matrix.md's table of tools covers every stub, and each stub's header names the
    version that table gives it."""
    rows = {row.stub: row for row in host_matrix.TOOLS}
    stubs = {stub_name(p) for p in stub_files() if not stub_name(p).startswith("_")}
    assert stubs <= set(rows), f"stubs missing from tools/host_matrix.py TOOLS: {stubs - set(rows)}"
    for name in sorted(stubs):
        row = rows[name]
        assert row.version in header(STUBS_DIR / name), (
            f"tests/stubs/{name} does not name version {row.version!r} that "
            "docs/host-matrix.md gives it"
        )

"""The contract between the program and its host scripts: what each script's header of inputs
says, against what the program renders for every host step (create and delete) of every stack.

A required input the program does not pass fails only on a real host, after the instance is up;
a parameter the program passes that the script never reads (a misspelt name) silently leaves the
script on its default. Both are caught here, before any machine exists.
"""

from __future__ import annotations

import re

import pytest

from components.hosts.rendering import SCRIPTS_DIR
from tests.helpers.scripts import declares_no_inputs, header_inputs, host_steps

SCRIPTS = SCRIPTS_DIR
REQUIRE_VARS = re.compile(r"\brequire_vars((?:[ \t]+[A-Z][A-Z0-9_]*|[ \t]*\\\n)+)")


def required_by_code(script: str) -> set[str]:
    text = (SCRIPTS / script).read_text()
    names: set[str] = set()
    for match in REQUIRE_VARS.finditer(text):
        names.update(re.findall(r"[A-Z][A-Z0-9_]*", match.group(1)))
    if "require_node_name" in text:
        names.add("NODE_NAME")
    return names


def test_the_stacks_run_the_scripts_of_components_scripts():
    run = {script for _, _, script, _ in host_steps()}
    assert run <= {p.name for p in SCRIPTS.glob("*.sh")}, run
    assert {"join-node.sh", "init-control-plane.sh"} <= run, run


@pytest.mark.parametrize("script", sorted(p.name for p in SCRIPTS.glob("*.sh")))
def test_the_header_lists_every_input_the_code_requires(script):
    """A header of inputs, or one that says there are none (rotate-host-key.sh, sent alone
    before the host has its scripts); either way every input the code requires is listed."""
    inputs = header_inputs(script)
    assert inputs or declares_no_inputs(script), (
        f"{script}: no header of inputs (nor '# Inputs: none.')"
    )
    assert not (inputs and declares_no_inputs(script)), (
        f"{script}: says it takes no inputs, but lists some"
    )
    for name in sorted(required_by_code(script)):
        assert name in inputs and inputs[name].required, (
            f"{script}: require_vars {name}, but the header does not list it as required"
        )


def test_the_program_passes_what_each_script_requires():
    missing = [
        f"{stack}: {step} runs {script} without {name}"
        for stack, step, script, params in host_steps()
        for name, spec in header_inputs(script).items()
        if spec.required_with(params) and not params.get(name)
    ]
    assert not missing, "\n".join(missing)


def test_the_program_passes_nothing_a_script_does_not_read():
    tunables = header_inputs("lib/common.sh")
    assert "RETRY_MAX_SECONDS" in tunables, "lib/common.sh lists no tunables"
    unread = [
        f"{stack}: {step} passes {name} to {script}, which does not list it"
        for stack, step, script, params in host_steps()
        for name in params
        if name not in header_inputs(script) and name not in tunables
    ]
    assert not unread, "\n".join(unread)

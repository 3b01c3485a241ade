"""The contract between the program and its host scripts: what each script's header of inputs
says, against what the program renders for every host step (create and delete) of every stack.

A required input the program does not pass fails only on a real host, after the instance is up;
a parameter the program passes that the script never reads (a misspelt name) silently leaves the
script on its default. Both are caught here, before any machine exists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

import pytest

from components.hosts.rendering import SCRIPTS_DIR
from tools.harness.graph import program_params, program_script, unwrap
from tools.harness.stacks import STACKS, run_program, stack_file

SCRIPTS = SCRIPTS_DIR
INPUT_LINE = re.compile(r"^#   ([A-Z][A-Z0-9_]*)\s+(.*)$")
CONTINUATION = re.compile(r"^#\s{4,}(\S.*)$")
REQUIRED_UNLESS = re.compile(r"required unless ([A-Z][A-Z0-9_]*)=(\S+?)\)")
REQUIRE_VARS = re.compile(r"\brequire_vars((?:[ \t]+[A-Z][A-Z0-9_]*|[ \t]*\\\n)+)")


@dataclass(frozen=True)
class Input:
    name: str
    description: str

    @property
    def required(self) -> bool:
        return "(required" in self.description

    def required_with(self, params: dict[str, str]) -> bool:
        unless = REQUIRED_UNLESS.search(self.description)
        if unless and params.get(unless.group(1)) == unless.group(2):
            return False
        return self.required


@cache
def header_inputs(script: str) -> dict[str, Input]:
    """The inputs a script's header lists (common.sh: its optional tunables)."""
    found: dict[str, list[str]] = {}
    current = None
    for line in (SCRIPTS / script).read_text().splitlines()[1:]:
        if not line.startswith("#"):
            break
        if match := INPUT_LINE.match(line):
            current = match.group(1)
            found[current] = [match.group(2)]
        elif (match := CONTINUATION.match(line)) and current:
            found[current].append(match.group(1))
        else:
            current = None
    return {name: Input(name, " ".join(text)) for name, text in found.items()}


def required_by_code(script: str) -> set[str]:
    text = (SCRIPTS / script).read_text()
    names: set[str] = set()
    for match in REQUIRE_VARS.finditer(text):
        names.update(re.findall(r"[A-Z][A-Z0-9_]*", match.group(1)))
    if "require_node_name" in text:
        names.add("NODE_NAME")
    return names


def rendered_params(program: str) -> tuple[str, dict[str, str]]:
    """(script name, NAME=value inputs) of what a step sends: its parameters and the program it
    runs by digest (components/hosts/remote.py step_program)."""
    return program_script(program), program_params(program)


def _every_feature() -> dict:
    """prod with what no stack file turns on: EFA on its p5 pool, its t4 pool from a baked
    image (the image builder's steps), so every script the program can send is checked."""
    pools = []
    for pool in stack_file("prod")["gpu-cluster:nodePools"]:
        if pool["instanceType"].startswith("p5"):
            pool = {**pool, "efa": True}
        elif pool["name"] == "t4":
            pool = {**pool, "image": "baked"}
        pools.append(pool)
    return {"nodePools": pools}


# The stack files, and one variant that uses what they leave off (EFA, baked images).
PROGRAMS = [(stack, stack, None) for stack in STACKS] + [
    ("prod+efa+baked", "prod", _every_feature())
]


@cache
def host_steps() -> list[tuple[str, str, str, dict[str, str]]]:
    """(stack, step name, script, params) of every program the stacks send to hosts."""
    steps = []
    for label, stack, config in PROGRAMS:
        for step in run_program(stack, config=config).of_type("command:remote:Command"):
            steps.append((label, step.name, *rendered_params(unwrap(step.inputs["stdin"]))))
            delete = unwrap(step.inputs.get("delete"))
            if delete:
                body = delete.split("\n", 1)[1]
                steps.append((label, f"{step.name} (delete)", *rendered_params(body)))
    return steps


def test_the_stacks_run_the_scripts_of_components_scripts():
    run = {script for _, _, script, _ in host_steps()}
    assert run <= {p.name for p in SCRIPTS.glob("*.sh")}, run
    assert {"join-node.sh", "init-control-plane.sh"} <= run, run


@pytest.mark.parametrize("script", sorted(p.name for p in SCRIPTS.glob("*.sh")))
def test_the_header_lists_every_input_the_code_requires(script):
    inputs = header_inputs(script)
    assert inputs, f"{script}: no header of inputs"
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

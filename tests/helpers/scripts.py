"""The host scripts as the program sends them: the inputs each script's header lists, and the
program (script name and NAME=value inputs) of every host step of every stack, create and
delete."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from components.hosts.rendering import SCRIPTS_DIR
from tools.harness.graph import program_params, program_script, unwrap
from tools.harness.stacks import STACKS, run_program, stack_file

INPUT_LINE = re.compile(r"^#   ([A-Z][A-Z0-9_]*)\s+(.*)$")
CONTINUATION = re.compile(r"^#\s{4,}(\S.*)$")
REQUIRED_UNLESS = re.compile(r"required unless ([A-Z][A-Z0-9_]*)=(\S+?)\)")
NO_INPUTS = "# Inputs: none."
# "(required with NAME)": only when NAME is given; "(required with NAME=value)": only then.
REQUIRED_WITH = re.compile(r"required with ([A-Z][A-Z0-9_]*)(?:=([^\s)]+))?")


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
        if with_ := REQUIRED_WITH.search(self.description):
            given = params.get(with_.group(1))
            return bool(given) if with_.group(2) is None else given == with_.group(2)
        return self.required


@cache
def header_inputs(script: str) -> dict[str, Input]:
    """The inputs a script's header lists (common.sh: its optional tunables)."""
    found: dict[str, list[str]] = {}
    current = None
    for line in (SCRIPTS_DIR / script).read_text().splitlines()[1:]:
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


def declares_no_inputs(script: str) -> bool:
    """The script's header says it takes no inputs (`# Inputs: none.`)."""
    for line in (SCRIPTS_DIR / script).read_text().splitlines()[1:]:
        if not line.startswith("#"):
            return False
        if line.startswith(NO_INPUTS):
            return True
    return False


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
    """(stack, step name, script, params) of every program the stacks send to hosts (a
    Command without stdin, `<node>-in-service`, sends none)."""
    steps = []
    for label, stack, config in PROGRAMS:
        for step in run_program(stack, config=config).of_type("command:remote:Command"):
            if "stdin" in step.inputs:
                steps.append((label, step.name, *rendered_params(unwrap(step.inputs["stdin"]))))
    return steps


def step_program(graph, name: str) -> str:
    """The program a host step sends on stdin (`sudo bash -s`)."""
    return unwrap(graph.named(name).inputs["stdin"])

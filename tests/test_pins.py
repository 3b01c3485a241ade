"""Versions the program pins (not configuration) agree across every place that states them: what
the program renders into its host steps in every stack, the README, the example in the script's
header of inputs, and the version the sandbox tests of that script run with.

Never against a constant imported from the code under test: that comparison cannot fail.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from components.hosts.rendering import SCRIPTS_DIR
from tests.helpers.control_plane_host import CNI
from tests.helpers.gpu_host import RUNTIME
from tools.harness.graph import script_params
from tools.harness.stacks import STACKS, run_program

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = SCRIPTS_DIR
README = (ROOT / "README.md").read_text()

# param -> (script, README phrase before the pin, version the script's sandbox tests use)
PINS = {
    "FLANNEL_VERSION": ("install-cni.sh", "flannel", CNI["FLANNEL_VERSION"]),
    "NVIDIA_CTK_VERSION": (
        "install-runtime.sh",
        "NVIDIA Container Toolkit",
        RUNTIME["NVIDIA_CTK_VERSION"],
    ),
}


@pytest.fixture(scope="module")
def rendered() -> dict[str, set[str]]:
    """Every value each pinned parameter takes in the host steps of every stack."""
    found: dict[str, set[str]] = {param: set() for param in PINS}
    for stack in STACKS:
        for step in run_program(stack).of_type("command:remote:Command"):
            params = script_params(step)
            for param in PINS:
                if param in params:
                    found[param].add(params[param])
    return found


def readme_pin(phrase: str) -> str:
    match = re.search(rf"{re.escape(phrase)} `([^`]+)`", README)
    assert match, f"README states no pinned version after {phrase!r}"
    return match.group(1)


def header_example(script: str, param: str) -> str:
    text = (SCRIPTS / script).read_text()
    match = re.search(rf"^#\s+{param}\s.*?e\.g\. (\S+?)[,;)]?(?:\s|$)", text, re.MULTILINE)
    assert match, f"{script}: the header of inputs gives no example of {param}"
    return match.group(1)


@pytest.mark.parametrize("param", sorted(PINS))
def test_a_pin_is_the_same_everywhere_it_is_stated(rendered, param):
    script, phrase, tested = PINS[param]
    values = rendered[param]
    assert len(values) == 1, f"{param}: the stacks render different pins: {sorted(values)}"
    (program,) = values
    places = {
        "program (rendered host steps)": program,
        "README": readme_pin(phrase),
        f"{script} header": header_example(script, param),
        f"sandbox tests of {script}": tested,
    }
    assert len(set(places.values())) == 1, f"{param} differs between places: {places}"

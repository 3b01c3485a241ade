"""Every `fatal` in the host scripts is reached by a test that asserts its message.

A `fatal` no test reaches can turn into a `log` (the step reports the problem and carries on)
without any test noticing. The messages are read from the scripts; a test "asserts" one when a
test file that runs the script holds a string that is a piece of the message (its text between
the variable parts), or holds the message's longest fixed piece.
"""

from __future__ import annotations

import ast
import re
from difflib import SequenceMatcher
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "components" / "scripts"
VARIABLE = re.compile(r"\$\{[^}]*\}|\$\([^)]*\)|\$[A-Za-z_][A-Za-z0-9_]*")
FATAL = re.compile(r"\bfatal\s+\"((?:[^\"\\]|\\.)*)\"((?:\s*\\\n\s*\"(?:[^\"\\]|\\.)*\")*)")
SHORTEST_PIECE = 12

# Messages whose test asserts a piece shorter than SHORTEST_PIECE, with that piece.
ASSERTED_AS = {
    ("wait-gpu-capacity.sh", "after ${TIMEOUT_SECONDS}s: $(describe_state)"): "after 1s:",
}
# Messages no input can reach, with the reason; a mutant there changes nothing.
UNREACHABLE = {
    ("mint-join-token.sh", "could not hash the public key of ${CA_CERT}"): (
        "the hash is a pipeline under pipefail: a CA openssl cannot read fails the assignment "
        "(the ERR trap names the step), and sha256sum always prints 64 hex digits"
    ),
}

# Not reached by any test yet (steps of the rolling upgrade and baked-image work): a ratchet, so
# a new fatal without a test fails; each entry leaves with the test that reaches it.
NOT_REACHED_YET = {
    # Control-plane hardening and the operators' kubeconfig.
    ("init-control-plane.sh", "could not make a 32-byte key for ${ENCRYPTION_CONFIG}"),
    ("user-kubeconfig.sh", "API_SERVER must be https://host:port, got '${API_SERVER}'"),
    (
        "user-kubeconfig.sh",
        "expected one cluster server in the kubeconfig kubeadm issued, found ${servers}",
    ),
    # The driver/runtime rework, key rotation, label reconciliation and token checks.
    (
        "authorize-ssh-keys.sh",
        "user ${SSH_USER} expected with a home directory, getent finds '${HOME_DIR}'",
    ),
    ("disable-nouveau.sh", "the archive has no $(nvidia_module_package "),
    (
        "install-driver.sh",
        "${module} is not built for a ${DRIVER_BRANCH} driver (Depends: ${depends:-none})",
    ),
    ("install-driver.sh", "nvlsm is not in this host's package archive"),
    (
        "install-driver.sh",
        "persistence mode Enabled on ${GPU_COUNT} GPU(s) expected, nvidia-smi reports ${modes}",
    ),
    (
        "install-runtime.sh",
        "${key} = ${setting#*=} expected in ${TOOLKIT_CONFIG}, found '$(toml_value ",
    ),
    ("label-node.sh", "Node ${NODE_NAME} expected (the node-ready step waits for it), not found"),
    (
        "common.sh",
        "${pkg} is not in this host's package archive: driver branch ${DRIVER_BRANCH}"
        " (${KERNEL_MODULES} kernel modules) has no Ubuntu packages for this release",
    ),
    ("wait-node-ready.sh", "TOKEN_ID must be 6 of [a-z0-9], got '${TOKEN_ID}'"),
    ("common.sh", "could not ${verb} Lease ${SLOT_NAMESPACE}/$(slot_lease_name "),
    ("common.sh", "kubeadm v${KUBERNETES_MINOR}.x expected after the install, found ${found}"),
    (
        "power-off-builder.sh",
        "POWER_OFF_DELAY_SECONDS must be a whole number, got '${POWER_OFF_DELAY_SECONDS}'",
    ),
    ("pull-images.sh", "image ${ref} expected in containerd, not found"),
    ("roll-drain.sh", "${name} must be a whole number, got '${!name}'"),
    ("roll-drain.sh", "POOL_NAME must be a lowercase DNS label, got '${POOL_NAME}'"),
    (
        "roll-uncordon.sh",
        "cannot read ${ADMIN_CONF}: this step runs on a kubeadm control-plane node",
    ),
    (
        "roll-uncordon.sh",
        "Node ${NODE_NAME} is not registered; it must have joined before it is put back",
    ),
    (
        "roll-uncordon.sh",
        "Node ${NODE_NAME} not Ready after ${READY_TIMEOUT_SECONDS}s; it stays cordoned."
        " Look at 'journalctl -u kubelet' on the node",
    ),
    ("upgrade-control-plane.sh", "no gitVersion in the API server's /version answer"),
    (
        "upgrade-control-plane.sh",
        "API server not ready ${API_WAIT_SECONDS:-300}s after kubeadm upgrade apply; look at"
        " 'journalctl -u kubelet' and 'crictl ps -a' on this host",
    ),
    (
        "upgrade-control-plane.sh",
        "API server reports ${running} after the upgrade, ${KUBERNETES_MINOR} expected",
    ),
    ("upgrade-node.sh", "joined (${KUBELET_CONF}) but no kubelet package installed"),
}


def fatal_messages() -> list[tuple[str, str]]:
    """(script, message template) of every `fatal "..."` call, continuation lines joined."""
    found = []
    for path in sorted(SCRIPTS.rglob("*.sh")):
        for match in FATAL.finditer(path.read_text()):
            parts = [match.group(1), *re.findall(r"\"((?:[^\"\\]|\\.)*)\"", match.group(2))]
            found.append((path.name, " ".join(parts).replace('\\"', '"')))
    return found


@cache
def strings_in_tests() -> dict[str, tuple[str, list[str]]]:
    """test file -> (its text, every string constant in it, line by line)."""
    found = {}
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        if path.name == Path(__file__).name:
            continue
        text = path.read_text()
        pieces = [
            line
            for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            for line in node.value.splitlines()
        ]
        found[path.name] = (text, pieces)
    return found


def _overlap(a: str, b: str) -> int:
    return SequenceMatcher(None, a, b, autojunk=False).find_longest_match().size


def asserted(script: str, message: str) -> bool:
    """A test of `script` holds a string that shares a run of text with a fixed piece of the
    message: 24 characters, or all of the piece or of the string when one is shorter (but at
    least SHORTEST_PIECE)."""
    pieces = [p.strip() for p in VARIABLE.split(message) if len(p.strip()) >= 6]
    wanted = ASSERTED_AS.get((script, message))
    for text, strings in strings_in_tests().values():
        if script not in text and script != "common.sh":
            continue
        for string in strings:
            if wanted is not None and wanted in string:
                return True
            for piece in pieces:
                shared = _overlap(piece, string)
                if shared >= SHORTEST_PIECE and shared >= min(len(piece), len(string), 24):
                    return True
    return False


def test_the_scripts_have_fatals_to_check():
    messages = fatal_messages()
    assert len(messages) > 50, messages
    assert ("reset-node.sh", "x") not in messages
    assert any("containerd expected active" in m for _, m in messages)


@pytest.mark.parametrize(
    ("script", "message"),
    [
        pytest.param(s, m, id=f"{s}: {m[:60]}")
        for s, m in fatal_messages()
        if (s, m) not in UNREACHABLE and (s, m) not in NOT_REACHED_YET
    ],
)
def test_every_fatal_is_asserted_by_a_test_of_its_script(script, message):
    assert asserted(script, message), (
        f"{script}: no test asserts the fatal {message!r}; add a test that reaches it (a stub "
        "failure switch in tests/stubs/ simulates the field failure), or list it in UNREACHABLE "
        "with the reason"
    )


def test_unreachable_and_override_entries_are_still_in_the_scripts():
    messages = set(fatal_messages())
    for entry in [*UNREACHABLE, *ASSERTED_AS, *NOT_REACHED_YET]:
        assert entry in messages, f"{entry} is no longer a fatal of its script: remove the entry"
    reached = [entry for entry in NOT_REACHED_YET if asserted(*entry)]
    assert not reached, f"reached by a test now, remove from NOT_REACHED_YET: {reached}"

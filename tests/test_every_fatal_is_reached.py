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

from components.hosts.rendering import SCRIPTS_DIR

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = SCRIPTS_DIR
VARIABLE = re.compile(r"\$\{[^}]*\}|\$\([^)]*\)|\$[A-Za-z_][A-Za-z0-9_]*")
# A double-quoted bash word: plain text, escapes, and command substitutions whose own quoted
# arguments ("$(toml_value "${file}" "" key)") do not end the word.
QUOTED = r"\"((?:[^\"\\$]|\\.|\$\((?:[^()\"]|\"(?:[^\"\\]|\\.)*\")*\)|\$)*)\""
FATAL = re.compile(rf"\bfatal\s+{QUOTED}((?:\s*\\\n\s*{QUOTED})*)")
SHORTEST_PIECE = 12

# Messages whose test asserts a piece shorter than SHORTEST_PIECE, with that piece.
ASSERTED_AS = {
    ("join-node.sh", "after ${limit}s: $(describe_state)"): "after 1s: Node",
    # Its ERR trap (it stands alone, without lib/common.sh): a failing command's line.
    ("rotate-host-key.sh", "line ${LINENO}: ${BASH_COMMAND}"): "[host-key] FAILED: line ",
}
# Messages no input can reach, with the reason; a mutant there changes nothing. Empty: such a
# check is dead code to remove (or to rewrite so that the failure it names reaches it).
UNREACHABLE: dict[tuple[str, str], str] = {}

# Not reached by any test yet: empty, and meant to stay so. A new fatal comes with the test that
# reaches it (a stub failure switch simulates the field failure); one no input can reach is dead
# code to remove, not an entry here.
NOT_REACHED_YET: set[tuple[str, str]] = set()


def fatal_messages() -> list[tuple[str, str]]:
    """(script, message template) of every `fatal "..."` call, continuation lines joined."""
    found = []
    for path in sorted(SCRIPTS.rglob("*.sh")):
        for match in FATAL.finditer(path.read_text()):
            parts = [match.group(1), *re.findall(QUOTED, match.group(2))]
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
    # join-node.sh's own: a Node that never registered.
    join = [m for s, m in messages if s == "join-node.sh"]
    assert any("after ${limit}s: $(describe_state)" in m for m in join), join


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

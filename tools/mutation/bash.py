"""A line mutator for the host scripts: the mistakes a reviewer misses in bash.

Operators (one mutant per place each applies): fatal-to-log, default-number, timeout-bound,
drop-errexit, negate-condition, swap-equality, swap-and-or, numeric-compare, exit-status and
drop-command; what each changes is in `_line_mutants` and in
docs/decisions/022-mutation-tests-run-only-the-tests-that-can-see-a-mutant.md.

Comments, heredoc bodies and the inside of multi-line single-quoted strings are not mutated.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tools.mutation.mutants import Mutant

_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
_FATAL = re.compile(r"(?:^|(?<=[\s;&|{(!]))fatal(?=\s)")
_DEFAULT_NUMBER = re.compile(r"\$\{[A-Z_][A-Z0-9_]*:-(\d+)\}")
_TIMEOUT = re.compile(r"\btimeout\s+(?:-k\s+\d+\s+)?(\d+)\b")
_SET_E = re.compile(r"^(\s*set\s+-[A-Za-z]*?)e([A-Za-z]*)")
_CONDITION = re.compile(r"^(\s*)(if|elif|while|until)\s+(?!!)")
_TEST_LINE = re.compile(r"^(\s*)(\[\[|\(\()")
_EQUALITY = re.compile(r"==|!=")
_AND_OR = re.compile(r"&&|\|\|")
_ARITH = re.compile(r"\(\((.*?)\)\)")
_ARITH_OPS = re.compile(r">=|<=|>|<")
_TEST_OPS = re.compile(r"\s-(gt|ge|lt|le)\s")
_EXIT = re.compile(r"\b(return|exit)\s+([01])\b")
_CONTROL = re.compile(
    r"^\s*(if|then|else|elif|fi|for|while|until|do|done|case|esac|function|local\s+-n)\b|"
    r"^\s*[{}()]\s*$|;;|^\s*[^\s()'\"]*\)\s|\(\)\s*\{\s*$|[{(]\s*$|^\s*\)"
)

# Lines whose removal is no step left out: progress lines, declarations, the shell options
# (drop-errexit mutates those).
_NOT_A_STEP = re.compile(r"^\s*(log|local|declare|set|shopt)\b")

ARITH_SWAP = {">=": ">", ">": ">=", "<=": "<", "<": "<="}
TEST_SWAP = {"gt": "ge", "ge": "gt", "lt": "le", "le": "lt"}


def _mutable_lines(text: str) -> Iterator[tuple[int, str]]:
    """(index, line) of the lines a mutant may change: code, not comments, heredoc bodies or
    the inside of multi-line single-quoted strings."""
    heredoc_end: str | None = None
    in_quote = False
    for index, line in enumerate(text.split("\n")):
        if heredoc_end is not None:
            if line.strip() == heredoc_end:
                heredoc_end = None
            continue
        opened_inside = in_quote
        if line.count("'") % 2 == 1:
            in_quote = not in_quote
        if opened_inside:
            continue
        if line.lstrip().startswith("#") or not line.strip():
            continue
        match = _HEREDOC.search(line)
        if match and "<<<" not in line:
            heredoc_end = match.group(2)
        yield index, line


def _replace_line(index: int, new_line: str):
    def apply(text: str) -> str | None:
        lines = text.split("\n")
        if index >= len(lines):
            return None
        lines[index] = new_line
        return "\n".join(lines)

    return apply


def _line_mutants(path: str, index: int, line: str, previous: str) -> Iterator[Mutant]:
    def mutant(operator: str, column: int, new_line: str) -> Mutant:
        return Mutant(
            path=path,
            line=index + 1,
            operator=f"bash/{operator}",
            site=(index + 1, column),
            apply=_replace_line(index, new_line),
        )

    for m in _FATAL.finditer(line):
        if not line[m.end() :].lstrip().startswith("()"):
            yield mutant("fatal-to-log", m.start(), f"{line[: m.start()]}log{line[m.end() :]}")
    for m in _DEFAULT_NUMBER.finditer(line):
        number = int(m.group(1))
        new = "1" if number not in (0, 1) else str(number + 1)
        yield mutant("default-number", m.start(1), f"{line[: m.start(1)]}{new}{line[m.end(1) :]}")
    for m in _TIMEOUT.finditer(line):
        if m.group(1) != "1":
            yield mutant("timeout-bound", m.start(1), f"{line[: m.start(1)]}1{line[m.end(1) :]}")
    m = _SET_E.match(line)
    if m:
        yield mutant("drop-errexit", m.end(1), f"{m.group(1)}{m.group(2)}{line[m.end() :]}")
    m = _CONDITION.match(line)
    if m:
        yield mutant("negate-condition", m.end(), f"{line[: m.end()]}! {line[m.end() :]}")
    elif _TEST_LINE.match(line) and not previous.rstrip().endswith(("\\", "&&", "||", "|")):
        m = _TEST_LINE.match(line)
        yield mutant("negate-condition", m.end(1), f"{m.group(1)}! {line[m.end(1) :]}")
    for m in _EQUALITY.finditer(line):
        swapped = "!=" if m.group() == "==" else "=="
        yield mutant("swap-equality", m.start(), f"{line[: m.start()]}{swapped}{line[m.end() :]}")
    for m in _AND_OR.finditer(line):
        swapped = "||" if m.group() == "&&" else "&&"
        yield mutant("swap-and-or", m.start(), f"{line[: m.start()]}{swapped}{line[m.end() :]}")
    for arith in _ARITH.finditer(line):
        for m in _ARITH_OPS.finditer(arith.group(1)):
            start, end = arith.start(1) + m.start(), arith.start(1) + m.end()
            new = f"{line[:start]}{ARITH_SWAP[m.group()]}{line[end:]}"
            yield mutant("numeric-compare", start, new)
    for m in _TEST_OPS.finditer(line):
        new = f"{line[: m.start(1)]}{TEST_SWAP[m.group(1)]}{line[m.end(1) :]}"
        yield mutant("numeric-compare", m.start(1), new)
    for m in _EXIT.finditer(line):
        new = f"{line[: m.start(2)]}{'0' if m.group(2) == '1' else '1'}{line[m.end(2) :]}"
        yield mutant("exit-status", m.start(2), new)
    continues = line.rstrip().endswith(("\\", "|", "&&"))
    continued = previous.rstrip().endswith(("\\", "|", "&&"))
    if not (continues or continued or _CONTROL.search(line) or _NOT_A_STEP.match(line)):
        indent = line[: len(line) - len(line.lstrip())]
        yield mutant("drop-command", -1, f"{indent}:")


def mutants_of(path: Path, relative: str) -> list[Mutant]:
    """Every line mutant of one bash file."""
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    found: list[Mutant] = []
    for index, line in _mutable_lines(text):
        previous = lines[index - 1] if index else ""
        found.extend(_line_mutants(relative, index, line, previous))
    return found


def parses(mutant: Mutant, original: str) -> bool:
    """The mutated script still parses (`bash -n`): a syntax error is not a mutant worth a run."""
    mutated = mutant.apply(original)
    if mutated is None or mutated == original:
        return False
    result = subprocess.run(
        ["bash", "-n"], input=mutated, capture_output=True, text=True, check=False
    )
    return result.returncode == 0

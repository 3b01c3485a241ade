"""Which test files can catch a mutant of which source file.

A test file matches a source file when it names it (`components.aws.network`, `install-runtime.sh`),
or reaches it through what it runs: the program under the harness (`tools.harness.stacks`) runs
every module of components/; the script sandbox (`tests.sandbox`) renders with
components/hosts/rendering.py and lib/common.sh. Test files that name the file come first (they
usually kill a mutant within seconds; pytest stops at the first failure).

Left out, so that a mutant counts as killed only by a test of behaviour: the linters
(tests/test_lint.py, tests/test_workflows.py, shellcheck in the preview tests) and the digest
pin of every rendered script (tests/test_preview.py, tests/test_first_commands.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# test_first_commands runs `pytest tests/test_preview.py` in a subprocess, digest pin included:
# it fails on any change to a rendered script or manifest, like the pin itself.
NOT_BEHAVIOUR = (
    "tests/test_lint.py",
    "tests/test_workflows.py",
    "tests/test_mutation_tool.py",
    "tests/test_first_commands.py",
)
# pytest node-id prefixes (--deselect): change detectors and lint inside behaviour test files.
DESELECT = (
    "tests/test_preview.py::test_rendered_scripts_and_manifests_match_their_digests",
    "tests/test_preview.py::test_every_host_step_has_its_scripts_and_they_pass_shellcheck",
)
# Run last: slow (graph pictures, hypothesis) and rarely the first to catch a mutant.
SLOW = ("tests/test_preview.py", "tests/test_settings.py")


@dataclass(frozen=True)
class Selection:
    files: tuple[str, ...]
    deselect: tuple[str, ...] = DESELECT

    def __bool__(self) -> bool:
        return bool(self.files)


def _names(source: str) -> list[str]:
    """How a test file names a source file."""
    path = Path(source)
    if path.suffix == ".sh":
        return [path.name]
    module = ".".join(path.with_suffix("").parts)
    names = [module, path.name]
    if path.parent.name:
        names.append(rf"from {'.'.join(path.parent.parts)} import [^\n]*\b{path.stem}\b")
    return names


def _reaches(source: str, text: str) -> bool:
    # tests.harness: where the harness lived before tools.harness (a --root on an older tree).
    runs_program = any(
        name in text for name in ("tools.harness.stacks", "tools.harness import", "tests.harness")
    )
    uses_sandbox = "tests.sandbox" in text
    if source.startswith("components/") and source.endswith(".py") and runs_program:
        return True
    if source in ("components/hosts/rendering.py", "components/hosts/scripts/lib/common.sh"):
        return uses_sandbox
    return False


def naming_tests(source: str, root: Path) -> list[str]:
    """The behaviour test files that name `source`, the most mentions first."""
    patterns = [
        re.compile(name if name.startswith("from ") else re.escape(name)) for name in _names(source)
    ]
    named: list[tuple[int, str]] = []
    for test in sorted((root / "tests").glob("test_*.py")):
        relative = test.relative_to(root).as_posix()
        if relative in NOT_BEHAVIOUR:
            continue
        mentions = sum(len(p.findall(test.read_text(encoding="utf-8"))) for p in patterns)
        if mentions:
            named.append((-mentions, relative))
    return [relative for _, relative in sorted(named)]


def matching_tests(source: str, root: Path) -> Selection:
    """The test files (relative paths) that can catch a mutant of `source`, most specific first."""
    named = naming_tests(source, root)
    reached: list[str] = []
    for test in sorted((root / "tests").glob("test_*.py")):
        relative = test.relative_to(root).as_posix()
        if relative in NOT_BEHAVIOUR or relative in named:
            continue
        if _reaches(source, test.read_text(encoding="utf-8")):
            reached.append(relative)
    ordered = named + reached
    ordered.sort(key=lambda relative: relative in SLOW)  # stable: the slow ones last
    return Selection(tuple(ordered))

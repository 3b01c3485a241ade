"""Run sampled mutants against their tests in private copies of the work tree, and report."""

from __future__ import annotations

import json
import os
import queue
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tools.mutation import bash, python
from tools.mutation.coverage_map import LineMap, line_tests, selection_for
from tools.mutation.mutants import Mutant, sample
from tools.mutation.testmap import NOT_BEHAVIOUR, Selection, matching_tests, naming_tests

# components/**: the settings package (components/settings/) holds most of the validation.
PYTHON_SOURCES = ("components/**/*.py", "policies/gpu_cluster_policies/*.py")
BASH_SOURCES = ("components/hosts/scripts/*.sh", "components/hosts/scripts/lib/*.sh")
SKIPPED = ("__init__.py",)


@dataclass
class Outcome:
    key: str
    path: str
    line: int
    operator: str
    status: str  # killed | survived | timeout | no-tests
    seconds: float
    diff: str
    caught_by: str = ""  # the first failing test
    confirmed: bool = False  # a survivor re-run against every behaviour test file


@dataclass
class Report:
    outcomes: list[Outcome] = field(default_factory=list)

    def per_file(self) -> dict[str, tuple[int, int]]:
        counts: dict[str, tuple[int, int]] = {}
        for o in self.outcomes:
            killed, total = counts.get(o.path, (0, 0))
            counts[o.path] = (killed + (o.status in ("killed", "timeout")), total + 1)
        return dict(sorted(counts.items()))

    def survivors(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status in ("survived", "no-tests")]

    def text(self) -> str:
        lines = ["kill rate per file (killed/sampled):"]
        groups: dict[str, list[int]] = {"python": [0, 0], "bash": [0, 0]}
        for path, (killed, total) in self.per_file().items():
            lines.append(f"  {killed:3d}/{total:<3d} {100 * killed / total:5.1f}%  {path}")
            group = groups["bash" if path.endswith(".sh") else "python"]
            group[0] += killed
            group[1] += total
        for name, (killed, total) in groups.items():
            if total:
                lines.append(f"{name}: {killed}/{total} killed ({100 * killed / total:.1f}%)")
        survivors = self.survivors()
        lines.append(f"survivors ({len(survivors)}):")
        for o in survivors:
            note = " (whole suite)" if o.confirmed else ""
            lines.append(f"  {o.key} [{o.status}{note}]")
            lines.extend(f"      {d}" for d in o.diff.splitlines())
        return "\n".join(lines)


def source_files(root: Path, patterns: Iterable[str]) -> list[str]:
    found = set()
    for pattern in patterns:
        for path in root.glob(pattern):
            if path.is_file() and path.name not in SKIPPED and path.stat().st_size:
                found.add(path.relative_to(root).as_posix())
    return sorted(found)


def candidates(root: Path, files: Iterable[str]) -> list[Mutant]:
    found: list[Mutant] = []
    for relative in files:
        module = bash if relative.endswith(".sh") else python
        found.extend(module.mutants_of(root / relative, relative))
    return found


def choose(root: Path, files: Sequence[str], count: int, seed: int) -> list[Mutant]:
    """A seeded sample of `count` mutants of `files` (bash mutants must still parse)."""
    texts = {f: (root / f).read_text(encoding="utf-8") for f in files}

    def valid(mutant: Mutant) -> bool:
        original = texts[mutant.path]
        if mutant.path.endswith(".sh"):
            return bash.parses(mutant, original)
        try:
            mutated = mutant.apply(original)
        except Exception:
            return False
        return mutated is not None and python.changes_behaviour(original, mutated)

    return sample(candidates(root, files), count, seed, valid)


def copy_tree(root: Path, dest: Path) -> Path:
    """The files git knows (tracked, and untracked but not ignored) of root, copied to dest."""
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    for relative in filter(None, listed.split("\0")):
        source = root / relative
        if not source.is_file():
            continue
        target = dest / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    return dest


def run_tests(workdir: Path, selection: Selection, timeout: float) -> tuple[str, str]:
    """(status, first failing test) of the selected test files in workdir."""
    if not selection.files:
        return "no-tests", ""
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"]
    command += [f"--deselect={d}" for d in selection.deselect]
    command += list(selection.files)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        proc = subprocess.run(
            command, cwd=workdir, capture_output=True, text=True, timeout=timeout, env=env
        )
    except subprocess.TimeoutExpired:
        return "timeout", ""
    if proc.returncode == 0:
        return "survived", ""
    if proc.returncode == 5:
        return "no-tests", ""
    failed = [line for line in proc.stdout.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    last = proc.stdout.strip().splitlines()[-1:] or [""]
    return "killed", (failed or last)[0]


def all_behaviour_tests(root: Path) -> Selection:
    files = sorted(
        p.relative_to(root).as_posix()
        for p in (root / "tests").glob("test_*.py")
        if p.relative_to(root).as_posix() not in NOT_BEHAVIOUR
    )
    return Selection(tuple(files))


def execute(
    root: Path,
    mutants: Sequence[Mutant],
    *,
    jobs: int = 1,
    timeout: float = 900,
    confirm: bool = False,
    by_line: bool = True,
    named: bool = False,
    coverage_data: Path | None = None,
    journal: Path | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> Report:
    """Each mutant in a private copy of root, against the tests of its file (a Python mutant:
    the tests that execute its line, from one coverage run, when `by_line`).

    `journal`: a JSON-lines file each outcome is appended to as it is decided; the outcomes it
    already holds for mutants of this sample (same key and diff) are taken as they are, so a
    run that was stopped goes on where it was."""
    originals = {m.path: (root / m.path).read_text(encoding="utf-8") for m in mutants}
    selections = {path: matching_tests(path, root) for path in originals}
    coverage = LineMap()
    done = read_journal(journal) if journal else {}
    work: queue.Queue[tuple[int, Mutant]] = queue.Queue()
    results: dict[int, Outcome] = {}
    # Run in a seeded shuffle, not file by file: a run stopped early has decided a spread of
    # files (Python and bash), and its journal reads as a smaller sample of the same kind.
    pending = list(enumerate(mutants))
    random.Random(len(mutants)).shuffle(pending)
    for index, mutant in pending:
        earlier = done.get((mutant.key, mutant.diff(originals[mutant.path])))
        if earlier is not None:
            results[index] = earlier
        else:
            work.put((index, mutant))
    if results:
        progress(f"{len(results)} outcome(s) taken from {journal}")
    lock = threading.Lock()

    def worker(copy: Path) -> None:
        while True:
            try:
                index, mutant = work.get_nowait()
            except queue.Empty:
                return
            original = originals[mutant.path]
            target = copy / mutant.path
            started = time.monotonic()
            try:
                target.write_text(mutant.apply(original), encoding="utf-8")
                selection = selections[mutant.path]
                if named:
                    selection = Selection(tuple(naming_tests(mutant.path, root))) or selection
                elif mutant.path.endswith(".py"):
                    selection = selection_for(
                        mutant.path, mutant.line, coverage, selection, root, NOT_BEHAVIOUR
                    )
                status, caught = run_tests(copy, selection, timeout)
                confirmed = False
                if confirm and status == "survived":
                    status, caught = run_tests(copy, all_behaviour_tests(copy), timeout)
                    confirmed = status == "survived"
            finally:
                target.write_text(original, encoding="utf-8")
            outcome = Outcome(
                key=mutant.key,
                path=mutant.path,
                line=mutant.line,
                operator=mutant.operator,
                status=status,
                seconds=round(time.monotonic() - started, 1),
                diff=mutant.diff(original),
                caught_by=caught,
                confirmed=confirmed,
            )
            with lock:
                results[index] = outcome
                if journal is not None:
                    with journal.open("a", encoding="utf-8") as out:
                        out.write(json.dumps(asdict(outcome)) + "\n")
                progress(f"[{len(results)}/{len(mutants)}] {status:8s} {mutant.key}")

    with tempfile.TemporaryDirectory(prefix="mutation-") as scratch:
        copies = [copy_tree(root, Path(scratch) / f"tree{i}") for i in range(max(1, jobs))]
        python_tests = sorted(
            {f for path, s in selections.items() if path.endswith(".py") for f in s.files}
        )
        if by_line and not named and python_tests and not work.empty():
            progress(f"coverage run of {len(python_tests)} test files, for tests by line")
            reuse = coverage_data if coverage_data and coverage_data.exists() else None
            coverage = line_tests(
                copies[0],
                python_tests,
                timeout=max(timeout, 3600),
                reuse=reuse,
                keep=coverage_data if reuse is None else None,
            )
        threads = [threading.Thread(target=worker, args=(c,)) for c in copies]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return Report([results[i] for i in sorted(results)])


def read_journal(path: Path) -> dict[tuple[str, str], Outcome]:
    """The outcomes a journal holds, by (key, diff); a line cut short by a stopped run is
    skipped."""
    found: dict[tuple[str, str], Outcome] = {}
    if not path.exists():
        return found
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            outcome = Outcome(**json.loads(line))
        except (ValueError, TypeError):
            continue
        found[(outcome.key, outcome.diff)] = outcome
    return found


def write_json(report: Report, path: Path) -> None:
    path.write_text(json.dumps([asdict(o) for o in report.outcomes], indent=1) + "\n")

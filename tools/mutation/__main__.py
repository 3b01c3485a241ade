"""python -m tools.mutation [--sample 85] [--bash-sample 43] [--seed 15] [--root DIR] ...

Samples mutants of components/, policies/ (cosmic-ray) and components/hosts/scripts/ (our line
mutator), runs each against the test files that can catch it, and prints the kill rate per file
and every survivor with its diff. `--list` prints the sample without running anything.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tools.mutation.run import (
    BASH_SOURCES,
    PYTHON_SOURCES,
    choose,
    execute,
    source_files,
    write_json,
)
from tools.mutation.testmap import matching_tests

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.mutation", description=__doc__)
    parser.add_argument("--sample", type=int, default=85, help="Python mutants (default 85)")
    parser.add_argument("--bash-sample", type=int, default=43, help="bash mutants (default 43)")
    parser.add_argument("--seed", type=int, default=15, help="sampling seed (default 15)")
    parser.add_argument("--root", type=Path, default=ROOT, help="work tree to mutate (a copy)")
    parser.add_argument("--only", nargs="*", default=None, help="source files (relative paths)")
    parser.add_argument("--jobs", type=int, default=1, help="mutants run at once (default 1)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per test run")
    parser.add_argument(
        "--confirm", action="store_true", help="re-run survivors against every behaviour test"
    )
    parser.add_argument(
        "--by-file",
        action="store_true",
        help="run a Python mutant against every test file of its file, not the tests of its line",
    )
    parser.add_argument(
        "--named",
        action="store_true",
        help="run each mutant against the test files that name its file, not the tests of its "
        "line: a second look at the survivors of a by-line run (coverage gives the work of a "
        "module-scoped fixture to no test)",
    )
    parser.add_argument(
        "--keys",
        type=Path,
        help="only the sampled mutants whose key ('path:line operator') is a line of this file "
        "(the survivors of another run, against a tree with more tests)",
    )
    parser.add_argument(
        "--coverage-data",
        type=Path,
        help="coverage data file of the same tests: reused when it exists, else written there",
    )
    parser.add_argument(
        "--journal",
        type=Path,
        help="append each outcome to this JSON-lines file and take the outcomes it already "
        "holds (a stopped run goes on where it was)",
    )
    parser.add_argument("--list", action="store_true", help="print the sample and its tests only")
    parser.add_argument("--json", type=Path, help="also write every outcome to this file")
    args = parser.parse_args(argv)

    root = args.root.resolve()
    python_files = source_files(root, PYTHON_SOURCES)
    bash_files = source_files(root, BASH_SOURCES)
    if args.only is not None:
        python_files = [f for f in python_files if f in args.only]
        bash_files = [f for f in bash_files if f in args.only]
    mutants = choose(root, python_files, args.sample, args.seed)
    mutants += choose(root, bash_files, args.bash_sample, args.seed)
    if args.keys:
        wanted = set(filter(None, args.keys.read_text().splitlines()))
        mutants = [m for m in mutants if m.key in wanted]
    if args.list:
        for mutant in mutants:
            tests = " ".join(matching_tests(mutant.path, root).files) or "(no tests)"
            original = (root / mutant.path).read_text(encoding="utf-8")
            print(f"{mutant.key}\n{mutant.diff(original)}\n    tests: {tests}")
        return 0
    report = execute(
        root,
        mutants,
        jobs=args.jobs,
        timeout=args.timeout,
        confirm=args.confirm,
        by_line=not args.by_file,
        named=args.named,
        coverage_data=args.coverage_data,
        journal=args.journal,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(report.text())
    if args.json:
        write_json(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())

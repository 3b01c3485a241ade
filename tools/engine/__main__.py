"""python -m tools.engine build [NAME ...]   build the engine binaries into build/engine/
python -m tools.engine missing              list those not built at their pinned version"""

from __future__ import annotations

import argparse
import sys

from tools.engine import build as engine_build
from tools.engine.binaries import BINARIES, by_name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.engine", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build (or keep) the engine binaries")
    build.add_argument("names", nargs="*", help=f"only these: {[b.name for b in BINARIES]}")
    commands.add_parser("missing", help="the binaries not built at their pinned version")
    args = parser.parse_args(argv)
    if args.command == "missing":
        for name in engine_build.missing():
            print(name)
        return 0
    binaries = tuple(by_name(n) for n in args.names) if args.names else BINARIES
    try:
        engine_build.build(binaries, log=lambda line: print(line, file=sys.stderr))
    except engine_build.BuildError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

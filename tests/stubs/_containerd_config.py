"""`containerd config default` and `config dump` of containerd 2.2.1, for the containerd stub:
it stands for those two commands of containerd 2.2.1 (Docker's containerd.io 2.2.1-1).

default: the output containerd 2.2.1 generated (tests/upstream/containerd-2.2.1/
config-default.toml), as is.
dump (cmd/containerd/command/config.go `dumpConfig`, cmd/containerd/server/config/config.go
`LoadConfig`, `mergeConfig`, `resolveImports`): that default, then the config file and every file
its `imports` globs match (in order, each once) merged over it; tables merge key by key (plugin
sections too, as 2.x merges them), a later value wins, the top level's string lists add what they
lack (its `sliceTransformer`). A runtime that the default lacks is containerd's Runtime struct:
every field of runc's, at its zero value, under the given ones. Printed by go-toml v2 (_go_toml.py
`v2_dumps`): struct fields in containerd's order, map keys sorted. A file containerd cannot read
fails with its message, as containerd does. tests/test_upstream_formats.py holds the output to
what containerd 2.2.1 printed for the same files.
"""

from __future__ import annotations

import copy
import glob
import os
import sys
import tomllib
from pathlib import Path
from typing import Any

from _go_toml import v2_dumps

DEFAULT = Path(__file__).resolve().parent.parent / "upstream/containerd-2.2.1/config-default.toml"
TOP_LEVEL_LISTS = ("disabled_plugins", "required_plugins", "imports")
ZERO = {bool: False, int: 0, float: 0.0, str: "", list: []}


def is_map(path: tuple[str, ...]) -> bool:
    """The tables containerd's config holds as Go maps (printed sorted), not structs."""
    if path in {("plugins",), ("timeouts",), ("stream_processors",), ("proxy_plugins",)}:
        return True
    return bool(path) and (
        path[-1] == "runtimes"
        or (len(path) > 2 and path[-1] == "options" and path[-3] == "runtimes")
    )


def zero_runtime(template: dict[str, Any]) -> dict[str, Any]:
    """A Runtime struct at its zero values: runc's fields, nothing set, options empty."""
    return {
        key: {} if isinstance(value, dict) else copy.deepcopy(ZERO[type(value)])
        for key, value in template.items()
    }


def merge(base: dict[str, Any], over: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        here = (*path, key)
        if isinstance(value, dict):
            start = out.get(key)
            if not isinstance(start, dict):
                runc = base.get("runc") if path and path[-1] == "runtimes" else None
                start = zero_runtime(runc) if isinstance(runc, dict) else {}
            out[key] = merge(start, value, here)
        elif not path and key in TOP_LEVEL_LISTS and isinstance(out.get(key), list):
            out[key] = [*out[key], *(item for item in value if item not in out[key])]
        else:
            out[key] = value
    if is_map(path):
        out = dict(sorted(out.items()))
    return out


def load(path: str) -> dict[str, Any]:
    with open(path, "rb") as f:
        return tomllib.load(f)


def imports_of(parent: str, config: dict[str, Any]) -> list[str]:
    found = []
    for pattern in config.get("imports", []):
        pattern = os.path.normpath(pattern)
        if not os.path.isabs(pattern):
            pattern = os.path.join(os.path.dirname(parent), pattern)
        found += sorted(glob.glob(pattern)) if "*" in pattern else [pattern]
    return found


def dump(config_path: str) -> str:
    config = load(str(DEFAULT))
    loaded: set[str] = set()
    pending = [config_path]
    while pending:
        path, pending = pending[0], pending[1:]
        if path in loaded:
            continue
        if path == config_path and not os.path.exists(path):
            break  # dumpConfig ignores a missing config file (os.IsNotExist)
        try:
            part = load(path)
        except (OSError, tomllib.TOMLDecodeError) as error:
            raise SystemExit(f"containerd: failed to load TOML: {path}: {error}") from None
        config = merge(config, part, ())
        loaded.add(path)
        pending += imports_of(path, part)
    config["version"] = 3
    return v2_dumps(config)


def main(argv: list[str]) -> int:
    if argv[0] == "default":
        sys.stdout.write(DEFAULT.read_text())
        return 0
    sys.stdout.write(dump(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

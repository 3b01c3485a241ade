"""`containerd config dump` for the containerd stub: config.toml with its `imports` merged in.

containerd 2.x (cmd/containerd/server/config/config.go, LoadConfig and mergeConfig): each file
matched by `imports` (globs, in order) is loaded and merged over the main config; tables merge
key by key, a later file's value wins. The dump is printed as TOML; a config containerd cannot
read fails with its message.
"""

from __future__ import annotations

import glob
import sys
import tomllib
from typing import Any


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(value(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def quoted(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else f'"{key}"'


def dump(table: dict[str, Any], path: list[str], out: list[str]) -> None:
    scalars = {k: v for k, v in table.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in table.items() if isinstance(v, dict)}
    if path and scalars:
        out.append("")
        out.append("[" + ".".join(quoted(p) for p in path) + "]")
    indent = "  " if path else ""
    for key in sorted(scalars):
        out.append(f"{indent}{quoted(key)} = {value(scalars[key])}")
    for key in sorted(tables):
        dump(tables[key], [*path, key], out)


def main(config_path: str) -> int:
    try:
        with open(config_path, "rb") as f:
            config = tomllib.load(f)
        for pattern in config.get("imports", []):
            for name in sorted(glob.glob(pattern)):
                with open(name, "rb") as f:
                    config = merge(config, tomllib.load(f))
    except (OSError, tomllib.TOMLDecodeError) as error:
        print(f"containerd: failed to load TOML from {config_path}: {error}", file=sys.stderr)
        return 1
    out: list[str] = []
    dump(config, [], out)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

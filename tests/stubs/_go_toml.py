"""The TOML the Go tools the stubs stand for print, from a parsed document (tomllib's dicts):
it stands for go-toml v2.2.4's encoder as containerd 2.2.1 calls it and go-toml v1.9.5's as
nvidia-ctk 1.20.0 calls it.

- `v2_dumps`: go-toml v2 (github.com/pelletier/go-toml/v2 v2.2.4, `marshaler.go`) as containerd
  2.x calls it, `toml.NewEncoder(w).SetIndentTables(true).Encode(config)`
  (cmd/containerd/command/config.go, `outputConfig`). `encodeKey`: a bare key when it is only
  A-Za-z0-9_-, else a literal 'key' unless it holds a quote or a control character (then "key");
  `encodeString`: 'literal' unless `needsQuoting` (a quote, CR, LF or other control character);
  `encodeTable`: key/values first, then sub-tables, a blank line before every table but the first
  one of a table without key/values; `indent`: two spaces per table level below the top. Struct
  fields come in declaration order, map keys sorted (`encodeMap`, `sortEntriesByKey`): the caller
  orders the dicts.
- `v1_dumps`: go-toml v1 (v1.9.5, `tomltree_write.go`, `Tree.writeToOrdered` with
  `OrderAlphabetical`) as nvidia-ctk saves a config (pkg/config/toml/toml.go, `Tree.Save`):
  key/values sorted, then tables sorted, every header after a blank line, two spaces per level,
  "double-quoted" strings (`tomlValueStringRepresentation`) and keys (`quoteKeyIfNeeded`).

tests/test_upstream_formats.py compares both with output the real tools generated
(tests/upstream/).
"""

from __future__ import annotations

import json
import re
from typing import Any

BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def _needs_quoting(text: str) -> bool:
    """go-toml v2 `needsQuoting`: a quote, CR, LF or a character `InvalidAscii` refuses."""
    return any(c in "'\r\n" or (ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F for c in text)


def _basic(text: str) -> str:
    """A "basic" string with the escapes both go-toml versions use."""
    return json.dumps(text, ensure_ascii=False)


def _v2_key(key: str) -> str:
    if not key:
        return "''"
    if BARE.match(key):
        return key
    if "'" in key or _needs_quoting(key):
        return _basic(key)
    return f"'{key}'"


def _v2_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        return text if any(c in text for c in ".eEn") else text + ".0"
    if isinstance(value, list):
        return "[" + ", ".join(_v2_value(item) for item in value) + "]"
    return _basic(value) if _needs_quoting(value) else f"'{value}'"


def _v2_table(out: list[str], path: list[str], table: dict[str, Any]) -> None:
    indent = "  " * max(len(path) - 1, 0)
    if path:
        out.append(f"{indent}[{'.'.join(_v2_key(k) for k in path)}]\n")
        indent = "  " * len(path)
    kvs = [(k, v) for k, v in table.items() if not isinstance(v, dict)]
    tables = [(k, v) for k, v in table.items() if isinstance(v, dict)]
    for key, value in kvs:
        out.append(f"{indent}{_v2_key(key)} = {_v2_value(value)}\n")
    for index, (key, value) in enumerate(tables):
        if index > 0 or kvs:
            out.append("\n")
        _v2_table(out, [*path, key], value)


def v2_dumps(document: dict[str, Any]) -> str:
    """The document as containerd 2.x's encoder prints it (dict order is the print order)."""
    out: list[str] = []
    _v2_table(out, [], document)
    return "".join(out)


def _v1_key(key: str) -> str:
    return key if BARE.match(key) else _basic(key)


def _v1_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_v1_value(item) for item in value) + "]"
    return _basic(value)


def _v1_tree(out: list[str], keyspace: str, indent: str, tree: dict[str, Any]) -> None:
    for key in sorted(k for k, v in tree.items() if not isinstance(v, dict)):
        out.append(f"{indent}{_v1_key(key)} = {_v1_value(tree[key])}\n")
    for key in sorted(k for k, v in tree.items() if isinstance(v, dict)):
        combined = f"{keyspace}.{_v1_key(key)}" if keyspace else _v1_key(key)
        out.append(f"\n{indent}[{combined}]\n")
        _v1_tree(out, combined, indent + "  ", tree[key])


def v1_dumps(document: dict[str, Any]) -> str:
    """The document as go-toml v1's `Tree.Marshal` writes it."""
    out: list[str] = []
    _v1_tree(out, "", "", document)
    return "".join(out)

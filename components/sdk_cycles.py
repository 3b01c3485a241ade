"""One reference cycle on the Pulumi Python SDK's hot path, removed before any resource exists.

`pulumi.runtime.rpc.contains_unknowns` (pulumi 3.272.0, `sdk/python/lib/pulumi/runtime/rpc.py`;
the same on pulumi/pulumi master of 2026-08-21, 1b5949891b) defines a recursive closure `impl` on
every call. `impl` refers to itself through its closure cell, so every call leaves a cycle (the
function, its cell, its annotations and their `set[int]` alias) that only the cyclic garbage
collector frees. The SDK calls it for every value an Output resolves to
(`output._OutputData.__post_init__`, `rpc.resolve_properties`, `Output.all`), dozens of times
per resource: a 1,000-node evaluation left 5.3 million such objects, and collecting them was
about a fifth of its time (`python -m tools.benchmark`, `gc.get_stats()`).

`install()` puts in its place the same walk as a module-level function: same order, same answer,
no closure. Every caller in the SDK looks the function up in `rpc` when it calls it
(`output.contains_unknowns` returns `rpc.contains_unknowns(val)`), so replacing the module
attribute reaches them all. It replaces only the function this module was written against (a
digest of its source): an SDK release that changes it keeps its own, and the test that pins the
digest fails so that this module is looked at again.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
from typing import Any

from pulumi.runtime import known_types, rpc

# sha256 of the source of `contains_unknowns` in pulumi 3.272.0's rpc.py (`sdk_source_digest`).
SDK_SOURCE_SHA256 = "1f1f335b6f48b96055607dbb5be2e53b1163e35ec88704c89a41271070017cc8"


def contains_unknowns(val: Any) -> bool:
    """True when `val` is, or holds in nested dicts and lists, an unknown value: the SDK's
    `rpc.contains_unknowns` without its per-call closure."""
    return _contains_unknowns(val, set())


def _contains_unknowns(val: Any, seen_ids: set[int]) -> bool:
    if known_types.is_unknown(val):
        return True
    val_id = id(val)
    if val_id in seen_ids:
        return False
    seen_ids.add(val_id)
    if isinstance(val, dict):
        return any(_contains_unknowns(val[k], seen_ids) for k in val)
    if isinstance(val, list):
        return any(_contains_unknowns(x, seen_ids) for x in val)
    return False


def sdk_definition() -> tuple[str, ast.FunctionDef] | None:
    """The installed SDK's rpc.py source and its `contains_unknowns` definition (read from the
    module, not from the attribute, which may already be this module's), None when the module
    has no such function or no source."""
    try:
        module = inspect.getsource(rpc)
    except (OSError, TypeError):
        return None
    for node in ast.parse(module).body:
        if isinstance(node, ast.FunctionDef) and node.name == "contains_unknowns":
            return module, node
    return None


def sdk_source_digest() -> str | None:
    """sha256 of the source of the SDK's own `contains_unknowns` (`sdk_definition`)."""
    definition = sdk_definition()
    if definition is None:
        return None
    module, node = definition
    source = ast.get_source_segment(module, node) or ""
    return hashlib.sha256(f"{source}\n".encode()).hexdigest()


def install() -> bool:
    """Replace the SDK's `rpc.contains_unknowns` by `contains_unknowns` when it is the function
    this module was written against; True when this module's function is in place."""
    if rpc.contains_unknowns is contains_unknowns:
        return True
    if sdk_source_digest() != SDK_SOURCE_SHA256 or rpc.contains_unknowns.__module__ != rpc.__name__:
        # Another SDK's function, or one something else already put in its place.
        return False
    rpc.contains_unknowns = contains_unknowns
    return True

"""A deployed stack's graph, saved and read back: what the engine's state holds of each resource
(URN, type, parent, inputs, options), so that a new program can be planned against the graph a
released one registered (tests/upgrade/, `tools.lifecycle.plan`).

A host step's stdin keeps its parameters and, for the script text, a digest of the whole: the
plan asks what the parameters were and whether the rest changed, and the files stay small.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
from pathlib import Path
from typing import Any

from tools.harness.graph import Graph, Resource, Secret

# Inputs kept as their parameters and a digest: long script text.
DIGESTED_INPUTS = ("stdin",)
# Where a step's parameters end on its stdin (tools.harness.graph.script_params).
PARAMETERS_END = ("# ---- lib/common.sh", "STEP_BUNDLE=")
_SECRET = "__secret__"


def _encode(value: Any) -> Any:
    if isinstance(value, Secret):
        return {_SECRET: _encode(value.value)}
    if isinstance(value, dict):
        return {key: _encode(item) for key, item in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [_encode(item) for item in value]
    if isinstance(value, set | frozenset):
        return sorted(value)
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {_SECRET}:
            return Secret(_decode(value[_SECRET]))
        return {key: _decode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_decode(item) for item in value]
    return value


def digest(value: Any) -> str:
    """What a digested input is kept as."""
    if isinstance(value, Secret):
        return digest(value.value)
    return "sha256:" + hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def as_deployed(resource: Resource) -> Resource:
    """`resource` as the saved state keeps it: a digested input keeps its parameters (what
    `script_params` reads) and a digest of the whole in place of the script text."""
    inputs = dict(resource.inputs)
    for key in DIGESTED_INPUTS:
        if key in inputs:
            inputs[key] = _digested(inputs[key])
    return dataclasses.replace(resource, inputs=inputs)


def _digested(value: Any) -> Any:
    if isinstance(value, Secret):
        return Secret(_digested(value.value))
    if not isinstance(value, str):
        return digest(value)
    head = value
    for marker in PARAMETERS_END:
        head = head.split(marker, 1)[0]
    return f"{head}{PARAMETERS_END[0]}\n# {digest(value)}\n"


def _fields(resource: Resource) -> dict[str, Any]:
    """The resource's fields, shallow (`dataclasses.asdict` would take a Secret apart)."""
    return {field.name: getattr(resource, field.name) for field in dataclasses.fields(resource)}


def _urn(resource: Resource) -> str:
    return resource.urn


def save(graph: Graph, path: Path) -> None:
    """Write `graph` (gzip'd JSON, deterministic: resources by URN) to `path`."""
    rows = [_encode(_fields(as_deployed(r))) for r in sorted(graph, key=_urn)]
    payload = {"resources": rows, "outputs": _encode(graph.outputs)}
    text = json.dumps(payload, sort_keys=True, indent=None, separators=(",", ":"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(text.encode(), compresslevel=9, mtime=0))


def load(path: Path) -> Graph:
    """The graph saved at `path`."""
    payload = json.loads(gzip.decompress(path.read_bytes()))
    resources = []
    for row in payload["resources"]:
        fields = _decode(row)
        fields["dependencies"] = set(fields["dependencies"])
        fields["property_dependencies"] = {
            key: set(urns) for key, urns in fields["property_dependencies"].items()
        }
        resources.append(Resource(**fields))
    return Graph(resources, _decode(payload["outputs"]))


def main(argv: list[str] | None = None) -> int:
    """`python -m tools.harness.deployed REF OUT_DIR`: save the graph every pinned stack (the
    stack files, and the variants of tests/identity) registers with the program at git REF, as
    the state a stack deployed from that version holds."""
    import argparse

    from tools import lifecycle
    from tools.harness.identity import VARIANTS
    from tools.harness.stacks import STACKS, run_program

    parser = argparse.ArgumentParser(prog="python -m tools.harness.deployed")
    parser.add_argument("ref")
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    with lifecycle.program_of(args.ref) as checkout:
        for pinned in (*STACKS, *VARIANTS):
            stack, config = VARIANTS.get(pinned, (pinned, None))
            graph = run_program(stack, config=config, program=checkout / "__main__.py")
            save(graph, args.out / f"{pinned}.json.gz")
            print(args.out / f"{pinned}.json.gz")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

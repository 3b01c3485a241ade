"""Pydantic's validation errors of the settings model, as problems named by their YAML key path.

A pydantic error `loc` holds the model's own markers (union tags, `[key]`); the settings model's
types are walked alongside it so the path reads as the stack file does
(`gpu-cluster:nodePools[1].instanceType`), and a rule's `problems(...)` are expanded under the
path of the model that raised them.
"""

from __future__ import annotations

import difflib
import json
import types
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from components.settings import PROJECT, Settings
from components.settings.fields import PROBLEMS_ERROR_TYPE

SECRET_KEYS = frozenset({"sshPrivateKey"})


@dataclass(frozen=True)
class Problem:
    key: str  # full key path, like gpu-cluster:nodePools[1].instanceType
    given: str
    expected: str

    def __str__(self) -> str:
        return f"{self.key}: got {self.given}; expected {self.expected}"


def problems_of(exc: ValidationError) -> list[Problem]:
    out: list[Problem] = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        if error["type"] == PROBLEMS_ERROR_TYPE:
            base = _path_parts(loc)
            for sub_key, given, expected in error["ctx"]["problems"]:
                sub_parts = sub_key if isinstance(sub_key, tuple) else _split_key(sub_key)
                parts = (*base, *sub_parts)
                out.append(Problem(_format_path(parts), show(parts, given), expected))
            continue
        parts = _path_parts(loc)
        if error["type"] == "union_tag_invalid":
            parts = (*parts, "mode")
            expected = error["ctx"]["expected_tags"].replace("'", "")
            given = error["input"]  # the section; pydantic's ctx holds str() of its mode
            tag = given.get("mode") if isinstance(given, dict) else error["ctx"]["tag"]
            out.append(Problem(_format_path(parts), show(parts, tag), f"one of: {expected}"))
            continue
        if error["type"] == "extra_forbidden":
            out.append(unknown_key(loc))
            continue
        given = "nothing" if error["type"] == "missing" else show(parts, error["input"])
        out.append(Problem(_format_path(parts), given, _expected(error)))
    return out


_EXPECTED = {
    "too_short": "at least {min_length} item(s)",
    "too_long": "at most {max_length} item(s)",
    "greater_than_equal": "a number >= {ge}",
    "greater_than": "a number > {gt}",
    "less_than_equal": "a number <= {le}",
    "less_than": "a number < {lt}",
    "int_parsing": "a whole number",
    "int_type": "a whole number",
    "int_from_float": "a whole number",
    "bool_parsing": "true or false",
    "bool_type": "true or false",
    "string_type": 'a string (quote values YAML reads as numbers or booleans, like "1.35" or '
    '"true")',
    "list_type": "a list",
    "dict_type": "a mapping of keys to values",
    "model_type": "an object with keys",
    "model_attributes_type": "an object with keys",
    "union_tag_not_found": "an object with a mode key: managed or existing",
}


_REQUIRED_HINTS = {
    "sshPrivateKey": "the SSH private key matching ssh.publicKey, set as a secret: "
    "`pulumi config set --secret gpu-cluster:sshPrivateKey < ~/.ssh/id_ed25519`",
    "clusterName": "a cluster name: `pulumi config set gpu-cluster:clusterName dev-gpu`",
    "nodePools": "a list of node pools, each with name, instanceType and count (EC2 "
    "instances) or name, hosts and gpu (existing servers)",
}


def _expected(error: dict) -> str:
    kind = error["type"]
    if kind == "missing":
        key = ".".join(str(p) for p in error["loc"])
        return _REQUIRED_HINTS.get(key, "a value (this key is required)")
    if kind in _EXPECTED:
        return _EXPECTED[kind].format(**error.get("ctx", {}))
    message = error["msg"]
    for prefix in ("Value error, ", "Input should be ", "Input "):
        if message.startswith(prefix):
            return message[len(prefix) :]
    return message


def _split_key(key: str) -> tuple[str | int, ...]:
    """'nodePools[1].name' -> ('nodePools', 1, 'name')."""
    parts: list[str | int] = []
    for piece in key.split("."):
        name, _, rest = piece.partition("[")
        if name:
            parts.append(name)
        while rest:
            index, _, rest = rest.partition("]")
            parts.append(int(index))
            rest = rest.removeprefix("[")
    return tuple(parts)


def _path_parts(loc: tuple) -> tuple[str | int, ...]:
    """Drop pydantic's own markers (union tags, '[key]') so the path matches the YAML keys."""
    parts: list[str | int] = []
    model: Any = Settings
    for item in loc:
        if item == "[key]":
            continue
        inner = _field_type(model, item) if model is not None else None
        if inner is _TAG:
            model = _variant(model, item)
            continue
        parts.append(item)
        model = inner
    return tuple(parts)


_TAG = object()


def _field_type(annotation: Any, item: str | int) -> Any:
    """The type found at `item` inside `annotation`, _TAG for a union tag, None when unknown."""
    annotation = _unwrap(annotation)
    variants = _union_variants(annotation)
    if variants:
        if any(item in _tags(variant) for variant in variants):
            return _TAG
        for variant in variants:
            found = _field_type(variant, item)
            if found is not None:
                return found
        return None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        for name, field in annotation.model_fields.items():
            if item in (field.alias, name):
                return field.annotation
        return None
    origin = typing.get_origin(annotation)
    if origin is list and isinstance(item, int):
        return typing.get_args(annotation)[0]
    if origin is dict:
        return typing.get_args(annotation)[1]
    return None


def _unwrap(annotation: Any) -> Any:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _union_variants(annotation: Any) -> tuple:
    annotation = _unwrap(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return tuple(_unwrap(a) for a in typing.get_args(annotation) if a is not type(None))
    return ()


def _tags(variant: Any) -> tuple[str, ...]:
    """The tags pydantic puts in an error's `loc` for a variant of a tagged union: its `mode`
    (the control plane's), or its `union_tag` (a node pool's kind)."""
    if not (isinstance(variant, type) and issubclass(variant, BaseModel)):
        return ()
    mode = variant.model_fields.get("mode")
    if mode is not None:
        return typing.get_args(mode.annotation)
    tag = getattr(variant, "union_tag", None)
    return (tag,) if isinstance(tag, str) else ()


def _kind(variant: Any) -> str:
    """How a message names a union's variant: `mode: existing`, `a pool of existing hosts`."""
    kind = getattr(variant, "kind", None)
    return kind if isinstance(kind, str) else f"mode: {_tags(variant)[0]}"


def aliases(model: type[BaseModel]) -> list[str]:
    return [field.alias or name for name, field in model.model_fields.items()]


def unknown_key(loc: tuple) -> Problem:
    parent: Any = Settings
    union: Any = None  # the union whose tagged variant `parent` is, if any
    for item in loc[:-1]:
        inner = _field_type(parent, item)
        union = None
        if inner is _TAG:
            union, inner = parent, _variant(parent, item)
        parent = inner
    accepted: list[str] = []
    for variant in _union_variants(_unwrap(parent)) or (_unwrap(parent),):
        if isinstance(variant, type) and issubclass(variant, BaseModel):
            accepted.extend(a for a in aliases(variant) if a not in accepted)
    name = str(loc[-1])
    close = difflib.get_close_matches(name, accepted, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    for sibling in _union_variants(_unwrap(union)) if union is not None else ():
        if sibling is not parent and name in aliases(sibling):
            hint = f" ({name!r} is a key of {_kind(sibling)} only)"
    return Problem(
        _format_path(_path_parts(loc)), "an unknown key", f"one of: {', '.join(accepted)}{hint}"
    )


def _variant(union: Any, tag: str) -> Any:
    for variant in _union_variants(_unwrap(union)):
        if tag in _tags(variant):
            return variant
    return None


def _format_path(parts: tuple[str | int, ...]) -> str:
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return f"{PROJECT}:{text}"


def show(parts: tuple[str | int, ...], value: Any) -> str:
    if parts and parts[0] in SECRET_KEYS:
        return "a secret value (not shown)"
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "true" if value else "false"  # as a stack file spells it, not Python's True
    if isinstance(value, (dict, list)):
        text = json.dumps(value, sort_keys=True, default=str)
    else:
        text = repr(value)
    if len(text) <= 120:
        return text
    if text[0] in "'\"" and text[-1] == text[0]:
        return text[:116] + "..." + text[-1]  # a quoted string keeps its closing quote
    return text[:117] + "..."

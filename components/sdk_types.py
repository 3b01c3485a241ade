"""The Pulumi Python SDK's answers about annotations and classes, which depend on the annotation
or the class alone, remembered: the replacements of two `_types` functions (installed by
components/sdk_fixes.py, over the exact source each was written against), and the rules the
walks of components/sdk_inputs.py and sdk_values.py read for every value they meet.

- `_types.unwrap_type` and `_types.unwrap_optional_type` take a type annotation apart with
  `typing.get_origin` and `get_args` each time the SDK serializes or reads a value against its
  type: about a thousand annotation objects in all, over 100,000 times at 256 nodes. Their answer
  depends on the annotation alone; the replacements remember it by the annotation object
  (identity, not equality: `Union[int, str] == Union[str, int]`, but the SDK reads the order).
- `_types.resource_types` and `_types.resource_pulumi_to_py_names` build, for every
  registration, the resource class's property types (`typing.get_type_hints` on a class made
  for the purpose) and names, which depend on the class alone (the SDK itself keeps the half
  read from property getters per class, `_raw_return_hints` under `functools.cache`). The
  replacements build them once per class and hand each caller its own copy. (They assume what
  the SDK's cache does: a resource class's annotations, and the module names its string
  annotations refer to, do not change once it has registered a resource.)
- The walks of `sdk_inputs` and `sdk_values` ask, for every list, map and typed scalar they
  meet, what its annotation makes of it: a list's element type (`rpc._get_list_element_type`),
  whether a map type is one at all and of what (`mapping_rule`), whether a union is a
  discriminated one, what a string or number of a type becomes (`scalar_rule`), an input or
  output type's names and property types (which the SDK builds afresh, a dict and an
  `unwrap_type` per property, for every value of that type: every nested object of a Job's
  spec). Each is remembered by annotation; the walks only read the dicts, never hand them out.
"""

from __future__ import annotations

import inspect
import typing
from collections import abc
from collections.abc import Callable
from enum import Enum
from typing import Any

from pulumi import _types
from pulumi.runtime import rpc

SDK_UNWRAP_TYPE = _types.unwrap_type
SDK_UNWRAP_OPTIONAL_TYPE = _types.unwrap_optional_type
SDK_RESOURCE_TYPES = _types.resource_types
SDK_RESOURCE_PULUMI_TO_PY_NAMES = _types.resource_pulumi_to_py_names
# The SDK's list of map types, compared with `==` as there.
_MAPPING_ORIGINS = [dict, typing.Dict, abc.Mapping, typing.Mapping]  # noqa: UP006 - the SDK's


class _Remembered(typing.Protocol):
    """A function of one object, its answers by that object's identity in `answers`."""

    answers: dict[int, tuple[Any, Any]]

    def __call__(self, value: Any, /) -> Any: ...


def by_identity(function: Callable[[Any], Any], limit: int = 4096) -> _Remembered:
    """`function` of one hashable-or-not object, its answers remembered by that object's
    identity (each entry keeps its object alive, so no other object takes its id); at most
    `limit` of them, after which it starts again (the same `answers` dict, which the callers on
    the hottest paths read directly). A closure, not an object with `__call__`: the SDK calls
    these thousands of times per node, and calling an object costs a method lookup more."""
    answers: dict[int, tuple[Any, Any]] = {}

    def remembered(value: Any) -> Any:
        known = answers.get(id(value))
        if known is not None and known[0] is value:
            return known[1]
        answer = function(value)
        if len(answers) >= limit:
            answers.clear()
        answers[id(value)] = (value, answer)
        return answer

    remembered.answers = answers  # type: ignore[attr-defined]
    return typing.cast(_Remembered, remembered)


_UNWRAP_TYPE = by_identity(SDK_UNWRAP_TYPE)
_UNWRAP_OPTIONAL_TYPE = by_identity(SDK_UNWRAP_OPTIONAL_TYPE)
# Read here first: the SDK asks over a thousand times per node, nearly always of an annotation
# it asked before, and a call costs more than the lookup it makes.
_UNWRAPPED = _UNWRAP_TYPE.answers
_UNWRAPPED_OPTIONAL = _UNWRAP_OPTIONAL_TYPE.answers


def unwrap_type(val: type) -> type:
    """The SDK's `_types.unwrap_type` (T of `Output[T]`, `Input[T]`, `InputType[T]`,
    `Optional[T]`), remembered by annotation."""
    known = _UNWRAPPED.get(id(val))
    if known is not None and known[0] is val:
        return known[1]
    return _UNWRAP_TYPE(val)


def unwrap_optional_type(val: type) -> type:
    """The SDK's `_types.unwrap_optional_type` (T of `Optional[T]`), remembered by annotation."""
    known = _UNWRAPPED_OPTIONAL.get(id(val))
    if known is not None and known[0] is val:
        return known[1]
    return _UNWRAP_OPTIONAL_TYPE(val)


_RESOURCE_TYPES = by_identity(SDK_RESOURCE_TYPES)
_RESOURCE_PULUMI_TO_PY_NAMES = by_identity(SDK_RESOURCE_PULUMI_TO_PY_NAMES)


def resource_types(resource_cls: type) -> dict[str, type]:
    """The SDK's `_types.resource_types`, built once per class; a copy for each caller."""
    return dict(_RESOURCE_TYPES(resource_cls))


def resource_pulumi_to_py_names(resource_cls: type) -> dict[str, str]:
    """The SDK's `_types.resource_pulumi_to_py_names`, built once per class; a copy for each
    caller."""
    return dict(_RESOURCE_PULUMI_TO_PY_NAMES(resource_cls))


AS_IS = object()


def scalar_rule(typ: Any) -> Any:
    """What the SDK makes of a string, number or boolean of type `typ`: an Enum class makes a
    member (the class), a float typed `int` an int (`int`), anything else stays (`AS_IS`)."""
    typ = unwrap_optional_type(typ) if typ else typ
    if typ is Any:
        return AS_IS
    if typ and inspect.isclass(typ) and issubclass(typ, Enum):
        return typ
    return int if typ is int else AS_IS


def mapping_rule(typ: Any) -> tuple[bool, bool, Any]:
    """How both SDK walks read a map of type `typ` that is not an input or output type:
    whether `typ` is a map type at all, whether it is one keyed by `str` (its keys are then
    the user's own), and the type of its values if so."""
    origin = typing.get_origin(typ)
    if typ is dict or origin in _MAPPING_ORIGINS:
        args = typing.get_args(typ)
        if len(args) == 2 and args[0] is str:
            return True, True, args[1]
        return True, False, None
    return False, False, None


def input_map_plan(typ: Any) -> tuple[bool, dict | None, dict | None, bool, bool, Any, bool]:
    """How the SDK serializes a map against annotation `typ` (not None): whether `typ` is a
    discriminated union (its member is picked by the map's keys, then planned), an input
    type's Pulumi names and annotations by name (else None, None), `mapping_rule`, and whether
    every annotation a value of the map can get (the type's, or the map's one) unwraps: the
    SDK's call for each value unwraps its annotation first, which raises only for a malformed
    one, the same every time."""
    union = _types.is_discriminated_union(typ)
    if _types.is_input_type(typ):
        names = _types.input_type_py_to_pulumi_names(typ)
        types = _types.input_type_types(typ)
        return union, names, types, False, False, None, _unwraps(types.values())
    mapping, typed, value_type = mapping_rule(typ)
    return union, None, None, mapping, typed, value_type, _unwraps([value_type])


def _unwraps(annotations: Any) -> bool:
    """Whether `unwrap_type` answers for every one of `annotations` (None for no annotation)."""
    try:
        for annotation in annotations:
            if annotation:
                unwrap_type(annotation)
    except Exception:
        return False
    return True


def output_map_plan(typ: Any) -> tuple[bool, dict | None, dict | None, bool, bool, Any]:
    """How the SDK translates a map of annotation `typ` (not None): whether `typ` is a
    discriminated union (its member is picked by the map's keys, then planned), an output
    type's annotations by Pulumi name (else None) and the `scalar_rule` of each of those that
    is not `AS_IS` (what a string, number or boolean of that name becomes), and
    `mapping_rule`."""
    union = _types.is_discriminated_union(typ)
    if _types.is_output_type(typ):
        types = _types.output_type_types(typ)
        rules = {
            name: rule for name, hint in types.items() if (rule := SCALAR_RULE(hint)) is not AS_IS
        }
        return union, types, rules, False, False, None
    return union, None, None, *mapping_rule(typ)


# Answers of an annotation alone, remembered for the walks of `sdk_inputs` and `sdk_values`.
SCALAR_RULE = by_identity(scalar_rule)
SCALAR_RULES = SCALAR_RULE.answers
LIST_ELEMENT_TYPE = by_identity(rpc._get_list_element_type)
INPUT_MAP_PLAN = by_identity(input_map_plan)
OUTPUT_MAP_PLAN = by_identity(output_map_plan)

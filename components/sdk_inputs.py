"""The Pulumi Python SDK's functions that carry every input of every registration to the engine,
replaced (by components/sdk_fixes.py, over the exact source each was written against) by ones
that answer the same and cost less. Each answers the common case, plain data, itself and hands
every other case to the SDK's own function (`SDK_*`, taken before any replacement is installed).

- `rpc.serialize_property` is called for every input of every registration and again for
  every value inside a map or list, a coroutine each, and takes each through a dozen checks (a
  sequence, an unknown, a resource, an asset, an archive, an awaitable, an Output, an input
  type, a mapping, a protobuf value) before it returns a string, number, boolean or None as it
  is. The replacement returns those at once (and Enum members, `plain_subclass`), takes an
  Output through the SDK's own lines for it (`_output`), walks lists, tuples, dicts and
  read-only maps itself by the SDK's rules (key translation, each value's annotation; a
  `FrozenMap` once per annotation), and hands every other value, in the order the SDK's walk
  meets it, to the SDK. (Its digest pins `rpc`'s
  definitions only: that none of those types is an unknown, a resource, an asset or an input
  type is the word of `known_types` and `_types`, which it cannot pin, as of 3.272.0.)
- `resource.register_resource` builds the request for every registration with the
  serialized inputs as a constructor argument: `resource_pb2.RegisterResourceRequest(...,
  object=serialized_props, ...)`. protobuf copies a message given to a constructor by
  serializing it to bytes and parsing them back (protocolbuffers/protobuf `python/message.c`:
  `PyUpb_Message_InitMessageAttribute` calls `_PyUpb_Message_MergeFrom_LockHeld`), three
  passes over every rendered script. `resource` reads `resource_pb2` from its globals at each
  call; the replacement is that module with `RegisterResourceRequest` in place of the message
  class: it builds the request without `object`, then copies the Struct in with `CopyFrom`
  (`upb_Message_DeepCopy`, one pass). The nested message classes `resource` reads from it
  (`CustomTimeouts`, `PropertyDependencies`, `ResourceHooksBinding`) are the message's own.
"""

from __future__ import annotations

import types
from collections import abc
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType, ModuleType
from typing import Any

from google.protobuf import struct_pb2
from pulumi import Archive, Asset, Output, Resource, _types
from pulumi.output import Unknown
from pulumi.runtime import rpc, settings
from pulumi.runtime.proto import resource_pb2

from components.sdk_types import (
    INPUT_MAP_PLAN,
    LIST_ELEMENT_TYPE,
    by_identity,
    unwrap_type,
)
from components.sdk_values import SCALARS

SDK_SERIALIZE_PROPERTY = rpc.serialize_property


async def serialize_property(
    value: Any,
    deps: list[Any] | None,
    property_key: str | None,
    resource_obj: Any = None,
    input_transformer: Callable[[str], str] | None = None,
    typ: type | None = None,
    keep_output_values: bool = False,
    exclude_resource_refs_from_deps: bool = False,
    return_protobuf_value: bool = False,
) -> Any:
    """The SDK's `rpc.serialize_property`: a string, number, boolean or None as it is (what the
    SDK's walk through every other kind of value ends with for them); a list, tuple, dict or
    read-only map walked at once (`_container`), each value in it that is none of
    those handed to the SDK in the order the SDK's walk meets it; anything else, and any value
    wanted as a protobuf `Value`, by the SDK."""
    kind = type(value)
    if kind in SCALARS and not return_protobuf_value:
        if typ:
            _types.unwrap_type(typ)  # as the SDK does first: a malformed annotation raises
        return value
    if kind is Output and not keep_output_values and not return_protobuf_value:
        return await _output(value, deps, property_key, resource_obj, input_transformer, typ)
    if kind in _CONTAINERS and not return_protobuf_value and not settings.excessive_debug_output:
        pending: list[_Pending] = []
        try:
            serialized = _container(value, kind, typ, input_transformer, property_key, pending)
        except Exception:
            # The walk changes nothing (it reads the value and the types): the SDK's own walk
            # from the start meets the same failure, after the values before it, as it would.
            pending = []
        else:
            for holder, slot, item, item_type, key in pending:
                holder[slot] = await serialize_property(
                    item,
                    deps,
                    key,
                    resource_obj,
                    input_transformer,
                    item_type,
                    keep_output_values,
                    exclude_resource_refs_from_deps,
                )
            return serialized
    if PLAIN_SUBCLASS(kind) and not return_protobuf_value:  # an Enum member, as it is
        if typ:
            _types.unwrap_type(typ)
        return value
    return await SDK_SERIALIZE_PROPERTY(
        value,
        deps,
        property_key,
        resource_obj,
        input_transformer,
        typ,
        keep_output_values,
        exclude_resource_refs_from_deps,
        return_protobuf_value,
    )


def plain_subclass(kind: type) -> bool:
    """Whether the SDK's `serialize_property` answers a value of class `kind`, a subclass of
    str, int or float (an Enum of those: a step's `Logging`), as it is: none of its checks
    before `isLegalProtobufValue` holds for the class (a sequence but a string, an unknown, a
    resource, an asset, an archive, an awaitable, an Output, an input type, a mapping, a
    protobuf Value), and the SDK keeps what passes that one unchanged."""
    if kind in SCALARS or not issubclass(kind, str | int | float):
        return False
    not_a_string = (str, range, memoryview, bytes, bytearray)
    return not (
        (issubclass(kind, abc.Sequence) and not issubclass(kind, not_a_string))
        or issubclass(kind, _KNOWN_TYPES)
        or issubclass(kind, types.CoroutineType | types.GeneratorType | abc.Awaitable)
        or _types.is_input_type(kind)
        or issubclass(kind, abc.Mapping)
        or issubclass(kind, struct_pb2.Value)
    )


# The classes `known_types` checks a value against (it imports them lazily, as these are).
_KNOWN_TYPES = (Unknown, Resource, Asset, Archive, Output)
PLAIN_SUBCLASS = by_identity(plain_subclass)


async def _output(
    output: Output[Any],
    deps: list[Any] | None,
    property_key: str | None,
    resource_obj: Any,
    input_transformer: Callable[[str], str] | None,
    typ: Any,
) -> Any:
    """The SDK's `serialize_property` of an Output (without `keep_output_values`), line for
    line: its resources added to `deps`, its value serialized (None when it holds an unknown),
    what that found added to `deps` and to the Output's own resources (as the SDK does), and
    the value, the unknown sentinel, or either wrapped as a secret. The SDK reaches it after
    nine checks that an Output fails (a sequence? an unknown? a resource? an asset? ...)."""
    typ = unwrap_type(typ) if typ else typ
    if typ is Any:
        typ = None
    data = await output._data
    value_resources = data.resources
    if deps is not None:
        deps.extend(value_resources)
    is_known = data.is_known
    is_secret = data.is_secret
    value = data.value
    if type(value) in SCALARS and rpc.serialize_property is serialize_property:
        # What this module's `serialize_property` answers for a string, number, boolean or
        # None (never an unknown), without a coroutine for it: the value, its annotation
        # unwrapped first; nothing found in it.
        if typ:
            _types.unwrap_type(typ)
    else:
        promise_deps: list[Any] = []
        value = await rpc.serialize_property(
            None if rpc.contains_unknowns(value) else value,
            promise_deps,
            property_key,
            resource_obj,
            input_transformer,
            typ,
            keep_output_values=False,
        )
        if deps is not None:
            deps.extend(promise_deps)
        value_resources.update(promise_deps)
    if not is_known:
        if is_secret and settings.monitor_supports_feature(_SECRETS):
            return {rpc._special_sig_key: rpc._special_secret_sig, "value": rpc.UNKNOWN}
        return rpc.UNKNOWN
    if is_secret and settings.monitor_supports_feature(_SECRETS):
        return {rpc._special_sig_key: rpc._special_secret_sig, "value": value}
    return value


_SECRETS = resource_pb2.RESOURCE_MONITOR_FEATURE_SECRETS


class FrozenMap(Mapping[str, Any]):
    """A read-only map of strings, numbers, booleans, None and other FrozenMaps, which no one can
    change once made (its own copy of the items, no way to write): what the SDK serializes as
    any Mapping (`rpc.serialize_property`, `abc.Mapping`), and `Output.from_input` takes as it
    is. Being unable to change, its serialized form is the same every time for one annotation
    and key translator: `serialize_property` walks it once for each and hands out copies (a
    machine's connection, sent by every step on it)."""

    __slots__ = ("_items", "_serialized")

    def __init__(self, items: Mapping[str, Any]):
        copied = dict(items)
        for key, value in copied.items():
            if type(key) is not str or not (type(value) in SCALARS or type(value) is FrozenMap):
                raise TypeError(
                    f"FrozenMap holds strings, numbers, booleans, None and FrozenMaps by string "
                    f"keys, not {key!r}: {type(value).__name__}"
                )
        object.__setattr__(self, "_items", copied)
        # (annotation, key translator) -> the serialized form, walked once for each.
        object.__setattr__(self, "_serialized", {})

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a FrozenMap cannot change ({name})")

    def __repr__(self) -> str:
        return f"FrozenMap({self._items!r})"


def _frozen(
    value: FrozenMap,
    typ: Any,
    input_transformer: Callable[[str], str] | None,
    property_key: str | None,
) -> dict[str, Any]:
    """`_container` of a FrozenMap: walked once per annotation and key translator (nothing in
    it is left for the SDK: it holds plain data only), a copy of that each time. A walk that
    never asked the translator (the annotation names every key, as `ConnectionArgs` does) is
    remembered for any translator: each resource hands its own (a bound method)."""
    memo = value._serialized
    known = memo.get((id(typ), id(_ANY_TRANSLATOR)))
    if known is None or known[0] is not typ:
        known = memo.get((id(typ), id(input_transformer)))
        if known is None or known[0] is not typ or known[1] is not input_transformer:
            known = _walk_frozen(value, typ, input_transformer, property_key)
            memo[(id(typ), id(known[1]))] = known
    return _copied(known[2])


# Remembered with a walk of a FrozenMap that never asked its key translator.
_ANY_TRANSLATOR = object()


def _walk_frozen(
    value: FrozenMap,
    typ: Any,
    input_transformer: Callable[[str], str] | None,
    property_key: str | None,
) -> tuple[Any, Any, dict[str, Any]]:
    """(typ, the translator or _ANY_TRANSLATOR when none was asked, the serialized form)."""
    asked: list[str] = []
    translate = None
    if input_transformer is not None:

        def translate(key: str) -> str:
            asked.append(key)
            return input_transformer(key)

    pending: list[_Pending] = []
    serialized = _container(value, dict, typ, translate, property_key, pending)
    if pending:  # cannot be: a FrozenMap holds plain data only
        raise TypeError(f"a FrozenMap holding other than plain data: {value!r}")
    return typ, input_transformer if asked else _ANY_TRANSLATOR, serialized


def _copied(serialized: dict[str, Any]) -> dict[str, Any]:
    """A copy of a FrozenMap's serialized form (maps inside copied too: the caller's own)."""
    copy = dict(serialized)
    for key, value in copy.items():
        if type(value) is dict:
            copy[key] = _copied(value)
    return copy


# The containers `serialize_property` walks itself: the SDK's `abc.Sequence` (but a string)
# and `abc.Mapping` cases, for the types of both a program passes; none of them is an unknown,
# a resource, an asset, an archive, an awaitable, an Output or an input type, the checks the
# SDK makes before those two.
_CONTAINERS = frozenset({list, tuple, dict, MappingProxyType, FrozenMap})

# A value inside a container that the SDK serializes: where its answer goes (the container
# and the index or key), the value, its annotation and the property key the SDK passes with it.
_Pending = tuple[Any, Any, Any, Any, Any]


def _container(
    value: Any,
    kind: type,
    typ: Any,
    input_transformer: Callable[[str], str] | None,
    property_key: str | None,
    pending: list[_Pending],
) -> Any:
    """The SDK's `serialize_property` of a list, tuple, dict or read-only map, without awaiting:
    the same checks of `typ`, the same key translation and the same annotation for each value,
    line for line. A value of another kind gets a None in its place and is added to `pending`
    in the order the SDK's walk meets it. (A string, number, boolean or None inside is placed
    here, its annotation unwrapped as the SDK's call for it does first, which raises for a
    malformed one: most values are one.)"""
    if kind is FrozenMap:
        return _frozen(value, typ, input_transformer, property_key)
    typ = unwrap_type(typ) if typ else typ
    if typ is Any:
        typ = None
    if kind is list or kind is tuple:
        element_type = LIST_ELEMENT_TYPE(typ)
        if element_type and value:
            unwrap_type(element_type)
        items: list[Any] = []
        for element in value:
            element_kind = type(element)
            if element_kind in SCALARS:
                items.append(element)
            elif element_kind in _CONTAINERS:
                items.append(
                    _container(
                        element,
                        element_kind,
                        element_type,
                        input_transformer,
                        property_key,
                        pending,
                    )
                )
            elif PLAIN_SUBCLASS(element_kind):
                if element_type:
                    unwrap_type(element_type)
                items.append(element)
            else:
                items.append(None)
                pending.append((items, len(items) - 1, element, element_type, property_key))
        return items
    names: dict[str, str] | None = None  # an input type's Pulumi names by Python name
    types: dict[str, Any] | None = None  # each value's annotation by its key, if any
    value_type = None  # else the one annotation of every value
    unwraps = True  # every annotation of a value is known to unwrap (no need to again)
    translate = input_transformer
    if typ is not None:
        plan = INPUT_MAP_PLAN(typ)
        if plan[0]:  # a discriminated union: the member the keys select, if one
            case = _types.reduce_discriminated_union(typ, value, _types._py_name_for)
            if case is not None:
                plan = INPUT_MAP_PLAN(case)
        _, names, types, mapping, typed, value_type, unwraps = plan
        if names is None and (typed or not mapping):
            translate = None
    obj: dict[Any, Any] = {}
    for k in value:
        if names is not None:
            transformed_key = names.get(k) or k
        else:
            transformed_key = k if translate is None else translate(k)
        item = value[k]
        item_type = value_type if types is None else types.get(transformed_key)
        item_kind = type(item)
        if item_kind in SCALARS:
            if item_type and not unwraps:
                unwrap_type(item_type)  # raises, as the SDK's call for the value would
            obj[transformed_key] = item
        elif item_kind in _CONTAINERS:
            obj[transformed_key] = _container(
                item, item_kind, item_type, input_transformer, k, pending
            )
        elif PLAIN_SUBCLASS(item_kind):
            if item_type and not unwraps:
                unwrap_type(item_type)
            obj[transformed_key] = item
        else:
            obj[transformed_key] = None
            pending.append((obj, transformed_key, item, item_type, k))
    return obj


_REQUEST = resource_pb2.RegisterResourceRequest


def register_resource_request(*, object: Any = None, **fields: Any) -> Any:
    """`resource_pb2.RegisterResourceRequest(**fields)`, with a Struct as `object` copied in by
    `CopyFrom` rather than by the constructor (which serializes and parses it)."""
    if type(object) is not struct_pb2.Struct:
        return _REQUEST(object=object, **fields)
    request = _REQUEST(**fields)
    request.object.CopyFrom(object)
    return request


for _name in ("DESCRIPTOR", *_REQUEST.DESCRIPTOR.nested_types_by_name):
    setattr(register_resource_request, _name, getattr(_REQUEST, _name))


def _with_request(messages: ModuleType) -> ModuleType:
    """A module with every attribute of `messages`, `RegisterResourceRequest` replaced."""
    module = ModuleType(messages.__name__, messages.__doc__)
    vars(module).update(vars(messages))
    module.RegisterResourceRequest = register_resource_request
    return module


RESOURCE_PB2 = _with_request(resource_pb2)

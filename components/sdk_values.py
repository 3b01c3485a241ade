"""The Pulumi Python SDK's functions that carry every value between the program and the engine,
replaced (by components/sdk_fixes.py, over the exact source each was written against) by ones
that answer the same and cost less. Each answers the common case, plain data, itself and hands
every other case to the SDK's own function (`SDK_*`, taken before any replacement is installed).

- `rpc.deserialize_properties` reads what the engine answers for every registration (the
  resource's outputs, all its inputs among them) through protobuf's Python `Struct` wrappers,
  value by value. The replacement reads plain data (strings, numbers, booleans, nulls, maps,
  lists, secrets) straight from the protobuf fields, with the SDK's rules (nulls left out of
  maps, a secret inside a map or list makes it a secret as a whole), and hands anything else (an
  unknown, an asset, an archive, a resource reference, an output value) to the SDK.
- `rpc.translate_output_properties` then walks every value of those outputs with its type from
  the resource's annotations, keeping a path object per value for its error messages and
  building the property types of an output type afresh for every object of it (every nested
  object of a Job's spec). The replacement answers a string, number, boolean or None itself,
  with the SDK's rules for them (an Enum type makes a member, a float typed `int` an int), and
  walks a map (not a secret) or a list itself by the SDK's rules, with the answers that depend
  on the type alone remembered; anything else, and a value the walk fails on, goes to the SDK,
  so a failure is reported as the SDK reports it.
- `rpc.serialize_property` is called for every input of every registration and again for
  every value inside a map or list, a coroutine each, and takes each through a dozen checks (a
  sequence, an unknown, a resource, an asset, an archive, an awaitable, an Output, an input
  type, a mapping, a protobuf value) before it returns a string, number, boolean or None as it
  is. The replacement returns those at once, walks lists, tuples, dicts and read-only maps
  itself by the SDK's rules (key translation, each value's annotation), and hands every other
  value, in the order the SDK's walk meets it, to the SDK. (Its digest pins `rpc`'s
  definitions only: that none of those types is an unknown, a resource, an asset or an input
  type is the word of `known_types` and `_types`, which it cannot pin, as of 3.272.0.)
- `rpc.resolve_outputs` combines the engine's answer with the inputs: every output, then each
  input the answer lacks. To find those it reads every input's value first
  (`list(serialized_props.items())`: protobuf's `Struct.items` makes a Python value of each,
  a copy of every rendered script), though nearly every input is in the answer (providers
  answer with their inputs) and its value is then thrown away. The replacement is the SDK's
  function with that loop reading a value only for an input the answer lacks: the same keys
  in the same order, the same values for those. (A `Struct` the SDK serialized has a kind set
  on every value, so the reads the SDK made and the replacement leaves out could not fail.)
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
"""

from __future__ import annotations

import inspect
import typing
from collections import abc
from collections.abc import Callable
from enum import Enum
from types import MappingProxyType, ModuleType
from typing import Any

from google.protobuf import struct_pb2
from pulumi import _types, log
from pulumi.runtime import rpc, settings
from pulumi.runtime.proto import resource_pb2

SDK_DESERIALIZE_PROPERTIES = rpc.deserialize_properties
SDK_TRANSLATE_OUTPUT_PROPERTIES = rpc.translate_output_properties
SDK_SERIALIZE_PROPERTY = rpc.serialize_property
SDK_UNWRAP_TYPE = _types.unwrap_type
SDK_UNWRAP_OPTIONAL_TYPE = _types.unwrap_optional_type
SDK_RESOURCE_TYPES = _types.resource_types
SDK_RESOURCE_PULUMI_TO_PY_NAMES = _types.resource_pulumi_to_py_names

# The types of plain values besides maps and lists: what the engine's answers hold, and of
# which no value is an `Unknown` (a plain class of pulumi.output).
SCALARS = frozenset({str, int, float, bool, type(None)})


class NotPlain(Exception):
    """A value the SDK reads or writes as something other than plain data (an unknown, an asset or
    archive, a resource reference, an output value), or fails to read."""


def deserialize_properties(
    props_struct: struct_pb2.Struct,
    keep_unknowns: bool | None = None,
    keep_internal: bool | None = True,
) -> Any:
    """The SDK's `rpc.deserialize_properties`: plain data read straight from the protobuf fields
    (`plain_properties`), anything else by the SDK."""
    if keep_internal is not False:
        props = plain_properties(props_struct)
        if props is not None:
            return props
    return SDK_DESERIALIZE_PROPERTIES(props_struct, keep_unknowns, keep_internal)


def plain_properties(struct: struct_pb2.Struct) -> dict[str, Any] | None:
    """`rpc.deserialize_properties(struct)` for plain data: values as they are, nulls left out of
    maps but kept in lists, a map or list holding a secret made a secret as a whole with the
    secrets inside unwrapped; None when there is anything else (an unknown, an asset or archive,
    a resource reference, an output value)."""
    try:
        return _from_struct(struct)
    except NotPlain:
        return None


def _from_struct(struct: struct_pb2.Struct) -> dict[str, Any]:
    """`rpc.deserialize_properties` of a map (a string, number or boolean inside read in
    place, most values being one)."""
    fields = struct.fields
    if rpc._special_sig_key in fields:
        signature = fields[rpc._special_sig_key]
        if (
            signature.WhichOneof("kind") != "string_value"
            or signature.string_value != rpc._special_secret_sig
            or "value" not in fields
        ):
            raise NotPlain
        return rpc.wrap_rpc_secret(_from_value(fields["value"]))
    props = {}
    for key in fields:
        value = fields[key]
        kind = value.WhichOneof("kind")
        if kind == "string_value":
            text = value.string_value
            if text == rpc.UNKNOWN:
                raise NotPlain
            props[key] = text
        elif kind == "number_value":
            props[key] = value.number_value
        elif kind == "bool_value":
            props[key] = value.bool_value
        elif kind != "null_value":
            item = _from_value(value)
            if item is not None:
                props[key] = item
    return props


def _from_value(value: struct_pb2.Value) -> Any:
    """`rpc.deserialize_property` of one value."""
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        text = value.string_value
        if text == rpc.UNKNOWN:
            raise NotPlain
        return text
    if kind == "number_value":
        return value.number_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "null_value":
        return None
    if kind == "struct_value":
        props = _from_struct(value.struct_value)
        if _holds_secret(props.values()):
            return rpc.wrap_rpc_secret({k: rpc.unwrap_rpc_secret(v) for k, v in props.items()})
        return props
    if kind == "list_value":
        values = [_from_value(item) for item in value.list_value.values]
        if _holds_secret(values):
            return rpc.wrap_rpc_secret([rpc.unwrap_rpc_secret(v) for v in values])
        return values
    raise NotPlain  # a value with no kind set: the SDK's reading of it fails


def _holds_secret(values: Any) -> bool:
    """`any(rpc.is_rpc_secret(v) for v in values)` for values read by `_from_value`, where only
    a dict can be a secret (a loop: a generator is a frame per call)."""
    for v in values:  # noqa: SIM110
        if type(v) is dict and rpc.is_rpc_secret(v):
            return True
    return False


def translate_output_properties(
    output: Any,
    output_transformer: Callable[[str], str],
    typ: type | None = None,
    transform_using_type_metadata: bool = False,
    path: Any = None,
    return_none_on_dict_type_mismatch: bool = False,
) -> Any:
    """The SDK's `rpc.translate_output_properties`: a string, number, boolean or None as the SDK
    makes it (an Enum type makes a member of it, a float typed `int` an int, anything else
    stays as it is); a map (not a secret) or a list walked at once (`_translate_container`);
    anything else, and any value the walk fails on, by the SDK, whose errors name the path."""
    kind = type(output)
    if kind in SCALARS:
        return _translate_scalar(output, kind, typ)
    if (kind is dict and not rpc.is_rpc_secret(output)) or kind is list:
        try:
            return _translate_container(
                output,
                kind,
                output_transformer,
                typ,
                transform_using_type_metadata,
                return_none_on_dict_type_mismatch,
            )
        except Exception:
            # The walk changes nothing and builds only what the SDK builds (output types,
            # Enum members): the SDK's walk from the start fails as it would have.
            pass
    return SDK_TRANSLATE_OUTPUT_PROPERTIES(
        output,
        output_transformer,
        typ,
        transform_using_type_metadata,
        path,
        return_none_on_dict_type_mismatch,
    )


def _translate_scalar(output: Any, kind: type, typ: Any) -> Any:
    """A string, number, boolean or None of type `typ`, by the rule for that type
    (`_scalar_rule`, remembered by annotation)."""
    known = _SCALAR_RULES.get(id(typ))
    rule = known[1] if known is not None and known[0] is typ else _SCALAR_RULE(typ)
    if rule is _AS_IS or output is None:
        return output
    if rule is int:
        return int(output) if kind is float else output
    return rule(output)


_AS_IS = object()


def _scalar_rule(typ: Any) -> Any:
    """What the SDK makes of a string, number or boolean of type `typ`: an Enum class makes a
    member (the class), a float typed `int` an int (`int`), anything else stays (`_AS_IS`)."""
    typ = unwrap_optional_type(typ) if typ else typ
    if typ is Any:
        return _AS_IS
    if typ and inspect.isclass(typ) and issubclass(typ, Enum):
        return typ
    return int if typ is int else _AS_IS


def _translate_container(
    output: Any,
    kind: type,
    output_transformer: Callable[[str], str],
    typ: Any,
    by_type: bool,
    none_on_mismatch: bool,
) -> Any:
    """The SDK's `translate_output_properties` of a map that is not a secret, or of a list,
    line for line, without the path it keeps for its error messages (a failure raises, and the
    caller hands the value to the SDK). Each value inside is translated as the SDK's call for
    it would: a plain one here, a map or list by recursion, anything else by the SDK."""
    typ = unwrap_optional_type(typ) if typ else typ
    if typ is Any:
        typ = None
    if kind is list:
        element_type = _LIST_ELEMENT_TYPE(typ)
        return [
            _translate_item(v, output_transformer, element_type, by_type, none_on_mismatch)
            for v in output
        ]
    if typ is not None and _IS_DISCRIMINATED_UNION(typ):
        typ = _types.reduce_discriminated_union(typ, output, _pulumi_name)
    types: dict[str, Any] | None = None  # each value's type by its key, if any
    value_type = None  # else the one type of every value
    translate = output_transformer
    if typ is not None:
        if _IS_OUTPUT_TYPE(typ):
            types = _OUTPUT_TYPE_TYPES(typ)
            translated_values = {
                k: _translate_item(v, output_transformer, types.get(k), by_type, none_on_mismatch)
                for k, v in output.items()
            }
            return _types.output_type_from_dict(typ, translated_values)
        mapping, typed, value_type = _MAPPING_RULE(typ)
        if mapping:
            if typed and by_type:
                translate = _same_name
        elif none_on_mismatch:
            return None
        else:
            raise _Mismatch
    return {
        translate(k): _translate_item(v, output_transformer, value_type, by_type, none_on_mismatch)
        for k, v in output.items()
    }


def _translate_item(
    value: Any,
    output_transformer: Callable[[str], str],
    typ: Any,
    by_type: bool,
    none_on_mismatch: bool,
) -> Any:
    kind = type(value)
    if kind in SCALARS:
        return value if typ is None else _translate_scalar(value, kind, typ)
    if (kind is dict and not rpc.is_rpc_secret(value)) or kind is list:
        return _translate_container(value, kind, output_transformer, typ, by_type, none_on_mismatch)
    return rpc.translate_output_properties(
        value, output_transformer, typ, by_type, None, none_on_mismatch
    )


class _Mismatch(Exception):
    """A map where the type says otherwise: the SDK raises, naming the path."""


def _pulumi_name(_cls: type, name: str) -> str:
    """The SDK's `lambda _, name: name`: the engine's keys are the Pulumi names."""
    return name


def _same_name(key: str) -> str:
    return key


def resolve_outputs(
    res: Any,
    serialized_props: struct_pb2.Struct,
    outputs: struct_pb2.Struct,
    deps: Any,
    resolvers: dict[str, Any],
    custom: bool,
    transform_using_type_metadata: bool = False,
    keep_unknowns: bool = False,
    resolve_missing_as_unknown: bool = False,
) -> None:
    """The SDK's `rpc.resolve_outputs` (3.272.0), line for line, except that an input's value
    is read only when the engine's answer lacks that input."""
    all_properties = {}
    resource_cls = type(res)
    types = _types.resource_types(resource_cls)
    translate, translate_to_pass = (
        res.translate_output_property,
        res.translate_output_property,
    )
    if transform_using_type_metadata:
        pulumi_to_py_names = _types.resource_pulumi_to_py_names(resource_cls)

        def translate(prop: str) -> str:
            return pulumi_to_py_names.get(prop) or prop

        def translate_to_pass(prop: str) -> str:
            return prop

    for key, value in rpc.deserialize_properties(outputs, keep_unknowns).items():
        translated_key = translate(key)
        translated_value = rpc.translate_output_properties(
            value,
            translate_to_pass,
            types.get(key),
            transform_using_type_metadata,
            path=rpc._Path(translated_key, resource=f"{res._name}"),
        )
        if settings.excessive_debug_output:
            log.debug(f"incoming output property translated: {key} -> {translated_key}")
            log.debug(f"incoming output value translated: {value} -> {translated_value}")
        all_properties[translated_key] = translated_value

    translated_deps = {}
    for key, property_deps in deps.items():
        translated_deps[translate(key)] = property_deps

    if not settings.is_dry_run() or settings.is_legacy_apply_enabled():
        for key in list(serialized_props):  # the SDK: list(serialized_props.items())
            translated_key = translate(key)
            if translated_key not in all_properties:
                all_properties[translated_key] = rpc.translate_output_properties(
                    rpc.deserialize_property(serialized_props[key]),
                    translate_to_pass,
                    types.get(key),
                    transform_using_type_metadata,
                    path=rpc._Path(translated_key, resource=f"{res._name}"),
                    return_none_on_dict_type_mismatch=True,
                )

    rpc.resolve_properties(
        resolvers, all_properties, translated_deps, custom, resolve_missing_as_unknown
    )


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
    read-only map walked at once (`_serialize_containers`), each value in it that is none of
    those handed to the SDK in the order the SDK's walk meets it; anything else, and any value
    wanted as a protobuf `Value`, by the SDK."""
    kind = type(value)
    if kind in SCALARS and not return_protobuf_value:
        if typ:
            _types.unwrap_type(typ)  # as the SDK does first: a malformed annotation raises
        return value
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


def _mapping_rule(typ: Any) -> tuple[bool, bool, Any]:
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


# The containers `serialize_property` walks itself: the SDK's `abc.Sequence` (but a string)
# and `abc.Mapping` cases, for the types of both a program passes; none of them is an unknown,
# a resource, an asset, an archive, an awaitable, an Output or an input type, the checks the
# SDK makes before those two.
_CONTAINERS = frozenset({list, tuple, dict, MappingProxyType})
_MAPPING_ORIGINS = [dict, typing.Dict, abc.Mapping, typing.Mapping]  # noqa: UP006 - the SDK's

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
    typ = unwrap_type(typ) if typ else typ
    if typ is Any:
        typ = None
    if kind is list or kind is tuple:
        element_type = _LIST_ELEMENT_TYPE(typ)
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
            else:
                items.append(None)
                pending.append((items, len(items) - 1, element, element_type, property_key))
        return items
    types: dict[str, Any] | None = None  # each value's annotation by its key, if any
    value_type = None  # else the one annotation of every value
    translate = input_transformer
    if typ is not None:
        if _IS_DISCRIMINATED_UNION(typ):  # else the SDK's reduction answers None
            case = _types.reduce_discriminated_union(typ, value, _types._py_name_for)
            if case is not None:
                typ = case
        if _types.is_input_type(typ):
            py_name_to_pulumi_name = _INPUT_TYPE_PY_TO_PULUMI_NAMES(typ)
            types = _INPUT_TYPE_TYPES(typ)

            def translate(k: str) -> str:
                return py_name_to_pulumi_name.get(k) or k

        else:
            mapping, typed, value_type = _MAPPING_RULE(typ)
            if typed or not mapping:
                translate = None
    obj: dict[Any, Any] = {}
    for k in value:
        transformed_key = k if translate is None else translate(k)
        item = value[k]
        item_type = value_type if types is None else types.get(transformed_key)
        item_kind = type(item)
        if item_kind in SCALARS:
            if item_type:
                unwrap_type(item_type)
            obj[transformed_key] = item
        elif item_kind in _CONTAINERS:
            obj[transformed_key] = _container(
                item, item_kind, item_type, input_transformer, k, pending
            )
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


class _Remembered(typing.Protocol):
    """A function of one object, its answers by that object's identity in `answers`."""

    answers: dict[int, tuple[Any, Any]]

    def __call__(self, value: Any, /) -> Any: ...


def _by_identity(function: Callable[[Any], Any], limit: int = 4096) -> _Remembered:
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


_UNWRAP_TYPE = _by_identity(SDK_UNWRAP_TYPE)
_UNWRAP_OPTIONAL_TYPE = _by_identity(SDK_UNWRAP_OPTIONAL_TYPE)
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


_RESOURCE_TYPES = _by_identity(SDK_RESOURCE_TYPES)
_RESOURCE_PULUMI_TO_PY_NAMES = _by_identity(SDK_RESOURCE_PULUMI_TO_PY_NAMES)


def resource_types(resource_cls: type) -> dict[str, type]:
    """The SDK's `_types.resource_types`, built once per class; a copy for each caller."""
    return dict(_RESOURCE_TYPES(resource_cls))


def resource_pulumi_to_py_names(resource_cls: type) -> dict[str, str]:
    """The SDK's `_types.resource_pulumi_to_py_names`, built once per class; a copy for each
    caller."""
    return dict(_RESOURCE_PULUMI_TO_PY_NAMES(resource_cls))


# Answers of an annotation alone, remembered for the two walks above (the SDK builds an input
# or output type's names and types afresh, a dict and an `unwrap_type` per property, for every
# value of that type it meets: every nested object of a Job's spec). The walks only read the
# dicts, never hand them out.
_IS_DISCRIMINATED_UNION = _by_identity(_types.is_discriminated_union)
_SCALAR_RULE = _by_identity(_scalar_rule)
_LIST_ELEMENT_TYPE = _by_identity(rpc._get_list_element_type)
_MAPPING_RULE = _by_identity(_mapping_rule)
_SCALAR_RULES = _SCALAR_RULE.answers
_INPUT_TYPE_PY_TO_PULUMI_NAMES = _by_identity(_types.input_type_py_to_pulumi_names)
_INPUT_TYPE_TYPES = _by_identity(_types.input_type_types)
_IS_OUTPUT_TYPE = _by_identity(_types.is_output_type)
_OUTPUT_TYPE_TYPES = _by_identity(_types.output_type_types)

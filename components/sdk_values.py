"""The Pulumi Python SDK's functions that read what the engine answers for every registration,
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
- `rpc.resolve_outputs`, which combines the engine's answer with the inputs through these
  two, is in `components/sdk_outputs.py`.
- What the program sends (the inputs serialized, the request built) is in
  `components/sdk_inputs.py`; the SDK's answers about annotations and classes that the walks
  of both ask for every value are in `components/sdk_types.py`, remembered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.protobuf import struct_pb2
from pulumi import _types
from pulumi.runtime import rpc

from components.sdk_types import (
    AS_IS,
    LIST_ELEMENT_TYPE,
    OUTPUT_MAP_PLAN,
    SCALAR_RULE,
    SCALAR_RULES,
    unwrap_optional_type,
)

SDK_DESERIALIZE_PROPERTIES = rpc.deserialize_properties
SDK_TRANSLATE_OUTPUT_PROPERTIES = rpc.translate_output_properties

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


def plain_properties(
    struct: struct_pb2.Struct,
    remembered: dict[bytes, Any] | None = None,
    raws: dict[str, bytes] | None = None,
    sent: dict[str, tuple[struct_pb2.Value, str]] | None = None,
) -> dict[str, Any] | None:
    """`rpc.deserialize_properties(struct)` for plain data: values as they are, nulls left out of
    maps but kept in lists, a map or list holding a secret made a secret as a whole with the
    secrets inside unwrapped; None when there is anything else (an unknown, an asset or archive,
    a resource reference, an output value).

    With `remembered`, each map or list of `struct` is read once per serialized form among the
    last `REMEMBERED_KEPT` read into it (of at most `REMEMBERED_BYTES` each), and the same
    objects are answered again: for a reader that changes none of them (every step on a
    machine is sent and answered its connection and triggers). `raws` then gets each one's
    serialized form by key.

    With `sent`, a top-level string equal to the `Value` given for its key there (compared in
    protobuf's C, without reading it into Python) is answered as the string given with it: an
    answer that echoes a long input (every step's stdin) is not read again."""
    try:
        return _from_fields(struct.fields, remembered, raws, sent)[0]
    except NotPlain:
        return None


REMEMBERED_KEPT = 4096
REMEMBERED_BYTES = 4096  # a step's connection is about 700 bytes, a Job's spec 3,000


def remember(remembered: dict[bytes, Any], raw: bytes, item: Any) -> Any:
    """`item`, read from `raw`, kept in `remembered` (the oldest out first) if small enough."""
    if len(raw) <= REMEMBERED_BYTES:
        if len(remembered) >= REMEMBERED_KEPT:
            del remembered[next(iter(remembered))]
        remembered[raw] = item
    return item


# The SDK's constants (`rpc`): a secret's signature key and value, the unknown sentinel.
_SIG_KEY = rpc._special_sig_key
_SECRET_SIG = rpc._special_secret_sig
_UNKNOWN = rpc.UNKNOWN


def _from_fields(
    fields: Any,
    remembered: dict[bytes, Any] | None = None,
    raws: dict | None = None,
    sent: dict[str, tuple[Any, str]] | None = None,
) -> tuple[dict[str, Any], bool]:
    """A map's fields read (a string, number or boolean inside read in place, most values
    being one), and whether a value inside is a secret (only a map read can be one); its maps
    and lists remembered as `plain_properties` says, with `remembered`."""
    if _SIG_KEY in fields:
        signature = fields[_SIG_KEY]
        if (
            signature.WhichOneof("kind") != "string_value"
            or signature.string_value != _SECRET_SIG
            or "value" not in fields
        ):
            raise NotPlain
        inner = _from_value(fields["value"])
        # The secret's own map holds a secret only where its value is one (its signature is a
        # string).
        return rpc.wrap_rpc_secret(inner), type(inner) is dict and rpc.is_rpc_secret(inner)
    props = {}
    holds_secret = False
    for key in fields:
        value = fields[key]
        kind = value.WhichOneof("kind")
        if kind == "string_value":
            if sent is not None and key in sent and value == sent[key][0]:
                props[key] = sent[key][1]  # the string sent, answered unchanged
            else:
                text = value.string_value
                if text == _UNKNOWN:
                    raise NotPlain
                props[key] = text
        elif kind == "number_value":
            props[key] = value.number_value
        elif kind == "bool_value":
            props[key] = value.bool_value
        elif kind != "null_value":
            if remembered is None:
                item = _from_value(value)
            else:  # read once per serialized form, as `plain_properties` says
                item, raw = _remembered(value, remembered)
                if raws is not None:
                    raws[key] = raw
            if item is not None:
                props[key] = item
                if not holds_secret and type(item) is dict and rpc.is_rpc_secret(item):
                    holds_secret = True
    return props, holds_secret


def _from_value(value: struct_pb2.Value, remembered: dict[bytes, Any] | None = None) -> Any:
    """`rpc.deserialize_property` of one value; with `remembered`, each map or list inside read
    once per serialized form too (a Job's spec differs from node to node by a few names, its
    containers, tolerations and security settings not at all)."""
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        text = value.string_value
        if text == _UNKNOWN:
            raise NotPlain
        return text
    if kind == "number_value":
        return value.number_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "null_value":
        return None
    if kind == "struct_value":
        props, holds_secret = _from_fields(value.struct_value.fields, remembered)
        if holds_secret:
            return rpc.wrap_rpc_secret({k: rpc.unwrap_rpc_secret(v) for k, v in props.items()})
        return props
    if kind == "list_value":
        values = []
        holds_secret = False
        for item in value.list_value.values:
            if remembered is not None and item.WhichOneof("kind") in _CONTAINER_KINDS:
                read = _remembered(item, remembered)[0]
            else:
                read = _from_value(item, remembered)
            values.append(read)
            if not holds_secret and type(read) is dict and rpc.is_rpc_secret(read):
                holds_secret = True
        if holds_secret:
            return rpc.wrap_rpc_secret([rpc.unwrap_rpc_secret(v) for v in values])
        return values
    raise NotPlain  # a value with no kind set: the SDK's reading of it fails


def _remembered(value: struct_pb2.Value, remembered: dict[bytes, Any]) -> tuple[Any, bytes]:
    """A map or list value read once per serialized form (`plain_properties`), and that form."""
    raw = value.SerializeToString()
    item = remembered.get(raw, remembered)
    if item is remembered:
        item = remember(remembered, raw, _from_value(value, remembered))
    return item, raw


# The kinds of a Value that hold a map or a list.
_CONTAINER_KINDS = frozenset({"struct_value", "list_value"})


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
    translated = _translated(
        output,
        output_transformer,
        typ,
        transform_using_type_metadata,
        return_none_on_dict_type_mismatch,
    )
    if translated is _BY_SDK:
        return SDK_TRANSLATE_OUTPUT_PROPERTIES(
            output,
            output_transformer,
            typ,
            transform_using_type_metadata,
            path,
            return_none_on_dict_type_mismatch,
        )
    return translated


# What `_translated` answers for a value it leaves to the SDK.
_BY_SDK = object()


def _translated(
    output: Any,
    output_transformer: Callable[[str], str],
    typ: Any,
    by_type: bool,
    none_on_mismatch: bool,
) -> Any:
    """`translate_output_properties` without the path, which only the SDK's function reads (for
    its errors): `_BY_SDK` where that function is to take the value."""
    kind = type(output)
    if kind in SCALARS:
        return _translate_scalar(output, kind, typ)
    if (kind is dict and not rpc.is_rpc_secret(output)) or kind is list:
        try:
            return _translate_container(
                output, kind, output_transformer, typ, by_type, none_on_mismatch
            )
        except Exception:
            # The walk changes nothing and builds only what the SDK builds (output types,
            # Enum members): the SDK's walk from the start fails as it would have.
            pass
    return _BY_SDK


def _translate_scalar(output: Any, kind: type, typ: Any) -> Any:
    """A string, number, boolean or None of type `typ`, by the rule for that type
    (`sdk_types.scalar_rule`, remembered by annotation)."""
    known = SCALAR_RULES.get(id(typ))
    rule = known[1] if known is not None and known[0] is typ else SCALAR_RULE(typ)
    if rule is AS_IS or output is None:
        return output
    return _by_rule(output, kind, rule)


def _by_rule(output: Any, kind: type, rule: Any) -> Any:
    """A string, number or boolean (not None) of `kind` by a rule other than AS_IS: an int
    annotation makes a float an int, any other (an Enum, a float) is called with it."""
    if rule is int:
        return int(output) if kind is float else output
    return rule(output)


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
        element_type = LIST_ELEMENT_TYPE(typ)
        as_is = _scalars_as_is(element_type)
        return [
            v
            if as_is and type(v) in SCALARS
            else _translate_item(v, output_transformer, element_type, by_type, none_on_mismatch)
            for v in output
        ]
    value_type = None  # the one type of every value, if any
    translate = output_transformer
    if typ is not None:
        plan = OUTPUT_MAP_PLAN(typ)
        if plan[0]:  # a discriminated union: the member the keys select, if one
            typ = _types.reduce_discriminated_union(typ, output, _pulumi_name)
            if typ is not None:
                plan = OUTPUT_MAP_PLAN(typ)
    if typ is not None:
        _, types, rules, mapping, typed, value_type = plan
        if types is not None:  # an output type
            translated_values = {}
            for k, v in output.items():
                kind = type(v)
                if kind in SCALARS:  # `_translate_scalar`, its rule read from the plan
                    rule = rules.get(k)
                    if rule is None or v is None:
                        translated_values[k] = v
                    else:
                        translated_values[k] = _by_rule(v, kind, rule)
                else:
                    translated_values[k] = _translate_item(
                        v, output_transformer, types.get(k), by_type, none_on_mismatch
                    )
            return _types.output_type_from_dict(typ, translated_values)
        if mapping:
            if typed and by_type:
                translate = _same_name
        elif none_on_mismatch:
            return None
        else:
            raise _Mismatch
    as_is = _scalars_as_is(value_type)
    return {
        translate(k): v
        if as_is and type(v) in SCALARS
        else _translate_item(v, output_transformer, value_type, by_type, none_on_mismatch)
        for k, v in output.items()
    }


def _scalars_as_is(typ: Any) -> bool:
    """Whether a string, number, boolean or None of type `typ` inside a map or list stays as it
    is (`_translate_scalar`), so that the walk keeps it without a call."""
    return typ is None or SCALAR_RULE(typ) is AS_IS


def _translate_item(
    value: Any,
    output_transformer: Callable[[str], str],
    typ: Any,
    by_type: bool,
    none_on_mismatch: bool,
) -> Any:
    """One value inside a map or list, translated as the SDK's call for it would."""
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

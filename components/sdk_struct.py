"""Writing serialized values into protobuf `Struct`s, and the Pulumi SDK's
`rpc.serialize_properties` (replaced by components/sdk_fixes.py, over the exact source it was
written against) writing with it.

`struct[key] = value` on a `google.protobuf.Struct` is protobuf's Python: `Struct.__setitem__`
calls `_SetStructValue` (`google/protobuf/internal/well_known_types.py`), which tests the value
against None, bool, str, int or float, dict or Struct, list, tuple or ListValue, and for a map
or a list calls `update` or `extend`, which call it again for every value inside. `set_item`
does the same writes in the same order, a string, number, boolean or None inside a map or list
written in the loop that meets it; any other value (a subclass, a Struct, a ListValue, a value
protobuf refuses) goes to `_SetStructValue` itself. It is used only over the protobuf source it
follows (`PROTOBUF_SHA256` of those definitions); otherwise it is `struct[key] = value`.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable
from typing import Any

from google.protobuf import struct_pb2
from google.protobuf.internal import well_known_types
from pulumi import _types, log
from pulumi.runtime import rpc, settings

_SET_STRUCT_VALUE = well_known_types._SetStructValue

# sha256 of the protobuf definitions `set_item` follows (protobuf 5.29), each followed by a
# newline: `_SetStructValue`, `Struct.__setitem__`, `Struct.update`, `ListValue.append`,
# `ListValue.extend`.
PROTOBUF_SHA256 = "9a700041d05adf8d35ed40ecef2ca33143acae3ac3871778017517e28fe7bfd4"


def protobuf_digest() -> str | None:
    """The sha256 of the installed protobuf's definitions that `set_item` follows."""
    try:
        text = "".join(
            inspect.getsource(definition) + "\n"
            for definition in (
                well_known_types._SetStructValue,
                well_known_types.Struct.__setitem__,
                well_known_types.Struct.update,
                well_known_types.ListValue.append,
                well_known_types.ListValue.extend,
            )
        )
    except (AttributeError, OSError, TypeError):
        return None
    return hashlib.sha256(text.encode()).hexdigest()


def _write(target: Any, value: Any) -> None:
    """`_SetStructValue(target, value)`: a `Value` written from `value`."""
    kind = type(value)
    if kind is str:
        target.string_value = value
    elif kind is dict:
        struct = target.struct_value
        struct.Clear()
        _write_map(struct.fields, value)
    elif kind is list or kind is tuple:
        values = target.list_value
        values.Clear()
        _write_list(values.values, value)
    elif value is None:
        target.null_value = 0
    elif kind is bool:
        target.bool_value = value
    elif kind is int or kind is float:
        target.number_value = value
    else:
        _SET_STRUCT_VALUE(target, value)


def _write_map(fields: Any, mapping: dict[Any, Any]) -> None:
    """`Struct.update(mapping)`: each item, in order, into `fields[key]`."""
    for key, value in mapping.items():
        kind = type(value)
        if kind is str:
            fields[key].string_value = value
        elif kind is bool:
            fields[key].bool_value = value
        elif kind is float or kind is int:
            fields[key].number_value = value
        else:
            _write(fields[key], value)


def _write_list(values: Any, items: list[Any] | tuple[Any, ...]) -> None:
    """`ListValue.extend(items)`: each item, in order, into `values.add()`."""
    for item in items:
        kind = type(item)
        if kind is str:
            values.add().string_value = item
        else:
            _write(values.add(), item)


def _set_item(struct: struct_pb2.Struct, key: Any, value: Any) -> None:
    _write(struct.fields[key], value)


def _set_item_by_protobuf(struct: struct_pb2.Struct, key: Any, value: Any) -> None:
    struct[key] = value


# `struct[key] = value`, by `_write` over the protobuf source it follows.
set_item: Callable[[struct_pb2.Struct, Any, Any], None] = (
    _set_item if protobuf_digest() == PROTOBUF_SHA256 else _set_item_by_protobuf
)


async def serialize_properties(
    inputs: Any,
    property_deps: dict[str, list[Any]],
    resource_obj: Any = None,
    input_transformer: Callable[[str], str] | None = None,
    typ: type | None = None,
    keep_output_values: bool = False,
    exclude_resource_refs_from_deps: bool = False,
) -> struct_pb2.Struct:
    """The SDK's `rpc.serialize_properties`, line for line, each serialized value written into
    the Struct by `set_item` instead of `struct[name] = result` (a string, most values,
    written in place), an input type's name for each key looked up once for its annotation
    and its name (the SDK's two lambdas look it up twice); and the long strings sent for a
    resource kept with it (`remember_sent`)."""
    names = types = None
    if typ is not None:
        names = _types.input_type_py_to_pulumi_names(typ)
        types = _types.input_type_types(typ)

    struct = struct_pb2.Struct()
    fields = struct.fields
    in_place = set_item is _set_item  # else `struct[name] = result`, by protobuf
    sent: Sent = {}
    for k in inputs:
        v = inputs[k]
        deps: list[Any] = []
        pulumi_name = None
        if names is not None:
            pulumi_name = names.get(k) or k
        try:
            result = await rpc.serialize_property(
                v,
                deps,
                k,
                resource_obj,
                input_transformer,
                None if types is None else types.get(pulumi_name),
                keep_output_values,
                exclude_resource_refs_from_deps,
            )
        except ValueError as e:
            raise ValueError(
                f"While processing input: {k!r}, type {type(k)}, value {v!r}\n"
                + f"ValueError has risen: {e}"
            ) from e
        except AssertionError as e:
            raise AssertionError(
                f"While processing input: {k!r}, type {type(k)}, value {v!r}\n"
                + f"AssertionError has risen: {e}"
            ) from e
        if result is not None:
            translated_name = k
            if names is not None or input_transformer is not None:  # the SDK's `translate`
                translated_name = pulumi_name if names is not None else input_transformer(k)
                if settings.excessive_debug_output:
                    log.debug(f"top-level input property translated: {k} -> {translated_name}")
            if in_place and type(result) is str:
                value = fields[translated_name]
                value.string_value = result
                if len(result) >= SENT_CHARS:
                    sent[translated_name] = (value, result)
            else:
                set_item(struct, translated_name, result)
            property_deps[translated_name] = deps

    if sent and resource_obj is not None:
        remember_sent(resource_obj, struct, sent)
    return struct


# Top-level strings at least this long (a step's stdin: every script starts with the ~19 KB
# of lib/common.sh) are kept with the resource they were sent for, until its answer is read.
SENT_CHARS = 256
_SENT = "_gpu_cluster_sent"

# A property's value as written into a Struct, and the string written.
Sent = dict[str, tuple[struct_pb2.Value, str]]


def remember_sent(resource_obj: Any, struct: struct_pb2.Struct, sent: Sent) -> None:
    """Keep the long strings just written into `struct` (the inputs of `resource_obj`), by
    property with the `Value` each was written into, on the resource (replacing any kept
    before), for `sent_strings`."""
    setattr(resource_obj, _SENT, (struct, sent))


def sent_strings(resource_obj: Any, struct: struct_pb2.Struct) -> Sent | None:
    """What `remember_sent` kept for `resource_obj` when written into `struct` (none when
    written into another Struct), no longer kept. Read from the resource's own attributes: a
    resource sent no long string (most) answers without an AttributeError made and caught."""
    kept = getattr(resource_obj, "__dict__", {}).pop(_SENT, None)
    if kept is None or kept[0] is not struct:
        return None
    return kept[1]

"""The Pulumi Python SDK's `rpc.resolve_outputs`, replaced (by components/sdk_fixes.py, over the
exact source it was written against) by one that answers the same and costs less, reading and
translating the engine's answer with `components/sdk_values.py`.

`rpc.resolve_outputs` combines the engine's answer with the inputs: every output, then each
input the answer lacks. To find those it reads every input's value first
(`list(serialized_props.items())`: protobuf's `Struct.items` makes a Python value of each,
a copy of every rendered script), though nearly every input is in the answer (providers
answer with their inputs) and its value is then thrown away. The replacement is the SDK's
function with that loop reading a value only for an input the answer lacks: the same keys
in the same order, the same values for those. (A `Struct` the SDK serialized has a kind set
on every value, so the reads the SDK made and the replacement leaves out could not fail.)
And the answer echoes every input: a long string (a step's stdin) that equals the one sent
(compared by protobuf, in C) is answered as the string sent, not read into a second one
(`sdk_struct.serialize_properties` keeps those with the resource until its answer).
"""

from __future__ import annotations

from typing import Any

from google.protobuf import struct_pb2
from pulumi import _types, log
from pulumi.runtime import rpc, settings

from components.sdk_struct import sent_strings
from components.sdk_values import (
    _BY_SDK,
    SDK_TRANSLATE_OUTPUT_PROPERTIES,
    _translated,
    deserialize_properties,
    plain_properties,
    translate_output_properties,
)


def _answered(
    res: Any, serialized_props: struct_pb2.Struct, outputs: struct_pb2.Struct, keep_unknowns: bool
) -> dict[str, Any]:
    """`rpc.deserialize_properties(outputs, keep_unknowns)` for `resolve_outputs`, which only
    translates what it reads (every map and list into new ones): its maps and lists remembered,
    and a long string the resource was sent and is answered unchanged answered as the string
    sent (`plain_properties`; `sdk_struct.sent_strings`)."""
    sent = sent_strings(res, serialized_props)
    if rpc.deserialize_properties is deserialize_properties:
        props = plain_properties(outputs, _ANSWERED, sent=sent)
        if props is not None:
            return props
    return rpc.deserialize_properties(outputs, keep_unknowns)


# Maps and lists of the answers read, by their serialized form.
_ANSWERED: dict[bytes, Any] = {}


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
    is read only when the engine's answer lacks that input, what is the same for every
    property (the resource's name, the debug setting) is read once, and a property's path (for
    the errors of the SDK's translation) is made only for a value that translation takes."""
    all_properties = {}
    resource_cls = type(res)
    types = _types.resource_types(resource_cls)
    translate, translate_to_pass = (
        res.translate_output_property,
        res.translate_output_property,
    )
    names = None  # the Python names by Pulumi name, translated here without a call
    if transform_using_type_metadata:
        pulumi_to_py_names = names = _types.resource_pulumi_to_py_names(resource_cls)

        def translate(prop: str) -> str:
            return pulumi_to_py_names.get(prop) or prop

        def translate_to_pass(prop: str) -> str:
            return prop

    resource_name = f"{res._name}"  # the SDK formats it for every property
    debug = settings.excessive_debug_output  # the SDK reads it for every property
    # This module's `translate_output_properties` (unless another replaced it) without the
    # path, an object per property that only the SDK's function reads (for its errors): made
    # only for a value `_translated` leaves to that function.
    translate_value = rpc.translate_output_properties
    ours = translate_value is translate_output_properties
    if ours:
        translate_value = SDK_TRANSLATE_OUTPUT_PROPERTIES
    for key, value in _answered(res, serialized_props, outputs, keep_unknowns).items():
        translated_key = (names.get(key) or key) if names is not None else translate(key)
        typ = types.get(key)
        translated_value = _BY_SDK
        if ours:
            translated_value = _translated(
                value, translate_to_pass, typ, transform_using_type_metadata, False
            )
        if translated_value is _BY_SDK:
            translated_value = translate_value(
                value,
                translate_to_pass,
                typ,
                transform_using_type_metadata,
                path=rpc._Path(translated_key, resource=resource_name),
            )
        if debug:
            log.debug(f"incoming output property translated: {key} -> {translated_key}")
            log.debug(f"incoming output value translated: {value} -> {translated_value}")
        all_properties[translated_key] = translated_value

    translated_deps = {}
    for key, property_deps in deps.items():
        translated_deps[translate(key)] = property_deps

    if not settings.is_dry_run() or settings.is_legacy_apply_enabled():
        for key in list(serialized_props):  # the SDK: list(serialized_props.items())
            translated_key = (names.get(key) or key) if names is not None else translate(key)
            if translated_key not in all_properties:
                all_properties[translated_key] = rpc.translate_output_properties(
                    rpc.deserialize_property(serialized_props[key]),
                    translate_to_pass,
                    types.get(key),
                    transform_using_type_metadata,
                    path=rpc._Path(translated_key, resource=resource_name),
                    return_none_on_dict_type_mismatch=True,
                )

    rpc.resolve_properties(
        resolvers, all_properties, translated_deps, custom, resolve_missing_as_unknown
    )

"""Writing into a protobuf Struct without `Struct.__setitem__` (components/sdk_struct.py) writes
what protobuf writes, and the SDK's `serialize_properties` writing with it answers as the SDK's
own: the same Struct, the same dependencies, the same errors."""

from __future__ import annotations

import collections
import random
import re
from enum import StrEnum
from typing import Any

import pytest
from google.protobuf import struct_pb2

from components import sdk_inputs, sdk_struct
from tests.test_recorder import _random_plain
from tests.test_sdk_fixes import BY_NAME, _args_classes, _PetsArgs, _run, _Typed, sdk_original


class _Colour(StrEnum):
    RED = "red"


class _Map(dict):
    pass


def test_the_writer_follows_the_installed_protobuf():
    # A protobuf release that changes these definitions makes `set_item` protobuf's own
    # `struct[key] = value` again, and this test fail so the writer is looked at again.
    assert sdk_struct.protobuf_digest() == sdk_struct.PROTOBUF_SHA256
    assert sdk_struct.set_item is sdk_struct._set_item


def _value(rng: random.Random) -> Any:
    """Plain data, now and then with values protobuf writes only through its own function (a
    Struct, a ListValue, subclasses of str and dict) or refuses (an object, a bytes value, a key
    that is not a string)."""
    roll = rng.random()
    if roll < 0.03:
        return rng.choice([object(), b"bytes", {1: "not a string key"}, [set()]])
    if roll < 0.08:
        struct = struct_pb2.Struct()
        struct.update({"a": [1.0, "b"]})
        listed = struct_pb2.ListValue()
        listed.extend(["c", None])
        return rng.choice([struct, listed, _Colour.RED, _Map(inner=[True])])
    value = _random_plain(rng)
    if isinstance(value, dict) and value and rng.random() < 0.5:
        value[next(iter(value))] = _value(rng)
    if isinstance(value, list) and rng.random() < 0.5:
        value.append(_value(rng))
    return value


def _written(write, key: Any, value: Any) -> tuple:
    struct = struct_pb2.Struct()
    try:
        write(struct, key, value)
    except Exception as error:
        return (
            "raises",
            type(error).__name__,
            str(error),
            struct.SerializeToString(deterministic=True),
        )
    return ("returns", struct.SerializeToString(deterministic=True))


def _by_protobuf(struct: struct_pb2.Struct, key: Any, value: Any) -> None:
    struct[key] = value


def test_set_item_writes_what_protobuf_writes():
    rng = random.Random(7)
    outcomes = collections.Counter()
    for _ in range(3000):
        key = rng.choice(["k", "", "ключ", 3])
        value = _value(rng)
        ours = _written(sdk_struct.set_item, key, value)
        assert ours == _written(_by_protobuf, key, value), (key, value)
        outcomes[ours[0]] += 1
    assert outcomes["returns"] > 2000 and outcomes["raises"] > 100


def _serialized_struct(serialize, seed: int, args: type, transformer: Any) -> tuple:
    """All of `args`'s properties with random values, serialized at once by `serialize`: the
    Struct (deterministic bytes) with each property's dependencies, or the error."""

    async def run() -> tuple:
        typed = _Typed(seed)
        names = sdk_struct._types.input_type_py_to_pulumi_names(args)
        hints = sdk_struct._types.input_type_types(args)
        inputs = {
            py_name: typed.value(hints[pulumi_name]) for py_name, pulumi_name in names.items()
        }
        property_deps: dict[str, list[Any]] = {}
        try:
            struct = await serialize(inputs, property_deps, None, transformer, args)
        except Exception as error:
            return ("raises", type(error).__name__, re.sub(r" at 0x[0-9a-f]+", "", str(error)))
        deps = sorted((k, [d._name for d in v]) for k, v in property_deps.items())
        return ("returns", struct.SerializeToString(deterministic=True), deps)

    return _run(run())


@pytest.mark.parametrize("transformer", [None, str.upper], ids=["no translator", "translator"])
def test_serialize_properties_answers_as_the_sdk_does(monkeypatch, transformer):
    features = {sdk_struct.rpc.resource_pb2.RESOURCE_MONITOR_FEATURE_SECRETS}
    monkeypatch.setattr(sdk_struct.rpc.settings.SETTINGS, "monitor_features", features)
    # The SDK's function over the same serialize_property (the module's: the replacement).
    monkeypatch.setattr(sdk_struct.rpc, "serialize_property", sdk_inputs.serialize_property)
    original = sdk_original(BY_NAME["serialize_properties"])
    outcomes = collections.Counter()
    for seed in range(40):
        for args in [*_args_classes(), _PetsArgs]:
            ours = _serialized_struct(sdk_struct.serialize_properties, seed, args, transformer)
            assert ours == _serialized_struct(original, seed, args, transformer), (seed, args)
            outcomes[ours[0]] += 1
    assert outcomes["returns"] > 100 and outcomes["raises"] > 10


@pytest.mark.parametrize("transformer", [None, str.upper], ids=["no translator", "translator"])
def test_serialize_properties_without_a_type_answers_as_the_sdk_does(monkeypatch, transformer):
    # A resource registered without an args type (a component, a bare CustomResource): its keys
    # translated by the resource's translator, if any, and only for the values it writes.
    monkeypatch.setattr(sdk_struct.rpc, "serialize_property", sdk_inputs.serialize_property)
    original = sdk_original(BY_NAME["serialize_properties"])
    asked: list[str] = []

    def translate(key: str) -> str:
        asked.append(key)
        return transformer(key) if transformer else key

    inputs = {"a_b": "x", "count": 1, "script": "#!" * 200, "gone": None, "m": {"k": [1, "v"]}}
    answers = []
    for serialize in (sdk_struct.serialize_properties, original):
        property_deps: dict[str, list[Any]] = {}
        struct = _run(serialize(inputs, property_deps, None, translate if transformer else None))
        answers.append((struct.SerializeToString(deterministic=True), property_deps, list(asked)))
        asked.clear()
    assert answers[0] == answers[1]

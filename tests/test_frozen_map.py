"""A FrozenMap (components/sdk_inputs.py) cannot change, so serializing it is remembered per
annotation and key translator: each serialization answers as the SDK's walk of any Mapping does,
the first and every later one, and hands out a copy of its own."""

from __future__ import annotations

import random
from typing import Any

import pulumi
import pulumi_command as command
import pytest

from components import sdk_inputs
from components.remote import read_only
from components.sdk_inputs import FrozenMap
from tests.test_sdk_fixes import BY_NAME, _run, sdk_original


def _plain(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if roll < 0.15 and depth < 3:
        return FrozenMap({f"k{i}": _plain(rng, depth + 1) for i in range(rng.randrange(4))})
    return rng.choice(["", "s", 0, 2.5, True, None, 10**20])


def _serialized(function: Any, value: Any, typ: Any, transformer: Any) -> Any:
    async def run() -> Any:
        deps: list[Any] = []
        try:
            answer = await function(value, deps, "connection", None, transformer, typ)
        except Exception as error:  # the SDK's own failures count too
            return ("raises", type(error).__name__, str(error))
        return ("returns", answer, deps)

    return _run(run())


ANNOTATIONS = [
    None,
    command.remote.ConnectionArgs,
    pulumi.Input[command.remote.ConnectionArgs],
    dict,
    dict[str, str],
]


@pytest.mark.parametrize("typ", ANNOTATIONS, ids=str)
@pytest.mark.parametrize("transformer", [None, str.upper], ids=["no translator", "translator"])
def test_a_frozen_map_serializes_as_the_sdk_serializes_any_mapping(typ, transformer):
    original = sdk_original(BY_NAME["serialize_property"])
    rng = random.Random(f"{typ}{transformer}")
    for _ in range(200):
        names = ["host", "private_key", "dial_error_limit", "proxy", "other", "port"]
        value = FrozenMap({name: _plain(rng) for name in rng.sample(names, rng.randrange(6))})
        theirs = _serialized(original, value, typ, transformer)
        first = _serialized(sdk_inputs.serialize_property, value, typ, transformer)
        again = _serialized(sdk_inputs.serialize_property, value, typ, transformer)
        assert first == theirs == again, value
        if first[0] == "returns":
            assert first[1] is not again[1]  # each caller gets its own copy


def test_a_copy_handed_out_leaves_the_remembered_form_as_it_was():
    inner = FrozenMap({"host": "198.51.100.7"})
    value = FrozenMap({"host": "10.0.0.1", "proxy": inner})
    typ = command.remote.ConnectionArgs
    first = _serialized(sdk_inputs.serialize_property, value, typ, None)[1]
    first["host"] = "changed"
    first["proxy"]["host"] = "changed"
    assert _serialized(sdk_inputs.serialize_property, value, typ, None)[1] == {
        "host": "10.0.0.1",
        "proxy": {"host": "198.51.100.7"},
    }


@pytest.mark.parametrize(
    "items",
    [{"a": ["list"]}, {"a": {"dict": 1}}, {"a": pulumi.Output.from_input("x")}, {1: "key"}],
    ids=["list", "dict", "output", "key"],
)
def test_a_frozen_map_holds_plain_data_only(items):
    with pytest.raises(TypeError, match="FrozenMap holds"):
        FrozenMap(items)


def test_a_frozen_map_cannot_change():
    source = {"host": "10.0.0.1"}
    value = FrozenMap(source)
    source["host"] = "elsewhere"
    assert value["host"] == "10.0.0.1"
    with pytest.raises(TypeError):
        value["host"] = "elsewhere"  # type: ignore[index]
    with pytest.raises(AttributeError):
        value._items = {}  # type: ignore[misc]
    assert dict(value) == {"host": "10.0.0.1"} and len(value) == 1 and "host" in value


def test_a_connection_is_a_frozen_map():
    assert isinstance(read_only(command.remote.ConnectionArgs(host="10.0.0.1")), FrozenMap)


def test_a_walk_that_asked_the_translator_is_remembered_for_that_translator_only(monkeypatch):
    original = sdk_original(BY_NAME["serialize_property"])
    walked: list[Any] = []
    walk = sdk_inputs._walk_frozen
    monkeypatch.setattr(
        sdk_inputs, "_walk_frozen", lambda value, *args: walked.append(value) or walk(value, *args)
    )
    value = FrozenMap({"some_key": "a", "nested": FrozenMap({"inner_key": 1})})
    typed = FrozenMap({"host": "10.0.0.1", "private_key": "k"})
    for typ, item in [(None, value), (dict, value), (command.remote.ConnectionArgs, typed)]:
        for translator in [str.upper, str.lower, str.title, str.upper]:
            ours = _serialized(sdk_inputs.serialize_property, item, typ, translator)
            assert ours == _serialized(original, item, typ, translator), (typ, translator)
    # Typed by ConnectionArgs, no key was asked of a translator: one walk for all of them; the
    # untyped ones once per annotation and translator (the nested map likewise, within).
    assert walked.count(typed) == 1
    assert walked.count(value) == 6

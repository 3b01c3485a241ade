"""Subclasses of str, int and float (Enums of those: a step's `Logging`) serialize as the SDK's
`serialize_property` serializes them (components/sdk_inputs.py `plain_subclass`): as they are
where none of the SDK's checks before holds for their class, by the SDK otherwise."""

from __future__ import annotations

from collections import abc
from enum import Enum, IntEnum
from typing import Any

import pulumi
import pulumi_command as command
import pytest

from components import sdk_inputs
from components.sdk_inputs import plain_subclass
from tests.test_sdk_fixes import BY_NAME, _run, sdk_original


class _Text(str):
    pass


class _Ratio(float):
    pass


class _Level(IntEnum):
    LOW = 1


class _Mode(str, Enum):  # noqa: UP042 - as generated code writes one
    FAST = "fast"


class _MappedText(str):
    pass


abc.Mapping.register(_MappedText)


class _AwaitableText(str):
    def __await__(self):
        yield from ()
        return "awaited"


class _Listed(int):
    pass


abc.Sequence.register(_Listed)


PLAIN = [_Text("t"), _Ratio(1.5), _Level.LOW, _Mode.FAST, command.remote.Logging.NONE]
OTHERS = [_MappedText("m"), _AwaitableText("a"), _Listed(3)]


def _serialized(function: Any, value: Any) -> Any:
    async def run() -> Any:
        try:
            return ("returns", await function(value, [], "key", None, None, None))
        except Exception as error:  # the SDK's own failures count too
            return ("raises", type(error).__name__, str(error))

    return _run(run())


@pytest.mark.parametrize("value", PLAIN, ids=repr)
def test_a_plain_subclass_is_sent_as_it_is(value):
    assert plain_subclass(type(value))
    original = sdk_original(BY_NAME["serialize_property"])
    for wrapped in (value, [value, "s"], {"a": value}, (value,)):
        ours = _serialized(sdk_inputs.serialize_property, wrapped)
        assert ours == _serialized(original, wrapped)
        assert repr(ours) == repr(_serialized(original, wrapped))  # the member itself


@pytest.mark.parametrize("value", OTHERS, ids=repr)
def test_a_subclass_the_sdk_takes_otherwise_goes_to_the_sdk(value):
    assert not plain_subclass(type(value))
    original = sdk_original(BY_NAME["serialize_property"])
    for wrapped in (value, [value], {"a": value}):
        assert repr(_serialized(sdk_inputs.serialize_property, wrapped)) == repr(
            _serialized(original, wrapped)
        )


def test_plain_types_and_others_are_not_plain_subclasses():
    for kind in (str, int, float, bool, type(None), bytes, dict, list, pulumi.Output):
        assert not plain_subclass(kind)

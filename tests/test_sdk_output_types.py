"""Output-type objects built without their `__init__` (components/sdk_output_types.py) are the
SDK's (`_types.output_type_from_dict`): every output type of the providers the program uses,
built both ways from maps of every shape, stores the same values under the same keys in the
same order; every class of another shape is left to the SDK."""

from __future__ import annotations

import collections
import importlib
import random
import typing
from typing import Any

import pulumi
import pytest
from pulumi import _types
from pulumi.output import UNKNOWN

from components import sdk_fixes, sdk_output_types
from components.sdk_output_types import (
    SDK_OUTPUT_TYPE_FROM_DICT,
    output_type_from_dict,
    stored_properties,
    warning_keys,
)
from tests.test_sdk_fixes import _resource_classes

# The providers' modules of output types the program's resources answer with.
OUTPUT_MODULES = (
    "pulumi_command.remote.outputs",
    "pulumi_tls.outputs",
    "pulumi_aws.ec2.outputs",
    "pulumi_kubernetes.core.v1.outputs",
    "pulumi_kubernetes.apps.v1.outputs",
    "pulumi_kubernetes.batch.v1.outputs",
    "pulumi_kubernetes.meta.v1.outputs",
    "pulumi_kubernetes.rbac.v1.outputs",
    "pulumi_kubernetes.scheduling.v1alpha3.outputs",
)


def _output_types(module_name: str) -> list[type]:
    module = importlib.import_module(module_name)
    return [
        cls
        for cls in vars(module).values()
        if isinstance(cls, type) and cls.__module__ == module_name and _types.is_output_type(cls)
    ]


ALL_OUTPUT_TYPES = [cls for name in OUTPUT_MODULES for cls in _output_types(name)]


def _reachable(annotation: Any, found: set[type]) -> None:
    """Every output type inside `annotation` (through unions, lists, maps and output types)."""
    if isinstance(annotation, type) and _types.is_output_type(annotation):
        if annotation in found:
            return
        found.add(annotation)
        for hint in _types.output_type_types(annotation).values():
            _reachable(hint, found)
        return
    for argument in typing.get_args(annotation):
        _reachable(argument, found)


def _stored(obj: Any) -> list[tuple[str, Any]]:
    """What an output-type object holds, in order: a string, number, boolean or None by its
    type and value (a schema default is a constant of the class's code), anything else by
    identity (the answer's own object)."""
    items = dict.items(obj) if isinstance(obj, dict) else vars(obj).items()
    return [
        (
            key,
            type(value),
            value if type(value) in (str, int, float, bool, type(None)) else id(value),
        )
        for key, value in items
    ]


def _engine_map(rng: random.Random, cls: type) -> dict[str, Any]:
    """A map as an answer holds one for `cls`: some Pulumi names with values, some with None,
    now and then a key the class does not know."""
    answer: dict[str, Any] = {}
    for _, pulumi_name, _ in _types._py_properties(cls):
        roll = rng.random()
        if roll < 0.4:
            answer[pulumi_name] = rng.choice(["s", 1.0, True, {"k": "v"}, ["x"]])
        elif roll < 0.55:
            answer[pulumi_name] = None
    if rng.random() < 0.2:
        answer["somethingNew"] = "x"
    return answer


def test_the_programs_output_types_are_built_without_the_sdk():
    # Every output type a resource of the program answers with is of the generated shape, in
    # the modules this file checks, so none of them falls back to the SDK's way.
    reachable: set[type] = set()
    for resource_class in _resource_classes():
        for hint in _types.resource_types(resource_class).values():
            _reachable(hint, reachable)
    assert len(reachable) > 40
    assert {cls.__module__ for cls in reachable} <= set(OUTPUT_MODULES)
    assert [cls.__qualname__ for cls in reachable if stored_properties(cls) is None] == []


def test_most_output_types_of_the_providers_are_of_the_generated_shape():
    shaped = [cls for cls in ALL_OUTPUT_TYPES if stored_properties(cls) is not None]
    assert len(ALL_OUTPUT_TYPES) > 900
    assert len(shaped) > 0.95 * len(ALL_OUTPUT_TYPES)


@pytest.mark.parametrize("module_name", OUTPUT_MODULES)
def test_every_output_type_is_built_as_the_sdk_builds_it(module_name):
    rng = random.Random(module_name)
    classes = _output_types(module_name)
    assert classes
    for cls in classes:
        for answer in [{}, *(_engine_map(rng, cls) for _ in range(4))]:
            ours, sdks = output_type_from_dict(cls, answer), SDK_OUTPUT_TYPE_FROM_DICT(cls, answer)
            assert type(ours) is type(sdks) is cls
            assert _stored(ours) == _stored(sdks), (cls.__qualname__, answer)


def test_schema_defaults_and_required_properties_are_stored_as_the_init_stores_them():
    import pulumi_command as command

    connection = command.remote.outputs.Connection
    built = output_type_from_dict(connection, {"user": None, "privateKey": "key"})
    # host is required: stored even when None; dialErrorLimit, perDialTimeout, port and user
    # have schema defaults; privateKey as given; the rest absent.
    assert list(dict.items(built)) == [
        ("host", None),
        ("dial_error_limit", 10),
        ("per_dial_timeout", 15),
        ("port", 22),
        ("private_key", "key"),
        ("user", "root"),
    ]
    assert built.private_key == "key"


# Classes of other shapes: each left to the SDK, which builds it as its `__init__` says.


@pulumi.output_type
class _ConstantKind(dict):
    def __init__(__self__, *, kind: str | None = None):
        if kind is not None:
            pulumi.set(__self__, "kind", "Fixed")

    @property
    @pulumi.getter
    def kind(self) -> str | None:
        return pulumi.get(self, "kind")


@pulumi.output_type
class _Warns(dict):
    def __init__(__self__, *, old: str | None = None):
        if old is not None:
            pulumi.log.warn("old is deprecated")
            pulumi.set(__self__, "old", old)

    @property
    @pulumi.getter
    def old(self) -> str | None:
        return pulumi.get(self, "old")


@pulumi.output_type
class _Translated:
    def __init__(__self__, *, some_name: str | None = None):
        if some_name is not None:
            pulumi.set(__self__, "some_name", some_name)

    @property
    @pulumi.getter(name="someName")
    def some_name(self) -> str | None:
        return pulumi.get(self, "some_name")

    def _translate_property(self, prop: str) -> str:
        return prop.upper()


@pulumi.output_type
class _OwnSetItem(dict):
    def __init__(__self__, *, value: str | None = None):
        if value is not None:
            pulumi.set(__self__, "value", value)

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, f"seen {value}")

    @property
    @pulumi.getter
    def value(self) -> str | None:
        return pulumi.get(self, "value")


@pulumi.output_type
class _Positional:
    def __init__(__self__, value: str | None = None):
        if value is not None:
            pulumi.set(__self__, "value", value)

    @property
    @pulumi.getter
    def value(self) -> str | None:
        return pulumi.get(self, "value")


@pulumi.output_type
class _DefaultAfterSet(dict):
    def __init__(__self__, *, value: int | None = None):
        pulumi.set(__self__, "value", value)
        if value is None:
            value = 3

    @property
    @pulumi.getter
    def value(self) -> int | None:
        return pulumi.get(self, "value")


@pulumi.output_type
class _Plain:
    def __init__(__self__, *, first: str, second: int | None = None):
        pulumi.set(__self__, "first", first)
        if second is None:
            second = 2
        if second is not None:
            pulumi.set(__self__, "second", second)

    @property
    @pulumi.getter
    def first(self) -> str:
        return pulumi.get(self, "first")

    @property
    @pulumi.getter(name="secondOne")
    def second(self) -> int | None:
        return pulumi.get(self, "second")


OTHER_SHAPES = [_ConstantKind, _Warns, _Translated, _OwnSetItem, _Positional, _DefaultAfterSet]


@pytest.mark.parametrize("cls", OTHER_SHAPES, ids=lambda cls: cls.__name__)
def test_a_class_of_another_shape_is_left_to_the_sdk(cls, monkeypatch):
    assert stored_properties(cls) is None
    built = []
    monkeypatch.setattr(
        sdk_output_types,
        "SDK_OUTPUT_TYPE_FROM_DICT",
        lambda c, output: built.append(c) or SDK_OUTPUT_TYPE_FROM_DICT(c, output),
    )
    answer = {name: "x" for _, name, _ in _types._py_properties(cls)}
    ours = output_type_from_dict(cls, answer)
    assert built == [cls]
    assert _stored(ours) == _stored(SDK_OUTPUT_TYPE_FROM_DICT(cls, answer))


def test_an_object_that_is_not_a_dict_keeps_its_values_in_its_dict():
    assert stored_properties(_Plain) is not None
    built = output_type_from_dict(_Plain, {"first": "a"})
    assert type(built) is _Plain
    assert vars(built) == {"first": "a", "second": 2}
    assert _stored(built) == _stored(SDK_OUTPUT_TYPE_FROM_DICT(_Plain, {"first": "a"}))
    assert (built.first, built.second) == ("a", 2)
    assert output_type_from_dict(_Plain, {"secondOne": 5.0}).second == 5.0


@pytest.mark.parametrize(
    "cls, output", [(_Plain, ["not", "a", "map"]), (dict, {}), (str, {"a": 1})]
)
def test_what_the_sdk_refuses_is_refused_as_there(cls, output):
    with pytest.raises(AssertionError):
        SDK_OUTPUT_TYPE_FROM_DICT(cls, output)
    with pytest.raises(AssertionError):
        output_type_from_dict(cls, output)


# Reading generated output types as dicts (contains_unknowns)

DICT_OUTPUT_TYPES = [cls for cls in ALL_OUTPUT_TYPES if issubclass(cls, dict)]


def test_the_providers_output_types_read_as_generated():
    assert len(DICT_OUTPUT_TYPES) > 900
    assert [cls.__qualname__ for cls in DICT_OUTPUT_TYPES if warning_keys(cls) is None] == []


@pytest.mark.parametrize("module_name", OUTPUT_MODULES)
def test_a_read_warns_exactly_for_the_keys_found(module_name, monkeypatch):
    warned: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *args, **kwargs: warned.append(message))
    for cls in _output_types(module_name):
        if not issubclass(cls, dict):
            continue
        keys = warning_keys(cls)
        names = {n for p in _types._py_properties(cls) for n in p[:2]} | {"other"}
        obj = dict.__new__(cls)
        dict.update(obj, {name: name for name in names})
        for name in sorted(names):
            warned.clear()
            assert obj[name] == name
            assert bool(warned) == (name in keys), (cls.__qualname__, name)


@pulumi.output_type
class _ReadsOtherwise(dict):
    @staticmethod
    def __key_warning(key: str):
        suggest = None
        if key == "someName":
            suggest = "some_name"
        if suggest:
            pulumi.log.warn(f"use {suggest}")

    def __getitem__(self, key: str) -> Any:
        _ReadsOtherwise.__key_warning(key)
        return super().__getitem__(key.lower())


@pulumi.output_type
class _WarnsOtherwise(dict):
    @staticmethod
    def __key_warning(key: str):
        suggest = None
        if key == "someName" or key == "other":
            suggest = "some_name"
        if suggest:
            pulumi.log.warn(f"use {suggest}")

    def __getitem__(self, key: str) -> Any:
        _WarnsOtherwise.__key_warning(key)
        return super().__getitem__(key)


class _Mixin:
    pass


@pulumi.output_type
class _Mixed(_Mixin, dict):
    pass


@pytest.mark.parametrize("cls", [_ReadsOtherwise, _WarnsOtherwise, _Mixed], ids=str)
def test_a_class_read_otherwise_is_read_through_its_own_getitem(cls):
    assert warning_keys(cls) is None


def test_contains_unknowns_reads_output_types_as_the_sdk_does(monkeypatch):
    # Every output of the program's resources, translated into output types, holding
    # unknowns now and then; read by the SDK's walk and the replacement, with the warnings
    # each emits (objects with camelCase keys too, which warn).
    from tests.test_sdk_fixes import BY_NAME, _typed_output, sdk_original

    original = sdk_original(BY_NAME["contains_unknowns"])
    translate = sdk_original(BY_NAME["translate_output_properties"])
    warned: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *args, **kwargs: warned.append(message))
    rng = random.Random(12)
    outcomes = collections.Counter()
    for resource_class in _resource_classes():
        for _ in range(20):
            for name, hint in _types.resource_types(resource_class).items():
                try:
                    value = translate(_typed_output(rng, hint), str.upper, hint, True, None, True)
                except Exception:
                    continue
                if isinstance(value, dict) and rng.random() < 0.2:
                    dict.update(value, {"hostKey": "k", "someCamelName": UNKNOWN})
                warned.clear()
                theirs = original(value)
                their_warnings = list(warned)
                warned.clear()
                assert sdk_fixes.contains_unknowns(value) == theirs, (name, value)
                assert warned == their_warnings
                outcomes[theirs] += 1
                outcomes["warned"] += bool(warned)
    assert outcomes[True] > 20 and outcomes[False] > 200 and outcomes["warned"] > 0

"""The SDK functions the program replaces (components/sdk_fixes.py, components/sdk_values.py):
each replacement answers as the SDK's own function does (compiled here from the SDK's source,
since the module attribute may already be the replacement in this process), the program runs
with them in place, sends the engine the same stack traces and registers the same as without
them, and each steps aside for an SDK whose function changed."""

from __future__ import annotations

import ast
import asyncio
import collections
import gc
import importlib
import inspect
import itertools
import random
import re
import sys
import threading
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from enum import Enum, StrEnum
from typing import Any, Optional, Union

import pulumi
import pytest
from google.protobuf import struct_pb2
from pulumi.output import UNKNOWN
from pulumi.runtime import resource, resource_cycle_breaker, rpc
from pulumi.runtime.proto import alias_pb2, resource_pb2, source_pb2
from pulumi.runtime.sync_await import _sync_await

from components import (
    sdk_dependencies,
    sdk_fixes,
    sdk_inputs,
    sdk_outputs,
    sdk_struct,
    sdk_types,
    sdk_values,
)
from components.sdk_fixes import REPLACEMENTS, Replacement
from tests.test_recorder import _random_plain, _sdk_struct, _typed, _with_secrets
from tools.harness.stacks import run_program

BY_NAME = {r.name: r for r in REPLACEMENTS}


def sdk_original(replacement: Replacement) -> Any:
    """The SDK's own function, compiled from its module's source with the SDK's own definitions
    of everything it covers."""
    definitions = replacement.sdk_definitions()
    assert definitions is not None, f"{replacement.module.__name__} lacks {replacement.covers}"
    _, nodes = definitions
    namespace = dict(vars(replacement.module))
    code = compile(ast.Module(list(nodes), []), replacement.module.__file__, "exec")
    exec(code, namespace)
    return namespace[replacement.name]


@pytest.mark.parametrize("replacement", REPLACEMENTS, ids=lambda r: r.name)
def test_the_sdk_function_is_the_one_replaced(replacement: Replacement):
    # Fails on an SDK whose function (or one it relies on) changed: read the new source, then
    # update the digest, or drop the replacement when the SDK no longer needs it.
    assert replacement.install()
    assert replacement.sdk_digest() == replacement.sha256


# contains_unknowns


def random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.choice(
        ["str", "int", "float", "bool", "none", "unknown", "dict", "list", "tuple"]
        if depth < 4
        else ["str", "int", "none", "unknown"]
    )
    if kind == "unknown":
        return UNKNOWN if rng.random() < 0.3 else "known"
    if kind == "dict":
        return {f"k{i}": random_value(rng, depth + 1) for i in range(rng.randint(0, 4))}
    if kind == "list":
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if kind == "tuple":  # not walked by either: an unknown inside stays unseen
        return (UNKNOWN, random_value(rng, depth + 1))
    return {"str": "x", "int": 7, "float": 0.5, "bool": True, "none": None}[kind]


def test_contains_unknowns_answers_as_the_sdk_does():
    original = sdk_original(BY_NAME["contains_unknowns"])
    rng = random.Random(20261201)
    values = [random_value(rng) for _ in range(2000)]
    shared: list[Any] = [UNKNOWN]
    looped: dict[str, Any] = {"a": 1}
    looped["self"] = looped

    class Text(str):  # a subclass of a plain type takes the walk, not the shortcut
        pass

    class Hidden(dict):  # iterates its own way: the walk meets only the keys it yields
        def __iter__(self):
            return iter([k for k in dict.keys(self) if k != "hidden"])

    values += [UNKNOWN, [], {}, {"a": shared, "b": shared}, looped, [looped, UNKNOWN], Text("t")]
    values += [Hidden(hidden=UNKNOWN, seen=1), Hidden(hidden=1, seen=[UNKNOWN])]
    assert any(original(v) for v in values) and not all(original(v) for v in values)
    assert [sdk_fixes.contains_unknowns(v) for v in values] == [original(v) for v in values]


def test_contains_unknowns_leaves_nothing_for_the_cyclic_collector():
    original = sdk_original(BY_NAME["contains_unknowns"])
    value = {"a": [1, {"b": "c"}], "d": "e"}
    gc.disable()
    try:
        gc.collect()
        for _ in range(50):
            original(value)
        assert gc.collect() >= 50  # the SDK's closure: at least one object per call
        for _ in range(50):
            sdk_fixes.contains_unknowns(value)
        assert gc.collect() == 0
    finally:
        gc.enable()


# _get_stack_trace: a resource's constructor is the third __init__ from the top (Resource,
# CustomResource or ComponentResource, the concrete class); these stand in for them.


class _Resource:
    def __init__(self, probe):
        self.traces = probe()


class _CustomResource(_Resource):
    def __init__(self, probe):
        super().__init__(probe)


class _Instance(_CustomResource):
    def __init__(self, probe):
        super().__init__(probe)


def _both():
    """(the SDK's trace, the replacement's), taken from the same frame and line."""
    original = sdk_original(BY_NAME["_get_stack_trace"])
    return lambda: (original(), sdk_fixes.get_stack_trace())


def _nested(depth: int, make):
    return make() if depth == 0 else _nested(depth - 1, make)


def test_the_stack_trace_is_the_sdks_for_a_resource_constructor():
    sdk, ours = _Instance(_both()).traces
    assert len(sdk.frames) > 3
    assert sdk.frames[0].pc.uri == f"file://{__file__}" and sdk.frames[0].pc.line > 0
    assert ours == sdk and ours.SerializeToString() == sdk.SerializeToString()


def test_the_stack_trace_is_the_sdks_deep_in_helpers_and_components():
    sdk, ours = _nested(60, lambda: _Instance(_both())).traces
    assert len(sdk.frames) > 60 and ours == sdk


def test_the_stack_trace_is_empty_as_the_sdks_below_three_constructors():
    # In a thread of its own: no constructor of the test runner's below it.
    probe, results = _both(), []
    thread = threading.Thread(
        target=lambda: results.extend([probe(), _CustomResource(probe).traces])
    )
    thread.start()
    thread.join()
    assert len(results) == 2
    for sdk, ours in results:
        assert sdk == source_pb2.StackTrace() and ours == sdk


@pytest.mark.parametrize("filename", ["", "<string>", "relative/program.py"])
def test_frames_without_a_file_uri_have_no_position_as_in_the_sdk(filename: str):
    namespace = {"_Instance": _Instance, "probe": _both()}
    exec(compile("traces = _Instance(probe).traces", filename, "exec"), namespace)
    sdk, ours = namespace["traces"]
    assert ours == sdk
    assert any(not frame.HasField("pc") for frame in sdk.frames)


def test_the_stack_trace_honours_a_traceback_limit_as_the_sdk_does(monkeypatch):
    probe = _both()
    for limit in (4, 5, 6, 9, 1000):
        monkeypatch.setattr(sys, "tracebacklimit", limit, raising=False)
        sdk, ours = _Instance(probe).traces
        assert ours == sdk, limit
    assert len(sdk.frames) > 3


class _Args:
    """Stands in for a resource's args: alive only as long as the constructor's frame."""


def _construct_with_args(probe) -> None:
    args = _Args()  # noqa: F841 - a local of a caller frame, as a resource's args are
    _Instance(probe)


def test_the_stack_trace_leaves_the_callers_frames_to_die_with_them():
    # A frame held by the function's own locals is a cycle that keeps every caller's frame,
    # and their locals (a resource's args and options), alive until the cyclic collector runs.
    gc.disable()
    try:
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        for _ in range(20):
            _nested(5, lambda: _construct_with_args(sdk_fixes.get_stack_trace))
        gc.collect()
        left = [o for o in gc.garbage if isinstance(o, _Args | type(sys._getframe()))]
        assert left == []
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def test_the_program_sends_the_engine_the_sdks_stack_traces(monkeypatch):
    original = sdk_original(BY_NAME["_get_stack_trace"])
    compared: list[bool] = []
    lengths: list[int] = []

    def both():
        ours, sdk = sdk_fixes.get_stack_trace(), original()
        compared.append(ours == sdk)
        lengths.append(len(sdk.frames))
        return sdk

    # Something else's function: the program's install leaves it in place.
    monkeypatch.setattr(resource, "_get_stack_trace", both)
    graph = run_program("prod")
    assert len(compared) >= len(graph) and all(compared)
    assert min(lengths) > 0


# declare_dependency


class _Node:
    def __init__(self, index: int):
        self.index = index


def _declare_all(declare, rng: random.Random, size: int, declarations: int):
    """Declare random dependencies (repeats included) among `size` fresh nodes with `declare`:
    its answers and the edges it left."""
    nodes = [_Node(i) for i in range(size)]
    picks = [(rng.randrange(size), rng.randrange(size)) for _ in range(declarations)]
    picks += picks[: declarations // 2]  # declared again
    answers = [declare(nodes[a], nodes[b]) for a, b in picks]
    edges = {
        (node.index, dep.index) for node in nodes for dep in resource_cycle_breaker._deps(node)
    }
    if declare is sdk_dependencies.declare_dependency:  # and each kept the other way round
        held = sdk_dependencies._DEPENDENTS
        backwards = {(d.index, n.index) for n in nodes for d in getattr(n, held, ())}
        assert backwards == edges
        # The order it answers most questions by: every resource after what it depends on.
        place = {node.index: getattr(node, sdk_dependencies._PLACE, None) for node in nodes}
        assert all(place[dep] < place[node] for node, dep in edges)
        placed = [p for p in place.values() if p is not None]
        assert len(set(placed)) == len(placed)
    return answers, edges


def test_declare_dependency_answers_and_declares_as_the_sdk_does():
    original = sdk_original(BY_NAME["declare_dependency"])
    refused = 0
    sizes = [(1, 2), (2, 4), (10, 30), (25, 80), (40, 300)] + [(n, 3 * n) for n in range(3, 60)]
    for seed, (size, declarations) in enumerate(sizes):
        ours = _declare_all(
            sdk_dependencies.declare_dependency, random.Random(seed), size, declarations
        )
        sdk = _declare_all(original, random.Random(seed), size, declarations)
        assert ours == sdk, (size, declarations)
        refused += ours[0].count(False)
    assert refused > 100  # cycles were among them


def test_declare_dependency_walks_a_chain_longer_than_the_recursion_limit():
    # Declared in the order the program registers, each on the one before it; then the first on
    # the last, which closes a cycle. (The SDK's walk nests a generator per level.)
    nodes = [_Node(i) for i in range(3 * sys.getrecursionlimit())]
    declare = sdk_dependencies.declare_dependency
    assert all(declare(after, before) for before, after in itertools.pairwise(nodes))
    assert not declare(nodes[0], nodes[-1])
    assert declare(nodes[-1], nodes[0])  # no cycle: the last already reaches the first


def _run(coroutine: Any) -> Any:
    """`coroutine` run to its end in a loop of its own, leaving the thread's loop as it was
    (`asyncio.run` leaves none, and the SDK's later runs in this thread ask for one)."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()


# _expand_dependencies


class _Ordered:
    """Hashed by name, so that a set of children is walked in the same order in both forests."""

    def __hash__(self) -> int:
        return hash(self._name)


class _Custom(_Ordered, pulumi.CustomResource):
    pass


class _Component(_Ordered, pulumi.ComponentResource):
    pass


def _forest(rng: random.Random, size: int) -> list[Any]:
    """`size` resources that are not constructed (no engine): custom resources, local and
    remote components, some with children (a custom resource's too, which the SDK does not
    walk), each with a URN that is known, empty, unknown or failing."""
    kinds = (_Custom, _Component, _Component)
    nodes = []
    for index in range(size):
        node = object.__new__(rng.choice(kinds))
        node._type, node._name = "test:index:Node", f"n{index}"
        node._remote = isinstance(node, pulumi.ComponentResource) and rng.random() < 0.3
        urn = rng.choice([f"urn:n{index}"] * 4 + ["", UNKNOWN, None])
        if urn is None:  # a URN that fails to resolve
            failed = asyncio.get_running_loop().create_future()
            failed.set_exception(LookupError(f"no URN for n{index}"))
            node.__dict__["urn"] = pulumi.Output(set(), failed, _done(True))
        else:
            node.__dict__["urn"] = pulumi.Output.from_input(urn)  # as Resource.__init__ keeps it
        nodes.append(node)
    for index, node in enumerate(nodes):
        later = nodes[index + 1 :]
        node._childResources = set(rng.sample(later, min(len(later), rng.randrange(4))))
    return nodes


def _expanded(expand, seed: int, size: int, cycles_fail: bool, monkeypatch) -> tuple:
    """What `expand` answers (or raises) for random dependencies among a fresh forest, and the
    dependencies it declared."""
    monkeypatch.setenv(rpc.ERROR_ON_DEPENDENCY_CYCLES_VAR, "true" if cycles_fail else "false")
    rng = random.Random(seed)

    async def expand_some():
        nodes = _forest(rng, size)
        if rng.random() < 0.5:
            await asyncio.sleep(0)  # the URNs resolved before the expansion (else while it runs)
        deps = rng.sample(nodes, rng.randrange(size + 1))
        if rng.random() < 0.1:
            deps.insert(rng.randrange(len(deps) + 1), "not a resource")
        from_resource = rng.choice([None, *nodes])
        # Some dependencies already declared the other way round: expanding may close a cycle.
        for _ in range(rng.randrange(size)):
            sdk_dependencies.declare_dependency(rng.choice(nodes), rng.choice(nodes))
        try:
            answer = await expand(deps, from_resource)
            outcome = [(urn, res._name) for urn, res in answer.items()]
        except (TypeError, RuntimeError, LookupError) as error:
            outcome = [(type(error).__name__, str(error))]
        edges = {(n._name, d._name) for n in nodes for d in resource_cycle_breaker._deps(n)}
        return outcome, edges

    return _run(expand_some())


@pytest.mark.parametrize("cycles_fail", [True, False])
def test_expand_dependencies_answers_and_declares_as_the_sdk_does(monkeypatch, cycles_fail):
    original = sdk_original(BY_NAME["_expand_dependencies"])
    outcomes = collections.Counter()
    for seed in range(300):
        size = 1 + seed % 12
        ours = _expanded(sdk_dependencies.expand_dependencies, seed, size, cycles_fail, monkeypatch)
        sdk = _expanded(original, seed, size, cycles_fail, monkeypatch)
        assert ours == sdk, seed
        answer = ours[0]
        failed = answer and answer[0][0] in ("TypeError", "RuntimeError", "LookupError")
        outcomes[answer[0][0] if failed else "ok"] += 1
    # Every path was taken: answers, the wrong type, a URN that fails, and (when cycles fail) a
    # cycle.
    assert outcomes["ok"] > 100 and outcomes["TypeError"] > 5 and outcomes["LookupError"] > 5
    assert (outcomes["RuntimeError"] > 50) == cycles_fail


# _resolve_depends_on


def _resolved(resolve, depends_on: Callable[[], Any]) -> set[Any]:
    async def made_and_resolved() -> set[Any]:
        return await resolve(depends_on())  # Outputs are made in the loop they resolve in

    return _run(made_and_resolved())


def test_resolve_depends_on_answers_as_the_sdk_does():
    original = sdk_original(BY_NAME["_resolve_depends_on"])
    a, b = object.__new__(pulumi.CustomResource), object.__new__(pulumi.ComponentResource)
    lists = {
        "resources": lambda: [a, b, a],
        "empty": lambda: [],
        "an output among them": lambda: [a, pulumi.Output.from_input(b)],
        "a none among them": lambda: [None, a],
        "an output of a list": lambda: pulumi.Output.from_input([a, b]),
    }
    for name, depends_on in lists.items():
        ours = _resolved(sdk_dependencies.resolve_depends_on, depends_on)
        assert ours == _resolved(original, depends_on), name


def test_resolve_depends_on_reads_a_plain_list_of_resources_itself(monkeypatch):
    def not_called(*args: Any) -> Any:
        raise AssertionError("handed to the SDK")

    monkeypatch.setattr(sdk_dependencies, "SDK_RESOLVE_DEPENDS_ON", not_called)
    a = object.__new__(pulumi.CustomResource)
    assert _run(sdk_dependencies.resolve_depends_on([a, a])) == {a}


# deserialize_properties


@pytest.mark.parametrize("keep_unknowns", [None, True])
def test_deserialize_properties_reads_as_the_sdk_does(keep_unknowns):
    original = sdk_original(BY_NAME["deserialize_properties"])
    rng = random.Random(7)
    unknowns = 0
    for _ in range(500):
        state = {f"p{i}": _with_secrets(rng, _random_plain(rng)) for i in range(rng.randrange(6))}
        struct = _sdk_struct(state)
        ours = sdk_values.deserialize_properties(struct, keep_unknowns)
        if rpc.UNKNOWN in str(struct):
            # An unknown is the SDK's to read (an Unknown in a preview, None in an update).
            assert sdk_values.plain_properties(struct) is None
            unknowns += 1
        assert _typed(ours) == _typed(original(struct, keep_unknowns)), state
    assert 0 < unknowns < 250


def test_deserialize_properties_leaves_internal_keys_to_the_sdk():
    original = sdk_original(BY_NAME["deserialize_properties"])
    struct = _sdk_struct({"__provider": "p", "__inputs": {"a": 1}, "b": "c"})
    for keep_internal in (None, True, False):
        ours = sdk_values.deserialize_properties(struct, None, keep_internal)
        assert ours == original(struct, None, keep_internal)
    assert sdk_values.deserialize_properties(struct, None, False) == {"__provider": "p", "b": "c"}


@pytest.mark.parametrize("signature", ["asset", "archive", "resource", "output"])
def test_assets_archives_references_and_output_values_are_left_to_the_sdk(signature: str):
    signatures = {
        "asset": rpc._special_asset_sig,
        "archive": rpc._special_archive_sig,
        "resource": rpc._special_resource_sig,
        "output": rpc._special_output_value_sig,
    }
    struct = _sdk_struct({"p": {rpc._special_sig_key: signatures[signature], "text": "x"}})
    assert sdk_values.plain_properties(struct) is None


# translate_output_properties


class _Colour(StrEnum):
    RED = "red"


class _Size(float, Enum):
    ONE = 1.0


_TYPES: list[Any] = [
    None,
    str,
    int,
    float,
    bool,
    Any,
    Optional[str],  # noqa: UP045 - the SDK reads the typing form
    Optional[int],  # noqa: UP045
    _Colour,
    Optional[_Colour],  # noqa: UP045
    _Size,
    list,
    dict,
    dict[str, str],
    Union[int, str],  # noqa: UP007
]
_SCALARS: list[Any] = ["", "red", "x", 0.0, 1.0, 2.5, -3.0, True, False, None, 7]


def _outcome(function, *args):
    try:
        value = function(*args)
    except Exception as error:  # the SDK's own failures count too
        return ("raises", type(error).__name__, str(error))
    return ("returns", type(value).__name__, repr(value))


def test_translate_output_properties_answers_scalars_as_the_sdk_does():
    original = sdk_original(BY_NAME["translate_output_properties"])
    compared = 0
    for typ in _TYPES:
        for value in _SCALARS:
            ours = _outcome(sdk_values.translate_output_properties, value, str, typ)
            assert ours == _outcome(original, value, str, typ), (value, typ)
            compared += 1
    assert compared == len(_TYPES) * len(_SCALARS)


def test_translate_output_properties_translates_untyped_maps_and_lists_as_the_sdk_does():
    # Maps and lists without a type (keys translated by the transformer), secrets inside.
    original = sdk_original(BY_NAME["translate_output_properties"])
    rng = random.Random(11)
    for _ in range(300):
        value = _with_secrets(rng, _random_plain(rng))
        assert repr(sdk_values.translate_output_properties(value, str.upper)) == repr(
            original(value, str.upper)
        )


def _typed_output(rng: random.Random, typ: Any, depth: int = 0) -> Any:
    """A value of annotation `typ` as the engine answers it (Pulumi names, numbers as floats),
    with now and then a secret, a null, an unknown or a value of another shape."""
    roll = rng.random()
    if roll < 0.04:
        return _with_secrets(rng, _random_plain(rng))
    if roll < 0.06:
        return rpc.UNKNOWN
    value = _typed_output_of(rng, sdk_types.SDK_UNWRAP_OPTIONAL_TYPE(typ) if typ else typ, depth)
    return rpc.wrap_rpc_secret(value) if rng.random() < 0.05 else value


def _typed_output_of(rng: random.Random, typ: Any, depth: int) -> Any:
    origin = typing.get_origin(typ)
    if typ is None or typ is Any or depth > 5:
        return _random_plain(rng, 3)
    if origin in (Union, types.UnionType):
        return _typed_output(rng, rng.choice(typing.get_args(typ)), depth)
    if sdk_values._types.is_output_type(typ):
        hints = sdk_values._types.output_type_types(typ)
        fields = {
            name: _typed_output(rng, hint, depth + 1)
            for name, hint in hints.items()
            if rng.random() < 0.6
        }
        if rng.random() < 0.1:
            fields["somethingNew"] = "x"
        return fields
    if origin in (list, collections.abc.Sequence) or typ is list:
        (element,) = typing.get_args(typ) or (Any,)
        return [_typed_output(rng, element, depth + 1) for _ in range(rng.randrange(3))]
    if origin in (dict, collections.abc.Mapping) or typ is dict:
        _, element = typing.get_args(typ) or (str, Any)
        return {f"key_{i}": _typed_output(rng, element, depth + 1) for i in range(rng.randrange(3))}
    if isinstance(typ, type) and issubclass(typ, Enum):
        return rng.choice(list(typ)).value
    if typ in (int, float):
        return float(rng.randrange(100))
    if typ is bool:
        return rng.random() < 0.5
    return rng.choice(["", "s", "key_0"])


@pulumi.output_type
class _CatOutput(dict):
    def __init__(__self__, *, meow_count: int):
        pulumi.set(__self__, "meow_count", meow_count)

    @property
    @pulumi.getter(name="meowCount")
    def meow_count(self) -> int:
        return pulumi.get(self, "meow_count")


@pulumi.output_type
class _DogOutput(dict):
    def __init__(__self__, *, bark_volume: str, good: bool | None = None):
        pulumi.set(__self__, "bark_volume", bark_volume)
        if good is not None:
            pulumi.set(__self__, "good", good)

    @property
    @pulumi.getter(name="barkVolume")
    def bark_volume(self) -> str:
        return pulumi.get(self, "bark_volume")

    @property
    @pulumi.getter
    def good(self) -> bool | None:
        return pulumi.get(self, "good")


@pulumi.output_type
class _CollarOutput(dict):
    def __init__(__self__, *, colour: _Colour, size: _Size | None = None, holes: int):
        pulumi.set(__self__, "colour", colour)
        if size is not None:
            pulumi.set(__self__, "size", size)
        pulumi.set(__self__, "holes", holes)

    @property
    @pulumi.getter
    def colour(self) -> _Colour:
        return pulumi.get(self, "colour")

    @property
    @pulumi.getter
    def size(self) -> _Size | None:
        return pulumi.get(self, "size")

    @property
    @pulumi.getter
    def holes(self) -> int:
        return pulumi.get(self, "holes")


# Outputs of discriminated unions of output types, alone, in lists and in maps, a map typed
# `dict` alone (its keys are translated), and an output type with Enum and `int` fields: shapes
# the program's resources lack.
_PET = Union[_CatOutput, _DogOutput]  # noqa: UP007 - as generated
_PET_OUTPUTS = {
    "pet": _PET,
    "pets": list[_PET],
    "byName": Mapping[str, _PET],
    "loose": dict,
    "collar": _CollarOutput,
    "sizes": list[_Size],
    "colours": Mapping[str, _Colour],
    "counts": list[int],
}


@pytest.mark.parametrize("by_type", [True, False], ids=["by type", "by transformer"])
def test_translate_output_properties_builds_the_sdks_output_types(by_type):
    # Every output of the resources the program registers, shaped by its annotation (output
    # types nested in lists and maps, Enums, secrets, nulls, and values of another shape, which
    # the SDK rejects or, asked to, answers None for): the same objects or the same error.
    original = sdk_original(BY_NAME["translate_output_properties"])
    rng = random.Random(31)
    outcomes = collections.Counter()
    every_hints = [sdk_values._types.resource_types(cls) for cls in _resource_classes()]
    for hints in [*every_hints, _PET_OUTPUTS]:
        for _ in range(40):
            for name, hint in hints.items():
                value = _typed_output(rng, hint)
                none_on_mismatch = rng.random() < 0.3
                path = rpc._Path(name, resource="r")
                args = (value, str.upper, hint, by_type, path, none_on_mismatch)
                ours = _translated(sdk_values.translate_output_properties, *args)
                assert ours == _translated(original, *args), (name, value)
                outcomes[ours[0][0]] += 1
                outcomes["output types"] += ours[1]
    assert outcomes["returns"] > 1000 and outcomes["raises"] > 20
    assert outcomes["output types"] > 300


def _translated(function: Callable[..., Any], *args: Any) -> tuple:
    """(what `function(*args)` answers or how it fails, comparably; how many output-type
    objects the answer holds)."""
    try:
        value = function(*args)
    except Exception as error:  # the SDK's own failures count too
        return ("raises", type(error).__name__, re.sub(r" at 0x[0-9a-f]+", "", str(error))), 0
    return ("returns", _canonical(value)), _output_types_in(value)


def _output_types_in(value: Any) -> int:
    if sdk_values._types.is_output_type(type(value)):
        return 1 + _output_types_in(sdk_values._types.output_type_to_dict(value))
    if isinstance(value, dict):
        return sum(_output_types_in(v) for v in value.values())
    if isinstance(value, list):
        return sum(_output_types_in(v) for v in value)
    return 0


# resolve_outputs


def _canonical(value: Any) -> Any:
    """`value` comparable across two runs: output types by their class and properties, scalars
    with their type, unknowns as one."""
    if sdk_values._types.is_output_type(type(value)):
        as_dict = sdk_values._types.output_type_to_dict(value)
        return (type(value).__name__, _canonical(as_dict))
    if isinstance(value, dict):
        return (type(value).__name__, {k: _canonical(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    if isinstance(value, Enum):
        return (type(value).__name__, value.value)
    if isinstance(value, pulumi.output.Unknown):
        return "<unknown>"
    return (type(value).__name__, value)


def _resource_classes() -> list[type]:
    import pulumi_aws as aws
    import pulumi_command as command
    import pulumi_kubernetes as k8s

    return [command.remote.Command, aws.ec2.Instance, k8s.batch.v1.Job, k8s.apps.v1.DaemonSet]


def _engine_state(rng: random.Random, names: list[str]) -> dict[str, Any]:
    """Some of `names` with plain values (secrets, nulls and unknowns among them)."""
    state = {}
    for name in rng.sample(names, rng.randrange(len(names) + 1)):
        state[name] = rng.choice(
            [None, rpc.UNKNOWN, "x" * rng.randrange(40), _with_secrets(rng, _random_plain(rng))]
        )
    return state


def _resolved_outputs(function: Callable[[], Any], monkeypatch, *args) -> tuple:
    """What `function()` (taken once a spy is in place of `resolve_properties`) hands
    `resolve_properties` (all it does), or how it fails."""
    handed: list[tuple] = []

    def resolve_properties(resolvers, all_properties, deps, custom, missing_as_unknown=False):
        handed.append((_canonical(all_properties), deps, custom, missing_as_unknown))

    monkeypatch.setattr(rpc, "resolve_properties", resolve_properties)
    outcome = _outcome(function(), *args)
    # An error quotes the values: an Unknown there is shown by its address.
    return (*outcome[:2], re.sub(r" at 0x[0-9a-f]+", "", outcome[2])), handed


@pytest.mark.parametrize("dry_run", [False, True], ids=["update", "preview"])
def test_resolve_outputs_combines_outputs_and_inputs_as_the_sdk_does(monkeypatch, dry_run):
    monkeypatch.setattr(rpc.settings, "is_dry_run", lambda: dry_run)
    rng = random.Random(23)
    outcomes = collections.Counter()
    for cls in _resource_classes():
        names = [*sdk_values._types.resource_types(cls), "p0", "p1", "__provider"]
        res = cls.__new__(cls)
        res._name = "r"
        for _ in range(100):
            inputs = _sdk_struct(_engine_state(rng, names))
            outputs = _sdk_struct(_engine_state(rng, names))
            deps = {name: {f"dep-{name}"} for name in rng.sample(names, 2)}
            flags = [rng.random() < 0.5 for _ in range(4)]
            args = (res, inputs, outputs, deps, {}, *flags)
            ours = _resolved_outputs(lambda: sdk_outputs.resolve_outputs, monkeypatch, *args)
            original = lambda: sdk_original(BY_NAME["resolve_outputs"])  # noqa: E731
            assert ours == _resolved_outputs(original, monkeypatch, *args), (cls, args)
            outcomes[ours[0][0]] += 1
            outcomes["an input the answer lacks"] += any(k not in outputs for k in inputs)
    assert outcomes["returns"] > 100 and outcomes["raises"] > 10
    assert outcomes["an input the answer lacks"] > 100


def _containers(value: Any, found: list[Any]) -> list[Any]:
    """Every map, list and output-type object in `value` (kept: their ids are compared)."""
    if isinstance(value, dict | list):
        found.append(value)
        for item in dict.values(value) if isinstance(value, dict) else value:
            _containers(item, found)
    elif sdk_values._types.is_output_type(type(value)):
        found.append(value)
        _containers(dict(vars(value)), found)
    return found


def test_an_answer_read_again_is_resolved_into_objects_of_its_own(monkeypatch):
    # resolve_outputs reads a map or list once per serialized form and hands it on again: the
    # translation makes new ones, so two resources answered alike share no object, and each
    # resolves as the SDK's does.
    rng = random.Random(29)
    original = lambda: sdk_original(BY_NAME["resolve_outputs"])  # noqa: E731 - after the spy
    read = []
    from_value = sdk_values._from_value
    monkeypatch.setattr(
        sdk_values, "_from_value", lambda v, kept=None: read.append(v) or from_value(v, kept)
    )
    # As the program runs: both readings the replacements' (the SDK's translation makes new
    # objects of anything anyway).
    monkeypatch.setattr(rpc, "deserialize_properties", sdk_values.deserialize_properties)
    monkeypatch.setattr(rpc, "translate_output_properties", sdk_values.translate_output_properties)
    shared = 0
    for cls in _resource_classes():
        names = [*sdk_values._types.resource_types(cls), "p0"]
        for _ in range(60):
            # Maps and lists of every kind, an untyped one among them.
            state = {**_engine_state(rng, names), "p0": {"k": [_random_plain(rng)], "m": {}}}
            answer = _sdk_struct(state)
            handed = []
            for index in range(2):
                res = cls.__new__(cls)
                res._name = f"r{index}"
                args = (res, struct_pb2.Struct(), answer, {}, {}, True, False, False, False)
                ours = _resolved_outputs(lambda: sdk_outputs.resolve_outputs, monkeypatch, *args)
                assert ours == _resolved_outputs(original, monkeypatch, *args)
                handed.append(ours)
            for_first, for_second = [], []
            monkeypatch.setattr(
                rpc,
                "resolve_properties",
                lambda r, props, d, c, m=False, found=for_first: _containers(props, found),
            )
            res = cls.__new__(cls)
            res._name = "a"
            if handed[0][0][0] == "raises":  # an answer of another shape: nothing resolved
                continue
            sdk_outputs.resolve_outputs(res, struct_pb2.Struct(), answer, {}, {}, True)
            monkeypatch.setattr(
                rpc,
                "resolve_properties",
                lambda r, props, d, c, m=False, found=for_second: _containers(props, found),
            )
            plain = sdk_values.plain_properties(answer) is not None  # else the SDK reads it
            before = len(read)
            sdk_outputs.resolve_outputs(res, struct_pb2.Struct(), answer, {}, {}, True)
            if plain:
                assert len(read) == before  # read before, not again
                shared += bool(for_second)
            assert not {id(c) for c in for_first} & {id(c) for c in for_second}
    assert shared > 20  # read once, resolved twice into objects of their own


def test_a_map_inside_is_read_once_for_every_answer_that_holds_it(monkeypatch):
    # Each node's Job spec differs by its node's name, its containers not at all: read with
    # the answers remembered, a map or list inside one answer is not read again inside the
    # next, and each answer reads as the SDK's deserialization does.
    original = sdk_original(BY_NAME["deserialize_properties"])
    read: list[Any] = []
    from_value = sdk_values._from_value
    monkeypatch.setattr(
        sdk_values, "_from_value", lambda v, kept=None: read.append(v) or from_value(v, kept)
    )
    containers = [{"name": "cuda", "command": ["sh", "-c", "nvidia-smi"], "n": 2}]
    secret = {rpc._special_sig_key: rpc._special_secret_sig, "value": "token"}
    remembered: dict[bytes, Any] = {}
    counts = []
    for node in ("gpu-0", "gpu-1", "gpu-2"):
        spec = {
            "template": {"labels": {"node": node}, "containers": containers, "env": [secret]},
            "tolerations": [{"key": "gpu", "effect": "NoSchedule"}, None],
        }
        answer = _sdk_struct({"spec": spec, "name": node})
        before = len(read)
        assert sdk_values.plain_properties(answer, remembered) == original(answer)
        counts.append(len(read) - before)
    # The first reads everything; the others only the maps that hold the node's name.
    assert counts[0] > counts[1] == counts[2] > 0
    assert counts[1] <= 4  # spec, template, labels, and nothing under containers again


def test_a_long_string_answered_as_sent_is_the_string_sent(monkeypatch):
    # A step's stdin comes back in its answer: read, it would be a second copy of every
    # script. Answered unchanged, the resource gets the string it was sent (the same object);
    # changed, or sent for another Struct, the answer's own, as the SDK reads it.
    import pulumi_command as command

    monkeypatch.setattr(rpc, "deserialize_properties", sdk_values.deserialize_properties)
    original = lambda: sdk_original(BY_NAME["resolve_outputs"])  # noqa: E731 - after the spy
    script = "#!/bin/bash\n" + "echo step\n" * 100
    other = "x" * sdk_struct.SENT_CHARS
    inputs = {"stdin": script, "create": other, "update": "true", "delete": None}
    cases = {
        "echoed": {**inputs, "stdout": ""},
        "changed": {**inputs, "stdin": script + "#", "create": other[:-1] + "y"},
        "left out": {"update": "true"},
    }
    for case, state in cases.items():
        res = command.remote.Command.__new__(command.remote.Command)
        res._name = "r"
        serialized = _sync_await(sdk_struct.serialize_properties(inputs, {}, res))
        answer = _sdk_struct(state)
        args = (res, serialized, answer, {}, {}, True, False, True, False)
        ours = _resolved_outputs(lambda: sdk_outputs.resolve_outputs, monkeypatch, *args)
        assert ours == _resolved_outputs(original, monkeypatch, *args), case
        handed: list[dict[str, Any]] = []
        monkeypatch.setattr(
            rpc, "resolve_properties", lambda r, props, *_, found=handed: found.append(props)
        )
        res.__dict__.pop("_gpu_cluster_sent", None)
        serialized = _sync_await(sdk_struct.serialize_properties(inputs, {}, res))
        sdk_outputs.resolve_outputs(res, serialized, _sdk_struct(state), {}, {}, True)
        (props,) = handed
        assert (props.get("stdin") is script) == (case == "echoed"), case
        assert (props.get("create") is other) == (case == "echoed"), case
        assert not hasattr(res, "_gpu_cluster_sent")  # kept until read, not after
        # Kept for another Struct: read as it is.
        elsewhere = struct_pb2.Struct(fields={"stdin": struct_pb2.Value(string_value=script)})
        sdk_struct.remember_sent(res, elsewhere, {"stdin": (elsewhere.fields["stdin"], script)})
        sdk_outputs.resolve_outputs(res, serialized, _sdk_struct(state), {}, {}, True)
        assert "stdin" not in handed[1] or handed[1]["stdin"] is not script
        assert handed[1] == props


# RegisterResourceRequest


def _request_fields(rng: random.Random, inputs: Any) -> dict[str, Any]:
    """The keyword arguments `resource.register_resource` builds a request with (every kind:
    scalars, lists, maps of strings and of messages, messages), `inputs` as `object`."""
    request = resource_pb2.RegisterResourceRequest
    frames = [
        source_pb2.StackFrame(pc=source_pb2.SourcePosition(uri=f"file:///p{i}.py", line=i))
        for i in range(rng.randrange(4))
    ]
    return {
        "type": "command:remote:Command",
        "name": f"n{rng.randrange(9)}",
        "parent": rng.choice(["", "urn:pulumi:s::p::T::parent"]),
        "custom": rng.random() < 0.5,
        "object": inputs,
        "protect": rng.choice([None, False, True]),
        "provider": "",
        "providers": {"aws": "urn::provider::id"} if rng.random() < 0.5 else {},
        "dependencies": [f"urn:d{i}" for i in range(rng.randrange(3))],
        "propertyDependencies": {
            f"p{i}": request.PropertyDependencies(urns=[f"urn:d{i}"]) for i in range(3)
        },
        "deleteBeforeReplace": False,
        "ignoreChanges": ["userData"] if rng.random() < 0.5 else [],
        "acceptSecrets": True,
        "additionalSecretOutputs": ["stdout"],
        "customTimeouts": request.CustomTimeouts(create="30m") if rng.random() < 0.5 else None,
        "aliases": [alias_pb2.Alias(urn="urn:old")] if rng.random() < 0.5 else [],
        "replaceOnChanges": ["triggers"],
        "replacement_trigger": struct_pb2.Value(string_value="t") if rng.random() < 0.3 else None,
        "stackTrace": source_pb2.StackTrace(frames=frames),
        "sourcePosition": frames[0].pc if frames else None,
        "envVarMappings": {},
    }


def test_the_request_is_built_as_the_sdk_builds_it():
    rng = random.Random(31)
    kinds = collections.Counter()
    for _ in range(300):
        state = {f"p{i}": _with_secrets(rng, _random_plain(rng)) for i in range(rng.randrange(6))}
        inputs = rng.choice([_sdk_struct(state), struct_pb2.Struct(), None, state])
        kinds[type(inputs).__name__] += 1
        fields = _request_fields(rng, inputs)
        ours = sdk_inputs.register_resource_request(**dict(fields))
        sdk = resource_pb2.RegisterResourceRequest(**fields)
        assert type(ours) is type(sdk)
        assert ours == sdk
        assert ours.HasField("object") == sdk.HasField("object")
        # The same bytes, maps in key order (protobuf maps have none of their own).
        assert ours.SerializeToString(deterministic=True) == sdk.SerializeToString(
            deterministic=True
        )
    assert min(kinds.values()) > 50


def test_the_request_module_is_the_sdks_but_for_the_request():
    replaced = sdk_inputs.RESOURCE_PB2
    assert replaced.__name__ == resource_pb2.__name__
    different = {
        name
        for name in vars(resource_pb2)
        if vars(replaced)[name] is not getattr(resource_pb2, name)
    }
    assert different == {"RegisterResourceRequest"}
    request = replaced.RegisterResourceRequest
    for name in ("CustomTimeouts", "PropertyDependencies", "ResourceHooksBinding"):
        assert getattr(request, name) is getattr(resource_pb2.RegisterResourceRequest, name)
    # The SDK builds its requests through it once the program has installed it.
    run_program("dev")
    assert resource.resource_pb2 is replaced


# serialize_property


def _serialized(function, value: Any, typ: Any, as_protobuf: bool = False):
    deps: list[Any] = []

    async def run():
        return await function(value, deps, "p", None, None, typ, False, False, as_protobuf)

    outcome = _outcome(lambda: _sync_await(run()))
    return outcome, deps


def test_serialize_property_answers_scalars_as_the_sdk_does():
    original = sdk_original(BY_NAME["serialize_property"])
    for typ in _TYPES:
        for value in [*_SCALARS, rpc.UNKNOWN, _Colour.RED, [1, "a"], {"a": None}]:
            for as_protobuf in (False, True):
                ours = _serialized(sdk_inputs.serialize_property, value, typ, as_protobuf)
                assert ours == _serialized(original, value, typ, as_protobuf), (value, typ)


# An annotation the SDK's `unwrap_type` fails on (an Output of two types).
_MALFORMED = types.GenericAlias(pulumi.Output, (int, str))


def test_serialize_property_fails_on_a_malformed_annotation_as_the_sdk_does():
    # The SDK's call for each value inside a map unwraps its annotation first; the walk skips
    # that for a map whose annotations are known to unwrap, and must still fail where one
    # does not, for a value that has it only.
    original = sdk_original(BY_NAME["serialize_property"])
    typ = dict[str, _MALFORMED]  # type: ignore[valid-type]
    for value in [{}, {"a": 1}, {"a": _Colour.RED}, {"a": [1]}]:
        ours = _serialized(sdk_inputs.serialize_property, value, typ)
        assert ours == _serialized(original, value, typ), value
        assert (ours[0][0] == "raises") == bool(value), (value, ours)


class _Typed:
    """Random values of given annotations as a program passes them: scalars, Enum members,
    lists and tuples, maps and read-only maps, input types as objects or as maps of their Python
    names, some in Outputs (known or not, secret or not, holding resources), and now and then a
    value of another type (which both must reject alike)."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.resources = []
        for index in range(4):
            resource = object.__new__(_Custom)
            resource._name = f"r{index}"
            self.resources.append(resource)

    def value(self, typ: Any, depth: int = 0) -> Any:
        rng = self.rng
        plain = random_value(rng) if rng.random() < 0.03 else self.plain(typ, depth)
        roll = rng.random()
        if roll < 0.2:
            known = roll > 0.03
            resources = set(rng.sample(self.resources, rng.randrange(3)))
            return pulumi.Output(
                resources,
                _done(plain if known or rng.random() < 0.5 else UNKNOWN),
                _done(known),
                _done(rng.random() < 0.3),
            )
        return plain

    def plain(self, typ: Any, depth: int) -> Any:
        rng = self.rng
        typ = sdk_types.SDK_UNWRAP_TYPE(typ) if typ else typ
        origin = typing.get_origin(typ)
        if typ is None or typ is Any:
            return random_value(rng, 2)
        if origin is Union:
            members = [m for m in typing.get_args(typ) if not typing.is_typeddict(m)]
            return None if rng.random() < 0.05 else self.plain(rng.choice(members), depth)
        if origin in (list, collections.abc.Sequence) or typ is list:
            (element,) = typing.get_args(typ) or (Any,)
            items = [self.value(element, depth + 1) for _ in range(rng.randrange(3))]
            return tuple(items) if rng.random() < 0.2 else items
        if origin in (dict, collections.abc.Mapping) or typ is dict:
            _, element = typing.get_args(typ) or (str, Any)
            mapping = {f"k{i}": self.value(element, depth + 1) for i in range(rng.randrange(3))}
            return types.MappingProxyType(mapping) if rng.random() < 0.3 else mapping
        if isinstance(typ, type) and issubclass(typ, Enum):
            return rng.choice(list(typ))
        if typ in (str, int, float, bool):
            return {str: "s", int: 3, float: 2.5, bool: False}[typ]
        if sdk_values._types.is_input_type(typ):
            return self.input_type(typ, depth)
        return random_value(rng, 2)

    def input_type(self, typ: type, depth: int) -> Any:
        rng = self.rng
        names = sdk_values._types.input_type_py_to_pulumi_names(typ)
        hints = sdk_values._types.input_type_types(typ)
        parameters = inspect.signature(typ.__init__).parameters
        fields = {}
        for py_name, pulumi_name in names.items():
            required = parameters[py_name].default is inspect.Parameter.empty
            if required or (depth < 4 and rng.random() < 0.4):
                fields[py_name] = self.value(hints[pulumi_name], depth + 1)
        return typ(**fields) if rng.random() < 0.5 else fields


def _done(value: Any) -> asyncio.Future:
    future = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


def _args_classes() -> list[type]:
    import pulumi_aws as aws
    import pulumi_command as command
    import pulumi_kubernetes as k8s

    return [
        command.remote.CommandArgs,
        aws.ec2.InstanceArgs,
        k8s.batch.v1.JobArgs,
        k8s.apps.v1.DaemonSetArgs,
        k8s.core.v1.NamespaceArgs,
    ]


def _serialized_properties(
    serialize, seed: int, args: type, transformer: Callable[[str], str] | None = None
) -> list[tuple]:
    """Every property of `args` with a random value, serialized by `serialize` against its
    type (keys translated by `transformer` where the type does not name them): the answer or
    the error, the dependencies found, and the resources each Output holds afterwards (the SDK
    adds those found inside it)."""

    async def serialize_all() -> list[tuple]:
        typed = _Typed(seed)
        names = sdk_values._types.input_type_py_to_pulumi_names(args)
        hints = sdk_values._types.input_type_types(args)
        outcomes = []
        for py_name, pulumi_name in names.items():
            value = typed.value(hints[pulumi_name])
            deps: list[Any] = []
            try:
                answer = await serialize(
                    value, deps, py_name, None, transformer, hints[pulumi_name]
                )
                outcome = ("returns", _typed(answer))
            except Exception as error:  # the SDK's own failures count too
                outcome = ("raises", type(error).__name__, str(error))
            held = sorted(r._name for r in await _resources_of(value))
            outcomes.append((py_name, outcome, [d._name for d in deps], held))
        return outcomes

    return _run(serialize_all())


async def _resources_of(value: Any) -> set[Any]:
    if isinstance(value, pulumi.Output):
        return (await value._data).resources
    return set()


@pulumi.input_type
class _CatArgs:
    def __init__(__self__, *, meow_count: pulumi.Input[int]):
        pulumi.set(__self__, "meow_count", meow_count)

    @property
    @pulumi.getter(name="meowCount")
    def meow_count(self) -> pulumi.Input[int]:
        return pulumi.get(self, "meow_count")


@pulumi.input_type
class _DogArgs:
    def __init__(__self__, *, bark_volume: pulumi.Input[str], good: pulumi.Input[bool] = None):
        pulumi.set(__self__, "bark_volume", bark_volume)
        if good is not None:
            pulumi.set(__self__, "good", good)

    @property
    @pulumi.getter(name="barkVolume")
    def bark_volume(self) -> pulumi.Input[str]:
        return pulumi.get(self, "bark_volume")

    @property
    @pulumi.getter
    def good(self) -> pulumi.Input[bool] | None:
        return pulumi.get(self, "good")


@pulumi.input_type
class _PetsArgs:
    """Discriminated unions of input types (the SDK picks the member a map's keys select), alone
    and in lists, and maps typed by their values: shapes the program's own types lack."""

    def __init__(
        __self__,
        *,
        pet: pulumi.Input[Union[_CatArgs, _DogArgs]],  # noqa: UP007 - as generated
        pets: pulumi.Input[Sequence[pulumi.Input[Union[_CatArgs, _DogArgs]]]] = None,  # noqa: UP007
        names: pulumi.Input[Mapping[str, pulumi.Input[str]]] = None,
        extra: pulumi.Input[Mapping[str, Any]] = None,
    ):
        pulumi.set(__self__, "pet", pet)
        for name, value in (("pets", pets), ("names", names), ("extra", extra)):
            if value is not None:
                pulumi.set(__self__, name, value)

    @property
    @pulumi.getter
    def pet(self) -> pulumi.Input[Union[_CatArgs, _DogArgs]]:  # noqa: UP007
        return pulumi.get(self, "pet")

    @property
    @pulumi.getter(name="petList")
    def pets(self) -> pulumi.Input[Sequence[pulumi.Input[Union[_CatArgs, _DogArgs]]]] | None:  # noqa: UP007
        return pulumi.get(self, "pets")

    @property
    @pulumi.getter
    def names(self) -> pulumi.Input[Mapping[str, pulumi.Input[str]]] | None:
        return pulumi.get(self, "names")

    @property
    @pulumi.getter
    def extra(self) -> pulumi.Input[Mapping[str, Any]] | None:
        return pulumi.get(self, "extra")


@pytest.mark.parametrize("secrets", [True, False], ids=["secrets", "no secrets"])
@pytest.mark.parametrize("transformer", [None, str.upper], ids=["no translator", "translator"])
def test_serialize_property_serializes_the_args_of_the_programs_types_as_the_sdk_does(
    monkeypatch, secrets, transformer
):
    # The SDK's walk through lists, maps, input types and Outputs calls the replacement (the
    # module's function) for every value inside them, each against its own annotation; the
    # replacement walks lists and maps itself and must translate their keys and pick their
    # values' annotations as the SDK does (a resource's `translate_input_property` is the
    # translator where no type names the keys).
    features = {rpc.resource_pb2.RESOURCE_MONITOR_FEATURE_SECRETS} if secrets else set()
    monkeypatch.setattr(rpc.settings.SETTINGS, "monitor_features", features)
    original = sdk_original(BY_NAME["serialize_property"])
    outcomes = collections.Counter()
    for seed in range(60):
        for args in [*_args_classes(), _PetsArgs]:
            ours = _serialized_properties(sdk_inputs.serialize_property, seed, args, transformer)
            theirs = _serialized_properties(original, seed, args, transformer)
            assert ours == theirs, (seed, args)
            outcomes.update(outcome[0] for _, outcome, _, _ in ours)
            outcomes["with dependencies"] += sum(1 for *_, deps, _ in ours if deps)
    assert outcomes["returns"] > 1000 and outcomes["raises"] > 20
    assert outcomes["with dependencies"] > 100


# unwrap_type, unwrap_optional_type


def _annotations() -> list[Any]:
    """Every annotation the SDK reads for the resources and args the program registers, and a
    few of the shapes it unwraps."""
    import pulumi_aws as aws
    import pulumi_command as command
    import pulumi_kubernetes as k8s

    found: list[Any] = [str, int, None.__class__, Any, Union[int, str], Union[str, int]]  # noqa: UP007
    classes = [
        aws.ec2.Instance,
        aws.ec2.InstanceArgs,
        command.remote.Command,
        command.remote.ConnectionArgs,
        k8s.batch.v1.Job,
        k8s.apps.v1.DaemonSet,
    ]
    for cls in classes:
        for name in dir(cls):
            getter = getattr(cls, name, None)
            if isinstance(getter, property) and getter.fget is not None:
                hints = getattr(getter.fget, "__annotations__", {})
                found += [h for h in hints.values() if not isinstance(h, str)]
        for hint in _types_module().resource_types(cls).values():
            found.append(hint)
    return found


def _types_module():
    from pulumi import _types

    return _types


@pytest.mark.parametrize("name", ["unwrap_type", "unwrap_optional_type"])
def test_the_unwrapped_type_is_the_sdks_for_every_annotation(name: str):
    original = sdk_original(BY_NAME[name])
    ours = getattr(sdk_types, name)
    annotations = _annotations()
    assert len(annotations) > 100
    for _ in range(2):  # the second time from what was remembered
        for annotation in annotations:
            assert _outcome(ours, annotation) == _outcome(original, annotation), annotation


def test_unions_equal_but_ordered_otherwise_are_unwrapped_each_by_its_own_order():
    # Union equality ignores the order of the members; the SDK's unwrapping reads it.
    first = Union[_Colour, dict, None]  # noqa: UP007
    second = Union[dict, _Colour, None]  # noqa: UP007
    assert first == second
    original = sdk_original(BY_NAME["unwrap_type"])
    for annotation in (first, second, first, second):
        assert sdk_types.unwrap_type(annotation) is original(annotation)


def test_remembered_answers_are_bounded_and_still_right():
    calls: list[Any] = []
    remembered = sdk_types.by_identity(lambda value: calls.append(value) or id(value), limit=3)
    values = [object() for _ in range(7)]
    for value in values + values:
        assert remembered(value) == id(value)
    assert len(remembered.answers) <= 3
    assert len(calls) == 14  # each value was forgotten before it came again
    assert remembered(values[-1]) == id(values[-1]) and len(calls) == 14


# resource_types, resource_pulumi_to_py_names


@pytest.mark.parametrize("name", ["resource_types", "resource_pulumi_to_py_names"])
def test_a_resource_classs_types_and_names_are_the_sdks_and_each_callers_own(name: str):
    import pulumi
    import pulumi_aws as aws
    import pulumi_command as command
    import pulumi_kubernetes as k8s

    from components.gpu_node import GpuNode

    original = sdk_original(BY_NAME[name])
    ours = getattr(sdk_types, name)
    classes = [
        aws.ec2.Instance,
        command.remote.Command,
        k8s.batch.v1.Job,
        pulumi.ComponentResource,
        pulumi.CustomResource,
        GpuNode,
    ]
    for cls in classes:
        first = ours(cls)
        assert first == original(cls), cls
        first["changed by a caller"] = "x"
        assert ours(cls) == original(cls), cls


# The program, with and without


def _registrations(stack: str) -> list[tuple]:
    """What the engine receives and answers for every resource, by URN (the order of the
    registrations follows the threads the SDK sends them from), values with their types and
    maps compared as maps: protobuf maps have no order (a Struct copied with `CopyFrom`
    iterates in another order than one parsed from bytes), nor has the engine's property
    map."""
    graph = run_program(stack)
    registered = [
        (
            r.urn,
            _typed(r.inputs),
            sorted(r.dependencies),
            sorted((k, sorted(v)) for k, v in r.property_dependencies.items()),
            r.additional_secret_outputs,
            _typed(r.outputs),
        )
        for r in graph
    ]
    return [*sorted(registered), (_typed(graph.outputs),)]


def test_the_program_registers_the_same_without_any_replacement(monkeypatch):
    with_them = _registrations("prod")
    for replacement in REPLACEMENTS:
        put_back_the_sdks(monkeypatch, replacement)
    monkeypatch.setattr(sdk_fixes, "REPLACEMENTS", ())
    without = _registrations("prod")
    for replacement in REPLACEMENTS:
        assert getattr(replacement.module, replacement.name) is not replacement.function
    assert without == with_them


# Installing


def test_the_program_runs_with_every_replacement():
    run_program("dev")
    for replacement in REPLACEMENTS:
        assert getattr(replacement.module, replacement.name) is replacement.function
    assert all(sdk_fixes.install().values())


def put_back_the_sdks(monkeypatch, replacement: Replacement) -> Any:
    """The SDK's own function back in every place the replacement takes (the one a wrapping
    replacement hands its other cases to, else one compiled from the SDK's source)."""
    original = replacement.wraps or sdk_original(replacement)
    for holder in (replacement.module, *replacement.also):
        monkeypatch.setattr(holder, replacement.name, original)
    return original


@pytest.mark.parametrize(
    "module",
    sorted({r.module for r in REPLACEMENTS}, key=lambda m: m.__name__),
    ids=lambda m: m.__name__,
)
def test_each_definition_is_read_as_ast_reads_it(module):
    # The digests are of these segments: the same text as ast.get_source_segment gives.
    source = sdk_fixes._module_source(module)
    assert source is not None and source.functions
    for node in source.functions.values():
        for part in [*node.decorator_list, node]:
            assert source.segment(part) == ast.get_source_segment(source.text, part)


@pytest.mark.parametrize("replacement", REPLACEMENTS, ids=lambda r: r.name)
def test_install_replaces_the_sdks_own_function(monkeypatch, replacement: Replacement):
    put_back_the_sdks(monkeypatch, replacement)
    assert replacement.install()
    for holder in (replacement.module, *replacement.also):
        assert getattr(holder, replacement.name) is replacement.function


@pytest.mark.parametrize("replacement", REPLACEMENTS, ids=lambda r: r.name)
def test_an_sdk_with_another_function_keeps_its_own(monkeypatch, replacement: Replacement):
    original = put_back_the_sdks(monkeypatch, replacement)
    changed = Replacement(
        replacement.module,
        replacement.name,
        replacement.function,
        replacement.covers,
        "0" * 64,  # as if the SDK's source had changed
        replacement.also,
        replacement.wraps,
    )
    assert not changed.install()
    assert getattr(replacement.module, replacement.name) is original


@pytest.mark.parametrize(
    "replacement",
    # A module is not made anew from source: the module one stays over the SDK's module only
    # (test_a_function_put_there_by_something_else_stays).
    [r for r in REPLACEMENTS if r.wraps is not None and not isinstance(r.wraps, types.ModuleType)],
    ids=lambda r: r.name,
)
def test_a_wrapping_replacement_goes_only_over_the_function_it_hands_cases_to(
    monkeypatch, replacement: Replacement
):
    # The SDK's source, but not the function object the replacement calls for the other cases
    # (something re-created it): installing would leave the replacement calling a stale one.
    compiled = sdk_original(replacement)
    for holder in (replacement.module, *replacement.also):
        monkeypatch.setattr(holder, replacement.name, compiled)
    assert not replacement.install()
    assert getattr(replacement.module, replacement.name) is compiled


@pytest.mark.parametrize("replacement", REPLACEMENTS, ids=lambda r: r.name)
def test_a_copy_imported_again_leaves_the_replacements_in_place(replacement: Replacement):
    # An older checkout's components (tools/lifecycle) import anew after the program ran: what
    # they take for the SDK's function is the replacement in place (a module they import from
    # the SDK's package, which is the SDK's), and they must leave what is in place.
    assert replacement.install()
    installed = getattr(replacement.module, replacement.name)
    if isinstance(replacement.wraps, types.ModuleType):
        taken_for_the_sdks = importlib.import_module(replacement.wraps.__name__)
    else:
        taken_for_the_sdks = installed if replacement.wraps is not None else None
    stale = Replacement(
        replacement.module,
        replacement.name,
        lambda *args, **kwargs: None,
        replacement.covers,
        replacement.sha256,
        replacement.also,
        taken_for_the_sdks,
    )
    assert not stale.install()
    assert getattr(replacement.module, replacement.name) is installed


def test_a_module_that_imported_the_function_by_name_gets_the_replacement(monkeypatch):
    declare = BY_NAME["declare_dependency"]
    put_back_the_sdks(monkeypatch, declare)
    assert declare.install()
    assert rpc.declare_dependency is resource_cycle_breaker.declare_dependency
    assert rpc.declare_dependency is sdk_dependencies.declare_dependency
    # One that holds something else: neither place is touched.
    original = put_back_the_sdks(monkeypatch, declare)
    monkeypatch.setattr(rpc, "declare_dependency", lambda *args: True)
    assert not declare.install()
    assert resource_cycle_breaker.declare_dependency is original


@pytest.mark.parametrize("replacement", REPLACEMENTS, ids=lambda r: r.name)
def test_a_function_put_there_by_something_else_stays(monkeypatch, replacement: Replacement):
    def elsewhere(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("not called")

    monkeypatch.setattr(replacement.module, replacement.name, elsewhere)
    assert not replacement.install()
    assert getattr(replacement.module, replacement.name) is elsewhere

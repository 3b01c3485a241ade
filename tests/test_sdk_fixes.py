"""The SDK functions the program replaces (components/sdk_fixes.py): each replacement answers as
the SDK's own function does (compiled here from the SDK's source, since the module attribute may
already be the replacement in this process), the program runs with them in place and sends the
engine the same stack traces, and each steps aside for an SDK whose function changed."""

from __future__ import annotations

import ast
import gc
import itertools
import random
import sys
import threading
from typing import Any

import pytest
from pulumi.output import UNKNOWN
from pulumi.runtime import resource
from pulumi.runtime.proto import source_pb2

from components import sdk_fixes
from components.sdk_fixes import REPLACEMENTS, Replacement
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

    values += [UNKNOWN, [], {}, {"a": shared, "b": shared}, looped, [looped, UNKNOWN], Text("t")]
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


# _reachable


class _Node:
    def __init__(self, index: int):
        self.index = index


def _graph(rng: random.Random, size: int, edges: int) -> list[_Node]:
    nodes = [_Node(i) for i in range(size)]
    for _ in range(edges):
        a, b = rng.choice(nodes), rng.choice(nodes)
        deps = getattr(a, "_direct_computed_dependencies", set())
        a._direct_computed_dependencies = deps | {b}
    return nodes


def test_reachable_answers_as_the_sdk_does():
    original = sdk_original(BY_NAME["_reachable"])
    rng = random.Random(1201)
    answers = []
    for size, edges in ((1, 0), (2, 1), (12, 10), (30, 25), (30, 60), (40, 200)):
        nodes = _graph(rng, size, edges)
        for a in nodes:
            for b in nodes:
                ours = sdk_fixes.reachable(from_resource=a, to_resource=b)
                assert ours == original(from_resource=a, to_resource=b), (size, a.index, b.index)
                answers.append(ours)
    assert any(answers) and not all(answers)


def test_reachable_walks_a_chain_longer_than_the_sdks_recursion_limit():
    nodes = [_Node(i) for i in range(3 * sys.getrecursionlimit())]
    for before, after in itertools.pairwise(nodes):
        after._direct_computed_dependencies = {before}
    assert sdk_fixes.reachable(nodes[-1], nodes[0])
    assert not sdk_fixes.reachable(nodes[0], nodes[-1])


# Installing


def test_the_program_runs_with_every_replacement():
    run_program("dev")
    for replacement in REPLACEMENTS:
        assert getattr(replacement.module, replacement.name) is replacement.function
    assert all(sdk_fixes.install().values())


@pytest.mark.parametrize("replacement", REPLACEMENTS, ids=lambda r: r.name)
def test_install_replaces_the_sdks_own_function(monkeypatch, replacement: Replacement):
    monkeypatch.setattr(replacement.module, replacement.name, sdk_original(replacement))
    assert replacement.install()
    assert getattr(replacement.module, replacement.name) is replacement.function


@pytest.mark.parametrize("replacement", REPLACEMENTS, ids=lambda r: r.name)
def test_an_sdk_with_another_function_keeps_its_own(monkeypatch, replacement: Replacement):
    original = sdk_original(replacement)
    monkeypatch.setattr(replacement.module, replacement.name, original)
    changed = Replacement(
        replacement.module,
        replacement.name,
        replacement.function,
        replacement.covers,
        "0" * 64,  # as if the SDK's source had changed
    )
    assert not changed.install()
    assert getattr(replacement.module, replacement.name) is original


@pytest.mark.parametrize("replacement", REPLACEMENTS, ids=lambda r: r.name)
def test_a_function_put_there_by_something_else_stays(monkeypatch, replacement: Replacement):
    def elsewhere(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("not called")

    monkeypatch.setattr(replacement.module, replacement.name, elsewhere)
    assert not replacement.install()
    assert getattr(replacement.module, replacement.name) is elsewhere

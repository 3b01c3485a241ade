"""The SDK's unknown-value check without its per-call reference cycle (components/sdk_cycles.py):
the replacement answers as the SDK's own function does, leaves nothing for the cyclic collector,
is in place when the program runs, and steps aside for an SDK whose function changed."""

from __future__ import annotations

import ast
import gc
import random
from typing import Any

import pytest
from pulumi.output import UNKNOWN
from pulumi.runtime import known_types, rpc

from components import sdk_cycles
from tools.harness.stacks import run_program


def sdk_function():
    """The SDK's own `contains_unknowns`, compiled from rpc.py (the module attribute may already
    be the replacement in this process)."""
    definition = sdk_cycles.sdk_definition()
    assert definition is not None, "rpc.py defines no contains_unknowns"
    _, node = definition
    namespace: dict[str, Any] = {"Any": Any, "known_types": known_types, "__name__": rpc.__name__}
    exec(compile(ast.Module([node], []), rpc.__file__, "exec"), namespace)
    return namespace["contains_unknowns"]


def random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.choice(
        ["str", "int", "none", "unknown", "dict", "list", "tuple"]
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
    return {"str": "x", "int": 7, "none": None}[kind]


def test_the_sdk_function_is_the_one_replaced():
    # Fails on an SDK whose contains_unknowns changed: read the new one, then update the digest
    # (or drop the module when the SDK no longer makes the cycle). Read from rpc.py, so the
    # same once the replacement is in place (any test running the program installs it).
    assert sdk_cycles.install()
    assert sdk_cycles.sdk_source_digest() == sdk_cycles.SDK_SOURCE_SHA256


def test_answers_as_the_sdk_does():
    original = sdk_function()
    rng = random.Random(20261201)
    values = [random_value(rng) for _ in range(2000)]
    shared: list[Any] = [UNKNOWN]
    looped: dict[str, Any] = {"a": 1}
    looped["self"] = looped
    values += [UNKNOWN, [], {}, {"a": shared, "b": shared}, looped, [looped, UNKNOWN]]
    assert any(original(v) for v in values) and not all(original(v) for v in values)
    assert [sdk_cycles.contains_unknowns(v) for v in values] == [original(v) for v in values]


def test_leaves_nothing_for_the_cyclic_collector():
    original = sdk_function()
    value = {"a": [1, {"b": "c"}], "d": "e"}
    gc.disable()
    try:
        gc.collect()
        for _ in range(50):
            original(value)
        assert gc.collect() >= 50  # the SDK's closure: at least one object per call
        for _ in range(50):
            sdk_cycles.contains_unknowns(value)
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_the_program_runs_with_the_replacement():
    run_program("dev")
    assert rpc.contains_unknowns is sdk_cycles.contains_unknowns
    assert sdk_cycles.install()


def test_install_replaces_the_sdks_own_function(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(rpc, "contains_unknowns", sdk_function())
    assert sdk_cycles.install()
    assert rpc.contains_unknowns is sdk_cycles.contains_unknowns


def test_an_sdk_with_another_function_keeps_its_own(monkeypatch: pytest.MonkeyPatch):
    original = sdk_function()
    monkeypatch.setattr(rpc, "contains_unknowns", original)
    monkeypatch.setattr(sdk_cycles, "SDK_SOURCE_SHA256", "0" * 64)  # as if rpc.py had changed
    assert not sdk_cycles.install()
    assert rpc.contains_unknowns is original


def test_a_function_put_there_by_something_else_stays(monkeypatch: pytest.MonkeyPatch):
    def changed(val: Any) -> bool:
        return known_types.is_unknown(val)

    monkeypatch.setattr(rpc, "contains_unknowns", changed)
    assert not sdk_cycles.install()
    assert rpc.contains_unknowns is changed

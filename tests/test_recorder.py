"""The harness's stand-in for the engine answers as the SDK's mock monitor does
(tools/harness/recorder.py `RecordingMonitor.answer`), only faster."""

from __future__ import annotations

import hashlib
import inspect
import math
import random
from typing import Any

import pytest
from pulumi.output import Unknown
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc
from pulumi.runtime.sync_await import _sync_await

from tools.harness import recorder
from tools.harness.stacks import run_program

# pulumi 3.272.0 `MockMonitor.RegisterResource`, which `RecordingMonitor.answer` follows.
SDK_REGISTER_RESOURCE_SHA256 = "756b6fbc95aee5833987b9b532b5d10c364e29c37c2f6a52363592ebab2565e5"


def test_answer_follows_the_sdks_mock_monitor():
    source = inspect.getsource(pulumi_mocks.MockMonitor.RegisterResource)
    assert hashlib.sha256(source.encode()).hexdigest() == SDK_REGISTER_RESOURCE_SHA256, (
        "the SDK's MockMonitor.RegisterResource changed: bring RecordingMonitor.answer in line "
        "with it, then update the digest"
    )


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_every_registration_is_answered_as_the_sdks_mock_monitor_does(monkeypatch, stack: str):
    ours = recorder.RecordingMonitor.answer
    plain = recorder.plain_struct
    answered: list[tuple[str, bool]] = []
    fast: list[bool] = []

    def both(self, request):
        answer = ours(self, request)
        sdk = pulumi_mocks.MockMonitor.RegisterResource(self, request)
        same = answer.SerializeToString(deterministic=True) == sdk.SerializeToString(
            deterministic=True
        )
        answered.append((f"{request.type}::{request.name}", same))
        return answer

    def counted(state):
        struct = plain(state)
        fast.append(struct is not None)
        return struct

    monkeypatch.setattr(recorder.RecordingMonitor, "answer", both)
    monkeypatch.setattr(recorder, "plain_struct", counted)
    graph = run_program(stack)
    assert len(answered) > len(graph)  # the root stack's and every resource's
    assert [name for name, same in answered if not same] == []
    # The program's state is plain data throughout: every answer took the synchronous path.
    assert len(fast) == len(graph) and all(fast)


def _sdk_struct(state: dict[str, Any]):
    return _sync_await(rpc.serialize_properties(state, {}))


def _random_plain(rng: random.Random, depth: int = 0) -> Any:
    kinds = ["str", "int", "float", "bool", "none"]
    if depth < 4:
        kinds += ["list", "tuple", "dict"]
    kind = rng.choice(kinds)
    if kind == "str":
        return rng.choice(["", "a", "ubuntu", rpc.UNKNOWN, "x" * rng.randrange(300)])
    if kind == "int":
        return rng.randrange(-(2**40), 2**40)
    if kind == "float":
        return rng.choice([0.0, -1.5, 1e300, math.inf, rng.random()])
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "none":
        return None
    items = [_random_plain(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == "list":
        return items
    if kind == "tuple":
        return tuple(items)
    return {f"k{index}": item for index, item in enumerate(items)}


def test_plain_state_serializes_as_the_sdks_serializer_does():
    rng = random.Random(12)
    for _ in range(500):
        state = {f"p{index}": _random_plain(rng) for index in range(rng.randrange(6))}
        ours = recorder.plain_struct(state)
        assert ours is not None
        assert ours == _sdk_struct(state), state


def test_secret_markers_are_plain_data_serialized_as_they_are():
    state = {"connection": rpc.wrap_rpc_secret({"host": "10.0.0.1", "privateKey": "k"})}
    assert recorder.plain_struct(state) == _sdk_struct(state)


class _Mapping(dict):
    """A dict subclass: the SDK serializes it key by key through its own iteration."""


@pytest.mark.parametrize(
    "value",
    [Unknown(), _Mapping(a="b"), {1: "a"}, {"a": [Unknown()]}, object()],
    ids=["unknown", "dict subclass", "non-string key", "nested unknown", "other object"],
)
def test_anything_else_is_left_to_the_sdks_serializer(value):
    assert recorder.plain_struct({"p": value}) is None

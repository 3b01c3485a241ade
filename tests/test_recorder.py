"""The harness's stand-in for the engine answers as the SDK's mock monitor does
(tools/harness/recorder.py `RecordingMonitor.answer`), only faster."""

from __future__ import annotations

import copy
import hashlib
import inspect
import math
import random
from typing import Any

import pytest
from google.protobuf import json_format, struct_pb2
from pulumi.output import Unknown
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc
from pulumi.runtime.proto import resource_pb2
from pulumi.runtime.sync_await import _sync_await

from components import sdk_values
from tools.harness import recorder
from tools.harness.graph import Secret
from tools.harness.mocks import Mocks
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
    answered: list[tuple[str, bool]] = []
    read: list[bool] = []
    written: list[bool] = []
    copied: list[int] = []

    def both(self, request):
        answer = ours(self, request)
        sdk = pulumi_mocks.MockMonitor.RegisterResource(self, request)
        same = answer.SerializeToString(deterministic=True) == sdk.SerializeToString(
            deterministic=True
        )
        recorded = recorder.decode(request.object)
        expected = _json_mapping(json_format.MessageToDict(request.object))
        same = same and _typed(recorded) == _typed(expected)
        answered.append((f"{request.type}::{request.name}", same))
        return answer

    def reading(self, struct):
        answer = read_inputs(self, struct)
        read.append(answer is not None)
        return answer

    def writing(state, struct=None, sent=None):
        struct = plain_struct(state, struct, sent)
        written.append(struct is not None)
        return struct

    def sending(self, *args):
        sent = sent_as_read(self, *args)
        copied.append(len(sent))
        return sent

    plain_struct = recorder.plain_struct
    read_inputs = recorder.RecordingMonitor._read_inputs
    sent_as_read = recorder.RecordingMonitor._sent_as_read
    monkeypatch.setattr(recorder.RecordingMonitor, "answer", both)
    monkeypatch.setattr(recorder.RecordingMonitor, "_read_inputs", reading)
    monkeypatch.setattr(recorder.RecordingMonitor, "_sent_as_read", sending)
    monkeypatch.setattr(recorder, "plain_struct", writing)
    graph = run_program(stack)
    assert len(answered) > len(graph)  # the root stack's and every resource's
    assert [name for name, same in answered if not same] == []
    # The program's inputs and state are plain data throughout: every registration took the
    # direct path both ways (so the comparison above is of that path).
    assert len(read) == len(written) == len(graph) and all(read) and all(written)
    # Most values the mocks pass on are copied from the request, not written again.
    assert sum(copied) > 3 * len(graph)


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


def _monitor() -> recorder.RecordingMonitor:
    return recorder.RecordingMonitor(Mocks(), record_inputs=False)


def test_inputs_are_read_as_the_sdk_reads_them_first_and_remembered():
    # The stand-in reads each map or list once per serialized form: the same answer as
    # `plain_properties`, read afresh or remembered (the same objects again).
    rng = random.Random(43)
    monitor = _monitor()
    remembered = 0
    for _ in range(600):
        state = {f"p{i}": _with_secrets(rng, _random_plain(rng)) for i in range(rng.randrange(6))}
        request = _sdk_struct(state)
        expected = sdk_values.plain_properties(request)
        first, again = monitor._read_inputs(request), monitor._read_inputs(request)
        if expected is None:
            assert first is again is None
            continue
        assert _typed(first[0]) == _typed(again[0]) == _typed(expected), state
        assert first[1] == again[1]
        remembered += sum(
            1
            for key, value in first[0].items()
            if type(value) in (dict, list) and again[0][key] is value
        )
    assert remembered > 200


def test_values_passed_on_are_answered_as_the_sdks_mock_monitor_answers_them():
    # The mock monitor reads the request, a mock passes values on, the SDK writes them back:
    # what `_sent_as_read` copies from the request instead must be what that writes.
    rng = random.Random(41)
    monitor = _monitor()
    copied = rewritten = 0
    for _ in range(600):
        state = {f"p{i}": _with_secrets(rng, _random_plain(rng)) for i in range(rng.randrange(6))}
        request = _sdk_struct(state)
        read = monitor._read_inputs(request)
        if read is None:  # an unknown among them: read and written by the SDK
            continue
        inputs, raws = read
        passed_on = dict(inputs)
        if passed_on and rng.random() < 0.3:  # a mock changes one, with an equal-looking value
            key = rng.choice(list(passed_on))
            passed_on[key] = copy.deepcopy(passed_on[key])
        sent = monitor._sent_as_read(request, inputs, raws, passed_on)
        answer = recorder.plain_struct(passed_on, None, {k: request.fields[k] for k in sent})
        expected = _sdk_struct(passed_on)
        assert answer.SerializeToString(deterministic=True) == expected.SerializeToString(
            deterministic=True
        ), state
        copied += len(sent)
        rewritten += len(passed_on) - len(sent)
    assert copied > 300 and rewritten > 100
    # A secret with more than its signature and value reads as the two alone.
    request = _sdk_struct({"p": {**rpc.wrap_rpc_secret("v"), "more": "x"}})
    inputs, raws = monitor._read_inputs(request)
    assert monitor._sent_as_read(request, inputs, raws, dict(inputs)) == set()


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
    # Written into an answer: what was written before the value is taken out again.
    answer = resource_pb2.RegisterResourceResponse(urn="u")
    assert recorder.plain_struct({"a": "written first", "p": value}, answer.object) is None
    assert answer.object == struct_pb2.Struct()


def test_state_is_written_into_the_struct_it_is_given():
    answer = resource_pb2.RegisterResourceResponse(urn="u")
    state = {"stdin": "x" * 5000, "n": 1, "m": {"k": [True, None]}}
    assert recorder.plain_struct(state, answer.object) is answer.object
    assert answer.object == _sdk_struct(state)


def _with_secrets(rng: random.Random, value: Any) -> Any:
    """`value` with some of its parts made secrets, as the SDK serializes a secret Output."""
    if isinstance(value, dict):
        value = {k: _with_secrets(rng, v) for k, v in value.items()}
    elif isinstance(value, list | tuple):
        value = [_with_secrets(rng, v) for v in value]
    return rpc.wrap_rpc_secret(value) if rng.random() < 0.15 else value


def _json_mapping(value: Any, strings: dict[str, str] | None = None) -> Any:
    """What the recording is specified to be: protobuf's JSON mapping of the struct
    (`json_format.MessageToDict`), with secrets as `Secret`, whole numbers as ints and long
    strings shared."""
    if isinstance(value, dict):
        if value.get(rpc._special_sig_key) == rpc._special_secret_sig:
            return Secret(_json_mapping(value.get("value"), strings))
        return {k: _json_mapping(v, strings) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_mapping(v, strings) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if strings and isinstance(value, str) and len(value) >= recorder._SHARED_STRING_CHARS:
        return strings.get(value, value)
    return value


def _typed(value: Any) -> Any:
    """`value` with each scalar paired with its type (1 == 1.0 == True in Python), and each
    `Unknown` (equal only to itself) as one."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    if isinstance(value, Secret):
        return ("secret", _typed(value.value))
    if isinstance(value, Unknown):
        return "<unknown>"
    return (type(value).__name__, value)


def test_recorded_inputs_are_protobufs_json_mapping_of_them():
    rng = random.Random(3)
    for _ in range(300):
        state = {f"p{i}": _with_secrets(rng, _random_plain(rng)) for i in range(rng.randrange(6))}
        struct = _sdk_struct(state)
        try:
            expected = _json_mapping(json_format.MessageToDict(struct))
        except ValueError:  # an infinity: protobuf's JSON mapping has none
            with pytest.raises(ValueError):
                recorder.decode(struct)
            continue
        assert _typed(recorder.decode(struct)) == _typed(expected), state


def test_long_strings_are_shared_with_the_stand_ins_copy():
    script = "#!/bin/bash\n" + "echo step\n" * 40
    shared = {script: script}
    copy = "".join(list(script))  # equal, another object
    assert copy is not script
    decoded = recorder.decode(_sdk_struct({"stdin": copy, "list": [copy]}), shared)
    assert decoded["stdin"] is script and decoded["list"][0] is script
    assert recorder.decode(_sdk_struct({"stdin": copy}))["stdin"] is not script


def test_the_stand_in_answers_one_registration_at_a_time(monkeypatch):
    # The SDK registers from several executor threads at once; the stand-in's memories of what
    # it read drop their oldest entry once full, which two threads at once would both try.
    held = []
    new_resource = Mocks.new_resource

    def checking(self, args):
        held.append(recorder.runtime_settings.get_monitor().answering.locked())
        return new_resource(self, args)

    monkeypatch.setattr(Mocks, "new_resource", checking)
    graph = run_program("dev", record_inputs=False)
    assert len(held) == len(graph) and all(held)

"""The harness's recorder (tools/harness/recorder.py): it answers with the SDK's own mock monitor
and records each request as protobuf's JSON mapping reads it."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from google.protobuf import json_format
from pulumi.output import Unknown
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc
from pulumi.runtime.sync_await import _sync_await

from tools.harness import recorder
from tools.harness.graph import Secret
from tools.harness.stacks import run_program


def test_the_recorder_replaces_nothing_of_the_sdks_mock_monitor():
    # Only the URN (the engine's form, not the mock's), the recording (of the registrations, the
    # stack's outputs and the resource hooks' names), the output the engine keeps for a Stash
    # it does not create again (a `same` step) and, in a preview, pulumi-command's unknown
    # outputs for a command it would run (`_computed_in_preview`) are its own. The two helpers
    # adjust the SDK's answer in RegisterResource after it; neither is a method of the SDK's.
    own = {
        name
        for name, value in vars(recorder.RecordingMonitor).items()
        if callable(value) and not name.startswith("__")
    }
    assert own == {
        "make_urn",
        "RegisterResource",
        "_keep_stash_output",
        "_computed_in_preview",
        "_record",
        "RegisterResourceOutputs",
        "RegisterResourceHook",
    }
    helpers = {"_keep_stash_output", "_computed_in_preview", "_record"}
    assert not helpers & set(dir(pulumi_mocks.MockMonitor)), "a helper shadows the SDK's"


def test_every_registration_is_recorded_once_with_the_sdks_answer():
    answered: list[str] = []
    register = pulumi_mocks.MockMonitor.RegisterResource

    def counting(self, request):
        answered.append(request.name)
        return register(self, request)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pulumi_mocks.MockMonitor, "RegisterResource", counting)
        graph = run_program("dev")
    assert sorted(r.name for r in graph) == sorted(answered[1:]), "root stack first, then each"


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

"""The one module on private Pulumi SDK internals: record what the engine would receive.

`record(program, mocks, project=..., stack=...)` runs `program` in-process with
`preview=False` (with preview, applies never run and assertions pass vacuously) against a
`RecordingMonitor`, a subclass of the SDK's `MockMonitor` that keeps each
`RegisterResourceRequest`, and returns the `Graph` of them. It relies on `pulumi.runtime.mocks.
MockMonitor`, `pulumi.runtime.settings` (ROOT, SETTINGS, get_root_resource),
`pulumi.runtime.stack` (massage, run_pulumi_func) and `pulumi.runtime.sync_await._sync_await`;
an SDK upgrade that moves them breaks only this module. `RecordingMonitor.answer` is the SDK's
`MockMonitor.RegisterResource` with a faster way to the same answer; tests/test_recorder.py pins
the SDK's source it follows and compares the two answers for every resource of every stack.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

from google.protobuf import json_format, struct_pb2
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc
from pulumi.runtime import settings as runtime_settings
from pulumi.runtime.proto import resource_pb2
from pulumi.runtime.stack import massage, run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from components.sdk_struct import set_item
from components.sdk_values import (
    SCALARS,
    NotPlain,
    deserialize_properties,
    plain_properties,
    remember,
)
from tools.harness.graph import Graph, Resource, Secret

# How the SDK marks a secret value in a serialized struct.
_SECRET_SIG = rpc._special_secret_sig
_SIG_KEY = rpc._special_sig_key

ROOT_STACK_TYPE = "pulumi:pulumi:Stack"
# Strings at least this long (rendered host scripts, manifests) are kept once: the recorded
# inputs share them with the mock monitor's copy of the same resource's state.
_SHARED_STRING_CHARS = 256


def engine_urn(parent: str | None, type_: str, name: str, *, project: str, stack: str) -> str:
    """The URN the engine gives a resource (pulumi/pulumi `pkg/resource/deploy/deployment.go`,
    `generateURN`): the parent's *whole* qualified type, then `$` and the resource's type; no
    parent type for the root stack. The SDK's MockMonitor.make_urn differs on both counts (it
    keeps only the parent's last type and puts the root stack's type in front), so a snapshot of
    its URNs would not be the identities a running stack has."""
    qualified = type_
    if parent:
        parent_qualified = parent.split("::")[2]
        if parent_qualified != ROOT_STACK_TYPE:
            qualified = f"{parent_qualified}${type_}"
    return f"urn:pulumi:{stack}::{project}::{qualified}::{name}"


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """The SDK's mock monitor, recording each registration request as the engine would see it."""

    def __init__(self, mocks: pulumi_mocks.Mocks, *, record_inputs: bool = True):
        super().__init__(mocks)
        # Without inputs (tools.benchmark) neither the recording nor the mock monitor keeps a
        # resource's state once answered: under `pulumi up` the engine's copy of every input
        # lives in the engine's own process, not in the program's memory.
        self.record_inputs = record_inputs
        self.recorded: list[Resource] = []
        self.outputs_by_urn: dict[str, dict[str, Any]] = {}
        # The SDK's MockMonitor keeps every resource's state (its inputs, for a mock that echoes
        # them) and the program keeps the outputs: without sharing, each stdin of every step
        # would be held a third time here (a third of the harness's memory at 1,000 nodes).
        self._strings: dict[str, str] = {}
        # CPU seconds spent here, standing in for the engine and the providers (deserializing
        # inputs, the mocks, serializing state, recording): work the program's own process does
        # not do under `pulumi up`, where the engine is another process.
        self.engine_cpu_seconds = 0.0
        # Maps and lists of the requests read, by their serialized form (`_read_inputs`).
        self._read: dict[bytes, Any] = {}
        # Whether each of those writes back as read (`_as_written`), by the same form.
        self._written: dict[bytes, bool] = {}
        # The SDK calls RegisterResource from its executor's threads, several at once: one
        # request is answered at a time, so the memories above (which drop their oldest entry
        # once full) and the CPU count are never changed by two threads together. (At 256
        # nodes two threads dropped the same entry: a KeyError.)
        self.answering = threading.Lock()

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        if type_ == ROOT_STACK_TYPE:
            return super().make_urn(parent, type_, name)
        return engine_urn(
            parent or None,
            type_,
            name,
            project=runtime_settings.get_project(),
            stack=runtime_settings.get_stack(),
        )

    def RegisterResource(self, request):
        with self.answering:
            started = time.thread_time()
            try:
                return self._register(request)
            finally:
                self.engine_cpu_seconds += time.thread_time() - started

    def answer(self, request):
        """The SDK's `MockMonitor.RegisterResource` (pulumi/runtime/mocks.py), answering the same,
        but reading the inputs and writing the mock's state straight from and to protobuf when
        they are plain data (`_read_inputs`, `plain_struct`), whether or not the program
        installed its SDK replacements. The SDK's serializer ran its own event loop to
        completion for every registration (half of this stand-in's time), and its deserializer
        reads every value through protobuf's Python Struct wrappers."""
        urn = self.make_urn(request.parent, request.type, request.name)
        if request.type == ROOT_STACK_TYPE:
            return resource_pb2.RegisterResourceResponse(urn=urn)
        # Deserializing a resource reference needs an event loop on this thread.
        pulumi_mocks._ensure_event_loop()
        read = self._read_inputs(request.object)
        plain = read is not None
        inputs, raws = read if plain else (deserialize_properties(request.object), {})
        resource_args = pulumi_mocks.MockResourceArgs(
            typ=request.type,
            name=request.name,
            inputs=inputs,
            provider=request.provider,
            resource_id=request.importId,
            custom=request.custom or False,
            transforms=pulumi_mocks._resolve_callbacks(request.transforms),
        )
        id_, state = self.mocks.new_resource(resource_args)
        # The state is written into the answer itself: a message given to a message's
        # constructor is copied by serializing it and parsing the bytes back (protobuf
        # `python/message.c`: `PyUpb_Message_InitMessageAttribute` merges it with
        # `_PyUpb_Message_MergeFrom_LockHeld`), three passes over every rendered script.
        response = resource_pb2.RegisterResourceResponse(urn=urn, id=id_)
        response.object.SetInParent()  # present, even empty, as the SDK's answer has it
        fields = request.object.fields
        sent = self._sent_as_read(request.object, inputs, raws, state) if plain else set()
        if sent and len(sent) == len(fields):
            # Every input goes back as it came (most answers): the request's whole map at
            # once, then what the mock added.
            response.object.CopyFrom(request.object)
            written = plain_struct(
                {k: v for k, v in state.items() if k not in sent}, response.object
            )
        else:
            written = plain_struct(state, response.object, {k: fields[k] for k in sent})
        if written is None:
            response.object.CopyFrom(_sync_await(rpc.serialize_properties(state, {})))
        self.resources[urn] = pulumi_mocks.MockMonitor.ResourceRegistration(urn, id_, state)
        return response

    def _read_inputs(
        self, struct: struct_pb2.Struct
    ) -> tuple[dict[str, Any], dict[str, bytes]] | None:
        """`sdk_values.plain_properties(struct)` (None for anything but plain data), each map
        or list read once per serialized form (the mocks change none in place: every step on
        a machine sends the same connection), with each one's serialized form by key."""
        if _SIG_KEY in struct.fields:
            return None  # a secret as a whole: never a resource's inputs; the SDK's way
        raws: dict[str, bytes] = {}
        inputs = plain_properties(struct, self._read, raws)
        return None if inputs is None else (inputs, raws)

    def _sent_as_read(
        self,
        struct: struct_pb2.Struct,
        inputs: dict[str, Any],
        raws: dict[str, bytes],
        state: dict[str, Any],
    ) -> set[str]:
        """The keys of `state` whose values are inputs as read (the same objects: a mock passes
        them on and changes none in place) and write back as the request has them
        (`_as_written`, decided once per serialized form of a map or list): the answer copies
        the request's own values for those instead of writing them again."""
        fields = struct.fields
        written = self._written
        sent = set()
        for key in state:
            if key not in inputs or inputs[key] is not state[key]:
                continue
            raw = raws.get(key)
            if raw is not None:
                writes_back = written.get(raw)
                if writes_back is None:
                    writes_back = remember(written, raw, _as_written(fields[key], raw))
                if not writes_back:
                    continue
            sent.add(key)
        return sent

    def _register(self, request):
        response = self.answer(request)
        if request.type == ROOT_STACK_TYPE:
            return response
        registered = self.resources.get(response.urn)
        if registered is not None:
            if self.record_inputs:
                _collect_strings(registered.state, self._strings)
            else:
                self.resources[response.urn] = registered._replace(state={})
        timeouts = request.customTimeouts
        # By key, not `.items()`: a protobuf map's items view is the Mapping ABC's, in Python.
        by_property = request.propertyDependencies
        self.recorded.append(
            Resource(
                type=request.type,
                name=request.name,
                urn=response.urn,
                parent=request.parent or None,
                custom=request.custom,
                dependencies=set(request.dependencies),
                property_dependencies={key: set(by_property[key].urns) for key in by_property},
                provider=request.provider or None,
                inputs=decode(request.object, self._strings) if self.record_inputs else {},
                custom_timeouts={
                    k: v
                    for k, v in (
                        ("create", timeouts.create),
                        ("update", timeouts.update),
                        ("delete", timeouts.delete),
                    )
                    if v
                },
                additional_secret_outputs=list(request.additionalSecretOutputs),
                replace_on_changes=list(request.replaceOnChanges),
                delete_before_replace=request.deleteBeforeReplace,
                ignore_changes=list(request.ignoreChanges),
                protect=request.protect,
                # Alias specs (or URNs) as the engine receives them; harness.identity resolves
                # them the way the engine's step generator does.
                aliases=[
                    {"urn": alias.urn} if alias.urn else json_format.MessageToDict(alias.spec)
                    for alias in request.aliases
                ]
                + [{"urn": urn} for urn in request.aliasURNs],
            )
        )
        return response

    def RegisterResourceOutputs(self, request):
        started = time.thread_time()
        try:
            self.outputs_by_urn[request.urn] = decode(request.outputs)
            return super().RegisterResourceOutputs(request)
        finally:
            self.engine_cpu_seconds += time.thread_time() - started

    def Invoke(self, request):
        started = time.thread_time()
        try:
            return super().Invoke(request)
        finally:
            self.engine_cpu_seconds += time.thread_time() - started


def _plain(value: Any) -> Any:
    """What `rpc.serialize_property` makes of plain data, without an event loop: strings,
    numbers, booleans and None as they are, lists and tuples as lists, dicts with string keys
    key by key (no type, so no key is translated)."""
    kind = type(value)
    if kind in SCALARS:
        return value
    if kind is dict:
        if not all(type(key) is str for key in value):
            raise NotPlain
        return {key: _plain(item) for key, item in value.items()}
    if kind is list or kind is tuple:
        return [_plain(item) for item in value]
    raise NotPlain


# In a serialized Struct: a map entry whose value (field 2, 2 bytes) is a Value holding
# `null_value` (field 1, varint 0). Reading a map leaves its nulls out.
_NULL_IN_MAP = b"\x12\x02\x08\x00"
_SECRET_BYTES = _SECRET_SIG.encode()


def _as_written(value: struct_pb2.Value, raw: bytes) -> bool:
    """Whether a map or list Value (serialized: `raw`) writes back as `plain_properties` reads
    it. The reading changes a value only by leaving out the nulls of a map and by lifting a
    secret inside a map or list to the whole: a Value whose bytes hold neither a null map
    entry nor a secret signature but the one of a secret that is the whole value reads and
    writes back as it is (bytes that only look like one of those leave the value to be
    written, which is never wrong)."""
    if _NULL_IN_MAP in raw:
        return False
    secrets = raw.count(_SECRET_BYTES)
    return not secrets or (secrets == 1 and _is_whole_secret(value))


def _is_whole_secret(value: struct_pb2.Value) -> bool:
    """A Value that is a secret as the SDK writes one: its signature and its value alone."""
    if value.WhichOneof("kind") != "struct_value":
        return False
    fields = value.struct_value.fields
    return len(fields) == 2 and _SIG_KEY in fields and "value" in fields


def plain_struct(
    state: dict[str, Any],
    struct: struct_pb2.Struct | None = None,
    sent: dict[str, struct_pb2.Value] | None = None,
) -> struct_pb2.Struct | None:
    """`rpc.serialize_properties(state, {})` for state made of plain data (top-level values
    that serialize to None are left out, as there), written into `struct` (an empty one) or a
    new Struct, the values in `sent` copied from the Values given there; None for anything
    else, with `struct` left empty."""
    if struct is None:
        struct = struct_pb2.Struct()
    try:
        for key in state:
            if type(key) is not str:
                raise NotPlain
            if sent and key in sent:
                struct.fields[key].CopyFrom(sent[key])
                continue
            value = _plain(state[key])
            if value is not None:
                set_item(struct, key, value)
    except NotPlain:
        struct.Clear()
        return None
    return struct


def decode(struct: struct_pb2.Struct, strings: dict[str, str] | None = None) -> Any:
    """A serialized struct as plain values, as protobuf's JSON mapping reads it
    (`json_format.MessageToDict`: nulls as None, numbers as floats, and infinities or NaN
    refused), then with secrets as `Secret`, whole numbers as ints, and strings of at least
    `_SHARED_STRING_CHARS` replaced by the equal one in `strings` when there is one."""
    fields = struct.fields
    decoded = {key: _decode_value(fields[key], strings) for key in fields}
    if decoded.get(_SIG_KEY) == _SECRET_SIG:
        return Secret(decoded.get("value"))
    return decoded


def _decode_value(value: struct_pb2.Value, strings: dict[str, str] | None) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        text = value.string_value
        if strings and len(text) >= _SHARED_STRING_CHARS:
            return strings.get(text, text)
        return text
    if kind == "number_value":
        number = value.number_value
        if math.isinf(number) or math.isnan(number):
            raise ValueError(f"{number} is not a JSON number (json_format refuses it too)")
        return int(number) if number.is_integer() else number
    if kind == "bool_value":
        return value.bool_value
    if kind == "struct_value":
        return decode(value.struct_value, strings)
    if kind == "list_value":
        return [_decode_value(item, strings) for item in value.list_value.values]
    return None  # a null, or a value with no kind set (which json_format reads as null too)


def _collect_strings(value: Any, strings: dict[str, str]) -> None:
    """Every long string in `value` (nested dicts and lists) into `strings`."""
    if isinstance(value, str):
        if len(value) >= _SHARED_STRING_CHARS:
            strings.setdefault(value, value)
    elif isinstance(value, dict):
        for item in value.values():
            _collect_strings(item, strings)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect_strings(item, strings)


def record(
    program: Callable[[], None],
    mocks: pulumi_mocks.Mocks,
    *,
    project: str,
    stack: str,
    record_inputs: bool = True,
) -> Graph:
    """Run `program` as `pulumi up` would (engine config already set) and return its graph;
    without `record_inputs` its resources carry no inputs (types, names, options and
    dependencies only) and the mock monitor keeps no state."""
    runtime_settings.ROOT.set(None)
    monitor = RecordingMonitor(mocks, record_inputs=record_inputs)
    pulumi_mocks.set_mocks(mocks, project=project, stack=stack, preview=False, monitor=monitor)
    runtime_settings.SETTINGS.outputs.clear()

    def main() -> None:
        program()
        # set_mocks registered the root stack's (empty) outputs before the program ran; register
        # what the program exported, as `pulumi up` does when the program returns.
        root = runtime_settings.get_root_resource()
        if root is not None and getattr(root, "outputs", None):
            root.register_outputs(massage(root.outputs, []))

    _sync_await(run_pulumi_func(main))
    stack_urn = f"urn:pulumi:{stack}::{project}::{ROOT_STACK_TYPE}::{project}-{stack}"
    for resource in monitor.recorded:
        resource.outputs = monitor.outputs_by_urn.get(resource.urn, {})
    graph = Graph(monitor.recorded, monitor.outputs_by_urn.get(stack_urn, {}))
    graph.engine_cpu_seconds = monitor.engine_cpu_seconds
    return graph

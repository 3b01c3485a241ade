"""Record what the engine would receive: the one module that reads the SDK's mock monitor.

`record(program, mocks, project=..., stack=...)` runs `program` in-process with `preview=False`
(with preview, applies of unknown values never run and their assertions pass vacuously; a test
of what a preview shows asks for it, `preview=True`) against a `RecordingMonitor`, a
subclass of the SDK's `MockMonitor` that answers as the SDK does and keeps each
`RegisterResourceRequest`, and returns the `Graph` of them. It reads `pulumi.runtime.mocks`,
`pulumi.runtime.settings` and `pulumi.runtime.stack`; it replaces nothing of the SDK.
"""

from __future__ import annotations

import gc
import hashlib
import math
import threading
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import pulumi
from google.protobuf import json_format, struct_pb2
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc
from pulumi.runtime import settings as runtime_settings
from pulumi.runtime.stack import massage, run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from tools.harness.graph import Graph, Resource, Secret, unwrap

# How the SDK marks a secret value in a serialized struct.
_SECRET_SIG = rpc._special_secret_sig
_ARCHIVE_SIG = rpc._special_archive_sig
_SIG_KEY = rpc._special_sig_key

ROOT_STACK_TYPE = "pulumi:pulumi:Stack"
STASH_TYPE = "pulumi:index:Stash"
# The lifecycle points a resource hook binds to (RegisterResourceRequest.ResourceHooksBinding).
HOOK_POINTS = (
    "before_create",
    "after_create",
    "before_update",
    "after_update",
    "before_delete",
    "after_delete",
    "on_error",
)
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

    def __init__(
        self,
        mocks: pulumi_mocks.Mocks,
        *,
        record_inputs: bool = True,
        state: Graph | None = None,
        replace: Collection[str] = (),
        preview: bool = False,
    ):
        super().__init__(mocks)
        # `pulumi preview`: a command updated or created answers with unknown outputs.
        self.preview = preview
        # What `pulumi up --replace` names (names or URNs): replaced, so created from inputs.
        self.replace = frozenset(replace)
        # The state this run updates (None: a new stack): what the engine keeps from it, and the
        # ids this run gave resources the state does not hold (they are new).
        self.state = state
        self._new_ids: set[str] = set()
        # Without inputs (tools.benchmark) neither the recording nor the mock monitor keeps a
        # resource's state once answered: under `pulumi up` the engine's copy of every input
        # lives in the engine's own process, not in the program's memory.
        self.record_inputs = record_inputs
        self.recorded: list[Resource] = []
        self.outputs_by_urn: dict[str, dict[str, Any]] = {}
        self.hooks: list[str] = []
        self.dry_run_hooks: list[str] = []
        # The SDK's MockMonitor keeps every resource's state (its inputs, for a mock that echoes
        # them) and the program keeps the outputs: without sharing, each stdin of every step
        # would be held a third time here (a third of the harness's memory at 1,000 nodes).
        self._strings: dict[str, str] = {}
        # The SDK calls RegisterResource from its executor's threads, several at once.
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
        self._keep_stash_output(request)
        response = super().RegisterResource(request)
        if request.type == ROOT_STACK_TYPE:
            return response
        self._computed_in_preview(request, response)
        if self.state is not None and response.urn not in self.state.by_urn and response.id:
            self._new_ids.add(response.id)
        with self.answering:
            self._record(request, response)
        return response

    def _record(self, request, response) -> None:
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
                inputs=with_archive_hashes(decode(request.object, self._strings))
                if self.record_inputs
                else {},
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
                replace_with=list(request.replace_with),
                replacement_trigger=_trigger(request),
                deleted_with=request.deletedWith or None,
                retain_on_delete=request.retainOnDelete,
                id=response.id,
                hooks=_hooks(request),
            )
        )

    def _computed_in_preview(self, request, response) -> None:
        """In a preview, pulumi-command (pulumi-go-provider infer/resource.go `markComputed`;
        `Command` keeps the default, every output depends on every input) answers a create, or
        an update whose inputs changed or are unknown, with its outputs unknown: `stdout` and
        `stderr` are then the SDK's unknown sentinel, which the program sees as unknown."""
        if not self.preview or not request.type.startswith("command:"):
            return
        stored = self.state.by_urn.get(response.urn) if self.state is not None else None
        if stored is not None and unwrap(stored.inputs) == unwrap(decode(request.object)):
            return
        for key in ("stdout", "stderr"):
            response.object.fields[key].string_value = rpc.UNKNOWN

    def _keep_stash_output(self, request) -> None:
        """A Stash the state holds, whose replacement trigger is unchanged and whose input is
        ignored, is a `same` step: the engine answers with the stored output, not this run's
        input (pulumi step_generator.go `shouldTriggerReplace`, `processIgnoreChanges`;
        builtins.go: Update and Read keep `output`). A trigger holding the id of a resource
        this run creates (a machine launched again) has changed, whatever id the mocks gave."""
        if self.state is None or request.type != STASH_TYPE:
            return
        urn = self.make_urn(request.parent, request.type, request.name)
        stored = self.state.by_urn.get(urn)
        if (
            stored is None
            or "input" not in request.ignoreChanges
            or self.replace & {urn, request.name}
        ):
            return
        old, new = stored.replacement_trigger, _trigger(request)
        if old is not None and new is not None:
            values = new if isinstance(new, list) else [new]
            if unwrap(old) != unwrap(new) or self._new_ids.intersection(
                v for v in unwrap(values) if isinstance(v, str)
            ):
                return
        kept = getattr(self.mocks, "kept_stash_outputs", None)
        if kept is not None:
            kept[request.name] = unwrap(stored.inputs.get("input"))

    def RegisterResourceOutputs(self, request):
        self.outputs_by_urn[request.urn] = decode(request.outputs)
        return super().RegisterResourceOutputs(request)

    def RegisterResourceHook(self, request):
        with self.answering:
            self.hooks.append(request.name)
            if request.on_dry_run:
                self.dry_run_hooks.append(request.name)
        return super().RegisterResourceHook(request)


def _hooks(request) -> dict[str, list[str]]:
    """The request's hook binding by lifecycle point, as the engine stores it."""
    if not request.HasField("hooks"):
        return {}
    binding = request.hooks
    return {p: list(getattr(binding, p)) for p in HOOK_POINTS if getattr(binding, p)}


def _trigger(request) -> Any:
    """The request's replacement trigger as a plain value (None when it has none)."""
    if not request.HasField("replacement_trigger"):
        return None
    value = request.replacement_trigger
    if value.WhichOneof("kind") in (None, "null_value"):
        return None
    return _decode_value(value, None)


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


def archive_hash(path: Path) -> str:
    """What identifies a directory archive's contents to the engine: it hashes the archive the
    SDK sends (by path) when it reads the request (pulumi sdk/go/common/resource/plugin/rpc.go
    `ComputeAssetHashes`; resource/archive/archive.go `EnsureHashWithWD`: a directory becomes a
    tar whose entries are each file's name, a fixed mode 0600, its size and bytes,
    `addNextFileToTar`). So the same names and contents give the same hash, any other its own;
    this is the sha256 of those, not of Go's tar bytes."""
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        data = file.read_bytes()
        name = file.relative_to(path).as_posix() if path.is_dir() else file.name
        digest.update(f"{name}\0{len(data)}\0".encode() + data)
    return digest.hexdigest()


def with_archive_hashes(value: Any) -> Any:
    """`value` with each path archive carrying the hash the engine computes for it (`hash`), so
    a plan sees a copy's source change when its files change, as the engine's diff does."""
    if isinstance(value, dict):
        if value.get(_SIG_KEY) == _ARCHIVE_SIG and isinstance(value.get("path"), str):
            return {**value, "hash": archive_hash(Path(value["path"]))}
        return {key: with_archive_hashes(item) for key, item in value.items()}
    if isinstance(value, list):
        return [with_archive_hashes(item) for item in value]
    return value


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
    state: Graph | None = None,
    replace: Collection[str] = (),
    preview: bool = False,
) -> Graph:
    """Run `program` as `pulumi up` would (engine config already set; with `preview`, as
    `pulumi preview`: `RecordingMonitor._computed_in_preview`) and return its graph; without
    `record_inputs` its resources carry no inputs (types, names, options and dependencies
    only) and the mock monitor keeps no state. With `state` (what an earlier run left), a
    resource the engine keeps answers with its stored outputs where the mocks' answer would
    differ (a Stash), unless `replace` (`pulumi up --replace`) names it."""
    runtime_settings.ROOT.set(None)
    monitor = RecordingMonitor(
        mocks, record_inputs=record_inputs, state=state, replace=replace, preview=preview
    )
    pulumi_mocks.set_mocks(mocks, project=project, stack=stack, preview=preview, monitor=monitor)
    runtime_settings.SETTINGS.outputs.clear()

    def main() -> None:
        program()
        # set_mocks registered the root stack's (empty) outputs before the program ran; register
        # what the program exported, as `pulumi up` does when the program returns.
        root = runtime_settings.get_root_resource()
        if root is not None and getattr(root, "outputs", None):
            root.register_outputs(massage(root.outputs, []))

    failure: BaseException | None = None
    try:
        _sync_await(run_pulumi_func(main))
    except pulumi.RunError as error:  # the program stopped itself (a user's mistake)
        failure = error
    if failure is not None:
        # Finalize the stopped run's futures here: one collected later, while CPython 3.11
        # builds an AST (pytest rewriting a module), breaks that build ("AST constructor
        # recursion depth mismatch", cpython#106905). Its traceback holds them: drop it.
        failure.__traceback__ = failure.__cause__ = failure.__context__ = None
        gc.collect()
        raise failure
    stack_urn = f"urn:pulumi:{stack}::{project}::{ROOT_STACK_TYPE}::{project}-{stack}"
    for resource in monitor.recorded:
        resource.outputs = monitor.outputs_by_urn.get(resource.urn, {})
    graph = Graph(monitor.recorded, monitor.outputs_by_urn.get(stack_urn, {}), tuple(monitor.hooks))
    return graph

"""Functions on the Pulumi Python SDK's hot path, replaced before any resource exists by
functions that answer the same and cost less.

Each `Replacement` stands in for named definitions of one SDK module (pulumi 3.272.0,
`sdk/python/lib/pulumi/`) and is installed only over the exact source it was written against
(a sha256 of those definitions): an SDK release that changes any of them keeps its own, and the
test that pins the digests fails so that this module is looked at again. Each is called through
its module attribute (a call inside the module looks the name up in the module's globals at
call time), so replacing the attribute reaches every caller; a module that imported the
function by name (`also`) gets the replacement too. Some answer the common case themselves and
hand every other to the SDK's own function (`wraps`).

- `rpc.contains_unknowns` defines a recursive closure `impl` on every call. `impl` refers to
  itself through its closure cell, so every call leaves a cycle (the function, its cell, its
  annotations and their `set[int]` alias) that only the cyclic garbage collector frees. The SDK
  calls it for every value an Output resolves to (`output._OutputData.__post_init__`,
  `rpc.resolve_properties`, `Output.all`), dozens of times per resource: a 1,000-node evaluation
  left 5.3 million such objects, and collecting them was about a fifth of its time. The
  replacement is the same walk as a module-level function, and answers a plain string, number
  or None (most calls: an `Unknown` is none of those types) without starting one.
- `resource._get_stack_trace` runs for every resource the program registers, in its
  constructor. It takes `traceback.extract_stack()`: a `FrameSummary` per frame of the stack, an
  `os.stat` of every file on it (`linecache.checkcache`) and the source line of every frame, to
  keep each frame's file and line only, and turns every file name into a URI through `pathlib`
  again. The replacement walks the frames itself (`sys._getframe`) by the same rule (the frames
  outside the third `__init__` from the top) and converts each file name once.
- The replacements of the walks through the dependency graph (`resource_cycle_breaker`,
  `rpc._expand_dependencies`, `_depends_on`) are in `components/sdk_dependencies.py`.
- The replacements of the functions that carry every value between the program and the engine
  are in `components/sdk_inputs.py` (serializing inputs, building the request),
  `components/sdk_struct.py` (writing them into the request's Struct),
  `components/sdk_values.py` (reading the answers), `components/sdk_outputs.py` (combining
  them with the inputs), `components/sdk_output_types.py` (building the answers' output-type
  objects) and `components/sdk_types.py` (the types all of them go by).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import inspect
import pathlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import CodeType, ModuleType
from typing import Any

from pulumi import _types
from pulumi.runtime import known_types, resource, resource_cycle_breaker, rpc
from pulumi.runtime.proto import resource_pb2, source_pb2

from components import (
    sdk_dependencies,
    sdk_inputs,
    sdk_output_types,
    sdk_outputs,
    sdk_struct,
    sdk_types,
    sdk_values,
)
from components.sdk_values import SCALARS

# The modules, which `pulumi.runtime`'s attributes of those names (functions) hide.
_depends_on = sdk_dependencies._depends_on
invoke = importlib.import_module("pulumi.runtime.invoke")


def contains_unknowns(val: Any) -> bool:
    """True when `val` is, or holds in nested dicts and lists, an unknown value: the SDK's
    `rpc.contains_unknowns` without its per-call closure."""
    if type(val) in SCALARS:
        return False
    if not isinstance(val, dict | list):  # what the walk answers for a value it cannot enter
        return known_types.is_unknown(val)
    return _contains_unknowns(val, set())


def _contains_unknowns(val: Any, seen_ids: set[int]) -> bool:
    if known_types.is_unknown(val):
        return True
    val_id = id(val)
    if val_id in seen_ids:
        return False
    seen_ids.add(val_id)
    # A plain string, number or None inside is never unknown, nor met again as a container:
    # skipped without a call (most values are strings), in a loop rather than `any` over a
    # generator, which is a frame per value.
    if isinstance(val, dict):
        kind = type(val)
        # A generated output type's `val[k]` checks `k` against its camelCase names to warn
        # (an if-chain per read) before `dict.__getitem__`: read as the dict it is unless `k`
        # is one it warns for (`sdk_output_types.warning_keys`, remembered per class).
        warns = None if kind is dict else WARNING_KEYS(kind)
        for k in val:
            item = val[k] if warns is None or k in warns else _DICT_GET(val, k)
            if type(item) not in SCALARS and _contains_unknowns(item, seen_ids):
                return True
        return False
    if isinstance(val, list):
        for item in val:  # noqa: SIM110 - see above
            if type(item) not in SCALARS and _contains_unknowns(item, seen_ids):
                return True
        return False
    return False


_DICT_GET = dict.__getitem__
WARNING_KEYS = sdk_types.by_identity(sdk_output_types.warning_keys)


# File name -> its `file:` URI, or None where the SDK gives no position (an empty or relative
# name). A program's frames come from a few dozen files.
_URIS: dict[str, str | None] = {}


def _uri(filename: str) -> str | None:
    try:
        return _URIS[filename]
    except KeyError:
        pass
    uri = None
    if filename:
        try:
            uri = pathlib.Path(filename).as_uri()
        except BaseException:  # as the SDK's `_get_source_position_for_frame`
            uri = None
    _URIS[filename] = uri
    return uri


# (code, offset of its last instruction) -> that frame as an entry of `StackTrace.frames`,
# serialized. The program's registrations carry 19 frames on average (the same types,
# registered from one loop, 7), from a few hundred offsets met again and again. Building two
# messages per frame in Python made the stack traces 8 % of the program's instructions per
# node; parsing the joined entries (in protobuf's C) takes that from 9.4 to 5.3 million
# (callgrind, 4 to 12 nodes). And a frame's `f_lineno` reads its code's line table up to that
# offset on every call (CPython 3.11 `PyFrame_GetLineNumber`: `PyCode_Addr2Line` of `f_lasti`,
# unless a trace function is running with the frame): another 2 %, now read once per offset.
# Keyed by the code's id, not the code (hashing a code object hashes its constants and names:
# slower than reading the table), with every code kept in `_CODES` so that no other takes its
# id.
_ENTRIES: dict[tuple[int, int], bytes] = {}
_CODES: dict[int, CodeType] = {}


def get_stack_trace() -> source_pb2.StackTrace:
    """The SDK's `resource._get_stack_trace` without `traceback`: the frames outside the third
    `__init__` from the top of the stack (a resource's own constructor), innermost first, each
    as its file's URI and line; empty when there is no such frame outside it.

    With `sys.tracebacklimit` set the SDK's sees only that many innermost frames; so does this
    one (at 0 or below, where the SDK's fails on an unbound name, this one answers empty)."""
    # Codes and entries only, never the frames: a frame object held in this function's own
    # locals is a reference cycle (the frame holds its locals), which keeps every caller's
    # frame and locals (the resource's args and options) alive until the garbage collector
    # runs; in a 16-node evaluation that was 40,820 objects of garbage.
    codes: list[CodeType] = []
    entries: list[bytes] = []
    frame = sys._getframe(0)  # the SDK's stack starts at its own function's frame
    limit = getattr(sys, "tracebacklimit", None)
    while frame is not None and (limit is None or len(codes) < limit):
        code = frame.f_code
        key = (id(code), frame.f_lasti)
        entry = _ENTRIES.get(key)
        if entry is None:
            entry = _ENTRIES[key] = _frame_entry(code.co_filename, frame.f_lineno)
            _CODES[id(code)] = code
        codes.append(code)
        entries.append(entry)
        frame = frame.f_back
    del frame
    start = _outside_constructor(codes)
    if start is None:
        return source_pb2.StackTrace()
    # A repeated field's entries, serialized one after another, parse as the whole field.
    return source_pb2.StackTrace.FromString(b"".join(entries[start:]))


def _frame_entry(filename: str, line: int | None) -> bytes:
    """One frame at `filename`'s `line`, serialized as an entry of `StackTrace.frames`: its
    file's URI and line, or no position where the SDK gives none."""
    uri = _uri(filename)
    position = None
    if uri is not None and line is not None:
        position = source_pb2.SourcePosition(uri=uri, line=line)
    frame = source_pb2.StackFrame(pc=position)
    return source_pb2.StackTrace(frames=[frame]).SerializeToString()


def _outside_constructor(codes: list[CodeType]) -> int | None:
    """Where the calls after the third `__init__` of `codes` (innermost first) start, None
    without one."""
    inits = 0
    for index, code in enumerate(codes):
        if code.co_name == "__init__":
            inits += 1
            if inits == 3:
                return index + 1
    return None


@dataclass(frozen=True)
class _Source:
    """A module's source, its lines, and its module-level functions by name."""

    text: str
    lines: list[str]
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef]

    def segment(self, node: ast.stmt | ast.expr) -> str:
        """`ast.get_source_segment(self.text, node)`, without splitting the whole source again
        for each definition (that split was nearly all of `install`'s time)."""
        first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        start, end = node.col_offset, node.end_col_offset
        if first == last:
            return self.lines[first].encode()[start:end].decode()
        head = self.lines[first].encode()[start:].decode()
        tail = self.lines[last].encode()[:end].decode()
        return "".join([head, *self.lines[first + 1 : last], tail])


@functools.cache
def _module_source(module: ModuleType) -> _Source | None:
    """A module's source, read and parsed once per process (five replacements read `rpc`, four
    `_types`); None without a source."""
    try:
        text = inspect.getsource(module)
    except (OSError, TypeError):
        return None
    functions = {
        node.name: node
        for node in ast.parse(text).body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    return _Source(text, text.splitlines(keepends=True), functions)


@dataclass(frozen=True)
class Replacement:
    """`function` in place of `module.<name>`, written against the SDK source of `covers` (the
    definitions of `module` its answer depends on, `name` first when it is one), whose digest
    is `sha256`. `also`: modules that imported the SDK's function by name, which get the
    replacement too. `wraps`: the SDK's function that `function` hands the cases it does not
    answer itself to; it is installed only over that function. (One replacement is a module in
    place of a module `module` imported, `wraps` being the SDK's.)"""

    module: ModuleType
    name: str
    function: Callable[..., Any] | ModuleType
    covers: tuple[str, ...]
    sha256: str
    also: tuple[ModuleType, ...] = ()
    wraps: Callable[..., Any] | ModuleType | None = None

    def sdk_definitions(
        self,
    ) -> tuple[_Source, list[ast.FunctionDef | ast.AsyncFunctionDef]] | None:
        """The module's source and its definitions of `covers`, in that order (read from the
        module's file, not from the attributes, which may already be replacements); None when
        one is missing or the module has no source."""
        source = _module_source(self.module)
        if source is None or any(name not in source.functions for name in self.covers):
            return None
        return source, [source.functions[name] for name in self.covers]

    def sdk_digest(self) -> str | None:
        """sha256 of the source of `covers` in the installed SDK, each with its decorators (a
        `functools.cache` taken away changes the answer too) and followed by a newline."""
        definitions = self.sdk_definitions()
        if definitions is None:
            return None
        source, nodes = definitions
        text = "".join(
            "".join(f"@{source.segment(d)}\n" for d in node.decorator_list)
            + f"{source.segment(node)}\n"
            for node in nodes
        )
        return hashlib.sha256(text.encode()).hexdigest()

    def is_the_sdks(self, current: Any) -> bool:
        """Whether `current` is the SDK's own definition: a function of `module` (and `wraps`,
        when there is one), or the module `wraps` itself. A copy of this module imported again
        (tools/lifecycle runs the program of an older checkout) takes the replacements already
        in place for the SDK's functions it wraps: their `__module__` tells them apart."""
        if isinstance(current, ModuleType):
            return current is self.wraps
        return current.__module__ == self.module.__name__ and (
            self.wraps is None or current is self.wraps
        )

    def install(self) -> bool:
        """Put `function` in place when the SDK's definitions are the ones it was written
        against; True when it is in place."""
        holders = (self.module, *self.also)
        if all(getattr(holder, self.name, None) is self.function for holder in holders):
            return True
        current = getattr(self.module, self.name, None)
        if (
            current is None
            or self.sdk_digest() != self.sha256
            or not self.is_the_sdks(current)
            or any(getattr(holder, self.name, None) is not current for holder in self.also)
        ):
            # Another SDK's function, or one something else already put in its place.
            return False
        for holder in holders:
            setattr(holder, self.name, self.function)
        return True


REPLACEMENTS = (
    Replacement(
        rpc,
        "contains_unknowns",
        contains_unknowns,
        ("contains_unknowns",),
        "1f1f335b6f48b96055607dbb5be2e53b1163e35ec88704c89a41271070017cc8",
    ),
    Replacement(
        resource,
        "_get_stack_trace",
        get_stack_trace,
        ("_get_stack_trace", "_get_source_position_for_frame"),
        "0d11a1e45eee2efcb3d459373346c57b6e3f9b3a84c7600c3922034c45449c5c",
    ),
    Replacement(
        resource_cycle_breaker,
        "declare_dependency",
        sdk_dependencies.declare_dependency,
        # The order answers as `_reachable` does only while every `_add_dep` is made by the
        # replacement, which places both ends of each edge and keeps it the other way round.
        ("declare_dependency", "_add_dep", "_deps", "_reachable", "_with_transitive_deps"),
        "b7ec70d4f814780561bcd99161740f76cda111562af1cfb76f26b2dbcf8b42f7",
        also=(rpc,),
    ),
    Replacement(
        rpc,
        "_expand_dependencies",
        sdk_dependencies.expand_dependencies,
        ("_expand_dependencies", "_add_dependency"),
        "2b8c9124885b9947a9093f2eea0864e7d985483d216bbd7aec928dc6886a81b2",
        also=(resource, _depends_on),
    ),
    Replacement(
        _depends_on,
        "_resolve_depends_on",
        sdk_dependencies.resolve_depends_on,
        ("_resolve_depends_on",),
        "3ab4b3f9714876de7e84ded7e65dab1bf3fa00406192a36b0c681e05717a4e63",
        also=(invoke,),
        wraps=sdk_dependencies.SDK_RESOLVE_DEPENDS_ON,
    ),
    Replacement(
        rpc,
        "deserialize_properties",
        sdk_values.deserialize_properties,
        ("deserialize_properties", "deserialize_property"),
        "4f3a88482e60664147df4cadb20f93ed70eda93f22304684b0a943d16c565c77",
        wraps=sdk_values.SDK_DESERIALIZE_PROPERTIES,
    ),
    Replacement(
        rpc,
        "translate_output_properties",
        sdk_values.translate_output_properties,
        ("translate_output_properties", "is_rpc_secret"),
        "75bbb92a27893f837345de5c640ef41de3e00d5ff0d1402ba28a01e38d1fc83b",
        wraps=sdk_values.SDK_TRANSLATE_OUTPUT_PROPERTIES,
    ),
    Replacement(
        resource,
        "resource_pb2",
        sdk_inputs.RESOURCE_PB2,
        # Every use of `RegisterResourceRequest` in `resource`.
        ("register_resource", "_create_custom_timeouts", "_prepare_resource_hooks"),
        "1c8e9ce9867c5d437f538d95ed2e000f15636a7ff8ea945f46f5ca15893f0270",
        wraps=resource_pb2,
    ),
    Replacement(
        rpc,
        "resolve_outputs",
        sdk_outputs.resolve_outputs,
        ("resolve_outputs",),
        "18f65c1be3ad95f4d7f679ac3f75c555e3eef738627e50fd0146440477d387e8",
    ),
    Replacement(
        rpc,
        "serialize_properties",
        sdk_struct.serialize_properties,
        ("serialize_properties",),
        "d101e72bd9ececa92586e13cddd7d0d28d97b0418b28cab0e7e688d86f7cfeff",
    ),
    Replacement(
        rpc,
        "serialize_property",
        sdk_inputs.serialize_property,
        ("serialize_property", "isLegalProtobufValue"),
        "4601221a122a1fda80d4ce8d6c817cf6199d369798696287ed94ff4c062ffbf1",
        wraps=sdk_inputs.SDK_SERIALIZE_PROPERTY,
    ),
    Replacement(
        _types,
        "unwrap_type",
        sdk_types.unwrap_type,
        (
            "unwrap_type",
            "unwrap_optional_type",
            "_is_union_type",
            "_is_optional_type",
            "is_input_type",
        ),
        "ec7e1948ca28c72d62a18fb14df715dd151c7260603c2750acf9d8b6a94967c2",
        wraps=sdk_types.SDK_UNWRAP_TYPE,
    ),
    Replacement(
        _types,
        "unwrap_optional_type",
        sdk_types.unwrap_optional_type,
        ("unwrap_optional_type", "_is_optional_type", "_is_union_type"),
        "b1b64f280f60867acaf12fb6e6413398f1582d4972c5569d46a650c3d0b5acdd",
        wraps=sdk_types.SDK_UNWRAP_OPTIONAL_TYPE,
    ),
    Replacement(
        _types,
        "resource_types",
        sdk_types.resource_types,
        (
            "resource_types",
            "_types_from_annotations",
            "_properties_from_annotations",
            "_types_from_py_properties",
            "_raw_return_hints",
            "_py_properties",
            "_globals_for_cls",
        ),
        "5b9db583223234d14576c133ca2ba0a6d5b6f8ea0f0054cd0eb5b9249e971023",
        wraps=sdk_types.SDK_RESOURCE_TYPES,
    ),
    Replacement(
        _types,
        "resource_pulumi_to_py_names",
        sdk_types.resource_pulumi_to_py_names,
        (
            "resource_pulumi_to_py_names",
            "_pulumi_to_py_names_from_annotations",
            "_names_from_annotations",
            "_pulumi_to_py_names_from_py_properties",
            "_py_properties",
        ),
        "17a3a274e09df4048a378406a4750b36fb88c7203fde204fdd5f3be56afe8352",
        wraps=sdk_types.SDK_RESOURCE_PULUMI_TO_PY_NAMES,
    ),
    Replacement(
        _types,
        "output_type_from_dict",
        sdk_output_types.output_type_from_dict,
        # What `cls(**args)` stores: through `set` and `_translate_name`, for the classes
        # `output_type` marks, by the names `_py_properties` reads.
        (
            "output_type_from_dict",
            "_py_properties",
            "set",
            "_translate_name",
            "output_type",
            "is_output_type",
        ),
        "c7b305c1d1ec03ed8ee900c2ed9b5fe1f9c4ee673d50e31d28545b6059883748",
        wraps=sdk_output_types.SDK_OUTPUT_TYPE_FROM_DICT,
    ),
)


def install() -> dict[str, bool]:
    """Install every replacement the installed SDK allows: whether each is in place, by the
    name it replaces."""
    return {f"{r.module.__name__}.{r.name}": r.install() for r in REPLACEMENTS}

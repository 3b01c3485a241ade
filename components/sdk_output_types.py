"""The Pulumi Python SDK's `_types.output_type_from_dict`, replaced (by components/sdk_fixes.py,
over the exact source it was written against) by one that builds the same objects for less.

Reading an answer builds an output-type object for every map of such a type in it (a Job's
spec, its pod template, every container, toleration and environment variable; every step's
connection). The SDK passes the generated `__init__` every property of the class (a PodSpec has
forty), found or not, and that `__init__` stores each one given with `pulumi.set`, which asks
whether the class is an input or output type and translates the name, for every value. Where
the class's `__init__` is the shape provider code generators write (pulumi `pkg/codegen/python`:
each property stored by `pulumi.set(__self__, "<name>", <name>)`, always when required, else
only when not None, after an optional `if <name> is None: <name> = <constant>` for a schema
default), the replacement stores what that `__init__` would, in the same order, into an object
made as `cls(...)` makes it, having read that `__init__` once per class. Any other class goes to
the SDK. tests/test_sdk_output_types.py builds every output type of the program's providers
both ways and compares the objects.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

import pulumi
from pulumi import _types

from components.sdk_types import by_identity

SDK_OUTPUT_TYPE_FROM_DICT = _types.output_type_from_dict

# A property's schema default is absent.
_NO_DEFAULT = object()

# One property as the generated `__init__` stores it: its Python name (the key it is stored
# under), its Pulumi name (the key of the engine's map), its schema default (or _NO_DEFAULT),
# and whether it is stored when None (a required property).
_Stored = tuple[str, str, Any, bool]


def output_type_from_dict(cls: type, output: dict[str, Any]) -> Any:
    """The SDK's `_types.output_type_from_dict`: `cls` built from the engine's map `output`
    (Pulumi names), as `cls(**{python name: output.get(Pulumi name) for every property})`."""
    build = BUILDER(cls)
    if build is None or type(output) is not dict:
        return SDK_OUTPUT_TYPE_FROM_DICT(cls, output)
    return build(output)


def builder(cls: type) -> Callable[[dict[str, Any]], Any] | None:
    """How to build `cls` from a map without its `__init__`, doing what that `__init__` does;
    None unless `cls` is an output type stored as generated code stores one."""
    plan = stored_properties(cls)
    if plan is None:
        return None
    if issubclass(cls, dict):
        new: Callable[[type], Any] = dict.__new__

        def store_of(obj: Any) -> Any:
            return obj  # `pulumi.set` writes `self[name] = value`

    else:
        new = object.__new__

        def store_of(obj: Any) -> Any:
            return obj.__dict__  # `pulumi.set` writes `self.__dict__[name] = value`

    def build(output: dict[str, Any]) -> Any:
        obj = new(cls)
        store = store_of(obj)
        get = output.get
        for python_name, pulumi_name, default, required in plan:
            value = get(pulumi_name)
            if value is None:
                if default is not _NO_DEFAULT:
                    value = default
                elif not required:
                    continue
            store[python_name] = value
        return obj

    return build


# How to build each output type met so far, or None where the SDK builds it.
BUILDER = by_identity(builder)


def stored_properties(cls: type) -> tuple[_Stored, ...] | None:
    """What `cls(**args)` stores, in order, for an output type whose construction is the
    generated one: made by `type.__call__` with `dict.__new__` or `object.__new__`, stored by
    `pulumi.set` (no `_translate_property`, no `__setitem__` of its own) from an `__init__`
    whose keyword-only parameters are the properties' Python names (defaults None) and whose
    body is only the statements generated code writes; None for any other class."""
    if not isinstance(cls, type) or not _types.is_output_type(cls):
        return None
    if callable(getattr(cls, _types._TRANSLATE_PROPERTY, None)):
        return None
    if type(cls).__call__ is not type.__call__:
        return None
    if issubclass(cls, dict):
        if cls.__new__ is not dict.__new__ or cls.__setitem__ is not dict.__setitem__:
            return None
    elif cls.__new__ is not object.__new__ or not hasattr(cls, "__dict__"):
        return None
    init = cls.__dict__.get("__init__")
    if not inspect.isfunction(init) or init.__globals__.get("pulumi") is not pulumi:
        return None
    pulumi_names: dict[str, str] = {}
    for python_name, pulumi_name, _ in _types._py_properties(cls):
        pulumi_names[python_name] = pulumi_name  # as `args[python_name] = ...`: the last wins
    definition = _definition(init)
    if definition is None:
        return None
    parameters = _keyword_parameters(definition.args)
    if parameters is None or set(parameters[1]) != set(pulumi_names):
        return None
    stored = _stored_in_order(definition.body, *parameters)
    if stored is None:
        return None
    return tuple((name, pulumi_names[name], default, always) for name, default, always in stored)


def _keyword_parameters(args: ast.arguments) -> tuple[str, list[str]] | None:
    """(the name of `self`, the keyword-only parameters) of `def __init__(__self__, *, a,
    b=None, ...)`; None for any other signature (another default would be the SDK's to pass
    on: it passes every property, None where the map has none)."""
    if (
        len(args.args) != 1
        or args.posonlyargs
        or args.vararg
        or args.kwarg
        or args.defaults
        or any(d is not None and not _is_none(d) for d in args.kw_defaults)
    ):
        return None
    return args.args[0].arg, [a.arg for a in args.kwonlyargs]


def _stored_in_order(
    body: list[ast.stmt], self_name: str, parameters: list[str]
) -> list[tuple[str, Any, bool]] | None:
    """Each parameter the body stores, under its own name, in the order stored: with its schema
    default (or _NO_DEFAULT) and whether it is stored even when None; None when the body does
    anything else, or stores a parameter twice, or gives a default after storing it."""
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    known = set(parameters)
    defaults: dict[str, Any] = {}
    stored: list[tuple[str, Any, bool]] = []
    done: set[str] = set()
    for statement in body:
        if isinstance(statement, ast.Pass):  # the body of a class without properties
            continue
        name = _stored_by(statement, self_name)
        if name is not None:  # pulumi.set(__self__, "p", p)
            always = True
        elif (name := _stored_unless_none(statement, self_name)) is not None:
            always = False  # if p is not None: pulumi.set(__self__, "p", p)
        else:
            default = _default_of(statement)  # if p is None: p = <constant>
            if (
                default is None
                or default[0] not in known
                or default[0] in defaults
                or default[0] in done
            ):
                return None
            defaults[default[0]] = default[1]
            continue
        if name not in known or name in done:
            return None
        done.add(name)
        stored.append((name, defaults.get(name, _NO_DEFAULT), always))
    return stored


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _stored_by(statement: ast.stmt, self_name: str) -> str | None:
    """p of `pulumi.set(<self>, "p", p)`, else None."""
    if not isinstance(statement, ast.Expr) or not isinstance(statement.value, ast.Call):
        return None
    call = statement.value
    func = call.func
    if (
        call.keywords
        or len(call.args) != 3
        or not isinstance(func, ast.Attribute)
        or func.attr != "set"
        or not isinstance(func.value, ast.Name)
        or func.value.id != "pulumi"
    ):
        return None
    target, key, value = call.args
    if (
        isinstance(target, ast.Name)
        and target.id == self_name
        and isinstance(key, ast.Constant)
        and isinstance(value, ast.Name)
        and key.value == value.id
    ):
        return value.id
    return None


def _guarded(statement: ast.stmt, operator: type) -> tuple[str, ast.stmt] | None:
    """(p, the one statement it guards) of `if p is None:` (operator ast.Is) or `if p is not
    None:` (ast.IsNot) with one statement and no `else`, else None."""
    if not isinstance(statement, ast.If) or statement.orelse or len(statement.body) != 1:
        return None
    test = statement.test
    if (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and len(test.ops) == 1
        and type(test.ops[0]) is operator
        and _is_none(test.comparators[0])
    ):
        return test.left.id, statement.body[0]
    return None


def _stored_unless_none(statement: ast.stmt, self_name: str) -> str | None:
    """p of `if p is not None: pulumi.set(<self>, "p", p)`, else None."""
    guarded = _guarded(statement, ast.IsNot)
    if guarded is None or _stored_by(guarded[1], self_name) != guarded[0]:
        return None
    return guarded[0]


def _default_of(statement: ast.stmt) -> tuple[str, Any] | None:
    """(p, c) of `if p is None: p = c` with c a constant, else None."""
    guarded = _guarded(statement, ast.Is)
    if guarded is None:
        return None
    name, assign = guarded
    if _assigns(assign, name, lambda value: value is not None):
        return name, assign.value.value  # type: ignore[attr-defined]
    return None


def warning_keys(cls: type) -> frozenset[str] | None:
    """For a dict subclass whose `cls[key]` is `dict.__getitem__` or the generated one that
    warns first (pulumi `pkg/codegen/python`: `Cls.__key_warning(key)`, then
    `super().__getitem__(key)`, the warning an if-chain of `key == "<camelCase name>"`): the
    keys whose reading warns (none for the first). None for any other class: read it through
    its own `__getitem__`."""
    if not isinstance(cls, type) or cls.__mro__ != (cls, dict, object):
        return None
    getitem = cls.__dict__.get("__getitem__")
    if getitem is None:
        return frozenset()
    warning = cls.__dict__.get(f"_{cls.__name__}__key_warning")
    if not inspect.isfunction(getitem) or not isinstance(warning, staticmethod):
        return None
    getitem_tree = _definition(getitem)
    warning_tree = _definition(warning.__func__)
    if getitem_tree is None or warning_tree is None or not _warns_then_reads(getitem_tree, cls):
        return None
    return _warned_keys(warning_tree)


def _definition(function: Any) -> ast.FunctionDef | None:
    """The parsed definition of `function`, None without a source or with decorators (a
    staticmethod's decorator is taken off by reading its function)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return None
    definition = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(definition, ast.FunctionDef):
        return None
    if any(
        not (isinstance(d, ast.Name) and d.id == "staticmethod") for d in definition.decorator_list
    ):
        return None
    return definition


def _warns_then_reads(definition: ast.FunctionDef, cls: type) -> bool:
    """Whether `definition` is `def __getitem__(self, key): Cls.__key_warning(key); return
    super().__getitem__(key)`."""
    args = definition.args
    if len(args.args) != 2 or args.vararg or args.kwarg or args.kwonlyargs or args.defaults:
        return False
    key = args.args[1].arg
    body = definition.body
    if len(body) != 2 or not isinstance(body[0], ast.Expr) or not isinstance(body[1], ast.Return):
        return False
    warn, read = body[0].value, body[1].value
    return (
        isinstance(warn, ast.Call)
        and isinstance(warn.func, ast.Attribute)
        and warn.func.attr == "__key_warning"
        and isinstance(warn.func.value, ast.Name)
        and warn.func.value.id == cls.__name__
        and _is_name_only(warn, key)
        and isinstance(read, ast.Call)
        and isinstance(read.func, ast.Attribute)
        and read.func.attr == "__getitem__"
        and isinstance(read.func.value, ast.Call)
        and isinstance(read.func.value.func, ast.Name)
        and read.func.value.func.id == "super"
        and not read.func.value.args
        and not read.func.value.keywords
        and _is_name_only(read, key)
    )


def _is_name_only(call: ast.Call, name: str) -> bool:
    return (
        not call.keywords
        and len(call.args) == 1
        and isinstance(call.args[0], ast.Name)
        and call.args[0].id == name
    )


def _warned_keys(definition: ast.FunctionDef) -> frozenset[str] | None:
    """The keys `def __key_warning(key): suggest = None; if key == "a": suggest = "b" elif ...;
    if suggest: pulumi.log.warn(...)` warns for; None for any other body."""
    args = definition.args
    if len(args.args) != 1 or args.vararg or args.kwarg or args.kwonlyargs or args.defaults:
        return None
    key = args.args[0].arg
    body = definition.body
    if len(body) != 3 or not _assigns(body[0], "suggest", lambda value: value is None):
        return None
    keys: set[str] = set()
    branch: list[ast.stmt] = [body[1]]
    while branch:
        if len(branch) != 1 or not isinstance(branch[0], ast.If):
            return None
        test = branch[0].test
        if not (
            isinstance(test, ast.Compare)
            and isinstance(test.left, ast.Name)
            and test.left.id == key
            and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq)
            and isinstance(test.comparators[0], ast.Constant)
            and isinstance(test.comparators[0].value, str)
            and len(branch[0].body) == 1
            and _assigns(branch[0].body[0], "suggest", lambda value: isinstance(value, str))
        ):
            return None
        if branch[0].body[0].value.value:  # type: ignore[attr-defined]  # a suggestion warns
            keys.add(test.comparators[0].value)
        branch = branch[0].orelse
    last = body[2]
    if not (
        isinstance(last, ast.If)
        and isinstance(last.test, ast.Name)
        and last.test.id == "suggest"
        and not last.orelse
    ):
        return None
    return frozenset(keys)


def _assigns(statement: ast.stmt, name: str, accepts: Callable[[Any], bool]) -> bool:
    """Whether `statement` is `<name> = <constant>` with a constant `accepts` takes."""
    return (
        isinstance(statement, ast.Assign)
        and len(statement.targets) == 1
        and isinstance(statement.targets[0], ast.Name)
        and statement.targets[0].id == name
        and isinstance(statement.value, ast.Constant)
        and accepts(statement.value.value)
    )

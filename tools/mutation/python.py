"""Python mutants from cosmic-ray's core operators (comparison, boolean, binary and unary
operators, numbers, break/continue, exceptions, decorators, for loops).

cosmic-ray numbers the places an operator can mutate in the order its parso walk meets them
(`cosmic_ray.commands.init`); `cosmic_ray.mutating.mutate_code(code, operator, occurrence)`
applies the n-th. The same numbering is used here, so each mutant is one cosmic-ray mutation.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import cosmic_ray.plugins
from cosmic_ray.ast import ast_nodes, get_ast
from cosmic_ray.mutating import mutate_code

from tools.mutation.mutants import Mutant


@functools.cache
def operators() -> dict[str, object]:
    """Every core operator that takes no arguments, by name (e.g. "core/ReplaceAndWithOr")."""
    found = {}
    for name in cosmic_ray.plugins.operator_names():
        operator_class = cosmic_ray.plugins.get_operator(name)
        if not operator_class.arguments():
            found[name] = operator_class()
    return found


def _apply(name: str, occurrence: int):
    def apply(code: str) -> str | None:
        return mutate_code(code, operators()[name], occurrence)

    return apply


def mutants_of(path: Path, relative: str) -> list[Mutant]:
    """Every cosmic-ray mutation of one Python file."""
    module = get_ast(path.read_text(encoding="utf-8"))
    nodes = list(ast_nodes(module))
    found: list[Mutant] = []
    for name, operator in operators().items():
        occurrence = 0
        for node in nodes:
            for start, _end in operator.mutation_positions(node):
                found.append(
                    Mutant(
                        path=relative,
                        line=start[0],
                        operator=name,
                        site=(start[0], start[1]),
                        apply=_apply(name, occurrence),
                    )
                )
                occurrence += 1
    return found


def _without_signature_annotations(code: str) -> str:
    """The module's AST without the annotations of function parameters and returns: with
    `from __future__ import annotations` nothing evaluates them, so a mutant there changes
    nothing (class-level annotations stay: pydantic and dataclasses read them)."""
    tree = ast.parse(code)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
            arguments = node.args
            for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
                arg.annotation = None
            for arg in (arguments.vararg, arguments.kwarg):
                if arg is not None:
                    arg.annotation = None
    return ast.dump(tree)


def changes_behaviour(original: str, mutated: str) -> bool:
    """False for a mutant that only touches what Python never runs (signature annotations under
    postponed evaluation, or a syntax cosmic-ray produced that Python refuses)."""
    if "from __future__ import annotations" not in original:
        return True
    try:
        return _without_signature_annotations(original) != _without_signature_annotations(mutated)
    except SyntaxError:
        return False

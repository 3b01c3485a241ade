"""The subset of kubectl's JSONPath templates the scripts use, for the kubectl stub.

`{.a.b}`, escaped dots (`{.allocatable.nvidia\\.com/gpu}`), filters (`[?(@.type=="Ready")]`,
`[?(@.spec.signerName=="...")]`), indexes (`[0]`), `[*]`, quoted literals (`{"\\t"}`) and
`{range <path>}...{end}` (the template between them once per item, its paths read from the
item; ranges nest, and `{@}` is the item itself). A missing field prints nothing, as
kubectl's `get` does.
Stands for the JSONPath printer of kubectl 1.35: k8s.io/client-go util/jsonpath/jsonpath.go
(`JSONPath.Execute`, `evalField`, `evalFilter`; `AllowMissingKeys(true)`, which kubectl's
k8s.io/cli-runtime pkg/printers/jsonpath.go sets) and util/jsonpath/parser.go for the syntax.
Usage: python3 _kubectl_jsonpath.py '<template>' < object.json
"""

import json
import re
import sys

_TOKEN = re.compile(
    r"""\.(?P<field>(?:\\.|[^.\[\\])+)|\[\?\(@\.(?P<key>[\w.]+)==["'](?P<value>[^"']*)["']\)\]"""
    r"""|\[(?P<index>\d+|\*)\]"""
)


def _lookup(value, dotted: str):
    """`value`'s field at a dotted path (`spec.signerName`), or None."""
    for key in dotted.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def evaluate(path: str, document):
    if path == "@":  # the current item of a range
        return [document]
    values = [document]
    position = 0
    while position < len(path):
        match = _TOKEN.match(path, position)
        if not match:
            raise SystemExit(f"stub kubectl: unsupported jsonpath {path!r} at {position}")
        position = match.end()
        found = []
        for value in values:
            if match.group("field") is not None:
                key = match.group("field").replace("\\.", ".")
                if isinstance(value, dict) and key in value:
                    found.append(value[key])
            elif match.group("key") is not None:
                items = value if isinstance(value, list) else []
                found += [
                    i for i in items if str(_lookup(i, match.group("key"))) == match.group("value")
                ]
            elif match.group("index") == "*":
                found += value if isinstance(value, list) else list(value.values())
            elif isinstance(value, list) and int(match.group("index")) < len(value):
                found.append(value[int(match.group("index"))])
        values = found
    return values


def render(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def parse(template: str) -> list:
    """The template as a tree: literal strings, ("path", expr) and ("range", expr, body)."""
    stack: list[list] = [[]]
    ranges: list[str] = []
    for literal, expression in re.findall(r"([^{]*)(?:\{([^}]*)\})?", template):
        if literal:
            stack[-1].append(literal)
        if expression.startswith("range "):
            ranges.append(expression.removeprefix("range ").strip())
            stack.append([])
        elif expression == "end":
            body = stack.pop()
            stack[-1].append(("range", ranges.pop(), body))
        elif expression.startswith('"'):
            stack[-1].append(json.loads(expression))
        elif expression:
            stack[-1].append(("path", expression))
    if ranges:
        raise SystemExit(f"stub kubectl: unclosed range in {template!r}")
    return stack[0]


def execute(tree: list, document) -> str:
    out = []
    for part in tree:
        if isinstance(part, str):
            out.append(part)
        elif part[0] == "path":
            out.append(" ".join(render(v) for v in evaluate(part[1], document)))
        else:
            for item in evaluate(part[1], document):
                out.append(execute(part[2], item))
    return "".join(out)


def main() -> None:
    template, document = sys.argv[1], json.load(sys.stdin)
    sys.stdout.write(execute(parse(template), document))


main()

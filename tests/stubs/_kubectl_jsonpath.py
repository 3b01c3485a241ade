"""The subset of kubectl's JSONPath templates the scripts use, for the kubectl stub.

`{.a.b}`, escaped dots (`{.allocatable.nvidia\\.com/gpu}`), filters (`[?(@.type=="Ready")]`),
indexes (`[0]`), `[*]` and quoted literals (`{"\\t"}`). A missing field prints nothing, as
kubectl's `get` does. Usage: python3 _kubectl_jsonpath.py '<template>' < object.json
"""

import json
import re
import sys

_TOKEN = re.compile(
    r"""\.(?P<field>(?:\\.|[^.\[\\])+)|\[\?\(@\.(?P<key>[\w.]+)==["'](?P<value>[^"']*)["']\)\]"""
    r"""|\[(?P<index>\d+|\*)\]"""
)


def evaluate(path: str, document):
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
                    i for i in items if str(i.get(match.group("key"))) == match.group("value")
                ]
            elif match.group("index") == "*":
                found += value if isinstance(value, list) else list(value.values())
            elif isinstance(value, list) and int(match.group("index")) < len(value):
                found.append(value[int(match.group("index"))])
        values = found
    return values


def render(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def main() -> None:
    template, document = sys.argv[1], json.load(sys.stdin)
    out = []
    for literal, expression in re.findall(r"([^{]*)(?:\{([^}]*)\})?", template):
        out.append(literal)
        if expression.startswith('"'):
            out.append(json.loads(expression))
        elif expression:
            out.append(" ".join(render(v) for v in evaluate(expression, document)))
    sys.stdout.write("".join(out))


main()

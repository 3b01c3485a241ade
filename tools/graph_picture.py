"""Draw a recorded resource graph with Graphviz: one cluster per GPU node chain, edges = waits.

`to_dot(graph, chains)` builds the DOT text (deterministic: sorted, no timestamps);
`render(dot_text, out_dir)` writes graph.dot and, where Graphviz's `dot` is installed, runs it to
write graph.svg and graph.png. Without `dot` the picture is skipped with a one-line notice: the
plan, chains and policy results never depend on it.

Why no bundled Graphviz: docs/decisions/023-graphviz-from-the-system.md
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tools.harness.graph import Graph, Resource

INSTALL_HINT = "apt-get install -y graphviz"
# `dot` draws the dev stack in about a second; a fleet of hundreds of nodes can take it minutes.
DOT_TIMEOUT_SECONDS = 120


@dataclass
class Picture:
    paths: dict[str, Path]  # "dot" always; "svg" and "png" when Graphviz drew them
    notice: str = ""  # one line saying why the picture was skipped, or ""


def _quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    # A real line break in a label becomes DOT's centred line break.
    return '"' + escaped.replace("\n", "\\n") + '"'


def _label(resource: Resource) -> str:
    short_type = resource.type.rsplit(":", 1)[-1]
    return f"{resource.name}\n{short_type}"


def to_dot(graph: Graph, chains: Mapping[str, Sequence[Resource]]) -> str:
    """Custom resources (what the engine creates) as boxes; an edge b -> a when a waits for b."""
    drawn = sorted((r for r in graph if r.custom), key=lambda r: r.urn)
    in_chain = {r.urn for chain in chains.values() for r in chain}
    lines = [
        "digraph resources {",
        "  rankdir=LR;",
        '  node [shape=box, style="rounded,filled", fillcolor="#f5f5f5", fontname="Helvetica"];',
        '  edge [color="#555555"];',
    ]
    for index, (node_name, chain) in enumerate(sorted(chains.items())):
        lines.append(f"  subgraph cluster_{index} {{")
        lines.append(f'    label={_quote(node_name)}; style=rounded; color="#4a7bb7";')
        for resource in chain:
            lines.append(
                f"    {_quote(resource.urn)} [label={_quote(_label(resource))}, "
                'fillcolor="#dde8f6"];'
            )
        lines.append("  }")
    for resource in drawn:
        if resource.urn not in in_chain:
            lines.append(f"  {_quote(resource.urn)} [label={_quote(_label(resource))}];")
    drawn_urns = {r.urn for r in drawn}
    for resource in drawn:
        for dep in sorted(graph.direct_dependencies(resource) & drawn_urns):
            lines.append(f"  {_quote(dep)} -> {_quote(resource.urn)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render(dot_text: str, out_dir: Path, stem: str = "graph") -> Picture:
    """Write <stem>.dot into out_dir, and <stem>.svg and <stem>.png when `dot` is installed and
    draws them in time. A picture `dot` cannot draw (it fails, or a fleet's graph takes it
    longer than DOT_TIMEOUT_SECONDS) is skipped with a notice, like a missing `dot`: the plan
    never depends on it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"dot": out_dir / f"{stem}.dot"}
    paths["dot"].write_text(dot_text, encoding="utf-8")
    dot = shutil.which("dot")
    if dot is None:
        return Picture(
            paths,
            f"graph picture skipped: Graphviz `dot` is not installed ({INSTALL_HINT}); "
            f"the graph is in {paths['dot'].name}",
        )
    drawn = dict(paths)
    for fmt in ("svg", "png"):
        drawn[fmt] = out_dir / f"{stem}.{fmt}"
        try:
            subprocess.run(
                [dot, f"-T{fmt}", "-o", str(drawn[fmt]), str(paths["dot"])],
                check=True,
                capture_output=True,
                text=True,
                timeout=DOT_TIMEOUT_SECONDS,
            )
        except subprocess.TimeoutExpired:
            why = f"Graphviz `dot` took longer than {DOT_TIMEOUT_SECONDS} s to draw it"
        except subprocess.CalledProcessError as failed:
            said = failed.stderr.strip().splitlines()
            why = f"Graphviz `dot -T{fmt}` failed (exit {failed.returncode}" + (
                f": {said[0]})" if said else ")"
            )
        else:
            continue
        for kind, path in drawn.items():
            if kind != "dot":
                path.unlink(missing_ok=True)  # no half-drawn picture beside the notice
        return Picture(paths, f"graph picture skipped: {why}; the graph is in {paths['dot'].name}")
    return Picture(drawn)

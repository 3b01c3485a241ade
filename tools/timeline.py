"""How long a stack's first `pulumi up` takes, modelled on the engine's own scheduling.

    python -m tools.timeline dev                       # table + Gantt picture (SVG)
    python -m tools.timeline dev --nodes 1000 --json   # one line: first/all validated seconds
    python -m tools.timeline dev --parallel 16 --baked
    python -m tools.timeline dev --table               # 1..1,000 nodes x P 8/16/recommended

It runs the real program under the test harness (the graph `pulumi up` registers), then simulates
the engine on that graph:

- A resource is submitted when everything it depends on is done: its dependencies, property
  dependencies, provider and parent. The language SDK only calls RegisterResource once those have
  resolved, which is when their steps completed (pulumi/pulumi `step_executor.go`: "Pulumi
  language hosts can only invoke the resource monitor once all of their dependencies have
  resolved"); the Python SDK awaits the parent's URN likewise.
- The engine hands submitted steps to `--parallel` workers in arrival order: the deployment
  executor's single loop (`deployment_executor.go`, `handleSingleEvent` -> `ExecuteSerial`) sends
  each chain on an unbuffered channel that `DegreeOfParallelism()` workers read
  (`step_executor.go`, `newStepExecutor`, `worker`); a worker holds its slot until the step's
  provider call returns. So: FIFO by ready time (ties in registration order), P slots.
- Every step holds a slot: component resources too (a no-op create step, ~0 s), explicit
  providers and the default provider of each package (`source_eval.go`, `defaultProviders`: the
  engine registers it as a resource before the first resource that uses it). Invokes (the AMI
  lookup) and RegisterResourceOutputs run outside the workers.
- `--parallel` defaults to `tools.parallelism.recommended_parallelism` for the stack's nodes;
  the CLI's own default is 4 x CPUs (`pkg/cmd/pulumi/operations/up.go`, `defaultParallel`).

Each step lasts the time in `tools/step_durations.py`, which names a source for every figure.
`--baked` boots GPU nodes, and a managed control plane, from baked images that already exist (built
earlier by this or another stack of the account): their install steps only verify, and kubeadm's
and the CNI's container images are in place. A node is validated when its validation
Job completes (its Node Ready step when validation is disabled). Not modelled: retries, failures,
the program's own evaluation time (`python -m tools.benchmark`), and API rate limits: EC2 lets an
account launch 1,000 instances at once, then 2 per second (RunInstances resource token bucket,
docs.aws.amazon.com/ec2/latest/devguide/ec2-api-throttling.html), so past 1,000 nodes the
launches themselves would spread out (the provider retries RequestLimitExceeded).
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import json
import math
import re
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from components import gpu_node
from components.hosts import steps
from components.images import builder, control_plane_image, gpu_image
from components.settings import ManagedControlPlane
from tools import step_durations
from tools.harness import mocks, stacks
from tools.harness.graph import Graph, Resource
from tools.harness.stacks import ROOT
from tools.parallelism import recommended_parallelism

OUT_DIR = ROOT / "build" / "timeline"
TABLE_NODES = (1, 8, 64, 256, 1000)
TABLE_PARALLEL = (8, 16)
INFINITE = math.inf


def _longest_first(suffixes: Iterable[str]) -> tuple[str, ...]:
    """Matched by `name.endswith(f"-{suffix}")`: a suffix that ends another one comes after it
    (`kubeconfig` after `operator-kubeconfig`)."""
    return tuple(sorted(set(suffixes), key=lambda suffix: (-len(suffix), suffix)))


# Resource-name suffixes of the host steps, from the step table (components/hosts/steps.py).
NODE_STEP_SUFFIXES = _longest_first(step.suffix for step in steps.NODE_ROWS)
CONTROL_PLANE_SUFFIXES = _longest_first(
    step.suffix
    for step in (
        *steps.MANAGED_CONTROL_PLANE_STEPS,
        *steps.EXISTING_CONTROL_PLANE_STEPS,
    )
)
IMAGE_STEP_SUFFIXES = _longest_first(
    step.suffix for step in (*steps.INSTALL_STEPS, *steps.IMAGE_STEPS)
)


# ---------------------------------------------------------------- the scheduler


@dataclass(frozen=True)
class Task:
    """One engine step: `key` waits for every key in `deps`, then holds a slot `seconds` long."""

    key: str
    deps: tuple[str, ...]
    seconds: float
    kind: str = ""


@dataclass(frozen=True)
class Slot:
    ready: float
    start: float
    end: float

    @property
    def waited(self) -> float:
        return self.start - self.ready


@dataclass
class Schedule:
    tasks: dict[str, Task]
    times: dict[str, Slot]
    parallel: float

    @property
    def makespan(self) -> float:
        return max((slot.end for slot in self.times.values()), default=0.0)

    def critical_path(self, key: str) -> list[str]:
        """The chain that decided when `key` finished: from it back through the dependency that
        finished last, to a task with none."""
        chain = [key]
        while True:
            deps = [d for d in self.tasks[chain[-1]].deps if d in self.times]
            if not deps:
                return chain[::-1]
            chain.append(max(deps, key=lambda d: (self.times[d].end, d)))

    def busy(self) -> list[tuple[float, int, int]]:
        """(time, steps running, steps ready but waiting for a slot) at every change."""
        events: dict[float, list[int]] = defaultdict(lambda: [0, 0])
        for slot in self.times.values():
            if slot.end > slot.start:
                events[slot.start][0] += 1
                events[slot.end][0] -= 1
            if slot.start > slot.ready:
                events[slot.ready][1] += 1
                events[slot.start][1] -= 1
        running = waiting = 0
        profile = []
        for time in sorted(events):
            running += events[time][0]
            waiting += events[time][1]
            profile.append((time, running, waiting))
        return profile


def simulate(tasks: Iterable[Task], parallel: float = INFINITE) -> Schedule:
    """List scheduling as the engine does it: FIFO by ready time (ties in the given order),
    at most `parallel` steps at once."""
    if parallel < 1:
        raise ValueError(f"parallel must be at least 1, got {parallel}")
    by_key: dict[str, Task] = {}
    for task in tasks:
        by_key[task.key] = task
    order = {key: index for index, key in enumerate(by_key)}
    missing: dict[str, int] = {}
    dependents: dict[str, list[str]] = defaultdict(list)
    ready: list[tuple[float, int, str]] = []
    for key, task in by_key.items():
        deps = {d for d in task.deps if d in by_key and d != key}
        missing[key] = len(deps)
        for dep in deps:
            dependents[dep].append(key)
        if not deps:
            heapq.heappush(ready, (0.0, order[key], key))
    running: list[tuple[float, int, str]] = []
    times: dict[str, Slot] = {}
    now = 0.0
    while ready or running:
        while ready and len(running) < parallel:
            ready_at, index, key = heapq.heappop(ready)
            end = now + by_key[key].seconds
            times[key] = Slot(ready_at, now, end)
            heapq.heappush(running, (end, index, key))
        now = running[0][0]
        while running and running[0][0] <= now:
            _, _, key = heapq.heappop(running)
            for dependent in dependents[key]:
                missing[dependent] -= 1
                if missing[dependent] == 0:
                    heapq.heappush(ready, (now, order[dependent], dependent))
    if len(times) != len(by_key):
        stuck = sorted(set(by_key) - set(times))[:5]
        raise ValueError(f"dependency cycle: {len(by_key) - len(times)} never ran, e.g. {stuck}")
    return Schedule(by_key, times, parallel)


# ---------------------------------------------------------------- the program's graph


def _type_chain(resource: Resource) -> str:
    return resource.urn.split("::")[2]


def kind_of(resource: Resource) -> str:
    """The row of the duration table a resource's create step uses."""
    if resource.type.startswith("pulumi:providers:"):
        return "provider"
    if not resource.custom:
        return "component"
    if resource.type == "kubernetes:batch/v1:Job":
        return steps.VALIDATION_JOB.suffix
    if resource.type == "command:remote:Command":
        chain = _type_chain(resource)
        for component, prefix in (("ControlPlaneImage", "cp-image"), ("GpuImage", "image")):
            if component in chain:
                for suffix in IMAGE_STEP_SUFFIXES:
                    if resource.name.endswith(f"-{suffix}"):
                        return f"{prefix}:{suffix}"
        if "GpuNode" in chain or "GpuValidation" in chain:
            for suffix in NODE_STEP_SUFFIXES:
                if resource.name.endswith(f"-{suffix}"):
                    return suffix
        if "ControlPlane" in chain:
            for suffix in CONTROL_PLANE_SUFFIXES:
                if resource.name.endswith(f"-{suffix}"):
                    return f"cp:{suffix}"
        return "other-command"
    return resource.type if resource.type in step_durations.COMMON else "other"


def cni_in_image(graph: Graph) -> bool:
    """The stack installs the CNI itself (a managed control plane runs `kubeadm init`): its
    baked GPU images hold the CNI's images."""
    return any(kind_of(resource) == f"cp:{steps.CP_INIT.suffix}" for resource in graph)


def _default_provider(resource: Resource) -> str | None:
    if not resource.custom or resource.provider or resource.type.startswith("pulumi:providers:"):
        return None
    return f"default-provider:{resource.type.split(':')[0]}"


def _natural(text: str) -> tuple[tuple[int, int | str], ...]:
    """A sort key that puts `node-2` before `node-10`."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", text) if p)


def tasks_from_graph(graph: Graph, baked: bool = False) -> list[Task]:
    """One task per registered resource, plus one per default provider, in a fixed order.

    The order breaks ties between steps ready at the same moment. The order in which the
    program registers resources varies from run to run (Outputs resolve on threads), so the
    tasks are ordered by URN, numbers compared as numbers (node 2 before node 10, as the program
    constructs them): the same program gives the same schedule every time."""
    tasks: dict[str, Task] = {}
    # The table in use, built once: an image's row replaces the COMMON row of the same kind.
    durations = dict(step_durations.all_rows(baked, cni_in_image(graph)))
    for resource in sorted(graph, key=lambda r: _natural(r.urn)):
        deps = set(graph.direct_dependencies(resource))
        if resource.parent in graph.by_urn:
            deps.add(resource.parent)
        provider = _default_provider(resource)
        if provider:
            deps.add(provider)
            if provider not in tasks:
                seconds = step_durations.COMMON["provider"].seconds
                tasks[provider] = Task(provider, (), seconds, "provider")
        kind = kind_of(resource)
        tasks[resource.urn] = Task(resource.urn, tuple(sorted(deps)), durations[kind].seconds, kind)
    return list(tasks.values())


def validated_keys(graph: Graph) -> dict[str, str]:
    """Node name -> the key of the step that proves it: its validation Job, else Node Ready."""
    jobs = {
        r.name.removesuffix(f"-{steps.VALIDATION_JOB.suffix}"): r.urn
        for r in graph
        if r.type == "kubernetes:batch/v1:Job"
        and r.name.endswith(f"-{steps.VALIDATION_JOB.suffix}")
    }
    if jobs:
        return jobs
    return {
        r.name.removesuffix(f"-{steps.JOIN.suffix}"): r.urn
        for r in graph
        if r.type == "command:remote:Command" and r.name.endswith(f"-{steps.JOIN.suffix}")
    }


# ---------------------------------------------------------------- one model run


@dataclass
class Result:
    stack: str
    nodes: int
    parallel: float
    baked: bool
    graph: Graph
    schedule: Schedule
    validated: dict[str, str]

    @property
    def first(self) -> float:
        return min(self.schedule.times[k].end for k in self.validated.values())

    @property
    def last_key(self) -> str:
        return max(self.validated.values(), key=lambda k: (self.schedule.times[k].end, k))

    @property
    def all(self) -> float:
        return self.schedule.times[self.last_key].end

    def summary(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
            "parallel": None if self.parallel == INFINITE else int(self.parallel),
            "firstValidatedSeconds": round(self.first, 1),
            "allValidatedSeconds": round(self.all, 1),
        }


def node_overrides(stack: str, nodes: int | None, baked: bool = False) -> dict[str, Any]:
    """Config overrides: encrypted values dropped (test secrets stand in); with `nodes` the
    pools replaced by one pool of `nodes` nodes of the first pool's type; with `baked` every
    pool on `image: baked`, and a managed control plane too."""
    stack_config = stacks.stack_file(stack)
    overrides: dict[str, Any] = {
        key: None
        for key, value in stack_config.items()
        if isinstance(value, dict) and "secure" in value
    }
    if nodes is not None:
        overrides.update(stacks.fleet_config(stack, nodes))
    pools = overrides.get("nodePools") or list(stack_config["gpu-cluster:nodePools"])
    if baked:
        overrides["nodePools"] = [{**pool, "image": "baked"} for pool in pools]
        # Over what fleet_config set (a pod block widened for the fleet), else the stack's own.
        control_plane = (
            overrides.get("controlPlane") or stack_config.get("gpu-cluster:controlPlane") or {}
        )
        if control_plane.get("mode") == "managed":
            overrides["controlPlane"] = {**control_plane, "image": "baked"}
    return overrides


@contextlib.contextmanager
def _images_built_earlier(stack: str, overrides: dict[str, Any]) -> Iterator[None]:
    """The account holds the baked images this stack needs, built by another stack: the
    program finds them and builds nothing (the common case; a first build is `--build-image`)."""
    settings = stacks.load_stack_settings(stack, config=overrides)
    saved = list(mocks.EXISTING_IMAGES)
    keys: list[builder.ImageKey] = [
        gpu_image.image_key(pool, settings, gpu_node.NVIDIA_CTK_VERSION)
        for pool in settings.node_pools
    ]
    if isinstance(settings.control_plane, ManagedControlPlane):
        keys.append(
            control_plane_image.image_key(settings.control_plane, settings.kubernetes_version)
        )
    for key in keys:
        tags = {**key.tags(), builder.BUILT_BY_TAG: "gpu-cluster/another-stack"}
        mocks.EXISTING_IMAGES.append((f"ami-{key.digest[:17]}", tags))
    try:
        yield
    finally:
        mocks.EXISTING_IMAGES[:] = saved


def record(
    stack: str, nodes: int | None = None, baked: bool = False, build_image: bool = False
) -> Graph:
    """The graph `pulumi up` registers for the stack (with `nodes`/`baked` as above); with
    `baked` and not `build_image`, the images exist already."""
    overrides = node_overrides(stack, nodes, baked)
    if baked and not build_image:
        with _images_built_earlier(stack, overrides):
            return stacks.run_program(stack, config=overrides)
    return stacks.run_program(stack, config=overrides)


def node_count(graph: Graph) -> int:
    return len(validated_keys(graph))


def model(
    stack: str,
    graph: Graph,
    parallel: float | None = None,
    baked: bool = False,
) -> Result:
    nodes = node_count(graph)
    if not nodes:
        raise ValueError(f"stack {stack!r} has no GPU nodes to validate")
    p = recommended_parallelism(nodes) if parallel is None else parallel
    schedule = simulate(tasks_from_graph(graph, baked), p)
    return Result(stack, nodes, p, baked, graph, schedule, validated_keys(graph))


# ---------------------------------------------------------------- printing


def _name(result: Result, key: str) -> str:
    resource = result.graph.by_urn.get(key)
    return resource.name if resource else key


def format_report(result: Result) -> str:
    p = "unbounded" if result.parallel == INFINITE else str(int(result.parallel))
    image = "baked" if result.baked else "stock"
    lines = [
        f"{result.stack}: {result.nodes} GPU node(s), {len(result.schedule.tasks)} steps, "
        f"--parallel {p}, {image} image",
        f"first validated GPU  {result.first:8.0f} s  ({result.first / 60:.1f} min)",
        f"all validated        {result.all:8.0f} s  ({result.all / 60:.1f} min)",
        "",
        f"critical path of the last validated node ({_name(result, result.last_key)}):",
        f"{'resource':<44} {'kind':<24} {'ready':>7} {'start':>7} {'end':>7} {'waited':>7}",
    ]
    for key in result.schedule.critical_path(result.last_key):
        slot = result.schedule.times[key]
        lines.append(
            f"{_name(result, key)[:44]:<44} {result.schedule.tasks[key].kind[:24]:<24} "
            f"{slot.ready:>7.0f} {slot.start:>7.0f} {slot.end:>7.0f} {slot.waited:>7.0f}"
        )
    waited = [s.waited for s in result.schedule.times.values()]
    peak = max((running for _, running, _ in result.schedule.busy()), default=0)
    lines += [
        "",
        f"slots busy at peak: {peak}; steps that waited for a slot: "
        f"{sum(w > 0 for w in waited)}, {sum(waited):.0f} s in all",
        "",
        "durations used (tools/step_durations.py):",
    ]
    used = {task.kind for task in result.schedule.tasks.values()}
    for kind, duration in step_durations.all_rows(result.baked, cni_in_image(result.graph)):
        if kind in used:
            lines.append(f"  {kind:<52} {duration.seconds:>6.0f} s  {duration.source}")
    return "\n".join(lines)


def gantt_svg(result: Result) -> str:
    """The critical path of the last validated node (waiting hatched, running filled) above the
    slot usage over time (steps running, steps ready but waiting, the slot limit)."""
    schedule = result.schedule
    path = schedule.critical_path(result.last_key)
    path = [k for k in path if schedule.tasks[k].seconds > 0 or schedule.times[k].waited > 0]
    span = max(schedule.makespan, 1.0)
    left, width, row, top = 300, 900, 16, 40
    chart_h = 220
    height = top + row * len(path) + 60 + chart_h + 60
    x = lambda t: left + width * t / span  # noqa: E731
    palette = {
        steps.DRIVER.suffix: "#d62728",
        steps.VALIDATION_JOB.suffix: "#2ca02c",
        steps.JOIN.suffix: "#98df8a",
    }
    p = "unbounded" if result.parallel == INFINITE else str(int(result.parallel))
    image = "baked" if result.baked else "stock"
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 40}" '
        f'height="{height}" font-family="sans-serif" font-size="11">',
        '<defs><pattern id="wait" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="3" height="6" fill="#bbb"/></pattern></defs>',
        f'<text x="10" y="18" font-size="14">{escape(result.stack)}: {result.nodes} GPU nodes, '
        f"--parallel {p}, {image}: first validated {result.first:.0f} s, all validated "
        f"{result.all:.0f} s</text>",
        f'<text x="10" y="{top - 6}">critical path of the last validated node '
        f"(hatched: ready, waiting for a slot)</text>",
    ]
    for index, key in enumerate(path):
        slot, kind = schedule.times[key], schedule.tasks[key].kind
        y = top + index * row
        out.append(f'<text x="10" y="{y + 12}">{escape(_name(result, key)[:44])}</text>')
        if slot.waited > 0:
            out.append(
                f'<rect x="{x(slot.ready):.1f}" y="{y + 2}" '
                f'width="{max(x(slot.start) - x(slot.ready), 1):.1f}" height="{row - 4}" '
                'fill="url(#wait)"/>'
            )
        out.append(
            f'<rect x="{x(slot.start):.1f}" y="{y + 2}" '
            f'width="{max(x(slot.end) - x(slot.start), 1):.1f}" height="{row - 4}" '
            f'fill="{palette.get(kind, "#1f77b4")}"><title>{escape(kind)}: '
            f"{slot.start:.0f}-{slot.end:.0f} s</title></rect>"
        )
    base = top + row * len(path) + 40
    profile = schedule.busy()
    limit = result.parallel if result.parallel != INFINITE else 0
    peak = max([limit, *(r + w for _, r, w in profile), 1])
    y = lambda n: base + chart_h - chart_h * n / peak  # noqa: E731
    out.append(
        f'<text x="10" y="{base - 8}">slots over time: running (blue), ready but waiting '
        f"(orange), limit (red)</text>"
    )
    for series, colour in ((1, "#1f77b4"), (2, "#ff7f0e")):
        points, level = [f"{x(0):.1f},{y(0):.1f}"], 0
        for time, running, waiting in profile:
            points.append(f"{x(time):.1f},{y(level):.1f}")
            level = running if series == 1 else waiting
            points.append(f"{x(time):.1f},{y(level):.1f}")
        points.append(f"{x(span):.1f},{y(level):.1f}")
        out.append(f'<polyline fill="none" stroke="{colour}" points="{" ".join(points)}"/>')
    if limit:
        out.append(
            f'<line x1="{left}" x2="{left + width}" y1="{y(limit):.1f}" y2="{y(limit):.1f}" '
            f'stroke="#d62728" stroke-dasharray="4 3"/>'
        )
    for n in sorted({0, int(peak), int(limit)}):
        out.append(f'<text x="{left - 40}" y="{y(n) + 4:.1f}">{n}</text>')
    axis = base + chart_h + 20
    step = next(s for s in (30, 60, 120, 300, 600, 1200, 3600, 7200) if span / s <= 12)
    tick = 0.0
    while tick <= span:
        out.append(
            f'<line x1="{x(tick):.1f}" x2="{x(tick):.1f}" y1="{top}" y2="{axis - 12}" '
            'stroke="#eee"/>'
        )
        out.append(f'<text x="{x(tick) - 8:.1f}" y="{axis}">{tick / 60:.0f}m</text>')
        tick += step
    out.append("</svg>")
    return "\n".join(out)


def table(stack: str, counts: Iterable[int] = TABLE_NODES) -> str:
    """First/all validated minutes for each node count at P 8, 16 and the recommendation,
    stock and baked; the ratio is all validated over one node's time at the same settings."""
    header = (
        "| nodes | P | stock first | stock all | all / 1 node | baked first | baked all "
        "| all / 1 node |\n|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    lines = [header]
    graphs = {
        (n, baked): record(stack, n, baked)
        for n in sorted(set(counts) | {1})
        for baked in (False, True)
    }
    one = {
        (label, baked): model(stack, graphs[(1, baked)], p, baked).all
        for label, p in [*((str(p), p) for p in TABLE_PARALLEL), ("rec", None)]
        for baked in (False, True)
    }
    for nodes in sorted(set(counts)):
        for label, p in [*((str(p), p) for p in TABLE_PARALLEL), ("rec", None)]:
            cells = []
            for baked in (False, True):
                result = model(stack, graphs[(nodes, baked)], p, baked)
                cells += [
                    f"{result.first / 60:.1f} min",
                    f"{result.all / 60:.1f} min",
                    f"{result.all / one[(label, baked)]:.2f}",
                ]
                p_cell = f"{int(result.parallel)} (rec)" if p is None else label
            lines.append(f"| {nodes} | {p_cell} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.timeline", description=__doc__.split("\n")[0]
    )
    parser.add_argument("stack", choices=stacks.STACKS)
    parser.add_argument(
        "--nodes",
        type=int,
        metavar="N",
        help="one pool of N nodes of the first pool's type instead of the stack's pools",
    )
    parser.add_argument(
        "--parallel",
        type=int,
        metavar="P",
        help="engine slots (default: the recommendation, python -m tools.parallelism)",
    )
    parser.add_argument(
        "--baked", action="store_true", help="GPU nodes boot from a baked image built earlier"
    )
    parser.add_argument(
        "--build-image", action="store_true", help="with --baked: this up builds the image"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    parser.add_argument(
        "--table",
        action="store_true",
        help=f"nodes {', '.join(map(str, TABLE_NODES))} x P 8, 16, recommended",
    )
    parser.add_argument(
        "--svg",
        type=Path,
        help="where to write the Gantt picture (default: build/timeline/<stack>-<nodes>.svg)",
    )
    args = parser.parse_args(argv)
    if args.nodes is not None and args.nodes < 1:
        parser.error("--nodes must be at least 1")
    if args.parallel is not None and args.parallel < 1:
        parser.error("--parallel must be at least 1")
    if args.table:
        print(table(args.stack))
        return 0
    if args.build_image and not args.baked:
        parser.error("--build-image needs --baked")
    graph = record(args.stack, args.nodes, args.baked, args.build_image)
    result = model(args.stack, graph, args.parallel, args.baked)
    if args.json:
        print(json.dumps(result.summary()))
        return 0
    print(format_report(result))
    svg = args.svg or OUT_DIR / f"{args.stack}-{result.nodes}{'-baked' if args.baked else ''}.svg"
    svg.parent.mkdir(parents=True, exist_ok=True)
    svg.write_text(gantt_svg(result))
    print(f"\nGantt picture: {svg}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How long a stack's first `pulumi up` takes, and which limit binds, modelled on the engine.

    python -m tools.timeline dev                        # report + Gantt picture (SVG)
    python -m tools.timeline dev --nodes 1000 --json    # one line: times, costs, binding limit
    python -m tools.timeline dev --table                # 1, 8, 64, 256, 1,000 nodes
    python -m tools.timeline dev --backend snapshot --capacity 200 --parallel 16 --baked

It simulates the engine (`tools/fleet_engine.py`) on the graph the real program registers under
the harness, with each step's duration and each limit's figures from `tools/step_durations.py`
(evaluation, checkpoints, EC2 launches and GPU capacity, the control plane's sshd). Why:
docs/decisions/016-the-bring-up-is-modelled-on-the-engine.md and 051 (a fleet's limits).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from components import catalog, gpu_node
from components.hosts import fan_in, steps
from components.images import builder, control_plane_image, gpu_image
from components.settings import ManagedControlPlane
from tools import node_cost, step_durations
from tools.fleet_engine import (
    INFINITE,
    REFUSED_CAPACITY,
    REFUSED_DIALS,
    Checkpoints,
    Launches,
    Limits,
    Schedule,
    Slot,
    Sshd,
    Task,
    simulate,
)
from tools.harness import mocks, stacks
from tools.harness.graph import Graph, Resource, unwrap
from tools.harness.stacks import ROOT
from tools.parallelism import recommended_parallelism

__all__ = ["INFINITE", "Schedule", "Slot", "Task", "model", "record", "simulate"]

OUT_DIR = ROOT / "build" / "timeline"
TABLE_NODES = (1, 8, 64, 256, 1000)
BACKENDS = ("journal", "snapshot", "skip")
# A limit binds when taking it away shortens the bring-up by at least this share.
BINDS = 0.05
# pulumi-command's dialErrorLimit when a connection sets none (connection.go dialErrorDefault).
DEFAULT_DIAL_LIMIT = 10


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
    # A node's token record (a Secret in graphs of earlier releases).
    if resource.type in ("pulumi:index:Stash", "kubernetes:core/v1:Secret") and (
        resource.name.endswith(f"-{steps.JOIN_TOKEN.suffix}")
    ):
        return steps.JOIN_TOKEN.suffix
    # A machine's first contact (the step table's FIRST_CONTACT rows), whatever its role.
    if resource.type == "command:local:Command":
        for row in (steps.HOST_KEY_ROTATION, steps.HOST_KEY_SWITCH):
            if resource.name.endswith(f"-{row.suffix}"):
                return row.suffix
    if resource.type == "command:remote:CopyToRemote":
        return steps.SCRIPTS.suffix
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


def control_plane_dials(graph: Graph) -> dict[str, int]:
    """The steps that open a session on the control plane (its own and the nodes' steps there,
    tools.node_cost), by URN, with their pulumi-command dialErrorLimit."""
    hosts = node_cost.control_plane_hosts(graph)
    found = {}
    for resource in graph:
        if resource.type not in node_cost.COMMAND_TYPES:
            continue
        connection = unwrap(resource.inputs.get("connection"))
        if isinstance(connection, dict) and connection.get("host") in hosts:
            limit = connection.get("dialErrorLimit")
            found[resource.urn] = DEFAULT_DIAL_LIMIT if limit is None else int(limit)
    return found


def program_positions(graph: Graph) -> dict[str, float]:
    """How many resources the program registers before each one, as it builds them: what no
    node owns first, then node after node (each node's resources together, at its end)."""
    nodes = node_cost.nodes_of(graph)
    components = {f"{node}-node": index for index, node in enumerate(nodes)}
    owner: dict[str, int | None] = {
        r.urn: components.get(r.name)
        for r in graph
        if r.type == node_cost.NODE_COMPONENT and r.name in components
    }

    def owner_of(urn: str | None) -> int | None:
        if urn is None or urn not in graph.by_urn:
            return None
        if urn not in owner:
            owner[urn] = owner_of(graph.by_urn[urn].parent)
        return owner[urn]

    for resource in graph:
        owner_of(resource.urn)
    shared = sorted((r for r in graph if owner[r.urn] is None), key=lambda r: _natural(r.urn))
    per_node = (len(graph) - len(shared)) / max(len(nodes), 1)
    positions = {resource.urn: float(index + 1) for index, resource in enumerate(shared)}
    for urn, index in owner.items():
        if index is not None:
            positions[urn] = len(shared) + (index + 1) * per_node
    return positions


def _launch(resource: Resource) -> str:
    if resource.type != "aws:ec2/instance:Instance":
        return ""
    return "gpu" if unwrap(resource.inputs.get("instanceType")) in catalog.CATALOG else "instance"


def tasks_from_graph(graph: Graph, baked: bool = False) -> list[Task]:
    """One task per registered resource, plus one per default provider, in a fixed order.

    The order breaks ties between steps ready at the same moment. The order in which the
    program registers resources varies from run to run (Outputs resolve on threads), so the
    tasks are ordered by URN, numbers compared as numbers (node 2 before node 10, as the program
    constructs them): the same program gives the same schedule every time."""
    tasks: dict[str, Task] = {}
    # The table in use, built once: an image's row replaces the COMMON row of the same kind.
    durations = dict(step_durations.all_rows(baked, cni_in_image(graph)))
    dials = control_plane_dials(graph)
    positions = program_positions(graph)
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
        tasks[resource.urn] = Task(
            resource.urn,
            tuple(sorted(deps)),
            durations[kind].seconds,
            kind,
            dial_limit=dials.get(resource.urn),
            launch=_launch(resource),
            input_bytes=node_cost.input_bytes(resource),
            state_bytes=node_cost.state_bytes(resource),
            position=positions[resource.urn],
        )
    return list(tasks.values())


def validated_keys(graph: Graph) -> dict[str, str]:
    """Node name -> the key of the step that proves it: its validation Job, else its join."""
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


# ---------------------------------------------------------------- the limits


def _figure(name: str) -> float:
    return step_durations.LIMITS[name].value


def checkpoints(backend: str, upload_bytes_per_second: float | None = None) -> Checkpoints:
    """Pulumi Cloud's journal, a self-managed backend's snapshots, or PULUMI_SKIP_CHECKPOINTS,
    with the cited rates (tools/step_durations.py LIMITS)."""
    upload = upload_bytes_per_second or _figure("upload")
    if backend == "journal":
        return Checkpoints(
            "journal",
            _figure("cloud-request"),
            upload,
            int(_figure("journal-batch-entries")),
            _figure("journal-batch-seconds"),
        )
    if backend == "snapshot":
        return Checkpoints("snapshot", _figure("snapshot-request"), upload)
    if backend == "skip":
        return Checkpoints("skip")
    raise ValueError(f"backend {backend!r}: one of {', '.join(BACKENDS)}")


def sshd_of(graph: Graph) -> Sshd:
    """A managed control plane's sshd takes MaxStartups for its fleet (components/hosts/
    fan_in.py); an existing one is taken to run OpenSSH's default."""
    managed = cni_in_image(graph)
    value = fan_in.max_startups(node_count(graph)) if managed else fan_in.OPENSSH_DEFAULT
    return Sshd(value, _figure("ssh-handshake"))


def default_limits(
    graph: Graph,
    backend: str = "journal",
    capacity: float = INFINITE,
    evaluation_seconds: float | None = None,
    upload_bytes_per_second: float | None = None,
) -> Limits:
    """Every limit, at the cited figures."""
    return Limits(
        evaluation_seconds=_figure("evaluation")
        if evaluation_seconds is None
        else evaluation_seconds,
        checkpoints=checkpoints(backend, upload_bytes_per_second),
        launches=Launches(
            _figure("run-instances-bucket"), _figure("run-instances-refill"), capacity
        ),
        sshd=sshd_of(graph),
    )


NO_LIMITS = Limits()
# Each limit, and the model without it (`--parallel` is taken away by unbounded slots).
WITHOUT = {
    "program evaluation": lambda limits: dataclasses.replace(limits, evaluation_seconds=0.0),
    "checkpoints": lambda limits: dataclasses.replace(limits, checkpoints=None),
    "EC2 launches": lambda limits: dataclasses.replace(limits, launches=None),
    "control-plane sshd": lambda limits: dataclasses.replace(limits, sshd=None),
}
SLOTS = "engine slots (--parallel)"


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

    def _ends(self) -> list[tuple[float, str]]:
        times = self.schedule.times
        return [
            (times[key].end, key)
            for key in self.validated.values()
            if key in times and not times[key].failed
        ]

    @property
    def unvalidated(self) -> list[str]:
        """Nodes never validated: a step of theirs failed (a refused launch, dials run out)."""
        done = {key for _, key in self._ends()}
        return sorted((n for n, key in self.validated.items() if key not in done), key=_natural)

    @property
    def first(self) -> float:
        return min((end for end, _ in self._ends()), default=INFINITE)

    @property
    def last_key(self) -> str:
        ends = self._ends()
        if not ends:
            return next(iter(self.validated.values()))
        return max(ends)[1]

    @property
    def all(self) -> float:
        return INFINITE if self.unvalidated else max(end for end, _ in self._ends())

    @property
    def limits(self) -> Limits:
        return self.schedule.limits

    def summary(self) -> dict[str, Any]:
        def seconds(value: float) -> float | None:
            return None if value == INFINITE else round(value, 1)

        return {
            "nodes": self.nodes,
            "parallel": None if self.parallel == INFINITE else int(self.parallel),
            "firstValidatedSeconds": seconds(self.first),
            "allValidatedSeconds": seconds(self.all),
            "resources": len(self.graph),
            "stateMB": round(state_megabytes(self.graph), 2),
            "controlPlaneSessions": sum(
                1 for task in self.schedule.tasks.values() if task.dial_limit is not None
            ),
            "unvalidated": len(self.unvalidated),
        }


def state_megabytes(graph: Graph) -> float:
    return sum(node_cost.state_bytes(resource) for resource in graph) / 1e6


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
    limits: Limits | None = None,
) -> Result:
    """The bring-up of `graph` at `parallel` slots (default: the recommendation) with `limits`
    (default: every limit at the cited figures, `default_limits`; NO_LIMITS: the engine and the
    hosts only)."""
    nodes = node_count(graph)
    if not nodes:
        raise ValueError(f"stack {stack!r} has no GPU nodes to validate")
    p = recommended_parallelism(nodes) if parallel is None else parallel
    chosen = default_limits(graph) if limits is None else limits
    schedule = simulate(tasks_from_graph(graph, baked), p, chosen)
    return Result(stack, nodes, p, baked, graph, schedule, validated_keys(graph))


@dataclass(frozen=True)
class Binding:
    """The limit that binds: what makes some node never validated, else the one whose removal
    brings all nodes' validation forward the most (`seconds`), when that is at least BINDS of
    the time; else "none" (the hosts' own chain decides)."""

    limit: str
    seconds: float
    detail: str

    def __str__(self) -> str:
        if self.seconds == INFINITE:
            return f"{self.limit}: {self.detail}"
        if self.limit == "none":
            return f"none, the hosts ({self.detail})"
        return f"{self.limit} (+{self.seconds:.0f} s): {self.detail}"


def binding(result: Result) -> Binding:
    schedule, limits = result.schedule, result.limits
    failed = list(schedule.failed.values())
    if REFUSED_CAPACITY in failed:
        assert limits.launches is not None
        refused = failed.count(REFUSED_CAPACITY)
        return Binding(
            "GPU capacity",
            INFINITE,
            f"{refused} launch(es) refused with InsufficientInstanceCapacity (the region gives "
            f"{limits.launches.gpu_capacity:.0f} now); {len(result.unvalidated)} node(s) never "
            "validated",
        )
    if REFUSED_DIALS in failed:
        assert limits.sshd is not None
        return Binding(
            "control-plane sshd",
            INFINITE,
            f"{failed.count(REFUSED_DIALS)} step(s) ran out of dials (MaxStartups "
            f"{limits.sshd.max_startups}; at most {limits.sshd.max_startups.start} "
            "unauthenticated at once for certain)",
        )
    tasks = list(schedule.tasks.values())
    gains: dict[str, float] = {}
    for name, without in WITHOUT.items():
        relaxed = without(limits)
        if relaxed != limits:
            gains[name] = result.all - _all(result, simulate(tasks, result.parallel, relaxed))
    if result.parallel != INFINITE:
        gains[SLOTS] = result.all - _all(result, simulate(tasks, INFINITE, limits))
    name, gain = max(gains.items(), key=lambda item: (item[1], item[0]), default=("none", 0.0))
    if gain >= BINDS * result.all:
        return Binding(name, gain, limit_detail(result, name))
    # No one limit: they may still add up (evaluation spreads the nodes out, which the
    # checkpoints' queue then does not have to).
    together = result.all - _all(result, simulate(tasks, INFINITE, NO_LIMITS))
    return Binding("none", gain, f"largest: {name} +{gain:.0f} s; all together +{together:.0f} s")


def _all(result: Result, schedule: Schedule) -> float:
    other = dataclasses.replace(result, schedule=schedule)
    return other.all


def limit_detail(result: Result, name: str) -> str:
    """What a limit did in this run, in a few words."""
    limits, stats = result.limits, result.schedule.stats
    if name == "program evaluation":
        last = max(task.position for task in result.schedule.tasks.values())
        return (
            f"{limits.evaluation_seconds * 1000:.1f} ms per resource, the last registered at "
            f"{last * limits.evaluation_seconds:.0f} s"
        )
    if name == "checkpoints" and limits.checkpoints is not None:
        return (
            f"{limits.checkpoints.backend}: {stats.checkpoint_writes:,} writes of "
            f"{stats.checkpoint_bytes / 1e6:,.1f} MB in all, busy {stats.checkpoint_busy:,.0f} s"
        )
    if name == "EC2 launches":
        return (
            f"{stats.launches_waited} launch(es) waited for a RunInstances token, at most "
            f"{stats.longest_launch_wait:.1f} s"
        )
    if name == "control-plane sshd" and limits.sshd is not None:
        return (
            f"MaxStartups {limits.sshd.max_startups}: {stats.refused_dials} dial(s) refused, "
            f"{stats.peak_unauthenticated} unauthenticated at once"
        )
    if name == SLOTS:
        return f"{int(result.parallel)} slots"
    return ""


# ---------------------------------------------------------------- printing


def _name(result: Result, key: str) -> str:
    resource = result.graph.by_urn.get(key)
    return resource.name if resource else key


def _time(seconds: float) -> str:
    return "never" if seconds == INFINITE else f"{seconds:8.0f} s  ({seconds / 60:.1f} min)"


def dial_budgets(result: Result) -> list[str]:
    """The dial budget of each kind of step on the control plane (dialErrorLimit x
    perDialTimeout, components/hosts/remote.py; pulumi-command fails after dialErrorLimit + 1
    refused dials) and the most dials a step of that budget made."""
    budgets: dict[tuple[int, Any], tuple[set[str], int]] = {}
    for key, task in result.schedule.tasks.items():
        if task.dial_limit is None:
            continue
        connection = unwrap(result.graph.by_urn[key].inputs.get("connection")) or {}
        budget = (task.dial_limit, connection.get("perDialTimeout"))
        slot = result.schedule.times.get(key)
        kinds, most = budgets.get(budget, (set(), 0))
        budgets[budget] = (kinds | {task.kind}, max(most, slot.dials if slot else 0))
    lines = []
    for (limit, timeout), (kinds, most) in sorted(budgets.items()):
        names = ", ".join(sorted(kinds)) if len(kinds) <= 2 else f"{len(kinds)} kinds of step"
        budget = "unlimited" if limit < 0 else f"dialErrorLimit {limit} x {timeout} s"
        lines.append(f"{names}: {budget}, at most {most} dial(s) made")
    return lines


def format_report(result: Result, bound: Binding | None = None) -> str:
    p = "unbounded" if result.parallel == INFINITE else str(int(result.parallel))
    image = "baked" if result.baked else "stock"
    limits, stats = result.limits, result.schedule.stats
    one = node_cost.cost(result.graph, node_cost.nodes_of(result.graph)[0])
    summary = result.summary()
    lines = [
        f"{result.stack}: {result.nodes} GPU node(s), {len(result.schedule.tasks)} steps, "
        f"--parallel {p}, {image} image",
        f"first validated GPU  {_time(result.first)}",
        f"all validated        {_time(result.all)}",
    ]
    if result.unvalidated:
        lines.append(f"never validated      {len(result.unvalidated)} node(s)")
    if bound is not None:
        lines.append(f"binding limit        {bound}")
    lines += [
        f"per node             {one.resources} resources, {one.state_bytes / 1e3:.1f} KB of "
        f"state, {one.control_plane_steps} control-plane session(s)",
        f"the stack            {summary['resources']:,} resources, {summary['stateMB']:.2f} MB "
        f"of state, {summary['controlPlaneSessions']:,} control-plane sessions",
        "",
        "limits (tools/step_durations.py LIMITS):",
        f"  program evaluation  {limit_detail(result, 'program evaluation')}",
    ]
    if limits.checkpoints is not None:
        lines.append(f"  checkpoints         {limit_detail(result, 'checkpoints')}")
    if limits.launches is not None:
        capacity = limits.launches.gpu_capacity
        lines.append(
            f"  EC2 launches        {limit_detail(result, 'EC2 launches')}; "
            f"{stats.gpus_launched} GPU machine(s) launched, capacity "
            f"{'unlimited' if capacity == INFINITE else f'{capacity:.0f}'}"
        )
    if limits.sshd is not None:
        lines.append(
            f"  control-plane sshd  {limit_detail(result, 'control-plane sshd')}, "
            f"{stats.peak_sessions} sessions at once"
        )
        lines.append(f"  dial budgets        {'; '.join(dial_budgets(result))}")
    lines += [
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


def _minutes(seconds: float) -> str:
    if seconds == INFINITE:
        return "never"
    return f"{seconds / 60:.1f} min" if seconds < 6000 else f"{seconds / 3600:.0f} h"


def table(
    stack: str,
    counts: Iterable[int] = TABLE_NODES,
    baked: bool = False,
    backend: str = "journal",
    capacity: float = INFINITE,
) -> str:
    """For each node count, at the recommended parallelism with every limit: resources, state,
    control-plane sessions, first and all validated, all over one node's time, the binding
    limit; and all validated with a self-managed backend instead."""
    header = (
        "| nodes | resources | state MB | CP sessions | first validated | all validated "
        "| all / 1 node | binding limit | all validated, self-managed backend |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---|---:|"
    )
    lines = [header]
    one = None
    for nodes in sorted(set(counts) | {1}):
        graph = record(stack, nodes, baked)
        result = model(stack, graph, baked=baked, limits=default_limits(graph, backend, capacity))
        if nodes == 1:
            one = result.all
        if nodes not in counts:
            continue
        diy = model(stack, graph, baked=baked, limits=default_limits(graph, "snapshot", capacity))
        summary, bound = result.summary(), binding(result)
        ratio = "-" if result.all == INFINITE or not one else f"{result.all / one:.2f}"
        added = "" if bound.seconds == INFINITE else f" (+{bound.seconds:.0f} s)"
        if bound.limit == "none":
            added = f" ({bound.detail})"
        lines.append(
            f"| {nodes:,} | {summary['resources']:,} | {summary['stateMB']:.1f} | "
            f"{summary['controlPlaneSessions']:,} | {_minutes(result.first)} | "
            f"{_minutes(result.all)} | {ratio} | {bound.limit}{added} | {_minutes(diy.all)} |"
        )
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
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="journal",
        help="journal: Pulumi Cloud (default); snapshot: a self-managed backend (S3, GCS, "
        "file); skip: PULUMI_SKIP_CHECKPOINTS",
    )
    parser.add_argument(
        "--capacity",
        type=int,
        metavar="N",
        help="GPU machines of the type the region can give now (default: unlimited)",
    )
    parser.add_argument(
        "--eval-ms",
        type=float,
        metavar="MS",
        help="program evaluation per resource, e.g. from python -m tools.benchmark "
        "(default: the measurement in tools/step_durations.py)",
    )
    parser.add_argument(
        "--upload-mbps",
        type=float,
        metavar="MB",
        help="upload bandwidth to the backend in MB/s (default: the cited figure)",
    )
    parser.add_argument(
        "--no-limits", action="store_true", help="the engine and the hosts only, as before"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    parser.add_argument(
        "--table",
        action="store_true",
        help=f"nodes {', '.join(map(str, TABLE_NODES))} at the recommended parallelism",
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
    if args.capacity is not None and args.capacity < 0:
        parser.error("--capacity must be at least 0")
    capacity = INFINITE if args.capacity is None else args.capacity
    if args.table:
        print(table(args.stack, baked=args.baked, backend=args.backend, capacity=capacity))
        return 0
    if args.build_image and not args.baked:
        parser.error("--build-image needs --baked")
    graph = record(args.stack, args.nodes, args.baked, args.build_image)
    limits = NO_LIMITS
    if not args.no_limits:
        limits = default_limits(
            graph,
            args.backend,
            capacity,
            None if args.eval_ms is None else args.eval_ms / 1000,
            None if args.upload_mbps is None else args.upload_mbps * 1e6,
        )
    result = model(args.stack, graph, args.parallel, args.baked, limits)
    bound = binding(result)
    if args.json:
        print(json.dumps({**result.summary(), "bindingLimit": bound.limit}))
        return 0
    print(format_report(result, bound))
    svg = args.svg or OUT_DIR / f"{args.stack}-{result.nodes}{'-baked' if args.baked else ''}.svg"
    svg.parent.mkdir(parents=True, exist_ok=True)
    svg.write_text(gantt_svg(result))
    print(f"\nGantt picture: {svg}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

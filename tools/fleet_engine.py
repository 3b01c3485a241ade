"""The engine's scheduling of a stack's steps, with the limits a fleet meets on the way: engine
slots (`--parallel`), the program's evaluation, each step's two checkpoints (Pulumi Cloud's
journal or a self-managed backend's whole snapshot), EC2's RunInstances bucket and GPU capacity,
and the control plane's sshd (`MaxStartups`, pulumi-command's dial retries).

Deterministic and pure: a list of `Task`s and `Limits` in, a `Schedule` out; tests give it small
graphs with known answers. `tools.timeline` builds the tasks from the program's graph, with the
figures of `tools/step_durations.py`. Why this shape: docs/decisions/
016-the-bring-up-is-modelled-on-the-engine.md and 051-the-model-meets-a-fleets-limits.md.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from components.hosts.fan_in import MaxStartups

INFINITE = math.inf
UNLIMITED_DIALS = -1  # pulumi-command dialErrorLimit -1: dial until the step's timeout
# pulumi `sdk/go/common/util/retry/until.go`: 100 ms, x1.5 after each failure, at most 5 s.
DIAL_RETRY_FIRST, DIAL_RETRY_BACKOFF, DIAL_RETRY_MOST = 0.1, 1.5, 5.0
# Why a step failed.
REFUSED_CAPACITY = "InsufficientInstanceCapacity"
REFUSED_DIALS = "dial limit"


@dataclass(frozen=True)
class Task:
    """One engine step: `key` waits for every key in `deps` and for its registration (the
    program registers `position` resources before it), then holds an engine slot `seconds` long,
    plus its checkpoints and waits. `dial_limit`: it dials the control plane, with
    pulumi-command's dialErrorLimit. `launch`: a RunInstances call, "gpu" for a GPU type."""

    key: str
    deps: tuple[str, ...]
    seconds: float
    kind: str = ""
    dial_limit: int | None = None
    launch: str = ""
    input_bytes: int = 0
    state_bytes: int = 0
    position: float = 0.0


@dataclass(frozen=True)
class Slot:
    """When a step was ready, got a slot, began its provider call, and ended (its end
    checkpoint stored); its dials of the control plane; why it failed, if it did."""

    ready: float
    start: float
    end: float
    began: float = 0.0
    dials: int = 0
    failed: str = ""

    @property
    def waited(self) -> float:
        return self.start - self.ready


@dataclass(frozen=True)
class Sshd:
    """The control plane's sshd: MaxStartups, and how long a dial stays unauthenticated."""

    max_startups: MaxStartups
    handshake_seconds: float


@dataclass(frozen=True)
class Checkpoints:
    """Where each step's two checkpoints go. `journal` (Pulumi Cloud): entries batched (at most
    `batch_entries`, or `batch_seconds` after the first), batches sent one at a time; `snapshot`
    (a self-managed backend): the whole state written per entry, one write at a time; `skip`
    (PULUMI_SKIP_CHECKPOINTS): nothing until the end. A send or write takes `request_seconds`
    plus its bytes at `upload_bytes_per_second`."""

    backend: str
    request_seconds: float = 0.0
    upload_bytes_per_second: float = INFINITE
    batch_entries: int = 100
    batch_seconds: float = 0.05


@dataclass(frozen=True)
class Launches:
    """EC2's RunInstances resource bucket (full at the start) and the GPU machines the region
    can give now (a launch past them is refused with InsufficientInstanceCapacity)."""

    bucket: float = 1000.0
    refill_per_second: float = 2.0
    gpu_capacity: float = INFINITE


@dataclass(frozen=True)
class Limits:
    evaluation_seconds: float = 0.0  # per resource the program registers before a step
    checkpoints: Checkpoints | None = None
    launches: Launches | None = None
    sshd: Sshd | None = None


@dataclass
class Stats:
    """What the limits did: the most unauthenticated connections at once (admitted), the most
    control-plane sessions at once, dials refused, checkpoint writes and their bytes and busy
    seconds, launches that waited for a token and the longest wait."""

    peak_unauthenticated: int = 0
    peak_sessions: int = 0
    refused_dials: int = 0
    checkpoint_writes: int = 0
    checkpoint_bytes: float = 0.0
    checkpoint_busy: float = 0.0
    launches_waited: int = 0
    longest_launch_wait: float = 0.0
    gpus_launched: int = 0


@dataclass
class Schedule:
    tasks: dict[str, Task]
    times: dict[str, Slot]
    parallel: float
    limits: Limits = field(default_factory=Limits)
    stats: Stats = field(default_factory=Stats)

    @property
    def makespan(self) -> float:
        return max((slot.end for slot in self.times.values()), default=0.0)

    @property
    def failed(self) -> dict[str, str]:
        return {key: slot.failed for key, slot in self.times.items() if slot.failed}

    def critical_path(self, key: str) -> list[str]:
        """The chain that decided when `key` finished: from it back through the dependency that
        finished last, to a task with none (empty for a task that never ran)."""
        if key not in self.times:
            return []
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


def dial_retry_delay(failed_dials: int) -> float:
    """pulumi-command's pause after its `failed_dials`-th failed dial."""
    return min(DIAL_RETRY_FIRST * DIAL_RETRY_BACKOFF ** (failed_dials - 1), DIAL_RETRY_MOST)


class _Bucket:
    """A token bucket, full at time 0; requests arrive in time order, a token owed is a wait."""

    def __init__(self, size: float, rate: float):
        self.size, self.rate, self.tokens, self.last = size, rate, size, 0.0

    def take(self, now: float) -> float:
        self.tokens = min(self.size, self.tokens + (now - self.last) * self.rate)
        self.last = now
        self.tokens -= 1
        return now if self.tokens >= 0 else now + -self.tokens / self.rate


@dataclass
class _Batch:
    number: int
    deadline: float
    entries: list[tuple[str, Callable[[str], None]]] = field(default_factory=list)
    bytes: float = 0.0


class _Simulation:
    def __init__(self, tasks: Iterable[Task], parallel: float, limits: Limits):
        if parallel < 1:
            raise ValueError(f"parallel must be at least 1, got {parallel}")
        self.tasks: dict[str, Task] = {}
        for task in tasks:
            self.tasks[task.key] = task
        self.parallel, self.limits, self.stats = parallel, limits, Stats()
        self.order = {key: index for index, key in enumerate(self.tasks)}
        self.missing: dict[str, int] = {}
        self.dependents: dict[str, list[str]] = defaultdict(list)
        for key, task in self.tasks.items():
            deps = {d for d in task.deps if d in self.tasks and d != key}
            self.missing[key] = len(deps)
            for dep in deps:
                self.dependents[dep].append(key)
        self.now = 0.0
        self.ready: list[tuple[float, int, str]] = []
        self.events: list[tuple[float, int, Callable[[str], None], str]] = []
        self.sequence = 0
        self.running = 0
        self.ready_at: dict[str, float] = {}
        self.started: dict[str, float] = {}
        self.began: dict[str, float] = {}
        self.dials: dict[str, int] = {}
        self.times: dict[str, Slot] = {}
        launches = limits.launches
        self.bucket = _Bucket(launches.bucket, launches.refill_per_second) if launches else None
        self.unauthenticated: list[float] = []  # when each admitted dial authenticates
        self.sessions = 0
        # checkpoints
        self.store_free = 0.0  # when the backend's one write or send in flight ends
        self.pending_bytes = 0.0
        self.stored_bytes = 0.0
        self.batch: _Batch | None = None
        self.batches = 0

    # ---------------------------------------------------------------- the loop

    def at(self, time: float, then: Callable[[str], None], key: str) -> None:
        self.sequence += 1
        heapq.heappush(self.events, (time, self.sequence, then, key))

    def run(self) -> Schedule:
        for key, missing in self.missing.items():
            if missing == 0:
                self._ready(key)
        while True:
            while self.running < self.parallel and self.ready and self.ready[0][0] <= self.now:
                _, _, key = heapq.heappop(self.ready)
                self._start(key)
            upcoming = [self.events[0][0]] if self.events else []
            if self.ready and self.running < self.parallel:
                upcoming.append(max(self.ready[0][0], self.now))
            if not upcoming:
                break
            self.now = min(upcoming)
            while self.events and self.events[0][0] <= self.now:
                _, _, then, key = heapq.heappop(self.events)
                then(key)
        never = set(self.tasks) - set(self.times)
        if never and not any(slot.failed for slot in self.times.values()):
            stuck = sorted(never)[:5]
            raise ValueError(f"dependency cycle: {len(never)} never ran, e.g. {stuck}")
        return Schedule(self.tasks, self.times, self.parallel, self.limits, self.stats)

    def _ready(self, key: str) -> None:
        registered = self.tasks[key].position * self.limits.evaluation_seconds
        ready = max(self.now, registered)
        self.ready_at[key] = ready
        heapq.heappush(self.ready, (ready, self.order[key], key))

    def _start(self, key: str) -> None:
        self.running += 1
        self.started[key] = self.now
        self._checkpoint(key, begin=True, then=self._call)

    def _call(self, key: str) -> None:
        """The provider call: a launch waits for a token, a control-plane step for sshd."""
        task = self.tasks[key]
        self.began[key] = self.now
        if task.launch and self.limits.launches is not None:
            self._launch(key)
        elif task.dial_limit is not None and self.limits.sshd is not None:
            self._dial(key)
        else:
            self.at(self.now + task.seconds, self._work_done, key)

    def _launch(self, key: str) -> None:
        launches, task = self.limits.launches, self.tasks[key]
        assert launches is not None and self.bucket is not None
        if task.launch == "gpu":
            if self.stats.gpus_launched >= launches.gpu_capacity:
                self._fail(key, REFUSED_CAPACITY)
                return
            self.stats.gpus_launched += 1
        token = self.bucket.take(self.now)
        if token > self.now:
            self.stats.launches_waited += 1
            self.stats.longest_launch_wait = max(self.stats.longest_launch_wait, token - self.now)
        self.at(token + task.seconds, self._work_done, key)

    def _dial(self, key: str) -> None:
        """One dial: admitted while fewer than `start` connections are unauthenticated (past
        it sshd drops at random: the model counts it dropped), else retried as pulumi-command
        does until its dial limit."""
        sshd, task = self.limits.sshd, self.tasks[key]
        assert sshd is not None and task.dial_limit is not None
        while self.unauthenticated and self.unauthenticated[0] <= self.now:
            heapq.heappop(self.unauthenticated)
        self.dials[key] = self.dials.get(key, 0) + 1
        if len(self.unauthenticated) < sshd.max_startups.start:
            heapq.heappush(self.unauthenticated, self.now + sshd.handshake_seconds)
            self.stats.peak_unauthenticated = max(
                self.stats.peak_unauthenticated, len(self.unauthenticated)
            )
            self.sessions += 1
            self.stats.peak_sessions = max(self.stats.peak_sessions, self.sessions)
            self.at(self.now + task.seconds, self._work_done, key)
            return
        self.stats.refused_dials += 1
        failed = self.dials[key]
        if task.dial_limit != UNLIMITED_DIALS and failed > task.dial_limit:
            self._fail(key, REFUSED_DIALS)
            return
        self.at(self.now + dial_retry_delay(failed), self._dial, key)

    def _work_done(self, key: str) -> None:
        if key in self.dials:
            self.sessions -= 1
        self._checkpoint(key, begin=False, then=self._finish)

    def _finish(self, key: str, failed: str = "") -> None:
        self.running -= 1
        self.times[key] = Slot(
            self.ready_at[key],
            self.started[key],
            self.now,
            self.began.get(key, self.now),
            self.dials.get(key, 0),
            failed,
        )
        if failed:
            return
        for dependent in self.dependents[key]:
            self.missing[dependent] -= 1
            if self.missing[dependent] == 0:
                self._ready(dependent)

    def _fail(self, key: str, reason: str) -> None:
        self._finish(key, failed=reason)

    # ---------------------------------------------------------------- checkpoints

    def _checkpoint(self, key: str, *, begin: bool, then: Callable[[str], None]) -> None:
        """The entry a step stores before its provider call (begin) or after it; the step
        goes on when the backend has it."""
        checkpoints, task = self.limits.checkpoints, self.tasks[key]
        if checkpoints is None or checkpoints.backend == "skip":
            then(key)
            return
        if checkpoints.backend == "snapshot":
            if begin:
                self.pending_bytes += task.input_bytes
            else:
                self.pending_bytes -= task.input_bytes
                self.stored_bytes += task.state_bytes
            size = self.pending_bytes + self.stored_bytes
            self._store(size, self.now, [(key, then)])
            return
        if checkpoints.backend != "journal":
            raise ValueError(f"unknown checkpoint backend {checkpoints.backend!r}")
        batch = self.batch
        if batch is not None and self.now >= batch.deadline:
            self._send_batch(batch.deadline)
            batch = None
        if batch is None:
            # The batch timer restarts when the send before it is done (sendBatches stops the
            # ticker when it queues a batch; the sender resets it after each send).
            self.batches += 1
            deadline = max(self.now, self.store_free) + checkpoints.batch_seconds
            batch = _Batch(self.batches, deadline)
            self.batch = batch
            self.at(batch.deadline, self._batch_due, str(batch.number))
        batch.entries.append((key, then))
        batch.bytes += task.input_bytes if begin else task.state_bytes
        if len(batch.entries) >= checkpoints.batch_entries:
            self._send_batch(self.now)

    def _batch_due(self, number: str) -> None:
        batch, checkpoints = self.batch, self.limits.checkpoints
        if batch is None or str(batch.number) != number:
            return
        assert checkpoints is not None
        if self.store_free > self.now:  # a full batch went out meanwhile: wait for it
            batch.deadline = self.store_free + checkpoints.batch_seconds
            self.at(batch.deadline, self._batch_due, number)
            return
        self._send_batch(self.now)

    def _send_batch(self, closed: float) -> None:
        batch = self.batch
        assert batch is not None
        self.batch = None
        self._store(batch.bytes, closed, batch.entries)

    def _store(
        self, size: float, arrived: float, waiting: list[tuple[str, Callable[[str], None]]]
    ) -> None:
        """One write (a snapshot) or send (a batch), after the one before it."""
        checkpoints = self.limits.checkpoints
        assert checkpoints is not None
        start = max(arrived, self.store_free)
        done = start + checkpoints.request_seconds + size / checkpoints.upload_bytes_per_second
        self.store_free = done
        self.stats.checkpoint_writes += 1
        self.stats.checkpoint_bytes += size
        self.stats.checkpoint_busy += done - start
        for key, then in waiting:
            self.at(done, then, key)


def simulate(
    tasks: Iterable[Task], parallel: float = INFINITE, limits: Limits | None = None
) -> Schedule:
    """List scheduling as the engine does it (FIFO by ready time, ties in the given order, at
    most `parallel` steps at once), with `limits` (none: the engine and the hosts only)."""
    return _Simulation(tasks, parallel, limits or Limits()).run()

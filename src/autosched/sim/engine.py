"""The discrete-event engine.

Time jumps from event to event: job arrivals, job completions, and wake-ups that a policy asks
for (a job crossing a queue threshold, a decision interval). After all events of one instant are
applied, the policy of every partition they touched decides which jobs start or stop. What a
policy sees and when it is called is the contract in `sim/contract.py`.

Per-job state lives in flat lists indexed by the job's row in the (submit-sorted) trace. Policies
see none of them: they get tuples (`JobInfo`) and read-only views, and may start or stop a job
only while the engine has them decide (`schedule`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from heapq import heappop, heappush
from types import MappingProxyType
from typing import Any, Generic, Self, TypeVar

import numpy as np
import numpy.typing as npt

from ..cluster import ClusterSpec
from ..errors import SimulationError
from ..trace.table import Trace
from .contract import JobInfo, PolicyHooks
from .placement import Alloc, NodePool, NodeView

_FINISH, _WAKE = 0, 1
WAITING, RUNNING, DONE, FUTURE = 0, 1, 2, 3

P = TypeVar("P", bound=PolicyHooks)  # the policy type a run was given: its clones are of it


class SimPartition:
    """One scheduling domain (the whole cluster, or one VC): its nodes and its running jobs.

    The engine's implementation of `contract.Partition`, the whole interface between a policy
    and the engine (the methods are documented there).
    """

    def __init__(self, sim: "Simulator[Any]", index: int, name: str, pool: NodePool):
        self.sim = sim
        self.index = index
        self.name = name
        self._pool = pool  # the engine's: only start, preempt and a finish change it
        self.pool = NodeView(pool)  # what the policy sees
        self.capacity = pool.capacity
        self._running: dict[int, None] = {}  # job -> None, in start order
        self.running: Mapping[int, None] = MappingProxyType(self._running)  # what the policy sees
        self.placement = "consolidate"
        self._wake_version = 0
        self._wake_time = math.nan  # of the latest request

    @property
    def now(self) -> float:
        return self.sim.now

    @property
    def cluster(self) -> ClusterSpec:
        return self.sim.cluster

    @property
    def free(self) -> int:
        return self._pool.free_gpus

    def start(self, j: int, exclude: int = 0) -> bool:
        """Start (or resume) waiting job j; False when placement finds no room (outside the
        nodes in the bitmask `exclude`, when given)."""
        s = self.sim
        if s._deciding is not self:
            raise _outside_schedule("start", j)
        if s.state[j] != WAITING:
            raise SimulationError(f"job {j} cannot start: it is not waiting")
        alloc = self._pool.place(s._gpus[j], self.placement, exclude)
        if alloc is None:
            return False
        now = s.now
        s._alloc[j] = alloc
        speed = s._spread_speed if len(alloc) > 1 else 1.0
        s._speed[j] = speed
        ovh = s._overhead[j]
        s._run_start[j] = now
        if s._first_start[j] != s._first_start[j]:  # NaN: first run
            s._first_start[j] = now
        s.state[j] = RUNNING
        self._running[j] = None
        s._push(now + ovh + s._remaining[j] / speed, _FINISH, j, s._version[j])
        return True

    def preempt(self, j: int) -> None:
        """Stop running job j; it keeps its progress and pays the restart overhead when resumed."""
        s = self.sim
        if s._deciding is not self:
            raise _outside_schedule("preempt", j)
        if s.state[j] != RUNNING:
            raise SimulationError(f"job {j} cannot be preempted: it is not running")
        now = s.now
        done = max(0.0, now - s._run_start[j] - s._overhead[j]) * s._speed[j]
        s._remaining[j] = max(0.0, s._remaining[j] - done)
        s._stop(self, j, now)
        s._overhead[j] = s._restart[j]  # paid by the next run
        s._preemptions[j] += 1
        s._version[j] += 1
        s._wait_start[j] = now
        s.state[j] = WAITING

    def wake_at(self, t: float) -> None:
        """Ask for a decision at time t. ONE pending request per partition: this replaces the
        previous one (a stale heap entry is recognised by its version and skipped)."""
        if t != t:  # NaN: it would break the order of the event heap
            raise SimulationError(f"wake_at({t}): a wake-up time must be a number (NaN is not)")
        if t <= self.sim.now or t == math.inf or t == self._wake_time:
            return  # (the same time as the pending request: that one stands)
        self._wake_time = t
        self._wake_version += 1
        self.sim._push(t, _WAKE, self.index, self._wake_version)

    def cancel_wake(self) -> None:
        """Drop the pending request (its heap entry is skipped by its version)."""
        self._wake_version += 1
        self._wake_time = math.nan

    def attained(self, j: int, now: float) -> float:
        """GPU-seconds job j has held its GPUs so far (restart overhead included; with what it
        held before its submission)."""
        return self.executed(j, now) * self.sim._gpus[j]

    def executed(self, j: int, now: float) -> float:
        """Seconds job j has held its GPUs so far (with what it ran before its submission)."""
        s = self.sim
        t = s._executed[j] + (now - s._run_start[j] if j in self._running else 0.0)
        return t if s._prior is None else s._prior[j] + t

    def served(self, j: int, now: float) -> float:
        """Seconds of work job j has done so far (its observable progress, not its total)."""
        s = self.sim
        done = s._duration[j] - s._remaining[j]
        if j in self._running:
            done += max(0.0, now - s._run_start[j] - s._overhead[j]) * s._speed[j]
        return done

    def allocation(self, j: int) -> Alloc:
        """(node, GPUs) pairs running job j holds (() under 'count' placement)."""
        alloc = self.sim._alloc[j]
        if alloc is None:
            raise SimulationError(f"job {j} holds no GPUs: it is not running")
        return alloc

    def run_started(self, j: int) -> float:
        """When the current run of running job j began."""
        return self.sim._run_start[j]

    def waiting_since(self, j: int) -> float:
        """When waiting job j last began waiting (its submission, or its last preemption)."""
        return self.sim._wait_start[j]

    def remaining(self, j: int, now: float) -> float:
        """Seconds of work left (oracle policies only: a real scheduler cannot know this)."""
        s = self.sim
        if s.jobs.duration is None:
            raise SimulationError("remaining() reads true durations; only oracle policies may call it")
        if j in self._running:
            done = max(0.0, now - s._run_start[j] - s._overhead[j]) * s._speed[j]
            return max(0.0, s._remaining[j] - done)
        return s._remaining[j]


@dataclass(frozen=True)
class JobRecords:
    """What happened to every job (arrays in trace order). Times in seconds."""

    submit: npt.NDArray[np.float64]
    first_start: npt.NDArray[np.float64]
    end: npt.NDArray[np.float64]
    gpus: npt.NDArray[np.int64]
    duration: npt.NDArray[np.float64]
    run_time: npt.NDArray[np.float64]  # seconds holding GPUs (restart overheads included)
    preemptions: npt.NDArray[np.int64]
    partition: npt.NDArray[np.int64]
    # True where the job hit its time limit and was ended there (all False without limits).
    killed: npt.NDArray[np.bool_] | None = None

    @property
    def jct(self) -> npt.NDArray[np.float64]:
        return self.end - self.submit

    @property
    def queue(self) -> npt.NDArray[np.float64]:
        return self.jct - self.run_time


class Simulator(Generic[P]):
    """Replays a trace on a cluster under a policy.

    ``run(until=t)`` stops before the first event after t, so a caller can ``reconfigure`` the
    policy (as an operator would reconfigure the live scheduler) and ``run()`` on. ``policies``
    holds each partition's clone of the policy, of the type the caller gave (``Simulator[P]``).
    """

    def __init__(self, trace: Trace, cluster: ClusterSpec, policy: P, *,
                 record_segments: bool = False,
                 progress: Callable[[int, int], None] | None = None):
        self.trace = trace
        self.cluster = cluster
        self.now = 0.0
        n = len(trace)
        self.n = n
        part = cluster.partition_of(trace)
        if n and part.min() < 0:
            raise SimulationError("some jobs belong to no partition of the cluster; call fit_to_cluster first")
        cap = np.asarray(cluster.partition_gpus())
        if n and (trace.num_gpus > cap[part]).any():
            raise SimulationError("some jobs need more GPUs than their partition has; call fit_to_cluster first")
        self._part: list[int] = part.tolist()
        self._submit: list[float] = trace.submit_time.tolist()
        self._gpus: list[int] = trace.num_gpus.tolist()
        self._limit: npt.NDArray[np.float64] | None = None if trace.time_limit is None else np.where(
            np.isnan(trace.time_limit), math.inf, trace.time_limit)
        if self._limit is None:
            self._duration: list[float] = trace.duration.tolist()
        else:  # as Slurm, a job that would run past its time limit is ended at the limit
            self._duration = np.minimum(trace.duration, self._limit).tolist()
        self._remaining = list(self._duration)
        self._overhead = [0.0] * n  # restart overhead of the current run (while waiting: of the next)
        self._restart: list[float] = [cluster.overhead(g) for g in self._gpus]  # a resumed run's overhead
        self._speed = [1.0] * n
        self._run_start = [math.nan] * n
        self._first_start = [math.nan] * n
        self._end = [math.nan] * n
        self._executed = [0.0] * n  # in this run (records' run_time); `_prior` adds what came before
        # Seconds each job ran before its submission (the trace's attained / GPUs); None: none.
        self._prior: list[float] | None = None if trace.attained is None else (
            trace.attained / trace.num_gpus).tolist()
        self._preemptions = [0] * n
        self._alloc: list[Alloc | None] = [None] * n
        self._version = [0] * n
        self._wait_start: list[float] = list(self._submit)
        self.state = [FUTURE] * n
        self._deciding: SimPartition | None = None  # the partition whose `schedule` runs now
        self.segments: list[tuple[int, float, float, Alloc]] | None = [] if record_segments else None
        self._heap: list[tuple[float, int, int, int, int]] = []
        self._seq = 0
        self._next_arrival = 0
        self.finished = 0
        self._progress = progress
        self._spread_speed = 1.0 / cluster.spread_slowdown
        coded = {name: _codes(col) for name, col in (("vc", trace.vc), ("user", trace.user),
                                                      ("account", trace.account), ("partition", trace.partition))
                 if col is not None}
        # Copies (tuples), never the lists above: what a policy is handed, it cannot change.
        self.jobs = JobInfo(
            submit=tuple(self._submit),
            gpus=tuple(self._gpus),
            vc=coded["vc"][0] if "vc" in coded else None,
            user=coded["user"][0] if "user" in coded else None,
            duration=tuple(self._duration) if policy.oracle else None,
            time_limit=None if self._limit is None else tuple(self._limit.tolist()),
            cpus=None if trace.num_cpus is None else tuple(trace.num_cpus.tolist()),
            account=coded["account"][0] if "account" in coded else None,
            partition=coded["partition"][0] if "partition" in coded else None,
            labels=MappingProxyType({name: labels for name, (_, labels) in coded.items()}),
            origin=None if trace.age is None else tuple((trace.submit_time - trace.age).tolist()),
        )
        self.partitions = [
            SimPartition(self, i, name, NodePool(nodes, cluster.gpus_per_node))
            for i, (name, nodes) in enumerate(cluster.vc_nodes)
        ]
        # `policy` itself stays unbound: each partition runs its own clone.
        self.policies: list[P] = [policy.clone() for _ in self.partitions]
        for pol, p in zip(self.policies, self.partitions):
            pol.bind(p, self.jobs)

    # ------------------------------------------------------------------------------ the loop

    def run(self, until: float = math.inf) -> Self:
        """Replay events up to and including time `until` (default: to the end) and return self.

        Stopped early, the clock stands at `until`, so a `reconfigure` acts then, and a later
        ``run()`` goes on. Run to the end, it raises SimulationError if some job never finished
        (a policy left jobs waiting with nothing left to wake it). `until` before the clock (or
        NaN) is a SimulationError: the clock never goes back."""
        if not until >= self.now:
            raise SimulationError(f"run(until={until}): the clock stands at {self.now:g}, and a run "
                                  "only goes forward (give a time at or after it)")
        heap, submit, n = self._heap, self._submit, self.n
        policies, part_of, state, version = self.policies, self._part, self.state, self._version
        partitions, progress, inf = self.partitions, self._progress, math.inf
        i = self._next_arrival
        steps = 0
        while True:
            t = submit[i] if i < n else inf
            if heap and heap[0][0] < t:
                t = heap[0][0]
            if t == inf or t > until:
                break
            self.now = t
            dirty: list[int] = []  # partitions touched at this instant (few: a list beats a set)
            while i < n and submit[i] == t:
                p = part_of[i]
                state[i] = WAITING
                policies[p].on_arrival(i, t)
                if p not in dirty:
                    dirty.append(p)
                i += 1
            while heap and heap[0][0] == t:
                _, _, kind, a, v = heappop(heap)
                if kind == _FINISH:
                    if v == version[a] and state[a] == RUNNING:
                        self._finish(a, t)
                        if part_of[a] not in dirty:
                            dirty.append(part_of[a])
                elif v == partitions[a]._wake_version and a not in dirty:
                    dirty.append(a)
            if len(dirty) > 1:
                dirty.sort()
            try:
                for p in dirty:
                    self._deciding = partitions[p]
                    policies[p].schedule(t)
            finally:
                self._deciding = None
            steps += 1
            if progress is not None and steps % 2048 == 0:
                progress(self.finished, n)
        self._next_arrival = i
        if self.now < until < math.inf:
            self.now = until  # the clock stops at `until`: a reconfigure then acts at that time
        if until == math.inf and self.finished < n:
            stuck = [j for j in range(n) if self.state[j] != DONE][:5]
            raise SimulationError(
                f"{n - self.finished} job(s) never finished (e.g. rows {stuck}); "
                "the policy left them waiting with nothing left to wake it"
            )
        if self._progress is not None:
            self._progress(self.finished, n)
        return self

    def reconfigure(self, config: Mapping[str, Any]) -> None:
        """Give every partition's policy a new config now (``on_reconfigure``), then let each
        decide (``schedule``); queued and running jobs carry over."""
        for pol in self.policies:
            pol.on_reconfigure(config, self.now)
        try:
            for pol, part in zip(self.policies, self.partitions):
                self._deciding = part
                pol.schedule(self.now)
        finally:
            self._deciding = None

    # ------------------------------------------------------------------------ job transitions

    def _push(self, t: float, kind: int, a: int, version: int) -> None:
        self._seq += 1
        heappush(self._heap, (t, self._seq, kind, a, version))

    def _finish(self, j: int, now: float) -> None:
        part = self.partitions[self._part[j]]
        self._remaining[j] = 0.0
        self._stop(part, j, now)
        self._end[j] = now
        self.state[j] = DONE
        self.finished += 1
        self.policies[self._part[j]].on_finish(j, now)

    def _stop(self, part: SimPartition, j: int, now: float) -> None:
        self._executed[j] += now - self._run_start[j]
        alloc = self._alloc[j]
        assert alloc is not None  # j is running: its callers checked (for mypy; free at run time with -O)
        part._pool.release(self._gpus[j], alloc)
        del part._running[j]
        if self.segments is not None:
            self.segments.append((j, self._run_start[j], now, alloc))
        self._alloc[j] = None

    # ---------------------------------------------------------------------------- results

    def records(self) -> JobRecords:
        """What happened to every job so far (after ``run()``: the whole replay)."""
        return JobRecords(
            submit=np.asarray(self._submit),
            first_start=np.asarray(self._first_start),
            end=np.asarray(self._end),
            gpus=np.asarray(self._gpus, dtype=np.int64),
            duration=self.trace.duration,
            run_time=np.asarray(self._executed),
            preemptions=np.asarray(self._preemptions, dtype=np.int64),
            partition=np.asarray(self._part, dtype=np.int64),
            killed=np.zeros(self.n, dtype=bool) if self._limit is None else self.trace.duration > self._limit,
        )


def _codes(col: np.ndarray) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Each row's index into the column's sorted distinct values, and those values."""
    uniques, inverse = np.unique(col.astype(str), return_inverse=True)
    codes: list[int] = inverse.tolist()
    return tuple(codes), tuple(uniques.tolist())


def _outside_schedule(action: str, j: int) -> SimulationError:
    return SimulationError(f"cannot {action} job {j} here: a policy starts and preempts jobs only in its "
                           "schedule hook, never in bind, on_arrival, on_finish or on_reconfigure (sim/contract.py)")

"""Shortest remaining time first: an ORACLE baseline (preemptive, reads true durations).

Also home of `PriorityQueue`, the greedy preemptive pass shared with preemptive ``qssf``.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Callable, Sequence
from heapq import merge
from typing import TypeAlias

from ..sim.contract import JobInfo, Partition
from ..space import ConfigSpace
from .base import PLACEMENT, Policy

# (key..., job): compared as tuples, the job index last breaks ties. srtf: (remaining, job);
# qssf: (estimate x GPUs, GPUs, job).
Entry: TypeAlias = tuple[float, int] | tuple[float, int, int]


class PriorityQueue:
    """Waiting jobs sorted by a key that does not change while they wait, and the greedy pass
    of a preemptive policy: all active jobs (running and waiting) are taken in key order while
    their GPUs fit in the partition's GPU count; running jobs not taken are preempted, waiting
    jobs taken are started (one that placement cannot fit stays waiting). This is the Lucid
    simulator's ``srtf`` (and Tiresias's) decision, made at events instead of every second.

    A running job's key may only fall while it runs (remaining work shrinks), so its key at
    start bounds it: running jobs whose bound is below the best waiting job's key come first
    in any case and are kept without computing their key now.
    """

    def __init__(self, part: Partition, gpus: Sequence[int]):
        self.part = part
        self.gpus = gpus
        self.waiting: list[Entry] = []
        self.sizes: Counter[int] = Counter()  # GPU counts of the waiting jobs
        self.demand = 0  # GPUs of all active jobs
        self.bounds: list[Entry] = []  # running jobs' entries when they started, sorted
        self.bound_of: dict[int, Entry] = {}

    def __len__(self) -> int:
        return len(self.waiting)

    def add(self, entry: Entry, new: bool) -> None:
        insort(self.waiting, entry)
        g = self.gpus[entry[-1]]
        self.sizes[g] += 1
        if new:
            self.demand += g

    def finished(self, j: int) -> None:
        self.demand -= self.gpus[j]
        self._unbound(j)

    def _unbound(self, j: int) -> None:
        entry = self.bound_of.pop(j)
        del self.bounds[bisect_left(self.bounds, entry)]

    def start(self, entry: Entry) -> bool:
        """Start waiting job `entry` (placement permitting)."""
        j = entry[-1]
        if not self.part.start(j):
            return False
        del self.waiting[bisect_left(self.waiting, entry)]
        g = self.gpus[j]
        self.sizes[g] -= 1
        if not self.sizes[g]:
            del self.sizes[g]
        self.bound_of[j] = entry
        insort(self.bounds, entry)
        return True

    def decide(self, entry_of: Callable[[int], Entry]) -> None:
        """One decision. `entry_of(j)` gives job j's entry now (for a running job, and for a job
        just preempted: its key as a waiting job)."""
        part, gpus = self.part, self.gpus
        if not self.waiting:
            return
        if self.demand <= part.capacity:  # everyone fits: no order to weigh, nothing to stop
            for entry in list(self.waiting):
                self.start(entry)
            return
        # Running jobs that may fall behind a waiting job: bound not below the best waiting key.
        cut = bisect_left(self.bounds, self.waiting[0])
        running = sorted(entry_of(e[-1]) for e in self.bounds[cut:])
        quota = part.free + sum(gpus[e[-1]] for e in running)
        smallest = min(min(self.sizes), min((gpus[e[-1]] for e in running), default=quota))
        if quota < smallest:
            return  # nothing waiting fits, nothing running is in question
        # Their keys now are tighter bounds from now on (keys only fall while running).
        self.bounds[cut:] = running
        self.bounds.sort()
        for e in running:
            self.bound_of[e[-1]] = e
        keep: set[int] = set()
        start: list[Entry] = []
        for entry in merge(running, self.waiting):
            j = entry[-1]
            g = gpus[j]
            if g <= quota:
                quota -= g
                if j in part.running:
                    keep.add(j)
                else:
                    start.append(entry)
                if quota < smallest:
                    break  # no job left, running or waiting, fits what is left
        for entry in running:
            j = entry[-1]
            if j not in keep:
                part.preempt(j)
                self._unbound(j)
                self.add(entry_of(j), new=False)
        for entry in start:
            self.start(entry)


class Srtf(Policy):
    """ORACLE (reads true remaining work, which no real scheduler knows). Preemptive: at every
    arrival and completion, jobs are ranked by remaining work (seconds at their requested GPUs,
    restart overheads not counted; ties: submission order) and taken greedily while their GPUs
    fit the partition's count; running jobs not taken are preempted and pay the cluster's
    restart overhead when resumed. Lucid's ``srtf`` re-evaluates every second; between events
    only running jobs' remaining work shrinks, which never lets a waiting job overtake them, so
    deciding at events gives the same order. (Lucid ranks a preempted job by its remaining work
    plus the restart overhead it will pay; we rank by work alone.)"""

    name = "srtf"
    summary = "ORACLE: shortest remaining true work first, preemptive"
    oracle = True
    preemptive = True
    space = ConfigSpace([PLACEMENT])

    def bind(self, part: Partition, jobs: JobInfo) -> None:
        super().bind(part, jobs)
        self.queue = PriorityQueue(part, jobs.gpus)

    def on_arrival(self, j: int, now: float) -> None:
        self.queue.add((self.part.remaining(j, now), j), new=True)

    def on_finish(self, j: int, now: float) -> None:
        self.queue.finished(j)

    def schedule(self, now: float) -> None:
        remaining = self.part.remaining
        self.queue.decide(lambda j: (remaining(j, now), j))


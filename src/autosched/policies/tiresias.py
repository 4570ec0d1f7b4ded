"""Tiresias: discretised two-dimensional least-attained-service (Gu et al., NSDI '19)."""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from heapq import heappop, heappush

from ..space import ConfigSpace, Float, Int
from .base import PLACEMENT, Policy


class Tiresias(Policy):
    """Jobs sit in priority queues by attained service (GPU-seconds held); a job moves down one
    queue each time its attained service crosses the next threshold. Within a queue, jobs are in
    submission order. At each decision, jobs are taken in priority order while their GPUs fit in
    the partition's GPU count; running jobs that are not taken are preempted (as the Lucid
    simulator does; a chosen job that placement cannot fit stays waiting).

    Defaults are those of the Tiresias simulator (3 queues at 3,250 and 7,200 GPU-s, decisions at
    every event, no starvation handling); Lucid's baseline is queues=2, threshold=18000,
    interval=60, placement=consolidate.
    """

    name = "tiresias"
    summary = "discretised 2D-LAS on attained GPU-seconds (preemptive, non-clairvoyant)"
    preemptive = True
    space = ConfigSpace([
        PLACEMENT,
        Int("queues", "number of priority queues", low=1, high=6, default=3),
        Float("threshold", "attained service at which a job leaves the top queue", low=100.0,
              high=1e6, default=3250.0, log=True, unit="GPU-s"),
        Float("threshold_growth", "ratio between successive queue thresholds", low=1.2, high=100.0,
              default=7200.0 / 3250.0, log=True),
        Float("starvation", "promote a waiting job to the top queue once it has waited this many times "
              "its executed time (0 = off)", low=0.0, high=100.0, default=0.0),
        Float("min_run", "a job that (re)started less than this long ago is not preempted", low=0.0,
              high=7200.0, default=0.0, unit="s"),
        Float("interval", "decide only every this many seconds (0 = at every event; Lucid uses 60)",
              low=0.0, high=3600.0, default=0.0, unit="s"),
    ])

    def configure(self) -> None:
        c = self.config
        self.limits = [c["threshold"] * c["threshold_growth"] ** k for k in range(c["queues"] - 1)]
        self.interval = c["interval"]
        self.min_run = c["min_run"]
        self.starvation = c["starvation"]
        self._next_tick = -math.inf
        if hasattr(self, "queue_of"):  # reconfigured mid-run: re-file jobs under the new queues
            self._refile(self.part.sim.now)

    def bind(self, part, jobs) -> None:
        super().bind(part, jobs)
        self.lists: list[list[int]] = [[] for _ in range(self.config["queues"])]
        self.queue_of: dict[int, int] = {}
        self.base: dict[int, float] = {}  # attained service forgiven by starvation promotions
        self.demand = 0  # GPUs asked for by all active (waiting or running) jobs
        # Timers: (time, kind, job, stamp); a timer is stale once the job's run or wait it was
        # set for (identified by its start time) is over.
        self.timers: list[tuple[float, int, int, float]] = []

    def _refile(self, now: float) -> None:
        part = self.part
        self.lists = [[] for _ in range(self.config["queues"])]
        self.timers = []
        for j in sorted(self.queue_of):
            q = self._queue_for(part.attained(j, now) - self.base[j])
            self.queue_of[j] = q
            self.lists[q].append(j)
            if j in part.running:
                self._set_run_timers(j, now)
            elif self.starvation > 0 and q > 0 and part.executed(j, now) > 0:
                self._watch_starvation(j)

    def _queue_for(self, attained: float) -> int:
        q = 0
        for limit in self.limits:
            if attained < limit - 1e-6:  # tolerance: a timer set for the crossing may land a hair early
                break
            q += 1
        return q

    def on_arrival(self, j: int, now: float) -> None:
        self.queue_of[j] = 0
        self.base[j] = 0.0
        self.lists[0].append(j)  # arrivals come in submission order: the list stays sorted
        self.demand += self.jobs.gpus[j]

    def on_finish(self, j: int, now: float) -> None:
        self._move(j, None)
        del self.base[j]
        self.demand -= self.jobs.gpus[j]

    def _move(self, j: int, q: int | None) -> None:
        old = self.lists[self.queue_of[j]]
        del old[bisect_left(old, j)]
        if q is None:
            del self.queue_of[j]
        else:
            self.queue_of[j] = q
            insort(self.lists[q], j)

    def schedule(self, now: float) -> None:
        part = self.part
        if self.interval > 0:
            if now < self._next_tick:
                return  # a wake for the next tick is already pending
            tick = math.ceil(now / self.interval) * self.interval
            if now < tick:  # decisions happen on multiples of the interval only
                self._next_tick = tick
                part.wake_at(tick)
                return
            self._next_tick = tick + self.interval
        self._fire_timers(now)
        if self.demand <= part.capacity:
            self._start_all(now)  # everyone fits: nothing to preempt, no order to weigh
        else:
            self._decide(now)
        if self.interval > 0:
            if self.queue_of:
                part.wake_at(self._next_tick)
        elif self.timers:
            part.wake_at(self.timers[0][0])

    def _fire_timers(self, now: float) -> None:
        part, timers = self.part, self.timers
        while timers and timers[0][0] <= now:
            _, kind, j, stamp = heappop(timers)
            if kind == _PROMOTE:
                if j in self.queue_of and j not in part.running and part.waiting_since(j) == stamp:
                    self.base[j] = part.attained(j, now)
                    self._move(j, 0)
            elif kind == _DEMOTE and j in part.running and part.run_started(j) == stamp:
                q = self._queue_for(part.attained(j, now) - self.base[j])
                if q != self.queue_of[j]:
                    self._move(j, q)
                self._set_demote_timer(j, now)
            # _PROTECTED: the timer only makes the job preemptible again at the next decision

    def _start(self, j: int, now: float) -> None:
        if self.part.start(j):
            self._set_run_timers(j, now)

    def _set_run_timers(self, j: int, now: float) -> None:
        self._set_demote_timer(j, now)
        if self.min_run > 0:
            stamp = self.part.run_started(j)
            heappush(self.timers, (stamp + self.min_run, _PROTECTED, j, stamp))

    def _set_demote_timer(self, j: int, now: float) -> None:
        q = self.queue_of[j]
        if q < len(self.limits):
            left = self.limits[q] - (self.part.attained(j, now) - self.base[j])
            t = now + max(left, 0.0) / self.jobs.gpus[j]
            heappush(self.timers, (t, _DEMOTE, j, self.part.run_started(j)))

    def _start_all(self, now: float) -> None:
        running = self.part.running
        for queue in self.lists:
            for j in queue:
                if j not in running:
                    self._start(j, now)

    def _decide(self, now: float) -> None:
        part, gpus = self.part, self.jobs.gpus
        running = part.running
        quota = part.capacity
        keep: set[int] = set()
        if self.min_run > 0:
            keep = {j for j in running if now - part.run_started(j) < self.min_run}
            quota -= sum(gpus[j] for j in keep)
        start: list[int] = []
        for queue in self.lists:
            if quota <= 0:
                break
            for j in queue:
                g = gpus[j]
                if g <= quota and j not in keep:
                    quota -= g
                    if j in running:
                        keep.add(j)
                    else:
                        start.append(j)
                    if quota == 0:
                        break
        if len(keep) < len(running):
            for j in [j for j in running if j not in keep]:
                part.preempt(j)
                if self.starvation > 0 and self.queue_of[j] > 0:
                    self._watch_starvation(j)
        for j in start:
            self._start(j, now)

    def _watch_starvation(self, j: int) -> None:
        part = self.part
        since = part.waiting_since(j)
        heappush(self.timers, (since + self.starvation * part.executed(j, since), _PROMOTE, j, since))


_DEMOTE, _PROMOTE, _PROTECTED = 0, 1, 2

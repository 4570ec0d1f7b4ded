"""Tiresias: discretised two-dimensional least-attained-service (Gu et al., NSDI '19)."""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from heapq import heappop, heappush

import numpy as np

from ..space import Categorical, ConfigSpace, Float, Int
from .base import PLACEMENT, Policy

QUEUE_ORDERS = ("submit", "running_first")


class Tiresias(Policy):
    """Jobs sit in priority queues by attained service (GPU-seconds held); a job moves down one
    queue each time its attained service crosses the next threshold. Within a queue, jobs are in
    submission order (``queue_order=submit``, as the Lucid simulator), or running jobs come first
    and then waiting ones, each in submission order (``running_first``: a waiting job never
    displaces a running job of its own queue, as the Tiresias simulator). At each decision, jobs
    are taken in that order while their GPUs fit in the partition's GPU count; running jobs that
    are not taken are preempted (a chosen job that placement cannot fit stays waiting).

    Defaults are those of the Tiresias simulator (3 queues at 3,250 and 7,200 GPU-s, decisions at
    every event, no starvation handling) except ``queue_order``, which defaults to Lucid's
    ``submit``; the Tiresias simulator's dlas-gpu is ``queue_order=running_first
    placement=count`` with no restart overhead. Lucid's baseline is queues=2, threshold=18000,
    interval=60, placement=consolidate. docs/fidelity.md compares both.
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
        Float("starvation", "promote a waiting job to the top queue once its waiting since its last promotion "
              "reaches this many times its executed time since then (Tiresias's solve_starvation; 0 = off)",
              low=0.0, high=100.0, default=0.0),
        Float("min_run", "a job that (re)started less than this long ago is not preempted", low=0.0,
              high=7200.0, default=0.0, unit="s"),
        Float("interval", "decide only every this many seconds (0 = at every event; Lucid uses 60)",
              low=0.0, high=3600.0, default=0.0, unit="s"),
        Categorical("queue_order", "order within a queue: submit = submission order, so an older waiting "
                    "job preempts a younger running one (Lucid); running_first = running jobs keep their "
                    "GPUs against waiting jobs of the same queue (Tiresias)",
                    choices=QUEUE_ORDERS, default="submit"),
    ])

    def configure(self) -> None:
        c = self.config
        self.limits = [c["threshold"] * c["threshold_growth"] ** k for k in range(c["queues"] - 1)]
        self.interval = c["interval"]
        self.min_run = c["min_run"]
        self.starvation = c["starvation"]
        self.running_first = c["queue_order"] == "running_first"
        if hasattr(self, "_arrays"):  # the cached queue orders depend on queue_order
            self._arrays = [None] * len(self._arrays)
        self._next_tick = -math.inf
        if hasattr(self, "queue_of"):  # reconfigured mid-run: re-file jobs under the new queues
            self._refile(self.part.sim.now)

    def bind(self, part, jobs) -> None:
        super().bind(part, jobs)
        self._new_queues(self.config["queues"])
        self.queue_of: dict[int, int] = {}
        self.base: dict[int, float] = {}  # attained service forgiven by starvation promotions
        # Seconds waited since the last promotion in finished waits that followed a run (as
        # Tiresias's last_pending_time; the current wait is counted by the promotion timer).
        self.waited: dict[int, float] = {}
        # Work done at the last promotion. A job is promoted again only after it has done more
        # work: otherwise a job demoted before its restart overhead is paid (threshold / GPUs
        # below the overhead) and promoted back would preempt and be preempted forever.
        self.served_at_promotion: dict[int, float] = {}
        self.demand = 0  # GPUs asked for by all active (waiting or running) jobs
        # Timers: (time, kind, job, stamp); a timer is stale once the job's run or wait it was
        # set for (identified by its start time) is over.
        self.timers: list[tuple[float, int, int, float]] = []
        n = len(jobs.gpus)
        self.gpus = np.asarray(jobs.gpus, dtype=np.int64)
        self.running_flag = np.zeros(n, dtype=bool)
        self.protected: set[int] = set()  # running jobs younger than min_run
        self.protected_flag = np.zeros(n, dtype=bool)

    def _new_queues(self, count: int) -> None:
        # Per queue: all its jobs in submission order, their total GPUs, and who runs or waits.
        # The totals let a decision take a whole queue at once when it fits.
        # (Under running_first the order is running_in + waiting_in; `lists` stays sorted.)
        self.lists: list[list[int]] = [[] for _ in range(count)]
        self.qsum = [0] * count
        self.running_in: list[list[int]] = [[] for _ in range(count)]  # sorted
        self.waiting_in: list[list[int]] = [[] for _ in range(count)]  # sorted
        # Per queue, (jobs, their GPUs, cumulative GPUs) as arrays in queue order; None when the
        # queue changed (under running_first, also when one of its jobs started or stopped).
        self._arrays: list[tuple[np.ndarray, np.ndarray, np.ndarray] | None] = [None] * count

    def _refile(self, now: float) -> None:
        part = self.part
        self._new_queues(self.config["queues"])
        self.timers = []
        for j in list(self.protected):
            self._unprotect(j)
        for j in sorted(self.queue_of):
            q = self._queue_for(part.attained(j, now) - self.base[j])
            self.queue_of[j] = q
            self.lists[q].append(j)
            self._arrays[q] = None
            self.qsum[q] += self.jobs.gpus[j]
            (self.running_in if j in part.running else self.waiting_in)[q].append(j)
            if j in part.running:
                self._set_run_timers(j, now)
            elif self.starvation > 0 and q > 0:
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
        self.served_at_promotion[j] = 0.0
        self.waited[j] = 0.0
        self.lists[0].append(j)  # arrivals come in submission order: the list stays sorted
        self._arrays[0] = None
        self.qsum[0] += self.jobs.gpus[j]
        self.waiting_in[0].append(j)
        self.demand += self.jobs.gpus[j]

    def on_finish(self, j: int, now: float) -> None:
        self._unprotect(j)
        self._move(j, None)
        self.running_flag[j] = False
        del self.base[j]
        del self.served_at_promotion[j]
        del self.waited[j]
        self.demand -= self.jobs.gpus[j]

    def _move(self, j: int, q: int | None) -> None:
        """Move job j to queue q (None: it left the system)."""
        old, g = self.queue_of[j], self.jobs.gpus[j]
        members = self.running_in if self.running_flag[j] else self.waiting_in
        lst = self.lists[old]
        del lst[bisect_left(lst, j)]
        self._arrays[old] = None
        self.qsum[old] -= g
        _remove(members[old], j)
        if q is None:
            del self.queue_of[j]
        else:
            self.queue_of[j] = q
            insort(self.lists[q], j)
            self._arrays[q] = None
            self.qsum[q] += g
            insort(members[q], j)

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
            else:  # no wake is pending: the next arrival must not wait for a tick nobody set
                self._next_tick = -math.inf
        elif self.timers:
            part.wake_at(self.timers[0][0])

    def _fire_timers(self, now: float) -> None:
        part, timers = self.part, self.timers
        while timers and timers[0][0] <= now:
            _, kind, j, stamp = heappop(timers)
            if kind == _PROMOTE:
                if j in self.queue_of and j not in part.running and part.waiting_since(j) == stamp:
                    self.base[j] = part.attained(j, now)
                    self.served_at_promotion[j] = part.served(j, now)
                    self.waited[j] = 0.0
                    self._move(j, 0)
            elif kind == _DEMOTE and j in part.running and part.run_started(j) == stamp:
                q = self._queue_for(part.attained(j, now) - self.base[j])
                if q != self.queue_of[j]:
                    self._move(j, q)
                self._set_demote_timer(j, now)
            elif kind == _PROTECTED and j in self.protected and part.run_started(j) == stamp:
                self._unprotect(j)

    def _unprotect(self, j: int) -> None:
        self.protected.discard(j)
        self.protected_flag[j] = False

    def _start_in_order(self, jobs, now: float) -> None:
        """Start jobs in this order, skipping those placement cannot fit.

        Placement failure is monotone in size within one decision (no GPU is freed between
        starts): once g GPUs found no room, no job of g or more will, so it is not tried.
        """
        gpus = self.jobs.gpus
        smallest_failed = math.inf
        for j in jobs:
            if gpus[j] < smallest_failed and not self._start(j, now):
                smallest_failed = gpus[j]

    def _start(self, j: int, now: float) -> bool:
        part = self.part
        if not part.start(j):
            return False
        if part.attained(j, now) > self.base[j]:  # it ran since its last promotion: this wait counts
            self.waited[j] += now - part.waiting_since(j)
        q = self.queue_of[j]
        _remove(self.waiting_in[q], j)
        insort(self.running_in[q], j)
        self.running_flag[j] = True
        if self.running_first:
            self._arrays[q] = None
        self._set_run_timers(j, now)
        return True

    def _preempt(self, j: int) -> None:
        self.part.preempt(j)
        q = self.queue_of[j]
        _remove(self.running_in[q], j)
        insort(self.waiting_in[q], j)
        self.running_flag[j] = False
        if self.running_first:
            self._arrays[q] = None

    def _set_run_timers(self, j: int, now: float) -> None:
        self._set_demote_timer(j, now)
        if self.min_run > 0:
            stamp = self.part.run_started(j)
            heappush(self.timers, (stamp + self.min_run, _PROTECTED, j, stamp))
            self.protected.add(j)
            self.protected_flag[j] = True

    def _set_demote_timer(self, j: int, now: float) -> None:
        q = self.queue_of[j]
        if q < len(self.limits):
            left = self.limits[q] - (self.part.attained(j, now) - self.base[j])
            t = now + max(left, 0.0) / self.jobs.gpus[j]
            heappush(self.timers, (t, _DEMOTE, j, self.part.run_started(j)))

    def _start_all(self, now: float) -> None:
        running = self.part.running
        self._start_in_order([j for queue in self.lists for j in queue if j not in running], now)

    def _decide(self, now: float) -> None:
        """Take jobs in priority order while their GPUs fit in the partition's GPU count.

        The same result as walking all jobs one by one, without the walk: a queue whose total
        fits is taken whole; in the first queue that does not fit, the longest prefix that fits
        is taken at once (cumulative sum); after it only jobs small enough for the remainder are
        looked at, and the running jobs of lower queues are preempted.
        """
        gpus = self.jobs.gpus
        quota = self.part.capacity
        held = [0] * len(self.lists)  # GPUs of protected (min_run) jobs per queue: always kept
        for j in self.protected:
            held[self.queue_of[j]] += gpus[j]
            quota -= gpus[j]
        start: list[int] = []
        preempt: list[int] = []
        left = None  # GPUs left after the first queue that does not fit whole
        for q in range(len(self.lists)):
            if left is None and self.qsum[q] - held[q] <= quota:
                quota -= self.qsum[q] - held[q]
                start.extend(self.waiting_in[q])
                continue
            whole_prefix = left is None
            s, p, left = self._split(q, quota if whole_prefix else left, whole_prefix, held[q] > 0)
            start.extend(s)
            preempt.extend(p)
        for j in preempt:
            self._preempt(j)
            if self.starvation > 0 and self.queue_of[j] > 0:
                self._watch_starvation(j)
        self._start_in_order(start, now)

    def _queue_arrays(self, q: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        cached = self._arrays[q]
        if cached is None:
            order = self.running_in[q] + self.waiting_in[q] if self.running_first else self.lists[q]
            arr = np.asarray(order, dtype=np.int64)
            g = self.gpus[arr]
            cached = self._arrays[q] = (arr, g, np.cumsum(g))
        return cached

    def _split(self, q: int, quota: int, whole_prefix: bool, has_protected: bool) -> tuple[list[int], list[int], int]:
        """Greedy take-if-it-fits over queue q given `quota` GPUs: (to start, to preempt, GPUs left).

        With `whole_prefix`, the longest prefix that fits is found by binary search on the
        cumulative GPUs. In submission order, "in the prefix" is "job index below the first job
        left out", a bisection in the sorted waiting and running lists; under running_first the
        prefix is the first k running jobs, or all of them and the first waiting ones.
        """
        arr, g, cum = self._queue_arrays(q)
        if has_protected:
            keep = ~self.protected_flag[arr]
            arr, g = arr[keep], g[keep]
            cum = np.cumsum(g)
        k = int(np.searchsorted(cum, quota, side="right")) if whole_prefix else 0
        left = quota - (int(cum[k - 1]) if k else 0)
        bound = int(arr[k]) if k < len(arr) else math.inf
        picks: set[int] = set()
        if left > 0 and k < len(arr):
            for c in np.flatnonzero(g[k:] <= left).tolist():
                gc = int(g[k + c])
                if gc <= left:
                    picks.add(int(arr[k + c]))
                    left -= gc
                    if left == 0:
                        break
        waiting, running = self.waiting_in[q], self.running_in[q]
        if self.running_first:
            if has_protected:  # protected jobs were left out of arr: count only the others
                running = [j for j in running if not self.protected_flag[j]]
            r = len(running)
            start = waiting[:k - r] if k > r else []
            rest = running[k:] if k < r else []
        else:
            start = waiting[:bisect_left(waiting, bound)]
            rest = running[bisect_left(running, bound):]
        start += sorted(j for j in picks if not self.running_flag[j])
        preempt = [j for j in rest if j not in picks and not self.protected_flag[j]]
        return start, preempt, left

    def _watch_starvation(self, j: int) -> None:
        """Promote waiting job j once its waits since its last promotion reach `starvation` times
        the seconds it ran since then (only a job that ran since then is ever promoted)."""
        part = self.part
        since = part.waiting_since(j)
        ran = (part.attained(j, since) - self.base[j]) / self.jobs.gpus[j]
        if ran > 0 and part.served(j, since) > self.served_at_promotion[j]:
            due = since + max(0.0, self.starvation * ran - self.waited[j])
            heappush(self.timers, (due, _PROMOTE, j, since))


_DEMOTE, _PROMOTE, _PROTECTED = 0, 1, 2


def _remove(sorted_list: list[int], j: int) -> None:
    del sorted_list[bisect_left(sorted_list, j)]
